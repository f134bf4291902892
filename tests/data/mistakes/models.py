"""The hand check of the mistakes corpus: an independent float64 numpy model of each value mistake
(written from the kernel's source, not from grader/verdict/), compared with the emulator's output at
the grader's first mismatch ("got") and with the grader's largest error over each failing case.

    grader submit tests/data/mistakes/gelu_sum/mean_not_sum.cu --backend emulator --exercise gelu_sum \
        --no-report --format json > RESULTS/mean_not_sum.gelu_sum.json
    python tests/data/mistakes/models.py RESULTS gelu_sum/mean_not_sum

MATCH: the model's value at the first mismatch equals what the kernel wrote (1e-4 relative). The
model's largest error against the reference should equal the grader's (where the model is defined
everywhere). Not a test of the grader: a record of how each cause in manifest.yaml was checked.
"""
import json, math, re, sys, importlib.util
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))           # reference/<exercise>/inputs.py imports grader.exercises.draws
RESULTS = Path('.')

def load(ex):
    spec = importlib.util.spec_from_file_location(ex + '_in', ROOT / 'reference' / ex / 'inputs.py')
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m.GENERATORS

verf = np.vectorize(math.erf)
def gelu(v): return 0.5 * v * (1 + verf(v / math.sqrt(2)))
def gelu_tanh(v): return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
NAN = float('nan')

# ---- bias_gelu_fused: t has x [rows, cols], bias [cols]
def bg(t):
    return t['x'].astype(np.float64), t['bias'].astype(np.float64)
def bgf_ref(t, d): x, b = bg(t); return gelu(x + b)
def bgf_by_row(t, d):
    x, b = bg(t); r, c = x.shape
    br = np.array([b[i] if i < c else NAN for i in range(r)])   # bias[row]: past the bias when row >= cols
    return gelu(x + br[:, None])
def bgf_one_based(t, d):
    x, b = bg(t); r, c = x.shape
    xf = np.concatenate([x.ravel(), [NAN]])           # x[row*cols + c] for c = 1..cols: one past at the end
    return gelu(xf[1:].reshape(r, c) + b)
def bgf_transposed_store(t, d):
    x, b = bg(t); r, c = x.shape
    return gelu(x + b).T.reshape(r, c)      # out[col*rows+row] = g[row][col]
def bgf_shared_one_warp(t, d):
    x, b = bg(t); r, c = x.shape
    bb = np.where((np.arange(c) % 256) < 32, b, 0.0)   # hypothesis: the unloaded slots read 0
    return gelu(x + bb)
M = {
 'bias_gelu_fused': {
  'erf_over_two': lambda t, d: (lambda v: 0.5 * v * (1 + verf(v / 2)))(sum(bg(t))),
  'half_forgotten_macro': lambda t, d: 2 * bgf_ref(t, d),
  'integer_half': lambda t, d: 0 * bgf_ref(t, d),
  'sigmoid_gelu': lambda t, d: (lambda v: v / (1 + np.exp(-1.702 * v)))(sum(bg(t))),
  'shared_bias_after_gelu': lambda t, d: gelu(bg(t)[0]) + bg(t)[1],
  'tile16_bias_by_row': bgf_by_row,
  'params_struct_bias_twice': lambda t, d: gelu(bg(t)[0] + 2 * bg(t)[1]),
  'erfc_sign': lambda t, d: (lambda v: v - gelu(v))(sum(bg(t))),
  'transposed_store': bgf_transposed_store,
  'shared_bias_one_warp': bgf_shared_one_warp,
  'one_based_columns': bgf_one_based,
  'unused_biased_value': lambda t, d: gelu(bg(t)[0]),
  'tanh_via_exp': lambda t, d: gelu_tanh(sum(bg(t))),
 },
}

# ---- rope: in [b, q, h, D], cosTab/sinTab [q, half]
def rp(t):
    x = t['in'].astype(np.float64); half = x.shape[-1] // 2
    return x, half, t['cosTab'].astype(np.float64), t['sinTab'].astype(np.float64)
def rope_pos(t, pos, cidx=None):
    """Rotation with position array pos [b,q,h]; the tables at pos."""
    x, half, C, S = rp(t)
    c, s = C[pos], S[pos]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
def rows_idx(d): b, q, h = d['batch'], d['seq'], d['heads']; return np.arange(b * q * h).reshape(b, q, h)
def default_pos(d): return np.broadcast_to(np.arange(d['seq'])[None, :, None], (d['batch'], d['seq'], d['heads']))
def rope_swapped(t, d):
    x, half, C, S = rp(t); c, s = C[None, :, None, :], S[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * s - x1 * c, x0 * c + x1 * s], -1)
def rope_adjacent(t, d):
    x, half, C, S = rp(t); c, s = C[None, :, None, :], S[None, :, None, :]
    out = np.empty_like(x); x0, x1 = x[..., 0::2], x[..., 1::2]
    out[..., 0::2] = x0 * c - x1 * s; out[..., 1::2] = x0 * s + x1 * c; return out
def rope_pos_head(t, d):
    head = np.broadcast_to(np.arange(d['heads'])[None, None, :], (d['batch'], d['seq'], d['heads']))
    out = rope_pos(t, np.minimum(head, d['seq'] - 1))
    out[head >= d['seq']] = NAN           # reads past the tables: not modelled
    return out
def rope_reused(t, d):
    x, half, C, S = rp(t); c, s = C[None, :, None, :], S[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    a = x0 * c - x1 * s
    return np.concatenate([a, a * s + x1 * c], -1)
def rope_theta(t, d):
    x, half, C, S = rp(t); D = x.shape[-1]
    j = np.arange(half); theta = 10000.0 ** (-j / D)
    ang = np.arange(d['seq'])[:, None] * theta[None, :]
    c, s = np.cos(ang).astype(np.float32)[None, :, None, :], np.sin(ang).astype(np.float32)[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
def rope_float_angle(t, d):
    # float32 angle, exact sin/cos of it: the model of the precision lost in the angle alone
    x, half, C, S = rp(t); D = x.shape[-1]
    j = np.arange(half, dtype=np.float32)
    theta = np.power(np.float32(10000.0), np.float32(-2.0) * j / np.float32(D)).astype(np.float32)
    ang = (np.arange(d['seq'], dtype=np.float32)[:, None] * theta[None, :]).astype(np.float32).astype(np.float64)
    c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
def rope_from_one(t, d):
    x, half, C, S = rp(t); q = d['seq']
    Cn = np.vstack([C[1:], np.full((1, half), NAN)])    # cos of pos + 1 (the last position past the table)
    c, s = Cn[None, :, None, :], S[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
def rope_upper_offset(t, d):
    x, half, C, S = rp(t); q = d['seq']
    flatC = np.concatenate([C.ravel(), np.full(half, NAN)]); flatS = np.concatenate([S.ravel(), np.full(half, NAN)])
    pos = np.arange(q)
    idx = pos[:, None] * half + np.arange(half, 2 * half)[None, :]
    c2, s2 = flatC[idx][None, :, None, :], flatS[idx][None, :, None, :]
    c, s = C[None, :, None, :], S[None, :, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s2 + x1 * c2], -1)
def rope_partner_quarter(t, d):
    x, half, C, S = rp(t); D = x.shape[-1]; off = half // 2
    out = np.full_like(x, NAN)
    # thread j: lo = j if j < off else j + off; partner lo + off; table entry j (later threads overwrite earlier ones in order)
    for j in range(half):
        lo = j if j < off else j + off
        c, s = C[None, :, None, j], S[None, :, None, j]
        x0, x1 = x[..., lo], x[..., lo + off]
        out[..., lo] = x0 * c - x1 * s
        out[..., lo + off] = x0 * s + x1 * c
    return out
M['rope_half_split'] = {
  'helper_args_swapped': rope_swapped,
  'float2_adjacent_pairs': rope_adjacent,
  'grid_pos_head_swapped': rope_pos_head,
  'row_modulo_seq': lambda t, d: rope_pos(t, rows_idx(d) % d['seq']),
  'position_from_one': rope_from_one,
  'updated_value_reused': rope_reused,
  'theta_recomputed': rope_theta,
  'fast_intrinsic_angle': rope_float_angle,
  'upper_table_offset': rope_upper_offset,
  'partner_quarter': rope_partner_quarter,
}

# ---- gelu_sum: x [R, B, D]
def gx(t): return t['x'].astype(np.float64)
def gs_ref(t, d): return gelu(gx(t)).sum(0)
def gs_atomic_r(t, d):
    x = gx(t); R, B, D = x.shape; g = gelu(x).ravel()
    out = np.zeros(B * D); np.add.at(out, np.arange(g.size) // R, g); return out.reshape(B, D)
def gs_transposed(t, d):
    x = gx(t); R, B, D = x.shape
    return gelu(x.reshape(R, D, B)).sum(0).T
def gs_half_warp(t, d):
    x = gx(t); R = x.shape[0]; keep = (np.arange(R) % 32) < 16
    return gelu(x[keep]).sum(0)
def gs_sum_over_b(t, d):
    x = gx(t); R, B, D = x.shape
    s = gelu(x).sum(1)               # [R, D], written at out[r*D + d]
    out = np.zeros(B * D); n = min(R * D, B * D); out[:n] = s.ravel()[:n]
    return out.reshape(B, D)
M['gelu_sum'] = {
  'mean_not_sum': lambda t, d: gs_ref(t, d) / d['R'],
  'atomic_index_over_r': gs_atomic_r,
  'gelu_of_sum': lambda t, d: gelu(gx(t).sum(0)),
  'erf_times_sqrt2': lambda t, d: (0.5 * gx(t) * (1 + verf(gx(t) * math.sqrt(2)))).sum(0),
  'functor_no_half': lambda t, d: 2 * gs_ref(t, d),
  'seeded_with_first': lambda t, d: gs_ref(t, d) + gelu(gx(t)[0]),
  'sigmoid_macro': lambda t, d: (gx(t) / (1 + np.exp(-1.702 * gx(t)))).sum(0),
  'slice_read_transposed': gs_transposed,
  'warp_reduce_half_warp': gs_half_warp,
  'sum_over_b': gs_sum_over_b,
}
DIMS = {'bias_gelu_fused': ['rows', 'cols'], 'rope_half_split': ['batch', 'seq', 'heads', 'headDim'], 'gelu_sum': ['R', 'B', 'D']}

def check(ex, name):
    res = json.load(open(RESULTS / f'{name}.{ex}.json'))
    model = M[ex][name]; gens = load(ex)
    lines = []
    for c in res['cases']:
        if c['passed'] or c['kind'] != 'check' or c['pattern'] not in gens: continue
        dims = dict(zip(DIMS[ex], c['shape']))
        t = gens[c['pattern']](dims, c['seed'])
        ref = {'bias_gelu_fused': bgf_ref, 'rope_half_split': lambda t, d: rope_pos(t, default_pos(d)), 'gelu_sum': gs_ref}[ex](t, dims)
        out = model(t, dims)
        fm = c.get('first_mismatch')
        if not fm:
            lines.append(f"{c['name']}: no first mismatch (bad {c['bad']}, unwritten {c['unwritten']}, note {c['note']!r}); model has {int(np.isnan(out).sum())} NaN, {int((~np.isclose(out, ref, rtol=1e-5, atol=1e-6)).sum())} off the reference")
            continue
        idx = tuple(int(v) for v in re.findall(r'\[\w+ (\d+)\]', fm['at']))
        m = out[idx]; got = fm['got']
        ok_pt = (np.isnan(m) and (got is None or (isinstance(got, float) and math.isnan(got)))) or (got is not None and not math.isnan(got) and abs(m - got) <= 1e-4 * max(1.0, abs(got)))
        err = np.nanmax(np.abs(out - ref)) if np.isfinite(out).any() else float('nan')
        lines.append(f"{c['name']}: at {fm['at']} got {got:.6g} model {m:.6g} want {fm['want']:.6g} -> {'MATCH' if ok_pt else 'DIFFER'}; model max|err| {err:.4g} vs grader {c['max_abs_error']:.4g}")
    return lines

if __name__ == '__main__':
    RESULTS = Path(sys.argv[1])
    for arg in sys.argv[2:]:
        ex, name = arg.split('/')
        for l in check(ex, name)[:3]: print(ex, name, l)
