#!/usr/bin/env python3
"""plot_ps_memory.py - memory per key of a sparse table against its key count, as an SVG.

    bench/plot_ps_memory.py OUT.svg LABEL=FILE[:stats] [LABEL=FILE[:stats] ...]

Each FILE is the output of `build/bench/bench_ps_ssd --sweep N ...` (its "sweep," lines:
keys, bytes per key, ratio to values + optimizer state, ratio with the accessor statistics
too, ...).  One line per FILE: the ratio to values + optimizer state (the table's
fl_ps_table_stats.bytes_per_key over payload_per_key), or with ":stats" the ratio to values
+ optimizer state + statistics (show, click, delta_score: 12 bytes), against millions of
keys, with the 1.5x target drawn across.  Series go in pairs (before, after: one colour,
solid and dashed).  Standard library only.
"""
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
DASHES = ["", "6,3"]


def read(path):
    col = 3
    if path.endswith(":stats"):
        path, col = path[: -len(":stats")], 4
    pts = []
    with open(path) as f:
        for line in f:
            p = line.strip().split(",")
            if len(p) > col and p[0] == "sweep" and p[1].isdigit():
                pts.append((int(p[1]) / 1e6, float(p[col])))
    return pts


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    out = sys.argv[1]
    series = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        pts = read(path)
        if not pts:
            sys.exit("plot_ps_memory.py: no sweep lines in %s" % path)
        series.append((label, pts))
    W, H, L, R, T, B = 760, 440, 60, 250, 30, 50
    xmax = max(x for _, p in series for x, _ in p)
    ys = [y for _, p in series for _, y in p] + [1.5]
    ymin, ymax = min(ys) - 0.02, max(ys) + 0.02
    ymin, ymax = int(ymin * 20) / 20.0, int(ymax * 20 + 1) / 20.0

    def X(x):
        return L + (W - L - R) * x / xmax

    def Y(y):
        return T + (H - T - B) * (ymax - y) / (ymax - ymin)

    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="18" font-size="14">Sparse table: bytes per key / payload (values + optimizer state [+ statistics])</text>' % L]
    y = ymin
    while y <= ymax + 1e-9:
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, Y(y), W - R, Y(y)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%.2fx</text>' % (L - 4, Y(y) + 4, y))
        y += 0.05
    step = 2 if xmax > 10 else 1
    x = 0
    while x <= xmax + 1e-9:
        s.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (X(x), T, X(x), H - B))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (X(x), H - B + 16, x))
        x += step
    s.append('<text x="%d" y="%d" text-anchor="middle">keys in the table (millions)</text>' % ((L + W - R) / 2, H - 12))
    s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-dasharray="2,2"/>' % (L, Y(1.5), W - R, Y(1.5)))
    s.append('<text x="%d" y="%.1f">1.5x target</text>' % (W - R + 4, Y(1.5) + 4))
    for i, (label, pts) in enumerate(series):
        color, dash = COLORS[(i // 2) % len(COLORS)], DASHES[i % 2]
        path = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", X(x), Y(y)) for j, (x, y) in enumerate(pts))
        s.append('<path d="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>' %
                 (path, color, ' stroke-dasharray="%s"' % dash if dash else ""))
        ly = T + 20 + 18 * i
        s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5"%s/>' %
                 (W - R + 8, ly, W - R + 36, ly, color, ' stroke-dasharray="%s"' % dash if dash else ""))
        s.append('<text x="%d" y="%d">%s</text>' % (W - R + 40, ly + 4, label))
    s.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
