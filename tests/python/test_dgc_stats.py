"""fleet.dgc_stats(): what strategy.dgc exchanged on a worker (fleet_dgc_stats_get), on one
local worker (all zero) and on two collective workers under fleetrun."""
import json
import os

import pytest

import fleet_c
import fleet_c._fleet
from helpers import fleetrun, read, run

STEPS, DENSE = 8, 3

# Two fc layers: fc_0.w_0 has 32 x 1024 = 32768 weights (compressed), the rest are below
# 16384 elements (allreduced as usual).  Each worker prints its stats as one JSON line.
PROG = """
import json
import numpy as np
import fleet_c.fluid as fluid
from fleet_c.distributed import fleet

strategy = fleet.DistributedStrategy()
strategy.dgc = True
strategy.dgc_configs = {"rampup_begin_step": %(dense)d, "rampup_step": 1, "sparsity": [0.99]}
fleet.init(is_collective=True, strategy=strategy)
x = fluid.layers.data(name="x", shape=[32], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="int64")
h = fluid.layers.fc(input=x, size=1024, act="tanh")
pred = fluid.layers.fc(input=h, size=2, act="softmax")
cost = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=y))
opt = fleet.distributed_optimizer(fluid.optimizer.Momentum(learning_rate=0.01, momentum=0.9), strategy)
opt.minimize(cost)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
before = fleet.dgc_stats()
rng = np.random.RandomState(fleet.worker_index())
for step in range(%(steps)d):
    xs = rng.uniform(-1, 1, size=(64, 32)).astype("float32")
    ys = (xs[:, 0] > xs[:, 1]).astype("int64").reshape(64, 1)
    exe.run(fluid.default_main_program(), feed={"x": xs, "y": ys}, fetch_list=[cost.name])
print("dgc_stats before " + json.dumps(before))
print("dgc_stats after " + json.dumps(fleet.dgc_stats()))
""" % {"dense": DENSE, "steps": STEPS}

KEYS = ["params", "dense_steps", "sparse_steps", "dense_bytes", "sparse_bytes"]


def _stats(log, when):
    for line in log.splitlines():
        if line.startswith("dgc_stats %s " % when):
            return json.loads(line.split(" ", 2)[2])
    pytest.fail("no 'dgc_stats %s' line in:\n%s" % (when, log[-3000:]))


def test_dgc_stats_on_one_local_worker_are_zero_and_need_init():
    f = fleet_c._fleet.Fleet()
    with pytest.raises(fleet_c.FleetError, match=r"fleet.init\(\) has not been called"):
        f.dgc_stats()
    env = {k: v for k, v in os.environ.items() if k.startswith(("PADDLE_", "TRAINING_ROLE"))}
    assert not env, "run the tests outside a launcher: %s" % env
    f.init(is_collective=True)
    assert f.dgc_stats() == {k: 0 for k in KEYS}


def test_dgc_stats_of_two_collective_workers(tmp_path, env, build_dir):
    (tmp_path / "dgc_train.py").write_text(PROG)
    run([fleetrun(build_dir), "--nproc_per_node", "2", "python3", "dgc_train.py"], tmp_path, env)
    for w in (0, 1):
        log = read(tmp_path / "log" / ("workerlog.%d" % w))
        before, after = _stats(log, "before"), _stats(log, "after")
        assert sorted(after) == sorted(KEYS)
        # after minimize: one parameter compressed, nothing exchanged yet
        assert before == {"params": 1, "dense_steps": 0, "sparse_steps": 0, "dense_bytes": 0, "sparse_bytes": 0}
        assert after["params"] == 1
        assert after["dense_steps"] == DENSE and after["sparse_steps"] == STEPS - DENSE, after
        assert after["dense_bytes"] > 0 and after["sparse_bytes"] > 0, after
        # a dense step: a ring allreduce of 32768 floats (4 bytes each at two ranks); a sparse
        # step: an allgather of the top 1% as 8-byte (index, value) pairs, 2 x (1 - 0.99) of
        # that (bounds as in tests/test_dgc.c)
        dense_per_step = after["dense_bytes"] / DENSE
        sparse_per_step = after["sparse_bytes"] / (STEPS - DENSE)
        assert dense_per_step >= 0.9 * 32768 * 4, after
        assert sparse_per_step < 4 * (1 - 0.99) * dense_per_step, after
