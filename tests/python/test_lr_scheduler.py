"""paddle.optimizer.lr scheduler objects as an optimizer's learning_rate in static programs
(python/fleet_c/lr.py): the rate the program computes (fetched each run) follows Paddle's
formulas, written out here, for the epochs the program steps through with step() - once
per run, or once every few runs (per epoch) - and the parameters move by that rate."""
import math

import numpy as np
import pytest

import fleet_c as paddle
import fleet_c.fluid as fluid
import fleet_c.static as static
from fleet_c.optimizer import lr

# scheduler, Paddle's formula of epoch e (paddle/optimizer/lr.py)
CASES = [
    (lambda: lr.NoamDecay(64, 4, 2.0), lambda e: 2.0 * 64 ** -0.5 * min(1 if e == 0 else e ** -0.5, 4 ** -1.5 * e)),
    (lambda: lr.PiecewiseDecay([3, 6], [1.0, 0.5, 0.1]), lambda e: 1.0 if e < 3 else 0.5 if e < 6 else 0.1),
    (lambda: lr.NaturalExpDecay(0.5, 0.1), lambda e: 0.5 * math.exp(-0.1 * e)),
    (lambda: lr.InverseTimeDecay(0.5, 0.1), lambda e: 0.5 / (1 + 0.1 * e)),
    (lambda: lr.PolynomialDecay(0.5, 5, 0.01, 2.0), lambda e: (0.5 - 0.01) * (1 - min(e, 5) / 5) ** 2 + 0.01),
    (lambda: lr.PolynomialDecay(0.5, 4, cycle=True),
     lambda e: (0.5 - 1e-4) * (1 - e / (4 * max(1, math.ceil(e / 4)))) + 1e-4),
    (lambda: lr.LinearWarmup(0.5, 3, 0.0, 0.4), lambda e: 0.4 * e / 3 if e < 3 else 0.5),
    (lambda: lr.LinearWarmup(lr.ExponentialDecay(0.5, 0.9), 3, 0.1, 0.4),
     lambda e: 0.1 + 0.3 * e / 3 if e < 3 else 0.5 * 0.9 ** (e - 3)),
    (lambda: lr.ExponentialDecay(0.5, 0.9), lambda e: 0.5 * 0.9 ** e),
    (lambda: lr.MultiStepDecay(0.5, [2, 5], 0.1), lambda e: 0.5 * 0.1 ** (0 if e < 2 else 1 if e < 5 else 2)),
    (lambda: lr.StepDecay(0.5, 3, 0.5), lambda e: 0.5 * 0.5 ** (e // 3)),
    (lambda: lr.LambdaDecay(0.5, lambda e: 0.95 ** e), lambda e: 0.5 * 0.95 ** e),
    (lambda: lr.CosineAnnealingDecay(0.5, 5, 0.1), lambda e: 0.1 + 0.4 * (1 + math.cos(math.pi * e / 5)) / 2),
    (lambda: lr.CosineAnnealingDecay(0.5, 4), lambda e: 0.5 * (1 + math.cos(math.pi * e / 4)) / 2),
]


def _program(make, opt=paddle.optimizer.SGD):
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        x = static.data("x", [None, 4], "float32")
        y = static.nn.fc(x, 1, bias_attr=False)
        loss = paddle.mean(y)
        sched = make()
        opt(learning_rate=sched).minimize(loss)
    return main, startup, sched


@pytest.mark.parametrize("case", range(len(CASES)), ids=[type(c[0]()).__name__ for c in CASES])
@pytest.mark.parametrize("runs_per_step", [1, 3])
def test_rate_follows_paddle_formula(case, runs_per_step):
    make, formula = CASES[case]
    main, startup, sched = _program(make)
    w = main.global_block().all_parameters()[0]
    rate = main._lr_scheduler[1]
    with fluid.scope_guard(fluid.Scope()):
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        x = np.ones((2, 4), "float32")
        w0 = None
        for run in range(12 * runs_per_step):
            e = run // runs_per_step
            got, w1 = exe.run(main, feed={"x": x}, fetch_list=[rate, w])
            want = formula(e)
            assert abs(sched() - want) <= 1e-6 + 1e-5 * abs(want)
            assert abs(float(got[0]) - want) <= 1e-6 + 1e-5 * abs(want), (type(sched).__name__, e, got, want)
            if w0 is not None:  # d mean(x w) / dw = 1 per element (x = 1): the step is this run's rate
                np.testing.assert_allclose(w0 - w1, np.full_like(w1, got[0]), rtol=1e-4, atol=1e-6)
            w0 = w1
            if run % runs_per_step == runs_per_step - 1:
                sched.step()


def test_reduce_on_plateau_lowers_the_rate_the_program_uses():
    main, startup, sched = _program(lambda: lr.ReduceOnPlateau(0.5, patience=1, factor=0.5))
    rate = main._lr_scheduler[1]
    got = []
    with fluid.scope_guard(fluid.Scope()):
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        for loss in [1.0, 0.9, 0.95, 0.95, 0.8, 0.9, 0.9]:
            got.append(float(exe.run(main, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[rate])[0][0]))
            sched.step(loss)
    # best 1.0, 0.9; two epochs without improving (patience 1) halve it; 0.8 improves; then again
    assert got == [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25], got
    assert sched() == 0.125


def test_one_kind_of_schedule_per_program():
    main, startup, _ = _program(lambda: lr.StepDecay(0.5, 2))
    with static.program_guard(main, startup):
        with pytest.raises(ValueError, match="paddle.optimizer.lr scheduler"):
            fluid.layers.piecewise_decay([2], [0.1, 0.01])
    main2, startup2 = static.Program(), static.Program()
    with static.program_guard(main2, startup2):
        fluid.layers.piecewise_decay([2], [0.1, 0.01])
        x = static.data("x", [None, 4], "float32")
        loss = paddle.mean(static.nn.fc(x, 1))
        with pytest.raises(ValueError, match="fluid.layers learning-rate schedule"):
            paddle.optimizer.SGD(learning_rate=lr.StepDecay(0.5, 2)).minimize(loss)


def test_optimizer_get_lr_is_the_scheduler_value():
    sched = lr.ExponentialDecay(0.5, 0.5)
    opt = paddle.optimizer.Adam(learning_rate=sched)
    sched.step()
    assert opt.get_lr() == 0.25


def test_fluid_noam_decay_starts_at_the_step_1_rate():
    """fluid.layers.noam_decay counts its steps from 1 (Paddle 1.x's _decay_step_counter(1)):
    run k uses step k; paddle.optimizer.lr.NoamDecay's epoch 0 (above) is 0 instead."""
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        rate = fluid.layers.noam_decay(64, 4, 2.0)
        x = static.data("x", [None, 4], "float32")
        fluid.optimizer.SGD(learning_rate=rate).minimize(paddle.mean(static.nn.fc(x, 1)))
    with fluid.scope_guard(fluid.Scope()):
        exe = static.Executor(paddle.CPUPlace())
        exe.run(startup)
        for step in range(1, 7):
            got, = exe.run(main, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[rate])
            want = 2.0 * 64 ** -0.5 * min(step ** -0.5, 4 ** -1.5 * step)
            assert abs(float(got[0]) - want) <= 1e-7 + 1e-6 * want, (step, got, want)
