"""Train the digits MLP or a small TinyGPT with DistributedDataParallel on a fixed combined batch.

    python ddp_train.py {mlp,gpt} OUT.npz [--steps N] [--no-sync] [--single] [--compile]

Every rank takes its equal part of each combined batch (rank r: rows r*B/n .. (r+1)*B/n).
``--single`` trains without DDP or a process group (one process on the combined batch). Rank 0
writes the losses (the mean over ranks of the ranks' losses), the final parameters and the last
step's gradients to OUT.npz; every rank checks that its parameters and gradients have the same
bits as rank 0's. ``--no-sync``: each step is two half-batches, the first inside ``no_sync()``
(gradients accumulate locally), with the losses halved so the step's gradient is the same.
``--compile``: the training step (forward, backward, all-reduce, optimizer step) goes through
``lazyvic.compile``: recorded once, then replayed with the all-reduces as steps of its plan.
"""

from __future__ import annotations

import argparse

import numpy as np

import lazyvic as lv
from lazyvic import nn
from lazyvic.nn import functional as F

BATCH = 48


def data(kind: str, steps: int):
    rng = np.random.default_rng(0)
    if kind == "mlp":
        from sklearn.datasets import load_digits

        d = load_digits()
        x = (d.data / 16.0).astype(np.float32)
        y = d.target.astype(np.int64)
        order = rng.permutation(len(x))[: BATCH * steps]
        return [(x[order[i * BATCH : (i + 1) * BATCH]], y[order[i * BATCH : (i + 1) * BATCH]]) for i in range(steps)]
    tokens = rng.integers(0, 17, size=(steps, BATCH, 9))
    return [(t[:, :-1].copy(), t[:, 1:].copy()) for t in tokens]


def model_and_loss(kind: str):
    lv.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        return model, lambda m, x, y: F.cross_entropy(m(x), y), lambda ps: lv.optim.SGD(ps, lr=0.1, momentum=0.9)
    model = lv.models.TinyGPT(vocab_size=17, d_model=32, n_layer=1, n_head=2, block_size=8)

    def gpt_loss(m, x, y):
        _, loss = m(x, y)
        return loss

    return model, gpt_loss, lambda ps: lv.optim.AdamW(ps, lr=3e-3)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["mlp", "gpt"])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--single", action="store_true")
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    model, loss_fn, make_opt = model_and_loss(args.kind)
    if args.single:
        rank, world, net = 0, 1, model
    else:
        import lazyvic.distributed as dist

        dist.init_process_group("mpi")
        rank, world = dist.get_rank(), dist.get_world_size()
        net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.02)  # several buckets
    opt = make_opt(model.parameters())
    per = BATCH // world

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(net, x, y)
        loss.backward()
        opt.step()
        return loss

    step = lv.compile(train_step) if args.compile else train_step
    losses = []
    for x, y in data(args.kind, args.steps):
        x, y = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
        if args.no_sync:
            opt.zero_grad()
            half = per // 2
            with net.no_sync() if not args.single else _nothing():
                first = loss_fn(net, lv.from_numpy(x[:half]), lv.from_numpy(y[:half])) * 0.5
                first.backward()
            second = loss_fn(net, lv.from_numpy(x[half:]), lv.from_numpy(y[half:])) * 0.5
            second.backward()
            loss = first + second
        else:
            loss = step(lv.from_numpy(x), lv.from_numpy(y))
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        if args.no_sync:
            opt.step()
        losses.append(loss.item())
    params = [p.numpy() for p in model.parameters()]
    if args.compile:
        assert step.replays >= args.steps - 2, (step.replays, dict(step.reasons))
    if not args.single:
        every = [None] * world
        dist.all_gather_object(every, (losses, params, grads))
        for r, (_, ps, gs) in enumerate(every):
            for k, (a, b) in enumerate(zip(ps + gs, params + grads)):
                assert np.array_equal(a, b), f"rank {r} differs from rank {rank} in array {k}"
        losses = [float(np.mean([e[0][s] for e in every])) for s in range(len(losses))]
    if rank == 0:
        np.savez(
            args.out,
            losses=np.array(losses),
            **{f"param{k}": a for k, a in enumerate(params)},
            **{f"grad{k}": a for k, a in enumerate(grads)},
        )


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
