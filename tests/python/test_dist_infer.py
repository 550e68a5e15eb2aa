"""paddle.distributed.fleet.utils.DistributedInfer (progs/dist_infer_job.py): parameter
servers (1 server, 2 workers, sync) train a sparse embedding and an fc; then

- in the training job, DistributedInfer's program (a test program built again with the
  trained names, its lookups pulling from the servers) predicts what the trained program's
  for_test clone predicts on the same batch (ids never trained included: both read zeros);
- a job of its own (1 server, 1 worker) with init_distributed_infer_env(dirname=the save)
  predicts the same: the server loads the tables, the worker pulls the dense ones;
- alone (no servers), init_distributed_infer_env loads the parameter-server save into the
  local program and predicts the same.

Tolerance: equal to 1e-6 (the same float32 arithmetic on the same values)."""
import os
import re
import sys

from helpers import fleetrun, read, run

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "dist_infer_job.py")


def _pred(text, tag, rank=0):
    m = re.findall(r"^%s rank %d pred ([0-9. e-]+)$" % (tag, rank), text, re.M)
    assert m, "no %s predictions of rank %d in:\n%s" % (tag, rank, text[-3000:])
    return [float(x) for x in m[-1].split()]


def _close(a, b, what):
    assert len(a) == len(b) == 8 and all(abs(x - y) < 1e-6 for x, y in zip(a, b)), (what, a, b)


def test_dist_infer_after_training_and_in_jobs_of_its_own(env, tmp_path, build_dir):
    save = str(tmp_path / "saved")
    train = tmp_path / "train"
    train.mkdir()
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", sys.executable, JOB, "train", save], train, env,
        timeout=240)
    logs = [read(train / "log" / ("workerlog.%d" % r)) for r in (0, 1)]
    trained = _pred(logs[0], "trained")
    assert len(set(round(v, 4) for v in trained)) > 2, "the model learned nothing: %s" % trained
    for r in (0, 1):
        assert "before minimize: fleet_dist_infer_program" in logs[r], logs[r][-3000:]
        _close(_pred(logs[r], "distinfer", r), _pred(logs[r], "trained", r), "worker %d in the training job" % r)
    assert os.path.exists(os.path.join(save, "ps_manifest.json")), os.listdir(save)

    infer = tmp_path / "infer"
    infer.mkdir()
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "1", sys.executable, JOB, "infer", save], infer, env,
        timeout=240)
    _close(_pred(read(infer / "log" / "workerlog.0"), "infer"), trained, "a parameter-server job of its own")

    alone = run([sys.executable, JOB, "infer", save], tmp_path, env)
    _close(_pred(alone, "infer"), trained, "alone, loading the save")
