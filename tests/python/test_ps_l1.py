"""L1Decay with parameter servers (progs/ps_l1_job.py under fleetrun, one server, two
workers): the L1 term rate * coeff * sign(w) is computed on each worker from its copy of
the dense weights and applied by the servers, in sync mode (the two workers' mean each
step) and in async mode (every push: the communicator sums what it merges).  With a zero
data gradient the servers' weights after the run are known exactly."""
import glob
import os
import sys

import numpy as np
import pytest

from helpers import fleetrun, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "ps_l1_job.py")


@pytest.mark.parametrize("mode, pushes_per_step", [("sync", 1), ("async", 2)])
def test_l1_decay_applied_by_the_servers(env, tmp_path, build_dir, mode, pushes_per_step):
    steps = 8
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", sys.executable, JOB], tmp_path,
        dict(env, MODE=mode, STEPS=str(steps)))
    from safetensors.numpy import load_file
    moved = steps * pushes_per_step * 0.1 * 0.05
    for name, w0 in (("wp", 0.5), ("wn", -0.5)):
        part = glob.glob(str(tmp_path / "model" / name / "*.safetensors"))
        assert len(part) == 1, part
        w = load_file(part[0])["values"]
        np.testing.assert_allclose(w, np.full_like(w, w0 - np.sign(w0) * moved), atol=1e-6)
