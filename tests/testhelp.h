/*
 * testhelp.h - a small test harness.  Each test case runs in its own forked process with
 * a timeout (FLEET_TEST_TIMEOUT seconds, default 120); a case passes when it returns
 * normally.  Assertions print both operands and the location, then exit the child.
 *
 *   TEST(my_case) { CHECK_EQ_INT(1 + 1, 2); }
 *   TEST_MAIN(T(my_case), T(other_case))
 *
 * Run one case: ./test_x my_case.  Output: one "PASS name" / "FAIL name (why)" /
 * "SKIP name: why" line per case and a closing "N passed, N failed, N skipped" line; exit
 * status 1 if any failed.  A case that cannot run here (a tool or package missing) calls
 * TSKIP("why") instead of returning: it counts as skipped, never as passed.
 */
#ifndef FLEET_TESTHELP_H
#define FLEET_TESTHELP_H

#include <arpa/inet.h>
#include <errno.h>
#include <fleet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} test_case;

#define TEST(name) static void name(void)
/* clang-format off */
#define T(name) {#name, name}
/* clang-format on */

#define TFAIL(...)                                        \
    do {                                                  \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                     \
        fprintf(stderr, "\n");                            \
        fflush(stderr);                                   \
        _exit(1);                                         \
    } while (0)

/* The exit status of a skipped case's process, and the name of the case it runs. */
#define TH_SKIP_STATUS 77
static const char *th_case_name_ = "";

/* Skips the running case: prints "SKIP name: why" and ends its process. */
#define TSKIP(...)                          \
    do {                                    \
        printf("SKIP %s: ", th_case_name_); \
        printf(__VA_ARGS__);                \
        printf("\n");                       \
        fflush(stdout);                     \
        _exit(TH_SKIP_STATUS);              \
    } while (0)

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) TFAIL("CHECK(%s) failed (last error: %s)", #cond, fl_last_error()); \
    } while (0)
#define CHECK_OK(call)                                                                           \
    do {                                                                                         \
        int st_ = (call);                                                                        \
        if (st_ != FL_OK) TFAIL("%s returned %s: %s", #call, fl_strerror(st_), fl_last_error()); \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) TFAIL("%s == %s failed: %lld != %lld", #a, #b, a_, b_); \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                          \
    do {                                                                                               \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                                 \
        if (!(fabs(a_ - b_) <= t_)) TFAIL("|%s - %s| <= %g failed: %.9g vs %.9g", #a, #b, t_, a_, b_); \
    } while (0)
#define CHECK_STR_HAS(s, sub)                                                                   \
    do {                                                                                        \
        const char *s_ = (s), *u_ = (sub);                                                      \
        if (!s_ || !strstr(s_, u_)) TFAIL("expected \"%s\" in \"%s\"", u_, s_ ? s_ : "(null)"); \
    } while (0)
/* A call that must fail with status `st` and an error message containing `sub`. */
#define CHECK_FAILS(call, st, sub)                                                                                \
    do {                                                                                                          \
        int st_ = (call);                                                                                         \
        if (st_ != (st))                                                                                          \
            TFAIL("%s returned %s, expected %s (%s)", #call, fl_strerror(st_), fl_strerror(st), fl_last_error()); \
        CHECK_STR_HAS(fl_last_error(), sub);                                                                      \
    } while (0)

static inline int th_run_cases(const test_case *cases, int n, int argc, char **argv)
{
    int pass = 0, fail = 0, skip = 0;
    const char *to = getenv("FLEET_TEST_TIMEOUT");
    unsigned timeout = to && atoi(to) > 0 ? (unsigned)atoi(to) : 120;
    for (int i = 0; i < n; i++) {
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++) want |= !strcmp(argv[a], cases[i].name);
            if (!want) continue;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(timeout);
            th_case_name_ = cases[i].name;
            cases[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int ws = 0;
        if (pid < 0 || waitpid(pid, &ws, 0) < 0) {
            printf("FAIL %s (fork/wait failed)\n", cases[i].name);
            fail++;
            continue;
        }
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
            printf("PASS %s\n", cases[i].name);
            pass++;
        } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == TH_SKIP_STATUS) {
            skip++; /* the case printed its SKIP line */
        } else if (WIFSIGNALED(ws)) {
            printf("FAIL %s (%s%s)\n", cases[i].name, strsignal(WTERMSIG(ws)),
                   WTERMSIG(ws) == SIGALRM ? ": timed out" : "");
            fail++;
        } else {
            printf("FAIL %s (exit %d)\n", cases[i].name, WEXITSTATUS(ws));
            fail++;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", pass, fail, skip);
    return fail ? 1 : 0;
}

#define TEST_MAIN(...)                                                                    \
    int main(int argc, char **argv)                                                       \
    {                                                                                     \
        static const test_case cases_[] = {__VA_ARGS__};                                  \
        return th_run_cases(cases_, (int)(sizeof cases_ / sizeof cases_[0]), argc, argv); \
    }

/* The directory of the running test binary (BUILD/tests), for finding the tools,
 * examples and helper programs built beside it. */
static inline void th_tests_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) TFAIL("readlink /proc/self/exe failed");
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (slash) *slash = 0;
}

/* A fresh directory /tmp/<prefix>XXXXXX into dir (cap >= strlen(prefix) + 12); fails the test
 * when it cannot be made. th_rmtree removes it and all it holds. */
static inline void th_mktemp(char *dir, size_t cap, const char *prefix)
{
    if ((size_t)snprintf(dir, cap, "/tmp/%sXXXXXX", prefix) >= cap) TFAIL("th_mktemp: prefix '%s' too long", prefix);
    if (!mkdtemp(dir)) TFAIL("mkdtemp %s failed", dir);
}

static inline void th_rmtree(const char *dir)
{
    char cmd[4096 + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) TFAIL("%s failed", cmd);
}

/* Writes n bytes to path (a new or truncated file); fails the test on any error. */
static inline void th_write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) TFAIL("cannot create %s", path);
    if (fwrite(p, 1, n, f) != n || fclose(f) != 0) TFAIL("cannot write %s", path);
}

/* A free TCP port on 127.0.0.1, from the kernel: binds port 0, reads the port back and
 * closes the socket, so another process could still take it before the caller binds it.
 * Fails the test (or benchmark) when the kernel gives none. */
static inline int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l))
        TFAIL("no free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

/* n distinct free ports on 127.0.0.1 in ports[] (n <= 16): the sockets stay bound until all
 * n are known, so the kernel cannot hand the same port back twice, as n calls of
 * th_free_port() can (seen: "endpoint '127.0.0.1:44069' appears twice"). */
static inline void th_free_ports(int n, int *ports)
{
    int fds[16];
    if (n < 1 || n > 16) TFAIL("th_free_ports: n %d is not in [1, 16]", n);
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t l = sizeof a;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) || getsockname(fds[i], (struct sockaddr *)&a, &l))
            TFAIL("no free port: %s", strerror(errno));
        ports[i] = ntohs(a.sin_port);
    }
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* "127.0.0.1:P1,127.0.0.1:P2,..." of n distinct free ports (th_free_ports) into buf. */
static inline void th_free_endpoints(char *buf, size_t cap, int n)
{
    int ports[16];
    th_free_ports(n, ports);
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s127.0.0.1:%d", i ? "," : "", ports[i]);
}

/* Runs `mpirun -np n BIN ARGS` as this container needs it (root, oversubscribed, shared
 * memory between the ranks), with FLEET_JOB_SECRET = secret and the variables of env
 * ("K=V K=V", may be NULL) set here and exported to the ranks; returns its output
 * (malloc'ed) and sets *rc to its exit status.  Bounded by timeout_s. */
static inline char *th_mpirun(int n, const char *env, const char *bin, const char *args, const char *secret, int timeout_s,
                              int *rc)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0) TFAIL("mpirun not found: install openmpi-bin (make deps)");
    if (access(bin, X_OK)) TFAIL("%s is not built (make all)", bin);
    char xs[1024] = "";
    setenv("FLEET_JOB_SECRET", secret, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    size_t o = 0;
    if (env) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", env);
        for (char *sv, *t = strtok_r(tmp, " ", &sv); t; t = strtok_r(NULL, " ", &sv)) {
            char *eq = strchr(t, '=');
            if (!eq) TFAIL("bad env %s", t);
            *eq = 0;
            setenv(t, eq + 1, 1);
            o += (size_t)snprintf(xs + o, sizeof xs - o, " -x %s", t);
        }
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "timeout -k 5 %d mpirun --allow-run-as-root --oversubscribe --mca btl self,vader "
             "--mca btl_vader_single_copy_mechanism none -x FLEET_JOB_SECRET -x ASAN_OPTIONS%s -np %d %s %s 2>&1; "
             "echo \"EXIT=$?\"",
             timeout_s, xs, n, bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) TFAIL("popen failed");
    size_t cap = 1 << 16, len = 0, k;
    char *out = malloc(cap);
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0)
        if ((len += k) + 1 >= cap) out = realloc(out, cap *= 2);
    out[len] = 0;
    pclose(p);
    const char *e = strstr(out, "EXIT=");
    *rc = e ? atoi(e + 5) : -1;
    return out;
}

/* The environment of trainer `rank` of a collective job on the endpoints eps
 * ("127.0.0.1:P1,..."), as fleetrun gives it to a trainer: PADDLE_TRAINER_ID,
 * PADDLE_TRAINER_ENDPOINTS, a job secret, and FLEET_COLL_TIMEOUT_MS = timeout_ms. */
static inline void th_trainer_env(int rank, const char *eps, int timeout_ms)
{
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("PADDLE_TRAINER_ID", v, 1);
    setenv("PADDLE_TRAINER_ENDPOINTS", eps, 1);
    setenv("FLEET_JOB_SECRET", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    snprintf(v, sizeof v, "%d", timeout_ms);
    setenv("FLEET_COLL_TIMEOUT_MS", v, 1);
}

/* fork() for a child that must not outlive the test: every output stream flushed first (so
 * nothing is printed twice), then the child is killed with its parent (PR_SET_PDEATHSIG)
 * and, when alarm_s > 0, after alarm_s seconds.  Returns 0 in the child and its pid in the
 * parent; fails the test when fork fails. */
static inline pid_t th_fork(unsigned alarm_s)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) TFAIL("fork failed: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (alarm_s) alarm(alarm_s);
    }
    return pid;
}

/* How many ops of program p have the type `type`. */
static inline int th_count_ops(const fl_prog *p, const char *type)
{
    int n = 0;
    for (int i = 0; i < fl_prog_num_ops(p); i++) n += !strcmp(fl_prog_op_type(p, i), type);
    return n;
}

/* How many times sub occurs in s. */
static inline int th_count(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p++) n++;
    return n;
}

/* The build directory (ROOT/BUILD, above the running test binary) and the source tree
 * (ROOT), each into a buffer of 4096 bytes; either may be NULL. */
static inline void th_build_dirs(char *build, char *root)
{
    char dir[4096];
    th_tests_dir(dir, sizeof dir); /* ROOT/BUILD/tests */
    char *s = strrchr(dir, '/');
    if (!s) TFAIL("unexpected test path %s", dir);
    *s = 0;
    if (build) snprintf(build, 4096, "%s", dir);
    s = strrchr(dir, '/');
    if (!s) TFAIL("unexpected build path %s", dir);
    *s = 0;
    if (root) snprintf(root, 4096, "%s", dir);
}

/* Small helpers for building tensors in tests. */
static inline fl_tensor *th_f32(int ndim, const int64_t *shape, const float *data)
{
    return fl_tensor_from_data(FL_FLOAT32, ndim, shape, data);
}
static inline fl_tensor *th_i64(int ndim, const int64_t *shape, const int64_t *data)
{
    return fl_tensor_from_data(FL_INT64, ndim, shape, data);
}
/* Deterministic uniform values in [lo, hi). */
static inline void th_fill_uniform(float *x, int64_t n, float lo, float hi, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * ((float)(s >> 8) / 16777216.0f);
    }
}

/* libFuzzer harnesses, run briefly by the tests when clang with libFuzzer is installed.
 * th_fuzz_build compiles `sources` (repository paths and link flags, the harness first)
 * into dir/fuzz, dir being a fresh temporary directory written into dir[32]; it skips the
 * case (TSKIP) when clang or libFuzzer is missing.  th_fuzz_run runs it for
 * `seconds` on dir/corpus (created if absent) and fails the case with the log's tail if the
 * fuzzer finds anything; the directory is removed after a clean run. */
static inline int th_fuzz_build(char dir[32], const char *sources)
{
    if (system("command -v clang >/dev/null 2>&1") != 0) {
        TSKIP("clang not found; build the harness by hand (see its header)");
    }
    th_mktemp(dir, 32, "fl_fuzz");
    char cmd[2048];
    /* libFuzzer itself first: without it the harness is skipped; with it, a harness that
     * does not build is a failure (the library's sources changed under it) */
    snprintf(cmd, sizeof cmd,
             "printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return (int)(n && !d); }\\n' "
             ">%s/probe.c && clang -fsanitize=fuzzer %s/probe.c -o %s/probe >%s/probe.log 2>&1",
             dir, dir, dir, dir);
    if (system(cmd) != 0) {
        TSKIP("clang cannot build a libFuzzer binary here (see %s/probe.log)", dir);
    }
    snprintf(cmd, sizeof cmd,
             "clang -std=c11 -D_GNU_SOURCE -DFLEET_VERSION_STRING='\"fuzz\"' -g -O1 -fsanitize=fuzzer,address,undefined "
             "-Iinclude -Isrc %s -o %s/fuzz >%s/build.log 2>&1",
             sources, dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "tail -20 %s/build.log", dir);
        if (system(cmd) < 0) TFAIL("tail failed");
        TFAIL("the libFuzzer harness does not build (log: %s/build.log)", dir);
    }
    return 1;
}

static inline void th_fuzz_run(const char *dir, int seconds)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/corpus && %s/fuzz -max_total_time=%d -rss_limit_mb=1024 %s/corpus >%s/run.log 2>&1", dir, dir,
             seconds, dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "tail -30 %s/run.log", dir);
        if (system(cmd) < 0) TFAIL("tail failed");
        TFAIL("the fuzzer found a failure (log in %s/run.log)", dir);
    }
    snprintf(cmd, sizeof cmd, "grep -o 'Done [0-9]* runs' %s/run.log | sed 's/^/  fuzz: /'; rm -rf %s", dir, dir);
    if (system(cmd) < 0) TFAIL("cleanup failed");
}

#endif
