"""Regression with an MLP over a map-style Dataset: Dataset subclass, DataLoader, nn.Sequential,
Tanh, MSELoss / SmoothL1Loss, Adam, train/eval, no_grad, .item()."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

import compat_harness as h


class Curve(Dataset):
    def __init__(self, n):
        self.x = torch.from_numpy(h.data(n, 3, seed=1))
        w = torch.tensor([[0.5], [-1.5], [2.0]])
        self.y = torch.sin(self.x @ w) + 0.1 * torch.from_numpy(h.data(n, 1, seed=2))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
h.same_start(torch, model)
model = model.to(device)
loader = DataLoader(Curve(256), batch_size=32, shuffle=False)
criterion = nn.MSELoss()
smooth = nn.SmoothL1Loss(beta=0.5)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

model.eval()
with torch.no_grad():
    x, y = next(iter(loader))
    first = criterion(model(x.to(device)), y.to(device)).item() + smooth(model(x.to(device)), y.to(device)).item()
model.train()
losses = []
for epoch in range(3):
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * x.size(0)
    losses.append(total / len(loader.dataset))
h.report(first, losses)
