/*
 * test_layers.c - the layering of src/ (scripts/check-layers.py): no folder uses a folder
 * above it in the layer order, and no #include cycle, read off this build's objects.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testhelp.h"

/* Runs the checker on this build with extra arguments; returns its exit status and its
 * output in out. */
static int check(const char *extra, char *out, size_t cap)
{
    char build[4096], root[4096], cmd[9000];
    th_build_dirs(build, root);
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/check-layers.py' '%s' %s 2>&1", root, build, extra);
    FILE *p = popen(cmd, "r");
    if (!p) TFAIL("cannot run %s", cmd);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int ws = pclose(p);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

TEST(no_upward_dependency_and_no_include_cycle)
{
    static char out[1 << 16];
    int rc = check("", out, sizeof out);
    if (rc != 0) TFAIL("check-layers failed (status %d):\n%s", rc, out);
    CHECK_STR_HAS(out, "no upward dependency, no include cycle");
}

/* The check can fail: with models put at the bottom, its calls into graph are upward. */
TEST(an_upward_dependency_is_reported)
{
    static char out[1 << 16];
    int rc = check("--order models,base,tensor,graph,data,exec,io,net,ps,coll,fleet", out, sizeof out);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_HAS(out, "upward dependency: src/models uses src/graph");
}

TEST_MAIN(T(no_upward_dependency_and_no_include_cycle), T(an_upward_dependency_is_reported))
