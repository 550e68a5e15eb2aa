/*
 * env.c - every environment variable Fleet reads goes through these getters, and every
 * variable is listed here with its meaning:
 *
 *   FLEET_LOG_LEVEL    error|warn|info|debug|trace (default warn)
 *   FLEET_LOG_SUBSYS   comma list of subsystems, "all", ^name excludes (default all)
 *   FLEET_NUM_THREADS  1 or 2: threads for large matrix products and our per-channel and
 *                      elementwise kernels (default 1; see src/tensor/parallel.c: on
 *                      OpenMP's team in a build with oneDNN); oneDNN's threads as well (1
 *                      inside Hogwild trainer threads; src/tensor/dnn.c)
 *   FLEET_GEMM         auto|dnnl|openblas: library of the matrix products of fc and
 *                      mul_grad (default auto: oneDNN when the build has it, else
 *                      OpenBLAS; dnnl in a build without oneDNN is an error; src/tensor/dnn.c)
 *   FLEET_METRICS_DIR  directory for training metrics (CSV and TensorBoard files, one set
 *                      per rank) when the program set none (src/exec/metrics.c,
 *                      include/fleet/metrics.h); unset: no metrics files
 *   FLEET_DIVERGENCE_BOUND  a training pass (fl_exe_train_from_dataset) warns, naming the
 *                      step and the variable, when a fetched value (the loss) is non-finite
 *                      or its magnitude exceeds this number (default 0: non-finite only;
 *                      src/exec/trainer.c)
 *   FLEET_DIVERGENCE_STOP   1: such a value stops the pass with an error instead (default 0)
 *   FLEET_PROFILE_OPS  1: executors time every op; the time per op type goes to stderr at
 *                      process exit, and the convolutions' reorders and primitives by
 *                      direction (default 0; src/exec/profile.c, src/tensor/dnn_conv.c)
 *   FLEET_DNN_LAYOUT   0: oneDNN's convolutions hand on plain NCHW tensors instead of their
 *                      blocked layouts (default 1; src/graph/op_layout.c, src/tensor/layout.h)
 *   FLEET_CONV_ALGO    auto|direct|winograd: algorithm of oneDNN's float32 3x3 stride-1
 *                      convolutions (default auto: Winograd where the shape rule of
 *                      src/tensor/dnn_conv.c has it faster, direct elsewhere; bfloat16 and
 *                      other shapes always direct; src/tensor/dnn_conv.c)
 *   FLEET_FUSE_BN_ADD_ACT  0: append_backward leaves batch_norm + elementwise_add + relu as
 *                      three ops instead of one fused_bn_add_activation (default 1;
 *                      src/graph/fuse.c)
 *   FLEET_INFER_FUSE   0: programs cloned for test and loaded inference models keep their
 *                      batch_norm, relu and residual add ops instead of having them folded
 *                      and fused into the convolutions (default 1; src/graph/fold_infer.c)
 *
 * Paddle's launcher variables, read by the role makers (src/fleet/role.c):
 *   PADDLE_TRAINER_ID            this trainer's index (integer in [0, trainers)); also the
 *                                metrics files' rank when fleet_init did not run (metrics.c)
 *   PADDLE_TRAINER_ENDPOINTS     host:port,... of all trainers
 *   PADDLE_CURRENT_ENDPOINT      this trainer's host:port (collective)
 *   PADDLE_TRAINERS_NUM          number of trainers
 *   PADDLE_TRAINING_ROLE         TRAINER (collective)
 *   TRAINING_ROLE                TRAINER or PSERVER (parameter server)
 *   PADDLE_PSERVERS_IP_PORT_LIST host:port,... of all parameter servers
 *   POD_IP, PADDLE_PORT          a server's own address and port
 *
 * Other launchers' variables, read by the schedulers' role makers (src/fleet/role_*.c;
 * docs/clusters.md), and to tell which launcher started the process (role_env.c):
 *   SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_LOCALID, SLURM_NODEID
 *                                srun: this task, the step's task count, its place
 *   SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST     the nodes (node[01-04,07])
 *   SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE             tasks per node (2(x3),1)
 *   SLURM_JOB_ID (or SLURM_JOBID), SLURM_STEP_ID (or SLURM_STEPID)  pick the ports
 *   FLEET_SLURM_PORT_BASE        first port of each node's tasks (default from the job id)
 *   FLEET_SLURM_SERVERS          parameter-server jobs: the first K tasks are servers
 *   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 *                                torchrun / Kubernetes PyTorchJob
 *   FLEET_WORKER_HOSTS           torchrun: one host per node, h0,h1,...
 *   FLEET_TORCHRUN_PORT_BASE     torchrun: first port of each node's ranks (MASTER_PORT + 1)
 *   FLEET_RENDEZVOUS_PORT        torchrun rendezvous port on MASTER_ADDR (MASTER_PORT + 1)
 *   FLEET_RENDEZVOUS_TIMEOUT_MS  deadline of the torchrun rendezvous (default 300000)
 *   OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK   an MPI launcher (checked against MPI's size)
 *   FLEET_MPI_HOST               MPI: this node's address for the others (default: see role_mpi.c)
 *
 * The launcher (tools/fleetrun/) also reads:
 *   POD_IP                       this machine's IP when --ips / --servers list several
 *   FLAGS_START_PORT             first fixed port (as Paddle), instead of free ports
 *   PATH                         program lookup
 *   FLEET_ALLOW_NO_DEVICES       1: accept --gpus/--devices on a machine without GPUs
 * and sets, besides Paddle's variables: PADDLE_RESTART_COUNT (0, then 1.. after each
 * --max_restart restart), PADDLE_JOB_ID, FLEET_LOG_LEVEL (--log_level).
 *
 * Listeners (src/net/acceptor.c; see include/fleet/net.h), used where the option is 0:
 *   FLEET_NET_MAX_PENDING        unauthenticated connections a listener holds at once
 *                                (default 256); the oldest idle one is dropped beyond
 *   FLEET_NET_MAX_PENDING_PER_SOURCE  of those, from one source address (default 16)
 *   FLEET_NET_HANDSHAKE_TIMEOUT_MS    time a connection has to authenticate (default 5000)
 *
 * Job secret (fl_net_secret_from_env in src/net/auth.c, called by the fleet layer, which
 * passes the secret down to the PS and the collectives) and collectives (src/coll):
 *   FLEET_JOB_SECRET             hex job secret (set by fleetrun; never logged)
 *   FLEET_JOB_SECRET_FILE        file holding the secret: a regular file owned by the user,
 *                                mode 0600 or 0400
 *   FLEET_COLL_TIMEOUT_MS        deadline of each wait inside a collective (default 30000),
 *                                used when the caller gives no timeout
 *   FLEET_COLL_BACKEND           collective backend: auto (default), shm, tcp or mpi, used when
 *                                fl_coll_opts.backend is unset (src/coll/backend.c)
 *   FLEET_COLL_ALLREDUCE_DTYPE   wire dtype of float32 allreduces: float32 (default), bfloat16
 *                                or float16 (half the bytes, reduced in float32), used when
 *                                fl_coll_opts.allreduce_dtype is unset (src/coll/comm.c)
 * The liveness settings below (heartbeat periods, silence windows) take their defaults from
 * one place, FL__LIVE_HEARTBEAT_MS (1000) and FL__LIVE_TIMEOUT_MS (6000) in
 * src/net/liveness.h, whose stall threshold (a wait 1 s late: this process was stopped) is a
 * constant, not a variable.
 *   FLEET_COLL_HEARTBEAT_MS      heartbeat period on every connection of a communicator
 *                                (default 1000; -1: none, and no silent-peer check), used
 *                                when fl_coll_opts.heartbeat_ms is 0 (src/coll/alive.c)
 *   FLEET_COLL_PEER_TIMEOUT_MS   a peer that sent nothing, not even a heartbeat, this long
 *                                fails a waiting collective, naming it (default 6000; -1
 *                                off), used when fl_coll_opts.peer_timeout_ms is 0
 *
 * Parameter server (src/ps/config.c), used where the option field is 0:
 *   FLEET_PS_THREADS             server request threads (default 4)
 *   FLEET_PS_REQUEST_TIMEOUT_MS  deadline of each PS request (default 60000)
 *   FLEET_PS_RECONNECT_GRACE_MS  a worker without connections fails the server after this (default 3000)
 *   FLEET_PS_WORKER_TIMEOUT_MS   a worker silent this long (no request, no heartbeat: stopped
 *                                or hung) fails the server, naming it; -1 disables (default 6000)
 *   FLEET_PS_WORKER_JOIN_TIMEOUT_MS  a worker that never connected fails the server after
 *                                this long; -1 disables (default 120000)
 *   FLEET_PS_CONNECT_TIMEOUT_MS  client wait for servers to listen (default 60000)
 *   FLEET_PS_BARRIER_TIMEOUT_MS  barriers, sync pushes, save and load (default 600000)
 *   FLEET_PS_RETRY_MS            client reconnect-and-resend budget; -1 disables (default 3000)
 *   FLEET_PS_HEARTBEAT_MS        client heartbeat period; -1 disables (default 1000)
 *   FLEET_PS_SERVER_TIMEOUT_MS   a request whose server answered nothing, not even a
 *                                heartbeat, for this long fails at once (the server is
 *                                stopped or hung, not slow); -1 disables (default 6000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"

int fl__env_str(const char *name, const char *def, const char **out)
{
    const char *v = getenv(name);
    *out = (v && *v) ? v : def;
    return FL_OK;
}

int fl__env_int(const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return FL_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return fl__err(FL_EINVAL, "environment variable %s='%s' is invalid: expected an integer in [%lld, %lld]", name, v,
                       (long long)lo, (long long)hi);
    *out = x;
    return FL_OK;
}

int fl__env_double(const char *name, double def, double *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return FL_OK;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end) return fl__err(FL_EINVAL, "environment variable %s='%s' is invalid: expected a number", name, v);
    *out = x;
    return FL_OK;
}

int fl__env_choice(const char *name, const char *const *choices, int def, int *out)
{
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return FL_OK;
    char list[256];
    size_t at = 0;
    list[0] = 0;
    for (int i = 0; choices[i]; i++) {
        if (!strcmp(v, choices[i])) {
            *out = i;
            return FL_OK;
        }
        int w = snprintf(list + at, sizeof list - at, "%s%s", i ? "|" : "", choices[i]);
        if (w > 0 && (size_t)w < sizeof list - at) at += (size_t)w;
    }
    return fl__err(FL_EINVAL, "environment variable %s='%s' is invalid: expected %s", name, v, list);
}
