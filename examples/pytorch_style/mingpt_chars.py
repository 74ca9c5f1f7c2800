"""A minGPT-style character model: a ``Dataset`` whose ``__getitem__`` slices the encoded text at
an integer offset, a ``DataLoader(shuffle=True)`` feeding a small ``Trainer`` with callbacks,
and a causal transformer built from ``nn.TransformerEncoder`` (pre-LayerNorm layers, the square
subsequent mask), trained by AdamW with gradient clipping; a callback samples from the model.

Data: the docstrings of a fixed list of Python standard-library modules (``offline_data``), or
any text file given by ``--data``.

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/mingpt_chars.py [--max-iters 500] [--batch-size 32]
"""

import argparse
import time
from collections import defaultdict

from aligned_init import load_init, save_init
from offline_data import docstring_text

import lazyvic as torch  # was: import torch
import lazyvic.nn as nn  # was: import torch.nn as nn
from lazyvic.nn import functional as F  # was: from torch.nn import functional as F
from lazyvic.utils.data import DataLoader, Dataset  # was: from torch.utils.data import DataLoader, Dataset


class CharDataset(Dataset):
    """Every (block_size + 1)-character window of the text: its first block_size characters and,
    shifted by one, the characters to predict."""

    def __init__(self, text, block_size):
        chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = dict(enumerate(chars))
        self.vocab_size, self.block_size = len(chars), block_size
        self.data = torch.tensor([self.stoi[ch] for ch in text], dtype=torch.long)
        print(f"data has {len(text)} characters, {self.vocab_size} unique.")

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        chunk = self.data[idx : idx + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class CharTransformer(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_head=4, n_embd=64, dropout=0.1):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, block_size, n_embd))
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            n_embd, n_head, 4 * n_embd, dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        nn.init.normal_(self.pos_emb, std=0.02)
        print(f"number of parameters: {sum(p.numel() for p in self.parameters())}")

    def forward(self, idx, targets=None):
        b, t = idx.size()
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb[:, :t, :])
        x = self.blocks(x, mask=mask, is_causal=True)
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size :]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


class Trainer:
    def __init__(self, args, model, train_dataset):
        self.args, self.model, self.train_dataset = args, model, train_dataset
        self.callbacks = defaultdict(list)
        self.device = args.device
        self.model = self.model.to(self.device)
        self.iter_num, self.iter_time, self.iter_dt = 0, 0.0, 0.0

    def add_callback(self, onevent, callback):
        self.callbacks[onevent].append(callback)

    def trigger_callbacks(self, onevent):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, args = self.model, self.args
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
        train_loader = DataLoader(
            self.train_dataset, shuffle=not args.no_shuffle, batch_size=args.batch_size, num_workers=0, drop_last=True
        )
        model.train()
        self.iter_time = time.time()
        data_iter = iter(train_loader)
        while True:
            try:  # fetch the next batch, or start a new epoch
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                batch = next(data_iter)
            x, y = [t.to(self.device) for t in batch]
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_norm_clip)
            optimizer.step()
            self.trigger_callbacks("on_batch_end")
            self.iter_num += 1
            tnow = time.time()
            self.iter_dt, self.iter_time = tnow - self.iter_time, tnow
            if self.iter_num >= args.max_iters:
                break


def main(argv=None):
    parser = argparse.ArgumentParser(description="minGPT-style character transformer")
    parser.add_argument("--data", help="a text file to train on (default: standard-library docstrings)")
    parser.add_argument("--max-chars", type=int, default=None, help="use only the first characters of the text")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", "--lr", type=float, default=1e-3)
    parser.add_argument("--max-iters", "--steps", type=int, default=500)
    parser.add_argument("--grad-norm-clip", type=float, default=1.0)
    parser.add_argument("--no-shuffle", action="store_true", help="take the windows in order")
    parser.add_argument("--sample-interval", type=int, default=250, help="iterations between samples")
    parser.add_argument("--sample-length", type=int, default=100)
    parser.add_argument("--seed", type=int, default=3407)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    if args.data:
        with open(args.data, encoding="utf-8") as f:
            text = f.read(args.max_chars)
    else:
        text = docstring_text(args.max_chars)
    train_dataset = CharDataset(text, args.block_size)
    model = CharTransformer(
        train_dataset.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout
    )
    if args.save_init:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    trainer = Trainer(args, model, train_dataset)
    history = {"train_loss": [], "samples": []}

    def batch_end_callback(trainer):
        history["train_loss"].append(trainer.loss.item())
        if trainer.iter_num % 50 == 0:
            print(
                f"iter_dt {trainer.iter_dt * 1000:.2f}ms; iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}"
            )
        if (trainer.iter_num + 1) % args.sample_interval == 0 or trainer.iter_num + 1 == args.max_iters:
            model.eval()
            with torch.no_grad():
                context = text[: args.block_size // 2]
                x = torch.tensor([train_dataset.stoi[s] for s in context], dtype=torch.long)[None, ...]
                y = model.generate(x.to(trainer.device), args.sample_length, do_sample=False)[0]
                completion = "".join(train_dataset.itos[int(i)] for i in y)
                print(completion)
                history["samples"].append(completion)
            model.train()

    trainer.add_callback("on_batch_end", batch_end_callback)
    trainer.run()
    return history


if __name__ == "__main__":
    main()
