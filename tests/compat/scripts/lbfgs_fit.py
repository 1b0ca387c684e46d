"""Full-batch curve fitting with L-BFGS and a closure, as in PyTorch's time-sequence example:
an MLP, MSELoss, optimizer.step(closure) returning the loss."""
import torch
import torch.nn as nn

import compat_harness as h

torch.manual_seed(0)
x = torch.linspace(-2, 2, 64).view(-1, 1)
y = torch.sin(2 * x) + 0.05 * torch.from_numpy(h.data(64, 1, seed=10))
model = h.same_start(torch, nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1)))
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=10, history_size=20)


def closure():
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    return loss


losses = [optimizer.step(closure).item() for _ in range(4)]
with torch.no_grad():
    final = criterion(model(x), y).item()
h.report(losses[0], losses + [final])
