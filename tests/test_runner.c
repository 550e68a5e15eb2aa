/*
 * test_runner.c - the test runners cannot hide a gap: a case that cannot run here is
 * counted as skipped (never as passed) by the harness (testhelp.h TSKIP) and by
 * scripts/run-tests.sh, with its reason; the TSan suppressions of Hogwild training go to
 * the binaries named for them only; tests/cluster/run.sh fails when network
 * namespaces cannot be made unless the caller asks for skips (CLUSTER_ALLOW_SKIP=1).
 */
#include <fcntl.h>
#include <stddef.h>
#include <sys/stat.h>

#include "testhelp.h"

static char root_[4096], build_[4096];

/* Runs cmd through sh, its stdout and stderr into out (cap bytes, the head kept); returns
 * its exit status (128 + signal if killed). */
static int run(const char *cmd, char *out, size_t cap)
{
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) TFAIL("popen failed");
    size_t n = 0, k;
    while (n + 1 < cap && (k = fread(out + n, 1, cap - n - 1, p)) > 0) n += k;
    out[n] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Shows what a nested run printed, indented, so that its PASS / FAIL / SKIP lines are not
 * taken for this binary's own by scripts/run-tests.sh. */
static void show(const char *out)
{
    for (const char *l = out, *e; *l; l = e ? e + 1 : l + strlen(l)) {
        e = strchr(l, '\n');
        printf("  | %.*s\n", (int)(e ? e - l : (ptrdiff_t)strlen(l)), l);
    }
}

static void write_exe(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(text, f);
    CHECK(fclose(f) == 0);
    CHECK(chmod(path, 0755) == 0);
}

static void passes(void) {}
static void cannot_run_here(void) { TSKIP("no widget on this machine (install widget)"); }
static void fails(void) { TFAIL("a failure"); }

/* The harness: a case calling TSKIP prints "SKIP name: why", is counted as skipped and
 * not as passed, and the exit status stays 0 when nothing failed. */
TEST(harness_counts_a_skip_apart)
{
    char dir[64], path[96];
    th_mktemp(dir, sizeof dir, "fl_runner_out");
    snprintf(path, sizeof path, "%s/out", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    fflush(stdout);
    int saved = dup(1);
    CHECK(dup2(fd, 1) == 1);
    static const test_case cases[] = {T(passes), T(cannot_run_here)};
    char *argv[] = {"test_runner", NULL};
    int rc = th_run_cases(cases, 2, 1, argv);
    static const test_case failing[] = {T(cannot_run_here), T(fails)};
    int rc2 = th_run_cases(failing, 2, 1, argv);
    fflush(stdout);
    CHECK(dup2(saved, 1) == 1);
    close(saved);
    char out[4096];
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    close(fd);
    th_rmtree(dir);
    CHECK(n > 0);
    out[n] = 0;
    show(out);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(rc2, 1);
    CHECK_STR_HAS(out, "PASS passes\nSKIP cannot_run_here: no widget on this machine (install widget)\n"
                       "1 passed, 0 failed, 1 skipped\n");
    CHECK_STR_HAS(out, "0 passed, 1 failed, 1 skipped\n");
    CHECK(!strstr(out, "PASS cannot_run_here"));
}

/* scripts/run-tests.sh: skips are counted apart, listed with their reasons, and the last
 * line reads "N passed, N failed, N skipped". */
TEST(run_tests_sh_reports_skips_with_reasons)
{
    char dir[64], p[4200], cmd[9000], out[8192];
    th_mktemp(dir, sizeof dir, "fl_runner_");
    snprintf(p, sizeof p, "%s/tests", dir);
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/tests/test_a", dir);
    write_exe(p, "#!/bin/sh\necho 'PASS one'\necho 'SKIP two: no widget here'\necho '1 passed, 0 failed, 1 skipped'\n");
    snprintf(p, sizeof p, "%s/tests/test_b", dir);
    write_exe(p, "#!/bin/sh\necho 'PASS three'\necho '1 passed, 0 failed'\n"); /* an older binary's last line */
    snprintf(cmd, sizeof cmd,
             "env -u FLEET_TESTS -u FLEET_TEST_FILTER -u FLEET_TEST_WRAPPER '%s/scripts/run-tests.sh' '%s' 2>&1", root_,
             dir);
    int rc = run(cmd, out, sizeof out);
    show(out);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(out, "skipped:\n  test_a two: no widget here\n");
    const char *last = out + strlen(out);
    while (last > out && last[-1] == '\n') last--;
    while (last > out && last[-1] != '\n') last--;
    CHECK_STR_HAS(last, "2 passed, 0 failed, 1 skipped");
    CHECK(!strstr(out, "1 passed, 0 failed\n")); /* the binaries' own totals are not repeated */
    /* the Hogwild suppressions go to the binaries named in FLEET_TSAN_SUPP_TESTS only */
    snprintf(p, sizeof p, "%s/tests/test_a", dir);
    write_exe(p, "#!/bin/sh\necho \"  tsan: $TSAN_OPTIONS\"\necho 'PASS one'\n");
    snprintf(p, sizeof p, "%s/tests/test_b", dir);
    write_exe(p, "#!/bin/sh\necho \"  tsan: $TSAN_OPTIONS\"\necho 'PASS two'\n");
    snprintf(cmd, sizeof cmd,
             "env -u FLEET_TESTS -u FLEET_TEST_FILTER -u FLEET_TEST_WRAPPER TSAN_OPTIONS=halt_on_error=1 "
             "FLEET_TSAN_SUPP=/x/hogwild.supp FLEET_TSAN_SUPP_TESTS='test_a' '%s/scripts/run-tests.sh' '%s' 2>&1",
             root_, dir);
    rc = run(cmd, out, sizeof out);
    show(out);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_HAS(
        out, "== test_a\n  (TSan suppressions: /x/hogwild.supp)\n  tsan: halt_on_error=1:suppressions=/x/hogwild.supp\n");
    CHECK_STR_HAS(out, "== test_b\n  tsan: halt_on_error=1\n");
    th_rmtree(dir);
}

/* tests/cluster/run.sh where `ip netns add` is refused (a sandbox): a failure (exit 1) that
 * says why, unless CLUSTER_ALLOW_SKIP=1, which lists each job as skipped and exits 0. */
TEST(cluster_without_namespaces_fails_unless_skips_are_allowed)
{
    if (getuid() != 0) TSKIP("tests/cluster/run.sh needs root");
    if (system("command -v ip >/dev/null 2>&1") != 0) TSKIP("no 'ip' command (Debian package iproute2)");
    char dir[64], p[4200], cmd[9000], out[16384];
    th_mktemp(dir, sizeof dir, "fl_runner_");
    snprintf(p, sizeof p, "%s/ip", dir);
    write_exe(p, "#!/bin/sh\n"
                 "if [ \"$1\" = netns ] && [ \"$2\" = add ]; then\n"
                 "  echo 'mount --make-shared /run/netns failed: Operation not permitted' >&2; exit 1\n"
                 "fi\n"
                 "exec \"$REAL_IP\" \"$@\"\n");
    for (int allow = 0; allow < 2; allow++) {
        snprintf(cmd, sizeof cmd,
                 "REAL_IP=$(command -v ip) PATH='%s':$PATH CLUSTER_ID=runner$$ CLUSTER_JOBS='ps_ctr_async mpirun_smoke' "
                 "%s timeout 60 '%s/tests/cluster/run.sh' '%s' 2>&1",
                 dir, allow ? "CLUSTER_ALLOW_SKIP=1" : "", root_, build_);
        int rc = run(cmd, out, sizeof out);
        show(out);
        if (allow) {
            CHECK_EQ_INT(rc, 0);
            CHECK_STR_HAS(out, "SKIP ps_ctr_async: no network namespaces here");
            CHECK_STR_HAS(out, "0 passed, 0 failed, 2 skipped");
        } else {
            CHECK_EQ_INT(rc, 1);
            CHECK_STR_HAS(out, "FAIL bed: network namespaces cannot be made here");
            CHECK_STR_HAS(out, "CLUSTER_ALLOW_SKIP=1");
            CHECK_STR_HAS(out, "0 passed, 1 failed, 2 skipped");
        }
    }
    th_rmtree(dir);
}

int main(int argc, char **argv)
{
    th_build_dirs(build_, root_);
    static const test_case cases[] = {T(harness_counts_a_skip_apart), T(run_tests_sh_reports_skips_with_reasons),
                                      T(cluster_without_namespaces_fails_unless_skips_are_allowed)};
    return th_run_cases(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
