"""Collective ops inside programs: fluid.layers.collective._c_allreduce and _c_allgather
(fleet_layer_allreduce, fleet_layer_allgather)
under fleetrun with two workers, and alone."""
import os
import subprocess
import sys

from helpers import fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "allreduce_job.py")


def test_c_allreduce_and_allgather_over_two_workers(env, tmp_path, build_dir):
    run([fleetrun(build_dir), "--nproc_per_node", "2", sys.executable, JOB], tmp_path, env)
    for r in (0, 1):
        log = read(tmp_path / "log" / ("workerlog.%d" % r))
        for step in range(3):
            # ranks feed 1 + step and 2 + step
            want_s, want_m = float(3 + 2 * step), float(2 + step)
            line = "rank %d step %d sum [%r, %r] max [%r, %r]" % (r, step, want_s, want_s, want_m, want_m)
            assert line in log, log[-2000:]
            g = [float(1 + step)] * 2 + [float(2 + step)] * 2  # rank 0's row, then rank 1's
            assert "rank %d step %d gather [2, 2] %r" % (r, step, g) in log, log[-2000:]


def test_c_allreduce_on_one_worker_is_the_input_and_checks_its_arguments(env, tmp_path):
    out = run([sys.executable, JOB], tmp_path, env)
    assert "rank 0 step 2 sum [3.0, 3.0] max [3.0, 3.0]" in out, out
    assert "rank 0 step 2 gather [1, 2] [3.0, 3.0]" in out, out
    code = r'''
import fleet_c.fluid as fluid
x = fluid.layers.data(name="x", shape=[2], dtype="float32")
try:
    fluid.layers.collective._c_allreduce(x)
except Exception as e:
    print("E1", e)
from fleet_c.fluid.incubate.fleet.collective import fleet
fleet.init()
try:
    fluid.layers.collective._c_allreduce(x, reduce_type="avg")
except ValueError as e:
    print("E2", e)
'''
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    assert "E1 layers.collective._c_allreduce: call fleet.init() first" in p.stdout, p.stdout
    assert "E2 _c_allreduce: fleet_layer_allreduce: reduce_type 'avg' is invalid: expected sum, max or min" in p.stdout, p.stdout
