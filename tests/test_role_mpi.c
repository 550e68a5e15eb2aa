/*
 * test_role_mpi.c - the MPI role maker under a real mpirun (Open MPI), with the helper
 * BUILD/tests/bin/role_job: the endpoints every rank learns carry an allreduce, the
 * parameter-server layout is MPISymetricRoleMaker's, MPI is finalised by Fleet only when
 * Fleet started it.  In a build without MPI the role maker must refuse clearly.
 *
 * mpirun runs as root here, in a container, oversubscribed: --allow-run-as-root,
 * --oversubscribe and the shared-memory transport without single-copy (no ptrace rights).
 * Open MPI keeps allocations until exit that LeakSanitizer would report, so the ranks run
 * with detect_leaks=0 (Fleet's own leaks are checked by every other test).
 */
#include "testhelp.h"

#define SECRET "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static char JOB[4096];

static void setup(void)
{
    char dir[4000];
    th_tests_dir(dir, sizeof dir);
    snprintf(JOB, sizeof JOB, "%s/bin/role_job", dir);
    if (access(JOB, X_OK)) TFAIL("%s is not built (make all)", JOB);
}

#ifdef FL_HAVE_MPI

/* Runs `mpirun -np n role_job args`; returns its output and sets *rc to its exit status. */
static char *mpirun(int n, const char *args, int *rc)
{
    setup();
    return th_mpirun(n, NULL, JOB, args, SECRET, 120, rc);
}

/* The "eps=" list of the line of rank r ("ROLE rank=R ..."), in buf. */
static const char *field(const char *out, int r, const char *name, char *buf, size_t cap)
{
    char key[32];
    snprintf(key, sizeof key, "ROLE rank=%d ", r);
    const char *l = strstr(out, key);
    if (!l) TFAIL("no line of rank %d in:\n%s", r, out);
    const char *f = strstr(l, name);
    if (!f) TFAIL("no %s in the line of rank %d", name, r);
    f += strlen(name);
    size_t n = strcspn(f, " \n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), f);
    return buf;
}

TEST(mpirun_collective_job_through_fleet_init)
{
    int rc;
    char *out = mpirun(2, "init coll allreduce", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    char a[512], b[512];
    CHECK_STR_HAS(out, "ROLE rank=0 kind=worker index=0 workers=2 servers=0 eps=127.0.0.1:");
    CHECK_STR_HAS(out, "ROLE rank=1 kind=worker index=1 workers=2 servers=0 eps=127.0.0.1:");
    CHECK(!strcmp(field(out, 0, "eps=", a, sizeof a), field(out, 1, "eps=", b, sizeof b)));
    CHECK_EQ_INT(th_count(out, "SUM 3\n"), 2);
    CHECK(!strstr(out, "ERROR"));
    free(out);
}

TEST(mpirun_parameter_server_is_mpi_symmetric)
{
    int rc;
    char *out = mpirun(4, "mpi ps allreduce", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    /* even ranks serve, odd ranks work, both indexed rank / 2 */
    CHECK_STR_HAS(out, "ROLE rank=0 kind=server index=0 workers=2 servers=2");
    CHECK_STR_HAS(out, "ROLE rank=1 kind=worker index=0 workers=2 servers=2");
    CHECK_STR_HAS(out, "ROLE rank=2 kind=server index=1 workers=2 servers=2");
    CHECK_STR_HAS(out, "ROLE rank=3 kind=worker index=1 workers=2 servers=2");
    char s0[512], s[512], w0[512], w[512];
    field(out, 0, "srv=", s0, sizeof s0);
    field(out, 0, "eps=", w0, sizeof w0);
    for (int r = 1; r < 4; r++) {
        CHECK(!strcmp(field(out, r, "srv=", s, sizeof s), s0));
        CHECK(!strcmp(field(out, r, "eps=", w, sizeof w), w0));
    }
    CHECK_EQ_INT(th_count(s0, "127.0.0.1:"), 2);
    CHECK_EQ_INT(th_count(out, "SUM 3\n"), 2); /* the two workers' allreduce over their endpoints */
    free(out);
}

TEST(mpirun_odd_parameter_server_job_is_refused)
{
    int rc;
    char *out = mpirun(3, "env ps", &rc);
    CHECK(rc != 0);
    CHECK_STR_HAS(
        out, "needs an even number of ranks, one server and one worker per node (even ranks serve), but mpirun started 3");
    CHECK_STR_HAS(out, "because OMPI_COMM_WORLD_SIZE is set");
    CHECK(!strstr(out, "ROLE "));
    free(out);
}

TEST(mpi_started_by_the_program_is_left_to_it)
{
    int rc;
    char *out = mpirun(2, "mpi coll allreduce userinit", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    CHECK_EQ_INT(th_count(out, "SUM 3\n"), 2);
    CHECK_EQ_INT(th_count(out, "USER MPI still usable"), 2);
    free(out);
}

TEST(mpi_started_by_fleet_is_finalised_once)
{
    int rc;
    /* after fleet_free, MPI is finalised: a second MPI role is a clear error */
    char *out = mpirun(2, "mpi coll again", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    CHECK_EQ_INT(th_count(out, "AGAIN FL_ESTATE fleet_role_mpi: MPI was already finalized"), 2);
    free(out);
    /* a fleet never freed: MPI is finalised at exit and mpirun sees a clean end */
    out = mpirun(2, "mpi coll allreduce keep", &rc);
    if (rc != 0) TFAIL("mpirun failed (%d):\n%s", rc, out);
    CHECK_EQ_INT(th_count(out, "SUM 3\n"), 2);
    CHECK(!strstr(out, "finalize"));
    free(out);
}

TEST_MAIN(T(mpirun_collective_job_through_fleet_init), T(mpirun_parameter_server_is_mpi_symmetric),
          T(mpirun_odd_parameter_server_job_is_refused), T(mpi_started_by_the_program_is_left_to_it),
          T(mpi_started_by_fleet_is_finalised_once))

#else

TEST(built_without_mpi_refuses_clearly)
{
    fleet_role *r = (fleet_role *)1;
    CHECK_FAILS(fleet_role_mpi(1, &r), FL_EUNSUPPORTED,
                "fleet_role_mpi: built without MPI (install libopenmpi-dev and rebuild)");
    CHECK(r == NULL);
    CHECK_FAILS(fleet_role_mpi(0, &r), FL_EUNSUPPORTED, "built without MPI");
    /* and a program started by mpirun says so at fleet_init instead of running alone */
    setup();
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s init coll", JOB);
    FILE *p = popen(cmd, "r");
    char line[2048] = "";
    if (!p || !fgets(line, sizeof line, p)) TFAIL("role_job printed nothing");
    CHECK(pclose(p) != 0);
    CHECK_STR_HAS(line, "ERROR FL_EUNSUPPORTED");
    CHECK_STR_HAS(line, "built without MPI (install libopenmpi-dev and rebuild)");
    CHECK_STR_HAS(line, "because OMPI_COMM_WORLD_SIZE is set");
}

TEST_MAIN(T(built_without_mpi_refuses_clearly))

#endif
