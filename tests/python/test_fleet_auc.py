"""paddle.distributed.fleet.metrics.auc (progs/fleet_auc_job.py): alone, the global AUC of
the auc layer's bucket statistics equals the auc op's own value; with two collective
workers under fleetrun, each worker's global AUC equals the AUC of one program fed the
union of both workers' data (the summed buckets are that program's buckets: equal to the
printed 12 digits)."""
import math
import os
import re
import sys

import pytest

from helpers import fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "fleet_auc_job.py")
LINE = r"rank (\d) local ([0-9.]+) global ([0-9.]+) by_name ([0-9.]+) union ([0-9.]+)"


def _values(text):
    m = re.findall(LINE, text)
    assert m, text[-2000:]
    return [float(x) for x in m[-1][1:]]


def test_auc_alone_equals_the_op(env, tmp_path):
    local, glob_, by_name, union = _values(run([sys.executable, JOB], tmp_path, env))
    assert 0.6 < local < 0.95, local
    assert glob_ == local and by_name == local and union == local


def test_auc_over_two_workers_is_the_union_auc(env, tmp_path, build_dir):
    run([fleetrun(build_dir), "--nproc_per_node", "2", sys.executable, JOB], tmp_path, env)
    got = [_values(read(tmp_path / "log" / ("workerlog.%d" % r))) for r in (0, 1)]
    for local, glob_, by_name, union in got:
        assert glob_ == union and by_name == union, got
    assert got[0][1] == got[1][1]
    assert got[0][0] != got[1][0], "the workers' own AUCs should differ (different halves): %s" % got


def test_auc_checks_its_arguments(env):
    import numpy as np

    from fleet_c.distributed import fleet
    with pytest.raises(ValueError, match="stat_pos"):
        fleet.metrics.auc(np.zeros((2, 4), np.int64), np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="differ in shape"):
        fleet.metrics.auc(np.zeros((1, 4), np.int64), np.zeros((1, 5), np.int64))


def test_auc_from_stats_in_c(env):
    """fl_auc_from_stats itself: a perfect ranking is 1, a reversed one 0, ties a half, no
    negatives 0.5 (as Paddle's fleet.metrics.auc), a negative count is refused by name."""
    import ctypes

    import numpy as np

    from fleet_c._lib import FleetError, check, lib
    i64 = ctypes.POINTER(ctypes.c_int64)

    def auc(pos, neg):
        pos, neg, out = np.array(pos, np.int64), np.array(neg, np.int64), ctypes.c_double()
        check(lib.fl_auc_from_stats(pos.ctypes.data_as(i64), neg.ctypes.data_as(i64), pos.size, ctypes.byref(out)))
        return out.value

    assert auc([0, 0, 3], [2, 0, 0]) == 1.0
    assert auc([3, 0, 0], [0, 0, 2]) == 0.0
    assert auc([0, 2, 0], [0, 2, 0]) == 0.5
    assert auc([1, 2, 3], [0, 0, 0]) == 0.5
    assert math.isclose(auc([1, 1], [1, 0]), 0.75)
    with pytest.raises(FleetError, match="stat_neg"):
        auc([1, 2], [0, -1])
