"""paddle.optimizer.lr: Paddle 2.x's learning-rate scheduler objects, passed as an
optimizer's learning_rate in a static program and stepped by the program itself
(``scheduler.step()`` per batch or per epoch, as it chooses).

In Paddle's static mode the executor writes the scheduler's value into the program's
learning-rate variable before every run.  Here the rate is computed in the program by the
library's schedule ops (src/graph/ops_lr.c and the schedules of fluid.layers) from a step
counter that the executor sets to the scheduler's ``last_epoch`` before every run (one
integer per run; the counter has no increment op, so ``step()`` alone advances it):

    NoamDecay               noam_decay (0 at epoch 0, as Paddle's)
    PiecewiseDecay          piecewise_decay(boundaries, values)
    MultiStepDecay          piecewise_decay(milestones, lr * gamma^i)
    ExponentialDecay        exponential_decay(lr, 1, gamma)
    StepDecay               exponential_decay(lr, step_size, gamma, staircase)
    NaturalExpDecay         natural_exp_decay(lr, 1, gamma)
    InverseTimeDecay        inverse_time_decay(lr, 1, gamma)
    PolynomialDecay         polynomial_decay(lr, decay_steps, end_lr, power, cycle)
    CosineAnnealingDecay    cosine_decay(lr - eta_min, 1, T_max), plus eta_min (a scale op)
    LinearWarmup(float)     linear_lr_warmup over a constant

Schedules whose value depends on Python state - LambdaDecay (a Python function),
ReduceOnPlateau (the losses given to step()), LinearWarmup over another scheduler (which it
steps with its own offset) - write their value into the learning-rate variable instead,
one float per run.  Each scheduler also answers ``last_lr`` / ``get_lr()`` / ``()`` as
Paddle's do, for the programs that print it.

A program takes one scheduler, and no fluid.layers schedule besides (both would read the
same counter).
"""
import ctypes
import math

import numpy as np

from . import _lib
from ._lib import lib
from ._tensor import dtype_code

__all__ = ["LRScheduler", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "InverseTimeDecay", "PolynomialDecay",
           "LinearWarmup", "ExponentialDecay", "MultiStepDecay", "StepDecay", "LambdaDecay", "ReduceOnPlateau",
           "CosineAnnealingDecay"]

COUNTER = "@LR_DECAY_COUNTER@"


class LRScheduler:
    """The base class: subclasses define get_lr() (from last_epoch and base_lr)."""

    def __init__(self, learning_rate=0.1, last_epoch=-1, verbose=False):
        if not isinstance(learning_rate, (float, int)):
            raise TypeError("%s: learning_rate must be a float, got %s" % (type(self).__name__,
                                                                          type(learning_rate).__name__))
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.verbose = verbose
        self.step()

    def __call__(self):
        return self.last_lr

    def step(self, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        self.last_lr = float(self.get_lr())
        if self.verbose:
            print("Epoch {}: {} set learning rate to {}.".format(self.last_epoch, type(self).__name__, self.last_lr))

    def get_lr(self):
        raise NotImplementedError("%s must define get_lr" % type(self).__name__)

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if isinstance(v, (int, float, bool, list, tuple))}

    def set_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    set_dict = set_state_dict

    # -- in a program ----------------------------------------------------------------------------
    def _c_schedule(self, h):
        """The C schedule layer's variable (reading the counter), or None: the value is
        written from Python each run."""
        return None

    def _variable(self, prog):
        """The learning-rate Variable of prog for this scheduler (built once per program)."""
        mine = getattr(prog, "_lr_scheduler", None)
        if mine is not None:
            if mine[0] is not self:
                raise ValueError("paddle.optimizer.lr: one scheduler per program (this one already has %s)"
                                 % type(mine[0]).__name__)
            return mine[1]
        h = prog._main()
        fed = self._c_schedule_needs_counter()
        if fed:
            if lib.fl_prog_var(h, _lib.cstr(COUNTER)):
                raise ValueError("%s: the program already has a fluid.layers learning-rate schedule (it counts runs); "
                                 "a paddle.optimizer.lr scheduler is stepped by step(): use one kind" % type(self).__name__)
            one = (ctypes.c_int64 * 1)(1)
            prog._layer_result(lib.fl_layer_create_global_var(h, _lib.cstr(COUNTER), 1, one, dtype_code("int64"),
                                                              float(max(self.last_epoch, 0))), type(self).__name__)
            ptr = self._c_schedule(h)
        else:
            one = (ctypes.c_int64 * 1)(1)
            ptr = lib.fl_layer_create_global_var(h, _lib.cstr("learning_rate@%s" % type(self).__name__), 1, one,
                                                 dtype_code("float32"), float(self.last_lr))
        var = prog._layer_result(ptr, type(self).__name__)
        prog._lr_scheduler = (self, var, fed)
        return var

    def _c_schedule_needs_counter(self):
        return type(self)._c_schedule is not LRScheduler._c_schedule

    def _before_run(self, scope, fed):
        """What the executor does before each run: the counter or the value, one number."""
        if fed:
            scope.var(COUNTER).set(np.array([max(self.last_epoch, 0)], dtype=np.int64))
        else:
            scope.var(self._value_name).set(np.array([self.last_lr], dtype=np.float32))

    @property
    def _value_name(self):
        return "learning_rate@%s" % type(self).__name__


def before_run(program, scope):
    """Executor.run / train_from_dataset: the program's scheduler, if any, sets its number."""
    s = getattr(program, "_lr_scheduler", None)
    if s is not None:
        s[0]._before_run(scope, s[2])


class NoamDecay(LRScheduler):
    def __init__(self, d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False):
        self.d_model, self.warmup_steps = d_model, warmup_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        a = 1 if self.last_epoch == 0 else self.last_epoch ** -0.5
        b = self.warmup_steps ** -1.5 * self.last_epoch
        return self.base_lr * (self.d_model ** -0.5) * min(a, b)

    def _c_schedule(self, h):
        return lib.fl_layer_noam_decay(h, int(self.d_model), int(self.warmup_steps), self.base_lr)


class PiecewiseDecay(LRScheduler):
    def __init__(self, boundaries, values, last_epoch=-1, verbose=False):
        if len(values) != len(boundaries) + 1:
            raise ValueError("PiecewiseDecay: len(values) must be len(boundaries) + 1")
        self.boundaries, self.values = list(boundaries), list(values)
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self):
        for i, b in enumerate(self.boundaries):
            if self.last_epoch < b:
                return self.values[i]
        return self.values[len(self.values) - 1]

    def _c_schedule(self, h):
        return _piecewise(h, self.boundaries, self.values)


def _piecewise(h, boundaries, values):
    b = [int(x) for x in boundaries]
    v = [float(x) for x in values]
    return lib.fl_layer_piecewise_decay(h, (ctypes.c_int64 * max(1, len(b)))(*b), len(b), (ctypes.c_float * len(v))(*v))


class NaturalExpDecay(LRScheduler):
    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * math.exp(-1 * self.gamma * self.last_epoch)

    def _c_schedule(self, h):
        return lib.fl_layer_natural_exp_decay(h, self.base_lr, 1, float(self.gamma), 0)


class InverseTimeDecay(LRScheduler):
    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr / (1 + self.gamma * self.last_epoch)

    def _c_schedule(self, h):
        return lib.fl_layer_inverse_time_decay(h, self.base_lr, 1, float(self.gamma), 0)


class PolynomialDecay(LRScheduler):
    def __init__(self, learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False, last_epoch=-1,
                 verbose=False):
        if not decay_steps > 0:
            raise ValueError("PolynomialDecay: decay_steps must be > 0, got %r" % (decay_steps,))
        self.decay_steps, self.end_lr, self.power, self.cycle = decay_steps, end_lr, power, cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        epoch, steps = self.last_epoch, self.decay_steps
        if self.cycle:
            div = math.ceil(float(self.last_epoch) / float(self.decay_steps))
            steps = self.decay_steps * (1 if self.last_epoch == 0 else div)
        else:
            epoch = min(self.last_epoch, self.decay_steps)
        return (self.base_lr - self.end_lr) * ((1 - float(epoch) / float(steps)) ** self.power) + self.end_lr

    def _c_schedule(self, h):
        return lib.fl_layer_polynomial_decay(h, self.base_lr, int(self.decay_steps), float(self.end_lr),
                                             float(self.power), 1 if self.cycle else 0)


class LinearWarmup(LRScheduler):
    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
        if not isinstance(learning_rate, (float, int, LRScheduler)):
            raise TypeError("LinearWarmup: learning_rate must be a float or an LRScheduler, got %s"
                            % type(learning_rate).__name__)
        self.learning_rate = learning_rate
        self.warmup_steps, self.start_lr, self.end_lr = warmup_steps, start_lr, end_lr
        if not end_lr > start_lr:
            raise ValueError("LinearWarmup: end_lr %r must be greater than start_lr %r" % (end_lr, start_lr))
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * float(self.last_epoch) / float(self.warmup_steps) + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate

    def _c_schedule_needs_counter(self):  # over another scheduler: its own offset, so the value is written
        return not isinstance(self.learning_rate, LRScheduler)

    def _c_schedule(self, h):
        return lib.fl_layer_linear_lr_warmup(h, None, float(self.learning_rate), int(self.warmup_steps),
                                             float(self.start_lr), float(self.end_lr))


class ExponentialDecay(LRScheduler):
    def __init__(self, learning_rate, gamma, last_epoch=-1, verbose=False):
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * (self.gamma ** self.last_epoch)

    def _c_schedule(self, h):
        return lib.fl_layer_exponential_decay(h, self.base_lr, 1, float(self.gamma), 0)


class MultiStepDecay(LRScheduler):
    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        if not isinstance(milestones, (tuple, list)) or not milestones:
            raise TypeError("MultiStepDecay: milestones must be a non-empty list or tuple")
        if any(milestones[i] >= milestones[i + 1] for i in range(len(milestones) - 1)):
            raise ValueError("MultiStepDecay: milestones must be increasing")
        if gamma >= 1.0:
            raise ValueError("MultiStepDecay: gamma should be < 1.0")
        self.milestones, self.gamma = list(milestones), gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        for i, m in enumerate(self.milestones):
            if self.last_epoch < m:
                return self.base_lr * (self.gamma ** i)
        return self.base_lr * (self.gamma ** len(self.milestones))

    def _c_schedule(self, h):
        # the rates between milestones are the schedule's constants (piecewise_decay's values)
        return _piecewise(h, self.milestones, [self.base_lr * self.gamma ** i for i in range(len(self.milestones) + 1)])


class StepDecay(LRScheduler):
    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        if not isinstance(step_size, int) or step_size < 1:
            raise TypeError("StepDecay: step_size must be a positive integer, got %r" % (step_size,))
        if gamma >= 1.0:
            raise ValueError("StepDecay: gamma should be < 1.0")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * (self.gamma ** (self.last_epoch // self.step_size))

    def _c_schedule(self, h):
        return lib.fl_layer_exponential_decay(h, self.base_lr, int(self.step_size), float(self.gamma), 1)


class LambdaDecay(LRScheduler):
    """lr * lr_lambda(epoch): a Python function, so the value is written each run."""

    def __init__(self, learning_rate, lr_lambda, last_epoch=-1, verbose=False):
        if not callable(lr_lambda):
            raise TypeError("LambdaDecay: lr_lambda must be a function, got %s" % type(lr_lambda).__name__)
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        return self.base_lr * self.lr_lambda(self.last_epoch)


class ReduceOnPlateau(LRScheduler):
    """Lowers the rate by factor when the metric given to step(metrics) stops improving:
    Python state, so the value is written each run."""

    def __init__(self, learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, epsilon=1e-8, verbose=False):
        if mode not in ("min", "max"):
            raise ValueError("ReduceOnPlateau: mode must be 'min' or 'max', got %r" % (mode,))
        if factor >= 1.0:
            raise ValueError("ReduceOnPlateau: factor should be < 1.0")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceOnPlateau: threshold_mode must be 'rel' or 'abs', got %r" % (threshold_mode,))
        self.mode, self.factor, self.patience, self.threshold = mode, factor, patience, threshold
        self.threshold_mode, self.cooldown, self.min_lr, self.epsilon = threshold_mode, cooldown, min_lr, epsilon
        self.cooldown_counter, self.best, self.num_bad_epochs = 0, None, 0
        self.base_lr = self.last_lr = float(learning_rate)
        self.last_epoch = 0
        self.verbose = verbose

    def step(self, metrics, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        current = float(np.asarray(metrics).reshape(-1)[0])
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
        elif self.best is None or self._better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
            if self.num_bad_epochs > self.patience:
                self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
                new_lr = max(self.last_lr * self.factor, self.min_lr)
                if self.last_lr - new_lr > self.epsilon:
                    self.last_lr = new_lr
                    if self.verbose:
                        print("Epoch {}: ReduceOnPlateau set learning rate to {}.".format(self.last_epoch, self.last_lr))

    def _better(self, current, best):
        if self.mode == "min":
            return current < (best - best * self.threshold if self.threshold_mode == "rel" else best - self.threshold)
        return current > (best + best * self.threshold if self.threshold_mode == "rel" else best + self.threshold)


class CosineAnnealingDecay(LRScheduler):
    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):
        if not isinstance(T_max, int) or T_max < 1:
            raise TypeError("CosineAnnealingDecay: T_max must be a positive integer, got %r" % (T_max,))
        self.T_max, self.eta_min = T_max, float(eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        # the closed form of Paddle's recursive update (equal to it up to rounding)
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2

    def _c_schedule(self, h):
        v = lib.fl_layer_cosine_decay(h, self.base_lr - self.eta_min, 1, int(self.T_max))
        if not v or self.eta_min == 0.0:
            return v
        return lib.fl_layer_scale(v, 1.0, self.eta_min, 1)
