"""A small CNN classifier: Conv2d with tuple arguments, ReLU(inplace=True), MaxPool2d,
BatchNorm2d, Flatten, CrossEntropyLoss, SGD with momentum, TensorDataset + DataLoader, accuracy."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import compat_harness as h


class Net(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(True),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 3 * 3, 32), nn.LeakyReLU(0.2, inplace=True),
                                        nn.Linear(32, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


torch.manual_seed(0)
labels = torch.from_numpy(h.data(128, seed=4, kind="int", high=4))
images = torch.from_numpy(h.data(128, 1, 12, 12, seed=3))
marks = torch.zeros(4, 1, 12, 12)
for c in range(4):
    marks[c, 0, 3 * c, 3 * c] = 4.0  # a class-dependent bright pixel to learn
images = images + marks[labels]
loader = DataLoader(TensorDataset(images, labels), batch_size=32, shuffle=False)

model = h.same_start(torch, Net())
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

model.eval()
with torch.no_grad():
    first = sum(F.cross_entropy(model(x), y, reduction="sum").item() for x, y in loader) / len(loader.dataset)
losses = []
for epoch in range(4):
    model.train()
    running, correct = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        running += loss.item()
        correct += (out.argmax(dim=1) == y).sum().item()
    losses.append(running / len(loader))
h.report(first, losses)
