"""A learning-rate schedule with asynchronous and half-asynchronous parameter servers
(progs/ps_lr_schedule_job.py under fleetrun): the rate each step applies follows the
schedule over the job's batch count (every worker's, as Paddle's servers count them), and
the servers' weight moves by exactly the rates applied."""
import os
import sys

import numpy as np
import pytest

from helpers import costs, fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "ps_lr_schedule_job.py")


def _rate(count):
    return 0.1 * 0.5 ** (count // 5)


@pytest.mark.parametrize("mode", ["async", "half_async"])
def test_one_worker_applies_the_scheduled_rate(env, tmp_path, build_dir, mode):
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "1", sys.executable, JOB], tmp_path,
        dict(env, MODE=mode, STEPS="12"))
    lrs = costs(read(tmp_path / "log" / "workerlog.0"), r"worker 0 step \d+ lr ([0-9.e-]+)")
    assert lrs == pytest.approx([_rate(i) for i in range(12)], rel=1e-6), lrs
    # the servers' w after the last step: 1 - the sum of the rates (x = 1, gradient 1)
    check = r'''
import numpy as np, fleet_c.fluid as fluid
exe = fluid.Executor(fluid.CPUPlace())
prog, feeds, targets = fluid.io.load_inference_model("model", exe)
print("w %.9g" % float(exe.run(prog, feed={feeds[0]: np.ones((1, 1), np.float32)}, fetch_list=targets)[0]))
'''
    out = run([sys.executable, "-c", check], tmp_path, env)
    w = costs(out, r"w ([0-9.e-]+)")[0]
    assert w == pytest.approx(1.0 - sum(_rate(i) for i in range(12)), abs=1e-6), (w, lrs)


def test_two_async_workers_count_the_jobs_batches(env, tmp_path, build_dir):
    """Each step of a worker advances the schedule's counter by the number of workers: the
    rate halves every 5 of the job's batches, i.e. every 2.5 steps of each worker."""
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", sys.executable, JOB], tmp_path,
        dict(env, MODE="async", STEPS="10"))
    for r in (0, 1):
        lrs = costs(read(tmp_path / "log" / ("workerlog.%d" % r)), r"worker %d step \d+ lr ([0-9.e-]+)" % r)
        assert lrs == pytest.approx([_rate(2 * i) for i in range(10)], rel=1e-6), lrs
