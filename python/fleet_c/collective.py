"""fluid.layers.collective (Paddle 1.x): collective ops inside a program, among the workers
of the fleet this process initialised (fleet.init: the 1.x collective or parameter-server
fleet, or paddle.distributed.fleet).  Each is one C op (fleet_layer_allreduce, src/fleet/
collective/ops.c; fleet_layer_allgather) that every worker runs at the same step of the same program; on one
worker (or a local run) the output is the input."""
from . import _lib
from ._lib import lib
from .framework import Variable

__all__ = ["_c_allreduce", "_c_allgather"]


def _the_fleet(op):
    from ._fleet import current_fleet
    f = current_fleet()
    if f is None:
        raise _lib.error_for(-10, "layers.collective.%s: call fleet.init() first: the op runs among the fleet's "
                             "workers" % op)
    return f


def _c_allreduce(x, out=None, reduce_type="sum", ring_id=0, use_calc_stream=False):
    """x reduced over the workers ("sum", "max" or "min"), a new variable of x's shape."""
    if not isinstance(x, Variable):
        raise TypeError("_c_allreduce: x must be a Variable, got %s" % type(x).__name__)
    if out is not None:
        raise NotImplementedError("_c_allreduce: out= is not supported (the result is a new variable)")
    if ring_id != 0:
        raise NotImplementedError("_c_allreduce: ring_id %r: Fleet has one ring, the workers' (ring_id 0)" % ring_id)
    if reduce_type == "prod":
        raise NotImplementedError("_c_allreduce: reduce_type 'prod' is not supported (sum, max or min)")
    f = _the_fleet("_c_allreduce")
    return x.program._layer_result(lib.fleet_layer_allreduce(f._handle(), x._p, _lib.cstr(reduce_type)),
                                   "_c_allreduce")


def _c_allgather(x, nranks, ring_id=0, use_calc_stream=False):
    """Every worker's x stacked along the first dimension in rank order ([n, ...] becomes
    [nranks * n, ...]); nranks must be the number of workers."""
    if not isinstance(x, Variable):
        raise TypeError("_c_allgather: x must be a Variable, got %s" % type(x).__name__)
    if ring_id != 0:
        raise NotImplementedError("_c_allgather: ring_id %r: Fleet has one ring, the workers' (ring_id 0)" % ring_id)
    f = _the_fleet("_c_allgather")
    if int(nranks) != f.worker_num():
        raise ValueError("_c_allgather: nranks is %d but the fleet has %d workers" % (int(nranks), f.worker_num()))
    return x.program._layer_result(lib.fleet_layer_allgather(f._handle(), x._p), "_c_allgather")
