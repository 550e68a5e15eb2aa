/*
 * rendezvous.c - a node's side of the rendezvous (--master IP:PORT with --nnodes N > 1).
 *
 * Who hosts: the node whose IP is the master's IP.  A node's IP is --node_ip, else $POD_IP,
 * else the master's IP when this machine owns that address (a bind to it succeeds), else the
 * address this machine uses to reach the master (a connected UDP socket's local address).
 * The host forks the master (master.c), which listens on exactly IP:PORT; every node, the
 * host's own included, then connects to it like any other.
 *
 * Each generation (0 for the first run, then one per restart) the node claims its ports,
 * sends JOIN and waits for LAYOUT; while the job runs it sends FAILED and STATUS and receives
 * RESTART, STOP, WORKERS_DONE or END.  Both sides send a heartbeat after FR_HEARTBEAT_S of
 * quiet; a master that closes the connection or is silent for FR_SILENT_S is lost, and the
 * node stops its processes and exits 1.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fleetrun.h"

static struct {
    fl_net_conn *c;
    double rx, tx; /* when the master last sent something, when we last did */
} R;

/* ---------------------------------------------------------------- who this node is */

static int owns_ip(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* The local address of a UDP socket connected to the master: the interface toward it. */
static int route_ip(char *out, size_t cap)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)J.master_port)};
    socklen_t al = sizeof a;
    inet_pton(AF_INET, J.master_ip, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &al) == 0 && inet_ntop(AF_INET, &a.sin_addr, out, (socklen_t)cap);
    if (fd >= 0) close(fd);
    return ok;
}

static void identify(void)
{
    const char *given = J.node_ip ? J.node_ip : fr_env("POD_IP", NULL);
    char host[64] = "";
    if (given) {
        fr_check_ip(J.node_ip ? "--node_ip" : "POD_IP", given);
        snprintf(J.my_ip, sizeof J.my_ip, "%s", given);
        J.is_host = !strcmp(given, J.master_ip);
    } else if (owns_ip(J.master_ip)) {
        snprintf(J.my_ip, sizeof J.my_ip, "%s", J.master_ip);
        J.is_host = 1;
    } else if (!route_ip(J.my_ip, sizeof J.my_ip)) {
        usage_error("cannot tell this machine's IP on the way to --master %s:%d (%s); give it with --node_ip IP",
                    J.master_ip, J.master_port, strerror(errno));
    }
    gethostname(host, sizeof host - 1);
    snprintf(J.node_id, sizeof J.node_id, "%s:%d", host, (int)getpid());
}

/* ---------------------------------------------------------------- the host starts the master */

static void host_master(void)
{
    fl_net_listener *l;
    if (fl_net_listen(J.master_ip, J.master_port, &l) != FL_OK)
        fatal("this node (%s) hosts the rendezvous but cannot listen on --master %s:%d: %s", J.my_ip, J.master_ip,
              J.master_port, fl_last_error());
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        int lfd = fl_net_listener_fd(l);
        sigset_t none;
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1); /* host gone */
        signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN), signal(SIGPIPE, SIG_IGN);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (lfd > 3) close_range(3, (unsigned)lfd - 1, 0);
        close_range((unsigned)lfd + 1, ~0U, 0);
        prctl(PR_SET_NAME, "fleetrun-master");
        fr_master_main(l);
    }
    fl_net_listener_free(l);
    J.master_pid = pid;
}

/* Connects within --rdzv_timeout_s, in slices of a few seconds (longer than a handshake may
 * take) so that a signal is noticed. */
static void connect_master(void)
{
    fl_net_auth auth;
    double end = fr_now() + J.rdzv_timeout;
    fr_auth(&auth, FR_ROLE_NODE);
    for (;;) {
        double left_ms = (end - fr_now()) * 1000, slice = FR_IO_MS + 1000;
        int st = fl_net_connect(J.master_ip, J.master_port, &auth,
                                fl_net_deadline(left_ms < slice ? (int64_t)left_ms + 1 : (int64_t)slice), &R.c);
        if (st == FL_OK) break;
        if (st != FL_ETIMEDOUT)
            fatal("cannot join the job at --master %s:%d: %s%s", J.master_ip, J.master_port, fl_last_error(),
                  st == FL_EPROTO ? " (the job secret must be the same on every node)" : "");
        int s = fr_take_signal();
        if (s) {
            cli_say("received SIG%s while waiting for the master; nothing was started", sigabbrev_np(s));
            exit(128 + s);
        }
        if (fr_now() >= end)
            fatal("cannot reach the master at %s:%d within --rdzv_timeout_s=%g s (%s); it runs inside fleetrun on the "
                  "node that owns %s: start fleetrun there with the same --master and --nnodes",
                  J.master_ip, J.master_port, J.rdzv_timeout, fl_last_error(), J.master_ip);
    }
    char label[96];
    snprintf(label, sizeof label, "the master at %s:%d", J.master_ip, J.master_port);
    fl_net_conn_set_label(R.c, label);
    R.rx = R.tx = fr_now();
}

void fr_rdzv_start(void)
{
    identify();
    if (J.is_host) host_master();
    cli_say("node %s (%s) joins the job at --master %s:%d%s; waiting for %d node(s) in all", J.my_ip, J.node_id,
            J.master_ip, J.master_port, J.is_host ? ", hosted here" : "", J.nnodes);
    connect_master();
}

/* ---------------------------------------------------------------- messages */

static void lost(fr_outcome *o, const char *why)
{
    if (o->verdict == FR_V_NONE || o->verdict == FR_V_RESTART) {
        snprintf(o->what, sizeof o->what, "lost the master: %s", why);
        o->verdict = FR_V_LOST;
    }
    fl_net_conn_free(R.c);
    R.c = NULL;
}

static void send_msg(int type, fl_buf *b)
{
    if (R.c && fr_msg_send(R.c, type, b) == FL_OK) R.tx = fr_now();
    else if (R.c) cli_say("warning: cannot send %s to the master: %s", fr_msg_name(type), fl_last_error());
    if (b) fl__buf_free(b);
}

void fr_rdzv_failed(const char *what, int code, int fatal_)
{
    fl_buf b = {0};
    fl__buf_printf(&b, "{\"gen\":%d,\"code\":%d,\"fatal\":%s,\"what\":", J.restart, code, fatal_ ? "true" : "false");
    fl__json_quote(&b, what);
    fl__buf_printf(&b, "}");
    send_msg(FR_MSG_FAILED, &b);
}

void fr_rdzv_status(int workers_done, int done)
{
    fl_buf b = {0};
    fl__buf_printf(&b, "{\"gen\":%d,\"workers_done\":%s,\"done\":%s}", J.restart, workers_done ? "true" : "false",
                   done ? "true" : "false");
    send_msg(FR_MSG_STATUS, &b);
}

static void send_join(void)
{
    fr_node me = {0};
    int ports[2][MAX_LOCAL];
    snprintf(me.ip, sizeof me.ip, "%s", J.my_ip);
    snprintf(me.id, sizeof me.id, "%s", J.node_id);
    me.port[0] = ports[0], me.port[1] = ports[1];
    for (int i = 0; i < J.n; i++) me.port[J.p[i].role][me.cnt[J.p[i].role]++] = J.p[i].port;
    fl_buf b = {0};
    fl__buf_printf(&b, "{\"gen\":%d,\"mode\":\"%s\",\"nnodes\":%d,\"max_restart\":%d,", J.restart,
                   J.ps ? "ps" : "collective", J.nnodes, J.max_restart);
    if (J.job_id_flag) fl__buf_printf(&b, "\"job_id\":\"%s\",", J.job_id_flag);
    fr_put_node(&b, &me);
    fl__buf_printf(&b, "}");
    send_msg(FR_MSG_JOIN, &b);
}

/* LAYOUT: every node in rank order; find this one by its id and build the job from it. */
static int apply_layout(const fl_json *j)
{
    const cJSON *arr = fl__json_find(j->root, "nodes"), *v;
    const char *job;
    int nn = 0, me = -1, st = FL_OK, k = 0;
    FL_CHECK(fr_get_str(j, j->root, "job_id", FR_JOB_ID_MAX - 1, &job));
    FL_CHECK(fl__json_arr(j, arr, "nodes", MAX_NODES, &nn));
    if (nn != J.nnodes) return fl__json_fail(j, "the layout has %d nodes, expected %d", nn, J.nnodes);
    fr_node *nodes = calloc((size_t)nn, sizeof *nodes);
    if (!nodes) fatal("out of memory");
    cJSON_ArrayForEach(v, arr)
    {
        if ((st = fr_get_node(j, v, &nodes[k])) != FL_OK) break;
        if (!strcmp(nodes[k].id, J.node_id)) me = k;
        k++;
    }
    if (st == FL_OK && me < 0) st = fl__json_fail(j, "the layout does not list this node (%s)", J.node_id);
    if (st == FL_OK) {
        snprintf(J.job_id, sizeof J.job_id, "%s", job);
        fr_layout_apply(nodes, nn, me);
    }
    for (int i = 0; i < nn; i++) fr_node_free(&nodes[i]);
    free(nodes);
    return st;
}

/* One message from the master; the word that ends or restarts a generation goes into o. */
static int handle(fr_outcome *o, int *layout_ok)
{
    fl_json j;
    int type = 0, code = 1, gen = -1, st = fr_msg_recv(R.c, &type, &j);
    const char *what = "";
    if (st != FL_OK) {
        lost(o, fl_last_error());
        fl__json_free(&j);
        return st;
    }
    R.rx = fr_now();
    if (j.root) {
        fr_get_int(&j, j.root, "gen", 0, 1 << 30, &gen);
        if (fl__json_find(j.root, "what")) fr_get_str(&j, j.root, "what", 4096, &what);
        if (type == FR_MSG_STOP || type == FR_MSG_ERROR) fr_get_int(&j, j.root, "code", 1, 255, &code);
    }
    switch (type) {
    case FR_MSG_HEARTBEAT: break;
    case FR_MSG_LAYOUT:
        if (!layout_ok || gen != J.restart) break;
        if (apply_layout(&j) != FL_OK) {
            lost(o, fl_last_error());
            st = FL_EPROTO;
        } else {
            *layout_ok = 1;
        }
        break;
    case FR_MSG_RESTART:
        if (gen != J.restart + 1 || o->verdict != FR_V_NONE) break;
        o->verdict = FR_V_RESTART;
        snprintf(o->what, sizeof o->what, "the master restarts the job (restart %d of %d): %s", gen, J.max_restart, what);
        break;
    case FR_MSG_STOP:
    case FR_MSG_ERROR:
        o->verdict = FR_V_STOP, o->code = code;
        snprintf(o->what, sizeof o->what, "%s%s", type == FR_MSG_ERROR ? "the rendezvous failed: " : "", what);
        fl_net_conn_free(R.c), R.c = NULL;
        break;
    case FR_MSG_WORKERS_DONE:
        if (gen == J.restart) o->all_workers_done = 1;
        break;
    case FR_MSG_END:
        if (gen != J.restart) break;
        o->verdict = FR_V_END;
        fl_net_conn_free(R.c), R.c = NULL;
        break;
    default: lost(o, "the master sent a message that a node does not expect"); st = FL_EPROTO;
    }
    fl__json_free(&j);
    return st;
}

int fr_rdzv_fd(void) { return R.c ? fl_net_conn_fd(R.c) : -1; }

void fr_rdzv_poll(fr_outcome *o, int readable)
{
    if (!R.c) return;
    if (readable) handle(o, NULL);
    double now = fr_now();
    if (R.c && now - R.rx > FR_SILENT_S) {
        char why[128];
        snprintf(why, sizeof why, "the master at %s:%d sent nothing for %g s", J.master_ip, J.master_port, FR_SILENT_S);
        lost(o, why);
    } else if (R.c && now - R.tx >= FR_HEARTBEAT_S) {
        send_msg(FR_MSG_HEARTBEAT, NULL);
    }
}

int fr_rdzv_join(fr_outcome *o)
{
    int got = 0;
    if (!R.c) { /* lost while the previous generation was torn down */
        o->verdict = FR_V_LOST;
        snprintf(o->what, sizeof o->what, "lost the master at %s:%d", J.master_ip, J.master_port);
        return 1;
    }
    fr_layout_local(J.my_ip);
    fr_claim_ports();
    send_join();
    double end = fr_now() + J.rdzv_timeout + FR_SILENT_S;
    while (!got) {
        struct pollfd pf[2] = {{J.sfd, POLLIN, 0}, {fr_rdzv_fd(), POLLIN, 0}};
        if (poll(pf, 2, 1000) < 0 && errno != EINTR) fatal("poll: %s", strerror(errno));
        if (pf[1].revents) handle(o, &got);
        fr_rdzv_poll(o, 0);
        int s = fr_take_signal();
        if (s && !o->sig) {
            char what[160];
            snprintf(what, sizeof what, "fleetrun on %s received SIG%s while the nodes were meeting", J.my_ip,
                     sigabbrev_np(s));
            cli_say("received SIG%s while waiting for the other nodes; stopping", sigabbrev_np(s));
            fr_rdzv_failed(what, 128 + s, 1);
            o->sig = s;
            return 1;
        }
        if (!got && (o->verdict != FR_V_NONE || !R.c)) return 1;
        if (!got && fr_now() > end) {
            o->verdict = FR_V_LOST;
            snprintf(o->what, sizeof o->what, "no layout from the master within --rdzv_timeout_s=%g s", J.rdzv_timeout);
            return 1;
        }
    }
    return 0;
}

void fr_rdzv_finish(void)
{
    fl_net_conn_free(R.c);
    R.c = NULL;
    fl_net_secret_clear(&J.secret);
    for (double end = fr_now() + FR_SILENT_S; J.master_pid > 0;) { /* the master ends once every node left */
        pid_t r = waitpid(J.master_pid, NULL, WNOHANG);
        if (r == J.master_pid || (r < 0 && errno == ECHILD)) break;
        if (fr_now() > end) {
            cli_say("warning: the rendezvous master (pid %d) did not exit; killing it", (int)J.master_pid);
            kill(J.master_pid, SIGKILL);
            waitpid(J.master_pid, NULL, 0);
            break;
        }
        usleep(10000);
    }
    J.master_pid = -1;
}
