"""A variational autoencoder: encoder to mu / logvar, reparameterisation with randn_like, a
sigmoid decoder, binary_cross_entropy(reduction='sum') plus the KL term, Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import compat_harness as h


class VAE(nn.Module):
    def __init__(self, d=64, hidden=32, latent=4):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, d)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        if not self.training:
            return mu
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


torch.manual_seed(0)
codes, basis = torch.from_numpy(h.data(96, 4, seed=6)), torch.from_numpy(h.data(4, 64, seed=9))
images = torch.sigmoid(2 * codes @ basis).view(96, 8, 8)  # images with four factors to find
loader = DataLoader(TensorDataset(images), batch_size=32, shuffle=True)
model = h.same_start(torch, VAE())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

model.eval()
with torch.no_grad():
    recon, mu, logvar = model(images)
    first = loss_function(recon, images, mu, logvar).item() / len(images)
losses = []
for epoch in range(5):
    model.train()
    total = 0.0
    for (data,) in loader:
        optimizer.zero_grad()
        recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar)
        loss.backward()
        total += loss.item()
        optimizer.step()
    losses.append(total / len(loader.dataset))
h.report(first, losses)
