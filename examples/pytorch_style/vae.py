"""Variational autoencoder (Kingma and Welling, "Auto-Encoding Variational Bayes", 2013) with
Linear encoder and decoder, the reparameterization trick (``randn_like``), a binary cross-entropy
(summed) plus KL-divergence loss, trained by Adam.

Data: MNIST cannot be downloaded here, so the 1,797 real 8x8 scikit-learn digits (64 pixels in
[0, 1]) stand in for it: 1,437 to train, 360 to test. After each epoch the decoder turns 64
draws from the prior into images (returned as ``samples``).

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/vae.py [--epochs 10] [--batch-size 128]
"""

import argparse

from aligned_init import load_init, save_init
from offline_data import digits

import lazyvic as torch  # was: import torch
import lazyvic.nn.functional as F  # was: import torch.nn.functional as F
from lazyvic import nn, optim  # was: from torch import nn, optim
from lazyvic.utils.data import DataLoader, TensorDataset  # was: from torch.utils.data import ...


class VAE(nn.Module):
    def __init__(self, n_pixels=64, hidden=256, latent=8):
        super().__init__()
        self.n_pixels = n_pixels
        self.enc = nn.Linear(n_pixels, hidden)
        self.enc_mu = nn.Linear(hidden, latent)
        self.enc_logvar = nn.Linear(hidden, latent)
        self.dec = nn.Linear(latent, hidden)
        self.dec_out = nn.Linear(hidden, n_pixels)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.enc_mu(h), self.enc_logvar(h)

    def reparameterize(self, mu, logvar):
        if not self.training:
            return mu
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.dec_out(F.relu(self.dec(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, self.n_pixels))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence, summed over the batch. KL(N(mu, sigma) || N(0, 1)) =
    -0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2) (Kingma and Welling, appendix B)."""
    bce = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.size(1)), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld, bce, kld


def main(argv=None):
    parser = argparse.ArgumentParser(description="VAE on the scikit-learn digits")
    parser.add_argument("--batch-size", type=int, default=128, help="input batch size for training")
    parser.add_argument("--epochs", type=int, default=10, help="number of epochs to train")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    parser.add_argument("--hidden", type=int, default=256, help="hidden units of encoder and decoder")
    parser.add_argument("--latent", type=int, default=8, help="latent dimensions")
    parser.add_argument("--no-shuffle", action="store_true", help="train on the samples in order")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many training steps (0: no limit)")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--log-interval", type=int, default=5, help="batches between log lines")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_train, _, x_test, _ = digits()
    train_loader = DataLoader(
        TensorDataset(torch.from_numpy(x_train)), batch_size=args.batch_size, shuffle=not args.no_shuffle
    )
    test_loader = DataLoader(TensorDataset(torch.from_numpy(x_test)), batch_size=args.batch_size)

    model = VAE(hidden=args.hidden, latent=args.latent).to(device)
    if args.save_init:
        save_init(args.save_init, model=model)
    if args.init_from:
        load_init(args.init_from, model=model)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)

    history = {"train_loss": [], "kld": [], "test_loss": [], "epoch_loss": []}
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0.0
        for batch_idx, (data,) in enumerate(train_loader):
            data = data.to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss, _, kld = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            history["train_loss"].append(loss.item() / len(data))
            history["kld"].append(kld.item() / len(data))
            if batch_idx % args.log_interval == 0:
                print(
                    f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item() / len(data):.6f}"
                )
            if args.steps and len(history["train_loss"]) >= args.steps:
                break
        history["epoch_loss"].append(train_loss / len(train_loader.dataset))
        print(f"====> Epoch: {epoch} Average loss: {history['epoch_loss'][-1]:.4f}")

        model.eval()
        test_loss = 0.0
        with torch.no_grad():
            for i, (data,) in enumerate(test_loader):
                data = data.to(device)
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar)[0].item()
                if i == 0:  # originals above their reconstructions
                    n = min(data.size(0), 8)
                    comparison = torch.cat([data[:n], recon_batch.view(-1, 1, 8, 8)[:n]])
                    history["comparison"] = comparison.cpu().numpy()
            history["test_loss"].append(test_loss / len(test_loader.dataset))
            print(f"====> Test set loss: {history['test_loss'][-1]:.4f}")
            sample = model.decode(torch.randn(64, args.latent).to(device)).cpu()
            history["samples"] = sample.view(64, 8, 8).numpy()
        if args.steps and len(history["train_loss"]) >= args.steps:
            break
    return history


if __name__ == "__main__":
    main()
