"""Summarises the raw output of bench/run.sh: medians per key and the headline comparisons.

usage: python3 bench/summarize.py RAW_FILE [--markdown OUT.md]
RAW_FILE holds 'R<TAB>key<TAB>value<TAB>unit' lines (every repeat of every run; other lines are
ignored).  Prints, per key, the median, min, max, spread ((max-min)/median) and n, then the three
headline comparisons against their targets: ratio of medians, ours at the better of its two
OpenBLAS thread settings (both shown, labelled), against each PyTorch configuration (OMP 1 with
OpenBLAS 2 and with OpenBLAS 1; the faster one is marked and is the one to beat).  When the raw
file has Paddle runs (bench/paddle_ref.py, keys paddle.MODE.bB.GRAPH.tT), a second table sets ours
against Paddle's fastest graph and thread count per model.  Plain python3, no third-party modules.
"""
import statistics
import sys
from collections import OrderedDict


def load(path):
    vals, units, by_round = OrderedDict(), {}, {}
    rnd = 0
    with open(path) as f:
        for line in f:
            if line.startswith("# round "):
                rnd = int(line.split()[2])
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4 or parts[0] != "R":
                continue
            try:
                v = float(parts[2])
            except ValueError:
                continue
            vals.setdefault(parts[1], []).append(v)
            units[parts[1]] = parts[3]
            by_round.setdefault(parts[1], {})[rnd] = v
    return vals, units, by_round


def paired(by_round, key_a, key_b):
    """Median over rounds of a/b, each round's a and b having run next to each other."""
    a, b = by_round.get(key_a, {}), by_round.get(key_b, {})
    r = [a[k] / b[k] for k in a if k in b and b[k]]
    return statistics.median(r) if r else None


def med(vals, key):
    v = vals.get(key)
    return statistics.median(v) if v else None


def fmt(x, spec="%.1f"):
    return "n/a" if x is None else spec % x


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    vals, units, by_round = load(sys.argv[1])
    out = []
    out.append("| key | median | min | max | spread | n | unit |")
    out.append("|---|---:|---:|---:|---:|---:|---|")
    for k, v in vals.items():
        m = statistics.median(v)
        out.append("| %s | %.4g | %.4g | %.4g | %.0f%% | %d | %s |" % (
            k, m, min(v), max(v), 100 * (max(v) - min(v)) / m if m else 0, len(v), units[k]))
    out.append("")

    def pick(prefix, suffix):
        """(best median, label, {label: median}) over ours' OpenBLAS thread settings."""
        got = {}
        for t in (1, 2):
            m = med(vals, "%s.blas%d.%s" % (prefix, t, suffix))
            if m is not None:
                got["OPENBLAS_NUM_THREADS=%d" % t] = m
        if not got:
            return None, "n/a", got
        best = max(got, key=got.get)
        return got[best], best, got

    out.append("| comparison | ours, OPENBLAS_NUM_THREADS=1 | ours, OPENBLAS_NUM_THREADS=2 | reference | ratio of medians (best ours / reference) | median of per-round ratios | target | met |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---|")

    def row(name, ours_prefix, suffix, torch_prefix, target, spec):
        best, label, got = pick(ours_prefix, suffix)
        refs = {t: med(vals, "%s.omp1.blas%d.%s" % (torch_prefix, t, suffix)) for t in (2, 1)}
        for t, ref in refs.items():
            if ref is None:
                continue
            ratio = best / ref if best is not None and ref else None
            faster = all(ref >= r for r in refs.values() if r is not None)
            met = "n/a" if ratio is None else ("yes" if ratio >= target else "NO")
            pr = paired(by_round, "%s.blas%s.%s" % (ours_prefix, label[-1:], suffix),
                        "%s.omp1.blas%d.%s" % (torch_prefix, t, suffix))
            out.append("| %s | %s | %s | %s (PyTorch OMP 1, OpenBLAS %d%s) | %s (ours at %s) | %s | >= %.2fx | %s |" % (
                name, fmt(got.get("OPENBLAS_NUM_THREADS=1"), spec), fmt(got.get("OPENBLAS_NUM_THREADS=2"), spec),
                fmt(ref, spec), t, ", the faster" if faster and len([r for r in refs.values() if r]) > 1 else "",
                fmt(ratio, "%.2fx"), label, fmt(pr, "%.2fx"), target, met))

    row("quick-start MLP train, batch 128, steps/s", "ours.mlp.b128", "steps_per_s", "torch.mlp.b128", 3.0, "%.0f")
    row("fc 273-400-400-400-2 train, batch 512, samples/s", "ours.fc.b512", "samples_per_s", "torch.fc.b512", 1.0,
        "%.0f")
    for t in (1, 2):
        o = med(vals, "ours.fcfwd.b512.blas%d.gflops" % t)
        s = med(vals, "sgemm.fcfwd.b512.blas%d.gflops" % t)
        r = med(vals, "ratio.fcfwd.b512.blas%d.ours_over_sgemm" % t)
        ratio = o / s if o and s else None
        met = "n/a" if ratio is None else ("yes" if ratio >= 0.7 else "NO")
        cols = [fmt(o), ""] if t == 1 else ["", fmt(o)]
        out.append("| fc stack forward, batch 512, GFLOP/s vs bare cblas_sgemm chain in the same process, "
                   "OPENBLAS_NUM_THREADS=%d (both sides) | %s | %s | %s (sgemm) | %s | %s (within each run) "
                   "| >= 0.70x | %s |" % (t, cols[0], cols[1], fmt(s), fmt(ratio, "%.2fx"), fmt(r, "%.2fx"), met))
    for t in (2, 1):
        tf = med(vals, "torch.fcfwd.b512.omp1.blas%d.gflops" % t)
        if tf is not None:
            best, label, _ = pick("ours.fcfwd.b512", "gflops")
            out.append("| fc stack forward, batch 512, GFLOP/s vs PyTorch no_grad (context, no target) | %s | %s | "
                       "%s (PyTorch OMP 1, OpenBLAS %d) | %s (ours at %s) | | | |" % (
                           fmt(med(vals, "ours.fcfwd.b512.blas1.gflops")), fmt(med(vals, "ours.fcfwd.b512.blas2.gflops")),
                           fmt(tf), t, fmt(best / tf if best else None, "%.2fx"), label))
    paddle_rows = []
    for name, ours_prefix, suffix, pprefix, spec in (
            ("quick-start MLP train, batch 128, steps/s", "ours.mlp.b128", "steps_per_s", "paddle.mlp.b128", "%.0f"),
            ("fc 273-400-400-400-2 train, batch 512, samples/s", "ours.fc.b512", "samples_per_s", "paddle.fc.b512", "%.0f"),
            ("fc stack forward, batch 512, GFLOP/s", "ours.fcfwd.b512", "gflops", "paddle.fcfwd.b512", "%.1f")):
        cands = {k[len(pprefix) + 1:-len(suffix) - 1]: med(vals, k) for k in vals
                 if k.startswith(pprefix + ".") and k.endswith("." + suffix)}
        if not cands:
            continue
        best, label, _ = pick(ours_prefix, suffix)
        pb = max(cands, key=cands.get)
        paddle_rows.append("| %s | %s (%s) | %s (%s) | %s | %s |" % (
            name, fmt(best, spec), label, fmt(cands[pb], spec), pb, fmt(best / cands[pb] if best else None, "%.2fx"),
            ", ".join("%s %s" % (c, fmt(v, spec)) for c, v in sorted(cands.items()))))
    if paddle_rows:
        out.append("")
        out.append("Against Paddle 3.x (PyPI; its fastest graph, static or dynamic, and thread count, 1 or 2):")
        out.append("")
        out.append("| comparison | ours (best) | Paddle (best) | ours / Paddle | every Paddle configuration (median) |")
        out.append("|---|---:|---:|---:|---|")
        out.extend(paddle_rows)
    out.append("")
    out.append("Context (not targets):")
    out.append("")
    out.append("| quantity | OPENBLAS_NUM_THREADS=1 | OPENBLAS_NUM_THREADS=2 |")
    out.append("|---|---:|---:|")
    for mode, unit in (("mlp.b128", "steps_per_s"), ("fc.b512", "samples_per_s")):
        out.append("| %s: GEMM floor (the step's matrix products alone, bare sgemm), %s | %s | %s |" % (
            mode, unit.replace("_per_s", "/s"), fmt(med(vals, "sgemmfloor.%s.blas1.%s" % (mode, unit)), "%.0f"),
            fmt(med(vals, "sgemmfloor.%s.blas2.%s" % (mode, unit)), "%.0f")))
        out.append("| %s: ours / GEMM floor (median of per-run ratios) | %s | %s |" % (
            mode, fmt(med(vals, "ratio.%s.blas1.ours_over_sgemmfloor" % mode), "%.2f"),
            fmt(med(vals, "ratio.%s.blas2.ours_over_sgemmfloor" % mode), "%.2f")))
    oc_ours = [v for k, vs in vals.items() if k.startswith("ours.") and k.endswith(".other_cpu") for v in vs]
    oc_torch = [v for k, vs in vals.items() if k.startswith("torch.") and k.endswith(".other_cpu") for v in vs]
    if oc_ours or oc_torch:
        out.append("| cores busy with other processes during the runs, median (max): ours / PyTorch | %s | %s |" % (
            "%.2f (%.2f)" % (statistics.median(oc_ours), max(oc_ours)) if oc_ours else "n/a",
            "%.2f (%.2f)" % (statistics.median(oc_torch), max(oc_torch)) if oc_torch else "n/a"))
    text = "\n".join(out) + "\n"
    print(text, end="")
    if "--markdown" in sys.argv:
        with open(sys.argv[sys.argv.index("--markdown") + 1], "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
