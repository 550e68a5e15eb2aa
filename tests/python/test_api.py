"""The package's API in one process: NumPy in and out, the library's errors as Python
exceptions, programs and default programs, saving and loading, datasets, strategies, and
how the library is found."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fleet_c
import fleet_c as paddle
import fleet_c._fleet
import fleet_c.fluid as fluid
from fleet_c.distributed import fleet


@pytest.fixture
def progs():
    """A fresh main and startup program made current, and a fresh global scope (the defaults
    stay untouched)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        yield main, startup


def mlp(lr=0.1):
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="int64")
    pred = fluid.layers.fc(input=x, size=2, act="softmax")
    cost = fluid.layers.mean(fluid.layers.cross_entropy(input=pred, label=y))
    fluid.optimizer.SGD(learning_rate=lr).minimize(cost)
    return x, y, pred, cost


def batch(n=8, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, size=(n, 4)).astype("float32")
    return {"x": x, "y": (x[:, 0] > x[:, 1]).astype("int64").reshape(n, 1)}


# ---- errors carry the library's message ---------------------------------------------------------


def test_a_feed_of_the_wrong_dtype_raises_the_librarys_message(progs):
    main, startup = progs
    x, y, pred, cost = mlp()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = batch()
    feed["x"] = feed["x"].astype("float64")
    with pytest.raises(fleet_c.InvalidArgumentError) as e:
        exe.run(main, feed=feed, fetch_list=[cost])
    assert "feed 'x': expected dtype float32 shape [-1, 4], got float64[8, 4]" in str(e.value)
    assert e.value.code == "FL_EINVAL"
    assert isinstance(e.value, ValueError)


def test_a_feed_of_the_wrong_shape_raises_the_librarys_message(progs):
    main, startup = progs
    mlp()
    exe = fluid.Executor()
    exe.run(startup)
    feed = batch()
    feed["x"] = np.zeros((8, 5), "float32")
    with pytest.raises(fleet_c.FleetError, match=r"feed 'x': expected shape \[-1, 4\], got float32\[8, 5\]"):
        exe.run(main, feed=feed)


def test_a_missing_feed_an_unknown_fetch_and_no_startup_run_are_errors(progs):
    main, startup = progs
    x, y, pred, cost = mlp()
    exe = fluid.Executor()
    with pytest.raises(fleet_c.FleetError, match="run the startup program first"):
        exe.run(main, feed=batch(), fetch_list=[cost])
    exe.run(startup)
    with pytest.raises(fleet_c.FleetError, match="'y' is read by the program but was not fed"):
        exe.run(main, feed={"x": batch()["x"]}, fetch_list=[cost])
    with pytest.raises(fleet_c.NotFoundError, match="fetch 'nope'"):
        exe.run(main, feed=batch(), fetch_list=["nope"])


def test_a_layer_error_raises_at_the_layer(progs):
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    with pytest.raises(fleet_c.FleetError, match="tanhh"):
        fluid.layers.fc(input=x, size=3, act="tanhh")


def test_strategy_fields_are_checked_when_set():
    s = fleet.DistributedStrategy()
    s.a_sync = False
    s.a_sync_configs = {"k_steps": 100}
    assert s.a_sync is False and s.a_sync_configs["k_steps"] == 100
    assert s.a_sync_configs["send_queue_size"] == 0  # the C default: not set, the communicator adapts
    with pytest.raises(fleet_c.FleetError, match="no_such_field"):
        s.no_such_field = 1
    s.amp = True
    s.amp_configs = {"custom_white_list": ["fc", "mul"], "dtype": "bfloat16"}
    s._pointer()
    assert "amp_configs.custom_white_list=fc,mul" in s.to_text()
    s.dgc = True
    s.dgc_configs = {"rampup_begin_step": 10, "sparsity": [0.75, 0.999]}
    s._pointer()
    assert "dgc_configs.sparsity=0.75,0.999" in s.to_text()
    s.pipeline = True  # a field this build does not implement: refused when used
    with pytest.raises(fleet_c.FleetError, match="pipeline"):
        s._pointer()


def test_fleet_calls_before_init_say_so():
    f = fleet_c._fleet.Fleet()
    with pytest.raises(fleet_c.FleetError, match=r"fleet.init\(\) has not been called"):
        f.is_server()


# ---- NumPy in and out, programs ------------------------------------------------------------------------


def test_training_step_numbers_go_in_and_come_out_as_numpy(progs):
    main, startup = progs
    x, y, pred, cost = mlp()
    exe = fluid.Executor()
    exe.run(startup)
    first = None
    for step in range(60):
        c, p = exe.run(main, feed=batch(seed=step), fetch_list=[cost.name, pred])
        first = float(c) if first is None else first
    assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (1,)
    assert p.shape == (8, 2) and np.allclose(p.sum(axis=1), 1, atol=1e-5)
    assert float(c) < first
    assert "%.3f" % c[0] and "{:.2f}".format(c)  # one-element results format as numbers
    w = np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor())
    assert w.shape == (4, 2)


def test_default_programs_are_python_objects():
    main, startup = fluid.default_main_program(), fluid.default_startup_program()
    assert isinstance(main, fluid.Program) and isinstance(startup, fluid.Program)
    other = fluid.Program()
    with fluid.program_guard(other):
        assert fluid.default_main_program() is other
        assert fluid.default_startup_program() is startup
    assert fluid.default_main_program() is main
    assert paddle.static.default_main_program() is main


def test_clone_for_test_and_inference_model_round_trip(progs, tmp_path):
    main, startup = progs
    x, y, pred, cost = mlp()
    test_prog = main.clone(for_test=True)
    assert "sgd" not in test_prog.op_types() and "sgd" in main.op_types()
    exe = fluid.Executor()
    exe.run(startup)
    for step in range(5):
        exe.run(main, feed=batch(seed=step))
    want, = exe.run(test_prog, feed=batch(seed=99), fetch_list=[pred])
    fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [pred], exe, main_program=main)
    prog, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), fluid.Executor())
    assert feeds == ["x"]
    got, = fluid.Executor().run(prog, feed={"x": batch(seed=99)["x"]}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_persistables_save_and_load(progs, tmp_path):
    main, startup = progs
    mlp()
    exe = fluid.Executor()
    exe.run(startup)
    fluid.io.save_persistables(exe, str(tmp_path / "p"), main)
    w0 = np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor())
    exe.run(main, feed=batch())
    assert not np.allclose(np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor()), w0)
    fluid.io.load_persistables(exe, str(tmp_path / "p"), main)
    np.testing.assert_array_equal(np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor()), w0)


def test_lod_feeds_embedding_and_sequence_pool(progs):
    main, startup = progs
    ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
    emb = fluid.layers.embedding(input=ids, size=[10, 3], is_sparse=True)
    pooled = fluid.layers.sequence_pool(input=emb, pool_type="sum")
    loss = fluid.layers.mean(pooled)
    fluid.optimizer.Adagrad(learning_rate=0.1).minimize(loss)
    exe = fluid.Executor()
    exe.run(startup)
    t = fluid.create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 3]], fluid.CPUPlace())
    out, = exe.run(main, feed={"ids": t}, fetch_list=[pooled], return_numpy=False)
    assert np.array(out).shape == (2, 3)
    with pytest.raises(fleet_c.FleetError, match="lod_level 1"):
        exe.run(main, feed={"ids": np.array([[1], [2]], "int64")})


def test_paddle2_static_names(progs):
    main, startup = progs
    image = paddle.static.data(name="img", shape=[None, 1, 8, 8], dtype="float32")
    label = paddle.static.data(name="lab", shape=[None, 1], dtype="int64")
    assert image.shape == (-1, 1, 8, 8)
    conv = paddle.static.nn.conv2d(image, num_filters=2, filter_size=3, act="relu")
    out = paddle.static.nn.fc(conv, size=3)
    loss = paddle.nn.functional.cross_entropy(input=out, label=label)
    acc = paddle.metric.accuracy(input=out, label=label, k=1)
    paddle.optimizer.Adam(learning_rate=0.01).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    l, a = exe.run(main, feed={"img": np.ones((2, 1, 8, 8), "float32"), "lab": np.array([[0], [2]], "int64")},
                   fetch_list=[loss, acc])
    assert l.shape == (1,) and 0 <= float(a) <= 1


# ---- datasets --------------------------------------------------------------------------------------------


def test_in_memory_dataset_trains_and_reports_bad_lines(progs, tmp_path):
    main, startup = progs
    x, y, pred, cost = mlp()
    rng = np.random.RandomState(3)
    lines = []
    for _ in range(200):
        v = rng.uniform(-1, 1, 4)
        lines.append("4 %s 1 %d" % (" ".join("%.4f" % a for a in v), int(v[0] > v[1])))
    (tmp_path / "part-0").write_text("\n".join(lines) + "\n")
    ds = paddle.distributed.InMemoryDataset()
    ds.init(batch_size=20, thread_num=1, use_var=[x, y])
    ds.set_filelist([str(tmp_path / "part-0")])
    ds.load_into_memory()
    assert ds.get_memory_data_size() == 200
    ds.local_shuffle()
    exe = fluid.Executor()
    exe.run(startup)
    stats = exe.train_from_dataset(main, ds, fetch_list=[cost], fetch_info=["cost"], print_period=0)
    assert stats["instances"] == 200 and stats["batches"] == 10
    (tmp_path / "bad").write_text("4 1 2 3 4 1 0\n4 1 2 x 4 1 0\n")
    bad = fluid.DatasetFactory().create_dataset("QueueDataset")
    bad.set_use_var([x, y])
    bad.set_filelist([str(tmp_path / "bad")])
    with pytest.raises(fleet_c.FleetError, match=r"bad:2: slot 'x'"):
        exe.train_from_dataset(main, bad, print_period=0)


# ---- the fleet API without a distributed environment (Paddle's local fallback) ---------------------------


def test_fleet_without_a_launcher_is_one_local_worker(progs):
    main, startup = progs
    x, y, pred, cost = mlp()
    from fleet_c.fluid.incubate.fleet.base import role_maker
    f = fleet_c._fleet.Fleet()
    env = {k: v for k, v in os.environ.items() if k.startswith(("PADDLE_", "TRAINING_ROLE"))}
    assert not env, "run the tests outside a launcher: %s" % env
    f.init(role_maker.PaddleCloudRoleMaker())
    assert f.is_worker() and not f.is_server() and f.worker_num() == 1 and f.is_first_worker()
    assert f.util.all_reduce(np.array([1.0, 2.0]), "sum").tolist() == [1.0, 2.0]
    assert f.split_files(["a", "b"]) == ["a", "b"]


# ---- finding the library ---------------------------------------------------------------------------------


def test_fleet_lib_that_does_not_load_is_an_import_error(tmp_path):
    env = dict(os.environ, FLEET_LIB=str(tmp_path / "nowhere" / "libfleet.so"))
    p = subprocess.run([sys.executable, "-c", "import fleet_c.fluid"], env=env, capture_output=True, text=True)
    assert p.returncode != 0 and "FLEET_LIB=" in p.stderr and "cannot load" in p.stderr


def test_the_library_loaded_is_the_build_under_test():
    assert os.path.realpath(fleet_c.library_path()) == os.path.realpath(os.environ["FLEET_LIB"])
    assert fleet_c.version() == fleet_c.__version__ == "0.1.0"


def _which_library(env):
    p = subprocess.run([sys.executable, "-c", "import fleet_c; print(fleet_c.library_path())"], env=env,
                       capture_output=True, text=True)
    return p.returncode, p.stdout.strip(), p.stderr


def test_without_fleet_lib_the_installed_prefix_then_the_source_tree(tmp_path, build_dir):
    """The search order of docs/python.md: FLEET_LIB (the other tests), an installed prefix
    (here found by pkg-config), then the build/ of the source tree the package came from."""
    import ctypes.util
    if ctypes.util.find_library("fleet"):
        pytest.skip("a libfleet.so is installed system-wide (%s): it comes first in the order"
                    % ctypes.util.find_library("fleet"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prefix = tmp_path / "prefix"
    env = {k: v for k, v in os.environ.items() if k not in ("FLEET_LIB", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(["make", "-s", "--no-print-directory", "-C", root, "install", "NOBUILD=1", "BUILD=" + build_dir,
                    "PREFIX=" + str(prefix)], env=env, check=True, capture_output=True)
    rc, path, err = _which_library(dict(env, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig")))
    assert rc == 0 and path == str(prefix / "lib" / "libfleet.so"), err
    env.pop("PKG_CONFIG_PATH", None)
    rc, path, err = _which_library(env)
    tree_lib = os.path.join(root, "build", "libfleet.so")
    if os.path.exists(tree_lib):
        assert rc == 0 and path == tree_lib, err
    else:
        assert rc != 0 and "libfleet.so not found" in err and tree_lib in err
