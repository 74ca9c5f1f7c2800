"""``lazyvic.distributions``: densities, entropies and KL divergences against their closed forms
(NumPy), reparameterized gradients against finite differences and the draws' own values, sample
shapes and frequencies from the seeded generator, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _oracle import check_vjp

import lazyvic as lv
from lazyvic import distributions as D
from lazyvic.runtime.config import config


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setattr(config, "compile", "never")


def _t(x, dtype=lv.float64):
    return lv.tensor(np.asarray(x, dtype=np.float64), dtype=dtype)


def test_normal_density_cdf_entropy_and_moments():
    loc, scale, x = np.array([0.0, 1.0, -2.0]), np.array([1.0, 2.0, 0.5]), np.array([0.5, -1.0, -2.2])
    n = D.Normal(_t(loc), _t(scale))
    assert n.batch_shape == (3,) and n.event_shape == ()
    want = -((x - loc) ** 2) / (2 * scale**2) - np.log(scale) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(n.log_prob(_t(x)).numpy(), want, rtol=1e-12)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(n.cdf(_t(x)).numpy(), 0.5 * (1 + erf((x - loc) / (scale * np.sqrt(2)))), rtol=1e-6)
    np.testing.assert_allclose(n.entropy().numpy(), 0.5 + 0.5 * np.log(2 * np.pi) + np.log(scale), rtol=1e-12)
    np.testing.assert_allclose(n.variance.numpy(), scale**2)
    np.testing.assert_allclose(n.stddev.numpy(), scale)
    b = D.Normal(0.0, _t([[1.0], [2.0]]))  # a number and a column: batch (2, 1)
    assert b.batch_shape == (2, 1) and b.sample((5,)).shape == (5, 2, 1)


def test_normal_rsample_carries_gradients_to_its_parameters():
    lv.manual_seed(3)
    loc = lv.tensor(np.array([0.5, -1.0]), dtype=lv.float64, requires_grad=True)
    scale = lv.tensor(np.array([1.5, 0.2]), dtype=lv.float64, requires_grad=True)
    z = D.Normal(loc, scale).rsample((4000,))
    assert z.shape == (4000, 2)
    z.sum().backward()
    draws = z.detach().numpy()
    eps = (draws - np.array([0.5, -1.0])) / np.array([1.5, 0.2])
    np.testing.assert_allclose(loc.grad.numpy(), [4000.0, 4000.0])
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-9)
    assert np.all(np.abs(draws.mean(0) - [0.5, -1.0]) < 4 * np.array([1.5, 0.2]) / np.sqrt(4000))
    assert not D.Normal(loc, scale).sample((3,)).requires_grad


def test_uniform_bernoulli_and_categorical_against_their_formulas():
    u = D.Uniform(_t([0.0, -1.0]), _t([2.0, 3.0]))
    np.testing.assert_allclose(u.log_prob(_t([1.0, 3.5])).numpy(), [-np.log(2.0), -np.inf])
    np.testing.assert_allclose(u.entropy().numpy(), np.log([2.0, 4.0]))
    lv.manual_seed(0)
    s = u.rsample((1000,)).numpy()
    assert (s >= [0.0, -1.0]).all() and (s < [2.0, 3.0]).all()

    p = np.array([0.2, 0.9, 0.5])
    for b in (D.Bernoulli(probs=_t(p)), D.Bernoulli(logits=_t(np.log(p / (1 - p))))):
        x = np.array([1.0, 0.0, 1.0])
        np.testing.assert_allclose(b.log_prob(_t(x)).numpy(), x * np.log(p) + (1 - x) * np.log(1 - p), rtol=1e-9)
        np.testing.assert_allclose(b.entropy().numpy(), -(p * np.log(p) + (1 - p) * np.log(1 - p)), rtol=1e-9)
    lv.manual_seed(1)
    draws = D.Bernoulli(probs=_t(p)).sample((4000,)).numpy()
    assert draws.shape == (4000, 3) and set(np.unique(draws)) <= {0.0, 1.0}
    assert np.all(np.abs(draws.mean(0) - p) < 4 * np.sqrt(p * (1 - p) / 4000))

    logits = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]])
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    for c in (D.Categorical(logits=_t(logits)), D.Categorical(probs=_t(np.exp(logp) * 7.0))):
        assert c.batch_shape == (2,) and c.num_categories == 3
        np.testing.assert_allclose(c.log_prob(lv.tensor([2, 0])).numpy(), [logp[0, 2], logp[1, 0]], rtol=1e-9)
        np.testing.assert_allclose(c.entropy().numpy(), -(np.exp(logp) * logp).sum(-1), rtol=1e-9)
    lv.manual_seed(2)
    k = D.Categorical(logits=_t(logits)).sample((5000,)).numpy()
    assert k.shape == (5000, 2) and k.dtype == np.int64
    freq = np.stack([(k == j).mean(0) for j in range(3)], -1)
    assert np.all(np.abs(freq - np.exp(logp)) < 4 * np.sqrt(np.exp(logp) * (1 - np.exp(logp)) / 5000))
    zero = D.Categorical(probs=_t([0.0, 0.5, 0.5]))
    assert zero.entropy().item() == pytest.approx(np.log(2.0), rel=1e-12)


def test_kl_divergences_match_their_closed_forms():
    m1, s1, m2, s2 = np.array([0.0, 1.0]), np.array([1.0, 0.5]), np.array([0.5, -1.0]), np.array([2.0, 1.0])
    kl = D.kl_divergence(D.Normal(_t(m1), _t(s1)), D.Normal(_t(m2), _t(s2))).numpy()
    np.testing.assert_allclose(kl, np.log(s2 / s1) + (s1**2 + (m1 - m2) ** 2) / (2 * s2**2) - 0.5, rtol=1e-12)
    p, q = np.array([0.2, 0.7]), np.array([0.5, 0.1])
    kl = D.kl_divergence(D.Bernoulli(probs=_t(p)), D.Bernoulli(probs=_t(q))).numpy()
    np.testing.assert_allclose(kl, p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q)), rtol=1e-9)
    a, b = np.array([0.0, 0.25, 0.75]), np.array([0.2, 0.3, 0.5])
    kl = D.kl_divergence(D.Categorical(probs=_t(a)), D.Categorical(probs=_t(b))).item()
    assert kl == pytest.approx(0.25 * np.log(0.25 / 0.3) + 0.75 * np.log(0.75 / 0.5), rel=1e-12)
    from lazyvic.distributions.kl import kl_divergence

    assert kl_divergence is D.kl_divergence and lv.distributions is D
    with pytest.raises(NotImplementedError, match="no formula for Normal to Categorical"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(probs=_t(b)))


def test_a_vae_kl_term_has_the_gradients_of_finite_differences():
    def kl(mu, logvar):
        q = D.Normal(mu, (logvar * 0.5).exp())
        return D.kl_divergence(q, D.Normal(mu * 0.0, mu * 0.0 + 1.0))

    check_vjp(kl, np.array([0.3, -1.2, 0.0]), np.array([0.1, -0.5, 0.7]))
    check_vjp(
        lambda lg: D.Categorical(logits=lg).log_prob(lv.tensor([1, 0])), np.array([[0.1, 0.9, -0.3], [1.0, 0.0, 0.5]])
    )


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(ValueError, match="Normal: expected scale > 0"):
        D.Normal(0.0, _t([1.0, -1.0]), validate_args=True)
    with pytest.raises(ValueError, match="Uniform: expected low < high"):
        D.Uniform(1.0, 0.0, validate_args=True)
    with pytest.raises(ValueError, match="either probs or logits"):
        D.Categorical(probs=_t([0.5, 0.5]), logits=_t([0.0, 0.0]))
    with pytest.raises(ValueError, match="either probs or logits"):
        D.Bernoulli()
    with pytest.raises(lv.errors.ShapeError, match="at least one axis"):
        D.Categorical(logits=_t(1.0))
    with pytest.raises(NotImplementedError, match="rsample"):
        D.Categorical(logits=_t([0.0, 1.0])).rsample()
