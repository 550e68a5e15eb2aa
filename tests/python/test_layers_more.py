"""The layers, schedules, regularizer, optimizer and metrics added over the C op registry
(fleet/graph.h: ops_bcast.c, ops_more.c, ops_lr.c, ops_optim_more.c), and paddle.nn layers
in static programs: each checked against NumPy on fed data, in one process."""
import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid


@pytest.fixture
def progs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        yield main, startup


def run(main, startup, feed, fetch, steps=1):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    out = None
    for _ in range(steps):
        out = exe.run(main, feed=feed, fetch_list=fetch)
    return out


# ---- elementwise max / min, two-way broadcasting, comparisons --------------------------------------


def test_two_way_broadcast_and_max_min_match_numpy(progs):
    main, startup = progs
    a = fluid.data(name="a", shape=[None, 1], dtype="float32")
    b = fluid.data(name="b", shape=[None, 4], dtype="float32")  # fed [1, 4]
    L = fluid.layers
    outs = [L.elementwise_add(a, b), L.elementwise_sub(a, b), L.elementwise_mul(a, b), L.elementwise_div(a, b),
            L.elementwise_max(a, b), L.elementwise_min(a, b)]
    rng = np.random.RandomState(0)
    av = rng.uniform(-1, 1, (3, 1)).astype("float32")
    bv = rng.uniform(0.5, 1, (1, 4)).astype("float32")
    got = run(main, startup, {"a": av, "b": bv}, outs)
    want = [av + bv, av - bv, av * bv, av / bv, np.maximum(av, bv), np.minimum(av, bv)]
    for g, w in zip(got, want):
        assert g.shape == (3, 4)
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_elementwise_max_trains_both_sides(progs):
    """The gradient of max goes to the larger operand: a parameter below a fed floor gets none."""
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 3], dtype="float32")
    w = fluid.layers.create_parameter([3], "float32", name="w",
                                      default_initializer=fluid.initializer.Constant(0.0))
    loss = fluid.layers.mean(fluid.layers.elementwise_max(x, w))
    fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    xv = np.array([[1.0, -1.0, -1.0], [1.0, -1.0, 1.0]], "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": xv})
    got = np.asarray(fluid.global_scope().find_var("w").get_tensor())
    # w[0] never wins (x = 1 > 0): no change; w[1] wins twice, w[2] once: -1/6 per win
    np.testing.assert_allclose(got, [0.0, -2.0 / 6, -1.0 / 6], rtol=1e-6)


def test_comparisons_and_logical_ops(progs):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 3], dtype="int64")
    y = fluid.data(name="y", shape=[None, 3], dtype="int64")
    L = fluid.layers
    outs = [L.less_than(x, y), L.less_equal(x, y), L.greater_than(x, y), L.greater_equal(x, y), L.equal(x, y),
            L.not_equal(x, y)]
    outs += [L.logical_and(outs[0], outs[4]), L.logical_or(outs[0], outs[4]), L.logical_xor(outs[1], outs[4]),
             L.logical_not(outs[0])]
    xv = np.array([[1, 2, 3], [4, 5, 6]], "int64")
    yv = np.array([[3, 2, 1], [4, 9, 0]], "int64")
    got = run(main, startup, {"x": xv, "y": yv}, outs)
    lt, le, gt, ge, eq, ne = xv < yv, xv <= yv, xv > yv, xv >= yv, xv == yv, xv != yv
    for g, w in zip(got, [lt, le, gt, ge, eq, ne, lt & eq, lt | eq, le ^ eq, ~lt]):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, w.astype("int32"))
    lt2, ge2 = run(main, startup, {"x": xv, "y": yv}, [x < y, x >= 3])
    np.testing.assert_array_equal(lt2, lt.astype("int32"))
    np.testing.assert_array_equal(ge2, (xv >= 3).astype("int32"))
    with pytest.raises(Exception, match="one dtype"):
        L.less_than(x, fluid.data(name="f", shape=[None, 3], dtype="float32"))


# ---- fill_constant, l2_normalize, topk, unary math, shape, assign -------------------------------------


def test_fill_constant_l2_normalize_topk(progs):
    main, startup = progs
    L = fluid.layers
    x = fluid.data(name="x", shape=[None, 5], dtype="float32")
    c = L.fill_constant(shape=[2, 3], dtype="int64", value=7)
    n = L.l2_normalize(x, axis=1)
    v, i = L.topk(x, k=2)
    rng = np.random.RandomState(1)
    xv = rng.uniform(-1, 1, (4, 5)).astype("float32")
    cv, nv, vv, iv = run(main, startup, {"x": xv}, [c, n, v, i])
    np.testing.assert_array_equal(cv, np.full((2, 3), 7, "int64"))
    np.testing.assert_allclose(nv, xv / np.sqrt((xv ** 2).sum(1, keepdims=True)), rtol=1e-5)
    order = np.argsort(-xv, axis=1)[:, :2]
    np.testing.assert_array_equal(iv, order)
    np.testing.assert_allclose(vv, np.take_along_axis(xv, order, 1))
    assert iv.dtype == np.int64


def test_unary_shape_assign_and_global_var(progs):
    main, startup = progs
    L = fluid.layers
    x = fluid.data(name="x", shape=[None, 3], dtype="float32")
    outs = [L.sqrt(x), L.abs(x), L.exp(x), L.log(x), L.shape(x), L.assign(np.array([[1.5, 2.5]], "float32")),
            L.assign(x), L.square_error_cost(x, L.assign(np.ones((1, 3), "float32")))]
    g = L.create_global_var(shape=[1], value=3.0, dtype="float32", persistable=True, name="gv")
    xv = np.array([[1.0, 4.0, 9.0], [0.25, 2.0, 3.0]], "float32")
    got = run(main, startup, {"x": xv}, outs + [g])
    want = [np.sqrt(xv), np.abs(xv), np.exp(xv), np.log(xv), np.array([2, 3]), [[1.5, 2.5]], xv, (xv - 1) ** 2,
            [3.0]]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert g.persistable


# ---- schedules, L1Decay, RMSProp ---------------------------------------------------------------------


def test_schedules_drive_the_optimizer(progs):
    main, startup = progs
    L = fluid.layers
    x = fluid.data(name="x", shape=[None, 2], dtype="float32")
    lr = L.piecewise_decay(boundaries=[2, 4], values=[1.0, 0.5, 0.1])
    cos = L.cosine_decay(learning_rate=1.0, step_each_epoch=2, epochs=3)
    nat = L.natural_exp_decay(1.0, 2, 0.5)
    inv = L.inverse_time_decay(1.0, 2, 0.5, staircase=True)
    loss = L.mean(L.fc(x, 1))
    fluid.optimizer.SGD(learning_rate=lr).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    xv = np.ones((2, 2), "float32")
    for step in range(6):
        got = exe.run(main, feed={"x": xv}, fetch_list=[lr, cos, nat, inv])
        want = [1.0 if step < 2 else 0.5 if step < 4 else 0.1,
                0.5 * (np.cos(np.floor(step / 2) * np.pi / 3) + 1), np.exp(-0.5 * step / 2),
                1.0 / (1 + 0.5 * np.floor(step / 2))]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, [w], rtol=1e-6)


def _train_linear(opt, steps=3):
    """w [4] on loss = mean(x * w): the gradient is x / 4; returns w after `steps` steps."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = fluid.data(name="x", shape=[None, 4], dtype="float32")
        w = fluid.layers.create_parameter([4], "float32", name="w",
                                          default_initializer=fluid.initializer.Constant(0.5))
        opt.minimize(fluid.layers.mean(fluid.layers.elementwise_mul(x, w)))
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        xv = np.array([[1.0, -2.0, 0.5, 3.0]], "float32")
        for _ in range(steps):
            exe.run(main, feed={"x": xv})
        return np.asarray(fluid.global_scope().find_var("w").get_tensor()), xv[0] / 4


def test_l1_decay_and_rmsprop_match_their_formulas():
    w, g = _train_linear(fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L1Decay(0.2)))
    p = np.full(4, 0.5)
    for _ in range(3):
        p = p - 0.1 * (g + 0.2 * np.sign(p))
    np.testing.assert_allclose(w, p, rtol=1e-5)
    for centered in (False, True):
        w, g = _train_linear(fluid.optimizer.RMSProp(0.1, rho=0.9, epsilon=1e-6, momentum=0.5, centered=centered))
        p, ms, mg, mom = np.full(4, 0.5), 0.0, 0.0, 0.0
        for _ in range(3):
            ms = 0.9 * ms + 0.1 * g * g
            mg = 0.9 * mg + 0.1 * g
            mom = 0.5 * mom + 0.1 * g / np.sqrt((ms - mg * mg if centered else ms) + 1e-6)
            p = p - mom
        np.testing.assert_allclose(w, p, rtol=1e-4)


def test_a_parameters_own_l1decay_applies_to_it_only(progs):
    """deepFM's first-order weights: ParamAttr(regularizer=L1DecayRegularizer(reg))."""
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 2], dtype="float32")
    init = fluid.initializer.Constant(0.5)
    a = fluid.layers.create_parameter([2], "float32", attr=fluid.ParamAttr(
        name="a", initializer=init, regularizer=fluid.regularizer.L1DecayRegularizer(0.3)))
    b = fluid.layers.create_parameter([2], "float32", attr=fluid.ParamAttr(name="b", initializer=init))
    loss = fluid.layers.mean(fluid.layers.elementwise_mul(x, a) + fluid.layers.elementwise_mul(x, b))
    fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": np.array([[1.0, -1.0]], "float32")})
    got = {n: np.asarray(fluid.global_scope().find_var(n).get_tensor()) for n in "ab"}
    g = np.array([0.5, -0.5])
    np.testing.assert_allclose(got["b"], 0.5 - 0.1 * g, rtol=1e-6)
    np.testing.assert_allclose(got["a"], 0.5 - 0.1 * (g + 0.3), rtol=1e-6)


# ---- metrics -------------------------------------------------------------------------------------------


def _exact_auc(p, y):
    pos, neg = p[y == 1], p[y == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


def test_auc_classes_accumulate_through_the_auc_op():
    rng = np.random.RandomState(3)
    y = rng.randint(0, 2, 400)
    p = np.clip(0.3 * y + rng.uniform(0, 0.7, 400), 0, 1).astype("float32")
    preds = np.stack([1 - p, p], 1)
    fm, pm = fluid.metrics.Auc("auc"), paddle.metric.Auc()
    assert fm.eval() == 0.0
    for i in range(0, 400, 100):
        fm.update(preds[i:i + 100], y[i:i + 100].reshape(-1, 1))
        pm.update(p[i:i + 100], y[i:i + 100])
    assert abs(fm.eval() - _exact_auc(p, y)) < 2e-3
    assert abs(pm.accumulate() - fm.eval()) < 1e-12
    fm.reset()
    assert fm.eval() == 0.0


def test_paddle_metric_accuracy_compute_and_update(progs):
    main, startup = progs
    pred = fluid.data(name="pred", shape=[None, 4], dtype="float32")
    label = fluid.data(name="label", shape=[None, 1], dtype="int64")
    acc = paddle.metric.Accuracy(topk=(1, 2))
    correct = acc.compute(pred, label)
    pv = np.array([[0.1, 0.5, 0.3, 0.1], [0.7, 0.1, 0.1, 0.1], [0.2, 0.2, 0.5, 0.1]], "float32")
    lv = np.array([[1], [1], [0]], "int64")
    c, = run(main, startup, {"pred": pv, "label": lv}, [correct])
    # row 2: the tie 0.2 / 0.2 ranks the lower index first, so label 0 is second best
    np.testing.assert_array_equal(c, [[1, 0], [0, 1], [0, 1]])
    assert acc.update(c) == [1 / 3, 1.0]
    assert acc.update(c[:1]) == [1.0, 1.0]
    assert acc.accumulate() == [2 / 4, 1.0]


# ---- paddle.nn layers in static programs ------------------------------------------------------------


class _Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.emb = paddle.nn.Embedding(10, 4)
        self.conv = paddle.nn.Conv2D(1, 2, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(2)
        self.pool = paddle.nn.MaxPool2D(2)
        self.flat = paddle.nn.Flatten()
        self.fc = paddle.nn.Sequential(paddle.nn.Linear(8 + 4, 8), paddle.nn.ReLU(), paddle.nn.Dropout(0.1),
                                       paddle.nn.Linear(8, 2))

    def forward(self, img, ids):
        h = self.flat(self.pool(self.bn(self.conv(img))))
        return self.fc(paddle.concat([h, self.emb(ids)], axis=1))


def test_nn_layers_train_a_static_program(progs):
    main, startup = progs
    paddle.enable_static()
    img = paddle.static.data(name="img", shape=[None, 1, 4, 4], dtype="float32")
    ids = paddle.static.data(name="ids", shape=[None, 1], dtype="int64")
    label = paddle.static.data(name="label", shape=[None, 1], dtype="int64")
    net = _Net()
    names = [p.name for p in net.parameters()]
    assert len(names) == 9 and len(set(names)) == 9
    assert any(n.startswith("linear_") and n.endswith(".w_0") for n in names)
    logits = net(img, ids)
    assert list(logits.shape) == [-1, 2]
    loss = paddle.nn.CrossEntropyLoss()(logits, label)
    paddle.optimizer.Adam(learning_rate=0.05, parameters=net.parameters()).minimize(loss)
    assert len(net.parameters()) == 9 and len(main.all_parameters()) == 9  # forward made no copy
    rng = np.random.RandomState(0)
    feed = {"img": rng.uniform(-1, 1, (16, 1, 4, 4)).astype("float32"), "ids": rng.randint(0, 10, (16, 1)),
            "label": rng.randint(0, 2, (16, 1))}
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]


def test_nn_functional_losses_and_tensor_functions(progs):
    main, startup = progs
    F = paddle.nn.functional
    x = paddle.static.data(name="x", shape=[None, 3], dtype="float32")
    y = paddle.static.data(name="y", shape=[None, 3], dtype="float32")
    outs = [F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.binary_cross_entropy_with_logits(x, y),
            F.binary_cross_entropy(F.sigmoid(x), y), paddle.full([2], 4.0), paddle.shape(x),
            paddle.cast(paddle.sqrt(paddle.maximum(x, paddle.zeros([1]))), "float64"), paddle.assign(np.arange(3)),
            paddle.static.create_global_var([1], 2.0, "float32", name="g")]
    rng = np.random.RandomState(2)
    xv = rng.uniform(-1, 1, (4, 3)).astype("float32")
    yv = (rng.uniform(0, 1, (4, 3)) > 0.5).astype("float32")
    got = run(main, startup, {"x": xv, "y": yv}, outs)
    s = 1 / (1 + np.exp(-xv))
    bce = -(yv * np.log(s) + (1 - yv) * np.log(1 - s))
    want = [[((xv - yv) ** 2).mean()], [np.abs(xv - yv).sum()], [bce.mean()], [bce.mean()], [4, 4], [4, 3],
            np.sqrt(np.maximum(xv, 0)), [0, 1, 2], [2.0]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), w, rtol=1e-5, atol=1e-6)
    assert got[6].dtype == np.float64 and got[7].dtype == np.int64


def test_sparse_embedding_gets_sparse_gradients(progs):
    main, startup = progs
    ids = paddle.static.data(name="ids", shape=[None, 1], dtype="int64")
    emb = paddle.static.nn.sparse_embedding(ids, size=[100, 4])
    loss = paddle.mean(emb)
    paddle.optimizer.SGD(learning_rate=1.0).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    w = main.all_parameters()[0].name
    before = np.array(fluid.global_scope().find_var(w).get_tensor())
    exe.run(main, feed={"ids": np.array([[3], [7]], "int64")})
    after = np.array(fluid.global_scope().find_var(w).get_tensor())
    changed = np.nonzero(np.any(before != after, axis=1))[0]
    np.testing.assert_array_equal(changed, [3, 7])
