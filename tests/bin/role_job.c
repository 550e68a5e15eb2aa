/*
 * role_job.c - a process of a job started by a scheduler's launcher (mpirun in
 * tests/test_role_mpi.c; forked with Slurm or torchrun variables in tests/test_role.c).
 *
 *   role_job MAKER MODE [STEP...]
 *     MAKER  mpi | slurm | torchrun | env (fleet_role_from_env) | init (fleet_init(NULL, ...))
 *     MODE   coll | ps
 *     STEP   allreduce  workers sum worker_index + 1 with fleet_util_all_reduce, print "SUM x"
 *            userinit   (MPI builds) MPI_Init before the role maker and MPI_Finalize after
 *                       fleet_free, with an MPI_Barrier in between (Fleet must not finalise it)
 *            again      after fleet_free, make a second MPI role: prints "AGAIN <status>"
 *            keep       never free the fleet (MPI is then finalised at exit)
 *            train      (collective) 5 steps of the quick-start MLP, each worker on its own
 *                       batches, gradients allreduced by the communication thread; prints
 *                       "TRAIN rank=R loss=<last loss in %a>"
 *
 * Prints "ROLE rank=R kind=worker|server index=I workers=W servers=S eps=E srv=S" (endpoint lists
 * comma-separated, "-" when empty; R is OMPI_COMM_WORLD_RANK or "-") and exits 0; on an error prints "ERROR <status>: <message>"
 * and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fleet.h>

#include "../../examples/quick_start/data.h"

#ifdef FL_HAVE_MPI
#include <mpi.h>
#endif

static int fail(const char *what, int st)
{
    printf("ERROR %s: %s: %s\n", fl_strerror(st), what, fl_last_error());
    fflush(stdout);
    return 1;
}

static int has(int argc, char **argv, const char *step)
{
    for (int i = 3; i < argc; i++)
        if (!strcmp(argv[i], step)) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr,
                "usage: role_job mpi|slurm|torchrun|env|init coll|ps [allreduce] [userinit] [again] [keep] [train]\n");
        return 2;
    }
    const char *maker = argv[1];
    int coll = !strcmp(argv[2], "coll");
#ifdef FL_HAVE_MPI
    if (has(argc, argv, "userinit")) MPI_Init(NULL, NULL);
#endif
    fleet_role *role = NULL;
    int st = FL_OK;
    if (!strcmp(maker, "mpi")) st = fleet_role_mpi(coll, &role);
    else if (!strcmp(maker, "slurm")) st = fleet_role_slurm(coll, &role);
    else if (!strcmp(maker, "torchrun")) st = fleet_role_torchrun(&role);
    else if (!strcmp(maker, "env")) st = fleet_role_from_env(coll, &role);
    else if (strcmp(maker, "init") != 0) return fail("unknown role maker", FL_EINVAL);
    if (st != FL_OK) return fail(maker, st);
    fleet_t *f = coll ? fleet_init_collective(role, NULL) : fleet_init(role, NULL);
    if (!f) return fail("fleet_init", fl_last_status());
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    printf("ROLE rank=%s kind=%s index=%d workers=%d servers=%d eps=%s srv=%s\n", rank ? rank : "-",
           fleet_is_server(f) ? "server" : "worker", fleet_is_server(f) ? fleet_server_index(f) : fleet_worker_index(f),
           fleet_worker_num(f), fleet_server_num(f), *fleet_worker_endpoints_str(f) ? fleet_worker_endpoints_str(f) : "-",
           *fleet_server_endpoints_str(f) ? fleet_server_endpoints_str(f) : "-");
    fflush(stdout);
    if (has(argc, argv, "allreduce") && fleet_is_worker(f)) {
        double v = fleet_worker_index(f) + 1;
        if ((st = fleet_util_all_reduce(f, &v, 1, FL_FLOAT64, "sum")) != FL_OK) return fail("fleet_util_all_reduce", st);
        printf("SUM %g\n", v);
        fflush(stdout);
    }
    if (has(argc, argv, "train") && fleet_is_worker(f)) {
        fl_prog *prog = fl_prog_create();
        fl_model_mlp_config cfg = fl_model_mlp_default();
        fl_model_mlp net;
        fl_opt *opt = NULL;
        fl_exe *exe = NULL;
        fl_tensor *loss = NULL;
        batch_data data = {0};
        if ((st = fl_model_mlp_build(prog, &cfg, &net)) != FL_OK) return fail("fl_model_mlp_build", st);
        opt = fleet_distributed_optimizer(f, fl_opt_sgd(0.05f), NULL);
        if ((st = fl_opt_minimize(opt, net.loss)) != FL_OK) return fail("fl_opt_minimize", st);
        exe = fl_exe_create(NULL);
        if ((st = fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL)) != FL_OK) return fail("startup", st);
        for (int i = 0; i < 5; i++) {
            gen_data(&data, 64, (unsigned)(i * fleet_worker_num(f) + fleet_worker_index(f)));
            fl_feed feed[] = {{"x", data.x}, {"y", data.y}};
            const char *fetch[] = {fl_var_name(net.loss)};
            if ((st = fl_exe_run(exe, prog, feed, 2, fetch, 1, &loss)) != FL_OK) return fail("training step", st);
        }
        printf("TRAIN rank=%d loss=%a\n", fleet_worker_index(f), (double)fl_tensor_f32(loss)[0]);
        fflush(stdout);
        batch_data_free(&data);
        fl_exe_free(exe);
        fl_opt_free(opt);
        fl_prog_free(prog);
    }
    if (has(argc, argv, "keep")) return 0;
    fleet_free(f);
    if (has(argc, argv, "again")) {
        fleet_role *r2 = NULL;
        st = fleet_role_mpi(coll, &r2);
        printf("AGAIN %s %s\n", fl_strerror(st), st == FL_OK ? "" : fl_last_error());
        fleet_role_free(r2);
    }
#ifdef FL_HAVE_MPI
    if (has(argc, argv, "userinit")) {
        if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) return fail("MPI_Barrier after fleet_free", FL_ESTATE);
        printf("USER MPI still usable\n");
        MPI_Finalize();
    }
#endif
    return 0;
}
