"""The student's line behind a mistake a declared hypothesis names (verdict/formulaline.py), read
from the source with the variant's `at:` hints of the shipped rubrics: the line of the erf/exp/pow
call (in a macro, a helper, a functor), the store to the output (through a row pointer, a struct's
field, an atomic), the accumulation or its seed, the table read, the position, the rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.source import read_submission
from grader.exercises import load_exercise
from grader.verdict.formulaline import formula_line

DATA = Path(__file__).resolve().parent / "data" / "mistakes"

CASES = [   # (file, the variant whose hints are read, the line)
    ("bias_gelu_fused/erf_over_two.cu", "erf_arg_scaled", 7),
    ("bias_gelu_fused/half_forgotten_macro.cu", "output_scaled", 6),        # erff inside a #define
    ("bias_gelu_fused/integer_half.cu", "all_zero", 11),
    ("bias_gelu_fused/tile16_bias_by_row.cu", "bias_by_row", 16),
    ("bias_gelu_fused/sigmoid_gelu.cu", "sigmoid_form", 5),
    ("bias_gelu_fused/shared_bias_after_gelu.cu", "bias_after_gelu", 16),   # not the store into shared memory
    ("bias_gelu_fused/params_struct_bias_twice.cu", "bias_twice", 24),      # p.out[i] = ...
    ("bias_gelu_fused/erfc_sign.cu", "erfc_sign", 10),
    ("bias_gelu_fused/unused_biased_value.cu", "bias_missing", 12),         # through a row pointer
    ("bias_gelu_fused/tanh_via_exp.cu", "tanh_gelu", 7),                    # tanh written with expf
    ("gelu_sum/sum_over_b.cu", "wrong_reduction_axis", 11),
    ("gelu_sum/mean_not_sum.cu", "mean_not_sum", 12),
    ("gelu_sum/atomic_index_over_r.cu", "layout_b_d_r", 10),                # atomicAdd(&out[i / R], g)
    ("gelu_sum/functor_no_half.cu", "output_scaled", 5),                    # a functor's operator()
    ("gelu_sum/seeded_with_first.cu", "extra_term", 12),                    # float acc = gelu(x[idx]);
    ("gelu_sum/slice_read_transposed.cu", "transposed_slice", 12),
    ("gelu_sum/sigmoid_macro.cu", "sigmoid_form", 4),                       # __expf in a #define
    ("rope_half_split/helper_args_swapped.cu", "cos_sin_swapped", 21),      # rotate(..., s, c)
    ("rope_half_split/grid_pos_head_swapped.cu", "position_from_head", 11),
    ("rope_half_split/row_modulo_seq.cu", "position_ignores_heads", 10),
    ("rope_half_split/upper_table_offset.cu", "table_offset", 14),
    ("rope_half_split/theta_recomputed.cu", "theta_exponent", 12),          # pow(10000.0, ...)
    ("rope_half_split/position_from_one.cu", "cos_position_shift", 14),     # cosTab[pos * halfDim + j], pos from 1
    ("rope_half_split/partner_quarter.cu", "partner_offset", 9),            # offset = halfDim / 2, read at in[lo + offset]
]


@pytest.mark.parametrize("name, code, line", CASES, ids=[c[0] for c in CASES])
def test_the_line_of_a_hypothesis_named_mistake(name, code, line):
    rubric = load_exercise(name.split("/")[0])
    variant = next(v for v in rubric.hypotheses.variants if v.code == code)
    sub = read_submission(DATA / name, launcher="")
    assert formula_line(sub, variant.at) == line


def test_a_sum_that_starts_at_zero_has_no_seed_and_a_file_without_the_call_gives_way_to_the_next_hint():
    sub = read_submission(DATA / "gelu_sum/mean_not_sum.cu", launcher="")
    assert formula_line(sub, ["seed"]) is None                  # float acc = 0.0f: a right start
    assert formula_line(sub, ["tanhf", "store"]) == 12          # no tanhf: the store
    assert formula_line(sub, ["tanhf"]) is None
