"""fluid.DistributeTranspiler (Paddle 1.x's transpiler API) over the parameter-server runtime.

A Paddle 1.x program builds its model, calls ``optimizer.minimize(loss)`` as for local
training, then

    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, pservers="h1:6170,h2:6170", trainers=2, sync_mode=True)
    if role == "PSERVER":
        prog = t.get_pserver_program(current_endpoint)
        startup = t.get_startup_program(current_endpoint, prog)
        exe.run(startup)
        exe.run(prog)                 # serves until every trainer has finished
    else:
        prog = t.get_trainer_program()
        exe.run(fluid.default_startup_program())
        ... exe.run(prog, feed=..., fetch_list=...)

Here the process becomes a fleet server or worker (a fleet with a UserDefinedRoleMaker of
those endpoints) and fleet_transpile makes the minimized program that fleet's
parameter-server program in place, with the tables and the worker rewrite that
fleet.distributed_optimizer would have made: the trainer program is the original program,
rewritten; the pserver "program" stands for the server (running it serves).  The role is
decided when transpile() is called if the environment says it (TRAINING_ROLE or
PADDLE_TRAINING_ROLE: TRAINER or PSERVER, as Paddle's launch scripts set it), else by the
first get_trainer_program() or get_pserver_program(endpoint).  A trainer connects to the
servers then (with the runtime's deadline), so that the startup program it runs next
fetches the servers' initial parameters; it stops at exit (or at Executor.close()), and the
servers return from exe.run(pserver_program) when every trainer has stopped.

Modes: sync_mode=False (the argument or the config's) is asynchronous; the config's
geo_sgd_mode and half_async (or StrategyFactory's configs) select GEO and half-async.
Paddle's slicing options (slice_var_up, split_method, min_block_size) are accepted: the
runtime splits the tables over the servers its own way (docs/parameter_server.md).
"""
import os

from ._lib import check, lib
from .strategy import DistributeTranspilerConfig

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig"]

_ROLE_VARS = ("TRAINING_ROLE", "PADDLE_TRAINING_ROLE")


class _ServerProgram:
    """What get_pserver_program / get_startup_program return: running it with an Executor
    binds the server (the startup program) or serves (the pserver program) until every
    trainer has stopped."""

    def __init__(self, transpiler, endpoint, serve):
        self._t = transpiler
        self.endpoint = endpoint
        self._serve = serve

    def _run_on_executor(self):
        f = self._t._fleet
        if not self._t._server_bound:
            f.init_server(self._t._model_dir)
            self._t._server_bound = True
        if self._serve:
            f.run_server()
        return []

    def global_block(self):
        raise NotImplementedError("a parameter-server program of fleet_c has no blocks: run it with an Executor")


class DistributeTranspiler:
    def __init__(self, config=None):
        if config is not None and not isinstance(config, DistributeTranspilerConfig):
            raise TypeError("DistributeTranspiler: config must be a DistributeTranspilerConfig, got %s"
                            % type(config).__name__)
        self.config = config if config is not None else DistributeTranspilerConfig()
        self._fleet = None
        self._role = None
        self._program = None
        self._server_bound = False
        self._model_dir = None

    def transpile(self, trainer_id, program=None, pservers="127.0.0.1:6174", trainers=1, sync_mode=True,
                  startup_program=None, current_endpoint="127.0.0.1:6174"):
        """Records the job: trainer_id, the servers' endpoints (comma-separated), the number of
        trainers; program (default: the default main program) must have been minimized."""
        from .framework import Program, default_main_program
        if getattr(self.config, "mode", "pserver") != "pserver":
            raise NotImplementedError("DistributeTranspiler: config.mode=%r is not supported; collective programs use "
                                      "fleet.distributed_optimizer (fluid.incubate.fleet.collective)" % self.config.mode)
        if self._program is not None:
            raise ValueError("DistributeTranspiler.transpile: called twice (one transpiler transpiles one program)")
        program = program if program is not None else default_main_program()
        if not isinstance(program, Program):
            raise TypeError("DistributeTranspiler.transpile: program must be a Program, got %s" % type(program).__name__)
        if isinstance(trainers, str):
            raise NotImplementedError("DistributeTranspiler.transpile: trainers given as endpoints (nccl2 mode) is not "
                                      "supported; give the number of trainers")
        self._servers = [e.strip() for e in str(pservers).split(",") if e.strip()]
        if not self._servers:
            raise ValueError("DistributeTranspiler.transpile: pservers names no endpoint")
        self._trainers = int(trainers)
        self._trainer_id = int(trainer_id)
        if self._trainers < 1 or not 0 <= self._trainer_id < self._trainers:
            raise ValueError("DistributeTranspiler.transpile: trainer_id %d is not in [0, trainers=%d)"
                             % (self._trainer_id, self._trainers))
        self._sync = bool(sync_mode) and bool(self.config.sync_mode)
        self._program = program
        self._current_endpoint = current_endpoint
        role = next((os.environ[v] for v in _ROLE_VARS if os.environ.get(v)), "").upper()
        if role == "TRAINER":
            self._setup("trainer")
        elif role == "PSERVER" and current_endpoint in self._servers:
            self._setup("server", current_endpoint)

    def _strategy(self):
        c = DistributeTranspilerConfig()
        for k, v in vars(self.config).items():
            setattr(c, k, v)
        c.sync_mode = self._sync
        return c._to_strategy()

    def _copt(self):
        from .optimizer import _COpt
        opts = [k for k in self._program._keep if isinstance(k, _COpt)]
        if not opts:
            raise ValueError("DistributeTranspiler: the program was not minimized: call optimizer.minimize(loss) "
                             "before transpile")
        return opts[-1]

    def _setup(self, role, endpoint=None):
        if self._program is None:
            raise ValueError("DistributeTranspiler: call transpile() first")
        if self._fleet is not None:
            if role != self._role or (role == "server" and endpoint != self._endpoint):
                raise ValueError("DistributeTranspiler: this process is already the %s%s; one process is one "
                                 "trainer or one server" % (self._role, " " + self._endpoint if self._endpoint else ""))
            return
        from ._fleet import Fleet
        from .role_maker import Role, UserDefinedRoleMaker
        if role == "server":
            if endpoint not in self._servers:
                raise ValueError("DistributeTranspiler.get_pserver_program: endpoint %r is not one of pservers %s"
                                 % (endpoint, ",".join(self._servers)))
            rm = UserDefinedRoleMaker(current_id=self._servers.index(endpoint), role=Role.SERVER,
                                      worker_num=self._trainers, server_endpoints=self._servers)
        else:
            rm = UserDefinedRoleMaker(current_id=self._trainer_id, role=Role.WORKER, worker_num=self._trainers,
                                      server_endpoints=self._servers)
        f = Fleet()
        f.init(rm)
        copt = self._copt()
        strategy = self._strategy()
        check(lib.fleet_transpile(f._handle(), copt.h, self._program._main(), strategy._pointer()))
        self._program._keep.append(f)
        self._fleet, self._role, self._endpoint = f, role, endpoint
        if role == "trainer":
            f.init_worker()
            from . import executor
            executor._stop_on_close.append(f)

    def get_trainer_program(self, wait_port=True):
        """The trainer's program (the transpiled original); connects to the servers."""
        self._setup("trainer")
        return self._program

    def get_pserver_program(self, endpoint):
        """The server at endpoint: run it with an Executor to serve until the trainers finish."""
        self._setup("server", endpoint)
        return _ServerProgram(self, endpoint, True)

    def get_pserver_programs(self, endpoint):
        main = self.get_pserver_program(endpoint)
        return main, self.get_startup_program(endpoint, main)

    def get_startup_program(self, endpoint=None, pserver_program=None, startup_program=None):
        """The server's startup program: running it binds the server's endpoint and makes its
        tables."""
        endpoint = endpoint if endpoint is not None else getattr(pserver_program, "endpoint", None)
        self._setup("server", endpoint)
        return _ServerProgram(self, endpoint, False)

    @property
    def origin_program(self):
        return self._program

