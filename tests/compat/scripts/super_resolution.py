"""Super-resolution in the style of the PyTorch examples' sub-pixel network, with a style-transfer
residual block: ReflectionPad2d, InstanceNorm2d(affine=True), PixelShuffle, Dropout2d (off in
eval), orthogonal_ initialisation, MSELoss, Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import compat_harness as h


class Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.block = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3),
                                   nn.InstanceNorm2d(channels, affine=True), nn.ReLU(inplace=True),
                                   nn.ReflectionPad2d(1), nn.Conv2d(channels, channels, 3),
                                   nn.InstanceNorm2d(channels, affine=True))

    def forward(self, x):
        return x + self.block(x)


class SuperResolution(nn.Module):
    def __init__(self, factor=2):
        super().__init__()
        self.head = nn.Conv2d(1, 16, 5, padding=2)
        self.body = Residual(16)
        self.drop = nn.Dropout2d(0.1)
        self.tail = nn.Conv2d(16, factor ** 2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(factor)
        nn.init.orthogonal_(self.head.weight, nn.init.calculate_gain("relu"))

    def forward(self, x):
        x = F.relu(self.head(x))
        x = self.drop(self.body(x))
        return self.shuffle(self.tail(x))


torch.manual_seed(0)
high = torch.from_numpy(h.data(16, 1, 12, 12, seed=8)).cumsum(dim=3) / 4  # smooth rows to recover
low = F.avg_pool2d(high, 2)
model = h.same_start(torch, SuperResolution())
criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

model.eval()
with torch.no_grad():
    first = criterion(model(low), high).item()
model.train()
losses = []
for step in range(15):
    optimizer.zero_grad()
    loss = criterion(model(low), high)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
h.report(first, losses)
