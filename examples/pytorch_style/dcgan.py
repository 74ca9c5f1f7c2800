"""DCGAN (Radford, Metz and Chintala, "Unsupervised Representation Learning with Deep
Convolutional Generative Adversarial Networks", 2015): a ConvTranspose2d generator with
BatchNorm and ReLU, a Conv2d discriminator with LeakyReLU, BCELoss, two Adam optimizers
(lr 2e-4, betas (0.5, 0.999)), weights drawn from N(0, 0.02) as the paper says.

Data: no image set can be downloaded here, so the 1,797 real scikit-learn digits, upsampled to
16x16 and scaled to [-1, 1], are the "real" images (three up/down-sampling stages instead of the
paper's four at 64x64). Each epoch ends with the generator's images for a fixed batch of noise
(returned as ``fake``).

Ordinary PyTorch code: only the import block below names lazyvic (each line says what it was).

    python examples/pytorch_style/dcgan.py [--niter 4] [--batch-size 64]
"""

import argparse

from aligned_init import load_init, save_init
from offline_data import digits

import lazyvic as torch  # was: import torch
import lazyvic.nn as nn  # was: import torch.nn as nn
import lazyvic.optim as optim  # was: import torch.optim as optim
import lazyvic.utils.data  # was: import torch.utils.data


def weights_init(m):
    """Custom weights initialization called on netG and netD."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class Generator(nn.Module):
    def __init__(self, nz, ngf, nc):
        super().__init__()
        self.main = nn.Sequential(
            # latent z, (nz) x 1 x 1
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # (ngf*2) x 4 x 4
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # (ngf) x 8 x 8
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
            # (nc) x 16 x 16
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf, nc):
        super().__init__()
        self.main = nn.Sequential(
            # (nc) x 16 x 16
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # (ndf) x 8 x 8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # (ndf*2) x 4 x 4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main(argv=None):
    parser = argparse.ArgumentParser(description="DCGAN on the scikit-learn digits (16x16)")
    parser.add_argument("--batch-size", type=int, default=64, help="input batch size")
    parser.add_argument("--nz", type=int, default=16, help="size of the latent z vector")
    parser.add_argument("--ngf", type=int, default=32, help="generator feature maps")
    parser.add_argument("--ndf", type=int, default=32, help="discriminator feature maps")
    parser.add_argument("--niter", type=int, default=4, help="number of epochs to train for")
    parser.add_argument("--lr", type=float, default=0.0002, help="learning rate")
    parser.add_argument("--beta1", type=float, default=0.5, help="beta1 for adam")
    parser.add_argument("--no-shuffle", action="store_true", help="take the real images in order")
    parser.add_argument("--dry-run", action="store_true", help="check a single training cycle works")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many iterations (0: no limit)")
    parser.add_argument("--seed", type=int, default=999, help="manual seed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log-interval", type=int, default=10, help="iterations between log lines")
    parser.add_argument("--save-init", help="write the initial weights to this .npz")
    parser.add_argument("--init-from", help="start from the initial weights in this .npz")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_train, _, _, _ = digits(16)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x_train * 2 - 1))
    dataloader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=not args.no_shuffle, drop_last=True
    )

    nc = 1
    netG = Generator(args.nz, args.ngf, nc).to(device)
    netG.apply(weights_init)
    netD = Discriminator(args.ndf, nc).to(device)
    netD.apply(weights_init)
    if args.save_init:
        save_init(args.save_init, netG=netG, netD=netD)
    if args.init_from:
        load_init(args.init_from, netG=netG, netD=netD)

    criterion = nn.BCELoss()
    fixed_noise = torch.randn(args.batch_size, args.nz, 1, 1, device=device)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    history = {"loss_D": [], "loss_G": [], "D_x": [], "D_G_z1": [], "D_G_z2": []}
    for epoch in range(args.niter):
        for i, (data,) in enumerate(dataloader):
            ############################
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            ###########################
            netD.zero_grad()
            real = data.to(device)
            batch_size = real.size(0)
            label = torch.full((batch_size,), real_label, dtype=real.dtype, device=device)
            output = netD(real)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            noise = torch.randn(batch_size, args.nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            ############################
            # (2) Update G network: maximize log(D(G(z)))
            ###########################
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            for key, value in zip(history, (errD.item(), errG.item(), D_x, D_G_z1, D_G_z2)):
                history[key].append(value)
            if i % args.log_interval == 0:
                print(
                    f"[{epoch}/{args.niter}][{i}/{len(dataloader)}] Loss_D: {errD.item():.4f} "
                    f"Loss_G: {errG.item():.4f} D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}"
                )
            if args.dry_run or (args.steps and len(history["loss_D"]) >= args.steps):
                break
        netG.eval()
        with torch.no_grad():
            history["fake"] = netG(fixed_noise).detach().cpu().numpy()
        netG.train()
        if args.dry_run or (args.steps and len(history["loss_D"]) >= args.steps):
            break
    return history


if __name__ == "__main__":
    main()
