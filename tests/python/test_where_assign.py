"""paddle.where (op where, src/graph/ops_select.c) and NumpyArrayInitializer / Assign (op
assign_value in the startup program, fl_init_assign): checked against NumPy on fed data,
the gradients fetched after an SGD step."""
import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid
import fleet_c.static as static


@pytest.fixture
def progs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        yield main, startup


def _param(name, value):
    return fluid.layers.create_parameter(list(np.shape(value)), "float32", name=name,
                                         default_initializer=fluid.initializer.NumpyArrayInitializer(value))


def test_where_selects_broadcasts_and_trains_both_sides(progs):
    main, startup = progs
    x0 = np.array([[1.0, np.inf, 3.0, np.nan]] * 2 + [[5.0, 6.0, 7.0, 8.0]], "float32")  # [3, 4]
    y0 = np.array([-np.inf, 20.0, 30.0, 40.0], "float32")  # [4], broadcast over the rows
    x, y = _param("wx", x0), _param("wy", y0)
    c = fluid.data(name="c", shape=[None, 4], dtype="float32")
    cond = paddle.greater_than(c, fluid.layers.fill_constant([1], "float32", 0.0))  # int32 0 / 1
    out = paddle.where(cond, x, y)
    assert list(out.shape) == [3, 4]
    loss = fluid.layers.reduce_sum(out)
    fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    cv = np.array([[1, 0, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0]], "float32")  # never an inf or a NaN
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, gx, gy = exe.run(main, feed={"c": cv}, fetch_list=[out, "wx@GRAD", "wy@GRAD"])
    want = np.where(cv > 0, x0, np.broadcast_to(y0, (3, 4)))
    np.testing.assert_array_equal(got, want)  # the selected side only: finite here
    assert np.isfinite(got).all()
    # d loss / d x = 1 where the condition holds; y's sums over the rows it was broadcast along
    np.testing.assert_array_equal(gx, (cv > 0).astype("float32"))
    np.testing.assert_array_equal(gy, (cv == 0).sum(axis=0).astype("float32"))
    wx = np.asarray(fluid.global_scope().find_var("wx").get_tensor())
    np.testing.assert_array_equal(wx[2], x0[2] - cv[2])  # the SGD step of rate 1 on the finite row


def test_where_takes_a_number_and_refuses_what_paddle_does_not_select(progs):
    main, startup = progs
    x = fluid.data(name="x", shape=[None, 3], dtype="float32")
    out = paddle.where(paddle.less_than(x, fluid.layers.fill_constant([1], "float32", 0.0)), 0.0, x)  # relu
    xv = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, = exe.run(main, feed={"x": xv}, fetch_list=[out])
    np.testing.assert_array_equal(got, np.maximum(xv, 0))
    with pytest.raises(NotImplementedError, match="where_index"):
        paddle.where(x)
    z = fluid.data(name="z", shape=[None, 2], dtype="float32")
    with pytest.raises(paddle.InvalidArgumentError, match="do not broadcast"):
        paddle.where(x, x, z)


def test_numpy_array_initializer_sets_the_parameter(progs):
    main, startup = progs
    w0 = np.arange(12, dtype="float32").reshape(4, 3) / 7.0
    b0 = np.array([0.5, -0.25, 2.0], "float32")
    x = static.data("x", [None, 4], "float32")
    y = static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name="fc_w", initializer=paddle.nn.initializer.Assign(w0)),
                     bias_attr=fluid.ParamAttr(name="fc_b",
                                               initializer=fluid.initializer.NumpyArrayInitializer(b0)))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    scope = fluid.global_scope()
    np.testing.assert_array_equal(np.asarray(scope.find_var("fc_w").get_tensor()), w0)
    np.testing.assert_array_equal(np.asarray(scope.find_var("fc_b").get_tensor()), b0)
    xv = np.ones((2, 4), "float32")
    got, = exe.run(main, feed={"x": xv}, fetch_list=[y])
    np.testing.assert_allclose(got, xv @ w0 + b0, rtol=1e-6)


def test_numpy_array_initializer_of_the_wrong_size_names_the_parameter(progs):
    x = static.data("x", [None, 4], "float32")
    with pytest.raises(paddle.InvalidArgumentError, match="'w_bad'.*12 elements, its assigned initial values 6"):
        static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(
            name="w_bad", initializer=fluid.initializer.NumpyArrayInitializer(np.zeros((2, 3)))))
