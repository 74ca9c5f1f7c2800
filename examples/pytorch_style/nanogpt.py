"""Train and sample a nanoGPT-style character-level GPT (the model: ``nanogpt_model.py``, as
nanoGPT splits model.py and train.py): random training windows drawn with ``torch.randint``, AdamW
with decay/no-decay parameter groups, a cosine learning rate with linear warmup (Loshchilov and
Hutter, "SGDR", 2017), gradient accumulation and clipping, ``estimate_loss`` under
``torch.no_grad``, autocast and a GradScaler (active on CUDA with ``--dtype``), the best checkpoint
saved with the optimizer state (``--resume`` continues from it), and sampling with temperature and
top-k (``torch.topk``, ``torch.multinomial``).

Data: the docstrings of a fixed list of Python standard-library modules (``offline_data``),
encoded one character per token, split 90/10 into train and validation.

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/nanogpt.py [--max-iters 600] [--n-layer 2] [--n-embd 64] [--resume]
"""

import argparse
import math
import os
from contextlib import nullcontext

import numpy as np
from aligned_init import load_init, save_init
from nanogpt_model import GPT, GPTConfig
from offline_data import docstring_text

import lazyvic as torch  # was: import torch


def main(argv=None):
    parser = argparse.ArgumentParser(description="nanoGPT-style character GPT on standard-library docstrings")
    parser.add_argument("--out-dir", default="out-nanogpt", help="where ckpt.pt is written (best val loss)")
    parser.add_argument("--resume", action="store_true", help="continue from out_dir/ckpt.pt")
    parser.add_argument("--max-chars", type=int, default=None, help="use only the first characters of the text")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--no-flash", action="store_true", help="write attention out with the mask buffer")
    parser.add_argument("--learning-rate", "--lr", type=float, default=2e-3)
    parser.add_argument("--max-iters", "--steps", type=int, default=600)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--warmup-iters", type=int, default=50)
    parser.add_argument("--lr-decay-iters", type=int, default=600)
    parser.add_argument("--eval-interval", type=int, default=200)
    parser.add_argument("--eval-iters", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
    torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
    device_type = "cuda" if "cuda" in args.device else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
    text = docstring_text(args.max_chars)
    chars = sorted(set(text))
    stoi, itos = {ch: i for i, ch in enumerate(chars)}, dict(enumerate(chars))
    data = np.array([stoi[c] for c in text], dtype=np.uint16)
    train_data, val_data = data[: int(0.9 * len(data))], data[int(0.9 * len(data)) :]

    def get_batch(split):
        data = train_data if split == "train" else val_data
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack([torch.from_numpy((data[i : i + args.block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + args.block_size]).astype(np.int64)) for i in ix])
        if device_type == "cuda":  # pin x, y, to move them to the GPU asynchronously
            return x.pin_memory().to(args.device, non_blocking=True), y.pin_memory().to(args.device, non_blocking=True)
        return x.to(args.device), y.to(args.device)

    model_args = dict(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size)
    model_args.update(vocab_size=len(chars), dropout=args.dropout, flash=not args.no_flash)
    iter_num, best_val_loss, checkpoint = 0, 1e9, None
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    if args.resume:
        checkpoint = torch.load(ckpt_path, map_location=args.device)
        model_args.update(checkpoint["model_args"])
        iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    model = GPT(GPTConfig(**model_args))
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
    model.to(args.device)
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    if args.save_init:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16"))
    optimizer = model.configure_optimizers(args.weight_decay, args.learning_rate, (0.9, 0.99), device_type)
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    checkpoint = None  # free up memory

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    def get_lr(it):  # linear warmup, then cosine decay to a tenth (Chinchilla's min_lr)
        min_lr = args.learning_rate / 10
        if it < args.warmup_iters:
            return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
        if it > args.lr_decay_iters:
            return min_lr
        decay_ratio = (it - args.warmup_iters) / (args.lr_decay_iters - args.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # from 1 to 0
        return min_lr + coeff * (args.learning_rate - min_lr)

    history = {"train_loss": [], "eval": []}
    X, Y = get_batch("train")
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % args.eval_interval == 0 or iter_num == args.max_iters:
            losses = estimate_loss()
            history["eval"].append((iter_num, losses["train"], losses["val"]))
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss and iter_num > 0:
                best_val_loss = losses["val"]
                checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
                checkpoint.update(model_args=model_args, best_val_loss=best_val_loss)
                os.makedirs(args.out_dir, exist_ok=True)
                torch.save(checkpoint, ckpt_path)
        if iter_num >= args.max_iters:
            break
        for _ in range(args.gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / args.gradient_accumulation_steps
            X, Y = get_batch("train")  # prefetch the next batch
            scaler.scale(loss).backward()
        if args.grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        history["train_loss"].append(loss.item() * args.gradient_accumulation_steps)
        iter_num += 1

    model.eval()
    start = torch.tensor([[stoi.get("\n", 0)]], dtype=torch.long, device=args.device)
    with ctx:
        y = model.generate(start, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k)
    history["sample"] = "".join(itos[i] for i in y[0].tolist())
    print(history["sample"])
    return history


if __name__ == "__main__":
    main()
