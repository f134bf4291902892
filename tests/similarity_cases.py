"""The similarity check's measured sets (tests/test_similarity.py, scripts/similarity-bench.py).

disguise(text, seed) is what a student who copies does to hide it: every name of their own renamed,
the numbers changed, the top-level functions in another order, the comments replaced, the spacing
and indentation redone. It works on the text (comments found by a small scanner that knows
strings), so the result reads as a file a student could hand in.

copied(exercise): the samples' graded kernels, correct and incorrect (submissions/<ex>/manifest.yaml,
no attack), and the fairness suite's correct idioms (tests/data/fairness/<ex>/): each is one pair,
the file and its disguise. HAND_MADE: copies made by hand, each file saying what was done to its
sample. INDEPENDENT: kernels of one exercise written apart, in their own styles: the samples'
correct kernels and the fairness idioms that are not variants of one another (the lesson's kernel
with one thing changed, a sample plus an attack, are left out).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import yaml

from grader.analysis.similarity import KEPT

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "submissions"
IDIOMS = ROOT / "tests" / "data" / "fairness"
EXERCISES = ("bias_gelu_fused", "rope_half_split", "gelu_sum")

# Written apart: no two of one exercise have a difflib ratio of 0.7 or more on their text without comments
# and spacing (scripts/similarity-bench.py --independence checks it again); the samples and idioms
# left out are variants of one of these (the lesson's kernel with one change, a sample plus an attack).
INDEPENDENT = {
    'bias_gelu_fused': [
        'submissions/scalar_2d.cu', 'submissions/float4_launcher.cu', 'submissions/flat_index_mod.cu',
        'submissions/int_cols.cu', 'submissions/macro_named_kernel.cu', 'submissions/warp_per_row.cu',
        'submissions/shared_bias_tile.cu', 'submissions/ilp_four_per_thread.cu',
        'submissions/anonymous_namespace.cu', 'submissions/grid_stride_float4.cu',
        'submissions/occupancy_launcher.cu', 'submissions/template_aligned_dispatch.cu',
        'submissions/cooperative_groups_block.cu', 'submissions/spilling_kernel.cu', 'submissions/register_spill.cu',
        'submissions/host_class_check_macro.cu', 'submissions/static_std_objects.cu',
        'submissions/per_thread_stream.cu', 'submissions/one_thread_loop.cu', 'submissions/workspace_staged.cu',
        'submissions/row_major_threads.cu', 'submissions/test_driver_main.cu',
        'submissions/deduced_template_lambda.cu', 'submissions/std_headers_noinline.cu',
        'fairness/const_pointer_params_default.cu', 'fairness/crlf_tabs_unicode_long_line.cu',
        'fairness/extern_c_launcher_prototype_first.cu', 'fairness/functor_grid_stride_2d.cu',
        'fairness/if_constexpr_vec_template.cu', 'fairness/int64_using_constexpr_lasterror.cu',
        'fairness/renamed_params_erf_double_literal.cu', 'fairness/template_typename_default_launch.cu',
        'fairness/thread_per_row_normcdff.cu',
    ],
    'rope_half_split': [
        'submissions/lesson_half_split.cu', 'submissions/row_per_head_launcher.cu', 'submissions/float4_launcher.cu',
        'submissions/grid_stride.cu', 'submissions/blog_rotary_launcher.cu', 'fairness/bom_crlf_namespace_printf.cu',
        'fairness/default_launch_macros_ldg_renamed.cu', 'fairness/float2_pairs_scalar_fallback.cu',
        'fairness/function_pointer_dispatch_params_struct.cu', 'fairness/shared_tables_block_per_position.cu',
        'fairness/template_halfdim_dispatch.cu',
    ],
    'gelu_sum': [
        'submissions/thread_per_output.cu', 'submissions/atomic_add.cu', 'submissions/float4_launcher.cu',
        'submissions/seed_kernel_launcher.cu', 'submissions/workspace_partials.cu',
        'fairness/cg_tiled_partition_reduce.cu', 'fairness/cooperative_groups_block_sync.cu',
        'fairness/device_lambda_template_kernel.cu', 'fairness/digit_separator_grid_cap.cu',
        'fairness/double_accumulator_cuda_check_macro.cu', 'fairness/float4_flat_scalar_tail.cu',
        'fairness/grid_stride_int64_sm_grid.cu', 'fairness/kahan_compensated_sum.cu',
        'fairness/samples_sharedmemory_struct.cu', 'fairness/warp_per_output_shfl_down.cu',
    ],
}

# Copies made by hand (tests/data/similarity/<exercise>__<sample>.cu): each file's first comment
# says what was done to the sample.
HAND_MADE = sorted((ROOT / "tests" / "data" / "similarity").glob("*__*.cu"))

# The names a copy must keep for the grader to take it: each exercise's kernel and launcher.
CONTRACT = {"biasGeluFused", "launchBiasGeluFused", "ropeHalfSplit", "launchRopeHalfSplit", "geluSum",
            "launchGeluSum", "main"}
_WORD = re.compile(r""""(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|(?<!\w)[A-Za-z_]\w*""")
# What a student does not rename: the language's words, the CUDA runtime's and the libraries' names.
_LIBRARY = re.compile(r"^(?:cuda|cu[A-Z]|__|nv|std$|printf$|fprintf$|memcpy$|memset$|malloc$|free$|assert$|NULL$)")
_CPP = set("""alignas alignof asm auto bool break case catch char class const constexpr continue decltype default
delete do double else enum explicit extern false float for friend goto if inline int long namespace new noexcept
nullptr operator private protected public register return short signed sizeof static static_assert static_cast
reinterpret_cast const_cast dynamic_cast struct switch template this throw true try typedef typename union unsigned
using virtual void volatile while include define ifdef ifndef endif pragma unroll once elif undef error""".split())


# An operator, whole (`->`, `++`, `<<=` are not split), spaced around in the re-spacing.
_OPS = re.compile(r"\s*(<<=|>>=|->|\+\+|--|<<|>>|&&|\|\||[-+*/%&|^!=<>]=|(?<![-+<>=!&|])[=+*/<>](?![-+<>=&|])|,)\s*")


def strip_comments(text: str) -> str:
    """text without its comments (a string's or a char's inside kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        elif text[i] in "\"'" and not (text[i] == "'" and i and text[i - 1].isalnum() and i + 1 < n
                                       and text[i + 1].isalnum()):
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _chunks(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The file's head (directives and what comes before the first function) and its top-level
    units, each a list of lines ending where the braces close at depth 0."""
    head, units, cur, depth, held = [], [], [], 0, 0
    for line in lines:
        word = re.match(r"\s*#\s*(\w*)", line)
        if word and not cur and depth == 0:
            held += word.group(1) in ("if", "ifdef", "ifndef")
            held -= word.group(1) == "endif"
        if held or (not cur and depth == 0 and (not line.strip() or word)):
            (head if not units else units[-1]).append(line)     # a conditional block stays where it is, whole
            continue
        cur.append(line)
        code = re.sub(r'"(?:\\.|[^"\\])*"', "", line)
        depth += code.count("{") - code.count("}")
        if re.match(r"^\s*namespace\b.*\{\s*$|^\s*extern\s+\"C\"\s*\{\s*$", line):
            depth -= 1                                  # a namespace's brace: its functions are units
            units.append(cur)
            cur = []
            continue
        if depth <= 0 and line.rstrip().endswith(("}", ";", "};")):
            depth = max(depth, 0)
            units.append(cur)
            cur = []
    if cur:
        units.append(cur)
    return head, units


def disguise(text: str, seed: int, *, rename: bool = True, reorder: bool = True, recomment: bool = True,
             respace: bool = True, renumber: bool = True) -> str:
    rnd = random.Random(seed)
    code = strip_comments(text) if recomment else text
    code = code.replace("\\\n", " ")                  # a macro's continued lines joined: one logical line
    if rename:
        names: dict[str, str] = {}

        def new(m: re.Match) -> str:
            word = m.group()
            before = m.string[max(0, m.start() - 2) : m.start()].rstrip() if m.start() else ""
            if (word[0] in "\"'" or word in _CPP or word in CONTRACT or word in KEPT or _LIBRARY.match(word)
                    or before.endswith((".", "->", "::"))):
                return word
            if word not in names:
                names[word] = rnd.choice(["v", "t", "my", "tmp", "q", "el", "idx", "val"]) + \
                    rnd.choice(["A", "B", "Row", "Col", "X", "Off", "_"]) + str(len(names))
            return names[word]

        code = "\n".join(line if line.lstrip().startswith("#include") else _WORD.sub(new, line)
                         for line in code.split("\n"))
    if renumber:
        code = "\n".join(line if line.lstrip().startswith("#") else re.sub(
            r"(?<![\w.])(\d+)(?![\w.'])", lambda m: str(int(m.group(1)) * 2 if int(m.group(1)) > 8 else m.group(1)),
            line) for line in code.split("\n"))
    lines = code.split("\n")
    if reorder:
        head, units = _chunks(lines)
        rnd.shuffle(units)
        lines = head + [line for u in units for line in u]
    if respace:
        out, depth = [], 0
        for line in lines:
            s = line.strip()
            if not s:
                if rnd.random() < 0.5:
                    out.append("")
                continue
            if s.startswith("#"):
                out.append(s)
                continue
            depth -= s.startswith("}")
            s = _OPS.sub(lambda m: f" {m.group(1)} " if m.group(1) != "," else ", ", s) \
                if "<<<" not in s and "template" not in s and '"' not in s and "'" not in s else s
            s = re.sub(r"  +", " ", s)
            out.append("\t" * max(depth, 0) + s)
            depth += s.count("{") - s.count("}") + s.startswith("}")
        lines = out
    if recomment:
        lines = [line + (f"  // {rnd.choice(['compute', 'step', 'the main part', 'TODO check', 'ok'])}"
                         if line.strip().endswith(";") and rnd.random() < 0.3 else "") for line in lines]
        lines.insert(0, f"// my solution, version {seed}")
    return "\n".join(lines) + "\n"


def manifest(exercise: str) -> dict:
    return yaml.safe_load((SAMPLES / exercise / "manifest.yaml").read_text())


def graded_samples(exercise: str) -> list[Path]:
    """The samples graded correct or incorrect (no attack): the kernels a class hands in."""
    return [SAMPLES / exercise / name for name, v in manifest(exercise).items()
            if isinstance(v, dict) and v.get("status") == "graded" and v.get("correct") in (True, False)
            and not v.get("attack") and (SAMPLES / exercise / name).is_file()]


def idioms(exercise: str) -> list[Path]:
    return sorted((IDIOMS / exercise).glob("*.cu"))


def copied(exercise: str) -> list[tuple[str, str, str]]:
    """(name, the original's text, its disguise) for every graded sample and correct idiom."""
    out = []
    for k, p in enumerate(graded_samples(exercise) + idioms(exercise)):
        text = p.read_text(errors="replace")
        out.append((f"{p.parent.parent.name == 'fairness' and 'idiom' or 'sample'}:{p.stem}", text,
                    disguise(text, seed=k + 1)))
    return out


def independent(exercise: str) -> list[tuple[str, bytes]]:
    """(name, bytes) of the exercise's independent kernels: sample:<stem> or idiom:<stem>."""
    out = []
    for f in INDEPENDENT[exercise]:
        kind, name = f.split("/")
        p = (SAMPLES if kind == "submissions" else IDIOMS) / exercise / name
        out.append((f"{'sample' if kind == 'submissions' else 'idiom'}:{p.stem}", p.read_bytes()))
    return out


def hand_made() -> list[tuple[str, Path, Path]]:
    """(exercise, the sample, its copy made by hand)."""
    out = []
    for p in HAND_MADE:
        exercise, sample = p.stem.split("__")
        out.append((exercise, SAMPLES / exercise / f"{sample}.cu", p))
    return out
