"""The seeds' programs with only their import lines changed (paddle -> fleet_c), run as
their users run them: with python3, and under fleetrun for parameter-server and
collective training.  Each <prog>.paddle.py beside <prog>.py is the Paddle original."""
import glob
import os
import re

import pytest

from conftest import SEEDS
from helpers import costs, fleetrun, read, run

IMPORT = re.compile(r"^\s*(import|from)\s")


@pytest.mark.parametrize("original", sorted(glob.glob(os.path.join(SEEDS, "*", "*.paddle.py"))),
                         ids=lambda p: os.path.relpath(p, SEEDS))
def test_programs_differ_from_paddle_only_in_import_lines(original):
    ours = original.replace(".paddle.py", ".py")
    a, b = read(original).splitlines(), read(ours).splitlines()
    assert len(a) == len(b), "%s and %s differ in length" % (original, ours)
    for n, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            assert IMPORT.match(x) and IMPORT.match(y), "line %d of %s is not an import: %r -> %r" % (n, ours, x, y)
            assert "paddle" in x and "fleet_c" in y


def _falls(values, what):
    assert len(values) > 20, "%s: too few cost lines" % what
    head, tail = sum(values[:10]) / 10, sum(values[-10:]) / 10
    assert tail < 0.7 * head, "%s: the cost does not fall (%.3f -> %.3f)" % (what, head, tail)


# ---- quick start (the English quick start: local, parameter server, collective) -----------------------


def test_quick_start_local(seed_dir, env):
    d = seed_dir("quick_start")
    out = run(["python3", "local_trainer.py"], d, env)
    c = costs(out, r"step\d+ cost=([0-9.]+)")
    assert len(c) == 1001
    _falls(c, "local_trainer.py")


def test_quick_start_parameter_server(seed_dir, env, build_dir):
    d = seed_dir("quick_start")
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", "python3", "distributed_train.py"], d, env)
    for w in (0, 1):
        log = read(d / "log" / ("workerlog.%d" % w))
        c = costs(log, r"worker_index: %d, step\d+ cost = ([0-9.]+)" % w)
        assert len(c) == 1001, "worker %d ran %d steps" % (w, len(c))
        _falls(c, "distributed_train.py worker %d" % w)


def test_quick_start_collective(seed_dir, env, build_dir):
    d = seed_dir("quick_start")
    run([fleetrun(build_dir), "--nproc_per_node", "2", "python3", "collective_train.py"], d, env)
    for w in (0, 1):
        log = read(d / "log" / ("workerlog.%d" % w))
        c = costs(log, r"worker_index: %d, step\d+ cost = ([0-9.]+)" % w)
        assert len(c) == 1001, "trainer %d ran %d steps" % (w, len(c))
        _falls(c, "collective_train.py trainer %d" % w)


# ---- CTR with a QueueDataset and a pipe_command (seed 003's train.py) ------------------------------


def _criteo(d, build_dir, env):
    """raw_data/part-0: 600 Criteo-format lines from fleet-datagen."""
    run([os.path.join(build_dir, "tools", "fleet-datagen"), "criteo", "--rows", "600", "--test-rows", "0",
         "--out", "gen", "--vocab-scale", "0.01"], d, env)
    os.makedirs(str(d / "raw_data"))
    os.rename(str(d / "gen" / "train" / "part-00000"), str(d / "raw_data" / "part-0"))


def test_ctr_local(seed_dir, env, build_dir):
    d = seed_dir("ctr")
    _criteo(d, build_dir, env)
    run(["python3", "train.py", "--is_local", "1"], d, env)


def test_ctr_parameter_server(seed_dir, env, build_dir):
    """The seed's worker never calls stop_worker(): the package stops it at exit, and the
    server exits when both workers have (FLEET_LOG_LEVEL=info shows both)."""
    d = seed_dir("ctr")
    _criteo(d, build_dir, env)
    e = dict(env, FLEET_LOG_LEVEL="info", FLEET_LOG_SUBSYS="fleet")
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", "python3", "train.py"], d, e)
    for w in (0, 1):
        steps = costs(read(d / "log" / ("workerlog.%d" % w)), r"worker %d stopped after (\d+) steps" % w)
        assert steps == [120.0], "worker %d: 20 epochs of 6 batches expected, log says %s" % (w, steps)
    assert "every worker stopped" in read(d / "log" / "serverlog.0")


# ---- ResNet, one trainer and data parallel (seed 004) -----------------------------------------------------

LINE = r"\[Epoch (\d+), batch (\d+)\] loss: ([0-9.]+), acc1: ([0-9.]+), acc5: ([0-9.]+)"


def _epochs(text):
    rows = [m.groups() for m in re.finditer(LINE, text)]
    assert len(rows) == 20, "expected 10 epochs of 2 batches, got %d lines" % len(rows)
    return [float(r[2]) for r in rows]


def test_resnet_single_trainer(seed_dir, env):
    d = seed_dir("resnet")
    loss = _epochs(run(["python3", "train_resnet.py"], d, env))
    assert loss[-1] < loss[0]


def test_resnet_data_parallel(seed_dir, env, build_dir):
    d = seed_dir("resnet")
    run([fleetrun(build_dir), "--nproc_per_node", "2", "python3", "train_fleet_static.py"], d, env)
    for w in (0, 1):
        loss = _epochs(read(d / "log" / ("workerlog.%d" % w)))
        assert loss[-1] < loss[0], "trainer %d: loss %s" % (w, loss)
