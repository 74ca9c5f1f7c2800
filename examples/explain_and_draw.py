"""See inside lazyvic: read what ``lazyvic.explain`` says about a loop, fix a trap, and draw a plan.

A loss over a growing prefix (``x[:, :t]`` with a Python ``t`` that changes every
step) gives a trace of new sizes every step. lazyvic notices at the second step that only
sizes changed and makes them symbols (automatic dynamic shapes): one plan of symbolic sizes
serves every later ``t``, and the report says which size became symbolic. The trap that
remains is the sync (``.item()``) every step, which the report flags: the fixed loop keeps
the losses as tensors and syncs once (a fixed shape and ``t`` fed in as a mask), so the
whole loop is one cut.

Then a compiled TinyGPT training step (forward, backward, AdamW) is drawn to
``OUT/tiny_gpt_step.svg`` (needs Graphviz's ``dot``): one box per module by default,
or with ``--full`` one node per op grouped by fused kernel (slow: ``dot`` takes a
minute or more on the step's ~800 ops).

    python examples/explain_and_draw.py [--out runs/explain_and_draw] [--steps 6] [--full]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import lazyvic
from lazyvic.models import TinyGPT
from lazyvic.optim import AdamW

T = 24  # sequence length


def prefix_loss_trap(x: lazyvic.Tensor, t: int) -> float:
    # t is a Python int: the slice bound changes the sizes (a symbol from the second step on),
    # and .item() syncs every step.
    return (x[:, :t] ** 2).mean().item()


def prefix_loss_fixed(x: lazyvic.Tensor, t: int) -> lazyvic.Tensor:
    # Same value with a fixed shape: t enters as data (a 0/1 mask), not as a baked constant,
    # and the loss stays a tensor (no sync per step).
    mask = lazyvic.tensor((np.arange(T) < t).astype(np.float32))
    return (x**2 * mask).sum() / (x.shape[0] * t)


def run_trap(x: lazyvic.Tensor, steps: int) -> list[float]:
    return [prefix_loss_trap(x, t) for t in range(T - steps + 1, T + 1)]


def run_fixed(x: lazyvic.Tensor, steps: int) -> list[float]:
    return lazyvic.stack([prefix_loss_fixed(x, t) for t in range(T - steps + 1, T + 1)]).tolist()


def draw_tiny_gpt_step(out: Path, full: bool) -> Path:
    from lazyvic.runtime import plan_cache

    lazyvic.manual_seed(0)
    model = TinyGPT(vocab_size=32, d_model=32, n_layer=2, n_head=2, block_size=16)
    opt = AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    for _ in range(3):  # step 1 creates AdamW's state; hot mode compiles step 3, when step 2's key recurs
        idx = lazyvic.tensor(rng.integers(0, 32, (4, 16)))
        _, loss = model(idx, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    path = out / "tiny_gpt_step.svg"
    lazyvic.viz.draw(plan_cache.last, path, collapse=None if full else "module")
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/explain_and_draw")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--full", action="store_true", help="draw every op (slow), not one box per module")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    x = lazyvic.tensor(np.random.default_rng(1).standard_normal((8, T)).astype(np.float32))
    trap = lazyvic.explain(run_trap, x, args.steps)
    print(trap)
    fixed = lazyvic.explain(run_fixed, x, args.steps)
    print(fixed)
    np.testing.assert_allclose(trap.result, fixed.result, rtol=1e-5)
    print(
        f"\ntrap: {trap.misses} misses, {len(trap.plans)} plans compiled; "
        f"fixed: {fixed.misses} misses, {len(fixed.plans)} plans compiled"
    )

    path = draw_tiny_gpt_step(out, args.full)
    print(f"drew a TinyGPT training step to {path}")
    lazyvic.metrics.report()


if __name__ == "__main__":
    main()
