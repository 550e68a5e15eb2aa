"""Role makers: where a process learns whether it is a worker or a server, its index and
its peers (paddle.distributed.fleet.base.role_maker and the fluid 1.x module of the same
name).  Each makes its C role (fleet/fleet.h) when fleet.init(role) is called; a missing
or malformed environment variable raises the library's message naming it.
"""
import ctypes

from . import _lib
from ._lib import check, lib

__all__ = ["Role", "RoleMakerBase", "PaddleCloudRoleMaker", "UserDefinedRoleMaker", "UserDefinedCollectiveRoleMaker",
           "MPISymetricRoleMaker", "MPIRoleMaker", "SlurmRoleMaker", "TorchrunRoleMaker", "EnvRoleMaker"]


class Role:
    WORKER = 1
    SERVER = 2


class RoleMakerBase:
    """After fleet.init(role) the role maker answers for that fleet (Paddle 1.x programs ask
    the role maker itself: role.is_server(), role.worker_index(), ...)."""

    _is_collective = False
    _fleet = None

    def _f(self, what):
        if self._fleet is None:
            raise _lib.error_for(-10, "%s.%s(): call fleet.init(role) with this role maker first"
                                 % (type(self).__name__, what))
        return self._fleet

    def is_worker(self):
        return self._f("is_worker").is_worker()

    def is_server(self):
        return self._f("is_server").is_server()

    def is_first_worker(self):
        return self._f("is_first_worker").is_first_worker()

    def worker_index(self):
        return self._f("worker_index").worker_index()

    def worker_num(self):
        return self._f("worker_num").worker_num()

    def server_index(self):
        return self._f("server_index").server_index()

    def server_num(self):
        return self._f("server_num").server_num()

    def get_trainer_endpoints(self):
        return self._f("get_trainer_endpoints").worker_endpoints()

    def get_pserver_endpoints(self):
        return self._f("get_pserver_endpoints").server_endpoints()

    def generate_role(self):
        """Paddle makes the role here; fleet.init(role) does it in fleet_c."""

    def _create(self):
        """A new C role (fleet_init takes it over)."""
        raise NotImplementedError

    @staticmethod
    def _out(fn, *args):
        out = ctypes.c_void_p()
        check(fn(*args, ctypes.byref(out)))
        return out.value


class PaddleCloudRoleMaker(RoleMakerBase):
    """Paddle's launcher variables (fleetrun): PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS,
    TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, ...; none set: one local worker."""

    def __init__(self, is_collective=False, **kwargs):
        self._is_collective = bool(is_collective)

    def _create(self):
        return self._out(lib.fleet_role_paddlecloud, 1 if self._is_collective else 0)


class UserDefinedRoleMaker(RoleMakerBase):
    """Everything given in code: current_id, role (Role.WORKER / Role.SERVER), worker_num,
    server_endpoints and, for collective jobs, worker_endpoints."""

    def __init__(self, current_id=0, role=Role.WORKER, worker_num=0, server_endpoints=None, worker_endpoints=None,
                 is_collective=False, **kwargs):
        self._is_collective = bool(is_collective)
        self._spec = (int(current_id), int(role), int(worker_num), list(server_endpoints or []),
                      list(worker_endpoints or []))

    def _create(self):
        cid, role, wn, servers, workers = self._spec
        u = _lib.UserRole()
        u.is_collective = 1 if self._is_collective else 0
        u.current_id, u.role, u.worker_num = cid, role, wn
        w = _lib.cstr_array(workers)
        s = _lib.cstr_array(servers)
        u.worker_endpoints, u.n_worker_endpoints = ctypes.cast(w, _lib.SP), len(workers)
        u.server_endpoints, u.n_server_endpoints = ctypes.cast(s, _lib.SP), len(servers)
        return self._out(lib.fleet_role_user_defined, ctypes.byref(u))


class UserDefinedCollectiveRoleMaker(UserDefinedRoleMaker):
    """fluid 1.x: a collective job's current_id and worker_endpoints."""

    def __init__(self, current_id=0, worker_endpoints=None):
        super().__init__(current_id=current_id, worker_endpoints=worker_endpoints, is_collective=True)


class MPISymetricRoleMaker(RoleMakerBase):
    """mpirun: even ranks are servers, odd ranks workers (Paddle's MPISymetricRoleMaker)."""

    def _create(self):
        return self._out(lib.fleet_role_mpi, 0)


class MPIRoleMaker(RoleMakerBase):
    """mpirun, every rank a collective worker (or is_collective=False: as MPISymetric)."""

    def __init__(self, is_collective=True):
        self._is_collective = bool(is_collective)

    def _create(self):
        return self._out(lib.fleet_role_mpi, 1 if self._is_collective else 0)


class SlurmRoleMaker(RoleMakerBase):
    """srun (docs/clusters.md); parameter-server jobs set FLEET_SLURM_SERVERS."""

    def __init__(self, is_collective=True):
        self._is_collective = bool(is_collective)

    def _create(self):
        return self._out(lib.fleet_role_slurm, 1 if self._is_collective else 0)


class TorchrunRoleMaker(RoleMakerBase):
    """torchrun or a Kubernetes PyTorchJob (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""

    _is_collective = True

    def _create(self):
        return self._out(lib.fleet_role_torchrun)


class EnvRoleMaker(RoleMakerBase):
    """Whatever launcher started the process (fleet_role_from_env): Paddle's, torchrun,
    mpirun or srun, else one local worker.  fleet.init() without a role uses this."""

    def __init__(self, is_collective=False):
        self._is_collective = bool(is_collective)

    def _create(self):
        return self._out(lib.fleet_role_from_env, 1 if self._is_collective else 0)
