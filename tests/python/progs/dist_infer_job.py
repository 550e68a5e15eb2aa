"""paddle.distributed.fleet.utils.DistributedInfer with parameter servers (a sparse embedding
table on the servers, a dense fc):

    dist_infer_job.py train DIR   under fleetrun (servers and workers): sync training, then
                                  each worker prints the trained program's predictions on a
                                  fixed batch (its for_test clone) and those of
                                  DistributedInfer's program (a test program built again with
                                  the same names); worker 0 saves the job into DIR
    dist_infer_job.py infer DIR   a job of its own (under fleetrun, or alone: no servers):
                                  init_distributed_infer_env(exe, loss, dirname=DIR), then
                                  DistributedInfer's predictions on the same batch

Prints "<tag> rank <r> pred v1 v2 ..." lines."""
import sys

import numpy as np

import fleet_c as paddle
import fleet_c.fluid as fluid
from fleet_c._lib import FleetError
from fleet_c.distributed import fleet
from fleet_c.distributed.fleet.utils import DistributedInfer

VOCAB, DIM, BATCH = 100, 8, 16
mode, dirname = sys.argv[1], sys.argv[2]


def net():
    ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
    label = fluid.layers.data(name="label", shape=[1], dtype="float32")
    emb = fluid.layers.embedding(input=ids, size=[VOCAB, DIM], is_sparse=True,
                                 param_attr=fluid.ParamAttr(name="emb", initializer=fluid.initializer.Uniform()))
    pred = fluid.layers.fc(input=emb, size=1, act="sigmoid")
    loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=label))
    return pred, loss


def batch(step, rank):
    ids = ((np.arange(BATCH) * 7 + step * 3 + rank) % 90).astype(np.int64).reshape(-1, 1)  # ids 90..99 never train
    return {"ids": ids, "label": (ids % 2).astype(np.float32)}


TEST = {"ids": np.array([[1], [2], [3], [10], [45], [88], [95], [99]], np.int64),
        "label": np.zeros((8, 1), np.float32)}


def show(tag, values):
    print("%s rank %d pred %s" % (tag, max(fleet.worker_index(), 0),
                                  " ".join("%.7f" % v for v in np.array(values).reshape(-1))), flush=True)


def test_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        pred, _ = net()
    return main, startup, pred


exe = fluid.Executor(fluid.CPUPlace())
if mode == "train":
    with fluid.unique_name.guard():
        pred, loss = net()
    fleet.init()
    try:  # before minimize the servers' tables are not known yet
        DistributedInfer(*test_program()[:2]).get_dist_infer_program()
        raise AssertionError("get_dist_infer_program before minimize was accepted")
    except FleetError as e:
        assert "fleet_dist_infer_program" in str(e), e
        print("before minimize: %s" % e, flush=True)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = False
    fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.5), strategy).minimize(loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        sys.exit(0)
    exe.run(fluid.default_startup_program())
    fleet.init_worker()
    for step in range(30):
        exe.run(fluid.default_main_program(), feed=batch(step, fleet.worker_index()), fetch_list=[loss])
    fleet.barrier_worker()
    trained = fluid.default_main_program().clone(for_test=True)
    show("trained", exe.run(trained, feed=TEST, fetch_list=[pred])[0])
    main, startup, tpred = test_program()
    infer = DistributedInfer(main_program=main, startup_program=startup)
    infer.init_distributed_infer_env(exe, loss)  # the fleet exists: nothing to do
    program = infer.get_dist_infer_program()
    assert "distributed_lookup_table" in program.op_types() and "lookup_table" not in program.op_types(), \
        program.op_types()
    show("distinfer", exe.run(program, feed=TEST, fetch_list=[tpred.name])[0])
    fleet.barrier_worker()
    fleet.save_persistables(exe, dirname)
    fleet.barrier_worker()
    fleet.stop_worker()
else:
    with fluid.unique_name.guard():
        pred, loss = net()
    infer = DistributedInfer()
    infer.init_distributed_infer_env(exe, loss, dirname=dirname)
    if fleet.is_server():
        sys.exit(0)
    show("infer", exe.run(infer.get_dist_infer_program(), feed=TEST, fetch_list=[pred.name])[0])
    fleet.stop_worker()
