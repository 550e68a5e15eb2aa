"""paddle.distributed.fleet.utils.ps_util.DistributedInfer: inference with the tables of a
parameter-server job, as Paddle 2.x's.

    dist_infer = DistributedInfer(main_program=test_program, startup_program=test_startup)
    dist_infer.init_distributed_infer_env(exe, loss, role_maker, dirname)   # a job of its own
    program = dist_infer.get_dist_infer_program()

The program is a copy of main_program (made when DistributedInfer is constructed: the
default main program before minimize, or the test form of a model built again with the
trained names).  With parameter servers its lookups of the servers' sparse tables pull from
them without creating rows (fleet_dist_infer_program: the C library rewrites the copy) and
the dense parameters are the worker's (after training in the same process, the trained
ones; in a job of its own, the servers' tables loaded from dirname, which init_worker pulls).
Without servers (a local or collective fleet) the copy runs as it is, and
init_distributed_infer_env loads dirname into it (load_persistables, which also reads a
parameter-server save)."""
from ...._lib import check, lib

__all__ = ["DistributedInfer"]


def _the_fleet():
    """The fleet this process initialised last (fluid 1.x's or 2.x's), else 2.x's."""
    from ...._fleet import current_fleet
    from ... import fleet
    return current_fleet() or fleet._fleet


class DistributedInfer:
    def __init__(self, main_program=None, startup_program=None):
        from ....framework import default_main_program, default_startup_program
        self.origin_main_program = (main_program if main_program is not None else default_main_program()).clone()
        self.origin_startup_program = startup_program if startup_program is not None else default_startup_program()
        self._converted = False

    def init_distributed_infer_env(self, exe, loss, role_maker=None, dirname=None):
        """In a job of its own (no fleet yet): fleet.init(role_maker), minimize loss with SGD
        in asynchronous mode (the tables and their names, as Paddle does), then a server
        loads dirname and serves until the workers stop; a worker runs the startup program
        and init_worker (pulling the dense parameters); without servers it loads dirname.
        Does nothing when this process already initialised a fleet (after training)."""
        from .... import optimizer as _optimizer
        from ....framework import default_startup_program
        from ....io import load_persistables
        from ....strategy import DistributedStrategy
        from ... import fleet
        if _the_fleet()._h is not None:
            return
        fleet.init(role_maker=role_maker)
        strategy = DistributedStrategy()
        strategy.a_sync = True
        opt = fleet.distributed_optimizer(_optimizer.SGD(learning_rate=0.001), strategy=strategy)
        opt.minimize(loss, startup_program=self.origin_startup_program)
        if fleet.is_server():
            fleet.init_server(dirname)
            fleet.run_server()
            return
        exe.run(default_startup_program())
        fleet.init_worker()
        if dirname is not None and not fleet.is_distributed():
            if self.origin_startup_program is not default_startup_program():
                exe.run(self.origin_startup_program)
            load_persistables(exe, dirname, self.origin_main_program)

    def get_dist_infer_program(self):
        if not self._converted:
            f = _the_fleet()
            if f._h is not None:
                check(lib.fleet_dist_infer_program(f._h, self.origin_main_program._main()))
                self.origin_main_program._keep.append(f)
            self._converted = True
        return self.origin_main_program
