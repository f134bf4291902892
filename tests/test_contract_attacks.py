"""Variants of issue 70's attacks nobody had written (engineer "attack"): each asserts the contract
holds (no canary byte anywhere, bounds held, the outcome the student's).

- canaries in the grader's environment read back by a build through more assembler forms (.incbin
  with an offset and a count, each canary's name resolved, .print/.error/.warning of a symbol,
  .irp over the included names), preprocessor forms (#line naming a /proc file then a diagnostic
  that quotes its line, a /proc path built by macros, __has_include of /dev/stdin), /proc/self/auxv,
  /proc/self/maps, /dev/stdin, /proc/<guessed pid>, and by the emulator's child scanning every page
  it can read of its own memory, its auxv, maps and mountinfo and every /proc/<pid> it can guess;
- floods: #warning spam, a template backtrace, one gigantic line, a launcher's stdout and stderr;
- memory: mremap growth, many threads with big stacks touched;
- files: an assembler .skip/.fill past build_file_mib; .incbin of /dev/zero;
- processes: a thread storm and a fork from a static constructor;
- time: a macro doubling 40 times under a short build_time_s;
- the --server URL forms a checker and an opener may read differently.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_build_wall import CAT, _c, attack
from test_contract_view import _attack_source, _build, _everything, _found, canaries, needs_landlock  # noqa: F401
from test_wall import KERNEL
from grader.cli import cli

CANARY_NAMES = ("GRADER_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "GRADER_SERVE_SECRET")


def _guessed_pids() -> list[int]:
    return list(range(1, 40))


# ---------------------------------------------------------------------------------------------------
# Canaries through a build
# ---------------------------------------------------------------------------------------------------

ASM_TARGETS = ["/proc/self/environ", "/proc/thread-self/environ", "/proc/self/auxv", "/proc/self/maps",
               "/proc/self/cmdline", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/self/root/proc/1/environ",
               *(f"/proc/{p}/environ" for p in _guessed_pids())]


def _asm_everything(targets: list[str]) -> str:
    """One file-scope asm (the build's stdin, which /proc/self/fd/0 reaches, is /dev/null): each target .include'd and .incbin'd with an offset and a count; then each
    canary's name resolved in an expression, .print'd, and named in .error/.warning; an .irp over them."""
    text = "".join(f'.include "{p}"\n' for p in targets)
    text += ".pushsection .rodata\n" + "".join(f'.incbin "{p}", 8, 64\n' for p in targets) + ".popsection\n"
    for name in CANARY_NAMES:
        text += f".long {name} - bw_nowhere\n.print \"{name}\"\n.error \"{name}\"\n.warning \"{name}\"\n"
    text += ".irp bw_n," + ",".join(CANARY_NAMES) + "\n.long \\bw_n - bw_nowhere\n.endr\n"
    return CAT + f"BW_CAT(__as, m__)({_c(text)});\n"


@needs_landlock
def test_the_assembler_reads_no_canary_by_offset_symbol_print_or_irp(canaries, rubric, tmp_path):
    build = _build(tmp_path / "asm.cu", _attack_source(_asm_everything(ASM_TARGETS)), rubric, "emulator")
    assert _found(canaries, _everything(build)) == [], build.log[-3000:]
    opened = [t for t in ASM_TARGETS if "/fd/" not in t and f"can't open {t} for reading" not in build.log]
    assert opened == [], f"the assembler opened {opened}:\n{build.log[-3000:]}"


def _line_then_diagnostics(paths: list[str]) -> str:
    """#line naming each path, then diagnostics that quote the line they stand on from that file."""
    out = ""
    for i, p in enumerate(paths):
        out += (f'#line 1 "{p}"\n#error bw\n#line 1 "{p}"\n#warning bw\n#line 1 "{p}"\nint bw_u{i} = bw_undeclared{i};\n'
                f'#line 1 "{p}"\n_Pragma("GCC warning \\"bw\\"")\n#line 1 "{p}"\n#pragma GCC dependency "{p}"\n')
    return out + '#line 400 "submission.cu"\n'


@needs_landlock
def test_a_diagnostic_after_line_quotes_no_proc_file(canaries, rubric, tmp_path):
    paths = ["/proc/self/environ", "/proc/thread-self/environ", "/proc/1/environ", "/proc/2/environ",
             "/proc/self/cmdline", "/dev/stdin"]
    build = _build(tmp_path / "line.cu", _attack_source(_line_then_diagnostics(paths)), rubric, "emulator")
    assert not build.ok
    assert _found(canaries, _everything(build)) == [], build.log[-3000:]


MACRO_PATHS = {
    "stringised /proc/self/environ": '#define BW_S(x) #x\n#define BW_X(x) BW_S(x)\n%:include BW_X(/proc/self/environ)\n',
    "pasted /proc/1/environ": '#define BW_S(x) #x\n#define BW_X(x) BW_S(x)\n#define BW_P(a, b) a##b\n'
                              '%:include BW_X(/proc/BW_P(1,)/environ)\n',
    "/proc/self/root/proc/self/environ": '%:include "/proc/self/root/proc/self/environ"\n',
    "/dev/stdin": '%:include "/dev/stdin"\n',
    "__has_include of /dev/stdin then include": '#if __has_include("/dev/stdin")\n%:include "/dev/stdin"\n#endif\n',
}


@needs_landlock
@pytest.mark.parametrize("form", list(MACRO_PATHS))
def test_the_preprocessor_includes_no_proc_file_by_a_built_path(form, canaries, rubric, tmp_path):
    build = _build(tmp_path / "pp.cu", _attack_source(MACRO_PATHS[form]), rubric, "emulator")
    assert _found(canaries, _everything(build)) == [], build.log[-3000:]


# ---------------------------------------------------------------------------------------------------
# Canaries through the emulator's child: everything of its own memory it can read, its /proc files
# ---------------------------------------------------------------------------------------------------

CHILD_SCAN = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>
#include <sys/auxv.h>
static const char* BW_NEEDLES[] = {@NEEDLES@};
static char bw_needle[256];
static char bw_file[1 << 20];
static ssize_t bw_read(const char* what) {
    int f = open(what, O_RDONLY);
    if (f < 0) return -errno;
    ssize_t k = 0, r;
    while (k < (ssize_t)sizeof bw_file - 1 && (r = read(f, bw_file + k, sizeof bw_file - 1 - k)) > 0) k += r;
    close(f);
    bw_file[k] = 0;
    return k;
}
static void bw_needle_of(const char* n) {      // the canary, reversed back at run time
    size_t l = strlen(n);
    for (size_t i = 0; i < l; ++i) bw_needle[i] = n[l - 1 - i];
    bw_needle[l] = 0;
}
static void bw_scan_file(const char* what) {
    ssize_t k = bw_read(what);
    if (k < 0) { printf("DENIED %s %d\n", what, (int)-k); return; }
    printf("READ %s %zd\n", what, k);
    for (const char* n : BW_NEEDLES) {
        bw_needle_of(n);
        if (memmem(bw_file, (size_t)k, bw_needle, strlen(bw_needle))) printf("FOUND a canary in %s\n", what);
    }
}
static void bw_scan_memory() {   // every readable mapping of its own that no file backs (a file's past its end is SIGBUS)
    ssize_t k = bw_read("/proc/self/maps");
    if (k < 0) { printf("DENIED maps\n"); return; }
    static char maps[1 << 20];
    memcpy(maps, bw_file, (size_t)k + 1);
    int regions = 0;
    for (char* line = strtok(maps, "\n"); line; line = strtok(nullptr, "\n")) {
        unsigned long a, b; char perm[8] = {0};
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3 || perm[0] != 'r' || perm[3] != 'p') continue;
        if (strstr(line, "[vvar") || strstr(line, "[vsyscall]") || strchr(line, '/')) continue;   // anonymous, heap, stack
        ++regions;
        for (const char* n : BW_NEEDLES) {
            bw_needle_of(n);
            size_t l = strlen(bw_needle);
            const char* p = (const char*)a;
            size_t left = b - a;
            while (left >= l) {
                const char* hit = (const char*)memmem(p, left, bw_needle, l);
                if (!hit) break;
                if (hit != bw_needle) printf("FOUND a canary in memory at %s\n", line);
                left -= (size_t)(hit + 1 - p); p = hit + 1;
            }
        }
    }
    printf("SCANNED %d regions\n", regions);
}
static void bw_peek() {
    bw_scan_memory();
    const char* files[] = {"/proc/self/environ", "/proc/thread-self/environ", "/proc/self/auxv", "/proc/self/maps",
                           "/proc/self/mountinfo", "/proc/self/cmdline", "/proc/self/fd/0", "/dev/stdin"};
    for (const char* f : files) bw_scan_file(f);
    char p[64];
    for (int pid = 1; pid < 40; ++pid) {
        snprintf(p, sizeof p, "/proc/%d/environ", pid); bw_scan_file(p);
        snprintf(p, sizeof p, "/proc/%d/cmdline", pid); bw_scan_file(p);
    }
    printf("AUXV execfn %s\n", (const char*)getauxval(AT_EXECFN));
    fflush(stdout);
}
"""


@needs_landlock
def test_the_emulators_child_finds_no_canary_in_its_memory_or_any_proc_file(canaries, rubric, tmp_path):
    """The launcher scans every readable anonymous page of its own memory (the stack with its
    environ and auxv, the interpreter's heap, what the grader sent it), its auxv, maps, mountinfo, stdin, and
    /proc/<1..39>: no canary anywhere, and the grade correct."""
    from grader.grade.pipeline import grade_submission

    needles = ", ".join('"' + v[::-1] + '"' for v in canaries.values())
    source = attack([]).replace(KERNEL, CHILD_SCAN.replace("@NEEDLES@", needles) + KERNEL, 1)
    source = source.replace("once = true;", "once = true; bw_peek();", 1)
    path = tmp_path / "scan.cu"
    path.write_text(source)
    result = grade_submission(path, rubric=rubric, backend="emulator")
    out = result.output.stdout
    assert result.status == "graded" and result.correct, (result.status, result.message, out[-2000:])
    assert "SCANNED" in out and "READ /proc/self/maps" in out, out[-3000:]
    assert "FOUND" not in out, [ln for ln in out.splitlines() if "FOUND" in ln]
    assert _found(canaries, json.dumps(result.to_json())) == []
