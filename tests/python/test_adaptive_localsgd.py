"""strategy.adaptive_localsgd (Paddle's adaptive LocalSGD) under fleetrun with two workers:
the steps where the parameters are averaged and the k chosen after each average follow
Paddle's rule, recomputed here from the losses the workers print."""
import math
import os
import re
import sys

import numpy as np

from helpers import fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "adaptive_localsgd_job.py")
LINE = re.compile(r"step (\d+) loss (\S+) wsum (\S+) k (\d+) last (\d+)")


def _rows(text):
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3)), int(m.group(4)), int(m.group(5)))
            for m in LINE.finditer(text)}


def test_adaptive_localsgd_averages_when_the_rule_says(env, tmp_path, build_dir):
    run([fleetrun(build_dir), "--nproc_per_node", "2", sys.executable, JOB], tmp_path, env)
    w = [_rows(read(tmp_path / "log" / ("workerlog.%d" % r))) for r in (0, 1)]
    assert sorted(w[0]) == list(range(1, 41)) and sorted(w[1]) == list(range(1, 41))
    init_k, begin, lr = 4, 3, 0.05
    mean = {s: float((np.float32(w[0][s][0]) + np.float32(w[1][s][0])) / np.float32(2)) for s in w[0]}
    loss0 = mean[1]
    k, last, averaged = init_k, 0, []
    for s in range(1, 41):
        if s <= begin or s - last == k:
            averaged.append(s)
            k = math.ceil(math.sqrt(lr * mean[s] / (lr * loss0) * init_k))
            k = min(max(k, 1), 16)
            last = s
        for r in (0, 1):
            assert (w[r][s][2], w[r][s][3]) == (k, last), (r, s, w[r][s], k, last)
        same = w[0][s][1] == w[1][s][1]
        assert same == (s in averaged), (s, w[0][s][1], w[1][s][1], averaged)
    # the loss falls, so the interval shrinks from its start (ceil(sqrt(4)) = 2) to 1
    assert len(averaged) > 3 and averaged[:3] == [1, 2, 3], averaged
    assert sum(w[0][s][0] for s in range(31, 41)) < 0.5 * sum(w[0][s][0] for s in range(1, 11))
