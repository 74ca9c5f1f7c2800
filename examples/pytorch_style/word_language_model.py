"""Word-level language model: an LSTM (or GRU, RNN_TANH, RNN_RELU) over word embeddings, trained
with truncated backpropagation through time over a moving slice of the batched token stream,
hidden states detached between slices, gradients clipped by norm, plain SGD written by hand, and
the learning rate divided by 4 whenever the validation loss stops improving.

Data: Wikitext-2 cannot be downloaded here, so the text is the docstrings of a fixed list of
Python standard-library modules (``offline_data.docstring_text``), or any text file given by
``--data``; its lines are split 80/10/10 into train, validation and test, each line a sequence of
whitespace-separated words ended by ``<eos>``.

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/word_language_model.py [--epochs 4] [--model LSTM]
"""

import argparse
import math
import time

from aligned_init import load_init, save_init
from offline_data import docstring_text

import lazyvic as torch  # was: import torch
import lazyvic.nn as nn  # was: import torch.nn as nn
import lazyvic.nn.functional as F  # was: import torch.nn.functional as F


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    def __init__(self, text):
        self.dictionary = Dictionary()
        lines = text.splitlines()
        n_train, n_valid = int(0.8 * len(lines)), int(0.1 * len(lines))
        self.train = self.tokenize(lines[:n_train])
        self.valid = self.tokenize(lines[n_train : n_train + n_valid])
        self.test = self.tokenize(lines[n_train + n_valid :])

    def tokenize(self, lines):
        ids = [self.dictionary.add_word(word) for line in lines for word in line.split() + ["<eos>"]]
        return torch.tensor(ids, dtype=torch.int64)


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:  # Press and Wolf, "Using the Output Embedding to Improve Language Models", 2016
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def batchify(data, bsz, device):
    """Cut the token stream into ``bsz`` columns: (nbatch, bsz), dropping what does not fit."""
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def evaluate(model, data_source, criterion, args):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(args.eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i, args.bptt)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train(model, train_data, criterion, lr, epoch, args, losses):
    model.train()
    total_loss, start_time = 0.0, time.time()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        # clip_grad_norm helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
        total_loss += losses[-1]
        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print(
                f"| epoch {epoch:3d} | {batch:5d}/{len(train_data) // args.bptt:5d} batches | lr {lr:02.2f} | "
                f"ms/batch {elapsed * 1000 / args.log_interval:5.2f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}"
            )
            total_loss, start_time = 0.0, time.time()
        if args.dry_run or (args.steps and len(losses) >= args.steps):
            break


def main(argv=None):
    parser = argparse.ArgumentParser(description="RNN/LSTM word language model on standard-library docstrings")
    parser.add_argument("--data", help="a text file to train on (default: standard-library docstrings)")
    parser.add_argument("--max-chars", type=int, default=None, help="use only the first characters of the text")
    parser.add_argument("--model", default="LSTM", help="type of network (RNN_TANH, RNN_RELU, LSTM, GRU)")
    parser.add_argument("--emsize", type=int, default=128, help="size of word embeddings")
    parser.add_argument("--nhid", type=int, default=128, help="number of hidden units per layer")
    parser.add_argument("--nlayers", type=int, default=2, help="number of layers")
    parser.add_argument("--lr", type=float, default=20, help="initial learning rate")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping")
    parser.add_argument("--epochs", type=int, default=4, help="upper epoch limit")
    parser.add_argument("--batch-size", type=int, default=20, help="batch size")
    parser.add_argument("--eval-batch-size", type=int, default=10, help="evaluation batch size")
    parser.add_argument("--bptt", type=int, default=35, help="sequence length")
    parser.add_argument("--dropout", type=float, default=0.2, help="dropout applied to layers (0 = no dropout)")
    parser.add_argument("--tied", action="store_true", help="tie the word embedding and softmax weights")
    parser.add_argument("--seed", type=int, default=1111, help="random seed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log-interval", type=int, default=50, help="report interval")
    parser.add_argument("--save", default="word_lm.pt", help="path to save the final model")
    parser.add_argument("--dry-run", action="store_true", help="verify the code and the model")
    parser.add_argument("--steps", type=int, default=0, help="training steps per epoch (0: the whole epoch)")
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if args.data:
        with open(args.data, encoding="utf-8") as f:
            text = f.read(args.max_chars)
    else:
        text = docstring_text(args.max_chars)
    corpus = Corpus(text)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, args.eval_batch_size, device)
    test_data = batchify(corpus.test, args.eval_batch_size, device)

    ntokens = len(corpus.dictionary)
    model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)
    if args.save_init:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    criterion = nn.NLLLoss()

    lr, best_val_loss = args.lr, None
    history = {"train_loss": [], "val_loss": [], "lr": []}
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        train(model, train_data, criterion, lr, epoch, args, history["train_loss"])
        val_loss = evaluate(model, val_data, criterion, args)
        history["val_loss"].append(val_loss)
        history["lr"].append(lr)
        print("-" * 89)
        print(
            f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s | "
            f"valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}"
        )
        print("-" * 89)
        # Save the model if the validation loss is the best we've seen so far.
        if best_val_loss is None or val_loss < best_val_loss:
            torch.save(model.state_dict(), args.save)
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0

    # Load the best saved model and run it on the test data.
    model.load_state_dict(torch.load(args.save))
    test_loss = evaluate(model, test_data, criterion, args)
    history["test_loss"] = test_loss
    print("=" * 89)
    print(f"| End of training | test loss {test_loss:5.2f} | test ppl {math.exp(test_loss):8.2f}")
    print("=" * 89)
    return history


if __name__ == "__main__":
    main()
