#!/usr/bin/env python3
"""Loss curves of the default pair as a PNG, from models/<name>/loss-curves.csv.

    python3 training/plot_curves.py models/qwen3-go

Two panels, the target's and the drafter's train and held-out loss against
the step, drawn with matplotlib (Debian: python3-matplotlib; or pip install
matplotlib).
"""
import csv
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:
    sys.exit(f"plot_curves.py: needs matplotlib (apt-get install python3-matplotlib, "
             f"or pip install matplotlib): {e}")

BLUE, ORANGE = "#3B6FB6", "#E08A2E"


def panel(ax, title, rows):
    """rows: (step, train_loss, heldout_loss)"""
    steps = [r[0] for r in rows]
    ax.plot(steps, [r[1] for r in rows], color=BLUE, marker=".", label="train")
    ax.plot(steps, [r[2] for r in rows], color=ORANGE, marker=".", label="held-out")
    ax.set_title(title, loc="left", fontweight="bold")
    ax.set_xlabel("step")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", color="#E3E3E3")
    ax.legend(frameon=False)


def main():
    folder = sys.argv[1]
    rows = {"target": [], "drafter": []}
    for r in csv.DictReader(open(os.path.join(folder, "loss-curves.csv"))):
        rows[r["model"]].append((int(r["step"]), float(r["train_loss"]), float(r["heldout_loss"])))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.2, 4.8), dpi=100)
    panel(left, "Target loss (nats)", rows["target"])
    panel(right, "Drafter loss (weighted)", rows["drafter"])
    left.set_ylabel("loss")
    fig.tight_layout()
    out = os.path.join(folder, "loss-curves.png")
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main()
