/*
 * master.c - the rendezvous master: a child process of the fleetrun whose node owns the
 * --master address (rendezvous.c forks it).  It never starts a training process; it only
 * meets the nodes and relays their news.
 *
 *   JOINING  accept connections (generation 0 only) and wait for JOIN(gen) from all
 *            --nnodes nodes, at most --rdzv_timeout_s; then (generation 0) order the nodes:
 *            by IPv4 address, then by node id; a node's rank is its position.  Send LAYOUT.
 *   RUNNING  FAILED(gen) from a node: RESTART(gen + 1) to every node while restarts are
 *            left (and the failure was a process's, not a signal to fleetrun), else STOP
 *            with the failed node's exit status.  STATUS: when every node's workers are
 *            done, WORKERS_DONE; when every node is done, END.
 *   ENDING   the last word went out; wait up to 5 s for the nodes to close, then exit.
 *
 * A node that closes its connection, sends garbage, or is silent for FR_SILENT_S before the
 * end is lost, and the job stops (STOP, status 1) on every other node.  Messages of an older
 * generation are ignored (a node may report a failure that the restart itself caused).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleetrun.h"

enum { M_JOINING, M_RUNNING, M_ENDING };
#define END_WAIT_S 5.0

typedef struct {
    fl_net_conn *c; /* NULL once closed */
    fr_node nd;
    int joined; /* the generation of its last JOIN, -1 before its first */
    int rank;   /* from the first LAYOUT on */
    int workers_done, done;
    double rx, tx; /* when it last sent us something, when we last sent it something */
} mnode;

static struct {
    fl_net_listener *l;
    fl_net_acceptor *acc; /* handshakes run concurrently: a stranger cannot hold the door */
    uint64_t refused;     /* handshakes refused so far (logged as they come) */
    fl_net_auth auth;
    mnode n[MAX_NODES];   /* in the order they connected */
    int order[MAX_NODES]; /* rank -> index in n */
    int nn, gen, restarts, phase, told_workers;
    double since; /* start of the phase */
} M;

#define say(...) cli_say("master: " __VA_ARGS__)

static const char *name_of(const mnode *x, char *b, size_t n)
{
    if (x->joined < 0) snprintf(b, n, "a node at %s", fl_net_conn_addr(x->c));
    else if (M.gen || M.phase != M_JOINING) snprintf(b, n, "node %d (%s, %s)", x->rank, x->nd.ip, x->nd.id);
    else snprintf(b, n, "node %s (%s)", x->nd.ip, x->nd.id);
    return b;
}

static void close_node(mnode *x)
{
    fl_net_conn_free(x->c);
    x->c = NULL;
}

static void end_job(int type, int code, const char *what);

static void lost(mnode *x, const char *why)
{
    char who[256], what[1024];
    if (!x->c) return;
    name_of(x, who, sizeof who);
    close_node(x);
    if (M.phase == M_ENDING) return;
    snprintf(what, sizeof what, "lost %s: %s", who, why);
    say("%s; stopping the job on every node", what);
    end_job(FR_MSG_STOP, 1, what);
}

static void send_to(mnode *x, int type, const fl_buf *b)
{
    if (!x->c) return;
    if (fr_msg_send(x->c, type, b) == FL_OK) x->tx = fr_now();
    else lost(x, fl_last_error());
}

static void broadcast(int type, const fl_buf *b)
{
    for (int i = 0; i < M.nn; i++) send_to(&M.n[i], type, b);
}

/* The last word: STOP (a failure), ERROR (the rendezvous failed) or END (success). */
static void end_job(int type, int code, const char *what)
{
    fl_buf b = {0};
    if (M.phase == M_ENDING) return;
    M.phase = M_ENDING, M.since = fr_now();
    fl__buf_printf(&b, "{\"gen\":%d,\"code\":%d,\"what\":", M.gen, code);
    fl__json_quote(&b, what);
    fl__buf_printf(&b, "}");
    broadcast(type, &b);
    fl__buf_free(&b);
}

static void send_layout(void)
{
    fl_buf b = {0};
    fl__buf_printf(&b, "{\"gen\":%d,\"job_id\":\"%s\",\"nodes\":[", M.gen, J.job_id);
    for (int i = 0; i < M.nn; i++) {
        fl__buf_printf(&b, "%s{", i ? "," : "");
        fr_put_node(&b, &M.n[M.order[i]].nd);
        fl__buf_printf(&b, "}");
    }
    fl__buf_printf(&b, "]}");
    for (int i = 0; i < M.nn; i++) M.n[i].workers_done = M.n[i].done = 0;
    M.phase = M_RUNNING, M.since = fr_now(), M.told_workers = 0;
    if (M.gen == 0) {
        say("all %d nodes joined; ranks by IP, then node id:", M.nn);
        for (int i = 0; i < M.nn && i < 64; i++) {
            const fr_node *nd = &M.n[M.order[i]].nd;
            say("  node %d: %s (%s), %d worker(s), %d server(s)", i, nd->ip, nd->id, nd->cnt[WORKER], nd->cnt[SERVER]);
        }
    }
    broadcast(FR_MSG_LAYOUT, &b);
    fl__buf_free(&b);
}

static int cmp_rank(const void *a, const void *b)
{
    return fr_node_cmp(&M.n[*(const int *)a].nd, &M.n[*(const int *)b].nd);
}

/* JOIN: the node's settings must be the job's; its ports replace the previous generation's. */
static void on_join(mnode *x, const fl_json *j, int gen)
{
    const char *mode, *job = NULL;
    int nnodes, max_restart;
    fr_node nd;
    char who[256], bad[1024] = "";
    if (M.phase != M_JOINING || gen != M.gen) {
        if (M.phase != M_ENDING) lost(x, "it joined at the wrong time (a protocol error)");
        return;
    }
    if (fr_get_str(j, j->root, "mode", 16, &mode) || fr_get_int(j, j->root, "nnodes", 1, MAX_NODES, &nnodes) ||
        fr_get_int(j, j->root, "max_restart", 0, 1000, &max_restart) ||
        (fl__json_find(j->root, "job_id") && fr_get_str(j, j->root, "job_id", FR_JOB_ID_MAX - 1, &job)) ||
        fr_get_node(j, j->root, &nd)) {
        lost(x, fl_last_error());
        return;
    }
    name_of(x, who, sizeof who);
    if (strcmp(mode, J.ps ? "ps" : "collective"))
        snprintf(bad, sizeof bad, "%s runs in %s mode, the master's node in %s mode", who, mode,
                 J.ps ? "ps" : "collective");
    else if (nnodes != J.nnodes)
        snprintf(bad, sizeof bad, "%s says --nnodes %d, the master's node --nnodes %d", who, nnodes, J.nnodes);
    else if (max_restart != J.max_restart)
        snprintf(bad, sizeof bad, "%s says --max_restart %d, the master's node --max_restart %d", who, max_restart,
                 J.max_restart);
    else if (job && strcmp(job, J.job_id))
        snprintf(bad, sizeof bad, "%s says --job_id %s, the master's node %s", who, job, J.job_id);
    else if (x->joined >= 0 && (strcmp(nd.id, x->nd.id) || nd.cnt[0] != x->nd.cnt[0] || nd.cnt[1] != x->nd.cnt[1]))
        snprintf(bad, sizeof bad, "%s changed its id or process counts on a restart", who);
    for (int i = 0; i < M.nn && !*bad; i++)
        if (&M.n[i] != x && M.n[i].joined >= 0 && !strcmp(M.n[i].nd.id, nd.id))
            snprintf(bad, sizeof bad, "two nodes have the id %s", nd.id);
    if (*bad) {
        fr_node_free(&nd);
        say("%s: every node must run the same command line; stopping", bad);
        end_job(FR_MSG_ERROR, 1, bad);
        return;
    }
    fr_node_free(&x->nd);
    x->nd = nd, x->joined = gen;
    int joined = 0;
    for (int i = 0; i < M.nn; i++) joined += M.n[i].c && M.n[i].joined == M.gen;
    if (joined < J.nnodes) return;
    if (M.gen == 0) {
        for (int i = 0; i < M.nn; i++) M.order[i] = i;
        qsort(M.order, (size_t)M.nn, sizeof M.order[0], cmp_rank);
        for (int i = 0; i < M.nn; i++) M.n[M.order[i]].rank = i;
    }
    send_layout();
}

static void on_failed(mnode *x, const fl_json *j, int gen)
{
    const char *what;
    int code, fatal_;
    fl_buf b = {0};
    if (fr_get_str(j, j->root, "what", 4096, &what) || fr_get_int(j, j->root, "code", 1, 255, &code) ||
        fr_get_bool(j, j->root, "fatal", &fatal_)) {
        lost(x, fl_last_error());
        return;
    }
    if (M.phase == M_ENDING || gen != M.gen) return; /* decided already, or a consequence of a restart */
    if (fatal_ || M.phase != M_RUNNING || M.restarts >= J.max_restart) {
        say("%s; stopping the job on every node", what);
        end_job(FR_MSG_STOP, code, what);
        return;
    }
    M.restarts++, M.gen++;
    say("%s; restarting the job on every node (restart %d of %d)", what, M.restarts, J.max_restart);
    fl__buf_printf(&b, "{\"gen\":%d,\"what\":", M.gen);
    fl__json_quote(&b, what);
    fl__buf_printf(&b, "}");
    M.phase = M_JOINING, M.since = fr_now();
    broadcast(FR_MSG_RESTART, &b);
    fl__buf_free(&b);
}

static void on_status(mnode *x, const fl_json *j, int gen)
{
    int wd, d, all_w = 1, all_d = 1;
    if (fr_get_bool(j, j->root, "workers_done", &wd) || fr_get_bool(j, j->root, "done", &d)) {
        lost(x, fl_last_error());
        return;
    }
    if (M.phase != M_RUNNING || gen != M.gen) return;
    x->workers_done |= wd, x->done |= d;
    for (int i = 0; i < M.nn; i++) all_w &= M.n[i].workers_done, all_d &= M.n[i].done;
    if (all_d) {
        say("every process of every node succeeded");
        end_job(FR_MSG_END, 0, "");
    } else if (all_w && J.ps && !M.told_workers) {
        fl_buf b = {0};
        fl__buf_printf(&b, "{\"gen\":%d}", M.gen);
        M.told_workers = 1;
        broadcast(FR_MSG_WORKERS_DONE, &b);
        fl__buf_free(&b);
    }
}

static void on_readable(mnode *x)
{
    fl_json j;
    int type, gen = -1;
    if (fr_msg_recv(x->c, &type, &j) != FL_OK) {
        lost(x, fl_last_error());
        fl__json_free(&j);
        return;
    }
    x->rx = fr_now();
    if (type != FR_MSG_HEARTBEAT && (!j.root || fr_get_int(&j, j.root, "gen", 0, 1 << 30, &gen) != FL_OK)) {
        lost(x, j.root ? fl_last_error() : "it sent a message without a body");
        fl__json_free(&j);
        return;
    }
    switch (type) {
    case FR_MSG_HEARTBEAT: break;
    case FR_MSG_JOIN: on_join(x, &j, gen); break;
    case FR_MSG_FAILED: on_failed(x, &j, gen); break;
    case FR_MSG_STATUS: on_status(x, &j, gen); break;
    default: lost(x, "it sent a message the master does not expect");
    }
    fl__json_free(&j);
}

/* A node that passed the handshake. */
static void on_accept(fl_net_conn *c)
{
    if (M.phase != M_JOINING || M.gen != 0 || M.nn == J.nnodes) {
        fl_buf b = {0};
        fl__buf_printf(&b, "{\"gen\":%d,\"code\":1,\"what\":\"the job's %d nodes have already joined\"}", M.gen, J.nnodes);
        say("refused a node at %s: the job's %d nodes have already joined", fl_net_conn_addr(c), J.nnodes);
        fr_msg_send(c, FR_MSG_ERROR, &b);
        fl__buf_free(&b);
        fl_net_conn_free(c);
        return;
    }
    M.n[M.nn++] = (mnode){.c = c, .joined = -1, .rx = fr_now(), .tx = fr_now()};
}

static void check_times(void)
{
    double now = fr_now();
    char what[1024];
    if (M.phase == M_JOINING && now - M.since > J.rdzv_timeout) {
        fl_buf b = {0};
        int k = 0;
        for (int i = 0; i < M.nn; i++)
            if (M.n[i].c && M.n[i].joined == M.gen && k++ < 32) fl__buf_printf(&b, " %s", M.n[i].nd.ip);
        snprintf(what, sizeof what, "only %d of %d nodes %s within --rdzv_timeout_s=%g s (joined:%s)", k, J.nnodes,
                 M.gen ? "came back for the restart" : "joined", J.rdzv_timeout, k ? b.p : " none");
        fl__buf_free(&b);
        say("%s; stopping", what);
        end_job(FR_MSG_ERROR, 1, what);
    }
    for (int i = 0; i < M.nn; i++) {
        mnode *x = &M.n[i];
        if (x->c && M.phase != M_ENDING && now - x->rx > FR_SILENT_S) {
            snprintf(what, sizeof what, "it sent nothing for %g s", FR_SILENT_S);
            lost(x, what);
        } else if (x->c && M.phase != M_ENDING && now - x->tx >= FR_HEARTBEAT_S) {
            send_to(x, FR_MSG_HEARTBEAT, NULL);
        }
    }
}

_Noreturn void fr_master_main(fl_net_listener *l)
{
    struct pollfd pf[MAX_NODES + 1];
    M.l = l, M.phase = M_JOINING, M.since = fr_now();
    fr_auth(&M.auth, FR_ROLE_MASTER);
    if (fl_net_acceptor_create(l, &M.auth, NULL, &M.acc) != FL_OK) {
        say("cannot accept nodes: %s", fl_last_error());
        _exit(1);
    }
    for (;;) {
        check_times();
        int open = 0;
        for (int i = 0; i < M.nn; i++) open += M.n[i].c != NULL;
        if (M.phase == M_ENDING && (!open || fr_now() - M.since > END_WAIT_S)) break;
        pf[0] = (struct pollfd){fl_net_acceptor_fd(M.acc), POLLIN, 0};
        for (int i = 0; i < M.nn; i++) pf[i + 1] = (struct pollfd){M.n[i].c ? fl_net_conn_fd(M.n[i].c) : -1, POLLIN, 0};
        int wait_ms = fl_net_acceptor_timeout_ms(M.acc);
        if (poll(pf, (nfds_t)M.nn + 1, wait_ms >= 0 && wait_ms < 250 ? wait_ms : 250) < 0 && errno != EINTR) {
            say("poll: %s", strerror(errno));
            break;
        }
        for (int i = 0, nn = M.nn; i < nn; i++)
            if (pf[i + 1].revents && M.n[i].c) {
                if (M.phase == M_ENDING) { /* only waiting for them to leave */
                    char buf[4096];
                    size_t got = 0;
                    if (fl_net_try_recv(M.n[i].c, buf, sizeof buf, &got) != FL_OK) close_node(&M.n[i]);
                } else {
                    on_readable(&M.n[i]);
                }
            }
        if (fl_net_acceptor_step(M.acc) != FL_OK) {
            say("accepting nodes failed: %s", fl_last_error());
            break;
        }
        fl_net_acceptor_stats st;
        fl_net_acceptor_get_stats(M.acc, &st);
        if (st.refused > M.refused) {
            say("refused a connection: %s", fl_net_acceptor_last_refusal(M.acc));
            M.refused = st.refused;
        }
        fl_net_conn *c;
        while (fl_net_acceptor_next(M.acc, &c) == FL_OK && c) on_accept(c);
    }
    fl_net_acceptor_free(M.acc);
    for (int i = 0; i < M.nn; i++) close_node(&M.n[i]), fr_node_free(&M.n[i].nd);
    fl_net_listener_free(l);
    fl_net_secret_clear(&J.secret);
    fflush(stderr);
    _exit(0);
}
