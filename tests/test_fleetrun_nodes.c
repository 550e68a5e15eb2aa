/*
 * test_fleetrun_nodes.c - fleetrun's restarts (--max_restart) and its jobs over several
 * nodes (--master / --nnodes), with two fleetruns on 127.0.0.1 and 127.0.0.2 standing for
 * two machines, on the helper program BUILD/tests/bin/fr_child.  Every wait has a deadline.
 */
#include "fleetrun_run.h"

TEST(restart_once_then_success)
{
    run_t r;
    setup(&r);
    start(&r, NULL,
          (const char *[]){"--max_restart", "2", "--nproc_per_node", "2", "--grace_s", "2", "@C", "say:up", "env:@T",
                           "await:@T:2", "w1=fail_first:3", "sleep:0.2", NULL});
    RUN_EXPECT(&r, 30, 0);
    HAS(&r, "rank:   1");
    HAS(&r, "exited with code 3");
    HAS(&r, "host:   127.0.0.1");
    HAS(&r, "restarting the job: restart 1 of 2");
    CHECK(!strstr(r.out, "restart 2 of 2"));
    for (int i = 0; i < 2; i++) {
        char tag[24], path[PATH_MAX];
        snprintf(tag, sizeof tag, "w%d", i);
        char *t = file_of(&r, tag, "env");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "1");
        free(t);
        snprintf(path, sizeof path, "%s/log/workerlog.%d", r.dir, i);
        char *log = slurp(path), *sep = log ? strstr(log, "fleetrun: restart 1 of at most 2") : NULL;
        if (!sep) TFAIL("%s has no restart line:\n%s", path, log ? log : "(missing)");
        char line[32];
        snprintf(line, sizeof line, "w%d: up\n", i);
        CHECK(strstr(log, line) < sep && strstr(sep, line)); /* appended: both runs are in the log */
        free(log);
    }
    no_descendants(5);
    cleanup(&r);
}

TEST(restart_exhausted_fails)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--max_restart", "1", "@C", "say:attempt", "exit:5", NULL});
    RUN_EXPECT(&r, 30, 1);
    HAS(&r, "restarting the job: restart 1 of 1");
    HAS(&r, "after the last restart");
    HAS(&r, "and 1 restart(s); exit status 1");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/log/workerlog.0", r.dir);
    char *log = slurp(path), *a = log ? strstr(log, "w0: attempt") : NULL;
    CHECK(a && strstr(a + 1, "w0: attempt") && !strstr(strstr(a + 1, "w0: attempt") + 1, "w0: attempt"));
    free(log);
    no_descendants(5);
    cleanup(&r);
}

/* Waits until every TAG.env in dir (w0..w{n-1}) exists with PADDLE_RESTART_COUNT=rc. */
static void wait_generation(run_t *r, const char *dir, int n, const char *rc, double timeout)
{
    double end = now() + timeout;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/w%d.env", dir, i);
        for (;;) {
            char *t = slurp(path);
            int ok = t && get(t, "PADDLE_RESTART_COUNT") && !strcmp(get(t, "PADDLE_RESTART_COUNT"), rc);
            free(t);
            if (ok) break;
            reap(r);
            if (now() > end) {
                load_out(r);
                TFAIL("%s with PADDLE_RESTART_COUNT=%s did not appear; fleetrun's output:\n%s", path, rc, r->out);
            }
            usleep(2000);
        }
    }
}

/* The restart time: from a SIGKILL to one process until every process runs again. */
TEST(restart_after_kill_timing)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--max_restart", "1", "--nproc_per_node", "2", "@C", "env:@T", "hang", NULL});
    wait_generation(&r, r.dir, 2, "0", 20);
    pid_t victim = pid_of(&r, "w1", "env");
    double t0 = now();
    kill(victim, SIGKILL);
    wait_generation(&r, r.dir, 2, "1", 20);
    fprintf(stderr, "  one node: SIGKILL to rank 1 -> both ranks running again: %.1f ms\n", (now() - t0) * 1e3);
    kill(r.pid, SIGTERM);
    RUN_EXPECT(&r, 30, 128 + SIGTERM);
    HAS(&r, "killed by signal SIGKILL");
    no_descendants(5);
    cleanup(&r);
}

/* ------------------------------------------------------------ several nodes: --master */

/* Starts node `ip` of a two-node job meeting at 127.0.0.1:port; the processes' steps follow
 * `extra` flags; "@S" in a step is the shared directory (node A's). */
static void start_node(run_t *r, const char *shared, int port, const char *ip, const char *const *extra,
                       const char *const *steps)
{
    const char *args[40];
    char master[32], *own[16];
    int n = 0, k = 0;
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    args[n++] = "--master", args[n++] = master, args[n++] = "--nnodes", args[n++] = "2";
    args[n++] = "--node_ip", args[n++] = ip, args[n++] = "--log_dir", args[n++] = "@T/log";
    for (; extra && *extra && n < 30; extra++) args[n++] = *extra;
    args[n++] = "@C";
    for (; *steps && n < 39 && k < 16; steps++) {
        const char *at = strstr(*steps, "@S");
        if (!at) {
            args[n++] = *steps;
            continue;
        }
        own[k] = malloc(strlen(*steps) + strlen(shared) + 1);
        sprintf(own[k], "%.*s%s%s", (int)(at - *steps), *steps, shared, at + 2);
        args[n++] = own[k++];
    }
    args[n] = NULL;
    start(r, (const char *[]){SECRET_ENV, NULL}, args);
    for (int i = 0; i < k; i++) free(own[i]);
}

TEST(master_two_nodes_collective)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", NULL};
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps); /* B first: it retries until the master listens */
    usleep(300000);
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    RUN_EXPECT(&a, 30, 0);
    RUN_EXPECT(&b, 30, 0);
    HAS(&a, "hosted by this node");
    HAS(&a, "0 of 2");
    HAS(&b, "1 of 2");
    HAS(&a, "every other node");
    char eps[4][64], all[512] = "", job[80] = "", *t = file_of(&a, "w0", "env");
    snprintf(all, sizeof all, "%s", get(t, "PADDLE_TRAINER_ENDPOINTS") ? get(t, "PADDLE_TRAINER_ENDPOINTS") : "");
    snprintf(job, sizeof job, "%s", get(t, "PADDLE_JOB_ID") ? get(t, "PADDLE_JOB_ID") : "");
    free(t);
    CHECK_EQ_INT(split(all, eps, 4), 4);
    for (int i = 0; i < 4; i++) {
        char tag[24], num[24];
        snprintf(tag, sizeof tag, "w%d", i);
        snprintf(num, sizeof num, "%d", i % 2);
        t = file_of(&a, tag, "env");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", eps[i]);
        CHECK_VAR(t, "PADDLE_RANK_IN_NODE", num);
        CHECK_VAR(t, "PADDLE_JOB_ID", job);
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "0");
        CHECK_VAR(t, "FLEET_JOB_SECRET", SECRET_ENV + strlen("FLEET_JOB_SECRET="));
        CHECK(!strncmp(eps[i], i < 2 ? "127.0.0.1:" : "127.0.0.2:", 10));
        free(t);
    }
    CHECK(!exists(&a, "w4.env"));
    CHECK(exists(&a, "log/workerlog.0") && exists(&a, "log/workerlog.1"));
    CHECK(exists(&b, "log/workerlog.2") && exists(&b, "log/workerlog.3") && !exists(&b, "log/workerlog.0"));
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_two_nodes_ps)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    /* Node A's workers finish at once, node B's after 1.5 s; the servers wait to be stopped,
     * which only happens --server_grace_s after the last worker of the whole job. */
    const char *extra[] = {"--server_num", "1", "--worker_num", "2", "--server_grace_s", "1", "--grace_s", "1", NULL};
    const char *steps[] = {"env:@S", "await:@S:6", "s*=hang", "w2=sleep:1.5", "w3=sleep:1.5", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 30, 0);
    RUN_EXPECT(&b, 30, 0);
    HAS(&a, "all workers of every node finished");
    HAS(&a, "did not exit within --server_grace_s=1 s");
    if (a.elapsed < 2.4)
        TFAIL("node A stopped its server %.2f s after the start, before node B's workers were done", a.elapsed);
    char sv[4][64], wv[4][64], *t = file_of(&a, "s0", "env");
    CHECK_EQ_INT(split(get(t, "PADDLE_PSERVERS_IP_PORT_LIST"), sv, 4), 2);
    CHECK_EQ_INT(split(get(t, "PADDLE_TRAINER_ENDPOINTS"), wv, 4), 4);
    CHECK(!strncmp(sv[0], "127.0.0.1:", 10) && !strncmp(sv[1], "127.0.0.2:", 10));
    free(t);
    static const char *const tags[] = {"s0", "s1", "w0", "w1", "w2", "w3"};
    for (int i = 0; i < 6; i++) {
        int srv = i < 2, k = srv ? i : i - 2;
        t = file_of(&a, tags[i], "env");
        CHECK_VAR(t, "TRAINING_ROLE", srv ? "PSERVER" : "TRAINER");
        CHECK_VAR(t, "PADDLE_TRAINERS_NUM", "4");
        CHECK_VAR(t, "PADDLE_CURRENT_ENDPOINT", srv ? sv[k] : wv[k]);
        CHECK_VAR(t, "POD_IP", (srv ? k : k / 2) ? "127.0.0.2" : "127.0.0.1");
        free(t);
    }
    CHECK(exists(&b, "log/serverlog.1") && exists(&b, "log/workerlog.3") && exists(&a, "log/serverlog.0"));
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_needs_secret)
{
    run_t r;
    setup(&r);
    start(&r, NULL, (const char *[]){"--master", "127.0.0.1:6170", "--nnodes", "2", "@C", NULL});
    RUN_EXPECT(&r, 20, 2);
    HAS(&r, "FLEET_JOB_SECRET ");
    HAS(&r, "FLEET_JOB_SECRET_FILE");
    HAS(&r, "only generate a fresh secret for a one-node job");
    CHECK(!exists(&r, "log"));
    cleanup(&r);
}

TEST(master_failure_stops_every_node)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--grace_s", "2", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", "w3=exit:3", "hang", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 30, 1);
    RUN_EXPECT(&b, 30, 1);
    if (a.elapsed > 10 || b.elapsed > 10) TFAIL("the job took %.1f s and %.1f s to stop", a.elapsed, b.elapsed);
    HAS(&b, "rank:   3");
    HAS(&b, "host:   127.0.0.2 (node 1 of 2)");
    HAS(&a, "worker 3 (pid ");
    HAS(&a, "on 127.0.0.2 exited with code 3");
    HAS(&a, "root cause");
    for (int i = 0; i < 4; i++) {
        char tag[24];
        snprintf(tag, sizeof tag, "w%d", i);
        CHECK(!alive(pid_of(&a, tag, "env")));
    }
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_restart_two_nodes)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--max_restart", "1", NULL};
    const char *steps[] = {"env:@S", "await:@S:4", "w3=fail_first:3", "sleep:0.3", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    RUN_EXPECT(&a, 40, 0);
    RUN_EXPECT(&b, 40, 0);
    HAS(&a, "the master restarts the job (restart 1 of 1)");
    HAS(&b, "restarting the job: restart 1 of 1");
    char all[512] = "", *t = file_of(&a, "w0", "env");
    snprintf(all, sizeof all, "%s", get(t, "PADDLE_TRAINER_ENDPOINTS"));
    free(t);
    for (int i = 0; i < 4; i++) {
        char tag[24];
        snprintf(tag, sizeof tag, "w%d", i);
        t = file_of(&a, tag, "env");
        CHECK_VAR(t, "PADDLE_RESTART_COUNT", "1");
        CHECK_VAR(t, "PADDLE_TRAINER_ENDPOINTS", all);
        free(t);
    }
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST(master_restart_after_kill_timing)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    const char *extra[] = {"--nproc_per_node", "2", "--max_restart", "1", NULL};
    const char *steps[] = {"env:@S", "hang", NULL};
    start_node(&a, a.dir, port, "127.0.0.1", extra, steps);
    start_node(&b, a.dir, port, "127.0.0.2", extra, steps);
    wait_generation(&a, a.dir, 4, "0", 30);
    double t0 = now();
    kill(pid_of(&a, "w3", "env"), SIGKILL);
    wait_generation(&a, a.dir, 4, "1", 30);
    fprintf(stderr, "  two nodes: SIGKILL to rank 3 -> all 4 ranks running again: %.1f ms\n", (now() - t0) * 1e3);
    kill(b.pid, SIGTERM); /* a signal to one node's fleetrun stops every node, with its status */
    RUN_EXPECT(&b, 30, 128 + SIGTERM);
    RUN_EXPECT(&a, 30, 128 + SIGTERM);
    HAS(&a, "fleetrun on 127.0.0.2 (node 1) received SIGTERM");
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

/* kill -9 of one node's fleetrun: its guard kills its processes, the master loses the node
 * and stops the others; then the same with the host (the master dies with it). */
TEST(master_node_or_host_killed)
{
    for (int host = 0; host < 2; host++) {
        run_t a, b;
        setup(&a), setup(&b);
        int port = th_free_port();
        const char *steps[] = {"env:@S", "hang", NULL};
        start_node(&a, a.dir, port, "127.0.0.1", (const char *[]){"--grace_s", "2", NULL}, steps);
        start_node(&b, a.dir, port, "127.0.0.2", (const char *[]){"--grace_s", "2", NULL}, steps);
        wait_generation(&a, a.dir, 2, "0", 30);
        run_t *dead = host ? &a : &b, *left = host ? &b : &a;
        kill(dead->pid, SIGKILL);
        RUN_EXPECT(dead, 30, 128 + SIGKILL);
        RUN_EXPECT(left, 30, 1);
        if (left->elapsed > 10) TFAIL("the other node took %.1f s to stop", left->elapsed);
        if (!host) HAS(left, "lost node 1 (127.0.0.2, ");
        /* The host's connection to its master closes as the host dies, a moment before the
         * master itself dies (PR_SET_PDEATHSIG): the node learns either. */
        else if (!strstr(left->out, "lost the master: the master at 127.0.0.1:") &&
                 !strstr(left->out, "lost node 0 (127.0.0.1, "))
            TFAIL("expected the node to report the lost master or host; output:\n%s", left->out);
        wait_gone(left, (pid_t[]){pid_of(&a, "w0", "env"), pid_of(&a, "w1", "env")}, 2, 5);
        no_descendants(5);
        cleanup(&a), cleanup(&b);
    }
}

TEST(master_unreachable_or_wrong_secret)
{
    run_t a, b;
    setup(&a), setup(&b);
    int port = th_free_port();
    char master[32];
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    start(&b, (const char *[]){SECRET_ENV, NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.2", "--rdzv_timeout_s", "1", "@C",
                           NULL});
    RUN_EXPECT(&b, 20, 1);
    HAS(&b, "cannot reach the master at");
    CHECK(!exists(&b, "log/workerlog.0"));
    /* a node with another secret is refused at the handshake; the master gives up waiting */
    start(&a, (const char *[]){SECRET_ENV, NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.1", "--rdzv_timeout_s", "2", "@C",
                           NULL});
    start(&b, (const char *[]){"FLEET_JOB_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", NULL},
          (const char *[]){"--master", master, "--nnodes", "2", "--node_ip", "127.0.0.2", "--rdzv_timeout_s", "2", "@C",
                           NULL});
    RUN_EXPECT(&b, 20, 1);
    HAS(&b, "authentication failed");
    RUN_EXPECT(&a, 20, 1);
    HAS(&a, "only 1 of 2 nodes joined within --rdzv_timeout_s=2 s");
    no_descendants(5);
    cleanup(&a), cleanup(&b);
}

TEST_MAIN(T(restart_once_then_success), T(restart_exhausted_fails), T(restart_after_kill_timing),
          T(master_two_nodes_collective), T(master_two_nodes_ps), T(master_needs_secret),
          T(master_failure_stops_every_node), T(master_restart_two_nodes), T(master_restart_after_kill_timing),
          T(master_node_or_host_killed), T(master_unreachable_or_wrong_secret))
