/*
 * test_python.c - the Python package (python/, fleet_c) under pytest: tests/python/run.sh
 * makes a virtual environment once per build directory (BUILD/pyenv: NumPy and pytest from
 * PyPI, then `pip install ./python`), and runs tests/python/ in it against this build's
 * libfleet.so: the seeds' programs with only their imports changed (locally, under
 * fleetrun with parameter servers and collectively) and the API's cases.  No environment,
 * no pytest: the case fails with run.sh's message (it never skips silently).
 *
 * A sanitizer build is the one exception, said on a SKIP line: its libfleet.so needs the
 * sanitizer's runtime loaded first, which a Python interpreter does not do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testhelp.h"

static char root[4096], build[4096];

static void find_dirs(void) { th_build_dirs(build, root); }

/* Runs cmd; its output, indented, into out (the tail when long).  Returns the exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
    char full[9000];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) TFAIL("popen failed: %s", cmd);
    size_t n = 0;
    char line[4096];
    out[0] = 0;
    while (fgets(line, sizeof line, p)) {
        size_t k = strlen(line);
        if (n + k + 3 >= cap) { /* keep the tail: drop the first half */
            size_t half = n / 2;
            memmove(out, out + half, n - half + 1);
            n -= half;
        }
        if (n + k + 3 < cap) {
            memcpy(out + n, "  ", 2);
            memcpy(out + n + 2, line, k + 1);
            n += k + 2;
        }
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Skips the case in a sanitizer build. */
static void skip_in_sanitizer_build(void)
{
    char cmd[4200], out[512];
    snprintf(cmd, sizeof cmd, "grep -o -- '-fsanitize=[^ ]*' '%s/.flags' | head -1", build);
    run(cmd, out, sizeof out);
    if (out[0]) TSKIP("%s is a sanitizer build (%s); the Python package is tested with `make test`", build, out + 2);
}

TEST(pytest_of_the_package_and_the_seed_programs)
{
    alarm(600); /* the first run makes the virtual environment (downloads from PyPI) */
    find_dirs();
    skip_in_sanitizer_build();
    static char out[1 << 16];
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s/tests/python/run.sh' '%s'", root, build);
    int rc = run(cmd, out, sizeof out);
    fputs(out, stdout);
    if (rc != 0) TFAIL("tests/python/run.sh %s exited with %d (its output is above)", build, rc);
    CHECK_STR_HAS(out, " passed");
}

/* The environment is made once per build directory: a second run reuses it. */
TEST(venv_is_made_once_per_build_dir)
{
    alarm(600);
    find_dirs();
    skip_in_sanitizer_build();
    char cmd[9000], out[8192], before[256], after[256];
    snprintf(cmd, sizeof cmd, "'%s/tests/python/run.sh' '%s' --venv-only", root, build);
    if (run(cmd, out, sizeof out) != 0) TFAIL("run.sh --venv-only failed:\n%s", out);
    snprintf(cmd, sizeof cmd, "cat '%s/pyenv/.fleet-created'", build);
    if (run(cmd, before, sizeof before) != 0) TFAIL("%s/pyenv/.fleet-created is missing", build);
    snprintf(cmd, sizeof cmd, "'%s/tests/python/run.sh' '%s' --venv-only", root, build);
    if (run(cmd, out, sizeof out) != 0) TFAIL("run.sh --venv-only failed:\n%s", out);
    CHECK_STR_HAS(out, "venv: reusing");
    if (strstr(out, "venv: created")) TFAIL("the environment was made again:\n%s", out);
    snprintf(cmd, sizeof cmd, "cat '%s/pyenv/.fleet-created'", build);
    if (run(cmd, after, sizeof after) != 0 || strcmp(before, after)) TFAIL("the environment's creation record changed");
}

TEST_MAIN(T(pytest_of_the_package_and_the_seed_programs), T(venv_is_made_once_per_build_dir))
