"""Data-parallel training on the CPU, written as PyTorch's torchrun tutorial
(pytorch/examples, distributed/ddp-tutorial-series/multigpu_torchrun.py): one process per
replica, each reading its environment (``LOCAL_RANK``, ``RANK``, ``WORLD_SIZE``), joining the
"gloo" process group, wrapping the model in ``DistributedDataParallel`` and reading its share
of the data through a ``DistributedSampler``. Each epoch's mean loss is all-reduced and logged by
rank 0, which also saves the model's ``state_dict`` at the end.

Data: the scikit-learn digits (8x8 images, see offline_data.py), the first ``--samples`` of the
1,437 training images; the default 1,001 splits evenly over neither 2 nor 3 processes, so the
sampler pads each rank's share (repeating the first indices). Model: a two-layer MLP.

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    lazyvic run -n 2 examples/pytorch_style/ddp_digits.py [--epochs 5] [--batch-size 64]
    torchrun --nproc-per-node 2 ddp_digits_torch.py ...     (its PyTorch twin)
"""

import argparse
import json
import os

from aligned_init import load_init, save_init
from offline_data import digits

import lazyvic as torch  # was: import torch
import lazyvic.distributed as dist  # was: import torch.distributed as dist
import lazyvic.nn as nn  # was: import torch.nn as nn
import lazyvic.nn.functional as F  # was: import torch.nn.functional as F
from lazyvic.distributed import destroy_process_group, init_process_group  # was: from torch.distributed import ...
from lazyvic.nn.parallel import DistributedDataParallel as DDP  # was: from torch.nn.parallel import ...
from lazyvic.utils.data import DataLoader, TensorDataset  # was: from torch.utils.data import ...
from lazyvic.utils.data.distributed import DistributedSampler  # was: from torch.utils.data.distributed import ...


def ddp_setup():
    # torchrun (or lazyvic run) sets RANK, WORLD_SIZE and MASTER_ADDR/PORT: the "env://" rendezvous.
    init_process_group(backend="gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.train_data = train_data
        self.optimizer = optimizer
        self.snapshot_path = snapshot_path
        self.model = DDP(model)
        self.losses, self.epoch_losses = [], []

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[CPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.train_data:
            loss = self._run_batch(source, targets)
            self.losses.append(loss)
            total += loss
        # Every rank's mean batch loss, averaged over the ranks (gloo has no ReduceOp.AVG).
        epoch_loss = torch.tensor([total / len(self.train_data)])
        dist.all_reduce(epoch_loss, op=dist.ReduceOp.SUM)
        epoch_loss = epoch_loss.item() / self.world_size
        self.epoch_losses.append(epoch_loss)
        if self.global_rank == 0:
            print(f"Epoch {epoch} | mean loss over {self.world_size} ranks: {epoch_loss:.8f}")

    def _save_snapshot(self):
        torch.save(self.model.module.state_dict(), self.snapshot_path)
        print(f"Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
        if self.global_rank == 0:
            self._save_snapshot()


class Net(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def load_train_objs(args):
    x_train, y_train, _, _ = digits()
    if args.samples:
        x_train, y_train = x_train[: args.samples], y_train[: args.samples]
    train_set = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = Net(args.hidden)
    if args.save_init and int(os.environ["RANK"]) == 0:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size, shuffle):
    # The sampler picks (and, with shuffle, permutes) this rank's indices: the loader must not shuffle.
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset, shuffle=shuffle)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description="data-parallel MLP on the scikit-learn digits")
    parser.add_argument("--epochs", type=int, default=5, help="total epochs to train the model")
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size on each process")
    parser.add_argument("--samples", type=int, default=1001, help="training images to use (0: all 1,437)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden units")
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    parser.add_argument("--no-shuffle", action="store_true", help="read the samples in order (no reshuffling)")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--snapshot-path", default="ddp_digits.pt", help="where rank 0 saves the trained weights")
    parser.add_argument("--metrics", help="rank 0 writes the losses to this JSON file")
    parser.add_argument("--save-init", help="(rank 0) write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    ddp_setup()
    dataset, model, optimizer = load_train_objs(args)
    train_data = prepare_dataloader(dataset, args.batch_size, shuffle=not args.no_shuffle)
    trainer = Trainer(model, train_data, optimizer, args.snapshot_path)
    trainer.train(args.epochs)
    results = {"train_loss": trainer.losses, "epoch_loss": trainer.epoch_losses}
    if args.metrics and trainer.global_rank == 0:
        with open(args.metrics, "w") as f:
            json.dump(results, f)
    destroy_process_group()
    return results


if __name__ == "__main__":
    main()
