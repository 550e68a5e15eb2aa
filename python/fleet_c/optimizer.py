"""Optimizers with fluid 1.x and paddle 2.x names and arguments.

minimize(loss) appends backward, weight decay and one update op per parameter to the
loss's program (fl_opt_minimize).  Each minimize makes a fresh C optimizer, kept alive
with the program.  A fleet distributed optimizer (fleet.distributed_optimizer) wraps one
of these and passes the C optimizer through fleet_distributed_optimizer first.
"""
import sys

from . import _lib
from . import lr
from ._lib import lib
from .framework import Program, Variable
from .layers import ExponentialDecay
from .lr import LRScheduler
from .grad_clip import ClipGradBase
from .regularizer import l1_coeff, l2_coeff

sys.modules[__name__ + ".lr"] = lr  # import paddle.optimizer.lr

__all__ = ["SGD", "Momentum", "Adagrad", "Adam", "RMSProp", "SGDOptimizer", "MomentumOptimizer", "AdagradOptimizer",
           "AdamOptimizer", "RMSPropOptimizer", "Optimizer", "DGCMomentumOptimizer"]


class Optimizer:
    """Common arguments: learning_rate (a float, layers.exponential_decay(...), or a
    schedule's variable: layers.piecewise_decay(...) and the like), regularization (fluid)
    or weight_decay (paddle: a float, L2Decay or L1Decay); parameter_list / parameters
    restrict the update to those parameters; grad_clip: paddle.nn.ClipGradBy* (grad_clip.py)."""

    def __init__(self, learning_rate, regularization=None, weight_decay=None, parameter_list=None,
                 parameters=None, grad_clip=None, name=None):
        if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
            raise TypeError("%s: grad_clip must be paddle.nn.ClipGradByValue, ClipGradByNorm or ClipGradByGlobalNorm "
                            "(fluid.clip.GradientClipBy...), got %s" % (type(self).__name__, type(grad_clip).__name__))
        self._grad_clip = grad_clip
        if not isinstance(learning_rate, (int, float, ExponentialDecay, Variable, LRScheduler)):
            raise TypeError("%s: learning_rate must be a float, a paddle.optimizer.lr scheduler, "
                            "fluid.layers.exponential_decay(...) or a schedule's variable, got %s"
                            % (type(self).__name__, type(learning_rate).__name__))
        self._learning_rate = learning_rate
        reg = regularization if regularization is not None else weight_decay
        self._l2 = l2_coeff(reg, type(self).__name__)
        self._l1 = l1_coeff(reg)
        self._parameters = parameter_list if parameter_list is not None else parameters
        self.type = None

    def _create(self):
        raise NotImplementedError

    def _c_optimizer(self, prog=None):
        """A new C optimizer with this one's settings (the caller keeps or frees it); prog:
        the program minimize builds (a paddle.optimizer.lr scheduler's variable goes there)."""
        lr = self._learning_rate
        if isinstance(lr, LRScheduler):
            if prog is None:
                raise ValueError("%s: a paddle.optimizer.lr scheduler needs the program (minimize)" % type(self).__name__)
            lr = lr._variable(prog)
        elif isinstance(lr, ExponentialDecay) and getattr(prog, "_lr_scheduler", None) is not None:
            raise ValueError("%s: the program has a paddle.optimizer.lr scheduler; fluid.layers.exponential_decay would "
                             "read its counter: use one kind" % type(self).__name__)
        base = lr.learning_rate if isinstance(lr, ExponentialDecay) else 0.0 if isinstance(lr, Variable) else float(lr)
        o = _lib.check_ptr(self._create(base), type(self).__name__)
        try:
            if self._l2:
                _lib.check(lib.fl_opt_set_l2(o, self._l2))
            if self._l1:
                _lib.check(lib.fl_opt_set_l1(o, self._l1))
            if getattr(self, "_grad_clip", None) is not None:
                self._grad_clip._apply(o)
            if isinstance(lr, Variable):
                _lib.check(lib.fl_opt_set_lr_var(o, lr._p))
            if isinstance(lr, ExponentialDecay):
                _lib.check(lib.fl_opt_set_exponential_decay(o, lr.decay_steps, lr.decay_rate,
                                                            1 if lr.staircase else 0))
        except Exception:
            lib.fl_opt_free(o)
            raise
        return o

    def get_lr(self):
        lr = self._learning_rate
        if isinstance(lr, LRScheduler):
            return lr()
        if isinstance(lr, Variable):
            raise NotImplementedError("get_lr: the learning rate is the schedule variable '%s'; fetch it" % lr.name)
        return lr.learning_rate if isinstance(lr, ExponentialDecay) else float(lr)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        return _minimize(self, loss, startup_program, parameter_list, no_grad_set, None, None)


class _COpt:
    """Owns a C optimizer for as long as the program that was built with it."""

    def __init__(self, h):
        self.h = h

    def __del__(self):
        if self.h and not _lib.shutting_down[0]:
            lib.fl_opt_free(self.h)


def _minimize(opt, loss, startup_program, parameter_list, no_grad_set, fleet, strategy):
    """minimize() of a plain or a fleet-wrapped optimizer.  fleet: a _fleet.Fleet or None;
    strategy: a C Strategy pointer or None."""
    if not isinstance(loss, Variable):
        raise TypeError("minimize: loss must be a Variable, got %s" % type(loss).__name__)
    prog = loss.program
    if startup_program is not None:
        if not isinstance(startup_program, Program):
            raise TypeError("minimize: startup_program must be a Program")
        startup_program._join_startup(prog)
    params = parameter_list if parameter_list is not None else opt._parameters
    no_grad = set()
    for v in no_grad_set or ():
        no_grad.add(v.name if isinstance(v, Variable) else str(v))
    if params is not None:
        keep = {p.name if isinstance(p, Variable) else str(p) for p in params}
        no_grad |= {p.name for p in prog.all_parameters() if p.name not in keep}
    c = _COpt(opt._c_optimizer(prog))
    if fleet is not None:
        wrapped = lib.fleet_distributed_optimizer(fleet._handle(), c.h, strategy)
        if not wrapped:
            raise _lib.err_from_last("fleet.distributed_optimizer")
        prog._keep.append(fleet)
    prog._keep.append(c)
    names = sorted(no_grad)
    _lib.check(lib.fl_opt_minimize_ex(c.h, loss._p, _lib.cstr_array(names), len(names)))
    pairs = []
    for p in prog.all_parameters():
        g = prog.global_block().var(p.name + "@GRAD") if prog.global_block().has_var(p.name + "@GRAD") else None
        if g is not None:
            pairs.append((p, g))
    return [], pairs


class SGD(Optimizer):
    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 regularization=None, parameter_list=None):
        super().__init__(learning_rate, regularization, weight_decay, parameter_list, parameters, grad_clip)
        self.type = "sgd"

    def _create(self, lr):
        return lib.fl_opt_sgd(lr)


class Momentum(Optimizer):
    def __init__(self, learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False, weight_decay=None,
                 grad_clip=None, name=None, regularization=None, parameter_list=None, rescale_grad=1.0):
        super().__init__(learning_rate, regularization, weight_decay, parameter_list, parameters, grad_clip)
        if rescale_grad != 1.0:
            raise NotImplementedError("Momentum: rescale_grad is not supported by Fleet")
        self._momentum = float(momentum)
        self._nesterov = bool(use_nesterov)
        self.type = "momentum"

    def _create(self, lr):
        return lib.fl_opt_momentum(lr, self._momentum, 1 if self._nesterov else 0)


class DGCMomentumOptimizer(Momentum):
    """fluid 1.x: Momentum whose gradients are exchanged by Deep Gradient Compression when a
    collective fleet distributes it (fleet.distributed_optimizer turns on strategy.dgc with
    these settings); on one process it is Momentum, as in Paddle."""

    def __init__(self, learning_rate, momentum, rampup_begin_step, rampup_step=1, sparsity=(0.999,),
                 parameter_list=None, use_nesterov=False, num_trainers=None, regularization=None, grad_clip=None,
                 name=None, local_grad_clip_norm=None):
        super().__init__(learning_rate, momentum, use_nesterov=use_nesterov, regularization=regularization,
                         parameter_list=parameter_list, grad_clip=grad_clip)
        self._dgc_configs = {"rampup_begin_step": int(rampup_begin_step), "rampup_step": int(rampup_step),
                             "sparsity": [float(x) for x in sparsity]}


class Adagrad(Optimizer):
    def __init__(self, learning_rate, epsilon=1e-06, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 initial_accumulator_value=0.0, regularization=None, parameter_list=None):
        super().__init__(learning_rate, regularization, weight_decay, parameter_list, parameters, grad_clip)
        if initial_accumulator_value != 0.0:
            raise NotImplementedError("Adagrad: initial_accumulator_value is not supported by Fleet")
        self._epsilon = float(epsilon)
        self.type = "adagrad"

    def _create(self, lr):
        return lib.fl_opt_adagrad(lr, self._epsilon)


class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-08, parameters=None,
                 weight_decay=None, grad_clip=None, lazy_mode=False, name=None, regularization=None,
                 parameter_list=None):
        super().__init__(learning_rate, regularization, weight_decay, parameter_list, parameters, grad_clip)
        self._betas = (float(beta1), float(beta2))
        self._epsilon = float(epsilon)
        self.type = "adam"

    def _create(self, lr):
        return lib.fl_opt_adam(lr, self._betas[0], self._betas[1], self._epsilon)


class RMSProp(Optimizer):
    """Paddle's RMSProp (op rmsprop): rho, epsilon, momentum, centered as Paddle's."""

    def __init__(self, learning_rate, rho=0.95, epsilon=1e-06, momentum=0.0, centered=False, parameters=None,
                 weight_decay=None, grad_clip=None, name=None, regularization=None, parameter_list=None):
        super().__init__(learning_rate, regularization, weight_decay, parameter_list, parameters, grad_clip)
        self._rho, self._epsilon, self._momentum = float(rho), float(epsilon), float(momentum)
        self._centered = bool(centered)
        self.type = "rmsprop"

    def _create(self, lr):
        return lib.fl_opt_rmsprop(lr, self._rho, self._epsilon, self._momentum, 1 if self._centered else 0)


SGDOptimizer = SGD
RMSPropOptimizer = RMSProp
MomentumOptimizer = Momentum
AdagradOptimizer = Adagrad
AdamOptimizer = Adam
