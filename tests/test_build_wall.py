"""The build's wall (issue 65): nothing a compiler, assembler or linker reads reaches a student.

The run-time wall (tests/test_read_wall.py) stops a submission's code from reading the class; these
tests stop its *build* from doing it. The compilers (nvcc with its gcc -E, cudafe++, cicc and ptxas;
g++ and cc1plus; the assembler; the linker) run the student's text as instructions: a preprocessor
directive reads a file, a diagnostic quotes its lines, an assembler directive copies its bytes into
the library, whose launcher then prints them at run time.

Secrets are planted where issue 65 says they lie (each holding a marker of its own, a C identifier
so that it survives every tokenizer that quotes it):

- classmate: a classmate's kernel.cu in a world-readable class folder (class/alice/kernel.cu);
- report: a report folder's result.json (reports/alice/result.json);
- cache: a file in the grader's cache (GRADER_CACHE_DIR/planted-*/other.txt);
- root-only: a file of mode 0600 owned by root, in a folder of nothing else.

Each attack FORM (READS, TELLS, EMBEDS below) is built aimed at each secret:

- at the build's level (build_submission: every form with g++ against the shim, the emulator's
  build; the forms of ON_NVCC with nvcc too, which builds for the GPU without one), where no marker
  may be in the BuildResult's log, messages, alone log and messages, nor in the built library's or
  object's bytes (one build per secret: a wall that stops the first read with a fatal error must not
  hide a second read it let through);
- end to end, with `grader submit FILE --backend emulator` (the real command line, screen included,
  nvcc then g++), where no marker may be in any file of the attacker's report folder (report.md,
  report.html, result.json, the Gradescope document) nor in the command's stdout and stderr;
- in a batch (`grader batch class/ --report-dir out`), where no marker may be in any file under
  out/ (summary.csv, gradebook.csv, junit.xml, results.jsonl, class.html, ...), the classmate's own
  marker allowed only in the classmate's own report folder.

A test that shows an existence tell (__has_include, #pragma GCC dependency) builds the same attack
with the secret there and with it gone, and requires the same outcome.

Fairness: correct kernels that include thrust, CUB, <iostream>, <cmath>, <vector>, <algorithm>,
<cstdio>, <cuda_fp16.h> and <cooperative_groups.h> still build (nvcc; g++ against the shim where it
supports them) and grade correct: the wall must not refuse the toolchain's own headers.
"""

from __future__ import annotations

import json
import os
import re
import secrets as random_bits
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import SUBMISSIONS, run_grader
from test_wall import KERNEL            # the correct kernel every attack carries
from grader.core.backend import named
from grader.core.locations import cache_root
from grader.core.source import Submission, read_submission
from grader.toolchain.build import build_submission
from grader.toolchain.outcome import BuildResult

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CI installs it)")
BACKENDS = ["emulator", pytest.param("cuda", marks=needs_nvcc)]
SECRET_NAMES = ("classmate", "report", "cache", "root-only")
BUILDS_AT_ONCE = 2          # the builds of one test (one per secret), two at a time: 2 cores in CI


# ---------------------------------------------------------------------------------------------------
# The secrets
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Secret:
    name: str
    path: Path
    marker: str


@dataclass(frozen=True)
class Planted:
    root: Path                   # a world-readable folder: class/, reports/, vault/
    secrets: dict[str, Secret]

    @property
    def class_dir(self) -> Path:
        return self.root / "class"

    def found_in(self, data: bytes | str, *, but: tuple[str, ...] = ()) -> list[str]:
        """The names of the secrets whose marker is in data (but: names not to look for)."""
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")
        return [s.name for s in self.secrets.values() if s.name not in but and s.marker.encode() in raw]


def _classmate_kernel(marker: str) -> str:
    """Alice's correct kernel: her marker in a comment, in a string and at the end of each code line,
    as a student's own notes would be (a diagnostic that quotes any line of it shows the marker)."""
    return (f"// {marker}: alice's kernel for the bias + GELU exercise\n"
            f"static const char* const kAuthor = \"{marker}\";\n"
            "__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias, "
            f"float* __restrict__ out, size_t cols) {{  // {marker}\n"
            f"    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;  // {marker}\n"
            f"    if (col < cols) {{  // {marker}\n"
            f"        const size_t i = blockIdx.y * cols + col;  // {marker}\n"
            f"        const float v = x[i] + bias[col];  // {marker}\n"
            f"        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));  // {marker}\n"
            f"    }}  // {marker}\n"
            f"}}  // {marker}\n")


@pytest.fixture
def planted() -> Planted:
    """The four secrets, each with a marker of its own. The class and report folders lie in a
    world-readable folder of their own (pytest's base folder is root's alone, 0700, which would hide
    them from any other user for a reason that has nothing to do with the wall), as course folders
    are kept; the root-only file is 0600 and root's; the cache's file lies in this run's cache."""
    root = Path(tempfile.mkdtemp(prefix="grader-build-wall-"))
    token = random_bits.token_hex(6)
    marks = {name: f"BWALL_{name.replace('-', '')}_{token}" for name in SECRET_NAMES}
    alice = root / "class" / "alice" / "kernel.cu"
    alice.parent.mkdir(parents=True)
    alice.write_text(_classmate_kernel(marks["classmate"]))
    report = root / "reports" / "alice" / "result.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"exercise": "bias_gelu_fused", "status": "graded", "correct": True,
                                  "note": marks["report"]}) + "\n")
    cache = cache_root() / f"planted-{token}" / "other.txt"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(f"{marks['cache']} = another student's build, kept in the grader's cache;\n")
    vault = root / "vault" / "root-only.txt"
    vault.parent.mkdir()
    vault.write_text(f"root:$6${marks['root-only']}$Xq0v8hTQ1xY:19000:0:99999:7:::\n")
    for p in [root, *root.rglob("*"), cache.parent, cache]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    vault.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(vault, 0, 0)
    paths = {"classmate": alice, "report": report, "cache": cache, "root-only": vault}
    yield Planted(root, {n: Secret(n, paths[n], marks[n]) for n in SECRET_NAMES})
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(cache.parent, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------
# The attacks
# ---------------------------------------------------------------------------------------------------

CAT = "#define BW_CAT(a, b) a##b\n"


def _c(text: str) -> str:
    """text as one C string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _blob(i: int, directive: str) -> str:
    """Assembler text that puts what directive reads into the library, under the symbol bw_leak<i>."""
    return (f".pushsection .rodata\n.globl bw_leak{i}\n.type bw_leak{i}, @object\nbw_leak{i}:\n{directive}\n"
            ".byte 0\n.popsection\n")


def _incbin(i: int, path: str) -> str:
    return _c(_blob(i, f'.incbin "{path}"'))


def _relative(path: str) -> str:
    """path relative to wherever the build runs (its folder, the including file's): up to / by more
    "../" than any folder is deep (the root's ".." is itself), then down."""
    return "../" * 32 + path.lstrip("/")


@dataclass(frozen=True)
class Form:
    """One way to make the build read a file: payload(i, path) is file-scope text aimed at path (i
    tells the payloads of one file apart); leaks: it defines bw_leak<i>, which the launcher prints."""

    payload: Callable[[int, str], str]
    leaks: bool = False


# The preprocessor's spellings of "read this file here", each quoted back by the diagnostics of what
# the file holds (none of the secrets is C++): the screen's #include pattern matches none of them.
def _directive(spelling: str) -> Callable[[int, str], str]:
    return lambda i, p: spelling.replace("@PATH@", p)


READS: dict[str, Form] = {
    # the plain spelling, which the screen refuses: the wall must hold without the screen
    "#include, plain": Form(_directive('#include "@PATH@"\n')),
    "digraph %:include": Form(_directive('%:include "@PATH@"\n')),
    "digraph %:include in a struct": Form(lambda i, p: f'struct BwPeek{i} {{\n%:include "{p}"\n}};\n'),
    "digraph %:include in a namespace": Form(lambda i, p: f'namespace bw_peek{i} {{\n%:include "{p}"\n}}\n'),
    "digraph %:include through a macro": Form(lambda i, p: f'#define BW_PATH{i} "{p}"\n%:include BW_PATH{i}\n'),
    "digraph %:include of a relative path": Form(lambda i, p: f'%:include "{_relative(p)}"\n'),
    "trigraph ??=include": Form(_directive('??=include "@PATH@"\n')),
    "line splice #\\ include": Form(_directive('#\\\ninclude "@PATH@"\n')),
    "line splice # \\ include, spaced": Form(_directive('# \\\n include "@PATH@"\n')),
    "line splice inside the word include": Form(_directive('#inc\\\nlude "@PATH@"\n')),
    "form feed before #include": Form(_directive('\f#include "@PATH@"\n')),
    "vertical tab between # and include": Form(_directive('#\vinclude "@PATH@"\n')),
    "#include_next": Form(_directive('#include_next "@PATH@"\n')),
    "#import": Form(_directive('#import "@PATH@"\n')),
    "#include_next in a struct": Form(lambda i, p: f'struct BwNext{i} {{\n#include_next "{p}"\n}};\n'),
    # #line names the file a diagnostic quotes: the compiler opens it and prints the line.
    "#line then #error": Form(_directive('#line 1 "@PATH@"\n#error bw\n')),
    "linemarker # 1 then #error": Form(_directive('# 1 "@PATH@"\n#error bw\n')),
    "#line then #pragma GCC error": Form(_directive('#line 1 "@PATH@"\n#pragma GCC error "bw"\n')),
    "#line then _Pragma GCC error": Form(_directive('#line 1 "@PATH@"\n_Pragma("GCC error \\"bw\\"")\n')),
    "#line then an undeclared name": Form(lambda i, p: f'#line 1 "{p}"\nint bw_nope{i} = bw_undeclared{i};\n'),
    "%:include __FILE__ after #line": Form(_directive('#line 1 "@PATH@"\n%:include __FILE__\n')),
    "#line then static_assert on __FILE__": Form(lambda i, p: f'#line 1 "{p}"\n'
                                                 'static_assert(sizeof(__FILE__) == 0, "bw");\n'),
    # The assembler reads what a file-scope asm names; the screen's asm patterns miss a pasted name.
    ".incbin through __asm__ pasted": Form(lambda i, p: CAT + f"BW_CAT(__as, m__)({_incbin(i, p)});\n", leaks=True),
    ".incbin through asm pasted": Form(lambda i, p: CAT + f"BW_CAT(a, sm)({_incbin(i, p)});\n", leaks=True),
    ".incbin through __asm pasted": Form(lambda i, p: CAT + f"BW_CAT(__as, m)({_incbin(i, p)});\n", leaks=True),
    ".incbin through asm named by a macro": Form(lambda i, p: CAT + f"#define BW_ASM{i} BW_CAT(__as, m__)\n"
                                                 f"BW_ASM{i}({_incbin(i, p)});\n", leaks=True),
    ".incbin built by string-literal concatenation": Form(
        lambda i, p: CAT + "BW_CAT(__as, m__)(" + _c(f".pushsection .rodata\n.globl bw_leak{i}\nbw_leak{i}:\n")
        + ' ".inc" "bin \\"" ' + _c(p[: len(p) // 2]) + " " + _c(p[len(p) // 2:]) + ' "\\"\\n" '
        + _c(".byte 0\n.popsection\n") + ");\n", leaks=True),
    ".incbin in a host function's asm": Form(lambda i, p: CAT + f"void bw_host{i}() {{ BW_CAT(__as, m__)"
                                             f"({_incbin(i, p)}); }}\n", leaks=True),
    ".incbin of a relative path": Form(
        lambda i, p: CAT + f"BW_CAT(__as, m__)({_incbin(i, _relative(p))});\n", leaks=True),
    ".incbin in a __device__ function that g++ builds as host code": Form(
        # the screen allows asm in device code; nvcc keeps a __device__ body out of its host code, g++ does not
        lambda i, p: CAT + f"__device__ void bw_dev{i}() {{\n#ifndef __CUDA_ARCH__\n"
                           f"    BW_CAT(__as, m__)({_incbin(i, p)});\n#endif\n}}\n", leaks=True),
    ".include assembler directive": Form(lambda i, p: CAT + "BW_CAT(__as, m__)(" + _c(f'.include "{p}"') + ");\n"),
}

# An existence tell: what the build makes of the file being there, which must not differ from what
# it makes of the file being gone.
TELL_PAYLOAD = ('#if {test}\n#define BW_TELL{i} "BW_TELL_PRESENT_{i}"\n#else\n#define BW_TELL{i} "BW_TELL_ABSENT_{i}"\n'
                '#endif\nextern "C" __attribute__((used)) const char bw_tell{i}[] = BW_TELL{i};\n')
TELLS: dict[str, Form] = {
    "__has_include": Form(lambda i, p: TELL_PAYLOAD.format(test=f'__has_include("{p}")', i=i)),
    "__has_include_next": Form(lambda i, p: TELL_PAYLOAD.format(test=f'__has_include_next("{p}")', i=i)),
    "__has_include through a digraph %:if": Form(
        lambda i, p: TELL_PAYLOAD.format(test=f'__has_include("{p}")', i=i).replace("#if ", "%:if ", 1)),
    "#pragma GCC dependency": Form(lambda i, p: f'#pragma GCC dependency "{p}"\n'),
}

EMBEDS: dict[str, Form] = {
    "#embed": Form(lambda i, p: f'extern "C" __attribute__((used)) const unsigned char bw_leak{i}[] = {{\n'
                                f'#embed "{p}"\n, 0}};\n', leaks=True),
    "digraph %:embed": Form(lambda i, p: f'extern "C" __attribute__((used)) const unsigned char bw_leak{i}[] = {{\n'
                                         f'%:embed "{p}"\n, 0}};\n', leaks=True),
}
ALL_FORMS = {**READS, **TELLS, **EMBEDS}


def attack(forms: list[tuple[Form, str]], nonce: str = "") -> str:
    """A whole submission: each (form, path)'s payload, a correct kernel, and a launcher that prints,
    once, every bw_leak<i> and bw_tell<i> the payloads define (what a report then shows)."""
    payloads = "".join(form.payload(i, path) for i, (form, path) in enumerate(forms))
    shown = [f"bw_leak{i}" for i, (form, _) in enumerate(forms) if form.leaks]
    shown += [f"bw_tell{i}" for i, (form, _) in enumerate(forms) if "bw_tell" in form.payload(i, "/x")]
    declared = "".join(f'extern "C" const char {name}[];\n' for name in shown)
    printed = "".join(f'printf("{name}=[%s]\\n", (const char*){name}); ' for name in shown)
    return (f"// {nonce}\n#include <cstdio>\n" + payloads + KERNEL + declared +
            "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,\n"
            "                         cudaStream_t stream) {\n"
            f"    static bool once = false;\n    if (!once) {{ once = true; {printed}fflush(stdout); }}\n"
            "    biasGeluFused<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, bias, out, cols);\n}\n")


# ---------------------------------------------------------------------------------------------------
# Building and looking for the markers
# ---------------------------------------------------------------------------------------------------

def _build(path: Path, text: str, rubric, backend: str) -> BuildResult:
    path.write_text(text)
    sub = read_submission(path, rubric.kernel.launcher_name)
    assert isinstance(sub, Submission), sub                  # the attack is read as a submission, not refused
    return build_submission(sub, rubric, backend=named(backend), arch="sm_90")


def _everything_a_build_gave(build: BuildResult) -> dict[str, bytes]:
    """Every place a build's output goes on to a student: its log and messages (quoted into the
    report), the alone build's, and the bytes of what it built (loaded and run)."""
    said = {"log": build.log, "alone_log": build.alone_log,
            "messages": "\n".join(f"{m.file}:{m.line}: {m.text}" for m in build.messages),
            "alone_messages": "\n".join(f"{m.file}:{m.line}: {m.text}" for m in build.alone_messages)}
    found = {k: v.encode() for k, v in said.items()}
    for name, built in (("library", build.library), ("object", build.object)):
        if built is not None and Path(built).exists():
            found[name] = Path(built).read_bytes()
    return found


def _build_each_secret(form: Form, planted: Planted, rubric, backend: str, folder: Path,
                       nonce: str = "") -> dict[str, BuildResult]:
    """The form aimed at each secret, one build each (BUILDS_AT_ONCE at a time)."""
    folder.mkdir(parents=True, exist_ok=True)

    def one(secret: Secret) -> BuildResult:
        return _build(folder / f"attack_{secret.name}{nonce}.cu", attack([(form, str(secret.path))], nonce), rubric,
                      backend)

    with ThreadPoolExecutor(max_workers=BUILDS_AT_ONCE) as pool:
        results = list(pool.map(one, planted.secrets.values()))
    return dict(zip(planted.secrets, results))


def _leaks_of_builds(builds: dict[str, BuildResult], planted: Planted) -> list[str]:
    leaks = []
    for aimed_at, build in builds.items():
        for where, data in _everything_a_build_gave(build).items():
            for name in planted.found_in(data):
                text = data.decode("utf-8", "replace")
                at = text.find(planted.secrets[name].marker)
                leaks.append(f"aimed at the {aimed_at} file: the {name} secret is in the build's {where} "
                             f"(ok={build.ok}): ...{text[max(0, at - 160):at + 80]!r}...")
    return leaks


# ---------------------------------------------------------------------------------------------------
# Build level: every form, aimed at each secret, on each backend
# ---------------------------------------------------------------------------------------------------

# nvcc preprocesses with the same gcc -E and assembles its host code with the same as: every form
# is built for the emulator (g++), and on nvcc those that reach a different reader (cudafe++'s
# quoting, the host compile's assembler, the device pass's #ifdef) or are the issue's own.
ON_NVCC = ("digraph %:include", "digraph %:include in a struct", "digraph %:include of a relative path",
           "line splice #\\ include", "#include_next", "#import", "#line then #error",
           "linemarker # 1 then #error", "#line then an undeclared name", ".incbin through __asm__ pasted",
           ".incbin built by string-literal concatenation", ".incbin of a relative path",
           ".incbin in a __device__ function that g++ builds as host code", ".include assembler directive")


def _cases(forms, on_nvcc) -> list:
    return ([pytest.param(f, "emulator", id=f"{f}-emulator") for f in sorted(forms)] +
            [pytest.param(f, "cuda", marks=needs_nvcc, id=f"{f}-cuda") for f in sorted(forms) if f in on_nvcc])


@pytest.mark.parametrize(("form", "backend"), _cases(READS, ON_NVCC))
def test_no_build_quotes_or_copies_a_secret(form, backend, planted, rubric, tmp_path):
    """The form aimed at each secret: none of its bytes in what the build says or what it builds."""
    builds = _build_each_secret(READS[form], planted, rubric, backend, tmp_path)
    leaks = _leaks_of_builds(builds, planted)
    assert leaks == [], f"{form} ({backend}): the build read a secret:\n" + "\n".join(leaks)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", sorted(EMBEDS))
def test_embed_copies_no_secret_into_a_build(form, backend, planted, rubric, tmp_path):
    builds = _build_each_secret(EMBEDS[form], planted, rubric, backend, tmp_path)
    leaks = _leaks_of_builds(builds, planted)
    assert leaks == [], f"{form} ({backend}): the build read a secret:\n" + "\n".join(leaks)
    unknown = [b for b in builds.values() if not b.ok and "invalid preprocessing directive" in b.log
               and "embed" in b.log]
    if len(unknown) == len(builds):
        said = next(line for line in unknown[0].log.splitlines() if "invalid preprocessing directive" in line)
        pytest.skip(f"this compiler has no #embed ({backend}): it says {said.strip()!r}")


def _tell(build: BuildResult) -> tuple:
    """What a tell form lets the attacker see: whether it built, and which answer it built in."""
    library = Path(build.library).read_bytes() if build.ok and build.library else b""
    return (build.ok, sorted(set(re.findall(rb"BW_TELL_(PRESENT|ABSENT)_\d+", library))))


@pytest.mark.parametrize(("form", "backend"), _cases(TELLS, ("__has_include", "#pragma GCC dependency")))
def test_a_build_tells_nothing_of_whether_a_secret_is_there(form, backend, planted, rubric, tmp_path):
    """The same attack, built with each secret there and with it gone: the outcome the student sees
    (built or not, the answer built in) must be the same, or the build tells who has handed in."""
    there = _build_each_secret(TELLS[form], planted, rubric, backend, tmp_path, nonce="there")
    assert _leaks_of_builds(there, planted) == []
    for secret in planted.secrets.values():
        secret.path.rename(secret.path.with_name(secret.path.name + ".gone"))
    try:
        gone = _build_each_secret(TELLS[form], planted, rubric, backend, tmp_path, nonce="gone")
    finally:
        for secret in planted.secrets.values():
            secret.path.with_name(secret.path.name + ".gone").rename(secret.path)
    tells = {name: (_tell(there[name]), _tell(gone[name])) for name in planted.secrets}
    differ = {name: f"there: {a}, gone: {b}" for name, (a, b) in tells.items() if a != b}
    assert differ == {}, f"{form} ({backend}) tells whether a file exists (built?, answer): {differ}"


def test_every_form_is_aimed_where_its_name_says(planted):
    """The harness itself: each form's payload names the secret's path (or its path from the build's
    folder), so a passing test is a wall that held, not an attack that aimed nowhere."""
    for name, form in ALL_FORMS.items():
        for secret in planted.secrets.values():
            text = attack([(form, str(secret.path))])
            p = str(secret.path)
            whole = p in text or _relative(p) in text
            halves = p[: len(p) // 2] in text and p[len(p) // 2:] in text
            assert whole or halves, name
            assert secret.marker not in text, name


# ---------------------------------------------------------------------------------------------------
# End to end: `grader submit` and `grader batch`, the screen and both compilers
# ---------------------------------------------------------------------------------------------------

def _files_under(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leaks_in_files(folder: Path, planted: Planted, *, allowed: Callable[[Path], tuple[str, ...]] = lambda p: ()):
    leaks = []
    for p, data in _files_under(folder).items():
        for name in planted.found_in(data, but=allowed(p)):
            at = data.find(planted.secrets[name].marker.encode())
            leaks.append(f"{p.relative_to(folder)} holds the {name} secret: "
                         f"...{data[max(0, at - 120):at + 60].decode('utf-8', 'replace')!r}...")
    return leaks


def _submit(source: str, planted: Planted, name: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Hand in source as mallory's file in the class folder and grade it with the command line, the
    report and a Gradescope document into mallory's report folder."""
    path = planted.class_dir / name / "kernel.cu"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    report = planted.root / "mallory-report" / name
    proc = run_grader("submit", str(path), "--backend", "emulator", "--report-dir", str(report),
                      "--format", "gradescope", "--output", str(report / "gradescope.json"))
    # a grade, whatever it is (0 correct, 1 incorrect, 3 not gradable): never a usage error or the machine
    assert proc.returncode in (0, 1, 3), (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert (report / "result.json").is_file(), proc.stdout[-2000:]
    return proc, report


def _status(report: Path) -> str:
    result = json.loads((report / "result.json").read_text())
    return f"{result['status']} correct={result['correct']}: {(result.get('message') or '')[:300]!r}"


# Forms graded end to end, each file aimed at all four secrets at once.
SUBMITTED = [".incbin through __asm__ pasted", ".incbin in a __device__ function that g++ builds as host code",
             "digraph %:include in a struct", "line splice #\\ include", "#include_next", "#import",
             "#line then #error", ".include assembler directive"]


@pytest.mark.parametrize("form", SUBMITTED)
def test_grader_submit_shows_a_student_no_secret(form, planted, tmp_path):
    source = attack([(READS[form], str(s.path)) for s in planted.secrets.values()])
    proc, report = _submit(source, planted, "mallory")
    leaks = _leaks_in_files(report, planted)
    leaks += [f"the command's {stream} holds the {name} secret" for stream, text in
              (("stdout", proc.stdout), ("stderr", proc.stderr)) for name in planted.found_in(text)]
    assert leaks == [], f"{form}, graded {_status(report)}:\n" + "\n".join(leaks)


def test_grader_submit_tells_nothing_of_whether_a_classmate_handed_in(planted):
    """__has_include on every secret, graded with them there and with them gone: the same grade,
    the same answers printed."""
    def seen(nonce: str) -> tuple:
        source = attack([(TELLS["__has_include"], str(s.path)) for s in planted.secrets.values()], nonce)
        proc, report = _submit(source, planted, f"mallory-{nonce}")
        result = json.loads((report / "result.json").read_text())
        said = result["output"]["stdout"] + proc.stdout
        return result["status"], result["correct"], sorted(set(re.findall(r"bw_tell\d=\[[A-Z_0-9]*\]", said)))

    there = seen("there")
    for secret in planted.secrets.values():
        secret.path.rename(secret.path.with_name(secret.path.name + ".gone"))
    try:
        gone = seen("gone")
    finally:
        for secret in planted.secrets.values():
            secret.path.with_name(secret.path.name + ".gone").rename(secret.path)
    assert there == gone, f"__has_include tells a student which files exist: there {there}, gone {gone}"


def _rows(out: Path) -> dict[str, dict]:
    """results.jsonl: each student's result.json, by student."""
    return {row["student"]: row["result"] for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


# In the batch, each attacker aims at every secret: alice (the classmate) is graded in the same batch.
BATCHED = {"mallory-incbin": ".incbin through __asm__ pasted", "mallory-struct": "digraph %:include in a struct",
           "mallory-splice": "line splice # \\ include, spaced", "mallory-line": "#line then #error",
           "mallory-include": ".include assembler directive"}


def test_grader_batch_puts_no_secret_in_any_instructors_or_students_file(planted):
    for student, form in BATCHED.items():
        path = planted.class_dir / student / "kernel.cu"
        path.parent.mkdir(parents=True)
        path.write_text(attack([(READS[form], str(s.path)) for s in planted.secrets.values()]))
        path.chmod(0o644)
        path.parent.chmod(0o755)
    out = planted.root / "out"
    proc = run_grader("batch", str(planted.class_dir), "--report-dir", str(out), "--backend", "emulator", "-j", "2",
                      timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert (out / "summary.csv").is_file() and (out / "results.jsonl").is_file(), sorted(_files_under(out))
    rows = _rows(out)
    # alice's own report folder may show her own file; nothing else may show any secret
    leaks = _leaks_in_files(out, planted, allowed=lambda p: ("classmate",) if "alice" in p.relative_to(out).parts
                            else ())
    leaks += [f"the command's {stream} holds the {name} secret" for stream, text in
              (("stdout", proc.stdout), ("stderr", proc.stderr)) for name in planted.found_in(text)]
    assert leaks == [], "the batch's outputs hold secrets:\n" + "\n".join(leaks)
    assert sorted(rows) == sorted(["alice", *BATCHED]), sorted(rows)
    assert (rows["alice"]["status"], rows["alice"]["correct"]) == ("graded", True), rows["alice"]["message"]


def test_the_classmate_graded_alone_is_correct_and_her_file_stays_in_her_folder(planted):
    """The batch test's control (and fairness in a batch): alice's correct kernel, graded alone by
    `grader batch`, is correct, and her marker reaches only her own report folder, so a marker the
    batch test finds elsewhere was put there by an attacker."""
    out = planted.root / "out-alice"
    proc = run_grader("batch", str(planted.class_dir), "--report-dir", str(out), "--backend", "emulator", timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    rows = _rows(out)
    assert list(rows) == ["alice"] and (rows["alice"]["status"], rows["alice"]["correct"]) == ("graded", True), \
        {k: (r["status"], r["message"]) for k, r in rows.items()}
    leaks = _leaks_in_files(out, planted, allowed=lambda p: ("classmate",) if "alice" in p.relative_to(out).parts
                            else ())
    assert leaks == [], leaks


# ---------------------------------------------------------------------------------------------------
# Fairness: what correct kernels include still builds
# ---------------------------------------------------------------------------------------------------

def _correct(headers: str, *, device: str = "", kernel_value: str = "x[i] + bias[col]", host: str = "",
             grid: str = "(cols + 255) / 256") -> str:
    return (headers + device +
            "__global__ void biasGeluFused(const float* __restrict__ x, const float* __restrict__ bias,\n"
            "                              float* __restrict__ out, size_t cols) {\n"
            "    const size_t col = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;\n"
            "    if (col < cols) {\n"
            "        const size_t i = blockIdx.y * cols + col;\n"
            f"        const float v = {kernel_value};\n"
            "        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));\n"
            "    }\n}\n"
            "void launchBiasGeluFused(const float* x, const float* bias, float* out, int rows, int cols,\n"
            "                         cudaStream_t stream) {\n" + host +
            f"    biasGeluFused<<<dim3({grid}, rows), 256, 0, stream>>>(x, bias, out, cols);\n}}\n")


FAIR: dict[str, Callable[[], str]] = {
    "thrust": lambda: (SUBMISSIONS / "thrust_transform.cu").read_text(),
    "CUB": lambda: _correct("#include <cub/thread/thread_load.cuh>\n",
                            kernel_value="cub::ThreadLoad<cub::LOAD_LDG>(x + i) + "
                                         "cub::ThreadLoad<cub::LOAD_LDG>(bias + col)"),
    "<iostream>": lambda: _correct("#include <iostream>\n", host="    static bool said = false;\n"
                                   "    if (!said) { said = true; std::cout << \"launching \" << rows << 'x' << cols "
                                   "<< std::endl; }\n"),
    "<cmath>": lambda: _correct("#include <cmath>\n", grid="static_cast<unsigned>(std::ceil(cols / 256.0))"),
    "<vector>": lambda: _correct("#include <vector>\n", host="    const std::vector<int> threads = {128, 256};\n"
                                 "    if (threads.back() != 256) return;\n"),
    "<algorithm>": lambda: _correct("#include <algorithm>\n", grid="std::max(1, (cols + 255) / 256)"),
    "<cstdio>": lambda: _correct("#include <cstdio>\n", host="    char shape[64];\n"
                                 "    std::snprintf(shape, sizeof shape, \"%d x %d\", rows, cols);\n"
                                 "    if (shape[0] == 0) return;\n"),
    "<cuda_fp16.h>": lambda: _correct("#include <cuda_fp16.h>\n",
                                      kernel_value="x[i] + bias[col] + __half2float(__float2half(0.0f))"),
    "<cooperative_groups.h>": lambda: (SUBMISSIONS / "cooperative_groups_block.cu").read_text(),
    # a header the wall must let the preprocessor find: the standard library's, and nvcc's own
    "__has_include of system headers": lambda: _correct(
        "#if !__has_include(<cmath>) || !__has_include(<vector>)\n#error the standard headers are out of sight\n"
        "#endif\n#if defined(__NVCC__) && !__has_include(<cuda_fp16.h>)\n#error CUDA's headers are out of sight\n"
        "#endif\n#include <cmath>\n"),
    "<memory>, <vector> and <algorithm> (a sample)": lambda: (SUBMISSIONS / "std_headers_noinline.cu").read_text(),
}
# what the CPU emulator's shim cannot build (docs/design.md): half types, thrust, CUB
NEEDS_A_GPU = {"thrust", "CUB", "<cuda_fp16.h>"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("what", sorted(FAIR))
def test_a_correct_kernel_with_the_toolchains_headers_still_builds(what, backend, rubric, tmp_path):
    if backend == "emulator" and what in NEEDS_A_GPU:
        pytest.skip(f"the CPU emulator's shim cannot build {what} (docs/design.md): a GPU grades it")
    build = _build(tmp_path / "fair.cu", FAIR[what](), rubric, backend)
    assert build.ok, (what, backend, build.log[-3000:])


def test_a_correct_kernel_with_standard_headers_is_graded_correct_end_to_end(tmp_path):
    """The whole command line on the emulator (nvcc, then g++ against the shim, then the run) of a
    kernel that includes the standard library's headers and cooperative groups."""
    source = _correct("#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <iostream>\n"
                      "#include <vector>\n#include <cooperative_groups.h>\n",
                      device="namespace cg = cooperative_groups;\n",
                      host="    const std::vector<int> threads = {128, 256};\n"
                           "    static bool said = false;\n"
                           "    if (!said) { said = true; std::cout << \"threads \" << *std::max_element("
                           "threads.begin(), threads.end()) << std::endl;\n"
                           "                 std::printf(\"%d\\n\", (int)std::ceil(1.5)); }\n")
    path = tmp_path / "headers.cu"
    path.write_text(source)
    report = tmp_path / "headers-report"
    proc = run_grader("submit", str(path), "--backend", "emulator", "--report-dir", str(report))
    result = json.loads((report / "result.json").read_text())
    assert proc.returncode == 0 and result["status"] == "graded" and result["correct"] is True, \
        (result["status"], result.get("message"), proc.stdout[-2000:], proc.stderr[-2000:])
