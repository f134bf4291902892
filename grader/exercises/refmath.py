"""Float64 references of functions exercises share, for reference.py files to import.

As in the lesson, constants are the float-rounded ones a kernel writes (0.70710678f), promoted
to double, so a check prices the kernel's arithmetic and not its choice of literal.

Each function takes numpy arrays (what a reference that says `ARRAYS = "numpy"` is given) or torch
tensors (a reference written with torch). For numpy, erf is computed here (`erf`, below), to
within one unit in the last place of the C library's and torch's (tests/test_reference_math.py),
so that a first grade computes its answers without importing torch, which took longer on the
H200's host (4 to 6 s) than the rest of the grade; large arrays are computed in blocks over a
few threads (grader/core/blocks.py).
"""

from __future__ import annotations

import numpy as np

from grader.core.blocks import elementwise


def f32(value: float) -> float:
    """value rounded to float32, as a kernel's literal is."""
    return float(np.float32(value))


INV_SQRT2 = f32(0.70710678)        # 1/sqrt(2)
GELU_A = f32(0.7978845608)         # sqrt(2/pi)
GELU_B = f32(0.044715)             # the tanh form's cubic coefficient


def gelu_erf(v):
    """The exact GELU (F.gelu's default): 0.5 v (1 + erf(v / sqrt(2)))."""
    if isinstance(v, np.ndarray):
        return elementwise(_gelu_erf, v)
    return 0.5 * v * (1.0 + (v * INV_SQRT2).erf())          # a torch tensor: torch.special.erf, as a method


def gelu_tanh(v):
    """The tanh approximation: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))."""
    if isinstance(v, np.ndarray):
        return elementwise(_gelu_tanh, v)
    return 0.5 * v * (1.0 + (GELU_A * (v + GELU_B * v * v * v)).tanh())     # a torch tensor: torch.tanh, as a method


def _gelu_erf(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + erf(v * INV_SQRT2))


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + np.tanh(GELU_A * (v + GELU_B * v * v * v)))


# -- erf in float64, for numpy ----------------------------------------------------
# The rational approximations of Sun's fdlibm (s_erf.c), which the C library's erf is built
# from: on [0, 0.84375) erf(x) = x + x P(x^2)/Q(x^2); on [0.84375, 1.25) erf(x) = erx +
# P(s)/Q(s), s = x - 1; on [1.25, 6) erf(x) = 1 - exp(-z^2 - 0.5625) exp((z - x)(z + x) + R(1/x^2)/S(1/x^2)) / x,
# with z = x with its low 32 bits cleared, and one (R, S) pair below 1/0.35 and another above;
# from 6 on, 1 to double precision. erf is odd.

_ERX = 8.45062911510467529297e-01
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)
_HIGH_WORD = np.uint64(0xFFFFFFFF00000000)


def _poly(coefficients: tuple, z: np.ndarray) -> np.ndarray:
    """c0 + c1 z + c2 z^2 + ... by Horner's rule."""
    out = np.full_like(z, coefficients[-1])
    for c in coefficients[-2::-1]:
        out *= z
        out += c
    return out


def erf(x) -> np.ndarray:
    """The error function of x (numpy, float64), within one unit in the last place of libm's."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(x)
    small = a < 0.84375
    if small.any():
        v = x[small]
        z = v * v
        out[small] = v + v * (_poly(_PP, z) / _poly(_QQ, z))
    knee = (a >= 0.84375) & (a < 1.25)
    if knee.any():
        s = a[knee] - 1.0
        out[knee] = np.copysign(_ERX + _poly(_PA, s) / _poly(_QA, s), x[knee])
    tail = (a >= 1.25) & (a < 6.0)
    if tail.any():
        v = a[tail]
        s = 1.0 / (v * v)
        rs = np.where(v < 1 / 0.35, _poly(_RA, s) / _poly(_SA, s), _poly(_RB, s) / _poly(_SB, s))
        z = (v.view(np.uint64) & _HIGH_WORD).view(np.float64)
        r = np.exp(-z * z - 0.5625) * np.exp((z - v) * (z + v) + rs)
        out[tail] = np.copysign(1.0 - r / v, x[tail])
    far = a >= 6.0
    out[far] = np.copysign(1.0, x[far])
    out[np.isnan(x)] = np.nan
    return out
