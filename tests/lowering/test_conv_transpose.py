"""The conv_transpose2d primitive (lazyvic/ops/conv_transpose.py): a product and col2im, the
input gradient of conv2d with no zeros inserted by the stride.

Checked against a float64 loop over the definition, compiled against interpreted bit for bit
(chunks of images included), its ONNX form against onnxruntime, and the backward graph of a
strided conv2d for what it computes."""

import numpy as np
import pytest
from _oracle import both_tiers, pending_ops

import lazyvic as lv
import lazyvic.nn.functional as F
from lazyvic.errors import ShapeError
from lazyvic.runtime.config import config


def _definition(x, w, stride, top_left, dilation, groups, out_hw):
    """out[n, g*Co/G + o, p*s + i*d - top, q*s + j*d - left] += x[n, g*Ci/G + c, p, q] * w[...]."""
    n, cin, h, wd = x.shape
    _, cog, kh, kw = w.shape
    out = np.zeros((n, cog * groups, *out_hw))
    for ci, o, i, j, p, q in np.ndindex(cin, cog, kh, kw, h, wd):
        y = p * stride[0] + i * dilation[0] - top_left[0]
        z = q * stride[1] + j * dilation[1] - top_left[1]
        if 0 <= y < out_hw[0] and 0 <= z < out_hw[1]:
            out[:, (ci // (cin // groups)) * cog + o, y, z] += x[:, ci, p, q].astype(np.float64) * w[ci, o, i, j]
    return out


CASES = [
    # (x shape, w shape, stride, (top, left), dilation, groups, out_hw)
    ((2, 4, 3, 4), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1, (6, 8)),  # PyTorch's output_padding 1
    ((1, 6, 4, 3), (6, 1, 2, 3), (1, 3), (0, 2), (2, 1), 3, (5, 7)),  # groups, dilation, crop
    ((3, 2, 2, 2), (2, 2, 3, 3), (3, 2), (-1, 0), (1, 2), 1, (9, 4)),  # window outside the result
    ((2, 3, 1, 1), (3, 4, 4, 4), (1, 1), (0, 0), (1, 1), 1, (4, 4)),  # DCGAN's first layer
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{k}" for k in range(len(CASES))])
def test_matches_the_definition_and_compiled_gives_the_interpreters_bits(case):
    xs, ws, stride, tl, dil, groups, out_hw = case
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    at = dict(stride=stride, padding=tl, dilation=dil, groups=groups, out_hw=out_hw)
    got = dict(
        zip(
            ("never", "always"),
            both_tiers(lambda: lv.Tensor.apply("conv_transpose2d", lv.tensor(x), lv.tensor(w), **at)),
        )
    )
    np.testing.assert_allclose(got["never"], _definition(x, w, stride, tl, dil, groups, out_hw), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["always"], got["never"])


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_chunks_of_images_give_the_same_bits(mode, monkeypatch):
    """Above CHUNK_BYTES the columns go a few images at a time (ops/conv.images_per_chunk)."""
    from lazyvic.ops import conv

    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((5, 3, 4, 3)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    at = dict(stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1, out_hw=(7, 5))
    whole = lv.Tensor.apply("conv_transpose2d", lv.tensor(x), lv.tensor(w), **at).numpy()
    monkeypatch.setattr(conv, "CHUNK_BYTES", 0)
    monkeypatch.setattr(conv, "CHUNK_COLUMNS", 2 * 12)
    assert conv.images_per_chunk(5, 18, 12, 4) == 2
    np.testing.assert_array_equal(lv.Tensor.apply("conv_transpose2d", lv.tensor(x), lv.tensor(w), **at).numpy(), whole)


def test_a_strided_conv2d_backward_inserts_no_zeros():
    """The input gradient of a stride-2 conv2d is one conv_transpose2d of the output gradient as
    it is (not a conv2d of it spread out with zeros), and the result matches the definition."""
    rng = np.random.default_rng(2)
    x = lv.tensor(rng.standard_normal((2, 3, 8, 8)), requires_grad=True)
    w = lv.tensor(rng.standard_normal((5, 3, 3, 3)), requires_grad=True)
    y = F.conv2d(x, w, stride=2, padding=1)
    g = rng.standard_normal(y.shape)
    (gx,) = lv.autograd.grad((y * lv.tensor(g)).sum(), [x])
    ops = pending_ops(gx)
    assert "conv_transpose2d" in ops and "conv2d" not in ops and "pad" not in ops
    expected = _definition(g, w.numpy(), (2, 2), (1, 1), (1, 1), 1, (8, 8))
    np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_exports_as_one_conv_transpose_node_that_onnxruntime_runs():
    """A window that starts inside the result and ends past it: pads at the start,
    output_padding at the end."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 4, 3, 3)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    at = dict(stride=(2, 2), padding=(1, 2), dilation=(1, 1), groups=2, out_hw=(7, 5))

    def fn(t):
        return lv.Tensor.apply("conv_transpose2d", t, lv.tensor(w), **at)

    model = lv.onnx.export(fn, x)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == ["ConvTranspose"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"input": x})[0], fn(lv.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_bad_operands_raise_shape_errors_naming_the_op():
    x, w = lv.zeros(1, 4, 3, 3), lv.zeros(3, 2, 3, 3)
    at = dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, out_hw=(5, 5))
    with pytest.raises(ShapeError, match=r"conv_transpose2d: input \(1, 4, 3, 3\) and weight \(3, 2, 3, 3\)"):
        lv.Tensor.apply("conv_transpose2d", x, w, **at)
    with pytest.raises(ShapeError, match="conv_transpose2d: invalid"):
        lv.Tensor.apply("conv_transpose2d", x, lv.zeros(4, 2, 3, 3), **{**at, "out_hw": (0, 5)})


DEPTHWISE = [
    # (x shape, kernel, stride, padding, dilation)
    ((2, 3, 7, 6), 3, 2, 1, 1),
    ((1, 4, 5, 5), 3, 1, 2, 2),  # taps that read padding only are left out
    ((2, 3, 9, 8), 3, (2, 1), (1, 2), (1, 2)),
    ((1, 2, 4, 4), 5, 3, 2, 1),
    ((2, 3, 6, 5), 3, 1, 1, 1),  # all 9 taps in one unrolled run per plane
    ((1, 3, 7, 7), 3, 2, 0, 1),  # odd width at stride 2: the column phases differ in length
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=[f"case{k}" for k in range(len(DEPTHWISE))])
def test_depthwise_conv2d_runs_directly_with_the_interpreters_bits(case):
    """groups == channels (MobileNet's depthwise layers): a direct kernel
    (lowering/cpu/direct_conv.py), compiled bits equal to the reference's, values to a loop."""
    xs, k, stride, padding, dilation = case
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal((xs[1], 1, k, k)).astype(np.float32)
    got = dict(
        zip(
            ("never", "always"),
            both_tiers(lambda: F.conv2d(lv.tensor(x), lv.tensor(w), None, stride, padding, dilation, xs[1])),
        )
    )
    np.testing.assert_array_equal(got["always"], got["never"])
    (sh, sw), (ph, pw), (dh, dw) = [v if isinstance(v, tuple) else (v, v) for v in (stride, padding, dilation)]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    expected = np.zeros(got["never"].shape)
    for n, c, y, z in np.ndindex(expected.shape):
        window = xp[n, c, y * sh : y * sh + dh * (k - 1) + 1 : dh, z * sw : z * sw + dw * (k - 1) + 1 : dw]
        expected[n, c, y, z] = (window * w[c, 0]).sum()
    np.testing.assert_allclose(got["never"], expected, rtol=1e-5, atol=1e-5)


DEPTHWISE_TRANSPOSE = [
    # (x shape, kernel, stride, (top, left), dilation, out_hw)
    ((2, 3, 4, 5), (3, 3), (2, 2), (1, 1), (1, 1), (8, 10)),  # a stride-2 depthwise layer's input gradient
    ((1, 4, 3, 3), (3, 3), (2, 2), (1, 1), (1, 1), (5, 5)),
    ((2, 2, 5, 4), (2, 3), (1, 3), (0, 2), (2, 1), (6, 9)),  # dilation, a crop, unequal strides
    ((1, 3, 3, 3), (5, 5), (2, 2), (2, 2), (1, 1), (6, 6)),  # EfficientNet's 5x5
    ((2, 2, 2, 2), (3, 3), (3, 2), (-1, 0), (1, 2), (9, 4)),  # windows outside the result
]


@pytest.mark.parametrize("case", DEPTHWISE_TRANSPOSE, ids=[f"case{k}" for k in range(len(DEPTHWISE_TRANSPOSE))])
def test_depthwise_conv_transpose_runs_directly_with_the_interpreters_bits(case, tmp_path, monkeypatch):
    """groups == channels, one output channel each (a depthwise layer's input gradient): a direct
    kernel (lowering/cpu/direct_conv.depthwise_transpose), serial and on threads, with the bits
    of the reference's products and col2im (zeros and -0.0 among the values), values to a loop."""
    from lazyvic.lowering.cpu import compile_trace, direct_conv, load
    from lazyvic.trace import cut

    monkeypatch.setattr(load, "other_load", lambda: False)
    xs, (kh, kw), stride, tl, dil, out_hw = case
    rng = np.random.default_rng(9)
    x = rng.choice(np.array([-1.5, -0.0, 0.0, 0.25, 2.0], np.float32), size=xs) * rng.standard_normal(xs).astype(
        np.float32
    )
    w = rng.standard_normal((xs[1], 1, kh, kw)).astype(np.float32)
    w[0, 0, 0, 0] = -0.0
    at = dict(stride=stride, padding=tl, dilation=dil, groups=xs[1], out_hw=out_hw)
    interpreted, compiled = both_tiers(lambda: lv.Tensor.apply("conv_transpose2d", lv.tensor(x), lv.tensor(w), **at))
    np.testing.assert_array_equal(compiled, interpreted)
    np.testing.assert_array_equal(np.signbit(compiled), np.signbit(interpreted))
    np.testing.assert_allclose(interpreted, _definition(x, w, stride, tl, dil, xs[1], out_hw), rtol=1e-5, atol=1e-5)
    runner, parallel = direct_conv.DepthwiseTranspose(), np.empty_like(interpreted)
    runner.team = True
    monkeypatch.setattr(load, "PARALLEL_MIN_ELEMENTS", 1)  # the parallel form at these small sizes
    runner(x, w, parallel, *stride, *tl, *dil)
    np.testing.assert_array_equal(parallel, interpreted)
    (ranges,) = runner.ranges.values()  # the taps' input ranges, ops/conv_transpose.tap_range's
    direct_conv.depthwise_transpose_parallel(x, w, parallel, *ranges, *stride, *tl, *dil, 2)
    np.testing.assert_array_equal(parallel, interpreted)
    node = lv.Tensor.apply("conv_transpose2d", lv.tensor(x), lv.tensor(w), **at)._node
    plan = compile_trace(cut([node])[0], cache_dir=tmp_path)
    assert [s.name.split("(")[0] for s in plan.steps if "conv" in s.name] == ["depthwise_conv_transpose2d"]


def test_depthwise_steps_are_chosen_for_depthwise_layers_only(tmp_path):
    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.trace import cut

    rng = np.random.default_rng(5)
    x = lv.tensor(rng.standard_normal((1, 4, 6, 6)).astype(np.float32))
    depthwise = F.conv2d(x, lv.tensor(rng.standard_normal((4, 1, 3, 3)).astype(np.float32)), padding=1, groups=4)
    multiplied = F.conv2d(x, lv.tensor(rng.standard_normal((8, 1, 3, 3)).astype(np.float32)), padding=1, groups=4)
    trace = cut([depthwise._node, multiplied._node])[0]
    plan = compile_trace(trace, cache_dir=tmp_path)
    assert [s.name.split("(")[0] for s in plan.steps if "conv" in s.name] == ["depthwise_conv2d", "conv2d"]


@pytest.mark.parametrize("shape, groups", [((3, 6, 2, 3), 1), ((2, 6, 4, 4), 3), ((3, 4, 1, 1), 1)])
def test_1x1_convolutions_are_products_per_image_with_the_interpreters_bits(shape, groups, tmp_path):
    """Stride 1, no padding, planes of 4 pixels or more: one product per image and group (no
    im2col); a 1x1 plane keeps im2col's single product. Compiled bits equal the reference's."""
    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.trace import cut

    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((6, shape[1] // groups, 1, 1)).astype(np.float32)
    got = {}
    for mode in ("never", "always"):
        prev, config.compile = config.compile, mode
        try:
            got[mode] = F.conv2d(lv.tensor(x), lv.tensor(w), groups=groups).numpy()
        finally:
            config.compile = prev
    np.testing.assert_array_equal(got["always"], got["never"])
    xg = x.astype(np.float64).reshape(shape[0], groups, shape[1] // groups, -1)
    expected = np.einsum("goc,ngcp->ngop", w.reshape(groups, 6 // groups, -1), xg).reshape(got["never"].shape)
    np.testing.assert_allclose(got["never"], expected, rtol=1e-5, atol=1e-5)
    trace = cut([F.conv2d(lv.tensor(x), lv.tensor(w), groups=groups)._node])[0]
    names = [s.name for s in compile_trace(trace, cache_dir=tmp_path).steps]
    assert any(n.startswith("conv2d_1x1" if shape[2] * shape[3] >= 4 else "conv2d(") for n in names), names


def test_the_plans_memory_report_counts_the_convolution_scratch(tmp_path):
    """im2col columns (C*kH*kW, N*oH*oW), the product before its transpose (O, N*oH*oW) and the
    zero-bordered input (N, C, H + 2, 1, W + 2): counted in the plan's scratch and peak."""
    from lazyvic.lowering.cpu import compile_trace
    from lazyvic.trace import cut

    x, w = lv.zeros(2, 3, 5, 4), lv.zeros(6, 3, 3, 3)
    trace = cut([F.conv2d(x, w, padding=1)._node])[0]
    memory = compile_trace(trace, cache_dir=tmp_path).memory.as_dict()
    columns, product, padded = 27 * 2 * 20, 6 * 2 * 20, 2 * 3 * 7 * 6
    assert memory["scratch"] == 4 * (columns + product + padded)
    assert memory["peak"] == sum(memory[k] for k in ("inputs", "parameters", "outputs", "temporaries", "scratch"))


@pytest.mark.parametrize("mode", ["never", "always"], indirect=True)
def test_weight_gradient_of_an_empty_batch_is_zero(mode):
    """conv2d_weight over no image (a batch of 0): no chunk is multiplied, the gradient is zero
    (not the accumulator's uninitialized memory); also for a strided, non-contiguous gradient."""
    w = lv.tensor(np.ones((4, 3, 3, 3), np.float32), requires_grad=True)
    F.conv2d(lv.zeros(0, 3, 5, 5), w, padding=1).sum().backward()
    assert w.grad.shape == (4, 3, 3, 3) and not w.grad.numpy().any()
    g = lv.tensor(np.arange(2 * 5 * 4 * 3, dtype=np.float32).reshape(2, 5, 3, 4)).permute(0, 1, 3, 2)[:, 1:]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 3)).astype(np.float32)
    at = dict(kernel=(1, 1), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    got = lv.Tensor.apply("conv2d_weight", lv.tensor(x), g, **at).numpy()
    want = np.einsum("nchw,nohw->oc", x.astype(np.float64), g.numpy().astype(np.float64))
    np.testing.assert_allclose(got[:, :, 0, 0], want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "shape, out_channels, groups",
    [((2, 32, 16, 16), 64, 1), ((1, 64, 32, 32), 16, 1), ((1, 8, 16, 16), 4, 4)],
    ids=["row_pieces", "column_pieces", "one_channel_groups_gemv"],
)
def test_1x1_products_in_pieces_on_threads_keep_the_interpreters_bits(
    shape, out_channels, groups, tmp_path, monkeypatch
):
    """A 1x1 convolution's products split into pieces (ops/blas.product_pieces: by rows, by
    columns) run on Numba's threads in a plan whose BLAS is single-threaded
    (lowering/cpu/team.py): bits equal to the NumPy reference's pieces, and to the same pieces
    run on one thread; values to float64. One output channel per group: gemv calls."""
    from lazyvic.lowering.cpu import compile_trace, load
    from lazyvic.lowering.cpu.team import Team

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine
    from lazyvic.ops import conv
    from lazyvic.ops.blas import MAX_PIECES, product_pieces
    from lazyvic.trace import cut

    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((out_channels, shape[1] // groups, 1, 1)).astype(np.float32)
    interpreted, compiled = both_tiers(lambda: F.conv2d(lv.tensor(x), lv.tensor(w), groups=groups))
    np.testing.assert_array_equal(compiled, interpreted)
    xg = x.astype(np.float64).reshape(shape[0], groups, shape[1] // groups, -1)
    expected = np.einsum("goc,ngcp->ngop", w.reshape(groups, out_channels // groups, -1), xg)
    np.testing.assert_allclose(interpreted, expected.reshape(interpreted.shape), rtol=1e-5, atol=1e-5)

    plan = compile_trace(cut([F.conv2d(lv.tensor(x), lv.tensor(w), groups=groups)._node])[0], cache_dir=tmp_path)
    (step,) = [s for s in plan.steps if s.name.startswith("conv2d_1x1")]
    runner = step.args[1]
    assert isinstance(runner, Team) and runner.team and plan.team and plan.blas_threads == 1
    m, k, n = out_channels // groups, shape[1] // groups, shape[2] * shape[3]
    most = max(1, MAX_PIECES // (shape[0] * groups))  # pieces per product (ops/conv.pointwise_products)
    if groups == 1:
        assert len(product_pieces(m, n, k, most)) > 1
    out = {}
    for team in (True, False):
        runner.team = team
        out[team] = np.empty(interpreted.shape, np.float32)
        step.kernel(x, w, out[team], groups, runner)
    table = next(iter(runner.tables.values()))
    assert table is not None and len(table) == shape[0] * groups * len(product_pieces(m, n, k, most))
    np.testing.assert_array_equal(out[True], interpreted)
    np.testing.assert_array_equal(out[False], interpreted)
    one = np.empty_like(out[True])
    for i in range(shape[0]):  # the pieces' bits are not one product's: the reference runs pieces too
        conv.pointwise_product(x[i : i + 1], w, one[i : i + 1], groups)
    np.testing.assert_array_equal(one, interpreted)


def test_product_pieces_tile_the_output_by_the_shape_alone():
    from lazyvic.ops.blas import MAX_PIECES, PIECE_WORK, product_pieces

    for m, n, k in [(576, 196, 96), (16, 1024, 64), (960, 49, 160), (8, 8, 8), (24, 3136, 144), (3, 5000, 300)]:
        pieces = product_pieces(m, n, k)
        cover = np.zeros((m, n), np.int64)
        for r0, r1, c0, c1 in pieces:
            cover[r0:r1, c0:c1] += 1
        assert (cover == 1).all(), (m, n, k)
        count = len(pieces)
        assert count <= MAX_PIECES and (count == 1 or m * n * k >= count * PIECE_WORK), (m, n, k, count)
    assert len(product_pieces(576, 196, 96)) == 8 and product_pieces(576, 196, 96)[0][2:] == (0, 196)
    assert len(product_pieces(16, 1024, 64)) == 4 and product_pieces(16, 1024, 64)[0][:2] == (0, 16)
    assert product_pieces(8, 8, 8) == [(0, 8, 0, 8)]


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_on_threads_keeps_the_bits(stride, monkeypatch):
    """The depthwise kernel's parallel form (lowering/cpu/direct_conv.depthwise_parallel: each
    thread a share of the planes) gives the serial kernel's bits, and compiled plans use it when
    the output is large enough, with the interpreter's bits."""
    from lazyvic.lowering.cpu import direct_conv, load

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 24, 40, 40)).astype(np.float32)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    interpreted, compiled = both_tiers(lambda: F.conv2d(lv.tensor(x), lv.tensor(w), None, stride, 1, 1, 24))
    assert interpreted.size >= load.PARALLEL_MIN_ELEMENTS
    np.testing.assert_array_equal(compiled, interpreted)
    live = tuple(np.arange(3, dtype=np.int64) for _ in range(2))
    args = (*live, stride, stride, 1, 1, 1, 1)
    serial, parallel = np.empty_like(interpreted), np.empty_like(interpreted)
    direct_conv.depthwise(x, w, serial, *args)
    direct_conv.depthwise_parallel(x, w, parallel, *args, 2)
    np.testing.assert_array_equal(serial, interpreted)
    np.testing.assert_array_equal(parallel, interpreted)


def test_a_depthwise_plan_on_threads_counts_scratch_per_thread(tmp_path):
    """A plan without BLAS products runs its depthwise kernel on Numba's threads, each with a
    padded plane and accumulator of its own: the memory report counts one set per thread."""
    import numba

    from lazyvic.lowering.cpu import compile_trace, direct_conv
    from lazyvic.trace import cut

    x, w = lv.zeros(2, 24, 40, 40), lv.zeros(24, 1, 3, 3)
    plan = compile_trace(cut([F.conv2d(x, w, None, 1, 1, 1, 24)._node])[0], cache_dir=tmp_path)
    (step,) = [s for s in plan.steps if s.name.startswith("depthwise_conv2d")]
    assert plan.team and step.kernel.team
    at = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1)}
    per_set = direct_conv.depthwise_scratch((2, 24, 40, 40), (24, 1, 3, 3), (2, 24, 40, 40), at)
    assert plan.memory.as_dict()["scratch"] == 4 * per_set * numba.config.NUMBA_NUM_THREADS


def test_copies_of_convolution_steps_on_threads_keep_the_interpreters_bits(monkeypatch):
    """In a plan whose products run on Numba's threads, the zero padding, im2col and col2im
    copies run there too (lowering/cpu/im2col.py's parallel forms, each thread a share of the
    planes, rows or output channels): a strided conv2d's output and both gradients keep the
    interpreter's bits, and each parallel copy ran."""
    from lazyvic.lowering.cpu import im2col as kernels
    from lazyvic.lowering.cpu import load

    monkeypatch.setattr(load, "other_load", lambda: False)  # as on a quiet machine (pytest -n 2 is not)
    ran = {}
    for name in ("pad_into_parallel", "im2col_parallel", "col2im_parallel"):
        fn = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _fn=fn, _name=name: (ran.__setitem__(_name, True), _fn(*a))[1])
    rng = np.random.default_rng(9)
    x0 = rng.standard_normal((2, 8, 32, 32)).astype(np.float32)
    w0 = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    r = rng.standard_normal((2, 16, 16, 16)).astype(np.float32)

    def grads():
        x, w = lv.tensor(x0, requires_grad=True), lv.tensor(w0, requires_grad=True)
        y = F.conv2d(x, w, None, 2, 1)
        (y * lv.tensor(r)).sum().backward()
        return y.numpy(), x.grad.numpy(), w.grad.numpy()

    got = {}
    for mode in ("never", "always"):
        prev, config.compile = config.compile, mode
        try:
            got[mode] = grads()
        finally:
            config.compile = prev
    for a, b in zip(got["always"], got["never"]):
        np.testing.assert_array_equal(a, b)
    assert set(ran) == {"pad_into_parallel", "im2col_parallel", "col2im_parallel"}
    x64 = np.pad(x0.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.einsum("ncpiqj,ocij->nopq", _windows(x64, 3, 2, 16), w0.astype(np.float64))
    np.testing.assert_allclose(got["never"][0], expected, rtol=1e-4, atol=1e-4)


def _windows(xp, k, s, out):
    """(N, C, out, k, out, k) windows of the padded input xp at stride s."""
    n, c = xp.shape[:2]
    idx = np.arange(out)[:, None] * s + np.arange(k)[None, :]
    return xp[:, :, idx[:, :, None, None], idx[None, None, :, :]].reshape(n, c, out, k, out, k)


def test_steps_leave_threads_when_other_processes_are_busy(monkeypatch):
    """lowering/cpu/load.py: other processes' CPU time is all cores' busy time less this process's
    own; at half a core or more the steps run their shares on the calling thread (the same bits)."""
    from lazyvic.lowering.cpu import load

    samples = iter([(0.0, 10.0, 5.0), (1.0, 11.9, 6.0), (2.0, 12.2, 6.9), (3.0, 12.2, 6.9)])
    clock = iter([10.0, 10.3, 10.6, 10.65])
    probe = load._OtherLoad()
    monkeypatch.setattr(probe, "_sample", lambda: next(samples))
    monkeypatch.setattr(load.time, "monotonic", lambda: next(clock))
    assert probe() is False  # the first sample: nothing to compare yet
    assert probe() is True  # 1.9 busy core-seconds in 1 s, 1.0 of them this process's: 0.9 others
    assert probe() is False  # 0.3 busy, 0.9 ours: none others
    assert probe() is False  # within SAMPLE_S of the last sample: the same answer
    monkeypatch.setattr(load, "other_load", lambda: True)
    assert load.on_team(True) is False
    monkeypatch.setattr(load, "other_load", lambda: False)
    assert load.on_team(True) is True and load.on_team(False) is False
    no_proc = load._OtherLoad()
    monkeypatch.setattr(no_proc, "_sample", lambda: None)
    monkeypatch.setattr(load.time, "monotonic", lambda: 100.0)
    assert no_proc() is False
