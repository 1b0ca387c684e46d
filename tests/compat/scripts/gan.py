"""A GAN in the DCGAN example's idiom, on 2-D points: a generator and a discriminator (LeakyReLU(0.2,
inplace=True), BatchNorm1d), weights_init through apply(), two Adam optimizers with betas,
BCEWithLogitsLoss with real/fake labels from torch.full, the fake batch detached for the
discriminator's step, a fixed noise batch for the report."""
import torch
import torch.nn as nn

import compat_harness as h

NZ, HIDDEN, BATCH = 4, 32, 64


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(NZ, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(True),
            nn.Linear(HIDDEN, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(True),
            nn.Linear(HIDDEN, 2),
        )

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(2, HIDDEN), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(HIDDEN, HIDDEN), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(HIDDEN, 1),
        )

    def forward(self, x):
        return self.main(x).view(-1)


def weights_init(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.2)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm1d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


class Pair(nn.Module):  # one state_dict for the harness to hand over
    def __init__(self):
        super().__init__()
        self.netG, self.netD = Generator(), Discriminator()


torch.manual_seed(0)
angles = torch.from_numpy(h.data(512, seed=3, kind="uniform")) * 6.2831853
radius = 2.0 + 0.1 * torch.from_numpy(h.data(512, seed=4))
real_points = torch.stack([radius * torch.cos(angles), radius * torch.sin(angles)], dim=1)  # a ring
fixed_noise = torch.from_numpy(h.data(BATCH, NZ, seed=5))
noise_batches = torch.from_numpy(h.data(40, BATCH, NZ, seed=6))

pair = Pair()
pair.apply(weights_init)
pair = h.same_start(torch, pair)
netG, netD = pair.netG, pair.netD
criterion = nn.BCEWithLogitsLoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0



def ring_error():
    """How far generated points lie from the ring (the losses of a GAN do not fall steadily)."""
    netG.eval()
    with torch.no_grad():
        error = (netG(fixed_noise).norm(dim=1) - 2.0).abs().mean().item()
    netG.train()
    return error


netG.eval()
netD.eval()
with torch.no_grad():
    fake = netG(fixed_noise)
    first = (criterion(netD(real_points[:BATCH]), torch.full((BATCH,), real_label))
             + criterion(netD(fake), torch.full((BATCH,), fake_label))).item()
netG.train()
netD.train()
errors = [ring_error()]
for epoch in range(5):
    for i in range(8):
        real = real_points[i * BATCH:(i + 1) * BATCH]
        noise = noise_batches[epoch * 8 + i]
        # (1) the discriminator: maximise log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        label = torch.full((BATCH,), real_label, dtype=torch.float)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        fake = netG(noise)
        label.fill_(fake_label)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        optimizerD.step()
        # (2) the generator: maximise log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
    errors.append(ring_error())
h.report(first, errors)
