"""Shared by the tests of modules whose hooks a captured step replays (weight and spectral norm)."""

from __future__ import annotations

import numpy as np

import lazyvic as lv


def plain_and_captured(make_module, steps: int = 5) -> tuple:
    """Train ``make_module()`` (seeded, a Linear(4, 3)-shaped module) for ``steps`` SGD steps on a
    mean-square loss, plainly and through ``lazyvic.compile``, in deterministic mode; returns
    ``((losses, state), (losses, state), compiled)``, state the module's tensors by name."""

    def run(captured: bool):
        lv.manual_seed(0)
        m = make_module()
        opt = lv.optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = lv.compile(step) if captured else step
        x = lv.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
        losses = [f(x).item() for _ in range(steps)]
        return (losses, {k: v.numpy().tobytes() for k, v in m.state_dict().items()}), f

    lv.use_deterministic_algorithms(True)
    try:
        plain, _ = run(False)
        captured, f = run(True)
    finally:
        lv.use_deterministic_algorithms(False)
    return plain, captured, f
