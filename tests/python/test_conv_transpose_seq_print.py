"""conv2d_transpose, sequence_conv and Print (ops_deconv.c, ops_seqconv.c, ops_print.c) through
their Python names: fluid.layers / paddle.static.nn / paddle.nn / paddle.nn.functional, each
output against NumPy written from Paddle's definitions, a small program with
Conv2DTranspose that trains, and Print's text on stderr."""
import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid


@pytest.fixture
def progs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        yield main, startup


def run(main, startup, feed, fetch, return_numpy=True):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    return exe.run(main, feed=feed, fetch_list=fetch, return_numpy=return_numpy)


def param(name):
    return np.asarray(fluid.global_scope().find_var(name).get_tensor())


def deconv_ref(x, w, stride, pads, dilation, groups, out_hw):
    """Paddle's conv2d_transpose: out[m][y s - top + i d][x s - left + j d] += x[c][y][x] w[c][m][i][j]
    over c of m's group, cropped to out_hw."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    (sh, sw), (dh, dw), (top, _, left, _) = stride, dilation, pads
    cg = c // groups
    full = np.zeros((n, mg * groups, top + out_hw[0] + (h - 1) * sh + dh * kh, left + out_hw[1] + (wd - 1) * sw + dw * kw))
    for g in range(groups):
        xg, wg = x[:, g * cg:(g + 1) * cg].astype(np.float64), w[g * cg:(g + 1) * cg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                full[:, g * mg:(g + 1) * mg, i * dh:i * dh + (h - 1) * sh + 1:sh, j * dw:j * dw + (wd - 1) * sw + 1:sw] \
                    += np.einsum("nchw,cm->nmhw", xg, wg[:, :, i, j])
    return full[:, :, top:top + out_hw[0], left:left + out_hw[1]]


# ---- conv2d_transpose --------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, pads, out_hw", [
    (dict(filter_size=3, stride=2, padding=1, groups=2), (1, 1, 1, 1), (7, 9)),
    (dict(filter_size=[2, 3], stride=[1, 2], padding=[0, 1, 1, 0], dilation=2), (0, 1, 1, 0), (5, 12)),
    (dict(filter_size=3, stride=2, padding="SAME"), (0, 1, 1, 1), (8, 9)),  # Paddle's SAME paddings for 4 x 5
    (dict(filter_size=4, stride=2, padding=[[0, 0], [0, 0], [1, 1], [2, 2]], output_size=[9, 8]), (1, 1, 2, 2), (9, 8)),
    (dict(output_size=[9, 11], stride=2, padding=1), (1, 1, 1, 1), (9, 11)),  # filter size from output_size
])
def test_fluid_conv2d_transpose_matches_numpy(progs, kw, pads, out_hw):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 4, 4, 5], dtype="float32")
    y = fluid.layers.conv2d_transpose(x, num_filters=6, act="tanh", **kw)
    assert list(y.shape)[1:] == [6, out_hw[0], out_hw[1]]
    xv = np.random.RandomState(1).uniform(-1, 1, (2, 4, 4, 5)).astype("float32")
    got = run(main, startup, {"x": xv}, [y])[0]
    w, b = param("conv2d_transpose_0.w_0"), param("conv2d_transpose_0.b_0")
    groups = kw.get("groups", 1)
    assert w.shape[:2] == (4, 6 // groups)
    stride = kw["stride"] if isinstance(kw["stride"], list) else [kw["stride"]] * 2
    dil = kw.get("dilation", 1)
    dil = [1, 1] if kw.get("padding") == "SAME" else [dil, dil]
    want = np.tanh(deconv_ref(xv, w, stride, pads, dil, groups, out_hw) + b.reshape(1, -1, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_nn_conv2d_transpose_and_functional_match_numpy(progs):
    """paddle.nn.Conv2DTranspose (output_padding, groups, Paddle's parameter names) and
    F.conv2d_transpose (output_size, a bias variable) in a static program."""
    main, startup = progs
    F = paddle.nn.functional
    x = paddle.static.data(name="x", shape=[None, 4, 3, 3], dtype="float32")
    with fluid.unique_name.guard():
        layer = paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        layer2 = paddle.nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, groups=2)
    assert [p.name for p in layer.parameters()] == ["conv2d_transpose_0.w_0", "conv2d_transpose_0.b_0"]
    assert list(layer.weight.shape) == [4, 3, 3, 3]
    y1 = layer(x)
    y2 = F.conv2d_transpose(x, layer.weight, stride=2, padding=1, groups=2, output_size=[5, 6])
    y3 = layer2(x, output_size=[6, 5])  # (with output_padding set, Paddle refuses an output_size)
    assert list(y1.shape)[1:] == [6, 6, 6] and list(y2.shape)[1:] == [6, 5, 6] and list(y3.shape)[1:] == [6, 6, 5]
    xv = np.random.RandomState(2).uniform(-1, 1, (3, 4, 3, 3)).astype("float32")
    g1, g2, g3 = run(main, startup, {"x": xv}, [y1, y2, y3])
    w, b = param("conv2d_transpose_0.w_0"), param("conv2d_transpose_0.b_0")
    w2, b2 = param("conv2d_transpose_1.w_0"), param("conv2d_transpose_1.b_0")
    # Paddle's Xavier over the filter [in, out / groups, kh, kw]: fan_in 3 * 9, fan_out 4 * 9
    lim = np.sqrt(6.0 / (27 + 36))
    assert 0.8 * lim < np.abs(w).max() <= lim and not b.any()
    pads = (1, 1, 1, 1)
    np.testing.assert_allclose(g1, deconv_ref(xv, w, [2, 2], pads, [1, 1], 2, (6, 6)) + b.reshape(1, -1, 1, 1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g2, deconv_ref(xv, w, [2, 2], pads, [1, 1], 2, (5, 6)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g3, deconv_ref(xv, w2, [2, 2], pads, [1, 1], 2, (6, 5)) + b2.reshape(1, -1, 1, 1),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="mutually exclusive"):
        F.conv2d_transpose(x, layer.weight, output_padding=1, output_size=[6, 6])


class _Decoder(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.up1 = paddle.nn.Conv2DTranspose(4, 3, 4, stride=2, padding=1)
        self.up2 = paddle.nn.Conv2DTranspose(3, 1, 3, padding=1)

    def forward(self, z):
        return self.up2(paddle.nn.functional.relu(self.up1(z)))


def test_conv2d_transpose_program_trains(progs):
    """A two-layer decoder [N, 4, 4, 4] -> [N, 1, 8, 8] fitted to fixed targets: the loss falls."""
    main, startup = progs
    z = paddle.static.data(name="z", shape=[None, 4, 4, 4], dtype="float32")
    t = paddle.static.data(name="t", shape=[None, 1, 8, 8], dtype="float32")
    net = _Decoder()
    out = net(z)
    assert list(out.shape) == [-1, 1, 8, 8]
    loss = paddle.nn.functional.mse_loss(out, t)
    paddle.optimizer.Adam(learning_rate=0.02, parameters=net.parameters()).minimize(loss)
    rng = np.random.RandomState(3)
    feed = {"z": rng.uniform(-1, 1, (8, 4, 4, 4)).astype("float32"),
            "t": rng.uniform(-1, 1, (8, 1, 8, 8)).astype("float32")}
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(60)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_api_names():
    assert paddle.static.nn.conv2d_transpose is fluid.layers.conv2d_transpose
    assert paddle.static.nn.sequence_conv is fluid.layers.sequence_conv
    assert paddle.static.Print is fluid.layers.Print
    assert paddle.nn.Conv2DTranspose is paddle.nn.layer.Conv2DTranspose
    assert "conv2d_transpose" in paddle.nn.functional.__all__


def test_conv2d_transpose_errors(progs):
    x = fluid.data(name="img", shape=[None, 3, 4, 4], dtype="float32")
    with pytest.raises(ValueError, match="output_size 12 must be in"):
        fluid.layers.conv2d_transpose(x, 2, output_size=12, filter_size=3, stride=2)
    with pytest.raises(NotImplementedError, match="NHWC"):
        fluid.layers.conv2d_transpose(x, 2, filter_size=3, data_format="NHWC")
    with pytest.raises(ValueError, match="padding must be"):
        fluid.layers.conv2d_transpose(x, 2, filter_size=3, padding="FULL")


# ---- sequence_conv ----------------------------------------------------------------------------------


def seqconv_ref(x, lod, w, b, length, start):
    out = np.zeros((x.shape[0], w.shape[1]))
    d = x.shape[1]
    for s in range(len(lod) - 1):
        for t in range(lod[s], lod[s + 1]):
            for j in range(length):
                src = t + start + j
                if lod[s] <= src < lod[s + 1]:
                    out[t] += x[src] @ w[j * d:(j + 1) * d]
    return out + b


@pytest.mark.parametrize("api, kw, length, start", [
    ("fluid", dict(filter_size=3), 3, -1),
    ("fluid", dict(filter_size=4, padding_start=0, act="tanh"), 4, 0),
    ("static", dict(filter_size=2, padding_start=1, bias_attr=False), 2, 1),
])
def test_sequence_conv_matches_numpy(progs, api, kw, length, start):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 5], dtype="float32", lod_level=1)
    layer = fluid.layers.sequence_conv if api == "fluid" else paddle.static.nn.sequence_conv
    y = layer(x, num_filters=3, **kw)
    lens = [3, 1, 0, 4]
    xv = np.random.RandomState(4).uniform(-1, 1, (8, 5)).astype("float32")
    got = run(main, startup, {"x": fluid.create_lod_tensor(xv, [lens], fluid.CPUPlace())}, [y], return_numpy=False)[0]
    assert got.lod() == [[0, 3, 4, 4, 8]]
    w = param("sequence_conv_0.w_0")
    assert w.shape == (length * 5, 3)
    b = 0 if kw.get("bias_attr") is False else param("sequence_conv_0.b_0")
    want = seqconv_ref(xv, [0, 3, 4, 4, 8], w, b, length, start)
    if kw.get("act") == "tanh":
        want = np.tanh(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_sequence_conv_trains_and_refuses_strides(progs):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 4], dtype="float32", lod_level=1)
    t = fluid.data(name="t", shape=[None, 2], dtype="float32", lod_level=1)
    with pytest.raises(NotImplementedError, match="filter_stride \\(contextStride\\) other than 1"):
        fluid.layers.sequence_conv(x, 2, filter_stride=2)
    # the failed layer left the program's error; a fresh program builds the rest
    main2, startup2 = fluid.Program(), fluid.Program()
    with fluid.program_guard(main2, startup2):
        x = fluid.data(name="x", shape=[None, 4], dtype="float32", lod_level=1)
        t = fluid.data(name="t", shape=[None, 2], dtype="float32", lod_level=1)
        y = fluid.layers.sequence_conv(x, 2, filter_size=3)
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(y, t)))
        fluid.optimizer.SGD(learning_rate=0.2).minimize(loss)
    rng = np.random.RandomState(5)
    feed = {"x": fluid.create_lod_tensor(rng.uniform(-1, 1, (9, 4)).astype("float32"), [[4, 5]], None),
            "t": fluid.create_lod_tensor(rng.uniform(-1, 1, (9, 2)).astype("float32"), [[4, 5]], None)}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup2)
    losses = [float(exe.run(main2, feed=feed, fetch_list=[loss])[0]) for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0], losses[::10]


# ---- Print ------------------------------------------------------------------------------------------


def test_print_writes_paddles_record(progs, capfd):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 2], dtype="float32", lod_level=1)
    y = fluid.layers.Print(x, message="The content of x:", summarize=3)
    z = paddle.static.Print(y, print_tensor_name=False, print_tensor_lod=False, print_tensor_layout=False,
                            summarize=-1)
    xv = np.array([[0.5, -1], [2.25, 3], [1e5, 1e-7]], "float32")
    capfd.readouterr()
    got = run(main, startup, {"x": fluid.create_lod_tensor(xv, [[1, 2]], None)}, [z])[0]
    np.testing.assert_array_equal(got, xv)  # a copy, twice
    err = capfd.readouterr().err
    assert err == ("Variable: x\n"
                   "  - message: The content of x:\n"
                   "  - lod: {{0, 1, 3}}\n"
                   "  - place: CPUPlace\n"
                   "  - shape: [3, 2]\n"
                   "  - layout: NCHW\n"
                   "  - dtype: float\n"
                   "  - data: [0.5 -1 2.25]\n"
                   "  - place: CPUPlace\n"
                   "  - shape: [3, 2]\n"
                   "  - dtype: float\n"
                   "  - data: [0.5 -1 2.25 3 100000 1e-07]\n")


def test_print_phase_and_first_n(progs, capfd):
    """print_phase='backward' writes the gradient only; first_n=2 stops after two records."""
    main, startup = progs
    w = fluid.layers.create_parameter([3], "float32", name="w", default_initializer=fluid.initializer.Constant(2.0))
    p = fluid.layers.Print(w, first_n=2, message="grad", print_phase="backward", print_tensor_type=False,
                           print_tensor_shape=False, print_tensor_layout=False, print_tensor_lod=False)
    loss = fluid.layers.reduce_sum(fluid.layers.scale(p, 3.0))
    fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    capfd.readouterr()
    for _ in range(3):
        exe.run(main, fetch_list=[loss])
    err = capfd.readouterr().err
    records = err.split("Variable: ")[1:]
    assert len(records) == 2, err
    for r in records:
        assert r.split("\n")[0].endswith("@GRAD")
        assert r.split("\n", 1)[1] == "  - message: grad\n  - place: CPUPlace\n  - data: [3 3 3]\n"
    with pytest.raises(ValueError, match="print_phase 'sideways'"):
        fluid.layers.Print(w, print_phase="sideways")
