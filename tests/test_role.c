/*
 * test_role.c - the schedulers' role makers: Slurm's host-list and tasks-per-node syntax.
 */
#include "testhelp.h"

#include "fleet/role_internal.h"

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
    const char *bad[][2] = {{"2(x3", "N(xM) with a positive M"}, {"0", "positive task count"}, {"2,", "positive task count"},
                            {"x", "positive task count"}, {"2(x0)", "N(xM)"}, {"2;1", "',' was expected"},
                            {"", "is empty"}, {"1(x70000)", "more than 65536 nodes"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_FAILS(fl__slurm_tasks_per_node(bad[i][0], "environment variable SLURM_STEP_TASKS_PER_NODE", &v, &n), FL_EINVAL,
                    bad[i][1]);
        CHECK_STR_HAS(fl_last_error(), "SLURM_STEP_TASKS_PER_NODE");
        CHECK(v == NULL);
    }
}

TEST_MAIN(T(hostlist_expands_slurm_syntax), T(hostlist_errors_name_the_variable_and_the_form), T(tasks_per_node))
