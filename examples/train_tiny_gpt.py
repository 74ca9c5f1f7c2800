"""Train a character-level TinyGPT on the docstrings of Python's standard library.

The corpus is real English text present on every Python installation: the
docstrings of a fixed list of standard-library modules, collected with
``inspect.getdoc`` (``lazyvic.data.stdlib_docstrings``; the same text for a given
Python version, about 480k characters on 3.11). No download. 90% of it trains,
the last 10% validates.

Every training step (forward, backward, gradient clipping, AdamW update) is one
cached, fused, compiled plan, captured by ``lazyvic.compile`` and replayed without
recording its ops again; the warm-up + cosine learning-rate schedule feeds the
rate in as a scalar input, so it never recompiles. At the end the script
samples text, saves the model in lazyvic format v1, loads it back and checks
that the logits after reload are bit-identical to those before saving.

    python examples/train_tiny_gpt.py [--steps 1500] [--out runs/tiny_gpt]

``--save-at N`` also writes a full training checkpoint (model, optimizer,
scheduler, both random generators, step) after step N; ``--resume PATH``
continues from one and gives the same losses as a run that never stopped.

``--device cuda`` trains on an NVIDIA GPU (``pip install -e ".[cuda]"``; with
``NUMBA_ENABLE_CUDASIM=1`` on Numba's CUDA simulator, slowly, for tiny settings),
and ``--amp`` adds mixed precision: ``lazyvic.autocast`` (float16 matmul operands,
float32 accumulation) with ``lazyvic.amp.GradScaler``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import lazyvic
from lazyvic.data import CharTokenizer, get_batch, stdlib_docstrings, train_val_split
from lazyvic.models import TinyGPT
from lazyvic.optim import AdamW
from lazyvic.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--max-chars", type=int, default=None, help="use only the first N characters of the corpus")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--sample-chars", type=int, default=300)
    p.add_argument("--out", default="runs/tiny_gpt", help="directory for the model and checkpoints")
    p.add_argument("--save-at", type=int, default=None, help="write a training checkpoint after this step")
    p.add_argument("--resume", default=None, help="continue from a training checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar or samples")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--amp", action="store_true", help="mixed precision: autocast(float16) and a GradScaler")
    return p.parse_args(argv)


def build(args, vocab_size: int):
    """Model, optimizer and schedule: linear warm-up, then cosine decay to lr/10."""
    model = TinyGPT(vocab_size, args.d_model, args.n_layer, args.n_head, args.block_size, args.dropout)
    model.to(args.device)
    opt = AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay)
    warmup = max(1, min(args.warmup, args.steps - 1))
    sched = SequentialLR(
        opt,
        [
            LinearLR(opt, start_factor=0.01, total_iters=warmup),
            CosineAnnealingLR(opt, T_max=max(1, args.steps - warmup), eta_min=args.lr / 10),
        ],
        milestones=[warmup],
    )
    return model, opt, sched


def estimate_loss(model, ids: np.ndarray, args) -> float:
    """Mean loss over ``eval_batches`` fixed batches (the same ones at every evaluation)."""
    rng = np.random.default_rng(0)
    model.eval()
    total = 0.0
    with lazyvic.no_grad():
        for _ in range(args.eval_batches):
            x, y = get_batch(ids, args.batch_size, args.block_size, rng)
            with lazyvic.autocast(enabled=args.amp):
                total += model(x.to(args.device), y.to(args.device))[1].item()
    model.train()
    return total / args.eval_batches


def train_step(model, opt, sched, x, y, scaler=None):
    """Record one step (forward, backward, clipping, AdamW, schedule); returns the pending loss.

    With ``--amp`` the forward runs under autocast and ``scaler`` (a GradScaler) scales the
    loss, unscales the gradients before clipping and skips a step whose gradients overflowed
    (that check is one sync); without it the scaler is disabled and changes nothing."""
    if scaler is None:
        scaler = lazyvic.amp.GradScaler(enabled=False)
    with lazyvic.autocast(enabled=scaler.is_enabled()):
        _, loss = model(x, y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    lazyvic.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss


def save_checkpoint(path: Path, model, opt, sched, step: int, data_rng, tok) -> None:
    lazyvic.save(
        {
            "model": model.state_dict(),
            "config": model.config,
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "step": step,
            "data_rng": data_rng.bit_generator.state,
            "rng": lazyvic.get_rng_state(),
            "tokenizer": tok.to_config(),
        },
        path,
    )


def train(args) -> dict:
    """Train (or resume) and return the losses, the model and what was measured."""
    # Deterministic mode: every plan is compiled the first time it is seen, so the same
    # computation gives the same bits wherever it runs (before save, after reload, in a
    # resumed process). In the default "hot" mode a plan's first run is interpreted, which
    # can differ from compiled runs in the last bit.
    lazyvic.use_deterministic_algorithms(True)
    lazyvic.manual_seed(args.seed)
    text = stdlib_docstrings(max_chars=args.max_chars)
    tok = CharTokenizer(text)
    train_ids, val_ids = train_val_split(tok.encode(text), 0.1)
    model, opt, sched = build(args, tok.vocab_size)
    data_rng = np.random.default_rng(args.seed)
    scaler = lazyvic.amp.GradScaler(args.device, enabled=args.amp)
    start = 0
    if args.resume:
        ck = lazyvic.load(args.resume)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        data_rng.bit_generator.state = ck["data_rng"]
        lazyvic.set_rng_state(ck["rng"])
        start = ck["step"]
    lazyvic.sync()  # "mark step": realize the initial weights, so every step's trace is the same
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # The whole step captured: recorded at its second call, replayed after (with --amp, the
    # GradScaler's overflow check syncs inside the step, so it runs normally: Compiled.reasons).
    step_fn = lazyvic.compile(lambda x, y: train_step(model, opt, sched, x, y, scaler))
    losses, evals = [], []
    t0 = time.perf_counter()
    bar = tqdm(range(start, args.steps), desc="train", disable=args.quiet, initial=start, total=args.steps)
    for step in bar:
        x, y = get_batch(train_ids, args.batch_size, args.block_size, data_rng)
        loss = step_fn(x.to(args.device), y.to(args.device))
        losses.append(loss.item())  # outside the step: a sync inside would not be replayed
        bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{sched.get_last_lr()[0]:.1e}")
        if (step + 1) % args.eval_interval == 0 or step + 1 == args.steps:
            evals.append((step + 1, float(np.mean(losses[-50:])), estimate_loss(model, val_ids, args)))
            if not args.quiet:
                tqdm.write(f"step {step + 1}: train loss {evals[-1][1]:.4f}, val loss {evals[-1][2]:.4f}")
        if args.save_at is not None and step + 1 == args.save_at:
            save_checkpoint(out / f"checkpoint_{step + 1}.safetensors", model, opt, sched, step + 1, data_rng, tok)
    train_seconds = time.perf_counter() - t0
    return dict(
        model=model,
        tok=tok,
        val_ids=val_ids,
        losses=losses,
        evals=evals,
        train_seconds=train_seconds,
        steps=args.steps - start,
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    r = train(args)
    model, tok = r["model"], r["tok"]
    snap = lazyvic.metrics.snapshot()
    if not args.quiet and r["losses"]:
        print(
            f"trained {r['steps']} steps in {r['train_seconds']:.1f}s ({r['steps'] / r['train_seconds']:.1f} "
            f"steps/s); loss {r['losses'][0]:.3f} -> {np.mean(r['losses'][-50:]):.3f} "
            f"(ln(vocab) = {math.log(tok.vocab_size):.3f})"
        )

    model.eval()
    prompt = tok.encode("The ")[None, :]
    sample = model.generate(lazyvic.tensor(prompt), args.sample_chars, temperature=0.8, top_k=10, seed=args.seed)
    text = tok.decode(sample.numpy()[0])
    if not args.quiet:
        print("--- sample ---\n" + text + "\n--------------")

    # Save, reload, and compare inference before and after (bit for bit).
    out = Path(args.out)
    path = out / "tiny_gpt.safetensors"
    x, _ = get_batch(r["val_ids"], args.batch_size, args.block_size, np.random.default_rng(1))
    x = x.to(args.device)
    with lazyvic.no_grad():
        before = model(x).numpy()
        lazyvic.save(model, path)
        reloaded = lazyvic.load(path)  # rebuilds TinyGPT from the config stored in the file (on the CPU)
        reloaded.eval().to(args.device)
        after = reloaded(x).numpy()
    identical = bool(np.array_equal(before, after))
    if not args.quiet:
        print(f"saved {path} ({path.stat().st_size / 1e6:.2f} MB); logits after reload identical: {identical}")
        plans = [p for p in lazyvic.metrics.plans() if p["memory"]]
        peak = max(plans, key=lambda p: p["memory"]["peak"]) if plans else None
        print(
            f"plan cache: {snap['traces']} traces, {snap['cache_hits']} hits, {snap['cache_misses']} misses, "
            f"{snap['kernels_compiled']} kernels compiled, {snap['kernels_loaded']} loaded from disk "
            f"({snap['compile_seconds']:.1f}s), {snap['fallbacks']} fallbacks"
        )
        if peak:
            m = peak["memory"]
            print(
                f"training-step plan: {peak['kernels']} kernels, planned peak {m['peak'] / 1e6:.1f} MB "
                f"(inputs {m['inputs'] / 1e6:.1f}, parameters {m['parameters'] / 1e6:.1f}, temporaries "
                f"{m['temporaries'] / 1e6:.1f}, outputs {m['outputs'] / 1e6:.1f})"
            )
    if not identical:
        raise SystemExit("logits after reload differ from those before saving")
    return dict(
        losses=r["losses"],
        evals=r["evals"],
        sample=text,
        identical=identical,
        before=before,
        train_seconds=r["train_seconds"],
        metrics=snap,
        path=str(path),
    )


if __name__ == "__main__":
    main()
