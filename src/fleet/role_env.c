/*
 * role_env.c - fleet_role_from_env: which launcher started this process.  The first rule
 * that matches wins (docs/clusters.md, "Which role maker fleet_init picks"):
 *
 *   1. Paddle's launcher (fleetrun, paddle.distributed.launch, a PaddleJob):
 *      PADDLE_TRAINER_ENDPOINTS, PADDLE_PSERVERS_IP_PORT_LIST or TRAINING_ROLE is set
 *      -> fleet_role_paddlecloud.  It names every endpoint itself, so it wins over any
 *      scheduler around it (e.g. fleetrun started by srun).
 *   2. torchrun or a PyTorchJob: RANK or WORLD_SIZE is set -> fleet_role_torchrun.  Before
 *      MPI and Slurm: torchrun is itself often started by srun or mpirun (one agent per node),
 *      and its processes inherit that launcher's variables, which describe the agents.
 *   3. Open MPI's mpirun: OMPI_COMM_WORLD_SIZE is set -> fleet_role_mpi.  Before Slurm:
 *      mpirun inside an allocation starts its daemons with srun, and the ranks inherit the
 *      daemons' step variables.
 *   4. an srun step: SLURM_PROCID and SLURM_STEP_ID are set -> fleet_role_slurm; except when
 *      PMI_SIZE is set and differs from SLURM_NTASKS (another MPI's mpiexec inside the
 *      allocation) -> fleet_role_mpi.  A batch script run without srun has no step and is
 *      not a Slurm job for this purpose.
 *   5. PMI_SIZE or PMIX_RANK is set (an MPI launcher) -> fleet_role_mpi.
 *   6. otherwise fleet_role_paddlecloud, which gives one local worker when no PADDLE_*
 *      variable is set (and checks the ones that are).
 * The choice and its reason are logged at info level (FLEET_LOG_LEVEL=info).
 */
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

static int is_set(const char *name)
{
    const char *v = NULL;
    fl__env_str(name, NULL, &v);
    return v != NULL;
}

static int paddle_role(int is_collective, fleet_role **out) { return fleet_role_paddlecloud(is_collective, out); }

/* Whether PMI_SIZE names another process count than SLURM_NTASKS. */
static int pmi_differs_from_slurm(int *differs)
{
    int64_t pmi, ntasks;
    *differs = 0;
    if (!is_set("PMI_SIZE")) return FL_OK;
    FL_CHECK(fl__env_int("PMI_SIZE", 1, 1, INT32_MAX, &pmi));
    FL_CHECK(fl__env_int("SLURM_NTASKS", pmi, 1, INT32_MAX, &ntasks));
    *differs = pmi != ntasks;
    return FL_OK;
}

int fleet_role_from_env(int is_collective, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_from_env: out is NULL");
    *out = NULL;
    int paddle = is_set("PADDLE_TRAINER_ENDPOINTS") || is_set("PADDLE_PSERVERS_IP_PORT_LIST") || is_set("TRAINING_ROLE");
    int torch = is_set("RANK") || is_set("WORLD_SIZE");
    int ompi = is_set("OMPI_COMM_WORLD_SIZE");
    int slurm = is_set("SLURM_PROCID") && (is_set("SLURM_STEP_ID") || is_set("SLURM_STEPID"));
    int pmi = is_set("PMI_SIZE") || is_set("PMIX_RANK");
    int pmi_outside = 0;
    if (slurm) FL_CHECK(pmi_differs_from_slurm(&pmi_outside));

    const char *name, *why;
    int (*make)(int, fleet_role **);
    if (paddle) {
        name = "PaddleCloudRoleMaker",
        why = "Paddle's launcher variables are set (PADDLE_TRAINER_ENDPOINTS, "
              "PADDLE_PSERVERS_IP_PORT_LIST or TRAINING_ROLE)",
        make = paddle_role;
    } else if (torch) {
        name = "torchrun", why = "RANK or WORLD_SIZE is set (torchrun, Kubernetes PyTorchJob)", make = fl__role_torchrun;
    } else if (ompi) {
        name = "MPI", why = "OMPI_COMM_WORLD_SIZE is set (Open MPI's mpirun)", make = fleet_role_mpi;
    } else if (slurm && pmi_outside) {
        name = "MPI", why = "PMI_SIZE differs from SLURM_NTASKS (an MPI launcher inside a Slurm allocation)",
        make = fleet_role_mpi;
    } else if (slurm) {
        name = "Slurm", why = "SLURM_PROCID and SLURM_STEP_ID are set (an srun step)", make = fleet_role_slurm;
    } else if (pmi) {
        name = "MPI", why = "PMI_SIZE or PMIX_RANK is set (an MPI launcher)", make = fleet_role_mpi;
    } else {
        name = "PaddleCloudRoleMaker", why = "no launcher's variables are set", make = paddle_role;
        const char *job = NULL;
        fl__env_str("SLURM_JOB_ID", NULL, &job);
        if (job)
            FL_INFO(FL_SUB_FLEET,
                    "inside Slurm job %s but not in an srun step: start the program with srun to use every task", job);
    }
    int others = (paddle + torch + ompi + slurm + pmi) - 1;
    FL_INFO(FL_SUB_FLEET, "role maker: %s, because %s%s", name, why,
            others > 0 ? "; the other launchers' variables also set are ignored" : "");
    int st = make(is_collective, out);
    if (st != FL_OK && make != paddle_role)
        return fl__err(st, "%s (fleet_role_from_env chose the %s role maker because %s)", fl_last_error(), name, why);
    return st;
}
