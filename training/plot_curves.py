#!/usr/bin/env python3
"""Loss curves of the default pair as a PNG, from models/<name>/loss-curves.csv.

    python3 training/plot_curves.py models/qwen3-go

Two panels, the target's and the drafter's train and held-out loss against
the step. Pure Python and numpy: the 5x7 glyphs are read from
tools/png-plot.c (the font `dflash ab` draws with) and the PNG is written with
zlib, so nothing beyond what the tests already install is needed.
"""
import csv
import os
import re
import struct
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
W, H = 1120, 480
BLUE, ORANGE, GREY, BLACK = (59, 110, 181), (226, 137, 46), (220, 220, 220), (40, 40, 40)


def load_font():
    text = open(os.path.join(HERE, "..", "tools", "png-plot.c")).read()
    font = {}
    for ch, rows in re.findall(r"\['(.|\\\\|\\')'\] = \{ ([^}]*) \}", text):
        ch = {"\\\\": "\\", "\\'": "'"}.get(ch, ch)
        font[ch] = [int(v, 16) for v in rows.split(",")]
    return font


FONT = load_font()


def text(img, x, y, s, color=BLACK, scale=2):
    for ch in s.upper():
        g = FONT.get(ch)
        if g:
            for r, bits in enumerate(g):
                for c in range(5):
                    if bits & (0x10 >> c):
                        img[y + r * scale:y + (r + 1) * scale, x + c * scale:x + (c + 1) * scale] = color
        x += 6 * scale


def line(img, x0, y0, x1, y1, color):
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    for t in np.linspace(0, 1, n):
        x, y = int(round(x0 + (x1 - x0) * t)), int(round(y0 + (y1 - y0) * t))
        img[y - 1:y + 2, x - 1:x + 2] = color


def panel(img, x0, title, rows):
    """rows: (step, train_loss, heldout_loss)"""
    left, top, pw, ph = x0 + 70, 60, 440, 340
    steps = [r[0] for r in rows]
    top_v = max(max(r[1], r[2]) for r in rows) * 1.05
    smax = max(steps)
    text(img, x0 + 70, 20, title)
    for i in range(6):
        v = top_v * i / 5
        y = top + ph - int(ph * v / top_v)
        img[y, left:left + pw] = GREY
        text(img, x0 + 8, y - 7, f"{v:.1f}")
    img[top:top + ph, left] = BLACK
    img[top + ph, left:left + pw] = BLACK
    for i in range(5):
        s = smax * i / 4
        text(img, left + int(pw * s / smax) - 12, top + ph + 10, f"{int(s)}")
    text(img, left + pw // 2 - 24, top + ph + 34, "STEP")
    for col, color in ((1, BLUE), (2, ORANGE)):
        pts = [(left + int(pw * r[0] / smax), top + ph - int(ph * r[col] / top_v)) for r in rows]
        if len(pts) == 1:
            line(img, *pts[0], *pts[0], color)
        for a, b in zip(pts, pts[1:]):
            line(img, *a, *b, color)


def write_png(path, img):
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(img.shape[0]))

    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", img.shape[1], img.shape[0], 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    folder = sys.argv[1]
    rows = {"target": [], "drafter": []}
    for r in csv.DictReader(open(os.path.join(folder, "loss-curves.csv"))):
        rows[r["model"]].append((int(r["step"]), float(r["train_loss"]), float(r["heldout_loss"])))
    img = np.full((H, W, 3), 255, np.uint8)
    panel(img, 0, "TARGET LOSS (NATS)", rows["target"])
    panel(img, W // 2, "DRAFTER LOSS (WEIGHTED)", rows["drafter"])
    img[458:470, 440:452] = BLUE
    text(img, 460, 458, "TRAIN")
    img[458:470, 580:592] = ORANGE
    text(img, 600, 458, "HELD-OUT")
    out = os.path.join(folder, "loss-curves.png")
    write_png(out, img)
    print(out)


if __name__ == "__main__":
    main()
