"""Vector-Jacobian products of every differentiable op against central finite differences.

All in float64: the objective is ``sum(f(x) * w)`` for a fixed random ``w``
(see ``_oracle.check_vjp``). Most cases run on the interpreter; a handful of
representative ones also run through the compiler.
"""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic as lv
import lazyvic.functional as F
from lazyvic.errors import AutogradError
from lazyvic.ops import OPS
from lazyvic.runtime import metrics


def _r(*shape, seed=0, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


_MOD_X = np.array([[2.3, -1.7, 0.4], [5.1, -4.6, 3.35]])
_MOD_Y = np.array([[0.7, 0.9, -1.3], [-1.1, 1.4, 0.6]])


def _away_from_zero(*shape, seed=0):
    a = _r(*shape, seed=seed, low=0.2, high=1.5)
    signs = np.where(np.random.default_rng(seed + 100).random(shape) < 0.5, -1.0, 1.0)
    return a * signs


def _distinct(*shape, seed=0):
    """Values with no ties (max/min/sort-like ops are differentiable there)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n) * 0.37 - n * 0.15).reshape(shape)


_COND = np.array([[True, False, True], [False, False, True]])
_TARGET = np.array([2, 0, 3, 1])
_TARGET_IGNORED = np.array([2, -100, 3, 1])
_IDX_DUP = np.array([[1, 1, 0], [2, 0, 0]])


def _well_conditioned(*shape, seed=0):
    """Square matrices far from singular: uniform entries plus 2.5 on the diagonal."""
    return _r(*shape, seed=seed) + 2.5 * np.eye(shape[-1])


def _spd(x):
    """A symmetric positive-definite matrix made of x: x x^T + I."""
    return x @ x.mT + lv.tensor(np.eye(x.shape[-1]))


def _squared_vectors(factors):
    """Each factor of a decomposition squared elementwise: invariant under the signs of the
    singular vectors and eigenvectors, which LAPACK chooses."""
    return [f * f for f in factors]


def _flat(*tensors):
    return lv.cat([t.reshape(-1) for t in tensors])


# (id, function of lazyvic tensors, input arrays)
VJP_CASES = [
    # elementwise unary
    ("neg", lambda x: -x, [_r(2, 3)]),
    ("exp", lambda x: x.exp(), [_r(2, 3)]),
    ("log", lambda x: x.log(), [_r(2, 3, low=0.3, high=2)]),
    ("sqrt", lambda x: x.sqrt(), [_r(2, 3, low=0.3, high=2)]),
    ("rsqrt", lambda x: x.rsqrt(), [_r(2, 3, low=0.3, high=2)]),
    ("reciprocal", lambda x: x.reciprocal(), [_away_from_zero(2, 3)]),
    ("tanh", lambda x: x.tanh(), [_r(2, 3, low=-2, high=2)]),
    ("sigmoid", lambda x: x.sigmoid(), [_r(2, 3, low=-3, high=3)]),
    ("erf", lambda x: x.erf(), [_r(2, 3, low=-2, high=2)]),
    ("relu", lambda x: x.relu(), [_away_from_zero(2, 3)]),
    ("abs", lambda x: x.abs(), [_away_from_zero(2, 3)]),
    ("square", lambda x: x.square(), [_r(2, 3)]),
    ("pow_2", lambda x: x**2, [_r(2, 3)]),
    ("pow_3", lambda x: x**3, [_r(2, 3)]),
    ("pow_scalar", lambda x: x**2.5, [_r(2, 3, low=0.3, high=2)]),
    ("pow_negative", lambda x: x**-1.5, [_r(2, 3, low=0.3, high=2)]),
    ("pow_tensor", lambda x, y: x**y, [_r(2, 3, low=0.3, high=2), _r(2, 3, seed=1)]),
    ("rpow", lambda x: 2.0**x, [_r(2, 3)]),
    ("cast_roundtrip", lambda x: x.to(lv.float64) * 3.0, [_r(2, 3)]),
    # elementwise binary with broadcasting and Python scalars
    ("add_broadcast", lambda x, y: x + y, [_r(2, 3), _r(3, seed=1)]),
    ("sub_broadcast", lambda x, y: x - y, [_r(2, 1), _r(1, 3, seed=1)]),
    ("mul_broadcast", lambda x, y: x * y, [_r(2, 3), _r(2, 1, seed=1)]),
    ("div_broadcast", lambda x, y: x / y, [_r(2, 3), _away_from_zero(3, seed=1)]),
    # x / y kept away from integers (where fmod and remainder jump)
    ("fmod", lambda x, y: x.fmod(y), [_MOD_X, _MOD_Y]),
    ("remainder_broadcast", lambda x, y: x % y, [_MOD_X, _MOD_Y[:1]]),
    ("rsub_scalar", lambda x: 1.5 - x, [_r(2, 3)]),
    ("rdiv_scalar", lambda x: 2.0 / x, [_away_from_zero(2, 3)]),
    ("scalar_ops", lambda x: (x * 3.0 + 1.0) / 2.0 - 0.5, [_r(2, 3)]),
    ("add_alpha", lambda x, y: x.add(y, alpha=2.0), [_r(3), _r(3, seed=1)]),
    ("maximum", lambda x, y: x.maximum(y), [_distinct(2, 3), _distinct(2, 3, seed=1) + 0.1]),
    ("minimum_broadcast", lambda x, y: x.minimum(y), [_distinct(2, 3), _distinct(3, seed=1) + 0.05]),
    ("clamp", lambda x: x.clamp(-0.4, 0.5), [_distinct(3, 4) * 0.4 + 0.013]),
    ("where", lambda x, y: lv.where(lv.tensor(_COND), x, y), [_r(2, 3), _r(2, 3, seed=1)]),
    ("where_broadcast", lambda x, y: lv.where(lv.tensor(_COND), x, y), [_r(2, 1), _r(3, seed=1)]),
    ("where_scalar", lambda x: lv.where(lv.tensor(_COND), x, 0.0), [_r(2, 3)]),
    ("masked_fill", lambda x: x.masked_fill(lv.tensor(_COND), 1.0), [_r(2, 3)]),
    # reductions
    ("sum_all", lambda x: x.sum(), [_r(2, 3)]),
    ("sum_dim", lambda x: x.sum(1), [_r(2, 3)]),
    ("sum_dims_keepdim", lambda x: x.sum((0, 2), keepdim=True), [_r(2, 3, 2)]),
    ("mean_dim", lambda x: x.mean(-1), [_r(2, 3)]),
    ("mean_all", lambda x: x.mean(), [_r(2, 3)]),
    ("amax_dim", lambda x: x.amax(1), [_distinct(3, 4)]),
    ("amin_dims", lambda x: x.amin((0, 1)), [_distinct(2, 3, 2)]),
    ("max_all", lambda x: x.max(), [_distinct(2, 3)]),
    ("max_dim_values", lambda x: x.max(0).values, [_distinct(3, 4)]),
    ("min_dim_keepdim", lambda x: x.min(1, keepdim=True)[0], [_distinct(3, 4)]),
    ("var", lambda x: x.var(1), [_r(2, 4)]),
    ("std", lambda x: x.std(), [_r(2, 4)]),
    ("logsumexp", lambda x: x.logsumexp(1), [_r(2, 4)]),
    # movement
    ("reshape", lambda x: x.reshape(3, 2) * lv.tensor(_r(3, 2, seed=9)), [_r(2, 3)]),
    ("view_neg1", lambda x: x.view(-1).exp(), [_r(2, 3)]),
    ("permute", lambda x: x.permute(2, 0, 1), [_r(2, 3, 2)]),
    ("transpose", lambda x: x.transpose(0, 1) @ lv.tensor(_r(2, 2, seed=9)), [_r(2, 3)]),
    ("T", lambda x: x.T, [_r(2, 3)]),
    ("expand", lambda x: x.expand(2, 3, 4), [_r(3, 1)]),
    ("expand_scalar", lambda x: x.expand(2, 3), [np.array(0.7)]),
    ("broadcast_to", lambda x: x.broadcast_to((2, 3)), [_r(3)]),
    ("squeeze_unsqueeze", lambda x: x.squeeze(0).unsqueeze(-1), [_r(1, 3)]),
    ("flatten", lambda x: x.flatten(), [_r(2, 3)]),
    ("getitem_int", lambda x: x[1], [_r(3, 2)]),
    ("getitem_slice", lambda x: x[:, 1:3], [_r(2, 4)]),
    ("getitem_step2", lambda x: x[::2], [_r(5, 2)]),
    ("getitem_step3_offset", lambda x: x[:, 1::3], [_r(2, 8)]),
    ("getitem_steps_2d", lambda x: x[1::2, ::3], [_r(5, 7)]),
    ("getitem_step_longer_than_tail", lambda x: x[2:5:4], [_r(6)]),
    ("getitem_none_ellipsis", lambda x: x[None, ..., 0], [_r(2, 3)]),
    ("getitem_tensor_dup", lambda x: x[lv.tensor([2, 0, 2])], [_r(3, 2)]),
    ("getitem_tensor_negative", lambda x: x[:, lv.tensor([-1, 0])], [_r(2, 3)]),
    ("narrow_split", lambda x: x.split(2, 1)[1], [_r(2, 5)]),
    ("cat_pad", lambda x, y: lv.cat([x, y], 1), [_r(2, 3), _r(2, 2, seed=1)]),
    ("cat_three", lambda x, y: lv.cat([y, x, y], 0), [_r(2, 3), _r(1, 3, seed=1)]),
    ("cat_same_input", lambda x: lv.cat([x, x * 2.0], -1), [_r(2, 2)]),
    ("stack", lambda x, y: lv.stack([x, y], 1), [_r(2, 3), _r(2, 3, seed=1)]),
    # the cat primitive (four pieces or more), and gradients of slices joined by one cat (the
    # engine's _Terms: four chunks; slices leaving ranges no slice read)
    ("cat_primitive", lambda x, y: lv.cat([x, y * 2.0, x, y], 1), [_r(2, 3), _r(2, 1, seed=1)]),
    # the LSTM recurrence: every slot of its output (states and gates) weighted by the objective
    (
        "lstm_scan",
        lambda xp, h, c, w: lv.Tensor.apply("lstm_scan", xp, h, c, w, reverse=False),
        [_r(3, 2, 12, seed=20), _r(2, 3, seed=21), _r(2, 3, seed=22), _r(12, 3, seed=23, low=-0.5, high=0.5)],
    ),
    (
        "lstm_scan_reverse",
        lambda xp, h, c, w: lv.Tensor.apply("lstm_scan", xp, h, c, w, reverse=True),
        [_r(3, 2, 8, seed=28), _r(2, 2, seed=29), _r(2, 2, seed=30), _r(8, 2, seed=31)],
    ),
    (
        "lstm_scan_one_step",
        lambda xp, h, c, w: lv.Tensor.apply("lstm_scan", xp, h, c, w, reverse=True),
        [_r(1, 2, 8, seed=24), _r(2, 2, seed=25), _r(2, 2, seed=26), _r(8, 2, seed=27)],
    ),
    (
        "gru_scan",
        lambda xp, h, w, b: lv.Tensor.apply("gru_scan", xp, h, w, b, reverse=False),
        [_r(3, 2, 9, seed=32), _r(2, 3, seed=33), _r(9, 3, seed=34, low=-0.5, high=0.5), _r(9, seed=35)],
    ),
    (
        "gru_scan_reverse",
        lambda xp, h, w, b: lv.Tensor.apply("gru_scan", xp, h, w, b, reverse=True),
        [_r(3, 2, 6, seed=36), _r(2, 2, seed=37), _r(6, 2, seed=38), _r(6, seed=39)],
    ),
    # the Elman recurrence, tanh and (reversed) relu
    (
        "rnn_scan",
        lambda xp, h, w: lv.Tensor.apply("rnn_scan", xp, h, w, reverse=False, nonlinearity="tanh"),
        [_r(3, 2, 3, seed=40), _r(2, 3, seed=41), _r(3, 3, seed=42, low=-0.5, high=0.5)],
    ),
    (
        "rnn_scan_relu_reverse",
        lambda xp, h, w: lv.Tensor.apply("rnn_scan", xp, h, w, reverse=True, nonlinearity="relu"),
        [_r(3, 2, 3, seed=43), _r(2, 3, seed=44), _r(3, 3, seed=45, low=-0.5, high=0.5)],
    ),
    # the recurrences over rows of different lengths (the optional lengths input): rows past
    # their length hold their state and pass its gradient through
    (
        "lstm_scan_lengths_reverse",
        lambda xp, h, c, w: lv.Tensor.apply("lstm_scan", xp, h, c, w, lv.tensor(np.array([3, 1])), reverse=True),
        [_r(3, 2, 8, seed=46), _r(2, 2, seed=47), _r(2, 2, seed=48), _r(8, 2, seed=49)],
    ),
    (
        "gru_scan_lengths",
        lambda xp, h, w, b: lv.Tensor.apply("gru_scan", xp, h, w, b, lv.tensor(np.array([2, 3])), reverse=False),
        [_r(3, 2, 6, seed=50), _r(2, 2, seed=51), _r(6, 2, seed=52), _r(6, seed=53)],
    ),
    (
        "rnn_scan_lengths",
        lambda xp, h, w: lv.Tensor.apply(
            "rnn_scan", xp, h, w, lv.tensor(np.array([1, 3])), reverse=False, nonlinearity="tanh"
        ),
        [_r(3, 2, 3, seed=54), _r(2, 3, seed=55), _r(3, 3, seed=56, low=-0.5, high=0.5)],
    ),
    ("chunk_gates", lambda x: (x.chunk(4, 1)[0].sigmoid() * x.chunk(4, 1)[2].tanh()).sum(1), [_r(2, 8)]),
    ("slices_with_gaps", lambda x: x[1:2].exp() + x[3:4] * x[4:5], [_r(6, 2)]),
    # matmul
    ("matmul_2d", lambda a, b: a @ b, [_r(2, 3), _r(3, 4, seed=1)]),
    ("matmul_batched_broadcast", lambda a, b: a @ b, [_r(2, 1, 2, 3), _r(3, 3, 2, seed=1)]),
    ("matmul_1d_2d", lambda a, b: a @ b, [_r(3), _r(3, 2, seed=1)]),
    ("matmul_2d_1d", lambda a, b: a @ b, [_r(2, 3), _r(3, seed=1)]),
    ("matmul_1d_1d", lambda a, b: a @ b, [_r(3), _r(3, seed=1)]),
    ("matmul_3d_1d", lambda a, b: a.matmul(b), [_r(2, 2, 3), _r(3, seed=1)]),
    # conv2d and conv_transpose2d (each VJP is written with the other and conv2d's weight gradient)
    ("conv2d_stride_pad", lambda x, w: F.conv2d(x, w, stride=2, padding=1), [_r(2, 3, 6, 5), _r(4, 3, 3, 3, seed=1)]),
    (
        "conv2d_groups_dilation",
        lambda x, w: F.conv2d(x, w, padding=(2, 0), dilation=2, groups=2),
        [_r(1, 4, 5, 6), _r(2, 2, 3, 2, seed=1)],
    ),
    (
        "conv2d_depthwise_stride_dilation",
        lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=3),
        [_r(2, 3, 5, 6), _r(3, 1, 3, 3, seed=1)],
    ),
    (
        "conv_transpose2d_stride_output_padding",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
        [_r(2, 3, 4, 3), _r(3, 2, 3, 3, seed=1)],
    ),
    (
        "conv_transpose2d_groups_dilation",
        lambda x, w: F.conv_transpose2d(x, w, stride=(1, 3), padding=(0, 2), dilation=2, groups=2),
        [_r(1, 4, 3, 4), _r(4, 3, 2, 3, seed=1)],
    ),
    # conv2d's weight gradient as a function of the input and the output gradient (its VJP:
    # double backward through a convolution)
    (
        "conv2d_weight_stride_groups",
        lambda x, g: lv.Tensor.apply(
            "conv2d_weight", x, g, kernel=(3, 2), stride=(2, 1), padding=(1, 1, 0, 2), dilation=(1, 2), groups=2
        ),
        [_r(2, 4, 5, 4), _r(2, 2, 3, 4, seed=1)],
    ),
    (
        "max_pool2d",
        lambda x: F.max_pool2d(x, 3, 2, 1),
        [np.random.default_rng(4).permutation(50).reshape(1, 2, 5, 5) / 10.0],
    ),
    # average pools: ceil_mode's clipped last window with the padding left out of the divisor,
    # divisor_override, uneven adaptive windows; their transposes through double backward
    (
        "avg_pool2d_ceil_exclude_pad",
        lambda x: F.avg_pool2d(x, (3, 2), (2, 3), 1, ceil_mode=True, count_include_pad=False),
        [_r(1, 2, 6, 7)],
    ),
    ("avg_pool2d_divisor_override", lambda x: F.avg_pool2d(x, 2, 1, 1, divisor_override=3), [_r(1, 2, 4, 3)]),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [_r(1, 2, 7, 5)]),
    ("avg_pool2d_double_backward", lambda x: _grad_of(lambda t: F.avg_pool2d(t, 3, 2, 1), x), [_r(1, 2, 5, 6)]),
    (
        "adaptive_avg_pool2d_double_backward",
        lambda x: _grad_of(lambda t: F.adaptive_avg_pool2d(t, (2, 3)), x),
        [_r(1, 2, 5, 7)],
    ),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 2)), [_distinct(1, 2, 7, 5)]),
    # index ops
    ("gather_dup", lambda x: x.gather(1, lv.tensor(_IDX_DUP)), [_r(2, 4)]),
    ("gather_dim0", lambda x: x.gather(0, lv.tensor(_IDX_DUP)), [_r(3, 3)]),
    ("index_select_dup", lambda x: x.index_select(0, lv.tensor([1, 1, 0])), [_r(2, 3)]),
    ("scatter_add", lambda b, s: b.scatter_add(1, lv.tensor(_IDX_DUP), s), [_r(2, 3), _r(2, 3, seed=1)]),
    # composites
    ("softmax", lambda x: F.softmax(x, -1), [_r(2, 4) * 2]),
    ("softmax_dim0", lambda x: x.softmax(0), [_r(3, 2) * 2]),
    ("log_softmax", lambda x: F.log_softmax(x, 1), [_r(2, 4) * 2]),
    ("cross_entropy", lambda x: F.cross_entropy(x, lv.tensor(_TARGET)), [_r(4, 5) * 2]),
    ("cross_entropy_ignore_index", lambda x: F.cross_entropy(x, lv.tensor(_TARGET_IGNORED)), [_r(4, 5) * 2]),
    (
        "cross_entropy_sum_smoothing",
        lambda x: F.cross_entropy(x, lv.tensor(_TARGET), reduction="sum", label_smoothing=0.2),
        [_r(4, 5) * 2],
    ),
    ("cross_entropy_none", lambda x: F.cross_entropy(x, lv.tensor(_TARGET), reduction="none"), [_r(4, 5)]),
    ("nll_loss", lambda x: F.nll_loss(x, lv.tensor(_TARGET_IGNORED)), [_r(4, 5)]),
    ("layer_norm", lambda x: F.layer_norm(x, (4,)), [_r(2, 4) * 2]),
    ("layer_norm_affine", lambda x, w, b: F.layer_norm(x, (4,), w, b), [_r(2, 4) * 2, _r(4, seed=1), _r(4, seed=2)]),
    ("gelu", lambda x: F.gelu(x), [_r(2, 3, low=-3, high=3)]),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [_r(2, 3, low=-3, high=3)]),
    ("silu", lambda x: F.silu(x), [_r(2, 3, low=-3, high=3)]),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.1), [_away_from_zero(2, 3)]),
    ("mse_loss", lambda x, y: F.mse_loss(x, y), [_r(2, 3), _r(2, 3, seed=1)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [_r(2, 3), _r(4, 3, seed=1), _r(4, seed=2)]),
    ("mlp", lambda x, w: (x @ w).tanh().sum(1).exp(), [_r(2, 3), _r(3, 2, seed=1)]),
    # trigonometry, rounding (zero gradient away from the steps), log1p / expm1, products
    ("sin", lambda x: x.sin(), [_r(2, 3, low=-3, high=3)]),
    ("cos", lambda x: x.cos(), [_r(2, 3, low=-3, high=3)]),
    ("floor", lambda x: x.floor() * x, [_r(2, 3, low=-3, high=3)]),
    ("round", lambda x: (x * 2.0).round() + x, [_r(2, 3, low=-3, high=3) + 0.13]),
    ("log1p", lambda x: x.log1p(), [_r(2, 3, low=-0.5, high=2)]),
    ("expm1", lambda x: x.expm1(), [_r(2, 3)]),
    # inverse trigonometric and hyperbolic functions, inside their domains (away from the poles)
    ("atan", lambda x: x.atan(), [_r(2, 3, low=-3, high=3)]),
    ("asin", lambda x: x.asin(), [_r(2, 3, low=-0.9, high=0.9)]),
    ("acos", lambda x: x.acos(), [_r(2, 3, low=-0.9, high=0.9)]),
    ("sinh", lambda x: x.sinh(), [_r(2, 3, low=-3, high=3)]),
    ("cosh", lambda x: x.cosh(), [_r(2, 3, low=-3, high=3)]),
    ("asinh", lambda x: x.asinh(), [_r(2, 3, low=-3, high=3)]),
    ("acosh", lambda x: x.acosh(), [_r(2, 3, low=1.2, high=4)]),
    ("atanh", lambda x: x.atanh(), [_r(2, 3, low=-0.9, high=0.9)]),
    ("atan2", lambda y, x: lv.atan2(y, x), [_r(2, 3), _away_from_zero(2, 3, seed=1)]),
    ("prod_dim", lambda x: x.prod(1), [_r(2, 3)]),
    ("prod_all_with_a_zero", lambda x: x.prod(), [np.array([[0.5, 0.0, -1.5], [1.2, 0.7, -0.9]])]),
    ("cumsum", lambda x: x.cumsum(1), [_r(2, 5)]),
    ("cumprod_with_a_zero", lambda x: x.cumprod(0), [np.array([[0.5, 1.1], [0.0, -0.7], [1.3, 2.0], [0.9, 0.0]])]),
    # values picked by the stable sort: the gradient goes back to where each value came from
    ("sort_values", lambda x: x.sort(1, descending=True).values, [_distinct(2, 4)]),
    ("topk_values", lambda x: x.topk(2, 0).values, [_distinct(4, 3)]),
    ("median_dim", lambda x: x.median(1).values, [_distinct(3, 5)]),
    # writes through __setitem__ (in place on a non-leaf): the old value's gradient where it is kept
    ("setitem_slice", lambda x, v: _set(x * 1.0, (slice(None), slice(0, 3, 2)), v), [_r(2, 4), _r(2, 2, seed=1)]),
    ("setitem_tensor", lambda x, v: _set(x * 1.0, lv.tensor([2, 0]), v), [_r(3, 2), _r(2, 2, seed=1)]),
    ("einsum_batched", lambda a, b: lv.einsum("bij,bkj->bik", a, b), [_r(2, 2, 3), _r(2, 4, 3, seed=1)]),
    ("diag_roll_flip", lambda x: x.diag(1).roll(1, 0).flip(1), [_r(3)]),
    ("vector_norm", lambda x: lv.linalg.vector_norm(x, 3, dim=1), [_away_from_zero(2, 3)]),
    # linear algebra (lazyvic/ops/linalg.py): sign-invariant functions of the factors whose signs
    # LAPACK chooses (squared singular vectors and eigenvectors), symmetric inputs built from x
    ("linalg_inv", lambda x: lv.linalg.inv(x), [_well_conditioned(2, 3, 3)]),
    ("linalg_det", lambda x: lv.linalg.det(x), [_well_conditioned(2, 3, 3)]),
    ("linalg_slogdet", lambda x: lv.linalg.slogdet(x).logabsdet, [_r(2, 3, 3)]),
    ("linalg_solve_vector_broadcast", lambda a, b: lv.linalg.solve(a, b), [_well_conditioned(2, 3, 3), _r(3, seed=1)]),
    ("linalg_cholesky", lambda x: lv.linalg.cholesky(_spd(x)), [_r(2, 3, 3)]),
    ("linalg_eigh", lambda x: _flat(*_squared_vectors(lv.linalg.eigh(x + x.mT))), [_r(2, 3, 3)]),
    ("linalg_svd_tall", lambda x: _flat(*_squared_vectors(lv.linalg.svd(x, full_matrices=False))), [_r(2, 4, 3)]),
    ("linalg_svd_wide", lambda x: _flat(*_squared_vectors(lv.linalg.svd(x, full_matrices=False))), [_r(3, 4)]),
    ("linalg_svdvals", lambda x: lv.linalg.svdvals(x), [_r(2, 4, 3)]),
    ("linalg_qr_tall", lambda x: _flat(*lv.linalg.qr(x)), [_r(2, 4, 3)]),
    ("linalg_qr_wide", lambda x: _flat(*lv.linalg.qr(x)), [_r(3, 4)]),
    ("linalg_pinv", lambda x: lv.linalg.pinv(x), [_r(2, 4, 3)]),
]


def _grad_of(pool, x):
    """The gradient of sum(pool(x) ** 3) with respect to x, as a differentiable function of x
    (records the pool's transpose, whose own VJP the finite differences then check; their
    evaluations, under no_grad, pass an x without gradient: its value is taken at a leaf)."""
    leaf = x if x.requires_grad else x.detach().requires_grad_()
    with lv.enable_grad():
        (g,) = lv.autograd.grad((pool(leaf) ** 3).sum(), leaf, create_graph=x.requires_grad)
    return g


def _set(y, index, value):
    y[index] = value
    return y


# Cases that also run through the compiler.
COMPILED = {
    "sin",
    "atan2",
    "cumprod_with_a_zero",
    "matmul_batched_broadcast",
    "conv2d_stride_pad",
    "conv_transpose2d_stride_output_padding",
    "conv2d_weight_stride_groups",
    "avg_pool2d_ceil_exclude_pad",
    "adaptive_avg_pool2d_double_backward",
    "getitem_steps_2d",
    "cat_pad",
    "cat_primitive",
    "chunk_gates",
    "lstm_scan",
    "gru_scan",
    "softmax",
    "cross_entropy_ignore_index",
    "layer_norm_affine",
    "gelu",
    "where",
    "amax_dim",
    "gather_dup",
    "linalg_eigh",
    "linalg_svd_tall",
}


def _params():
    for name, fn, arrays in VJP_CASES:
        yield pytest.param(fn, arrays, "never", id=f"never-{name}")
        if name in COMPILED:
            yield pytest.param(fn, arrays, "always", id=f"always-{name}")


@pytest.mark.parametrize("fn, arrays, mode", list(_params()), indirect=["mode"])
def test_vjp_matches_finite_differences(fn, arrays, mode):
    check_vjp(fn, *arrays)


def test_every_differentiable_primitive_has_a_vjp_case():
    """Each differentiable primitive is recorded by at least one VJP case, so its VJP is exercised."""
    from _oracle import pending_ops

    covered = set()
    for _, fn, arrays in VJP_CASES:
        leaves = [lv.tensor(a, requires_grad=True, dtype=lv.float64) for a in arrays]
        covered |= pending_ops(fn(*leaves))
    # round_float16/round_bfloat16 are step functions (finite differences see 0): their VJP, the
    # cotangent rounded as a cast to half and back rounds it, is checked in tests/test_amp.py.
    wanted = {name for name, op in OPS.items() if op.differentiable and op.vjp is not None}
    wanted -= {"round_float16", "round_bfloat16"}
    assert wanted - covered == set()
    assert all(op.vjp is not None for op in OPS.values() if op.differentiable and op.kind != "source")


# ================================================================= ties
def test_amax_and_max_split_the_gradient_among_ties():
    """amax/amin and max()/min() without dim split the gradient evenly among tied maxima (PyTorch's rule)."""
    a = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    x.amax(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    y = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    y.max().backward()
    np.testing.assert_allclose(y.grad.numpy(), [[0, 0.5, 0.5], [0, 0, 0]])
    z = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    z.amin(0).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [[1, 0, 0], [0, 1, 1]])


def test_max_with_dim_sends_the_gradient_to_the_returned_index():
    x = lv.tensor([[1.0, 3.0, 3.0]], dtype=lv.float64, requires_grad=True)
    x.max(1).values.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 1, 0]])


def test_gradients_at_kinks_follow_pytorch():
    """relu/abs at 0 get 0; maximum/minimum ties split 0.5/0.5; clamp on a bound keeps the gradient."""
    x = lv.tensor([-1.0, 0.0, 2.0], dtype=lv.float64, requires_grad=True)
    (x.relu() + x.abs()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 0.0, 2.0])
    a = lv.tensor([1.0, 2.0, 3.0], dtype=lv.float64, requires_grad=True)
    b = lv.tensor([1.0, 5.0, 0.0], dtype=lv.float64, requires_grad=True)
    (a.maximum(b) * 2.0 + a.minimum(b)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [1.5, 1.0, 2.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.5, 2.0, 1.0])
    c = lv.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], dtype=lv.float64, requires_grad=True)
    c.clamp(0.0, 1.0).sum().backward()
    np.testing.assert_allclose(c.grad.numpy(), [0, 1, 1, 1, 0])


# ======================================================== autograd mechanics
def test_backward_is_lazy():
    x = lv.tensor(_r(2, 3), requires_grad=True)
    before = metrics.snapshot()["traces"]
    (x.exp() * 2.0).sum().backward()
    assert x.grad is not None and x.grad.is_lazy
    assert metrics.snapshot()["traces"] == before
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(_r(2, 3).astype(np.float32)), rtol=1e-6)


def test_gradient_dtype_and_shape_follow_the_leaf():
    x = lv.tensor(_r(2, 3).astype(np.float32), requires_grad=True)
    (x.to(lv.float64) * lv.tensor(_r(2, 3, seed=5))).sum().backward()
    assert x.grad.dtype == lv.float32 and x.grad.shape == (2, 3)
    np.testing.assert_allclose(x.grad.numpy(), _r(2, 3, seed=5).astype(np.float32), rtol=1e-6)


def test_grad_accumulates_over_two_backward_calls():
    a = _r(2, 3)
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    for _ in range(2):
        (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * a)
    y = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    loss = (y.exp()).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(y.grad.numpy(), 2 * np.exp(a))


def test_second_backward_without_retain_graph_raises():
    x = lv.tensor(_r(3), dtype=lv.float64, requires_grad=True)
    loss = (x * 2.0).sum()
    loss.backward()
    with pytest.raises(AutogradError, match="second time"):
        loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])
    assert not loss.is_leaf and loss.grad_fn is not None  # the graph is freed, not forgotten


def test_zero_grad_between_steps():
    x = lv.tensor(_r(3), dtype=lv.float64, requires_grad=True)
    (x * 3.0).sum().backward()
    x.grad = None
    (x * 5.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0] * 3)


def test_shared_subexpression_and_reused_leaf():
    a = _r(3)
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    h = x.exp()
    (h * h + h + x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * a) + np.exp(a) + 1)


def test_detach_stops_the_gradient():
    a = _r(2, 3)
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), a)
    (x * d + d * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), a)


def test_no_grad_records_nothing():
    x = lv.tensor(_r(3), requires_grad=True)
    with lv.no_grad():
        assert not lv.is_grad_enabled()
        y = x * 2.0
        with lv.enable_grad():
            z = x * 3.0
    assert lv.is_grad_enabled()
    assert not y.requires_grad and y.is_leaf and y.grad_fn is None
    assert z.requires_grad and z.grad_fn == "mul"
    with pytest.raises(AutogradError):
        y.sum().backward()

    @lv.no_grad()
    def step(t):
        return t * 2.0

    assert not step(x).requires_grad
    lv.set_grad_enabled(False)
    try:
        assert not (x + 1.0).requires_grad
    finally:
        lv.set_grad_enabled(True)


def test_in_place_update_of_a_leaf():
    a = _r(3)
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    (x * x).sum().backward()
    with pytest.raises(RuntimeError):
        x -= 0.1
    with lv.no_grad():
        x -= 0.1 * x.grad
        x.grad = None
    assert x.requires_grad and x.is_leaf
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (a - 0.2 * a))


def test_integer_results_do_not_require_grad():
    x = lv.tensor(_r(3), requires_grad=True)
    assert not x.long().requires_grad
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    assert x.double().requires_grad


def test_only_leaves_get_grad():
    x = lv.tensor(_r(3), dtype=lv.float64, requires_grad=True)
    h = x * 2.0
    (h * h).sum().backward()
    assert h.grad is None and x.grad is not None


def test_backward_with_explicit_gradient():
    a, w = _r(2, 3), _r(2, 3, seed=4)
    x = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    x.exp().backward(lv.tensor(w))
    np.testing.assert_allclose(x.grad.numpy(), w * np.exp(a))
    y = lv.tensor(a, dtype=lv.float64, requires_grad=True)
    (y * 2.0).backward(w)  # array-likes are accepted
    np.testing.assert_allclose(y.grad.numpy(), 2 * w)


def test_backward_on_non_scalar_raises():
    x = lv.tensor(_r(2, 3), requires_grad=True)
    with pytest.raises(AutogradError, match=r"scalar.*\(2, 3\)"):
        x.exp().backward()
    with pytest.raises(AutogradError, match=r"\(3,\).*\(2, 3\)"):
        x.exp().backward(lv.ones(3))
    with pytest.raises(AutogradError, match="does not require grad"):
        lv.tensor(_r(3)).sum().backward()


def test_requires_grad_flags():
    x = lv.tensor([1.0, 2.0])
    assert not x.requires_grad and x.is_leaf
    assert x.requires_grad_() is x and x.requires_grad
    y = x * 2.0
    assert y.requires_grad and not y.is_leaf and y.grad_fn == "mul"
    assert lv.zeros(2, requires_grad=True).requires_grad
    assert lv.randn(2, requires_grad=True).requires_grad
    assert lv.full((2,), 1.5, requires_grad=True).requires_grad


def test_bias_gradient_over_many_rows_is_a_column_sum(mode):
    """A broadcast over >= 256 leading rows is differentiated as ones @ g (one BLAS product)."""
    rng = np.random.default_rng(3)
    b = lv.tensor(rng.standard_normal((1, 1, 24)).astype(np.float32), requires_grad=True)
    w = rng.standard_normal((16, 20, 24)).astype(np.float32)
    ((b.expand(16, 20, 24) * lv.tensor(w)).sum()).backward()
    assert b.grad.shape == (1, 1, 24)
    np.testing.assert_allclose(b.grad.numpy(), w.sum((0, 1), keepdims=True), rtol=1e-5, atol=1e-5)
    x = lv.tensor(rng.standard_normal((300, 5)), requires_grad=True)  # float64, through a bias add
    bias = lv.tensor(rng.standard_normal(5), requires_grad=True)
    ((x + bias) ** 2).sum().backward()
    np.testing.assert_allclose(bias.grad.numpy(), (2 * (x.numpy() + bias.numpy())).sum(0), rtol=1e-12)
