/*
 * soak_flood.c - the connection flood of the soak benchmark (bench/soak.sh): holds IDLE
 * connections that never send a byte and SLOW ones that send one byte a second, to every
 * TCP port listed in a file, on 127.0.0.1 only.  None of them ever authenticates.
 *
 *   soak_flood --ports FILE [--idle 100] [--slow 100] [--rate 50] [--sources 50] --duration S
 *
 * The file (one port a line) is read again every second: ports that left it lose their
 * connections, new ones get theirs.  A connection the server closes (or refuses) is
 * replaced, at most --rate new connections per port a second, so the flood is bounded in
 * connections (ports x (idle + slow)) and in connection rate.  It stops by itself after
 * --duration seconds (or on SIGTERM / SIGINT) and prints what it did.  The connections come
 * from --sources loopback addresses (127.0.0.2, 127.0.0.3, ...), so that a server's limit of
 * pending connections per source address does not turn most of them away at once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CLI_NAME "soak_flood"
#define CLI_HELP_HINT "usage: soak_flood --ports FILE --duration S [--idle 100] [--slow 100] [--rate 50] [--sources 50]"
#include "bench_args.h"

#define MAX_PORTS 64

typedef struct {
    int port, live; /* live: still listed in the file */
    int *fd;        /* idle + slow slots, -1 when empty; slots [0, idle) are idle, the rest slow */
} target;

static volatile sig_atomic_t quit;
static void on_signal(int sig) { (void)sig, quit = 1; }

static struct {
    long long made, failed, closed_by_peer, bytes;
    int open, peak;
} S;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check_range(const char *flag, int x, int lo, int hi)
{
    if (x < lo || x > hi) cli_die(2, "%s expects an integer in [%d, %d], got %d", flag, lo, hi, x);
}

static void drop(int *fd)
{
    if (*fd < 0) return;
    close(*fd);
    *fd = -1;
    S.open--;
}

/* A non-blocking connect to 127.0.0.1:port; the socket is kept even while the connect is
 * in progress (the server's backlog holds it). */
static int open_one(int port, int source)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in from = {.sin_family = AF_INET}, a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1u + (uint32_t)source); /* 127.0.0.2 and up */
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0 ||
        (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS)) {
        close(fd);
        S.failed++;
        return -1;
    }
    S.made++;
    if (++S.open > S.peak) S.peak = S.open;
    return fd;
}

/* Reads the port list; marks targets live or not, adds new ones. */
static void read_ports(const char *path, target *t, int *nt, int slots)
{
    for (int i = 0; i < *nt; i++) t[i].live = 0;
    FILE *f = fopen(path, "r");
    if (!f) return; /* not written yet, or between jobs: no port is listed */
    char line[64];
    while (fgets(line, sizeof line, f)) {
        int port = atoi(line), k;
        if (port <= 0 || port > 65535) continue;
        for (k = 0; k < *nt && t[k].port != port; k++) {
        }
        if (k == *nt) {
            if (*nt == MAX_PORTS) continue;
            t[k].port = port;
            t[k].fd = malloc((size_t)slots * sizeof *t[k].fd);
            if (!t[k].fd) continue;
            for (int s = 0; s < slots; s++) t[k].fd[s] = -1;
            (*nt)++;
        }
        t[k].live = 1;
    }
    fclose(f);
}

/* One second of one target: reap connections the server closed, send the slow bytes,
 * open up to rate new connections. */
static void tend(target *t, int idle, int slots, int rate, int sources)
{
    int opened = 0;
    for (int s = 0; s < slots; s++) {
        int *fd = &t->fd[s];
        if (!t->live) {
            drop(fd);
            continue;
        }
        if (*fd >= 0) {
            struct pollfd p = {.fd = *fd, .events = POLLIN};
            if (poll(&p, 1, 0) == 1) {
                char b[256];
                ssize_t r = recv(*fd, b, sizeof b, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || (p.revents & (POLLERR | POLLHUP))) {
                    S.closed_by_peer++;
                    drop(fd);
                }
            }
        }
        if (*fd >= 0 && s >= idle) { /* slow: one byte a second, never a whole handshake */
            if (send(*fd, "F", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) S.bytes++;
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
                S.closed_by_peer++;
                drop(fd);
            }
        }
        if (*fd < 0 && opened < rate) {
            *fd = open_one(t->port, s % sources);
            opened++;
        }
    }
}

int main(int argc, char **argv)
{
    const char *ports = NULL;
    int idle = 100, slow = 100, rate = 50, sources = 50, duration = -1;
    const bench_opt opts[] = {{"ports", BA_STR, &ports}, {"idle", BA_INT, &idle},       {"slow", BA_INT, &slow},
                              {"rate", BA_INT, &rate},   {"sources", BA_INT, &sources}, {"duration", BA_INT, &duration}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (!ports || duration < 0) cli_die(2, "--ports FILE and --duration S are required");
    check_range("--idle", idle, 0, 10000);
    check_range("--slow", slow, 0, 10000);
    check_range("--rate", rate, 1, 10000);
    check_range("--sources", sources, 1, 250);
    check_range("--duration", duration, 1, 7 * 86400);
    int slots = idle + slow;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)(slots * 8 + 64))
        fprintf(stderr, "soak_flood: note: %llu file descriptors allow fewer than %d connections on 8 ports\n",
                (unsigned long long)rl.rlim_cur, slots * 8);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    static target t[MAX_PORTS];
    int nt = 0;
    double end = now_s() + duration;
    while (!quit && now_s() < end) {
        double t0 = now_s();
        read_ports(ports, t, &nt, slots);
        for (int i = 0; i < nt; i++) tend(&t[i], idle, slots, rate, sources);
        double left = 1.0 - (now_s() - t0);
        if (left > 0) {
            struct timespec ts = {0, (long)(left * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < nt; i++) {
        for (int s = 0; s < slots; s++) drop(&t[i].fd[s]);
        free(t[i].fd);
    }
    printf("soak_flood: %d ports flooded; %lld connections opened (%lld failed to open), %lld closed by the "
           "servers, %lld slow bytes sent, at most %d open at once\n",
           nt, S.made, S.failed, S.closed_by_peer, S.bytes, S.peak);
    return 0;
}
