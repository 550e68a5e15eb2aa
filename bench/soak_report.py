#!/usr/bin/env python3
"""soak_report.py DIR - the report of a bench/soak.sh run (Markdown on stdout).

Reads what soak.sh left in DIR: each job's rounds (JOB/rounds, JOB/roundN/fleetrun.out and
log/), the kills, the samples (peak RSS, fleetrun's open files), the flood's summary and the
leftover checks.

Lost steps: a worker's log runs on across restarts (fleetrun marks each restart with a
"==== fleetrun: restart" line).  The batches a worker had trained in an epoch that did not
end (no "epoch N:" line, so no checkpoint) are lost: the restarted job trains that epoch
again from the last checkpoint.  They are counted from the "train batch N" progress lines
(printed every 10 batches, so the count is exact to 10 batches per interruption).
"""
import os
import re
import statistics
import sys

JOBS = ["ps_soak", "coll_soak", "ps_twin", "coll_twin"]


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def lost_steps(log):
    """(lost batches, epochs done twice, generations) of one worker log."""
    lost = redone = 0
    cur = 0
    last_epoch = -1
    gens = 1
    for line in log.splitlines():
        m = re.match(r"train batch (\d+)", line)
        if m:
            n = int(m.group(1))
            if n < cur:  # a new pass began without an epoch line: the last one was cut
                lost += cur
            cur = n
            continue
        m = re.match(r"epoch (\d+):", line)
        if m:
            last_epoch = int(m.group(1))
            cur = 0
            continue
        if "fleetrun: restart" in line:
            gens += 1
            lost += cur
            cur = 0
            continue
        m = re.match(r"resumed after epoch (-?\d+)", line)
        if m and last_epoch > int(m.group(1)):  # finished but its checkpoint was not written
            redone += last_epoch - int(m.group(1))
    lost += cur
    return lost, redone, gens


def job_rounds(w, job):
    rounds = []
    for line in read(os.path.join(w, job, "rounds")).splitlines():
        r, rc, t0, t1 = line.split()
        d = os.path.join(w, job, "round" + r)
        out = read(os.path.join(d, "fleetrun.out"))
        logs = os.path.join(d, "log")
        lost = redone = 0
        auc = None
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            if not name.startswith("workerlog."):
                continue
            text = read(os.path.join(logs, name))
            a, b, _ = lost_steps(text)
            lost += a
            redone += b
            m = re.findall(r"^test auc ([0-9.]+)", text, re.M)
            if m:
                auc = float(m[-1])
        rounds.append(
            dict(
                r=int(r),
                rc=int(rc),
                secs=float(t1) - float(t0),
                restarts=len(re.findall(r"restarting the job: restart", out)),
                lost=lost,
                redone=redone,
                auc=auc,
            )
        )
    return rounds


def fmt_auc(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    return "%.4f (%s)" % (statistics.mean(vals), ", ".join("%.4f" % v for v in vals))


def main():
    w = sys.argv[1]
    kills = [l.split(None, 5) for l in read(os.path.join(w, "kills")).splitlines()]
    samples = [l.split() for l in read(os.path.join(w, "samples")).splitlines()]
    print("## Soak run (%s)\n" % w)
    print("| job | rounds (ok / failed) | kills | restarts | lost steps (batches) | epochs redone | "
          "round time s (median) | final test AUC: mean (each round) |")
    print("|---|---|---|---|---|---|---|---|")
    aucs = {}
    for job in JOBS:
        rs = job_rounds(w, job)
        ok = [x for x in rs if x["rc"] == 0]
        nk = sum(1 for k in kills if len(k) >= 6 and k[1] == job and k[5] == "killed")
        aucs[job] = [x["auc"] for x in ok]
        print("| %s | %d (%d / %d) | %d | %d | %d | %d | %s | %s |" % (
            job, len(rs), len(ok), len(rs) - len(ok), nk, sum(x["restarts"] for x in rs),
            sum(x["lost"] for x in rs), sum(x["redone"] for x in rs),
            "%.0f" % statistics.median([x["secs"] for x in rs]) if rs else "-", fmt_auc(aucs[job])))
    for soak, twin in (("ps_soak", "ps_twin"), ("coll_soak", "coll_twin")):
        a = [v for v in aucs[soak] if v is not None]
        b = [v for v in aucs[twin] if v is not None]
        if a and b:
            print("\n%s vs %s: mean final test AUC %.4f vs %.4f (difference %+.4f)" %
                  (soak, twin, statistics.mean(a), statistics.mean(b), statistics.mean(a) - statistics.mean(b)))
    failed = [(job, x) for job in JOBS for x in job_rounds(w, job) if x["rc"] != 0]
    for job, x in failed:
        print("\nfailed: %s round %d (exit %d): see %s" % (job, x["r"], x["rc"],
                                                     os.path.join(w, job, "round%d" % x["r"], "fleetrun.out")))
    cut = read(os.path.join(w, "cut")).strip()
    if cut:
        print("\ncut at the end: " + cut.replace("\n", "; "))

    print("\n### Kills\n")
    start = int(read(os.path.join(w, "start"), "0").strip() or 0)
    for k in kills:
        print("- at %d s: %s" % (int(k[0]) - start, " ".join(k[1:])))
    if not kills:
        print("- none")

    print("\n### Peak RSS of each process (MiB, highest VmHWM over all rounds and restarts)\n")
    peak = {}
    for s in samples:
        if s[0] == "rss" and len(s) == 6:
            key = (s[1], s[4])
            peak[key] = max(peak.get(key, 0), int(s[5]))
    print("| job | " + " | ".join(sorted({k[1] for k in peak})) + " |")
    print("|---|" + "---|" * len({k[1] for k in peak}))
    for job in JOBS:
        print("| %s | " % job + " | ".join(
            "%.0f" % (peak[(job, p)] / 1024) if (job, p) in peak else "-" for p in sorted({k[1] for k in peak})) + " |")

    print("\n### fleetrun's open files (first and last sample of each round)\n")
    fds = {}
    for s in samples:
        if s[0] == "fd" and len(s) == 5 and s[4] != "0":
            fds.setdefault((s[1], int(s[2])), []).append(int(s[4]))
    for job in JOBS:
        rows = ["round %d: %d -> %d" % (r, v[0], v[-1]) for (j, r), v in sorted(fds.items()) if j == job]
        print("- %s: %s" % (job, "; ".join(rows) if rows else "no sample"))

    print("\n### Flood\n")
    print(read(os.path.join(w, "flood.out")).strip() or "(no output)")
    ports = sorted({tuple(l.split()) for l in read(os.path.join(w, "ports.seen")).splitlines()})
    print("\nports flooded: %s" % ", ".join(p for j, p in ports if j.endswith("_soak")))

    print("\n### Left behind\n")
    for what, f in (("processes", "left.procs"), ("/dev/shm files", "left.shm"), ("listening ports", "left.ports")):
        t = read(os.path.join(w, f)).strip()
        print("- %s: %s" % (what, "none" if not t else "\n    " + t.replace("\n", "\n    ")))


if __name__ == "__main__":
    main()
