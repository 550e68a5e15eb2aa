"""paddle.distributed.fleet.metrics: a worker's metric statistics summed (or maxed, minned)
over every worker with fleet.util.all_reduce (the C collective among the workers), as
Paddle's.  input: a Variable or a variable name (read from scope, default the global
scope) or an array.  auc sums the auc op's bucket statistics over the workers and computes
the AUC of the sums in C (fl_auc_from_stats)."""
import ctypes

import numpy as np

__all__ = ["sum", "max", "min", "auc", "mae", "rmse", "mse", "acc"]

_builtin_sum, _builtin_max, _builtin_min = sum, max, min


def _value(input, scope):
    from ...executor import global_scope
    from ...framework import Variable
    if isinstance(input, (Variable, str)):
        name = input.name if isinstance(input, Variable) else input
        var = (scope or global_scope()).find_var(name)
        if var is None:
            raise ValueError("fleet.metrics: no variable '%s' in the scope" % name)
        return np.array(var.get_tensor())
    return np.asarray(input)


def _reduce(input, mode, scope, util):
    from .. import fleet
    a = _value(input, scope)
    return (util or fleet.util).all_reduce(a, mode).reshape(a.shape)


def sum(input, scope=None, util=None):
    return _reduce(input, "sum", scope, util)


def max(input, scope=None, util=None):
    return _reduce(input, "max", scope, util)


def min(input, scope=None, util=None):
    return _reduce(input, "min", scope, util)


def auc(stat_pos, stat_neg, scope=None, util=None):
    """The global AUC (Paddle 2.x): stat_pos / stat_neg are the auc layer's global bucket
    statistics (its [1, B] StatPos and StatNeg: the last two of the four state variables
    fluid.layers.auc returns, or their names), summed over every worker, then the auc op's
    trapezoid sum over the buckets; 0.5 when no worker saw a positive or a negative."""
    from ..._lib import check, lib
    pos, neg = _value(stat_pos, scope), _value(stat_neg, scope)
    if pos.shape != neg.shape:
        raise ValueError("fleet.metrics.auc: stat_pos %s and stat_neg %s differ in shape" % (pos.shape, neg.shape))
    if pos.ndim > 2 or (pos.ndim == 2 and pos.shape[0] != 1):
        raise ValueError("fleet.metrics.auc: stat_pos has shape %s, expected the [1, B] global bucket statistics "
                         "(the sliding window's are not buckets of one histogram)" % (pos.shape,))
    pos = np.ascontiguousarray(_reduce(pos.astype(np.int64), "sum", None, util).reshape(-1), dtype=np.int64)
    neg = np.ascontiguousarray(_reduce(neg.astype(np.int64), "sum", None, util).reshape(-1), dtype=np.int64)
    out = ctypes.c_double()
    i64 = ctypes.POINTER(ctypes.c_int64)
    check(lib.fl_auc_from_stats(pos.ctypes.data_as(i64), neg.ctypes.data_as(i64), pos.size, ctypes.byref(out)))
    return out.value


def mae(abserr, total_ins_num, scope=None, util=None):
    return _reduce(abserr, "sum", scope, util).reshape(-1)[0] / total_ins_num


def mse(sqrerr, total_ins_num, scope=None, util=None):
    return _reduce(sqrerr, "sum", scope, util).reshape(-1)[0] / total_ins_num


def rmse(sqrerr, total_ins_num, scope=None, util=None):
    return np.sqrt(mse(sqrerr, total_ins_num, scope, util))


def acc(correct, total, scope=None, util=None):
    c = _reduce(correct, "sum", scope, util).reshape(-1)
    t = _reduce(total, "sum", scope, util).reshape(-1)
    return float(c[0]) / float(t[0])
