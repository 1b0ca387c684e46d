"""Train an MLP on scikit-learn's bundled 8x8 digits (no download), report test accuracy and
save a checkpoint.

    python examples/train_digits.py [--epochs 40] [--out digits.safetensors]
"""
import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def build_model():
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


@fg.no_grad()
def accuracy(model, x, y):
    model.eval()
    predicted = fg.argmax(model(x), dim=1)
    model.train()
    return (predicted == y).float().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="digits.safetensors", help="checkpoint path")
    args = parser.parse_args()

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                                        stratify=digits.target)
    fg.manual_seed(args.seed)
    model = build_model()
    optimizer = fg.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = fg.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs, warmup=2)
    loader = fg.data.DataLoader(x_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    test_x, test_y = fg.tensor(x_test), fg.tensor(y_test)
    print(f"digits: {len(x_train)} train / {len(x_test)} test images, model with {model.num_parameters()} parameters")
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb, label_smoothing=0.05)
            loss.backward()
            optimizer.step()
            total += loss.item() * xb.shape[0]
        schedule.step()
        if epoch % 5 == 0 or epoch == 1:
            print(f"epoch {epoch:3d}  loss {total / len(x_train):.4f}  test accuracy {accuracy(model, test_x, test_y):.4f}"
                  f"  ({time.perf_counter() - start:.1f}s)")
    final = accuracy(model, test_x, test_y)
    print(f"test accuracy: {final:.4f}")
    fg.save_checkpoint(args.out, model, optimizer, step=args.epochs, metadata={"test_accuracy": f"{final:.4f}"})
    print(f"saved checkpoint to {args.out}")


if __name__ == "__main__":
    main()
