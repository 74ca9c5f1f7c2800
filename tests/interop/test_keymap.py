"""lazyvic.interop.keymap.remap (renames, prefixes, transforms, collisions, strict mode) and
the validation in Module.load_state_dict that a remapped checkpoint goes through."""

import re
from collections import OrderedDict

import numpy as np
import pytest

import lazyvic
from lazyvic import nn
from lazyvic.errors import CheckpointError, ShapeError
from lazyvic.interop.keymap import GPT2_CONV1D_WEIGHTS, astype, remap, reshape, transpose
from lazyvic.models import TinyGPT
from lazyvic.runtime.config import config


def _arrays(*keys, shape=(2, 3)):
    rng = np.random.default_rng(0)
    return OrderedDict((k, rng.standard_normal(shape).astype(np.float32)) for k in keys)


# ------------------------------------------------------------------ renames
def test_rules_with_groups_keep_order_and_values():
    sd = _arrays("layers.0.fc.weight", "layers.1.fc.weight", "head.weight")
    out = remap(sd, rules=[(r"^layers\.(\d+)\.fc\.", r"blocks.\1.linear.")])
    assert isinstance(out, OrderedDict)
    assert list(out) == ["blocks.0.linear.weight", "blocks.1.linear.weight", "head.weight"]
    for old, new in zip(sd, out):
        assert out[new] is sd[old]  # untransformed values pass through as the same objects


def test_rules_apply_in_order_each_seeing_the_previous_output():
    sd = _arrays("encoder.layer.3.w")
    out = remap(sd, rules=[(r"^encoder\.", "enc."), (r"^enc\.layer\.(\d+)", r"h.\1"), (r"\.w$", ".weight")])
    assert list(out) == ["h.3.weight"]


def test_rule_substitutes_every_occurrence():
    out = remap(_arrays("a_b_c"), rules=[("_", ".")])
    assert list(out) == ["a.b.c"]


def test_input_is_not_modified():
    sd = _arrays("module.fc.weight", "module.fc.bias")
    before = {k: v.copy() for k, v in sd.items()}
    remap(sd, strip_prefix="module.", transforms={r"fc\.weight": transpose})
    assert list(sd) == list(before)
    for k in sd:
        np.testing.assert_array_equal(sd[k], before[k])


# ----------------------------------------------------------------- prefixes
def test_strip_dataparallel_prefix():
    sd = _arrays("module.fc.weight", "module.fc.bias", "head.module.x")
    out = remap(sd, strip_prefix="module.")
    # Only a leading prefix is removed; a key without it is left alone.
    assert list(out) == ["fc.weight", "fc.bias", "head.module.x"]


def test_strip_prefix_tuple_applies_each_in_order():
    sd = _arrays("_orig_mod.module.fc.weight", "module.fc.bias", "_orig_mod.head.weight", "other")
    out = remap(sd, strip_prefix=("_orig_mod.", "module."))
    assert list(out) == ["fc.weight", "fc.bias", "head.weight", "other"]


def test_strip_prefix_comes_before_rules():
    out = remap(_arrays("module.layers.0.w"), strip_prefix="module.", rules=[(r"^layers\.", "h.")])
    assert list(out) == ["h.0.w"]


# --------------------------------------------------------------- transforms
def test_transform_on_numpy_values_stays_numpy():
    sd = _arrays("fc.weight", "fc.bias")
    out = remap(sd, transforms={r"fc\.weight": transpose})
    assert isinstance(out["fc.weight"], np.ndarray) and out["fc.weight"].shape == (3, 2)
    np.testing.assert_array_equal(out["fc.weight"], sd["fc.weight"].T)
    assert out["fc.weight"].flags.c_contiguous
    assert out["fc.bias"] is sd["fc.bias"]


def test_transform_on_tensors_returns_tensors():
    sd = OrderedDict((k, lazyvic.tensor(v)) for k, v in _arrays("c_attn.weight", "c_attn.bias").items())
    out = remap(sd, transforms={r".*\.weight": transpose})
    w = out["c_attn.weight"]
    assert isinstance(w, lazyvic.Tensor) and w.shape == (3, 2) and w.dtype is lazyvic.float32
    np.testing.assert_array_equal(w.numpy(), sd["c_attn.weight"].numpy().T)
    assert out["c_attn.bias"] is sd["c_attn.bias"]


def test_transform_may_return_a_tensor_and_type_is_kept():
    sd = OrderedDict(a=np.ones((2, 3), np.float32), b=lazyvic.ones(2, 3))
    out = remap(sd, transforms={"a|b": lambda x: lazyvic.tensor(x) * 2})
    assert isinstance(out["a"], np.ndarray) and isinstance(out["b"], lazyvic.Tensor)
    np.testing.assert_array_equal(out["a"], np.full((2, 3), 2, np.float32))
    np.testing.assert_array_equal(out["b"].numpy(), np.full((2, 3), 2, np.float32))


def test_transform_pattern_is_fullmatched_against_the_renamed_key():
    sd = _arrays("old.weight", "old.weight_g")
    out = remap(sd, rules=[(r"^old\.", "new.")], transforms={r"new\.weight": transpose})
    assert out["new.weight"].shape == (3, 2)  # matched after renaming
    assert out["new.weight_g"].shape == (2, 3)  # fullmatch: a prefix match is not enough
    with pytest.raises(CheckpointError, match=re.escape(r"transform 'old\.weight' (transpose)")):
        remap(sd, rules=[(r"^old\.", "new.")], transforms={r"old\.weight": transpose}, strict=True)


def test_several_transforms_apply_in_dict_order():
    sd = OrderedDict(w=np.arange(6, dtype=np.float64).reshape(1, 6))
    out = remap(sd, transforms={"w": reshape(2, 3), ".*": transpose})
    np.testing.assert_array_equal(out["w"], np.arange(6.0).reshape(2, 3).T)


def test_astype_and_reshape():
    sd = OrderedDict(w=np.ones((2, 2), np.float16), b=np.ones((1, 4), np.float32))
    out = remap(sd, transforms={"w": astype(np.float32), "b": reshape(-1)})
    assert out["w"].dtype == np.float32 and out["b"].shape == (4,)
    assert astype(np.float32).__name__ == "astype(float32)"


def test_failing_transform_names_the_key():
    sd = OrderedDict([("module.fc.bias", np.zeros(3, np.float32))])
    with pytest.raises(CheckpointError, match=r"transpose failed on 'module\.fc\.bias' \(renamed 'fc\.bias'\)") as e:
        remap(sd, strip_prefix="module.", transforms={r".*": transpose})
    assert isinstance(e.value.__cause__, ShapeError)
    with pytest.raises(CheckpointError, match=r"reshape\(5,\)"):
        remap(sd, transforms={r".*": reshape(5)})


def test_transpose_rejects_non_2d():
    with pytest.raises(ShapeError, match=r"2-D.*\(2, 2, 2\)"):
        transpose(np.zeros((2, 2, 2)))


# --------------------------------------------------------------------- drop
def test_drop_removes_matching_original_keys():
    sd = _arrays("h.0.attn.bias", "h.0.attn.masked_bias", "h.0.attn.c_attn.bias", "h.0.attn.c_attn.weight")
    out = remap(sd, drop=[r".*\.attn\.(masked_)?bias"])
    assert list(out) == ["h.0.attn.c_attn.bias", "h.0.attn.c_attn.weight"]


def test_dropped_keys_do_not_collide():
    sd = _arrays("module.fc.weight", "fc.weight")
    out = remap(sd, strip_prefix="module.", drop=[r"fc\.weight"])
    assert list(out) == ["fc.weight"] and out["fc.weight"] is sd["module.fc.weight"]


# --------------------------------------------------------------- collisions
def test_collision_names_both_keys():
    sd = _arrays("encoder.fc.weight", "decoder.fc.weight")
    with pytest.raises(
        CheckpointError, match=r"'encoder\.fc\.weight' and 'decoder\.fc\.weight' both map to 'fc\.weight'"
    ):
        remap(sd, rules=[(r"^(encoder|decoder)\.", "")])


def test_collision_from_prefix_stripping():
    sd = _arrays("fc.weight", "module.fc.weight")
    with pytest.raises(CheckpointError, match=r"'fc\.weight' and 'module\.fc\.weight'"):
        remap(sd, strip_prefix="module.")


# ------------------------------------------------------------------- strict
def test_strict_names_a_rule_that_matches_nothing():
    sd = _arrays("fc.weight")
    assert list(remap(sd, rules=[(r"^layers\.", "h.")])) == ["fc.weight"]  # not strict: silently unused
    with pytest.raises(CheckpointError, match=re.escape(r"rule '^layers\.' -> 'h.'")) as e:
        remap(sd, rules=[(r"^fc\.", "linear."), (r"^layers\.", "h.")], strict=True)
    assert "^fc" not in str(e.value)  # only the unused rule is named


def test_strict_names_every_unused_transform_and_drop():
    sd = _arrays("fc.weight")
    with pytest.raises(CheckpointError) as e:
        remap(sd, transforms={r"proj\.weight": transpose}, drop=[r"mask"], strict=True)
    msg = str(e.value)
    assert r"transform 'proj\.weight' (transpose)" in msg and "drop 'mask'" in msg


def test_strict_passes_when_everything_is_used_and_ignores_prefixes():
    sd = _arrays("module.fc.weight", "module.mask")
    out = remap(
        sd,
        strip_prefix=("_orig_mod.", "module."),
        rules=[(r"^fc\.", "linear.")],
        transforms={r"linear\.weight": transpose},
        drop=[r".*mask"],
        strict=True,
    )
    assert list(out) == ["linear.weight"] and out["linear.weight"].shape == (3, 2)


# ------------------------------------------ a realistic case: GPT-2 names and Conv1D weights
def _hf_gpt2_style(sd, n_layer: int, block_size: int, layout: str):
    """TinyGPT's state_dict as Hugging Face GPT-2 saves it: Conv1D (in, out) weights and
    causal-mask buffers, values as NumPy arrays (as ``lazyvic.interop.torch.load(...,
    as_numpy=True)`` gives). ``layout`` "GPT2LMHeadModel": our (nanoGPT's) names;
    "DataParallel(GPT2Model)": no ``transformer.``, everything under ``module.``."""
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    body, prefix = ("transformer.", "") if layout == "GPT2LMHeadModel" else ("", "module.")
    hf = OrderedDict()
    for k, v in sd.items():
        a = v.numpy().copy()
        if k.endswith(conv1d):
            a = np.ascontiguousarray(a.T)
        hf[prefix + k.replace("transformer.", body, 1)] = a
    for i in range(n_layer):
        hf[f"{prefix}{body}h.{i}.attn.bias"] = np.tril(np.ones((block_size, block_size), np.float32))[None, None]
        hf[f"{prefix}{body}h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    return hf


REMAP_HF = {  # the remap arguments for each layout, as in keymap's docstring
    "GPT2LMHeadModel": dict(),
    "DataParallel(GPT2Model)": dict(strip_prefix="module.", rules=[(r"^(wte|wpe|h|ln_f)\.", r"transformer.\1.")]),
}


def test_gpt2_conv1d_pattern():
    for k in (
        "h.0.attn.c_attn.weight",
        "transformer.h.11.mlp.c_proj.weight",
        "h.3.attn.c_proj.weight",
        "transformer.h.1.mlp.c_fc.weight",
    ):
        assert re.fullmatch(GPT2_CONV1D_WEIGHTS, k), k
    for k in (
        "h.0.attn.c_attn.bias",
        "transformer.wte.weight",
        "lm_head.weight",
        "h.0.ln_1.weight",
        "transformer.h.0.attn.bias",
    ):
        assert not re.fullmatch(GPT2_CONV1D_WEIGHTS, k), k


@pytest.fixture
def deterministic():
    """Compile every plan at first sight: in the default "hot" mode a plan's first run is
    interpreted, and its last bits can differ from the compiled runs that follow."""
    prev = config.deterministic
    lazyvic.use_deterministic_algorithms(True)
    yield
    config.deterministic = prev


@pytest.mark.parametrize("layout", list(REMAP_HF))
def test_tinygpt_from_hf_gpt2_style_checkpoint_is_bit_identical(deterministic, layout):
    cfg = dict(vocab_size=65, d_model=32, n_layer=2, n_head=2, block_size=16)
    lazyvic.manual_seed(1)
    src = TinyGPT(**cfg)
    hf = _hf_gpt2_style(src.state_dict(), cfg["n_layer"], cfg["block_size"], layout)
    c_attn = "transformer.h.0.attn.c_attn.weight" if layout == "GPT2LMHeadModel" else "module.h.0.attn.c_attn.weight"
    assert hf[c_attn].shape == (32, 96)  # Conv1D: (in, out)

    sd = remap(
        hf,
        drop=[r".*\.attn\.(masked_)?bias"],
        transforms={GPT2_CONV1D_WEIGHTS: transpose},
        strict=True,
        **REMAP_HF[layout],
    )
    assert list(sd) == list(src.state_dict())
    assert sd["transformer.h.1.mlp.c_fc.weight"].shape == (128, 32)

    lazyvic.manual_seed(2)
    dst = TinyGPT(**cfg)
    idx = lazyvic.from_numpy(np.random.default_rng(0).integers(0, 65, (2, 16)))
    src.eval()
    dst.eval()
    with lazyvic.no_grad():
        before = dst(idx).numpy().copy()
        assert dst.load_state_dict(sd) == ([], [])
        expected, got = src(idx).numpy(), dst(idx).numpy()
    assert not np.array_equal(before, expected)  # the fresh model really was different
    np.testing.assert_array_equal(got, expected)


def test_tinygpt_roundtrip_with_tensor_values(deterministic):
    cfg = dict(vocab_size=65, d_model=32, n_layer=1, n_head=2, block_size=8)
    lazyvic.manual_seed(3)
    src = TinyGPT(**cfg)
    # The forward direction with remap itself: Linear (out, in) -> Conv1D (in, out), renamed.
    exported = remap(
        src.state_dict(), rules=[(r"^transformer\.", "")], transforms={GPT2_CONV1D_WEIGHTS: transpose}, strict=True
    )
    assert all(isinstance(v, lazyvic.Tensor) for v in exported.values())
    assert exported["h.0.attn.c_attn.weight"].shape == (32, 96)
    back = remap(
        exported,
        rules=[(r"^(wte|wpe|h|ln_f)\.", r"transformer.\1.")],
        transforms={GPT2_CONV1D_WEIGHTS: transpose},
        strict=True,
    )
    dst = TinyGPT(**cfg)
    dst.load_state_dict(back)
    idx = lazyvic.from_numpy(np.arange(8).reshape(1, 8))
    with lazyvic.no_grad():
        np.testing.assert_array_equal(dst(idx).numpy(), src(idx).numpy())


# ----------------------------------------- Module.load_state_dict: validate first, then assign
def _mlp():
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _values(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_load_state_dict_lists_all_problems_with_shapes_and_assigns_nothing():
    model = _mlp()
    before = _values(model)
    bad = OrderedDict(
        [
            ("0.weight", np.ones((3, 4), np.float32)),  # fine, but must not be assigned either
            ("0.bias", np.ones(5, np.float32)),  # shape mismatch
            ("2.weight", np.ones((2, 3), np.float32)),
            # "2.bias" missing
            ("module.extra", np.ones((7, 1), np.float32)),  # unexpected
        ]
    )
    with pytest.raises(CheckpointError) as e:
        model.load_state_dict(bad)
    msg = str(e.value)
    assert "nothing was loaded" in msg
    assert "missing keys: 2.bias (2,)" in msg
    assert "unexpected keys: module.extra (7, 1)" in msg
    assert "size mismatch for 0.bias: checkpoint shape (5,), model shape (3,)" in msg
    after = _values(model)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_load_state_dict_non_strict_loads_the_matching_subset():
    model = _mlp()
    before = _values(model)
    partial = OrderedDict([("0.weight", np.full((3, 4), 0.5, np.float32)), ("head.weight", np.zeros((1, 1)))])
    missing, unexpected = model.load_state_dict(partial, strict=False)
    assert missing == ["0.bias", "2.weight", "2.bias"] and unexpected == ["head.weight"]
    after = _values(model)
    np.testing.assert_array_equal(after["0.weight"], np.full((3, 4), 0.5, np.float32))
    for k in ("0.bias", "2.weight", "2.bias"):
        np.testing.assert_array_equal(after[k], before[k])


def test_load_state_dict_non_strict_still_rejects_shape_mismatches():
    model = _mlp()
    before = _values(model)
    with pytest.raises(CheckpointError, match=r"size mismatch for 2\.weight: checkpoint shape \(3, 2\)"):
        model.load_state_dict({"0.weight": np.zeros((3, 4), np.float32), "2.weight": np.zeros((3, 2))}, strict=False)
    np.testing.assert_array_equal(_values(model)["0.weight"], before["0.weight"])


def test_load_state_dict_casts_to_the_parameter_dtype_and_keeps_parameters():
    model = _mlp()
    sd = OrderedDict((k, np.full(v.shape, 0.25, np.float64)) for k, v in model.state_dict().items())
    assert model.load_state_dict(sd) == ([], [])
    for name, p in model.named_parameters():
        assert p.dtype is lazyvic.float32 and p.requires_grad, name
        np.testing.assert_array_equal(p.numpy(), np.full(p.shape, 0.25, np.float32))
