"""MNIST-style convolutional classifier: two convolutions, max pooling, dropout, log_softmax with
nll_loss, trained by Adadelta with a StepLR schedule.

Data: MNIST cannot be downloaded here, so the 1,797 real 8x8 handwritten digits bundled with
scikit-learn stand in for it (1,437 to train, 360 to test; ``--image-size 16`` repeats each
pixel), normalized by the training set's mean and standard deviation as MNIST's (0.1307, 0.3081).

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/mnist_cnn.py [--epochs 14] [--batch-size 64] [--lr 1.0]
"""

import argparse

from aligned_init import load_init, save_init
from offline_data import digits

import lazyvic as torch  # was: import torch
import lazyvic.nn as nn  # was: import torch.nn as nn
import lazyvic.nn.functional as F  # was: import torch.nn.functional as F
import lazyvic.optim as optim  # was: import torch.optim as optim
from lazyvic.optim.lr_scheduler import StepLR  # was: from torch.optim.lr_scheduler import StepLR
from lazyvic.utils.data import DataLoader, TensorDataset  # was: from torch.utils.data import ...


class Net(nn.Module):
    def __init__(self, image_size=8, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        side = (image_size - 4) // 2
        self.fc1 = nn.Linear(64 * side * side, 128)
        self.fc2 = nn.Linear(128, 10)
        self.p = dropout

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = F.dropout(x, self.p, training=self.training)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, 2 * self.p, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def train(args, model, device, loader, optimizer, epoch, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)} "
                f"({100.0 * batch_idx / len(loader):.0f}%)]\tLoss: {loss.item():.6f}"
            )
        if args.dry_run or (args.steps and len(losses) >= args.steps):
            break


def test(model, device, loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(loader.dataset)
    accuracy = correct / len(loader.dataset)
    print(
        f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(loader.dataset)} ({100 * accuracy:.0f}%)\n"
    )
    return test_loss, accuracy


def main(argv=None):
    parser = argparse.ArgumentParser(description="MNIST-style CNN on the scikit-learn digits")
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size for training")
    parser.add_argument("--test-batch-size", type=int, default=1000, help="input batch size for testing")
    parser.add_argument("--epochs", type=int, default=14, help="number of epochs to train")
    parser.add_argument("--lr", type=float, default=1.0, help="learning rate")
    parser.add_argument("--gamma", type=float, default=0.7, help="learning rate step gamma")
    parser.add_argument(
        "--dropout", type=float, default=0.25, help="dropout after the convolutions (twice it before fc2)"
    )
    parser.add_argument("--image-size", type=int, default=8, help="8 (as bundled) or a multiple of 8")
    parser.add_argument("--no-shuffle", action="store_true", help="train on the samples in order")
    parser.add_argument("--dry-run", action="store_true", help="quickly check a single pass")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many training steps (0: no limit)")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--log-interval", type=int, default=10, help="batches between log lines")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--save-model", action="store_true", help="save the trained model")
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    x_train, y_train, x_test, y_test = digits(args.image_size)
    mean, std = x_train.mean(), x_train.std()
    train_set = TensorDataset(torch.from_numpy((x_train - mean) / std), torch.from_numpy(y_train))
    test_set = TensorDataset(torch.from_numpy((x_test - mean) / std), torch.from_numpy(y_test))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=not args.no_shuffle)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)

    model = Net(args.image_size, args.dropout).to(device)
    if args.save_init:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    losses, tests, lrs = [], [], []
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, losses)
        tests.append(test(model, device, test_loader))
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
        if args.dry_run or (args.steps and len(losses) >= args.steps):
            break

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")
    return {"train_loss": losses, "test_loss": [t[0] for t in tests], "test_accuracy": [t[1] for t in tests], "lr": lrs}


if __name__ == "__main__":
    main()
