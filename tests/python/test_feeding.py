"""Paddle's Python data utilities and the 1.x surface its example programs use: reader
decorators, DataFeeder, DataLoader (iterable and not), the py_reader family, scope
variables, AUC state names, strategy hints, FetchHandler, paddle.dataset.mnist."""
import gzip
import os
import struct

import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid
from fleet_c.fluid.incubate.fleet.base import role_maker
from fleet_c.fluid.incubate.fleet.parameter_server.distribute_transpiler import fleet as ps_fleet
from fleet_c.fluid.transpiler.distribute_transpiler.distributed_strategy import StrategyFactory


@pytest.fixture
def progs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        yield main, startup


def _r(n):
    return lambda: iter(range(n))


def test_reader_decorators():
    assert list(paddle.batch(_r(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(paddle.batch(_r(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    s = list(paddle.reader.shuffle(_r(50), 10)())
    assert sorted(s) == list(range(50)) and s != list(range(50))
    assert list(paddle.reader.chain(_r(2), _r(3))()) == [0, 1, 0, 1, 2]
    assert list(paddle.reader.compose(_r(3), lambda: iter([(9, 8)] * 3))()) == [(0, 9, 8), (1, 9, 8), (2, 9, 8)]
    with pytest.raises(paddle.reader.ComposeNotAligned):
        list(paddle.reader.compose(_r(3), _r(2))())
    assert list(paddle.reader.firstn(_r(10), 4)()) == [0, 1, 2, 3]
    assert list(paddle.reader.map_readers(lambda a, b: a * b, _r(4), _r(4))()) == [0, 1, 4, 9]
    assert list(paddle.reader.buffered(_r(100), 5)()) == list(range(100))
    assert list(paddle.reader.xmap_readers(lambda x: x + 1, _r(50), 4, 8, order=True)()) == list(range(1, 51))
    assert sorted(paddle.reader.xmap_readers(lambda x: -x, _r(50), 3, 4)()) == sorted(-x for x in range(50))

    def bad():
        yield 1
        raise RuntimeError("reader broke")
    with pytest.raises(RuntimeError, match="reader broke"):
        list(paddle.reader.buffered(bad, 2)())
    with pytest.raises(TypeError, match="paddle.batch: reader must be a function"):
        paddle.batch([1, 2], 2)


def _net():
    x = fluid.layers.data(name="x", shape=[2], dtype="float32")
    ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    emb = fluid.layers.sequence_pool(fluid.layers.embedding(input=ids, size=[10, 2]), "sum")
    pred = fluid.layers.fc(input=fluid.layers.concat([x, emb], axis=1), size=2, act="softmax")
    cost = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=y))
    fluid.optimizer.SGD(learning_rate=0.5).minimize(cost)
    return [x, ids, y], cost


def _samples(n, seed=0):
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        lab = int(rng.randint(2))
        out.append(([float(lab), -float(lab)], [int(v) for v in rng.randint(10, size=1 + rng.randint(3))], [lab]))
    return out


def test_data_feeder_makes_lod_tensors(progs):
    feed_vars, _ = _net()
    f = fluid.DataFeeder(feed_list=feed_vars, place=fluid.CPUPlace())
    d = f.feed([([1.0, 2.0], [3, 4, 5], [1]), ([3.0, 4.0], [6], [0])])
    assert isinstance(d["x"], fluid.LoDTensor) and d["x"].shape() == [2, 2]
    assert d["ids"].recursive_sequence_lengths() == [[3, 1]]
    assert np.array(d["ids"]).reshape(-1).tolist() == [3, 4, 5, 6]
    assert d["y"].shape() == [2, 1] and np.array(d["y"]).dtype == np.int64
    with pytest.raises(ValueError, match="3 entries"):
        f.feed([([1.0, 2.0], [3])])


def test_data_loader_iterable_trains(progs):
    main, startup = progs
    feed_vars, cost = _net()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    loader = fluid.io.DataLoader.from_generator(feed_list=feed_vars, capacity=4)
    data = _samples(64)
    loader.set_sample_generator(lambda: iter(data), batch_size=8, drop_last=True)
    costs = []
    for _ in range(5):
        for d in loader():
            costs.append(float(exe.run(main, feed=d, fetch_list=[cost])[0]))
    assert len(costs) == 40 and np.mean(costs[-8:]) < 0.5 * np.mean(costs[:8])


def test_non_iterable_loader_and_py_reader(progs):
    main, startup = progs
    feed_vars, cost = _net()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    r = fluid.layers.create_py_reader_by_data(capacity=4, feed_list=feed_vars, name="r")
    assert fluid.layers.read_file(r) == feed_vars
    r.decorate_paddle_reader(paddle.batch(lambda: iter(_samples(20)), 8))
    for _ in range(2):
        r.start()
        n = 0
        with pytest.raises(fluid.core.EOFException):
            while True:
                exe.run(main, fetch_list=[cost])
                n += 1
        r.reset()
        assert n == 3  # 8 + 8 + 4
    with pytest.raises(ValueError, match="not iterable"):
        iter(r).__next__()


def test_py_reader_makes_its_variables(progs):
    r = fluid.layers.py_reader(capacity=2, shapes=[[-1, 3], [-1, 1]], dtypes=["float32", "int64"], name="pr")
    x, y = fluid.layers.read_file(r)
    assert x.shape == (-1, 3) and y.dtype == "int64"


def test_batch_generator_of_arrays(progs):
    main, startup = progs
    x = fluid.layers.data(name="x", shape=[2], dtype="float32")
    out = fluid.layers.scale(x, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2, return_list=True)
    loader.set_batch_generator(lambda: iter([[np.ones((3, 2), np.float32)]] * 2))
    got = [exe.run(main, feed={"x": d[0]}, fetch_list=[out])[0] for d in loader()]
    assert len(got) == 2 and np.allclose(got[0], 2.0)


def test_scope_variables_write_back_and_refuse_unknown_names(progs):
    main, startup = progs
    x = fluid.layers.data(name="x", shape=[2], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    p = fluid.layers.fc(input=x, size=2, act="softmax")
    fluid.layers.auc(input=p, label=y)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": np.ones((4, 2), np.float32), "y": np.array([[0], [1], [1], [0]], np.int64)})
    scope = fluid.global_scope()
    t = scope.var("_generated_var_3").get_tensor()  # the global StatNeg
    assert np.array(t).sum() > 0
    t.set(np.zeros(t._get_dims()).astype("int64"), fluid.CPUPlace())
    assert np.array(scope.find_var("_generated_var_3").get_tensor()).sum() == 0
    assert np.array(scope.find_var("auc_0.tmp_5").get_tensor()).sum() == 0
    with pytest.raises(LookupError, match="no such variable"):  # fleet_c.NotFoundError
        scope.var("fc_0.w_9").get_tensor()


def test_zip_samples_from_a_data_generator():
    from fleet_c.distributed.fleet.data_generator import MultiSlotDataGenerator
    g = MultiSlotDataGenerator()
    assert g._gen_str(zip(["a", "b"], [[1, 2], [3.5]])) == "2 1 2 1 3.5\n"


def test_strategy_hints_are_accepted_once(capfd):
    from fleet_c.fluid.incubate.fleet.collective import DistributedStrategy
    s = DistributedStrategy()
    s.nccl_comm_num = 2
    s.fuse_bn_act_ops = True
    s._pointer()
    err = capfd.readouterr().err
    assert err.count("has no effect on this build") == 1
    with pytest.raises(ValueError):
        s.no_such_field = 1


def test_strategy_factory_modes():
    assert StrategyFactory.create_sync_strategy()._to_strategy().a_sync is False
    assert StrategyFactory.create_async_strategy()._to_strategy().a_sync is True
    h = StrategyFactory.create_half_async_strategy()._to_strategy()
    assert h.a_sync_configs["half_async"] is True
    assert StrategyFactory.create_geo_strategy(40)._to_strategy().a_sync_configs["k_steps"] == 40


def test_role_maker_answers_after_init(progs):
    role = role_maker.PaddleCloudRoleMaker()
    with pytest.raises(RuntimeError, match="call fleet.init"):
        role.is_worker()
    ps_fleet.init(role)
    assert role.is_worker() and not role.is_server() and role.worker_index() == 0 and role.worker_num() == 1
    assert ps_fleet.main_program is fluid.default_main_program()


def test_fetch_handler(progs, tmp_path):
    main, startup = progs
    x = fluid.layers.data(name="x", shape=[1], dtype="int64", lod_level=1)
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    e = fluid.layers.sequence_pool(fluid.layers.embedding(input=x, size=[5, 2]), "sum")
    cost = fluid.layers.mean(fluid.layers.cross_entropy(input=fluid.layers.fc(e, 2, act="softmax"), label=y))
    fluid.optimizer.SGD(0.1).minimize(cost)
    (tmp_path / "d").write_text("".join("1 %d 1 %d\n" % (i % 5, i % 2) for i in range(40)))
    ds = fluid.DatasetFactory().create_dataset()
    ds.set_use_var([x, y])
    ds.set_batch_size(4)
    ds.set_filelist([str(tmp_path / "d")])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    seen = []

    class H(fluid.executor.FetchHandler):
        def handler(self, res_dict):
            seen.append(res_dict)
    exe.train_from_dataset(program=main, dataset=ds, fetch_handler=H(var_dict={"loss": cost}))
    assert len(seen) == 1 and seen[0]["loss"].shape == (1,) and 0 < float(seen[0]["loss"][0]) < 5


def test_mnist_from_the_data_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_DATASET_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz not found in .*mnist.*FLEET_DATASET_DIR"):
        paddle.dataset.mnist.train()
    d = tmp_path / "mnist"
    d.mkdir()
    img = np.arange(2 * 784, dtype=np.uint32).astype(np.uint8).reshape(2, 784)
    with gzip.open(str(d / "train-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, 2, 28, 28) + img.tobytes())
    with open(str(d / "train-labels-idx1-ubyte"), "wb") as f:  # not gzipped: found as well
        f.write(struct.pack(">II", 2049, 2) + bytes([7, 3]))
    got = list(paddle.dataset.mnist.train()())
    assert [lab for _, lab in got] == [7, 3]
    assert got[0][0].dtype == np.float32 and got[0][0].shape == (784,)
    assert got[0][0][0] == -1.0 and abs(got[0][0][255] - 1.0) < 1e-6


COLLECTIVE_SAVE = """
import fleet_c.fluid as fluid
from fleet_c.fluid.incubate.fleet.collective import fleet
fleet.init()
x = fluid.layers.data(name="x", shape=[2], dtype="float32")
cost = fluid.layers.mean(fluid.layers.fc(x, 1))
fleet.distributed_optimizer(fluid.optimizer.SGD(0.1)).minimize(cost)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
if fleet.is_first_worker():
    fleet.save_persistables(exe, "model")
    fleet.save_inference_model(exe, "infer", ["x"], [cost])
print("worker %d done" % fleet.worker_index())
"""


def test_collective_save_by_the_first_worker_alone(tmp_path, env, build_dir):
    """As Paddle programs do: only the first worker saves, and nobody waits for the others."""
    from helpers import fleetrun, read, run
    (tmp_path / "save.py").write_text(COLLECTIVE_SAVE)
    run([fleetrun(build_dir), "--nproc_per_node", "2", "python3", "save.py"], tmp_path, env, timeout=60)
    for w in (0, 1):
        assert "worker %d done" % w in read(tmp_path / "log" / ("workerlog.%d" % w))
    assert (tmp_path / "model" / "persistables.safetensors").exists()
    assert (tmp_path / "infer" / "__model__").exists()


PS_SAVE = """
import fleet_c.fluid as fluid
import fleet_c.fluid.incubate.fleet.base.role_maker as role_maker
from fleet_c.fluid.incubate.fleet.parameter_server.distribute_transpiler import fleet
fleet.init(role_maker.PaddleCloudRoleMaker())
ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
emb = fluid.layers.sequence_pool(fluid.layers.embedding(input=ids, size=[100, 4], is_sparse=True,
                                                        param_attr=fluid.ParamAttr(name="emb")), "sum")
cost = fluid.layers.mean(fluid.layers.fc(emb, 1))
fleet.distributed_optimizer(fluid.optimizer.SGD(0.1)).minimize(cost)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
else:
    fleet.init_worker()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fleet.startup_program)
    t = fluid.create_lod_tensor([[1, 2], [3]], [[2, 1]])
    for _ in range(5):
        exe.run(fleet.main_program, feed={"ids": t}, fetch_list=[cost])
    if fleet.is_first_worker():
        fleet.save_persistables(exe, "model")
        fleet.save_inference_model(exe, "infer", ["ids"], [cost])
    print("worker %d done" % fleet.worker_index())
    fleet.stop_worker()
"""


def test_parameter_server_save_by_the_first_worker_alone(tmp_path, env, build_dir):
    """Paddle's pattern with parameter servers: the first worker alone has the servers save
    their tables; the other worker does not wait for it, nor it for the other."""
    from helpers import fleetrun, read, run
    (tmp_path / "save.py").write_text(PS_SAVE)
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", "python3", "save.py"], tmp_path, env,
        timeout=90)
    for w in (0, 1):
        assert "worker %d done" % w in read(tmp_path / "log" / ("workerlog.%d" % w))
    saved = sorted(os.listdir(str(tmp_path / "model")))
    assert "persistables.safetensors" in saved and "emb" in saved, saved  # the worker's, and the server's table
    assert (tmp_path / "infer" / "__model__").exists()


def test_reader_threads_end_when_the_consumer_stops():
    import threading
    import time
    before = threading.active_count()
    for r in (paddle.reader.buffered(_r(10 ** 6), 4), paddle.reader.xmap_readers(lambda x: x, _r(10 ** 6), 3, 4)):
        it = r()
        assert next(it) is not None
        it.close()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
