"""Train a FlowBuilder model on scikit-learn's bundled 8x8 digits (no download), stop early when
the validation loss stalls, and write training.html, metrics.csv and a checkpoint into
runs/train_digits/ (gitignored) or --out-dir.

    python examples/train_digits.py [--epochs 60] [--out-dir runs/train_digits]
"""
import argparse
import pathlib

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import flowgrad as fg
import flowgrad.nn.functional as F
from flowgrad import nn


def build_model():
    """An encoder, two feature branches joined side by side, a residual block and a head."""
    return (fg.flow(nn.Linear(64, 256)).through(nn.ReLU()).tag("hidden")
            .split(nn.Sequential(nn.Dropout(0.2), nn.Linear(256, 64), nn.ReLU()),
                   nn.Sequential(nn.Linear(256, 64), nn.Tanh()))
            .tag_group("features").merge(fg.flow.Cat(-1))
            .also(nn.Sequential(nn.LayerNorm(128), nn.Linear(128, 128), nn.ReLU()))
            .through(nn.Linear(128, 10)).tag("logits")
            .build())


@fg.no_grad()
def evaluate(model, x, y):
    """(loss, accuracy) on a whole split, in eval mode."""
    model.eval()
    logits = model(x)
    model.train()
    accuracy = (fg.argmax(logits, dim=1) == y).float().mean()
    return F.cross_entropy(logits, y), accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--patience", type=int, default=6, help="epochs of flat validation loss before stopping")
    parser.add_argument("--out-dir", default="runs/train_digits", help="where training.html, metrics.csv and the checkpoint go")
    args = parser.parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.25, random_state=0,
                                                        stratify=digits.target)
    x_train, x_val, y_train, y_val = train_test_split(x_train, y_train, test_size=0.15, random_state=0,
                                                      stratify=y_train)
    fg.manual_seed(args.seed)
    model = build_model()
    optimizer = fg.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = fg.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs, warmup=2)
    loader = fg.data.DataLoader(x_train, y_train, batch_size=args.batch_size, shuffle=True, seed=args.seed)
    val_x, val_y, test_x, test_y = fg.tensor(x_val), fg.tensor(y_val), fg.tensor(x_test), fg.tensor(y_test)
    print(f"digits: {len(x_train)} train / {len(x_val)} validation / {len(x_test)} test images, "
          f"model with {model.num_parameters()} parameters")

    model.log("loss", "val_loss", "val_accuracy", total_epochs=args.epochs)  # one line per flush
    for epoch in range(1, args.epochs + 1):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb, label_smoothing=0.05)
            loss.backward()
            optimizer.step()
            model.record("loss", loss)          # stays in C++ until flush: no per-step host copy
        schedule.step()
        val_loss, val_accuracy = evaluate(model, val_x, val_y)
        model.record("val_loss", val_loss)
        model.record("val_accuracy", val_accuracy)
        model.flush()
        if epoch >= 2 * args.patience and model.trend("val_loss").stalled(args.patience, 2e-3):
            print(f"validation loss stalled over the last {args.patience} epochs: stopping at epoch {epoch}")
            break

    _, test_accuracy = evaluate(model, test_x, test_y)
    print(f"test accuracy: {test_accuracy.item():.4f}  (trained {fg.format_duration(model.elapsed())})")
    model.plot_html(out / "training.html", "loss", "val_loss", "val_accuracy")
    model.export_trends(out / "metrics.csv")
    fg.save_checkpoint(out / "digits.safetensors", model, optimizer, graph=model, step=model.flush_count,
                       metadata={"test_accuracy": f"{test_accuracy.item():.4f}"})
    print(f"wrote {out / 'training.html'}, {out / 'metrics.csv'} and {out / 'digits.safetensors'}")


if __name__ == "__main__":
    main()
