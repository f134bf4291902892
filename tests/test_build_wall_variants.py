"""More ways for a submission's build to read what the build's wall must keep out of sight.

tests/test_build_wall.py builds each of its forms (digraphs, splices, #include_next, #import, #line
then a diagnostic, .incbin through token pasting, #embed, __has_include, #pragma GCC dependency)
aimed at each planted secret (a classmate's file, a report, the cache, a root-only file). These are
the variants a hostile student would try next, built the same way (one build per secret, on the
emulator's g++ and, for some, nvcc), where no marker may be in the build's log, messages or the
bytes it built:

- the plain #include reached through a macro, a stringified token path, angle brackets (absolute,
  relative, #include_next), paths padded with "//" and "/./" or thousands of characters long, the
  root spelled through /proc (/proc/self/root, /proc/thread-self/root, /proc/1/root, the grader's
  own /proc/<pid>/root and /proc/<pid>/cwd), and the grader's own open descriptors of the secrets
  through /proc/<pid>/fd/<n>;
- #line then #warning, #line then an error in a __global__ kernel, #include __FILE__ after #line;
- .incbin in plain `asm volatile` in a host function, in an __attribute__((constructor)), in a
  __global__ kernel's body that g++ builds as host code, in a raw string literal, through two levels
  of token pasting, with an offset and a count, inside an assembler .macro, and of /proc spellings;
- existence tells: _Pragma("GCC dependency ..."), __has_include of a macro path and of <...>, the
  same outcome with the secret there and gone.

A control aims the same reading forms at the build's own submission.cu (readable by design), whose
first line holds a secret's marker: the same detector finds it there, so a pass is a wall that held.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from test_build_wall import (BUILDS_AT_ONCE, CAT, Form, Planted, _blob, _build, _c, _incbin, _leaks_in_files,
                             _leaks_of_builds, _relative, _status, _submit, _tell, attack, needs_nvcc,
                             planted)  # noqa: F401 - planted is a fixture used here

GRADER = os.getpid()          # the grading process: a build is its child


def _padded(path: str) -> str:
    return path.replace("/", "//./")
from usr_secret import root_only_file_in_usr


def _long(path: str) -> str:
    return "/." * 1500 + path


def _include(spelling: str):
    return lambda i, p: spelling.replace("@PATH@", p)


READS: dict[str, Form] = {
    "plain #include through a macro": Form(lambda i, p: f'#define BWV_PATH{i} "{p}"\n#include BWV_PATH{i}\n'),
    "#include of a stringified token path": Form(
        lambda i, p: f"#define BWV_S{i}(x) #x\n#define BWV_XS{i}(x) BWV_S{i}(x)\n#include BWV_XS{i}({p})\n"),
    "#include <absolute>": Form(_include("#include <@PATH@>\n")),
    "#include <../../relative>": Form(lambda i, p: f"#include <{_relative(p)}>\n"),
    "#include_next <absolute>": Form(_include("#include_next <@PATH@>\n")),
    "#include of a path with // and /./": Form(lambda i, p: f'#include "{_padded(p)}"\n'),
    "#include of a path thousands long": Form(lambda i, p: f'#include "{_long(p)}"\n'),
    "#include through /proc/self/root": Form(_include('#include "/proc/self/root@PATH@"\n')),
    "#include through /proc/thread-self/root": Form(_include('#include "/proc/thread-self/root@PATH@"\n')),
    "#include through /proc/1/root": Form(_include('#include "/proc/1/root@PATH@"\n')),
    "#include through the grader's /proc/<pid>/root": Form(_include(f'#include "/proc/{GRADER}/root@PATH@"\n')),
    "#include through the grader's /proc/<pid>/cwd": Form(
        lambda i, p: f'#include "/proc/{GRADER}/cwd/{_relative(p)}"\n'),
    "#line then #warning": Form(_include('#line 1 "@PATH@"\n#warning bw\n')),
    "#line then an error in a __global__ kernel": Form(
        lambda i, p: f'#line 1 "{p}"\n__global__ void bwv_bad{i}(float* o) {{ o[0] = bwv_undeclared{i}; }}\n'),
    "#include __FILE__ after #line": Form(_include('#line 1 "@PATH@"\n#include __FILE__\n')),
    ".incbin in asm volatile in a host function": Form(
        lambda i, p: f"void bwv_host{i}() {{ asm volatile({_incbin(i, p)}); }}\n", leaks=True),
    ".incbin in an __attribute__((constructor))": Form(
        lambda i, p: f"__attribute__((constructor)) static void bwv_ctor{i}() {{\n"
                     f"    __asm__ __volatile__({_incbin(i, p)});\n}}\n",
        leaks=True),
    ".incbin in a __global__ kernel g++ builds as host code": Form(
        lambda i, p: CAT + f"__global__ void bwv_kernel{i}() {{\n#ifndef __CUDA_ARCH__\n"
                           f"    BW_CAT(__as, m__)({_incbin(i, p)});\n#endif\n}}\n", leaks=True),
    ".incbin in a raw string literal": Form(lambda i, p: 'asm(R"bwv(' + _blob(i, '.incbin "' + p + '"') + ')bwv");\n',
                                            leaks=True),
    ".incbin through two levels of token pasting": Form(
        lambda i, p: f"#define BWV_P1{i}(a, b) a##b\n#define BWV_P2{i}(a, b) BWV_P1{i}(a, b)\n"
                     f"BWV_P2{i}(BWV_P2{i}(__, as), m__)({_incbin(i, p)});\n", leaks=True),
    ".incbin with an offset and a count": Form(
        lambda i, p: CAT + "BW_CAT(__as, m__)(" + _c(_blob(i, f'.incbin "{p}", 0, 400')) + ");\n", leaks=True),
    ".incbin inside an assembler .macro": Form(
        lambda i, p: CAT + "BW_CAT(__as, m__)(" + _c(f".macro bwvm{i} file\n" + _blob(i, '.incbin "\\file"')
                                                   + f".endm\nbwvm{i} \"{p}\"\n") + ");\n", leaks=True),
    ".incbin of a path with // and /./": Form(
        lambda i, p: CAT + f"BW_CAT(__as, m__)({_incbin(i, _padded(p))});\n", leaks=True),
    ".incbin through /proc/self/root": Form(
        lambda i, p: CAT + f"BW_CAT(__as, m__)({_incbin(i, '/proc/self/root' + p)});\n", leaks=True),
    ".incbin through the grader's /proc/<pid>/root": Form(
        lambda i, p: CAT + f"BW_CAT(__as, m__)({_incbin(i, f'/proc/{GRADER}/root' + p)});\n", leaks=True),
}

# Forms that nvcc reaches differently (cudafe++'s quoting, its host compile's assembler, the device pass).
ON_NVCC = ("plain #include through a macro", "#include <absolute>", "#include through the grader's /proc/<pid>/root",
           "#line then #warning", "#line then an error in a __global__ kernel",
           ".incbin in asm volatile in a host function", ".incbin in a __global__ kernel g++ builds as host code",
           ".incbin through two levels of token pasting")

TELL = ('#if {test}\n#define BWV_TELL{i} "BW_TELL_PRESENT_{i}"\n#else\n#define BWV_TELL{i} "BW_TELL_ABSENT_{i}"\n'
        '#endif\nextern "C" __attribute__((used)) const char bw_tell{i}[] = BWV_TELL{i};\n')
TELLS: dict[str, Form] = {
    "_Pragma GCC dependency": Form(lambda i, p: f'_Pragma("GCC dependency \\"{p}\\"")\n'),
    "__has_include of a macro path": Form(
        lambda i, p: f'#define BWV_HP{i} "{p}"\n' + TELL.format(test=f"__has_include(BWV_HP{i})", i=i)),
    "__has_include(<absolute>)": Form(lambda i, p: TELL.format(test=f"__has_include(<{p}>)", i=i)),
    "__has_include through /proc/1/root": Form(lambda i, p: TELL.format(test=f'__has_include("/proc/1/root{p}")', i=i)),
}


def _cases(forms, on_nvcc) -> list:
    return ([pytest.param(f, "emulator", id=f"{f}-emulator") for f in sorted(forms)] +
            [pytest.param(f, "cuda", marks=needs_nvcc, id=f"{f}-cuda") for f in sorted(forms) if f in on_nvcc])


def _build_each(form: Form, targets: dict[str, str], rubric, backend: str, folder: Path, nonce: str = ""):
    """form aimed at each target path (name: path), one build each, BUILDS_AT_ONCE at a time."""
    folder.mkdir(parents=True, exist_ok=True)

    def one(item):
        name, path = item
        return _build(folder / f"attack_{name}{nonce}.cu", attack([(form, path)], nonce), rubric, backend)

    with ThreadPoolExecutor(max_workers=BUILDS_AT_ONCE) as pool:
        return dict(zip(targets, pool.map(one, targets.items())))


def _aimed(planted: Planted) -> dict[str, str]:
    return {name: str(s.path) for name, s in planted.secrets.items()}


@pytest.mark.parametrize(("form", "backend"), _cases(READS, ON_NVCC))
def test_no_variant_build_quotes_or_copies_a_secret(form, backend, planted, rubric, tmp_path):
    builds = _build_each(READS[form], _aimed(planted), rubric, backend, tmp_path)
    leaks = _leaks_of_builds(builds, planted)
    assert leaks == [], f"{form} ({backend}): the build read a secret:\n" + "\n".join(leaks)


@pytest.mark.parametrize("via", ["root", "fd"])
def test_the_graders_own_descriptors_of_the_secrets_read_nothing(via, planted, rubric, tmp_path):
    """This process (the grader, the build's parent) holds each secret open; a build aims #include
    and .incbin at /proc/<grader>/fd/<n> (the descriptor) or at /proc/<grader>/root/proc/<grader>/fd/<n>."""
    held = {name: os.open(s.path, os.O_RDONLY) for name, s in planted.secrets.items() if name != "root-only"}
    try:
        def target(fd: int) -> str:
            at = f"/proc/{GRADER}/fd/{fd}"
            return at if via == "fd" else f"/proc/{GRADER}/root{at}"

        targets = {name: target(fd) for name, fd in held.items()}
        forms = [READS["plain #include through a macro"], READS[".incbin in asm volatile in a host function"]]
        leaks = []
        for n, form in enumerate(forms):
            leaks += _leaks_of_builds(_build_each(form, targets, rubric, "emulator", tmp_path / str(n)), planted)
    finally:
        for fd in held.values():
            os.close(fd)
    assert leaks == [], "\n".join(leaks)


@pytest.mark.parametrize("form", sorted(TELLS))
def test_a_variant_build_tells_nothing_of_whether_a_secret_is_there(form, planted, rubric, tmp_path):
    there = _build_each(TELLS[form], _aimed(planted), rubric, "emulator", tmp_path, nonce="there")
    assert _leaks_of_builds(there, planted) == []
    for secret in planted.secrets.values():
        secret.path.rename(secret.path.with_name(secret.path.name + ".gone"))
    try:
        gone = _build_each(TELLS[form], _aimed(planted), rubric, "emulator", tmp_path, nonce="gone")
    finally:
        for secret in planted.secrets.values():
            secret.path.with_name(secret.path.name + ".gone").rename(secret.path)
    differ = {name: f"there: {_tell(there[name])}, gone: {_tell(gone[name])}" for name in planted.secrets
              if _tell(there[name]) != _tell(gone[name])}
    assert differ == {}, f"{form} tells whether a file exists (built?, answer): {differ}"


# The control: forms aimed at the build's own copy of the source, which the build reads by design.
CONTROL_FORMS = ("#line then an error in a __global__ kernel", ".incbin in asm volatile in a host function",
                 ".incbin through two levels of token pasting", ".incbin inside an assembler .macro",
                 ".incbin in a raw string literal", ".incbin with an offset and a count")


def test_control_the_same_forms_aimed_at_the_builds_own_source_are_found(planted, rubric, tmp_path):
    """Each control form aimed at submission.cu (the build's own copy of the source, in its room), the
    source's first line the classmate's marker: the detector finds that marker in what each build
    gave, so the empty results above are a wall that held, not forms that could read nothing."""
    marker = planted.secrets["classmate"].marker
    found = {}
    for n, name in enumerate(CONTROL_FORMS):
        build = _build(tmp_path / f"control{n}.cu", attack([(READS[name], "submission.cu")], nonce=marker + f" {n}"),
                       rubric, "emulator")
        found[name] = [leak.split(" secret is in the build's ")[1].split(" ")[0]
                       for leak in _leaks_of_builds({"own source": build}, planted)]
    missed = [name for name, where in found.items() if not any(w in ("library", "object", "log", "messages")
                                                                 for w in where)]
    assert missed == [], f"these forms read nothing even of the build's own source: {missed} ({found})"


# End to end: the command line (the screen, nvcc, then g++, the run, the reports), each file aimed at
# every secret at once with several of the new forms.
# Forms the screen lets through (plain asm, a path in an #include and a computed #include it refuses by
# pattern, which is not the wall under test).
SUBMITTED = {
    "mallory-paste": [".incbin through two levels of token pasting", ".incbin inside an assembler .macro",
                      ".incbin with an offset and a count"],
    "mallory-proc": [".incbin through /proc/self/root", ".incbin through the grader's /proc/<pid>/root",
                     ".incbin of a path with // and /./"],
    "mallory-kernel": [".incbin in a __global__ kernel g++ builds as host code",
                       "#line then an error in a __global__ kernel"],
}


@pytest.mark.parametrize("student", sorted(SUBMITTED))
def test_grader_submit_of_the_variants_shows_a_student_no_secret(student, planted):
    forms = [(READS[f], str(s.path)) for f in SUBMITTED[student] for s in planted.secrets.values()]
    proc, report = _submit(attack(forms), planted, student)
    leaks = _leaks_in_files(report, planted)
    leaks += [f"the command's {stream} holds the {name} secret" for stream, text in
              (("stdout", proc.stdout), ("stderr", proc.stderr)) for name in planted.found_in(text)]
    assert leaks == [], f"{student}, graded {_status(report)}:\n" + "\n".join(leaks)
    # the wall was what stopped it: the screen let it through to the compilers
    assert _status(report).startswith(("compile_error", "graded")), _status(report)


def test_every_variant_is_aimed_where_its_name_says(planted):
    for name, form in {**READS, **TELLS}.items():
        for secret in planted.secrets.values():
            text = attack([(form, str(secret.path))])
            p = str(secret.path)
            assert any(s in text for s in (p, _relative(p), _padded(p), _long(p))) or \
                all(part in text for part in p.strip("/").split("/")), name
            assert secret.marker not in text, name


# ---------------------------------------------------------------------------------------------------
# A root-only file inside what the build's view shows (/usr): only its mode keeps it closed
# ---------------------------------------------------------------------------------------------------

@pytest.fixture
def in_usr(planted):
    """A file holding the root-only secret's marker in a fresh folder under /usr/local/share, which a
    build's own root binds (all of /usr is the toolchain's): the planted root-only file lies outside
    the view, so this is the one that shows the build runs as nobody. Yields a function setting the
    file's mode; needs root (to write under /usr)."""
    marker = planted.secrets["root-only"].marker
    yield from root_only_file_in_usr(f"grader-build-wall-{marker[-12:]}", f"{marker} = root's alone\n")


IN_USR_FORMS = ("plain #include through a macro", ".incbin in asm volatile in a host function",
                "#line then an error in a __global__ kernel", ".incbin through two levels of token pasting")


def test_a_root_only_file_the_build_can_see_is_not_read(planted, rubric, tmp_path, in_usr):
    """Each form aimed at the root-only file under /usr: no byte of it in any build (the compilers run
    as nobody). The control: the same file made world-readable is read by the same forms (the
    detector finds it), so what keeps it out is its owner and mode, i.e. the drop to nobody."""
    closed, opened = {}, {}
    path = in_usr(0o600)
    for n, name in enumerate(IN_USR_FORMS):
        closed[name] = _build_each(READS[name], {"root-only": path}, rubric, "emulator",
                                   tmp_path / f"c{n}")["root-only"]
    in_usr(0o644)
    for n, name in enumerate(IN_USR_FORMS):
        opened[name] = _build_each(READS[name], {"root-only": path}, rubric, "emulator", tmp_path / f"o{n}",
                                   nonce="open")["root-only"]
    leaks = _leaks_of_builds({f"{k} (0600)": v for k, v in closed.items()}, planted)
    assert leaks == [], "\n".join(leaks)
    seen = [name for name, build in opened.items() if _leaks_of_builds({name: build}, planted)]
    assert len(seen) >= 3, f"the world-readable control was read by only {seen}"
