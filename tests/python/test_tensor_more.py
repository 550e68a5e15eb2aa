"""paddle.squeeze / unsqueeze (reshape ops) and paddle.clip (elementwise_max / min with a
filled scalar) in static programs, against NumPy on fed data; paddle.static.save / load
(the persistables) round trip."""
import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid
import fleet_c.static as static


def test_squeeze_unsqueeze_clip_match_numpy():
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = static.data("x", [None, 1, 3], "float32")
        outs = [paddle.squeeze(x, 1), paddle.squeeze(x), paddle.unsqueeze(x, [0, 4]), paddle.unsqueeze(x, -1),
                paddle.clip(x, -0.5, 0.5), paddle.clip(x, min=0.0)]
        assert outs[0].shape == (-1, 3) and outs[2].shape == (1, -1, 1, 3, 1)
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        xv = np.random.RandomState(0).uniform(-1, 1, (5, 1, 3)).astype("float32")
        got = [np.asarray(g) for g in exe.run(main, feed={"x": xv}, fetch_list=outs)]
    want = [np.squeeze(xv, 1), np.squeeze(xv), xv[None, :, :, :, None], xv[..., None], np.clip(xv, -0.5, 0.5),
            np.maximum(xv, 0.0)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_wrong_axis_is_refused():
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        x = static.data("x", [None, 3], "float32")
        with pytest.raises(ValueError, match="axis 3 outside"):
            paddle.unsqueeze(x, 3)
        y = static.data("y", [None, None], "float32")
        with pytest.raises(ValueError, match="more than one unknown dimension"):
            paddle.unsqueeze(y, 0)


def test_static_save_load_round_trip(tmp_path):
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = static.data("x", [None, 3], "float32")
        y = static.nn.fc(x, 2)
        paddle.optimizer.Adam(learning_rate=0.1).minimize(paddle.mean(y))
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        xv = np.ones((4, 3), "float32")
        exe.run(main, feed={"x": xv})
        static.save(main, str(tmp_path / "ckpt"))
        w = main.global_block().all_parameters()[0]
        before = [np.asarray(a) for a in exe.run(main, feed={"x": xv}, fetch_list=[y, w])]
        exe.run(main, feed={"x": xv})  # moves the weights and Adam's moments on
        static.load(main, str(tmp_path / "ckpt"))
        # the restored state makes the same step again (the same output and updated weight)
        after = [np.asarray(a) for a in exe.run(main, feed={"x": xv}, fetch_list=[y, w])]
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_matches_numpy(reduction):
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup), fluid.scope_guard(fluid.Scope()):
        x = static.data("x", [None, 4], "float32")
        lab = static.data("lab", [None], "int64")
        out = paddle.nn.functional.nll_loss(x, lab, reduction=reduction)
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        rng = np.random.RandomState(1)
        xv = np.log(rng.dirichlet(np.ones(4), 6)).astype("float32")
        lv = rng.randint(0, 4, 6).astype("int64")
        got = np.asarray(exe.run(main, feed={"x": xv, "lab": lv}, fetch_list=[out])[0]).reshape(-1)
    per = -xv[np.arange(6), lv]
    want = {"mean": [per.mean()], "sum": [per.sum()], "none": per}[reduction]
    np.testing.assert_allclose(got, want, rtol=1e-5)
