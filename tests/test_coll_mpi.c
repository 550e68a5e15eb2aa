/*
 * test_coll_mpi.c - the "mpi" collective backend (src/coll/mpi.c) under a real mpirun (Open
 * MPI), with the helper BUILD/tests/bin/coll_mpi: the correctness suite of the other
 * backends on 3 and 2 ranks (also with counts split into pieces), mismatched calls, a late
 * rank timing out, the refusals (a subset of MPI_COMM_WORLD, a thread level below
 * MPI_THREAD_SERIALIZED, no mpirun at all), and a collective fleet job trained with
 * FLEET_COLL_BACKEND=mpi (tests/bin/role_job), whose losses equal the TCP backend's.  In a
 * build without MPI, naming the backend must be refused clearly.
 *
 * mpirun runs as root here, in a container, oversubscribed: the flags are those of
 * tests/test_role_mpi.c.  Open MPI keeps allocations until exit that LeakSanitizer would
 * report, so the ranks run with detect_leaks=0.
 */
#include "testhelp.h"
#include <fleet/coll.h>

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* Outside mpirun: the automatic choice never takes "mpi", and naming it is refused at once
 * (no connection is tried: rank 1 never comes). */
static void check_refusal(const char *want_status_text, int want_status)
{
    fl_net_listener *l = NULL;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", fl_net_listener_port(l));
    const char *eps[2] = {ep, "127.0.0.1:1"};
    fl_coll_opts o = {0};
    o.world_size = 2;
    o.endpoints = eps;
    o.insecure_local = 1;
    o.listener = l;
    o.timeout_ms = 5000;
    o.backend = "mpi";
    fl_coll *c = NULL;
    CHECK_FAILS(fl_coll_create(&o, &c), want_status,
                "the 'mpi' collective backend (from fl_coll_opts.backend) cannot be used: ");
    CHECK_STR_HAS(fl_last_error(), want_status_text);
    CHECK(c == NULL);
    o.backend = NULL;
    setenv("FLEET_COLL_BACKEND", "mpi", 1);
    CHECK_FAILS(fl_coll_create(&o, &c), want_status, "the 'mpi' collective backend (from FLEET_COLL_BACKEND)");
    CHECK_STR_HAS(fl_last_error(), want_status_text);
    o.world_size = 1; /* a named backend is checked with one rank too */
    CHECK_FAILS(fl_coll_create(&o, &c), want_status, want_status_text);
    unsetenv("FLEET_COLL_BACKEND");
    fl_net_listener_free(l);
}

#ifdef FL_HAVE_MPI

static char DIR_[4096];

/* Runs `mpirun -np n [-x VAR ...] prog args` with env ("A=1 B=2", may be NULL) exported;
 * returns its output and sets *rc to its exit status. */
static char *mpirun(int n, const char *env, const char *prog, const char *args, int *rc)
{
    th_tests_dir(DIR_, sizeof DIR_);
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/bin/%s", DIR_, prog);
    return th_mpirun(n, env, bin, args, SECRET, 150, rc);
}

/* Runs coll_mpi MODE on n ranks and expects every rank to print "OK MODE". */
static void expect_ok(int n, const char *env, const char *mode)
{
    int rc;
    char *out = mpirun(n, env, "coll_mpi", mode, &rc);
    char ok[64];
    snprintf(ok, sizeof ok, "OK %s rank=", mode);
    if (rc != 0 || th_count(out, ok) != n) TFAIL("coll_mpi %s on %d ranks failed (exit %d):\n%s", mode, n, rc, out);
    fprintf(stderr, "%s", out);
    free(out);
}

TEST(suite_on_3_ranks) { expect_ok(3, NULL, "suite"); }

TEST(suite_on_2_ranks_named_in_the_environment) { expect_ok(2, "FLEET_COLL_BACKEND=mpi", "suite"); }

TEST(mismatched_calls_fail_on_every_rank)
{
    expect_ok(3, NULL, "mismatch");
    expect_ok(2, NULL, "mismatch");
}

TEST(late_rank_times_out_and_mpirun_ends) { expect_ok(3, NULL, "timeout"); }

TEST(refusals_under_mpirun)
{
    expect_ok(3, NULL, "subset");
    expect_ok(2, NULL, "single");
}

TEST(refused_outside_mpirun) { check_refusal("MPI is not initialised: the job was not started by mpirun", FL_ESTATE); }

/* The losses of "TRAIN rank=R loss=<hex>" lines, concatenated in rank order. */
static void losses(const char *out, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int r = 0; r < 2; r++) {
        char key[32];
        snprintf(key, sizeof key, "TRAIN rank=%d loss=", r);
        const char *l = strstr(out, key);
        if (!l) TFAIL("no %s in:\n%s", key, out);
        l += strlen(key);
        o += (size_t)snprintf(buf + o, cap - o, "%.*s ", (int)strcspn(l, "\n"), l);
    }
}

TEST(fleet_collective_training_with_the_mpi_backend)
{
    int rc;
    char *out = mpirun(2, "FLEET_COLL_BACKEND=mpi FLEET_LOG_LEVEL=info FLEET_LOG_SUBSYS=coll", "role_job",
                       "init coll allreduce train", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    CHECK_EQ_INT(th_count(out, "SUM 3\n"), 2);
    CHECK_EQ_INT(th_count(out, "(backend mpi, named)"), 2);
    char a[256], b[256];
    losses(out, a, sizeof a);
    free(out);
    /* the same job over TCP trains to the same bits (2 ranks: each sum has one rounding) */
    out = mpirun(2, "FLEET_COLL_BACKEND=tcp FLEET_LOG_LEVEL=info FLEET_LOG_SUBSYS=coll", "role_job",
                 "init coll allreduce train", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    CHECK_EQ_INT(th_count(out, "(backend tcp, named)"), 2);
    losses(out, b, sizeof b);
    fprintf(stderr, "  losses mpi: %s\n  losses tcp: %s\n", a, b);
    if (strcmp(a, b)) TFAIL("the mpi backend trained to %s, tcp to %s", a, b);
    free(out);
}

TEST(parameter_server_workers_are_refused)
{
    int rc;
    char *out = mpirun(4, "FLEET_COLL_BACKEND=mpi", "role_job", "mpi ps allreduce", &rc);
    CHECK(rc != 0);
    CHECK_STR_HAS(out, "this communicator has 2 ranks, MPI_COMM_WORLD 4");
    CHECK_STR_HAS(out, "a parameter-server job's workers cannot use the mpi backend");
    free(out);
}

TEST_MAIN(T(suite_on_3_ranks), T(suite_on_2_ranks_named_in_the_environment), T(mismatched_calls_fail_on_every_rank),
          T(late_rank_times_out_and_mpirun_ends), T(refusals_under_mpirun), T(refused_outside_mpirun),
          T(fleet_collective_training_with_the_mpi_backend), T(parameter_server_workers_are_refused))

#else

TEST(built_without_mpi_refuses_clearly)
{
    check_refusal("built without MPI (install libopenmpi-dev and rebuild)", FL_EUNSUPPORTED);
}

TEST_MAIN(T(built_without_mpi_refuses_clearly))

#endif
