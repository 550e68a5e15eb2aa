"""paddle.distributed.fleet.metrics: a worker's metric statistics summed (or maxed, minned)
over every worker with fleet.util.all_reduce (the C collective among the workers), as
Paddle's.  input: a Variable or a variable name (read from scope, default the global
scope) or an array.  auc is not here (it needs the AUC of global buckets, which no C op
computes from buckets yet)."""
import numpy as np

__all__ = ["sum", "max", "min", "mae", "rmse", "mse", "acc"]

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
