"""paddle.distributed.fleet.metrics (progs/fleet_metrics_job.py under fleetrun, two
collective workers): every worker gets the statistics of both (worker r holds r + 1)."""
import math
import os
import sys

from helpers import fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "fleet_metrics_job.py")


def test_metrics_over_two_workers(env, tmp_path, build_dir):
    run([fleetrun(build_dir), "--nproc_per_node", "2", sys.executable, JOB], tmp_path, env)
    for r in (0, 1):
        log = read(tmp_path / "log" / ("workerlog.%d" % r))
        assert ("rank %d sum [3.0, -3.0] max [2.0, -1.0] min [1.0, -2.0] stat [3.0, 3.0]" % r) in log, log[-2000:]
        assert ("rank %d acc %.6f mae %.6f mse %.6f rmse %.6f" % (r, 0.15, 0.75, 0.75, math.sqrt(0.75))) in log, \
            log[-2000:]
