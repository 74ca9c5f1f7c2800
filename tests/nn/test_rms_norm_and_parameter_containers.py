"""rms_norm and nn.RMSNorm against PyTorch (tests/fixtures/torch_distance.npz, made by
make_distance_fixtures.py), its gradient against finite differences and its errors; and
nn.ParameterList / nn.ParameterDict: registration under PyTorch's state_dict keys, the list and
dict protocols, training through them."""

import _torch_fixtures as torch_fixtures
import numpy as np
import pytest
from _cotangent import cotangent
from _oracle import check_vjp

import lazyvic
from lazyvic import functional as F
from lazyvic import nn
from lazyvic.errors import DTypeError, ShapeError

FIXTURE = "torch_distance.npz"
SPEC = torch_fixtures.spec(FIXTURE)
TOL = dict(rtol=2e-5, atol=2e-6)
pytestmark = pytest.mark.usefixtures("interpreted")


@pytest.fixture(scope="module")
def ref():
    return torch_fixtures.arrays(FIXTURE)


def _run_case(ref, case, fn):
    x = lazyvic.tensor(ref[f"x.{case['args'][0]}"], requires_grad=True)
    kwargs = dict(case["kwargs"])
    weight = kwargs.pop("weight", None)
    weight = None if weight is None else ref[f"x.{weight[1:]}"]
    out, weight = fn(x, weight, kwargs)
    name = case["name"]
    expected = ref[f"{name}.out"]
    assert out.shape == expected.shape and out.dtype.np == expected.dtype
    (out * lazyvic.tensor(cotangent(out.shape), dtype=out.dtype)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected, **TOL, err_msg=f"{name} output")
    np.testing.assert_allclose(x.grad.numpy(), ref[f"{name}.grad.0"], **TOL, err_msg=f"{name} grad input")
    if weight is not None:
        np.testing.assert_allclose(weight.grad.numpy(), ref[f"{name}.grad.weight"], **TOL, err_msg=f"{name} grad w")


RMS_CASES = [c for c in SPEC["cases"] if c["fn"] == "rms_norm"]


@pytest.mark.parametrize("case", RMS_CASES, ids=lambda c: c["name"])
def test_rms_norm_and_its_gradients_match_torch(ref, case):
    def run(x, w, kw):
        w = None if w is None else lazyvic.tensor(w, requires_grad=True)
        return F.rms_norm(x, kw["normalized_shape"], w, kw.get("eps")), w

    _run_case(ref, case, run)


@pytest.mark.parametrize("case", RMS_CASES, ids=lambda c: c["name"])
def test_rms_norm_module_matches_torch(ref, case):
    def run(x, w, kw):
        module = nn.RMSNorm(kw["normalized_shape"], eps=kw.get("eps"), elementwise_affine=w is not None, dtype=x.dtype)
        if w is not None:
            module.load_state_dict({"weight": w})
        return module(x), module.weight

    _run_case(ref, case, run)


def test_rms_norm_module_keeps_pytorchs_names_and_defaults():
    m = nn.RMSNorm(4)
    assert m.normalized_shape == (4,) and m.eps is None and m.elementwise_affine
    assert list(m.state_dict()) == ["weight"] and m.weight.numpy().tolist() == [1.0] * 4
    assert "bias" not in m._parameters
    assert repr(m) == "RMSNorm((4,), eps=None, elementwise_affine=True)"
    plain = nn.RMSNorm([2, 3], eps=1e-5, elementwise_affine=False)
    assert plain.weight is None and list(plain.state_dict()) == [] and list(plain.parameters()) == []
    with lazyvic.no_grad():
        m.weight.mul_(3.0)
    m.reset_parameters()
    assert m.weight.numpy().tolist() == [1.0] * 4


def test_rms_norm_of_half_inputs_is_rounded_once_with_float32s_eps():
    x = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float16) * np.float16(1e-3)
    w = np.linspace(0.5, 2.0, 8).astype(np.float16)
    half = F.rms_norm(lazyvic.tensor(x), (8,), lazyvic.tensor(w))
    xf = x.astype(np.float32)
    want = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + np.finfo(np.float32).eps) * w.astype(np.float32)
    assert half.dtype is lazyvic.float16
    np.testing.assert_allclose(half.numpy().astype(np.float32), want.astype(np.float16).astype(np.float32), rtol=1e-3)


def test_rms_norm_vjp_matches_finite_differences():
    rng = np.random.default_rng(3)
    check_vjp(lambda x, w: F.rms_norm(x, (2, 3), w, eps=1e-6), rng.normal(size=(2, 2, 3)), rng.normal(size=(2, 3)))


def test_rms_norm_errors_name_the_shapes():
    x = lazyvic.zeros(3, 5)
    with pytest.raises(ShapeError, match=r"rms_norm: input shape \(3, 5\) does not end with normalized_shape \(4,\)"):
        F.rms_norm(x, (4,))
    with pytest.raises(ShapeError, match=r"rms_norm: weight shape \(3,\) does not match normalized_shape \(5,\)"):
        F.rms_norm(x, [5], lazyvic.ones(3))
    with pytest.raises(DTypeError, match="rms_norm: expected a floating-point input, got int64"):
        F.rms_norm(lazyvic.tensor([[1, 2]]), (2,))
    with pytest.raises(ShapeError, match=r"rms_norm: input shape \(5,\) does not end"):
        F.rms_norm(lazyvic.zeros(5), (3, 5))


# ================================================================= ParameterList / ParameterDict
class _Holder(nn.Module):
    """The module of make_distance_fixtures.py's state_dict_keys()."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm([3, 4])
        self.plain = nn.RMSNorm(4, elementwise_affine=False)
        self.plist = nn.ParameterList([lazyvic.zeros(2), nn.Parameter(lazyvic.ones(3))])
        self.plist.append(lazyvic.zeros(1))
        self.pdict = nn.ParameterDict({"scale": lazyvic.ones(2), "shift": lazyvic.zeros(2)})
        self.pdict["extra"] = nn.Parameter(lazyvic.zeros(1))


def test_containers_register_parameters_under_pytorchs_state_dict_keys():
    holder = _Holder()
    assert list(holder.state_dict()) == SPEC["state_dict_keys"]
    assert [k for k, _ in holder.named_parameters()] == SPEC["state_dict_keys"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in holder.parameters())
    state = {k: np.full(v.shape, 7.0, dtype=np.float32) for k, v in holder.state_dict().items()}
    holder.load_state_dict(state)
    assert holder.plist[1].numpy().tolist() == [7.0] * 3 and holder.pdict["extra"].numpy().tolist() == [7.0]


def test_parameter_list_behaves_as_a_list():
    p0 = nn.Parameter(lazyvic.ones(2))
    plist = nn.ParameterList([p0])
    t = lazyvic.zeros(3)
    plist.extend([t, lazyvic.full((1,), 2.0)])
    plist += [lazyvic.ones(4)]
    assert len(plist) == 4 and plist[0] is p0 and plist[-1].shape == (4,)
    assert isinstance(plist[1], nn.Parameter) and plist[1] is not t and plist[1].shape == (3,)
    assert [p.shape for p in plist] == [(2,), (3,), (1,), (4,)]
    assert [p.shape for p in plist[1:3]] == [(3,), (1,)] and isinstance(plist[1:3], nn.ParameterList)
    plist[2] = lazyvic.full((5,), 3.0)
    assert plist[2].shape == (5,) and isinstance(plist[2], nn.Parameter)
    assert list(plist.state_dict()) == ["0", "1", "2", "3"]
    plist.append("not a tensor")  # kept, as PyTorch, but not a parameter
    assert plist[4] == "not a tensor" and len(list(plist.parameters())) == 4
    assert "(1): Parameter containing: [lazyvic.float32 of size 3]" in repr(plist)
    with pytest.raises(IndexError, match="ParameterList: index 5 is out of range for a list of 5"):
        plist[5]
    with pytest.raises(TypeError, match="ParameterList.extend should be called with an iterable, but got Tensor"):
        plist.extend(lazyvic.zeros(2))
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        plist(lazyvic.zeros(1))


def test_parameter_dict_behaves_as_a_dict():
    pdict = nn.ParameterDict({"a": lazyvic.ones(2)})
    pdict["b"] = nn.Parameter(lazyvic.zeros(3))
    pdict.update([("keys", lazyvic.zeros(1))])  # a key that is also a method's name
    assert list(pdict) == ["a", "b", "keys"] and list(pdict.keys()) == ["a", "b", "keys"] and len(pdict) == 3
    assert isinstance(pdict["a"], nn.Parameter) and pdict["keys"].shape == (1,)
    assert [k for k, _ in pdict.items()] == ["a", "b", "keys"] and [v.shape for v in pdict.values()] == [
        (2,),
        (3,),
        (1,),
    ]
    assert "b" in pdict and "z" not in pdict and pdict.get("z") is None and pdict.get("a") is pdict["a"]
    assert pdict.setdefault("c", lazyvic.ones(1)).shape == (1,) and list(pdict.state_dict()) == ["a", "b", "keys", "c"]
    removed = pdict.pop("b")
    assert removed.shape == (3,) and "b" not in pdict and list(pdict.state_dict()) == ["a", "keys", "c"]
    del pdict["c"]
    copy = pdict.copy()
    assert list(copy) == ["a", "keys"] and copy["a"] is pdict["a"]
    pdict.clear()
    assert len(pdict) == 0 and list(pdict.parameters()) == []
    with pytest.raises(KeyError):
        pdict["missing"]
    with pytest.raises(TypeError, match="ParameterDict: keys must be strings, got int"):
        pdict[0] = lazyvic.ones(1)
    with pytest.raises(RuntimeError, match="ParameterDict should not be called"):
        pdict(lazyvic.zeros(1))


def test_gradients_reach_parameters_in_containers():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([lazyvic.full((3,), 2.0), lazyvic.full((3,), 3.0)])
            self.offsets = nn.ParameterDict({"first": lazyvic.ones(3)})

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x + self.offsets["first"]

    model = Model()
    opt = lazyvic.optim.SGD(model.parameters(), lr=0.1)
    model(lazyvic.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert model.scales[0].grad.numpy().tolist() == [3.0, 6.0, 9.0]
    assert model.offsets["first"].grad.numpy().tolist() == [1.0, 1.0, 1.0]
    opt.step()
    np.testing.assert_allclose(model.offsets["first"].numpy(), [0.9, 0.9, 0.9], rtol=1e-6)
