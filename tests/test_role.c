/*
 * test_role.c - the schedulers' role makers: Slurm's host-list and tasks-per-node syntax,
 * the Slurm and torchrun layouts and their errors, the torchrun rendezvous, and the order in
 * which fleet_role_from_env picks a launcher.  Each case runs in its own process and sets the
 * variables a launcher would; the multi-process cases fork their ranks on 127.0.0.x and
 * prove the endpoints work with an allreduce.  (mpirun itself: tests/test_role_mpi.c.)
 */
#include <pthread.h>
#include <sys/resource.h>

#include "testhelp.h"

#include "fleet/role_internal.h"

static const char *const launcher_vars[] = {"PADDLE_TRAINER_ID",
                                            "PADDLE_TRAINER_ENDPOINTS",
                                            "PADDLE_CURRENT_ENDPOINT",
                                            "PADDLE_TRAINERS_NUM",
                                            "PADDLE_TRAINING_ROLE",
                                            "TRAINING_ROLE",
                                            "PADDLE_PSERVERS_IP_PORT_LIST",
                                            "POD_IP",
                                            "PADDLE_PORT",
                                            "SLURM_PROCID",
                                            "SLURM_NTASKS",
                                            "SLURM_NPROCS",
                                            "SLURM_LOCALID",
                                            "SLURM_NODEID",
                                            "SLURM_STEP_NODELIST",
                                            "SLURM_JOB_NODELIST",
                                            "SLURM_NODELIST",
                                            "SLURM_STEP_TASKS_PER_NODE",
                                            "SLURM_TASKS_PER_NODE",
                                            "SLURM_JOB_ID",
                                            "SLURM_JOBID",
                                            "SLURM_STEP_ID",
                                            "SLURM_STEPID",
                                            "FLEET_SLURM_PORT_BASE",
                                            "FLEET_SLURM_SERVERS",
                                            "RANK",
                                            "WORLD_SIZE",
                                            "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE",
                                            "MASTER_ADDR",
                                            "MASTER_PORT",
                                            "FLEET_WORKER_HOSTS",
                                            "FLEET_TORCHRUN_PORT_BASE",
                                            "FLEET_RENDEZVOUS_PORT",
                                            "FLEET_RENDEZVOUS_TIMEOUT_MS",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_RANK",
                                            "PMI_SIZE",
                                            "PMI_RANK",
                                            "PMIX_RANK",
                                            "FLEET_MPI_HOST",
                                            "FLEET_JOB_SECRET",
                                            "FLEET_JOB_SECRET_FILE",
                                            NULL};

static void clear_env(void)
{
    for (const char *const *v = launcher_vars; *v; v++) unsetenv(*v);
}

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static int free_port(void)
{
    fl_net_listener *l = NULL;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int p = fl_net_listener_port(l);
    fl_net_listener_free(l);
    return p;
}

/* "a,b,c" of the role's worker (or server) endpoints, in a static buffer. */
static const char *eps(const fleet_role *r, int servers)
{
    static char b[4096];
    b[0] = 0;
    char *const *v = servers ? r->servers : r->workers;
    int n = servers ? r->nservers : r->nworkers;
    for (int i = 0; i < n; i++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%s", i ? "," : "", v[i]);
    return b;
}

/* ---- host lists ------------------------------------------------------------------------------ */

static void expect_hosts(const char *list, const char *want)
{
    char **v = NULL, got[4096] = "";
    int n = 0;
    CHECK_OK(fl__hostlist_expand(list, "environment variable SLURM_STEP_NODELIST", &v, &n));
    for (int i = 0; i < n; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i ? " " : "", v[i]);
    fl__free_strv(v, n);
    if (strcmp(got, want)) TFAIL("'%s' expanded to '%s', expected '%s'", list, got, want);
}

TEST(hostlist_expands_slurm_syntax)
{
    expect_hosts("node[01-04,07],login1", "node01 node02 node03 node04 node07 login1");
    expect_hosts("a1,b[2-3]", "a1 b2 b3");
    expect_hosts("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    expect_hosts("127.0.0.[1-2]", "127.0.0.1 127.0.0.2");
    expect_hosts("n[8-10]", "n8 n9 n10");
    expect_hosts("n[08-10]", "n08 n09 n10");
    expect_hosts("n[1-2]x,solo", "n1x n2x solo");
    expect_hosts("gpu_a.cluster-1", "gpu_a.cluster-1");
    expect_hosts("n[5]", "n5");
    char **v = NULL;
    int n = 0;
    CHECK_OK(fl__hostlist_expand("n[00001-10000]", "x", &v, &n));
    CHECK_EQ_INT(n, 10000);
    CHECK(!strcmp(v[9999], "n10000") && !strcmp(v[0], "n00001") && !strcmp(v[41], "n00042"));
    fl__free_strv(v, n);
}

static void expect_bad_hosts(const char *list, const char *sub)
{
    char **v = (char **)1;
    int n = -1;
    CHECK_FAILS(fl__hostlist_expand(list, "environment variable SLURM_STEP_NODELIST", &v, &n), FL_EINVAL, sub);
    CHECK(v == NULL && n == 0);
    CHECK_STR_HAS(fl_last_error(), "SLURM_STEP_NODELIST");
}

TEST(hostlist_errors_name_the_variable_and_the_form)
{
    expect_bad_hosts("node[1-", "'[' is not closed");
    expect_bad_hosts("node[1-", "expected a Slurm host list such as node[01-04,07],login1");
    expect_bad_hosts("node]1", "']' without '['");
    expect_bad_hosts("node[3-1]", "upper bound is below its lower bound");
    expect_bad_hosts("node[a]", "a number was expected at offset 5");
    expect_bad_hosts("node[1,,2]", "a number was expected");
    expect_bad_hosts("a,,b", "an empty host name");
    expect_bad_hosts("a,", "an empty host name");
    expect_bad_hosts("", "is empty");
    expect_bad_hosts("node[[1]]", "'[' inside brackets");
    expect_bad_hosts("no de", "cannot be part of a host name");
    expect_bad_hosts("n[1-1234567890]", "more than 9 digits");
    expect_bad_hosts("n[1-70000]", "more than 65536 hosts");
    expect_bad_hosts("r[1-300]n[1-300]", "more than 65536 hosts");
    expect_bad_hosts("n[1-2][3-4]", "two bracket groups without text between them");
    expect_bad_hosts("n[1-2", "'[' is not closed");
    expect_bad_hosts("n[1;2]", "',' or ']' was expected");
}

TEST(tasks_per_node)
{
    int *v = NULL, n = 0;
    CHECK_OK(fl__slurm_tasks_per_node("2(x3),1", "environment variable SLURM_STEP_TASKS_PER_NODE", &v, &n));
    CHECK(n == 4 && v[0] == 2 && v[1] == 2 && v[2] == 2 && v[3] == 1);
    free(v);
    CHECK_OK(fl__slurm_tasks_per_node("16", "x", &v, &n));
    CHECK(n == 1 && v[0] == 16);
    free(v);
    const char *bad[][2] = {{"2(x3", "N(xM) with a positive M"},
                            {"0", "positive task count"},
                            {"2,", "positive task count"},
                            {"x", "positive task count"},
                            {"2(x0)", "N(xM)"},
                            {"2;1", "',' was expected"},
                            {"", "is empty"},
                            {"1(x70000)", "more than 65536 nodes"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_FAILS(fl__slurm_tasks_per_node(bad[i][0], "environment variable SLURM_STEP_TASKS_PER_NODE", &v, &n),
                    FL_EINVAL, bad[i][1]);
        CHECK_STR_HAS(fl_last_error(), "SLURM_STEP_TASKS_PER_NODE");
        CHECK(v == NULL);
    }
}

/* ---- Slurm ----------------------------------------------------------------------------------- */

/* Five tasks: node01 and node02 run two each, gpu7 one. */
static void slurm_env(int procid)
{
    clear_env();
    char s[16];
    snprintf(s, sizeof s, "%d", procid);
    setenv("SLURM_PROCID", s, 1);
    setenv("SLURM_NTASKS", "5", 1);
    setenv("SLURM_STEP_NODELIST", "node[01-02],gpu7", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2),1", 1);
    setenv("SLURM_JOB_ID", "1234", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    snprintf(s, sizeof s, "%d", procid % 2 * (procid < 4));
    setenv("SLURM_LOCALID", s, 1);
    snprintf(s, sizeof s, "%d", procid / 2);
    setenv("SLURM_NODEID", s, 1);
}

TEST(slurm_collective_layout_and_ports)
{
    int base = 20000 + (1234 * 97) % 20000; /* the documented rule, step 0 */
    char want[512];
    snprintf(want, sizeof want, "node01:%d,node01:%d,node02:%d,node02:%d,gpu7:%d", base, base + 1, base, base + 1, base);
    for (int id = 0; id < 5; id++) {
        slurm_env(id);
        fleet_role *r = NULL;
        CHECK_OK(fleet_role_slurm(1, &r));
        CHECK(r->distributed && r->kind == FLEET_ROLE_WORKER && r->nservers == 0);
        CHECK_EQ_INT(r->worker_index, id);
        CHECK_EQ_INT(r->worker_num, 5);
        if (strcmp(eps(r, 0), want)) TFAIL("task %d: endpoints %s, expected %s", id, eps(r, 0), want);
        fleet_role_free(r);
    }
    /* a second step of the same job is 1009 ports further; FLEET_SLURM_PORT_BASE overrides */
    slurm_env(4);
    setenv("SLURM_STEP_ID", "1", 1);
    fleet_role *r = NULL;
    CHECK_OK(fleet_role_slurm(1, &r));
    snprintf(want, sizeof want, "gpu7:%d", 20000 + (1234 * 97 + 1009) % 20000);
    CHECK(!strcmp(r->workers[4], want));
    fleet_role_free(r);
    setenv("FLEET_SLURM_PORT_BASE", "31000", 1);
    CHECK_OK(fleet_role_slurm(1, &r));
    CHECK(!strcmp(eps(r, 0), "node01:31000,node01:31001,node02:31000,node02:31001,gpu7:31000"));
    fleet_role_free(r);
    /* the job's variables stand in for the step's; SLURM_LOCALID / SLURM_NODEID are optional */
    slurm_env(3);
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_STEP_TASKS_PER_NODE");
    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_NODEID");
    setenv("SLURM_JOB_NODELIST", "node[01-02],gpu7", 1);
    setenv("SLURM_TASKS_PER_NODE", "2(x2),1", 1);
    CHECK_OK(fleet_role_slurm(1, &r));
    CHECK_EQ_INT(r->worker_index, 3);
    snprintf(want, sizeof want, "node02:%d", base + 1);
    CHECK(!strcmp(r->workers[3], want));
    fleet_role_free(r);
    /* one task: a local run */
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_STEP_NODELIST", "n1", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "1", 1);
    setenv("SLURM_JOB_ID", "7", 1);
    CHECK_OK(fleet_role_slurm(1, &r));
    CHECK(!r->distributed && r->worker_num == 1);
    fleet_role_free(r);
    CHECK_OK(fleet_role_slurm(0, &r));
    CHECK(!r->distributed && r->nservers == 0);
    fleet_role_free(r);
}

TEST(slurm_parameter_server_layout)
{
    int base = 20000 + (1234 * 97) % 20000;
    for (int id = 0; id < 5; id++) {
        slurm_env(id);
        setenv("FLEET_SLURM_SERVERS", "2", 1);
        fleet_role *r = NULL;
        CHECK_OK(fleet_role_slurm(0, &r));
        CHECK(r->distributed);
        CHECK_EQ_INT(r->nservers, 2);
        CHECK_EQ_INT(r->worker_num, 3);
        CHECK_EQ_INT(r->kind, id < 2 ? FLEET_ROLE_SERVER : FLEET_ROLE_WORKER);
        CHECK_EQ_INT(id < 2 ? r->server_index : r->worker_index, id < 2 ? id : id - 2);
        char want[256];
        snprintf(want, sizeof want, "node01:%d,node01:%d", base, base + 1);
        CHECK(!strcmp(eps(r, 1), want));
        snprintf(want, sizeof want, "node02:%d,node02:%d,gpu7:%d", base, base + 1, base);
        CHECK(!strcmp(eps(r, 0), want));
        fleet_role_free(r);
    }
    /* without FLEET_SLURM_SERVERS a parameter-server program is refused, not run 5 times alone */
    slurm_env(1);
    fleet_role *r = NULL;
    CHECK_FAILS(fleet_role_slurm(0, &r), FL_EINVAL, "parameter-server program");
    CHECK_STR_HAS(fl_last_error(), "FLEET_SLURM_SERVERS=K");
    CHECK(r == NULL);
    setenv("FLEET_SLURM_SERVERS", "5", 1);
    CHECK_FAILS(fleet_role_slurm(0, &r), FL_EINVAL, "FLEET_SLURM_SERVERS='5' is invalid: expected an integer in [1, 4]");
    setenv("FLEET_SLURM_SERVERS", "0", 1);
    CHECK_FAILS(fleet_role_slurm(0, &r), FL_EINVAL, "FLEET_SLURM_SERVERS='0' is invalid");
}

static void expect_slurm_error(const char *sub)
{
    fleet_role *r = (fleet_role *)1;
    CHECK_FAILS(fleet_role_slurm(1, &r), FL_EINVAL, sub);
    CHECK(r == NULL);
}

TEST(slurm_errors)
{
    slurm_env(2);
    setenv("SLURM_PROCID", "5", 1);
    expect_slurm_error("SLURM_PROCID='5' is invalid: expected an integer in [0, 4]");
    slurm_env(2);
    unsetenv("SLURM_NTASKS");
    expect_slurm_error("SLURM_NTASKS is not set");
    slurm_env(2);
    unsetenv("SLURM_PROCID");
    expect_slurm_error("SLURM_PROCID is not set");
    slurm_env(2);
    setenv("SLURM_STEP_NODELIST", "node[01-02,gpu7", 1);
    expect_slurm_error("SLURM_STEP_NODELIST='node[01-02,gpu7' is malformed");
    slurm_env(2);
    setenv("SLURM_STEP_NODELIST", "node[01-04]", 1);
    expect_slurm_error("SLURM_STEP_TASKS_PER_NODE counts tasks for 3 nodes but SLURM_STEP_NODELIST lists 4");
    slurm_env(2);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2),2", 1);
    expect_slurm_error("SLURM_STEP_TASKS_PER_NODE adds up to 6 tasks but SLURM_NTASKS=5");
    slurm_env(2);
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2", 1);
    expect_slurm_error("SLURM_STEP_TASKS_PER_NODE='2(x2' is malformed");
    slurm_env(2);
    setenv("SLURM_LOCALID", "1", 1); /* cyclic distribution: task 2 would be local 1 of node01 */
    expect_slurm_error("--distribution=block");
    slurm_env(2);
    setenv("SLURM_NODEID", "0", 1);
    expect_slurm_error("SLURM_NODEID=0 but task 2 is on node 1 (node02)");
    slurm_env(2);
    unsetenv("SLURM_STEP_NODELIST");
    expect_slurm_error("SLURM_STEP_NODELIST is not set");
    slurm_env(2);
    unsetenv("SLURM_JOB_ID");
    expect_slurm_error("set FLEET_SLURM_PORT_BASE");
    slurm_env(2);
    setenv("FLEET_SLURM_PORT_BASE", "80", 1);
    expect_slurm_error("FLEET_SLURM_PORT_BASE='80' is invalid: expected an integer in [1024, 65534]");
    slurm_env(2);
    setenv("SLURM_JOB_ID", "12x", 1);
    expect_slurm_error("SLURM_JOB_ID='12x' is invalid");
}

/* Runs n forked ranks of `body`; each reports "<endpoints> <sum>" on one line through a pipe.
 * Returns the lines in out (n of them). */
typedef void (*rank_fn)(int rank, void *arg);
static void run_ranks(int n, rank_fn fn, void *arg, char out[][1024], int expect_ok)
{
    int fds[2];
    if (pipe(fds)) TFAIL("pipe failed");
    pid_t pids[8];
    for (int i = n - 1; i >= 0; i--) { /* the last ranks first: they must wait for rank 0 */
        fflush(NULL);
        if ((pids[i] = fork()) == 0) {
            close(fds[0]);
            dup2(fds[1], 1);
            fn(i, arg);
            fflush(stdout);
            _exit(0);
        }
        usleep(20000);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[1024];
    for (int i = 0; i < n; i++) out[i][0] = 0;
    while (fgets(line, sizeof line, f)) {
        int r = atoi(line);
        if (r >= 0 && r < n) snprintf(out[r], 1024, "%s", strchr(line, ' ') ? strchr(line, ' ') + 1 : "");
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        int ws = 0;
        waitpid(pids[i], &ws, 0);
        if (expect_ok && (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)) TFAIL("rank %d failed: %s", i, out[i]);
    }
}

/* A rank: fleet_init_collective(NULL) (so fleet_role_from_env), then sums rank + 1. */
static void allreduce_rank(int rank, void *arg)
{
    void (*set_env)(int) = (void (*)(int))arg;
    set_env(rank);
    fleet_t *f = fleet_init_collective(NULL, NULL);
    if (!f) {
        printf("%d ERROR %s\n", rank, fl_last_error());
        fflush(stdout);
        _exit(1);
    }
    double v = fleet_worker_index(f) + 1;
    int st = fleet_util_all_reduce(f, &v, 1, FL_FLOAT64, "sum");
    printf("%d %s %s %g\n", rank, st == FL_OK ? "OK" : "ERROR", fleet_worker_endpoints_str(f), v);
    if (st != FL_OK) printf("%d ERROR %s\n", rank, fl_last_error());
    fflush(stdout);
    fleet_free(f);
    _exit(st == FL_OK ? 0 : 1);
}

static int g_port;

static void slurm_live_env(int rank)
{
    clear_env();
    char s[16];
    snprintf(s, sizeof s, "%d", rank);
    setenv("SLURM_PROCID", s, 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_STEP_NODELIST", "127.0.0.[1-2]", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
    setenv("SLURM_JOB_ID", "99", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    snprintf(s, sizeof s, "%d", g_port);
    setenv("FLEET_SLURM_PORT_BASE", s, 1);
    setenv("FLEET_JOB_SECRET", SECRET, 1);
}

TEST(slurm_job_trains_over_its_endpoints)
{
    g_port = free_port();
    char out[2][1024];
    run_ranks(2, allreduce_rank, (void *)slurm_live_env, out, 1);
    char want[128];
    snprintf(want, sizeof want, "OK 127.0.0.1:%d,127.0.0.2:%d 3\n", g_port, g_port);
    for (int i = 0; i < 2; i++)
        if (strcmp(out[i], want)) TFAIL("rank %d said '%s', expected '%s'", i, out[i], want);
}

/* ---- torchrun / PyTorchJob ------------------------------------------------------------------- */

static void torch_env(int rank, int world, int lws)
{
    clear_env();
    char s[16];
    snprintf(s, sizeof s, "%d", rank);
    setenv("RANK", s, 1);
    snprintf(s, sizeof s, "%d", world);
    setenv("WORLD_SIZE", s, 1);
    if (lws) {
        snprintf(s, sizeof s, "%d", rank % lws);
        setenv("LOCAL_RANK", s, 1);
        snprintf(s, sizeof s, "%d", lws);
        setenv("LOCAL_WORLD_SIZE", s, 1);
    }
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
}

TEST(torchrun_layouts)
{
    fleet_role *r = NULL;
    torch_env(1, 2, 2); /* one node, two processes */
    CHECK_OK(fleet_role_torchrun(&r));
    CHECK(r->distributed && r->worker_index == 1 && r->worker_num == 2 && r->is_collective);
    CHECK(!strcmp(eps(r, 0), "127.0.0.1:29501,127.0.0.1:29502"));
    fleet_role_free(r);
    torch_env(0, 1, 0); /* a PyTorchJob of one pod */
    CHECK_OK(fleet_role_torchrun(&r));
    CHECK(!r->distributed && r->worker_num == 1);
    fleet_role_free(r);
    torch_env(3, 4, 2); /* two nodes named by FLEET_WORKER_HOSTS */
    setenv("FLEET_WORKER_HOSTS", "10.0.0.1,node-b", 1);
    CHECK_OK(fleet_role_torchrun(&r));
    CHECK_EQ_INT(r->worker_index, 3);
    CHECK(!strcmp(eps(r, 0), "10.0.0.1:29501,10.0.0.1:29502,node-b:29501,node-b:29502"));
    fleet_role_free(r);
    setenv("FLEET_TORCHRUN_PORT_BASE", "40000", 1);
    CHECK_OK(fleet_role_torchrun(&r));
    CHECK(!strcmp(eps(r, 0), "10.0.0.1:40000,10.0.0.1:40001,node-b:40000,node-b:40001"));
    fleet_role_free(r);
}

static void expect_torch_error(int st, const char *sub)
{
    fleet_role *r = (fleet_role *)1;
    CHECK_FAILS(fleet_role_torchrun(&r), st, sub);
    CHECK(r == NULL);
}

TEST(torchrun_errors)
{
    torch_env(0, 2, 2);
    unsetenv("WORLD_SIZE");
    expect_torch_error(FL_EINVAL, "environment variable WORLD_SIZE is not set");
    torch_env(2, 2, 0);
    expect_torch_error(FL_EINVAL, "RANK='2' is invalid: expected an integer in [0, 1]");
    torch_env(0, 2, 2);
    unsetenv("MASTER_ADDR");
    expect_torch_error(FL_EINVAL, "MASTER_ADDR is not set");
    torch_env(0, 2, 2);
    setenv("MASTER_PORT", "http", 1);
    expect_torch_error(FL_EINVAL, "MASTER_PORT='http' is invalid");
    torch_env(0, 2, 2);
    unsetenv("LOCAL_WORLD_SIZE");
    expect_torch_error(FL_EINVAL, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not");
    torch_env(1, 4, 2);
    setenv("LOCAL_RANK", "0", 1);
    expect_torch_error(FL_EINVAL, "LOCAL_RANK=0 but RANK=1 with LOCAL_WORLD_SIZE=2 gives 1");
    torch_env(1, 5, 2);
    expect_torch_error(FL_EINVAL, "WORLD_SIZE=5 is not a multiple of LOCAL_WORLD_SIZE=2");
    torch_env(1, 4, 2);
    setenv("FLEET_WORKER_HOSTS", "a,b,c", 1);
    expect_torch_error(FL_EINVAL, "FLEET_WORKER_HOSTS lists 3 hosts but WORLD_SIZE=4 / LOCAL_WORLD_SIZE=2 makes 2 nodes");
    setenv("FLEET_WORKER_HOSTS", "a,,b", 1);
    expect_torch_error(FL_EINVAL, "entry 1 is not a host");
    setenv("FLEET_WORKER_HOSTS", "a:1,b", 1);
    expect_torch_error(FL_EINVAL, "entry 0 is not a host");
    /* several nodes and no host list: the rendezvous needs the job secret */
    torch_env(1, 4, 2);
    expect_torch_error(FL_EINVAL, "export FLEET_JOB_SECRET");
    CHECK_STR_HAS(fl_last_error(), "FLEET_WORKER_HOSTS");
    /* a parameter-server program started by torchrun */
    torch_env(1, 2, 2);
    fleet_role *r = NULL;
    CHECK_FAILS(fleet_role_from_env(0, &r), FL_EINVAL, "parameter-server program");
    CHECK_STR_HAS(fl_last_error(), "torchrun and PyTorchJob start collective jobs only");
}

static void torch_live_env(int rank)
{
    torch_env(rank, 3, 0); /* three "nodes" of one process each: a rendezvous */
    char s[16];
    snprintf(s, sizeof s, "%d", g_port);
    setenv("FLEET_RENDEZVOUS_PORT", s, 1);
    setenv("FLEET_RENDEZVOUS_TIMEOUT_MS", "20000", 1);
    setenv("FLEET_JOB_SECRET", SECRET, 1);
}

TEST(torchrun_rendezvous_collects_every_endpoint)
{
    g_port = free_port();
    char out[3][1024];
    run_ranks(3, allreduce_rank, (void *)torch_live_env, out, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(!strncmp(out[i], "OK 127.0.0.1:", 13));
        CHECK_STR_HAS(out[i], " 6\n");
        if (strcmp(out[i], out[0])) TFAIL("rank %d got '%s' but rank 0 '%s'", i, out[i], out[0]);
    }
}

static void torch_short_env(int rank)
{
    torch_live_env(rank);
    setenv("FLEET_RENDEZVOUS_TIMEOUT_MS", "1500", 1);
    if (rank == 2) setenv("FLEET_JOB_SECRET", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100", 1);
}

static void role_only_rank(int rank, void *arg)
{
    ((void (*)(int))arg)(rank);
    fleet_role *r = NULL;
    int st = fleet_role_from_env(1, &r);
    printf("%d %s %s\n", rank, fl_strerror(st), st == FL_OK ? "" : fl_last_error());
    fflush(stdout);
    fleet_role_free(r);
    _exit(0);
}

TEST(torchrun_rendezvous_names_missing_ranks)
{
    g_port = free_port();
    char out[3][1024];
    double t0 = fl_net_deadline(0) * 1e-9;
    /* rank 2 has another job's secret: it is refused and rank 0 keeps waiting for rank 2 */
    run_ranks(3, role_only_rank, (void *)torch_short_env, out, 0);
    double el = fl_net_deadline(0) * 1e-9 - t0;
    CHECK_STR_HAS(out[0], "FL_ETIMEDOUT");
    CHECK_STR_HAS(out[0], "heard from 2 of 3 ranks");
    CHECK_STR_HAS(out[0], "missing ranks: 2");
    CHECK(strncmp(out[1], "FL_OK", 5) != 0);
    CHECK_STR_HAS(out[1], "rank 0");
    CHECK(strncmp(out[2], "FL_OK", 5) != 0);
    CHECK_STR_HAS(out[2], "cannot reach rank 0 at 127.0.0.1:");
    CHECK(el < 10);
    CHECK_STR_HAS(out[0], "chose the torchrun role maker");
}

/* 512 ranks on one host (threads): every rank gets the list, with 512 distinct endpoints.  Each
 * rank's listener used to be closed before its endpoint was sent, and the kernel handed the
 * freed port to the next rank: "endpoint ... appears twice" (in 3 runs of 5 with 64 ranks, in every run with 512). */
typedef struct {
    int rank, port, st;
    char **eps;
} rdzv_arg;

static void *rdzv_thread(void *p)
{
    rdzv_arg *a = p;
    fl_net_secret sec;
    a->st = fl_net_secret_from_hex(SECRET, "SECRET", &sec);
    if (a->st == FL_OK) a->st = fl__rdzv_endpoints("127.0.0.1", a->port, a->rank, 512, &sec, 30000, &a->eps);
    return NULL;
}

TEST(rendezvous_of_512_ranks_on_one_host)
{
    enum { N = 512 };
    rdzv_arg a[N];
    pthread_t th[N];
    /* each rank holds a connection and a listener, rank 0 a connection per rank: ~3 N descriptors */
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < 4 * N && rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < 4 * N ? rl.rlim_max : 4 * N;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    if (rl.rlim_cur < 3 * N + 64)
        TFAIL("RLIMIT_NOFILE %llu is below the %d descriptors of this case", (unsigned long long)rl.rlim_cur, 3 * N + 64);
    int port = free_port();
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setstacksize(&attr, 256 * 1024) == 0);
    for (int i = 0; i < N; i++) {
        a[i] = (rdzv_arg){i, port, -1, NULL};
        CHECK(pthread_create(&th[i], &attr, rdzv_thread, &a[i]) == 0);
    }
    pthread_attr_destroy(&attr);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        if (a[i].st != FL_OK) TFAIL("rank %d: %s", i, fl_strerror(a[i].st));
        for (int j = 0; j < N; j++) CHECK(!strcmp(a[i].eps[j], a[0].eps[j]));
    }
    for (int j = 0; j < N; j++)
        for (int k = 0; k < j; k++)
            if (!strcmp(a[0].eps[j], a[0].eps[k])) TFAIL("ranks %d and %d share %s", k, j, a[0].eps[j]);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) free(a[i].eps[j]);
        free(a[i].eps);
    }
}

/* ---- which launcher ------------------------------------------------------------------------ */

TEST(detection_order)
{
    fleet_role *r = NULL;
    /* Paddle's launcher wins over Slurm */
    slurm_env(1);
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171", 1);
    setenv("PADDLE_TRAINER_ID", "1", 1);
    CHECK_OK(fleet_role_from_env(1, &r));
    CHECK(r->nworkers == 2 && r->worker_index == 1 && !strcmp(r->workers[1], "127.0.0.1:6171"));
    fleet_role_free(r);
    /* torchrun inside an srun step wins over the step */
    slurm_env(1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("FLEET_WORKER_HOSTS", "h0,h1", 1);
    CHECK_OK(fleet_role_from_env(1, &r));
    CHECK(r->nworkers == 4 && r->worker_index == 3 && !strcmp(r->workers[3], "h1:29502"));
    fleet_role_free(r);
    /* an srun step */
    slurm_env(3);
    CHECK_OK(fleet_role_from_env(1, &r));
    CHECK(r->nworkers == 5 && r->worker_index == 3 && !strncmp(r->workers[3], "node02:", 7));
    fleet_role_free(r);
    /* a batch script without srun (no step) runs locally */
    slurm_env(0);
    unsetenv("SLURM_STEP_ID");
    CHECK_OK(fleet_role_from_env(1, &r));
    CHECK(!r->distributed && r->worker_num == 1);
    fleet_role_free(r);
    /* nothing set: one local worker, in both modes */
    clear_env();
    CHECK_OK(fleet_role_from_env(0, &r));
    CHECK(!r->distributed && r->kind == FLEET_ROLE_WORKER && r->nservers == 0);
    fleet_role_free(r);
    /* partial torchrun variables name what is missing and why torchrun was chosen */
    clear_env();
    setenv("RANK", "0", 1);
    CHECK_FAILS(fleet_role_from_env(1, &r), FL_EINVAL, "WORLD_SIZE is not set");
    CHECK_STR_HAS(fl_last_error(), "chose the torchrun role maker because RANK or WORLD_SIZE is set");
    CHECK(r == NULL);
    /* a Slurm error says Slurm was chosen */
    slurm_env(1);
    setenv("SLURM_STEP_NODELIST", "node[", 1);
    CHECK_FAILS(fleet_role_from_env(1, &r), FL_EINVAL, "SLURM_STEP_NODELIST='node[' is malformed");
    CHECK_STR_HAS(fl_last_error(), "chose the Slurm role maker because SLURM_PROCID and SLURM_STEP_ID are set");
}

#ifdef FL_HAVE_MPI
#define MPI_ST "ERROR FL_EINVAL" /* the MPI role maker runs, as a singleton, and sees the launcher's count */
#else
#define MPI_ST "ERROR FL_EUNSUPPORTED"
#endif

/* The first line role_job prints with the current environment.  MPI starts in that helper
 * process, not in this one: Open MPI keeps memory until exit that leak checkers report
 * (ASan: detect_leaks=0 there; valgrind does not follow the child). */
static const char *helper_line(const char *args)
{
    static char line[2048];
    char dir[1024], cmd[1200];
    th_tests_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd, "%s/bin/role_job %s 2>/dev/null", dir, args);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    FILE *p = popen(cmd, "r");
    line[0] = 0;
    if (!p) TFAIL("popen failed");
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    return line;
}

TEST(detection_of_mpi_launchers)
{
    clear_env();
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    const char *l = helper_line("env coll");
    CHECK_STR_HAS(l, MPI_ST);
    CHECK_STR_HAS(l, "because OMPI_COMM_WORLD_SIZE is set (Open MPI's mpirun)");
#ifdef FL_HAVE_MPI
    CHECK_STR_HAS(l, "MPI_COMM_WORLD has 1 rank but the launcher started OMPI_COMM_WORLD_SIZE=2 processes");
#else
    CHECK_STR_HAS(l, "built without MPI (install libopenmpi-dev and rebuild)");
#endif
    /* mpiexec inside a Slurm allocation: the step variables describe its proxies */
    slurm_env(1);
    setenv("PMI_SIZE", "4", 1);
    setenv("PMI_RANK", "1", 1);
    l = helper_line("env coll");
    CHECK_STR_HAS(l, MPI_ST);
    CHECK_STR_HAS(l, "because PMI_SIZE differs from SLURM_NTASKS");
    /* srun --mpi=pmi2 starting the tasks itself: Slurm */
    slurm_env(1);
    setenv("PMI_SIZE", "5", 1);
    fleet_role *r = NULL;
    CHECK_OK(fleet_role_from_env(1, &r));
    CHECK(r->nworkers == 5 && r->worker_index == 1);
    fleet_role_free(r);
}

/* A launch script of Paddle's (local_cluster.sh) sets Paddle's variables and starts the
 * processes itself, without a secret: the error names FLEET_JOB_SECRET and the line to add. */
TEST(paddle_launch_script_without_secret_names_the_line)
{
    clear_env();
    setenv("PADDLE_TRAINER_ID", "0", 1);
    setenv("PADDLE_TRAINERS_NUM", "2", 1);
    setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170,127.0.0.1:6171", 1);
    setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6170", 1);
    fleet_t *f = fleet_init_collective(NULL, NULL);
    CHECK(f != NULL); /* the ring, and so the secret, is made at the first collective */
    double v = 1;
    if (fleet_util_all_reduce(f, &v, 1, FL_FLOAT64, "sum") == FL_OK) TFAIL("two workers met without a job secret");
    const char *e = fl_last_error();
    if (!strstr(e, "needs the job secret") || !strstr(e, "FLEET_JOB_SECRET_FILE") ||
        !strstr(e, "export FLEET_JOB_SECRET=$(openssl rand -hex 32)"))
        TFAIL("the error does not give the line to add: %s", e);
    fleet_free(f);
    fl_net_secret sec;
    CHECK_FAILS(fl_net_secret_from_env(&sec), FL_ENOTFOUND, "export FLEET_JOB_SECRET=$(openssl rand -hex 32)");
    setenv("FLEET_JOB_SECRET", "0011", 1); /* still required and checked: too short */
    CHECK(fl_net_secret_from_env(&sec) != FL_OK);
    clear_env();
}

TEST_MAIN(T(hostlist_expands_slurm_syntax), T(hostlist_errors_name_the_variable_and_the_form), T(tasks_per_node),
          T(slurm_collective_layout_and_ports), T(slurm_parameter_server_layout), T(slurm_errors),
          T(slurm_job_trains_over_its_endpoints), T(torchrun_layouts), T(torchrun_errors),
          T(torchrun_rendezvous_collects_every_endpoint), T(torchrun_rendezvous_names_missing_ranks),
          T(rendezvous_of_512_ranks_on_one_host), T(detection_order), T(detection_of_mpi_launchers),
          T(paddle_launch_script_without_secret_names_the_line))
