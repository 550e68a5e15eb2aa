/*
 * test_net.c - the transport: endpoints, listen on port 0, connect/accept deadlines (nobody
 * listening, a peer that never answers the handshake), retry until the peer listens (a late
 * one reached within the 100 ms back-off cap), the HMAC handshake (right and wrong secrets,
 * services, insecure mode), truncated vs closed reads, receive deadlines, frames, and
 * job-secret loading (hex, file modes, environment).
 * Servers run in forked children on 127.0.0.1.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "testhelp.h"
#include <fleet/net.h>

static const uint8_t key_a[32] = "0123456789abcdef0123456789abcde";
static const uint8_t key_b[32] = "zyxwvutsrqponmlkjihgfedcba98765";

static fl_net_auth auth_of(const uint8_t *key, int rank)
{
    fl_net_auth a = {key, key ? 32 : 0, 0, FL_NET_SERVICE_TEST, 7, rank};
    return a;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A port nobody listens on (bound, read, closed). */
static int dead_port(void)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int p = fl_net_listener_port(l);
    fl_net_listener_free(l);
    return p;
}

typedef void (*server_fn)(fl_net_listener *l, void *arg);

/* Runs fn(l, arg) in a child that exits 0 unless a CHECK failed; the parent drops l. */
static pid_t serve(fl_net_listener *l, server_fn fn, void *arg)
{
    pid_t pid = th_fork(20);
    if (pid == 0) {
        fn(l, arg);
        if (l) fl_net_listener_free(l);
        _exit(0);
    }
    if (l) fl_net_listener_free(l);
    return pid;
}

static void reap(pid_t pid)
{
    int ws = 0;
    CHECK(waitpid(pid, &ws, 0) == pid);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("server child failed (status 0x%x)", ws);
}

TEST(endpoints)
{
    char h[64];
    int port;
    CHECK_OK(fl_net_parse_endpoint("10.0.0.4:6170", h, sizeof h, &port, 0));
    CHECK(!strcmp(h, "10.0.0.4") && port == 6170);
    CHECK_OK(fl_net_parse_endpoint("[::1]:80", h, sizeof h, &port, 0));
    CHECK(!strcmp(h, "::1") && port == 80);
    CHECK_OK(fl_net_parse_endpoint("localhost:0", h, sizeof h, &port, 1));
    CHECK_FAILS(fl_net_parse_endpoint("localhost:0", h, sizeof h, &port, 0), FL_EINVAL, "invalid port");
    CHECK_FAILS(fl_net_parse_endpoint("host", h, sizeof h, &port, 0), FL_EINVAL, "expected host:port");
    CHECK_FAILS(fl_net_parse_endpoint(":80", h, sizeof h, &port, 0), FL_EINVAL, "empty host");
    CHECK_FAILS(fl_net_parse_endpoint("h:99999", h, sizeof h, &port, 0), FL_EINVAL, "invalid port");
    CHECK_FAILS(fl_net_parse_endpoint("h:12x", h, sizeof h, &port, 0), FL_EINVAL, "invalid port");
}

TEST(listen_port_zero)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen(NULL, 0, &l));
    int p = fl_net_listener_port(l);
    CHECK(p > 0);
    char want[32];
    snprintf(want, sizeof want, "127.0.0.1:%d", p);
    CHECK(!strcmp(fl_net_listener_endpoint(l), want));
    fl_net_listener *l2;
    CHECK_FAILS(fl_net_listen("127.0.0.1", p, &l2), FL_EIO, want); /* in use: names host:port */
    fl_net_listener_free(l);
}

TEST(connect_deadline_when_nobody_listens)
{
    int port = dead_port();
    fl_net_auth a = auth_of(key_a, 1);
    fl_net_conn *c;
    double t0 = now_s();
    CHECK_FAILS(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(300), &c), FL_ETIMEDOUT, "timed out");
    double dt = now_s() - t0;
    CHECK_STR_HAS(fl_last_error(), "Connection refused");
    if (dt < 0.28 || dt > 1.0) TFAIL("connect gave up after %.3f s, deadline 0.3 s", dt);
}

static void srv_late_listener(fl_net_listener *l, void *arg)
{
    int port = *(int *)arg;
    (void)l;
    struct timespec ts = {0, 250000000};
    nanosleep(&ts, NULL);
    fl_net_listener *real;
    CHECK_OK(fl_net_listen("127.0.0.1", port, &real));
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    CHECK_OK(fl_net_accept(real, &a, fl_net_deadline(5000), &c));
    CHECK_EQ_INT(fl_net_conn_peer_rank(c), 1);
    fl_net_conn_free(c);
    fl_net_listener_free(real);
}

TEST(connect_retries_until_the_peer_listens)
{
    int port = dead_port();
    fl_net_listener *dummy;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &dummy));
    pid_t pid = serve(dummy, srv_late_listener, &port);
    fl_net_auth a = auth_of(key_a, 1);
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c));
    CHECK_EQ_INT(fl_net_conn_peer_rank(c), 0);
    CHECK_EQ_INT(fl_net_conn_peer_role(c), 7);
    fl_net_conn_free(c);
    reap(pid);
}

/* A peer that listens 1.15 s late (a restarted server still starting) is reached soon
 * after: the retry back-off is capped at 100 ms (with a 500 ms cap the attempt after the
 * one at 1.13 s came at 1.63 s, 0.48 s after the listen). */
typedef struct {
    int port, fd;
} late_arg;

static void srv_slow_listener(fl_net_listener *l, void *arg)
{
    late_arg *la = arg;
    (void)l;
    struct timespec ts = {1, 150000000};
    nanosleep(&ts, NULL);
    fl_net_listener *real;
    CHECK_OK(fl_net_listen("127.0.0.1", la->port, &real));
    double t = now_s();
    CHECK(write(la->fd, &t, sizeof t) == (ssize_t)sizeof t);
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    CHECK_OK(fl_net_accept(real, &a, fl_net_deadline(5000), &c));
    fl_net_conn_free(c);
    fl_net_listener_free(real);
}

TEST(connect_reaches_a_late_listener_within_the_backoff_cap)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    late_arg la = {dead_port(), fds[1]};
    fl_net_listener *dummy;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &dummy));
    pid_t pid = serve(dummy, srv_slow_listener, &la);
    fl_net_auth a = auth_of(key_a, 1);
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", la.port, &a, fl_net_deadline(5000), &c));
    double t_conn = now_s(), t_listen = 0;
    CHECK(read(fds[0], &t_listen, sizeof t_listen) == (ssize_t)sizeof t_listen);
    if (t_conn - t_listen > 0.35) TFAIL("connected %.3f s after the peer listened (back-off cap 0.1 s)", t_conn - t_listen);
    fl_net_conn_free(c);
    close(fds[0]);
    close(fds[1]);
    reap(pid);
}

TEST(handshake_deadline_when_the_peer_never_answers)
{
    /* a plain socket that listens (the kernel completes the TCP handshake) but never speaks */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 4) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
    fl_net_auth a = auth_of(key_a, 1);
    fl_net_conn *c;
    double t0 = now_s();
    CHECK_FAILS(fl_net_connect("127.0.0.1", ntohs(sa.sin_port), &a, fl_net_deadline(300), &c), FL_ETIMEDOUT,
                "handshake with 127.0.0.1:");
    double dt = now_s() - t0;
    if (dt < 0.28 || dt > 1.0) TFAIL("handshake gave up after %.3f s, deadline 0.3 s", dt);
    close(fd);
}

TEST(accept_deadline_when_the_client_never_answers)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)fl_net_listener_port(l))};
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    CHECK_FAILS(fl_net_accept(l, &a, fl_net_deadline(300), &c), FL_ETIMEDOUT, "timed out waiting for its proof");
    close(fd);
    CHECK_FAILS(fl_net_accept(l, &a, fl_net_deadline(100), &c), FL_ETIMEDOUT, "no peer connected");
    fl_net_listener_free(l);
}

static void srv_echo(fl_net_listener *l, void *arg)
{
    (void)arg;
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    CHECK_OK(fl_net_accept(l, &a, fl_net_deadline(5000), &c));
    CHECK_EQ_INT(fl_net_conn_peer_rank(c), 5);
    size_t n = 3u << 20;
    char *b = malloc(n);
    CHECK_OK(fl_net_recv_all(c, b, n, fl_net_deadline(5000)));
    CHECK_OK(fl_net_send_all(c, b, n, fl_net_deadline(5000)));
    fl_net_frame f;
    CHECK_OK(fl_net_recv_frame_header(c, 100, &f, fl_net_deadline(5000)));
    CHECK_EQ_INT(f.type, 42);
    CHECK_EQ_INT(f.len, 5);
    CHECK_OK(fl_net_recv_all(c, b, 5, fl_net_deadline(5000)));
    CHECK(!memcmp(b, "hello", 5));
    CHECK_OK(fl_net_send_frame(c, 43, 1, "a longer body", 13, fl_net_deadline(5000)));
    free(b);
    fl_net_conn_free(c);
}

TEST(authenticated_stream_and_frames)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    pid_t pid = serve(l, srv_echo, NULL);
    fl_net_auth a = auth_of(key_a, 5);
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c));
    CHECK_EQ_INT(fl_net_conn_peer_rank(c), 0);
    size_t n = 3u << 20;
    char *x = malloc(n), *y = malloc(n);
    for (size_t i = 0; i < n; i++) x[i] = (char)(i * 31 + 7);
    CHECK_OK(fl_net_send_all(c, x, n, fl_net_deadline(5000)));
    CHECK_OK(fl_net_recv_all(c, y, n, fl_net_deadline(5000)));
    CHECK(!memcmp(x, y, n));
    CHECK_OK(fl_net_send_frame(c, 42, 0, "hello", 5, fl_net_deadline(5000)));
    fl_net_frame f;
    CHECK_FAILS(fl_net_recv_frame_header(c, 8, &f, fl_net_deadline(5000)), FL_EPROTO, "exceeds the limit of 8");
    free(x);
    free(y);
    fl_net_conn_free(c);
    reap(pid);
}

static void srv_expect_refusal(fl_net_listener *l, void *arg)
{
    const char *want = arg;
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    int st = fl_net_accept(l, &a, fl_net_deadline(5000), &c);
    /* a client that refuses the service hangs up before it proves anything */
    CHECK_EQ_INT(st, strstr(want, "before sending") ? FL_EREMOTE : FL_EPROTO);
    CHECK_STR_HAS(fl_last_error(), want);
    CHECK(strstr(fl_last_error(), "zyxw") == NULL && strstr(fl_last_error(), "0123") == NULL);
}

TEST(wrong_secret_is_refused_on_both_sides)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    pid_t pid = serve(l, srv_expect_refusal, "does not know the job secret");
    fl_net_auth a = auth_of(key_b, 1);
    fl_net_conn *c;
    char want[96];
    snprintf(want, sizeof want, "authentication failed: peer 127.0.0.1:%d does not know the job secret", port);
    CHECK_FAILS(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c), FL_EPROTO, want);
    reap(pid);
}

TEST(service_mismatch_is_refused)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    pid_t pid = serve(l, srv_expect_refusal, "closed the connection before sending its proof");
    fl_net_auth a = auth_of(key_a, 1);
    a.service = FL_NET_SERVICE_PS;
    fl_net_conn *c;
    CHECK_FAILS(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c), FL_EPROTO, "serves service 99");
    reap(pid);
}

TEST(insecure_mode_needs_the_flag)
{
    fl_net_auth a = auth_of(NULL, 1);
    fl_net_conn *c;
    CHECK_FAILS(fl_net_connect("127.0.0.1", 1, &a, fl_net_deadline(100), &c), FL_EINVAL, "no job secret");
    /* a server with a secret refuses an insecure client, with a hint */
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    pid_t pid = serve(l, srv_expect_refusal, "(the peer runs without a secret)");
    a.insecure_local = 1;
    CHECK_FAILS(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c), FL_EPROTO, "does not know");
    reap(pid);
}

static void srv_insecure(fl_net_listener *l, void *arg)
{
    (void)arg;
    fl_net_auth a = auth_of(NULL, 0);
    a.insecure_local = 1;
    fl_net_conn *c;
    CHECK_OK(fl_net_accept(l, &a, fl_net_deadline(5000), &c));
    CHECK_OK(fl_net_send_all(c, "ok", 2, fl_net_deadline(5000)));
    fl_net_conn_free(c);
}

TEST(insecure_mode_on_loopback)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    pid_t pid = serve(l, srv_insecure, NULL);
    fl_net_auth a = auth_of(NULL, 1);
    a.insecure_local = 1;
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c));
    char b[2];
    CHECK_OK(fl_net_recv_all(c, b, 2, fl_net_deadline(5000)));
    fl_net_conn_free(c);
    reap(pid);
}

/* mode 0: send 10 bytes and close; 1: close at once; 2: stay silent for a while */
static void srv_trunc(fl_net_listener *l, void *arg)
{
    int mode = *(int *)arg;
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_conn *c;
    CHECK_OK(fl_net_accept(l, &a, fl_net_deadline(5000), &c));
    if (mode == 0) CHECK_OK(fl_net_send_all(c, "0123456789", 10, fl_net_deadline(5000)));
    if (mode == 2) {
        char b;
        fl_net_recv_all(c, &b, 1, fl_net_deadline(3000)); /* returns when the client hangs up */
    }
    fl_net_conn_free(c);
}

static fl_net_conn *dial(int mode, pid_t *pid)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    static int m;
    m = mode;
    *pid = serve(l, srv_trunc, &m);
    fl_net_auth a = auth_of(key_a, 1);
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c));
    return c;
}

TEST(truncated_and_closed_reads_differ)
{
    pid_t pid;
    char b[20];
    fl_net_conn *c = dial(0, &pid);
    CHECK_FAILS(fl_net_recv_all(c, b, 20, fl_net_deadline(5000)), FL_ECORRUPT, "truncated read from 127.0.0.1:");
    CHECK_STR_HAS(fl_last_error(), "got 10 of 20 bytes");
    fl_net_conn_free(c);
    reap(pid);
    c = dial(1, &pid);
    CHECK_FAILS(fl_net_recv_all(c, b, 20, fl_net_deadline(5000)), FL_EREMOTE, "closed the connection");
    fl_net_conn_free(c);
    reap(pid);
}

TEST(receive_deadline)
{
    pid_t pid;
    char b[8];
    fl_net_conn *c = dial(2, &pid);
    fl_net_conn_set_label(c, "rank 9 (somewhere:1)");
    double t0 = now_s();
    CHECK_FAILS(fl_net_recv_all(c, b, 8, fl_net_deadline(200)), FL_ETIMEDOUT,
                "receive from rank 9 (somewhere:1) timed out");
    CHECK_STR_HAS(fl_last_error(), "0 of 8 bytes");
    double dt = now_s() - t0;
    if (dt < 0.18 || dt > 1.0) TFAIL("receive gave up after %.3f s, deadline 0.2 s", dt);
    fl_net_conn_set_spin(c, 1000); /* spinning honours the deadline too */
    CHECK_FAILS(fl_net_recv_all(c, b, 8, fl_net_deadline(50)), FL_ETIMEDOUT, "timed out");
    fl_net_conn_free(c);
    reap(pid);
}

TEST(secret_loading)
{
    fl_net_secret s;
    CHECK_OK(fl_net_secret_from_hex(" 00112233445566778899AABBCCDDEEFF\n", "test", &s));
    CHECK_EQ_INT(s.len, 16);
    CHECK_EQ_INT(s.bytes[15], 0xff);
    CHECK_FAILS(fl_net_secret_from_hex("0011223344", "test", &s), FL_EINVAL, "between 32 and 512");
    CHECK_FAILS(fl_net_secret_from_hex("00112233445566778899aabbccddeefg", "test", &s), FL_EINVAL, "character 32");
    CHECK(strstr(fl_last_error(), "0011") == NULL);
    fl_net_secret g;
    char hex[2 * FL_NET_SECRET_MAX + 1];
    CHECK_OK(fl_net_secret_generate(&g));
    CHECK_OK(fl_net_secret_to_hex(&g, hex, sizeof hex));
    CHECK_OK(fl_net_secret_from_hex(hex, "round trip", &s));
    CHECK(s.len == 32 && !memcmp(s.bytes, g.bytes, 32));
    fl_net_secret_clear(&g);
    CHECK_EQ_INT(g.len, 0);

    char dir[64], path[96];
    th_mktemp(dir, sizeof dir, "fleet-net-secret-");
    snprintf(path, sizeof path, "%s/secret", dir);
    th_write_bytes(path, hex, strlen(hex));
    CHECK(chmod(path, 0600) == 0);
    CHECK_OK(fl_net_secret_from_file(path, &g));
    CHECK(g.len == 32 && !memcmp(s.bytes, g.bytes, 32));
    CHECK(chmod(path, 0644) == 0);
    CHECK_FAILS(fl_net_secret_from_file(path, &g), FL_EINVAL, "has mode 0644");
    CHECK_STR_HAS(fl_last_error(), path);
    CHECK(chmod(path, 0640) == 0);
    CHECK_FAILS(fl_net_secret_from_file(path, &g), FL_EINVAL, "has mode 0640");

    unsetenv("FLEET_JOB_SECRET");
    unsetenv("FLEET_JOB_SECRET_FILE");
    CHECK_FAILS(fl_net_secret_from_env(&g), FL_ENOTFOUND, "FLEET_JOB_SECRET");
    setenv("FLEET_JOB_SECRET_FILE", path, 1);
    CHECK_FAILS(fl_net_secret_from_env(&g), FL_EINVAL, "has mode 0640");
    CHECK(chmod(path, 0400) == 0);
    CHECK_OK(fl_net_secret_from_env(&g));
    setenv("FLEET_JOB_SECRET", hex, 1);
    CHECK_FAILS(fl_net_secret_from_env(&g), FL_EINVAL, "set only one");
    unsetenv("FLEET_JOB_SECRET_FILE");
    CHECK_OK(fl_net_secret_from_env(&g));
    CHECK(!memcmp(s.bytes, g.bytes, 32));
    unsetenv("FLEET_JOB_SECRET");
    CHECK_FAILS(fl_net_secret_from_file("/nonexistent/secret", &g), FL_EIO, "/nonexistent/secret");
    th_rmtree(dir);
}

/* ---- the acceptor ---------------------------------------------------------------------------- */

/* A raw TCP connection to port from source address src (e.g. "127.0.0.2"); never speaks. */
static int raw_connect(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    if (src) {
        struct sockaddr_in me = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &me.sin_addr);
        CHECK(bind(fd, (struct sockaddr *)&me, sizeof me) == 0);
    }
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons((uint16_t)port)};
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* 1 when the server closed fd (EOF or reset), 0 while it stays open. */
static int raw_closed(int fd)
{
    char b[128];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r > 0) continue; /* the greeting */
        return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

static void step_for(fl_net_acceptor *a, int ms)
{
    double t_end = now_s() + ms / 1000.0;
    while (now_s() < t_end) {
        struct pollfd pf = {.fd = fl_net_acceptor_fd(a), .events = POLLIN};
        poll(&pf, 1, 5);
        CHECK_OK(fl_net_acceptor_step(a));
    }
}

static void client_connects(fl_net_listener *l, void *arg)
{
    int port = *(int *)arg;
    (void)l;
    fl_net_auth a = auth_of(key_a, 3);
    fl_net_conn *c;
    CHECK_OK(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c));
    CHECK_OK(fl_net_send_all(c, "x", 1, fl_net_deadline(5000)));
    fl_net_conn_free(c);
}

TEST(acceptor_bounds_unauthenticated_connections)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_acceptor_opts o = {8, 3, 1500};
    fl_net_acceptor *acc;
    CHECK_OK(fl_net_acceptor_create(l, &a, &o, &acc));
    fl_net_conn *c;
    CHECK_FAILS(fl_net_accept(l, &a, fl_net_deadline(10), &c), FL_ESTATE, "use fl_net_acceptor_wait");
    fl_net_acceptor *again;
    CHECK_FAILS(fl_net_acceptor_create(l, &a, &o, &again), FL_ESTATE, "already has an acceptor");
    /* 6 idle peers from each of 127.0.0.1, 127.0.0.2 and 127.0.0.3, one every 40 ms: a source
     * keeps at most 3 pending once its older ones are over 100 ms idle, 8 in all */
    int fds[18];
    const char *srcs[3] = {"127.0.0.1", "127.0.0.2", "127.0.0.3"};
    for (int i = 0; i < 18; i++) {
        fds[i] = raw_connect(port, srcs[i % 3]);
        step_for(acc, 40);
    }
    fl_net_acceptor_stats st;
    fl_net_acceptor_get_stats(acc, &st);
    printf("  18 idle peers from 3 addresses: accepted %llu, pending %d, evicted %llu\n", (unsigned long long)st.accepted,
           st.pending, (unsigned long long)st.evicted);
    CHECK_EQ_INT(st.accepted, 18);
    CHECK(st.pending <= 8);
    CHECK_EQ_INT(st.evicted, 18 - st.pending);
    int open_per_src[3] = {0, 0, 0};
    for (int i = 0; i < 18; i++) open_per_src[i % 3] += !raw_closed(fds[i]);
    for (int g = 0; g < 3; g++) CHECK(open_per_src[g] <= 3);
    CHECK(raw_closed(fds[0]) && raw_closed(fds[1])); /* oldest first */
    CHECK(!raw_closed(fds[17]));
    /* a burst of 12 more from one address within a few ms: only the overall bound holds */
    int burst[12];
    for (int i = 0; i < 12; i++) burst[i] = raw_connect(port, "127.0.0.4");
    step_for(acc, 20);
    fl_net_acceptor_get_stats(acc, &st);
    CHECK_EQ_INT(st.pending, 8);
    /* a real peer gets in at once, ahead of them */
    pid_t pid = serve(NULL, client_connects, &port);
    double t0 = now_s();
    CHECK_OK(fl_net_acceptor_wait(acc, fl_net_deadline(3000), &c));
    double dt = now_s() - t0;
    printf("  a real peer authenticated after %.3f s among %d idle ones\n", dt, st.pending);
    CHECK_EQ_INT(fl_net_conn_peer_rank(c), 3);
    CHECK(dt < 1.0);
    char b;
    CHECK_OK(fl_net_recv_all(c, &b, 1, fl_net_deadline(3000)));
    fl_net_conn_free(c);
    reap(pid);
    /* the rest time out at their deadline (1.5 s) */
    step_for(acc, 1600);
    fl_net_acceptor_get_stats(acc, &st);
    CHECK_EQ_INT(st.pending, 0);
    CHECK(st.timed_out >= 1);
    CHECK_EQ_INT(fl_net_acceptor_timeout_ms(acc), -1);
    CHECK_STR_HAS(fl_net_acceptor_last_refusal(acc), "timed out waiting for its proof after 1500 ms");
    for (int i = 0; i < 18; i++) {
        CHECK(raw_closed(fds[i]));
        close(fds[i]);
    }
    for (int i = 0; i < 12; i++) {
        CHECK(raw_closed(burst[i]));
        close(burst[i]);
    }
    fl_net_acceptor_free(acc);
    fl_net_listener_free(l);
}

static void client_wrong_secret(fl_net_listener *l, void *arg)
{
    int port = *(int *)arg;
    (void)l;
    fl_net_auth a = auth_of(key_b, 3);
    fl_net_conn *c;
    CHECK_FAILS(fl_net_connect("127.0.0.1", port, &a, fl_net_deadline(5000), &c), FL_EPROTO, "does not know");
}

TEST(acceptor_keeps_refusals_out_of_the_way)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    int port = fl_net_listener_port(l);
    fl_net_auth a = auth_of(key_a, 0);
    fl_net_acceptor *acc;
    CHECK_OK(fl_net_acceptor_create(l, &a, NULL, &acc));
    pid_t pid = serve(NULL, client_wrong_secret, &port);
    int ws = 0;
    while (waitpid(pid, &ws, WNOHANG) == 0) step_for(acc, 10);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) TFAIL("client child failed (status 0x%x)", ws);
    fl_net_conn *c = NULL;
    CHECK_OK(fl_net_acceptor_next(acc, &c));
    CHECK(c == NULL);
    fl_net_acceptor_stats st;
    fl_net_acceptor_get_stats(acc, &st);
    CHECK_EQ_INT(st.refused, 1);
    CHECK_STR_HAS(fl_net_acceptor_last_refusal(acc), "does not know the job secret");
    /* a trickling peer (one byte of its proof every 50 ms) is not authenticated, just bounded */
    int fd = raw_connect(port, NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(send(fd, "F", 1, MSG_NOSIGNAL) == 1);
        step_for(acc, 50);
    }
    fl_net_acceptor_get_stats(acc, &st);
    CHECK_EQ_INT(st.pending, 1);
    CHECK_FAILS(fl_net_acceptor_wait(acc, fl_net_deadline(100), &c), FL_ETIMEDOUT, "1 pending");
    close(fd);
    step_for(acc, 20);
    CHECK_STR_HAS(fl_net_acceptor_last_refusal(acc), "got 4 of 84 bytes");
    fl_net_acceptor_free(acc);
    fl_net_listener_free(l);
}

TEST_MAIN(T(endpoints), T(listen_port_zero), T(connect_deadline_when_nobody_listens),
          T(connect_retries_until_the_peer_listens), T(connect_reaches_a_late_listener_within_the_backoff_cap),
          T(handshake_deadline_when_the_peer_never_answers), T(accept_deadline_when_the_client_never_answers),
          T(authenticated_stream_and_frames), T(wrong_secret_is_refused_on_both_sides), T(service_mismatch_is_refused),
          T(insecure_mode_needs_the_flag), T(insecure_mode_on_loopback), T(truncated_and_closed_reads_differ),
          T(receive_deadline), T(secret_loading), T(acceptor_bounds_unauthenticated_connections),
          T(acceptor_keeps_refusals_out_of_the_way))
