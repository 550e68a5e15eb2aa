"""grad_clip given to an optimizer (python/fleet_c/grad_clip.py over fl_opt_set_grad_clip):
paddle.nn.ClipGradByValue / ByNorm / ByGlobalNorm and fluid.clip's 1.x names.  One step of
SGD at rate 1 on y = x w + b with loss mean(y): the gradients are x (w) and 1 (b), so the
step each parameter takes is its clipped gradient, checked against NumPy."""
import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid
import fleet_c.static as static

X = np.array([[3.0, -4.0, 0.5, 12.0]], np.float32)


def _step(clip, opt=paddle.optimizer.SGD):
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = static.data("x", [None, 4], "float32")
        y = static.nn.fc(x, 1, weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.0)),
                         bias_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.0)))
        opt(learning_rate=1.0, grad_clip=clip).minimize(paddle.mean(y))
        w, b = main.global_block().all_parameters()
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        wv, bv = exe.run(main, feed={"x": X}, fetch_list=[w, b])
    return -np.asarray(wv).reshape(-1), -np.asarray(bv).reshape(-1)


def test_by_value():
    gw, gb = _step(paddle.nn.ClipGradByValue(2.0, -1.0))
    np.testing.assert_allclose(gw, np.clip(X[0], -1.0, 2.0), rtol=1e-6)
    np.testing.assert_allclose(gb, [1.0], rtol=1e-6)
    gw, _ = _step(fluid.clip.GradientClipByValue(3.5))  # min defaults to -max
    np.testing.assert_allclose(gw, np.clip(X[0], -3.5, 3.5), rtol=1e-6)


def test_by_norm_clips_each_gradient():
    gw, gb = _step(paddle.nn.ClipGradByNorm(1.0))
    np.testing.assert_allclose(gw, X[0] / np.linalg.norm(X[0]), rtol=1e-5)
    np.testing.assert_allclose(gb, [1.0], rtol=1e-6)  # norm 1: unchanged


def test_by_global_norm_scales_all_together():
    gw, gb = _step(paddle.nn.ClipGradByGlobalNorm(2.0))
    k = 2.0 / np.sqrt(np.sum(X[0] ** 2) + 1.0)
    np.testing.assert_allclose(gw, X[0] * k, rtol=1e-5)
    np.testing.assert_allclose(gb, [k], rtol=1e-5)
    gw, _ = _step(paddle.nn.ClipGradByGlobalNorm(100.0))  # below the norm: unchanged
    np.testing.assert_allclose(gw, X[0], rtol=1e-6)


def test_wrong_kind_is_refused():
    with pytest.raises(TypeError, match="grad_clip must be"):
        paddle.optimizer.SGD(learning_rate=0.1, grad_clip=1.0)
    with pytest.raises(ValueError, match="min .* must be less than max"):
        paddle.nn.ClipGradByValue(1.0, 2.0)
