/*
 * test_fleetrun.c - runs the fleetrun launcher (BUILD/tools/fleetrun) on the helper program
 * BUILD/tests/bin/fr_child (its steps are described in tests/bin/fr_child.c) and checks the
 * environment of every process, the logs, failure handling, teardown on signals, orphans
 * and the job secret.  Every case is a subreaper (PR_SET_CHILD_SUBREAPER), so processes
 * orphaned by fleetrun come back to it and "nothing is left" is checked with waitpid.
 * Everything runs on 127.0.0.x; every wait has a deadline.
 */
#include "fleetrun_run.h"

TEST(collective_env)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"FR_TEST_MARK=kept", "TRAINING_ROLE=PSERVER", NULL},
          (const char *[]){"--nproc_per_node", "3", "--log_dir", "@T/log", "@C", "env:@T", "bind", NULL});
    RUN_EXPECT(&r, 20, 0);
    char eps[8][64], secret[80] = "", *t0 = file_of(&r, "w0", "env"), all[512];
    snprintf(all, sizeof all, "%s", get(t0, "PADDLE_TRAINER_ENDPOINTS") ? get(t0, "PADDLE_TRAINER_ENDPOINTS") : "");
    free(t0);
    CHECK_EQ_INT(split(all, eps, 8), 3);
    for (int i = 0; i < 3; i++) {
        char tag[24], num[24];
        snprintf(tag, sizeof tag, "w%d", i);
        snprintf(num, sizeof num, "%d", i);
        char *t = file_of(&r, tag, "env");
        CHECK_VAR(t, "PADDLE_TRAINER_ID", num);
        CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "3");
        CHECK_VAR(t, "PADDLE_TRAINING_ROLE", "TRAINER");
        CHECK_VAR(t, "FR_TEST_MARK", "kept");
        CHECK_VAR(t, "GOMP_SPINCOUNT", "10000"); /* fleetrun's default */
        CHECK(!get(t, "OMP_WAIT_POLICY"));
        CHECK(!get(t, "TRAINING_ROLE") && !get(t, "FLAGS_selected_gpus") && !get(t, "PADDLE_PSERVERS_IP_PORT_LIST"));
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", eps[i]);
        const char *s = get(t, "FLEET_JOB_SECRET");
        if (!is_hex64(s)) TFAIL("rank %d: FLEET_JOB_SECRET is not 64 hex characters", i);
        if (i == 0) snprintf(secret, sizeof secret, "%s", s);
        CHECK(!strcmp(s, secret));
        free(t);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(!strncmp(eps[i], "127.0.0.1:", 10));
        int port = atoi(eps[i] + 10);
        CHECK(port > 0 && port < 65536);
        for (int k = 0; k < i; k++) CHECK(strcmp(eps[i], eps[k]) != 0);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(device_lists)
{
    static const char *const flags[][2] = {{"--gpus=0,2", NULL}, {"--devices", "5"}, {"--selected_gpus", "3,1,4"}};
    static const char *const want[][3] = {{"0", "2"}, {"5"}, {"3", "1", "4"}};
    static const int count[] = {2, 1, 3};
    for (int c = 0; c < 3; c++) {
        run_t r;
        setup(&r);
        const char *args[] = {flags[c][0], flags[c][1] ? flags[c][1] : "@C", flags[c][1] ? "@C" : "env:@T",
                              flags[c][1] ? "env:@T" : NULL, NULL};
        start(&r, (const char *[]){"FLEET_ALLOW_NO_DEVICES=1", NULL}, args);
        RUN_EXPECT(&r, 20, 0);
        for (int i = 0; i < count[c]; i++) {
            char tag[24], n[24];
            snprintf(tag, sizeof tag, "w%d", i);
            snprintf(n, sizeof n, "%d", count[c]);
            char *t = file_of(&r, tag, "env");
            CHECK_VAR(t, "FLAGS_selected_gpus", want[c][i]);
            CHECK_VAR(t, "PADDLE_TRAINERS_NUM", n);
            free(t);
        }
        char tag[24];
        snprintf(tag, sizeof tag, "w%d.env", count[c]);
        CHECK(!exists(&r, tag));
        cleanup(&r);
    }
}

TEST(logs_table_and_tee)
{
    run_t r;
    setup(&r);
    for (int run = 0; run < 2; run++) {
        start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "say:hello", NULL});
        RUN_EXPECT(&r, 20, 0);
    }
    HAS(&r, "Distributed Envs");
    HAS(&r, "collective");
    HAS(&r, "log_dir");
    HAS(&r, "w0: hello"); /* rank 0's output is shown */
    CHECK(!strstr(r.out, "w1: hello"));
    for (int i = 0; i < 2; i++) {
        char path[128], line[32];
        snprintf(path, sizeof path, "%s/log/workerlog.%d", r.dir, i);
        snprintf(line, sizeof line, "w%d: hello\n", i);
        char *log = slurp(path);
        if (!log) TFAIL("%s is missing", path);
        char *second = strstr(log, line); /* appended: both runs are there */
        CHECK(second && strstr(second + 1, line));
        free(log);
    }
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/log/endpoints.log", r.dir);
    char *eps = slurp(path), *w0 = file_of(&r, "w0", "env"), items[4][64];
    CHECK(eps != NULL);
    int n = split(get(w0, "PADDLE_TRAINER_ENDPOINTS"), items, 4);
    CHECK_EQ_INT(n, 2);
    snprintf(want, sizeof want, "PADDLE_TRAINER_ENDPOINTS: \n%s\n%s\n", items[0], items[1]);
    if (strcmp(eps, want)) TFAIL("endpoints.log is:\n%s\nexpected:\n%s", eps, want);
    free(eps), free(w0);
    no_descendants(5);
    cleanup(&r);
}

TEST(child_exit_code_stops_job)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "3", "--grace_s", "10", "@C", "env:@T", "await:@T:3", "w1=say:going down",
                           "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    pid_t p[3] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w2", "env")};
    char want[64];
    HAS(&r, "root cause");
    HAS(&r, "role:   worker");
    HAS(&r, "rank:   1");
    snprintf(want, sizeof want, "pid:    %d", (int)p[1]);
    HAS(&r, want);
    HAS(&r, "exited with code 3");
    HAS(&r, "log/workerlog.1");
    HAS(&r, "| w1: going down");
    CHECK(!alive(p[0]) && !alive(p[2])); /* reaped before fleetrun returned */
    if (r.elapsed >= 8) TFAIL("teardown took %.1f s although SIGTERM suffices", r.elapsed);
    no_descendants(5);
    cleanup(&r);
}

/* The root-cause block shows the failed process's error records, with their line numbers,
 * even far above the last 20 lines of its log. */
TEST(failure_summary_shows_error_lines)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"@C", "lines:40", "logerr:rendezvous timed out: rank 1 never arrived", "lines:100", "exit:1",
                           NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "last lines of log/workerlog.0");
    HAS(&r, "| 41: [fleet E worker:0 pid");
    HAS(&r, "rank 1 never arrived");
    HAS(&r, "last lines of log/workerlog.0");
    HAS(&r, "| w0: filler 99");
    CHECK(!strstr(r.out, "| w0: filler 79")); /* the tail is still the last 20 lines */
    cleanup(&r);
}

/* The first process to exit may only report another's failure ("another worker could not
 * save ... (see its log)"): a process that failed on its own while the job was stopping is
 * not "stopped by fleetrun", and its error lines are in the summary too. */
TEST(failure_summary_shows_every_own_failure)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "10", "@C", "w0=ignterm", "env:@T", "await:@T:2",
                           "w1=logerr:fleet_save_checkpoint: another worker could not save its part", "w1=exit:1",
                           "w0=sleep:0.5", "w0=logerr:cannot write '/ckpt/w/part-0': No space left on device", "w0=exit:1",
                           NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "rank:   1");
    HAS(&r, "other: worker 0 (pid ");
    HAS(&r, "exited with code 1: it failed on its own too");
    HAS(&r, "last lines of log/workerlog.0");
    HAS(&r, "No space left on device");
    CHECK(!strstr(r.out, "stopped by fleetrun"));
    cleanup(&r);
}

TEST(child_sigsegv_named)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "await:@T:2", "w1=sig:SEGV", "hang", NULL});
    RUN_EXPECT(&r, 30, 128 + SIGSEGV);
    HAS(&r, "rank:   1");
    HAS(&r, "killed by signal SIGSEGV");
    CHECK(!alive(pid_of(&r, "w0", "env")));
    no_descendants(5);
    cleanup(&r);
}

TEST(sigterm_ignored_gets_sigkill)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "w0=ignterm", "env:@T", "await:@T:2",
                           "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "did not exit within --grace_s=1 s");
    HAS(&r, "SIGKILLed by fleetrun");
    if (r.elapsed < 1.0 || r.elapsed > 6) TFAIL("took %.2f s with --grace_s 1", r.elapsed);
    CHECK(!alive(pid_of(&r, "w0", "env")));
    no_descendants(5);
    cleanup(&r);
}

static void signal_fleetrun(int sig, int ignterm)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "2", "@C", ignterm ? "ignterm" : "say:x", "env:@T",
                           "grandchild:@T", "hang", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
    pid_t p[4] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
    for (int i = 0; i < 4; i++) CHECK(alive(p[i]));
    kill(r.pid, sig);
    RUN_EXPECT(&r, 30, 128 + sig);
    wait_gone(&r, p, 4, sig == SIGKILL ? 5 : 0.01); /* after kill -9: PDEATHSIG and the guard */
    no_descendants(5);
    if (sig != SIGKILL) {
        char want[64];
        snprintf(want, sizeof want, "received SIG%s", sigabbrev_np(sig));
        HAS(&r, want);
    }
    cleanup(&r);
}

TEST(sigterm_to_fleetrun_stops_all) { signal_fleetrun(SIGTERM, 0); }
TEST(sigint_sighup_to_fleetrun_stop_all)
{
    signal_fleetrun(SIGINT, 0);
    signal_fleetrun(SIGHUP, 1);
}
TEST(kill9_fleetrun_leaves_nothing) { signal_fleetrun(SIGKILL, 1); }

/* The child of fleetrun named fleetrun-guard other than `not` (0 if none yet). */
static pid_t guard_of(const run_t *r, pid_t not )
{
    DIR *d = opendir("/proc");
    pid_t g = 0;
    for (struct dirent *e; d && !g && (e = readdir(d));) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%.16s/stat", e->d_name);
        char *st = isdigit((unsigned char)e->d_name[0]) ? slurp(path) : NULL, *rp = st ? strrchr(st, ')') : NULL;
        int ppid = 0;
        if (rp && strstr(st, "(fleetrun-guard)") && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == r->pid &&
            atoi(e->d_name) != not )
            g = atoi(e->d_name);
        free(st);
    }
    if (d) closedir(d);
    return g;
}

static pid_t wait_guard(run_t *r, pid_t not, double timeout)
{
    double end = now() + timeout;
    pid_t g;
    while (!(g = guard_of(r, not ))) {
        reap(r);
        if (r->done || now() > end) {
            load_out(r);
            TFAIL("no (new) fleetrun-guard child of fleetrun within %g s; output:\n%s", timeout, r->out);
        }
        usleep(5000);
    }
    return g;
}

/* kill -9 of the guard is noticed: a new guard takes over, so a kill -9 of fleetrun after it
 * still leaves nothing behind (grandchildren included); and the other order: fleetrun first,
 * then the guard once it has acted. */
TEST(guard_killed_then_fleetrun)
{
    for (int order = 0; order < 2; order++) {
        run_t r;
        setup(&r);
        start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "grandchild:@T", "hang", NULL});
        wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
        pid_t p[4] = {pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
        pid_t g = wait_guard(&r, 0, 10);
        if (order == 0) {
            CHECK_EQ_INT(kill(g, SIGKILL), 0);
            pid_t g2 = wait_guard(&r, g, 10);
            CHECK(g2 != g);
            for (int i = 0; i < 4; i++) CHECK(alive(p[i])); /* the job runs on */
            CHECK_EQ_INT(kill(r.pid, SIGKILL), 0);
            RUN_EXPECT(&r, 30, 128 + SIGKILL);
            HAS(&r, "warning: fleetrun's guard process");
            HAS(&r, "started a new one");
            wait_gone(&r, p, 4, 5);
        } else {
            CHECK_EQ_INT(kill(r.pid, SIGKILL), 0);
            RUN_EXPECT(&r, 30, 128 + SIGKILL);
            wait_gone(&r, p, 4, 5);
            kill(g, SIGKILL); /* most likely gone already: it exits once it has killed the job */
        }
        no_descendants(5);
        cleanup(&r);
    }
}

/* The guard killed while the job runs: the job goes on and succeeds; the last guard exits. */
TEST(guard_killed_job_goes_on)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "@C", "env:@T", "await:@T:3", "exit:0", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", NULL}, 20);
    pid_t g = wait_guard(&r, 0, 10);
    CHECK_EQ_INT(kill(g, SIGKILL), 0);
    wait_guard(&r, g, 10);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/x.env", r.dir); /* lets the workers' await end */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "started a new one (pid");
    HAS(&r, "watching 2 process group(s)");
    no_descendants(5);
    cleanup(&r);
}

TEST(grandchild_dies_with_group)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "ignterm", "env:@T", "grandchild:@T",
                           "await:@T:2", "w1=exit:3", "hang", NULL});
    RUN_EXPECT(&r, 30, 1);
    pid_t g[2] = {pid_of(&r, "w0", "gpid"), pid_of(&r, "w1", "gpid")};
    CHECK(!alive(g[0]) && !alive(g[1]));
    no_descendants(5);
    cleanup(&r);
    /* success, but a grandchild left running: fleetrun stops it */
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "--grace_s", "1", "@C", "env:@T", "w1=grandchild:@T", "exit:0", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "left behind");
    CHECK(!alive(pid_of(&r, "w1", "gpid")));
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_roles_and_env)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"OMP_WAIT_POLICY=active", NULL},
          (const char *[]){"--server_num", "2", "--worker_num", "3", "@C", "env:@T", "await:@T:5", "s*=sleep:0.3", NULL});
    RUN_EXPECT(&r, 30, 0);
    CHECK(!strstr(r.out, "warning"));
    char sv[4][64], wv[4][64], *w0 = file_of(&r, "w0", "env");
    CHECK_VAR(w0, "OMP_WAIT_POLICY", "active"); /* the user's choice, and no spin count of fleetrun's */
    CHECK(!get(w0, "GOMP_SPINCOUNT"));
    const char *secret = get(w0, "FLEET_JOB_SECRET");
    char sec[80];
    snprintf(sec, sizeof sec, "%s", secret ? secret : "");
    CHECK(is_hex64(sec));
    CHECK_EQ_INT(split(get(w0, "PADDLE_PSERVERS_IP_PORT_LIST"), sv, 4), 2);
    CHECK_EQ_INT(split(get(w0, "PADDLE_TRAINER_ENDPOINTS"), wv, 4), 3);
    free(w0);
    for (int i = 0; i < 5; i++) {
        int srv = i < 2, k = srv ? i : i - 2;
        char tag[24], num[24], log[128];
        snprintf(tag, sizeof tag, "%c%d", srv ? 's' : 'w', k);
        snprintf(num, sizeof num, "%d", k);
        snprintf(log, sizeof log, "log/%slog.%d", srv ? "server" : "worker", k);
        CHECK(exists(&r, log));
        char *t = file_of(&r, tag, "env"), port[16];
        const char *ep = srv ? sv[k] : wv[k];
        snprintf(port, sizeof port, "%s", strchr(ep, ':') + 1);
        CHECK_VAR(t, "TRAINING_ROLE", srv ? "PSERVER" : "TRAINER");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "3");
        CHECK_VAR(t, "PADDLE_PORT", port);
        CHECK_VAR(t, "POD_IP", "127.0.0.1");
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", ep);
        CHECK_VAR(t, "FLEET_JOB_SECRET", sec);
        if (srv) CHECK(get(t, "PADDLE_TRAINER_ID") == NULL);
        else CHECK_VAR(t, "PADDLE_TRAINER_ID", num);
        CHECK(get(t, "PADDLE_TRAINER_ENDPOINTS") && get(t, "PADDLE_PSERVERS_IP_PORT_LIST"));
        free(t);
    }
    CHECK(!exists(&r, "s2.env") && !exists(&r, "w3.env"));
    char path[128];
    snprintf(path, sizeof path, "%s/log/endpoints.log", r.dir);
    char *eps = slurp(path);
    CHECK(eps && strstr(eps, "PADDLE_PSERVERS_IP_PORT_LIST") && strstr(eps, sv[1]) && strstr(eps, wv[2]));
    free(eps);
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_servers_stopped_after_grace)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--server_num", "1", "--worker_num", "2", "--server_grace_s", "1", "--grace_s", "1", "@C",
                           "env:@T", "await:@T:3", "s*=hang", "exit:0", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "did not exit within --server_grace_s=1 s");
    HAS(&r, "server 0");
    if (r.elapsed < 1.0 || r.elapsed > 6) TFAIL("took %.2f s with --server_grace_s 1", r.elapsed);
    CHECK(!alive(pid_of(&r, "s0", "env")));
    no_descendants(5);
    cleanup(&r);
}

TEST(ps_failures)
{
    static const char *const step[] = {"w1=exit:4", "s1=exit:5"};
    static const char *const want[][3] = {{"role:   worker", "exited with code 4", "log/workerlog.1"},
                                          {"role:   server", "exited with code 5", "log/serverlog.1"}};
    for (int c = 0; c < 2; c++) {
        run_t r;
        setup(&r);
        start(&r, NULL,
              (const char *[]){"--server_num", "2", "--worker_num", "2", "@C", "env:@T", "await:@T:4", step[c], "hang",
                               NULL});
        RUN_EXPECT(&r, 30, 1);
        HAS(&r, "rank:   1");
        for (int k = 0; k < 3; k++) HAS(&r, want[c][k]);
        static const char *const tags[] = {"s0", "s1", "w0", "w1"};
        for (int k = 0; k < 4; k++) CHECK(!alive(pid_of(&r, tags[k], "env")));
        no_descendants(5);
        cleanup(&r);
    }
}

TEST(usage_errors_exit_2)
{
    static const struct {
        const char *args[8];
        const char *want;
    } cases[] = {
        {{"--bogus", "2", "@C", NULL}, "--bogus"},
        {{"--nproc_per_node", "2", NULL}, "no program"},
        {{NULL}, "no program"},
        {{"--nproc_per_node", "0", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", "abc", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node=-1", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", "2x", "@C", NULL}, "--nproc_per_node expects a positive integer"},
        {{"--nproc_per_node", NULL}, "--nproc_per_node expects a value"},
        {{"--grace_s", "-1", "@C", NULL}, "--grace_s expects"},
        {{"--gpus", "0,a", "@C", NULL}, "--gpus expects"},
        {{"--gpus", "0,1", "--nproc_per_node", "3", "@C", NULL}, "--nproc_per_node 3 does not match --gpus"},
        {{"--ips", "127.0.0.1,127.0.0.2", "@C", NULL}, "--node_ip"},
        {{"--ips", "1.2.3", "@C", NULL}, "--ips: '1.2.3' is not an IPv4 address"},
        {{"--servers", "127.0.0.1:99999", "@C", NULL}, "--servers expects"},
        {{"--server_num", "2", "--servers", "127.0.0.1", "@C", NULL}, "--server_num 2 does not match"},
        {{"--run_mode", "mpi", "@C", NULL}, "--run_mode"},
        {{"/nonexistent/prog", NULL}, "/nonexistent/prog"},
        {{"no-such-program-fr", NULL}, "not found in PATH"},
        {{"--nnodes", "2", "@C", NULL}, "--nnodes 2 needs --master"},
        {{"--nnodes", "2:4", "--master", "127.0.0.1:6170", "@C", NULL}, "elastic node ranges"},
        {{"--master", "127.0.0.1:6170", "--ips", "127.0.0.1", "--nnodes", "2", "@C", NULL}, "give one of them"},
        {{"--master", "etcd://127.0.0.1:2379", "--nnodes", "2", "@C", NULL}, "only IP:PORT"},
        {{"--master", "127.0.0.1", "--nnodes", "2", "@C", NULL}, "--master expects IP:PORT"},
        {{"--master", "127.0.0.1:70000", "--nnodes", "2", "@C", NULL}, "--master expects"},
        {{"--master", "127.0.0.1:6170", "--nnodes", "2", "--servers", "127.0.0.1", "@C", NULL}, "--server_num"},
        {{"--max_restart", "-1", "@C", NULL}, "--max_restart expects"},
        {{"--max_restart", "1", "--ips", "127.0.0.1,127.0.0.2", "--node_ip", "127.0.0.1", "@C", NULL}, "needs --master"},
        {{"--log_level", "loud", "@C", NULL}, "--log_level expects"},
        {{"--job_id", "a b", "@C", NULL}, "--job_id expects"},
        {{"--rdzv_timeout_s", "0", "@C", NULL}, "--rdzv_timeout_s"},
        {{"--elastic_server", "x", "@C", NULL}, "unknown flag '--elastic_server'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_t r;
        setup(&r);
        start(&r, NULL, cases[c].args);
        int rc = finish(&r, 20);
        if (rc != 2) TFAIL("case %zu: exit %d, expected 2; output:\n%s", c, rc, r.out);
        if (!strstr(r.out, cases[c].want)) TFAIL("case %zu: expected \"%s\" in:\n%s", c, cases[c].want, r.out);
        CHECK(!exists(&r, "log") && !exists(&r, "w0.env"));
        no_descendants(5);
        cleanup(&r);
    }
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--help", NULL});
    RUN_EXPECT(&r, 20, 0);
    HAS(&r, "--nproc_per_node");
    HAS(&r, "--max_restart");
    cleanup(&r);
}

/* Binary-safe search (cmdline and environ hold NULs). */
static int contains(const char *path, const char *needle)
{
    static char buf[1 << 20];
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memmem(buf, n, needle, strlen(needle)) != NULL;
}

/* The secret is on no argv (/proc/PID/cmdline), in no log and not in fleetrun's output or
 * in fleetrun's own environment. */
TEST(secret_never_leaks)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--nproc_per_node", "2", "@C", "say:started", "env:@T", "grandchild:@T", "hang", NULL});
    wait_files(&r, (const char *[]){"w0.env", "w1.env", "w0.gpid", "w1.gpid", NULL}, 20);
    char *t = file_of(&r, "w0", "env"), secret[80], path[64];
    snprintf(secret, sizeof secret, "%s", get(t, "FLEET_JOB_SECRET") ? get(t, "FLEET_JOB_SECRET") : "");
    free(t);
    CHECK(is_hex64(secret));
    pid_t pids[16] = {r.pid, pid_of(&r, "w0", "env"), pid_of(&r, "w1", "env"), pid_of(&r, "w0", "gpid"),
                      pid_of(&r, "w1", "gpid")};
    int n = 5;
    DIR *d = opendir("/proc"); /* every child of fleetrun, its guard included */
    for (struct dirent *e; d && (e = readdir(d)) && n < 16;) {
        snprintf(path, sizeof path, "/proc/%.16s/stat", e->d_name);
        char *st = isdigit((unsigned char)e->d_name[0]) ? slurp(path) : NULL, *rp = st ? strrchr(st, ')') : NULL;
        int ppid = 0;
        if (rp && sscanf(rp + 1, " %*c %d", &ppid) == 1 && ppid == r.pid) pids[n++] = atoi(e->d_name);
        free(st);
    }
    if (d) closedir(d);
    CHECK(n >= 6); /* two workers and the guard at least */
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pids[i]);
        if (contains(path, secret)) TFAIL("the secret is on the command line of pid %d", (int)pids[i]);
    }
    snprintf(path, sizeof path, "/proc/%d/environ", (int)r.pid);
    CHECK(!contains(path, secret));
    kill(r.pid, SIGTERM);
    RUN_EXPECT(&r, 30, 128 + SIGTERM);
    static const char *const files[] = {"out.txt", "log/workerlog.0", "log/workerlog.1", "log/endpoints.log"};
    for (int i = 0; i < 4; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", r.dir, files[i]);
        CHECK(access(p, F_OK) == 0);
        if (contains(p, secret)) TFAIL("the secret appears in %s", files[i]);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(secret_fresh_or_passed_through)
{
    static const char fixed[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char got[2][80], *t;
    run_t r;
    for (int i = 0; i < 2; i++) { /* a new secret each run */
        setup(&r);
        start(&r, NULL, (const char *[]){"@C", "env:@T", NULL});
        RUN_EXPECT(&r, 20, 0);
        t = file_of(&r, "w0", "env");
        snprintf(got[i], sizeof got[i], "%s", get(t, "FLEET_JOB_SECRET") ? get(t, "FLEET_JOB_SECRET") : "");
        free(t);
        CHECK(is_hex64(got[i]));
        cleanup(&r);
    }
    CHECK(strcmp(got[0], got[1]) != 0);
    setup(&r);
    start(&r, (const char *[]){"FLEET_JOB_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", NULL},
          (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    t = file_of(&r, "w0", "env");
    CHECK_VAR(t, "FLEET_JOB_SECRET", fixed);
    CHECK(!strstr(r.out, fixed));
    free(t);
    cleanup(&r);

    setup(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/secret", r.dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\n", fixed);
    fclose(f);
    chmod(path, 0600);
    start(&r, (const char *[]){"FLEET_JOB_SECRET_FILE=@T/secret", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    t = file_of(&r, "w0", "env");
    CHECK_VAR(t, "FLEET_JOB_SECRET_FILE", path);
    CHECK(!get(t, "FLEET_JOB_SECRET"));
    free(t);
    chmod(path, 0644);
    start(&r, (const char *[]){"FLEET_JOB_SECRET_FILE=@T/secret", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "job secret file");
    HAS(&r, "chmod 600");
    start(&r, (const char *[]){"FLEET_JOB_SECRET=c0ffee", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "environment variable FLEET_JOB_SECRET is invalid");
    CHECK(!strstr(r.out, "c0ffee"));
    no_descendants(5);
    cleanup(&r);
}

/* Two free ports P, P+1 on 127.0.0.2 (checked, not reserved: a small race, retried). */
static int free_pair(void)
{
    for (int tries = 0; tries < 50; tries++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t al = sizeof a;
        inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
        int f0 = socket(AF_INET, SOCK_STREAM, 0), f1 = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
        if (bind(f0, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(f0, (struct sockaddr *)&a, &al) == 0 &&
            ntohs(a.sin_port) < 65535) {
            a.sin_port = htons((uint16_t)(ntohs(a.sin_port) + 1));
            ok = bind(f1, (struct sockaddr *)&a, sizeof a) == 0;
        }
        close(f0), close(f1);
        if (ok) return ntohs(a.sin_port) - 1;
    }
    TFAIL("no free pair of ports on 127.0.0.2");
    return 0;
}

TEST(multinode_collective_starts_local_ranks)
{
    static const char fixed[] = "FLEET_JOB_SECRET=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
    char sport[16], eps[256], me[2][64];
    int P = free_pair();
    snprintf(sport, sizeof sport, "%d", P);
    snprintf(eps, sizeof eps, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.2:%d,127.0.0.2:%d", P, P + 1, P, P + 1);
    for (int variant = 0; variant < 2; variant++) { /* --node_ip, then POD_IP */
        run_t r;
        setup(&r);
        const char *env[] = {fixed, variant ? "POD_IP=127.0.0.2" : NULL, NULL};
        start(&r, env,
              (const char *[]){"--ips", "127.0.0.1,127.0.0.2", variant ? "--log_dir" : "--node_ip",
                               variant ? "log" : "127.0.0.2", "--start_port", sport, "--nproc_per_node", "2", "@C",
                               "env:@T", "bind", NULL});
        RUN_EXPECT(&r, 20, 0);
        CHECK(!exists(&r, "w0.env") && !exists(&r, "w1.env"));
        for (int i = 0; i < 2; i++) {
            char tag[24], num[24];
            snprintf(tag, sizeof tag, "w%d", 2 + i);
            snprintf(num, sizeof num, "%d", i);
            snprintf(me[i], sizeof me[i], "127.0.0.2:%d", P + i);
            char *t = file_of(&r, tag, "env");
            CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
            CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", eps);
            CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", me[i]);
            CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
            CHECK_VAR(t, "FLEET_JOB_SECRET", fixed + strlen("FLEET_JOB_SECRET="));
            free(t);
        }
        no_descendants(5);
        cleanup(&r);
    }
    run_t r; /* several machines need a shared secret */
    setup(&r);
    start(&r, NULL, (const char *[]){"--ips", "127.0.0.1,127.0.0.2", "--node_ip", "127.0.0.2", "@C", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "FLEET_JOB_SECRET");
    cleanup(&r);
}

TEST(port_in_use_reported)
{
    run_t r;
    setup(&r);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0);
    getsockname(fd, (struct sockaddr *)&a, &al);
    char ep[64], want[96];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", ntohs(a.sin_port));
    start(&r, NULL, (const char *[]){"--servers", ep, "--worker_num", "1", "@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 1);
    snprintf(want, sizeof want, "server 0 cannot have %s", ep);
    HAS(&r, want);
    HAS(&r, "already in use");
    CHECK(!exists(&r, "w0.env"));
    close(fd);
    no_descendants(5);
    cleanup(&r);
}

TEST(exec_failure_is_root_cause)
{
    run_t r;
    setup(&r);
    char path[128];
    snprintf(path, sizeof path, "%s/bad.sh", r.dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "#!/nonexistent/interpreter\n");
    fclose(f);
    chmod(path, 0755);
    start(&r, NULL, (const char *[]){"--nproc_per_node", "2", "./bad.sh", NULL});
    RUN_EXPECT(&r, 20, 1);
    HAS(&r, "exited with code 127");
    HAS(&r, "cannot execute");
    no_descendants(5);
    cleanup(&r);
}

/* ------------------------------------------------------------ identity, devices, version */

TEST(job_id_log_level_restart_count)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"FLEET_LOG_LEVEL=trace", NULL},
          (const char *[]){"--job_id", "exp-7.a_b", "--log_level", "INFO", "--nproc_per_node", "2", "@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    for (int i = 0; i < 2; i++) {
        char *t = file_of(&r, i ? "w1" : "w0", "env");
        CHECK_VAR(t, "PADDLE_JOB_ID", "exp-7.a_b");
        CHECK_VAR(t, "FLEET_LOG_LEVEL", "info");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "0");
        free(t);
    }
    /* without the flags: a fresh job id; FLEET_LOG_LEVEL is inherited */
    start(&r, (const char *[]){"FLEET_LOG_LEVEL=debug", NULL}, (const char *[]){"@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    char *t = file_of(&r, "w0", "env");
    const char *id = get(t, "PADDLE_JOB_ID");
    CHECK(id && !strncmp(id, "job-", 4) && strlen(id) == 16 && strspn(id + 4, "0123456789abcdef") == 12);
    CHECK_VAR(t, "FLEET_LOG_LEVEL", "debug");
    free(t);
    cleanup(&r);
}

/* The probe fleetrun documents: GPUs are there when the NVIDIA driver lists some or a
 * /dev/nvidiaN or /dev/kfd node exists. */
static int machine_has_devices(void)
{
    int found = access("/dev/kfd", F_OK) == 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; d && !found && (e = readdir(d));) found = e->d_name[0] != '.';
    if (d) closedir(d);
    d = opendir("/dev");
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = !strncmp(e->d_name, "nvidia", 6) && isdigit((unsigned char)e->d_name[6]);
    if (d) closedir(d);
    return found;
}

TEST(gpus_without_devices_refused)
{
    run_t r;
    setup(&r);
    start(&r, (const char *[]){"FLEET_ALLOW_NO_DEVICES=0", NULL}, (const char *[]){"--gpus", "0,1", "@C", "env:@T", NULL});
    if (machine_has_devices()) { /* then the ids are passed on */
        RUN_EXPECT(&r, 20, 0);
        fprintf(stderr, "  (this machine has GPUs: checked that --gpus is accepted instead)\n");
    } else {
        RUN_EXPECT(&r, 20, 2);
        HAS(&r, "--gpus 0,1: this machine has no GPU");
        HAS(&r, "FLEET_ALLOW_NO_DEVICES=0 asks for real devices");
        CHECK(!exists(&r, "w0.env") && !exists(&r, "log"));
    }
    cleanup(&r);
}

TEST(version_flag)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--version", NULL});
    RUN_EXPECT(&r, 20, 0);
    char self[PATH_MAX - 64], mk[PATH_MAX], want[64] = "";
    th_tests_dir(self, sizeof self);
    snprintf(mk, sizeof mk, "%s/../../Makefile", self); /* BUILD/tests -> the source tree */
    char *m = slurp(mk), *v = m ? strstr(m, "\nVERSION := ") : NULL;
    if (v) snprintf(want, sizeof want, "fleetrun %.*s\n", (int)strcspn(v + 12, "\n"), v + 12);
    free(m);
    if (*want && strcmp(r.out, want)) TFAIL("--version printed '%s', expected '%s'", r.out, want);
    int a, b, c;
    CHECK(sscanf(r.out, "fleetrun %d.%d.%d", &a, &b, &c) == 3);
    cleanup(&r);
}

/* --gpus on a machine without GPUs: one CPU process per id, FLAGS_selected_gpus = the local
 * rank, one info line; a mismatch with --nproc_per_node stays an error. */
TEST(gpus_without_devices_run_on_cpu)
{
    if (machine_has_devices()) {
        fprintf(stderr, "  (this machine has GPUs: the CPU fallback does not apply)\n");
        return;
    }
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--gpus", "2,5,7", "@C", "env:@T", NULL});
    RUN_EXPECT(&r, 20, 0);
    HAS(&r, "info: --gpus 2,5,7: no GPU on this machine");
    HAS(&r, "starting 3 CPU processes, FLAGS_selected_gpus = the local rank");
    const char *info = strstr(r.out, "no GPU on this machine");
    CHECK(info && !strstr(info + 1, "no GPU on this machine")); /* one line, not one per process */
    for (int i = 0; i < 3; i++) {
        char tag[24], num[24];
        snprintf(tag, sizeof tag, "w%d", i);
        snprintf(num, sizeof num, "%d", i);
        char *t = file_of(&r, tag, "env");
        CHECK_VAR(t, "FLAGS_selected_gpus", num);
        CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "3");
        free(t);
    }
    CHECK(!exists(&r, "w3.env"));
    cleanup(&r);
    setup(&r);
    start(&r, NULL, (const char *[]){"--gpus", "0,1", "--nproc_per_node", "3", "@C", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "--nproc_per_node 3 does not match --gpus 0,1");
    cleanup(&r);
}

/* ------------------------------------------------------------ restarts on one node */


TEST_MAIN(T(collective_env), T(device_lists), T(logs_table_and_tee), T(child_exit_code_stops_job),
          T(failure_summary_shows_error_lines), T(failure_summary_shows_every_own_failure), T(child_sigsegv_named),
          T(sigterm_ignored_gets_sigkill), T(sigterm_to_fleetrun_stops_all), T(sigint_sighup_to_fleetrun_stop_all),
          T(kill9_fleetrun_leaves_nothing), T(guard_killed_then_fleetrun), T(guard_killed_job_goes_on),
          T(grandchild_dies_with_group), T(ps_roles_and_env), T(ps_servers_stopped_after_grace), T(ps_failures),
          T(usage_errors_exit_2), T(secret_never_leaks), T(secret_fresh_or_passed_through),
          T(multinode_collective_starts_local_ranks), T(port_in_use_reported), T(exec_failure_is_root_cause),
          T(job_id_log_level_restart_count), T(gpus_without_devices_refused), T(version_flag),
          T(gpus_without_devices_run_on_cpu))
