/* layout.c - the job's processes: their roles, ranks and endpoints (collective and PS
 * mode), the ports they get, endpoints.log and the "Distributed Envs" table. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fleetrun.h"

/* The first fixed port: --start_port, else $FLAGS_START_PORT, else def. */
static int start_port(int def)
{
    int64_t v;
    if (J.start_port > 0) return J.start_port;
    if (fl__env_int("FLAGS_START_PORT", def, 1, 65535, &v) != FL_OK) usage_error("%s", fl_last_error());
    return (int)v;
}
/* Fixed ports: asked for, or needed (with --ips on several machines fleetrun cannot probe the
 * others' ports; with --master every node picks its own and reports them). */
static int fixed_ports(void) { return (J.multi && !J.rdzv) || J.start_port > 0 || fr_env("FLAGS_START_PORT", NULL); }

/* Which of the job's IPs is this machine: the only one, or --node_ip / $POD_IP. */
static const char *this_node(const char **ips, int n, const char *what)
{
    if (n == 1) {
        if (J.node_ip && strcmp(J.node_ip, ips[0]))
            usage_error("--node_ip %s is not among the IPs of %s (%s)", J.node_ip, what, ips[0]);
        return ips[0];
    }
    const char *me = J.node_ip ? J.node_ip : fr_env("POD_IP", NULL), *src = J.node_ip ? "--node_ip" : "POD_IP";
    if (!me)
        usage_error("%s name %d machines: tell fleetrun which one this is with --node_ip IP "
                    "(or the POD_IP environment variable)",
                    what, n);
    fr_check_ip(src, me);
    for (int i = 0; i < n; i++)
        if (!strcmp(ips[i], me)) return ips[i];
    usage_error("this machine's IP %s (from %s) is not among the IPs of %s", me, src, what);
    return NULL;
}

static void alloc_procs(int n)
{
    J.n = n;
    J.p = calloc((size_t)n, sizeof *J.p);
    if (!J.p) fatal("out of memory");
}

void fr_build_collective(void)
{
    const char *ips[MAX_LOCAL];
    int nn = fr_split("--ips", J.ips ? J.ips : "127.0.0.1", ips, MAX_LOCAL);
    for (int i = 0; i < nn; i++) {
        fr_check_ip("--ips", ips[i]);
        for (int k = 0; k < i; k++)
            if (!strcmp(ips[i], ips[k])) usage_error("--ips lists %s twice", ips[i]);
    }
    const char *me = this_node(ips, nn, "--ips");
    if (J.nproc < 0) J.nproc = 1;
    if ((long)nn * J.nproc > MAX_TOTAL) usage_error("more than %d ranks in total", MAX_TOTAL);
    J.multi = nn > 1;
    int port0 = fixed_ports() ? start_port(6070) : 0;
    if (port0 && port0 + J.nproc - 1 > 65535)
        usage_error("--start_port %d + %d processes runs past port 65535", port0, J.nproc);
    alloc_procs(nn * J.nproc);
    for (int k = 0; k < nn; k++)
        for (int j = 0; j < J.nproc; j++) {
            proc_t *p = &J.p[k * J.nproc + j];
            p->role = WORKER, p->rank = k * J.nproc + j, p->local = j, p->is_local = ips[k] == me;
            snprintf(p->ip, sizeof p->ip, "%s", ips[k]);
            p->want_port = port0 ? port0 + j : 0;
        }
    J.total[WORKER] = J.n;
}

void fr_build_ps(void)
{
    const char *lst[2][MAX_LOCAL], *ips[2 * MAX_LOCAL];
    const char *list[2] = {J.workers, J.servers}, *flag[2] = {"--workers", "--servers"};
    int *num[2] = {&J.worker_num, &J.server_num}, cnt[2], nips = 0, loc[2] = {0, 0};
    if (J.ips && strchr(J.ips, ','))
        usage_error("--ips is for collective mode; in PS mode give the endpoints with --servers and --workers");
    for (int r = WORKER; r <= SERVER; r++) {
        cnt[r] = list[r] ? fr_split(flag[r], list[r], lst[r], MAX_LOCAL) : *num[r] > 0 ? *num[r] : 1;
        if (list[r] && *num[r] > 0 && *num[r] != cnt[r])
            usage_error("%s_num %d does not match the %d endpoints of %s", r ? "--server" : "--worker", *num[r], cnt[r],
                        flag[r]);
        *num[r] = J.total[r] = cnt[r];
    }
    alloc_procs(cnt[SERVER] + cnt[WORKER]);
    const char *defip = J.node_ip ? J.node_ip : J.ips ? J.ips : "127.0.0.1";
    fr_check_ip(J.node_ip ? "--node_ip" : "--ips", defip);
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        int r = i < cnt[SERVER] ? SERVER : WORKER;
        p->role = r, p->rank = r == SERVER ? i : i - cnt[SERVER];
        const char *s = list[r] ? lst[r][p->rank] : defip, *c = strchr(s, ':');
        size_t il = c ? (size_t)(c - s) : strlen(s);
        snprintf(p->ip, sizeof p->ip, "%.*s", (int)(il < sizeof p->ip ? il : 0), s);
        fr_check_ip(flag[r], il < sizeof p->ip ? p->ip : s);
        if (c) p->want_port = (int)fr_parse_long(flag[r], c + 1, 1, 65535, "endpoints IP[:PORT] with a port in 1..65535");
        int seen = 0;
        for (int k = 0; k < nips; k++) seen |= !strcmp(ips[k], p->ip);
        if (!seen) ips[nips++] = p->ip;
    }
    const char *me = this_node(ips, nips, "--servers/--workers");
    J.multi = nips > 1;
    int port0 = start_port(6170);
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        p->is_local = !strcmp(p->ip, me);
        if (p->is_local) p->local = loc[p->role]++;
        if (!p->want_port && fixed_ports() && (p->want_port = port0 + i) > 65535)
            usage_error("start port %d + %d processes runs past port 65535", port0, J.n);
        for (int k = 0; k < i; k++)
            if (p->want_port && J.p[k].want_port == p->want_port && !strcmp(J.p[k].ip, p->ip))
                usage_error("endpoint %s:%d is given twice in --servers/--workers", p->ip, p->want_port);
    }
}

/* Binds every local endpoint (port 0: a free port chosen by the kernel) and keeps the socket
 * open until that process is forked, so no two of our processes get the same port. */
void fr_claim_ports(void)
{
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        p->probe = -1, p->port = p->want_port;
        if (p->is_local) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
            socklen_t al = sizeof a;
            inet_pton(AF_INET, p->ip, &a.sin_addr);
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), e, one = 1;
            /* A fixed port that a process of a previous run (or of the previous attempt of a
             * restart) left in TIME_WAIT is free again; a listening socket still fails the
             * bind. */
            if (fd >= 0 && p->port) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
                e = errno, fatal("%s %d cannot have %s:%d: %s%s", role_name[p->role], p->rank, p->ip, p->port, strerror(e),
                                 e == EADDRINUSE      ? " (another program holds it; choose other ports "
                                                        "or let fleetrun pick free ones)"
                                 : e == EADDRNOTAVAIL ? " (that IP is not an address of this machine)"
                                                      : "");
            getsockname(fd, (struct sockaddr *)&a, &al);
            p->port = ntohs(a.sin_port), p->probe = fd;
        }
        snprintf(p->ep, sizeof p->ep, "%s:%d", p->ip, p->port);
    }
}

void fr_layout_local(const char *ip)
{
    int cnt[2] = {J.ps ? (J.worker_num > 0 ? J.worker_num : 1) : (J.nproc > 0 ? J.nproc : 1),
                  J.ps ? (J.server_num > 0 ? J.server_num : 1) : 0};
    int port0 = fixed_ports() ? start_port(J.ps ? 6170 : 6070) : 0, m = 0;
    if (port0 && port0 + cnt[0] + cnt[1] - 1 > 65535)
        usage_error("start port %d + %d processes runs past port 65535", port0, cnt[0] + cnt[1]);
    J.nproc = J.ps ? -1 : cnt[WORKER];
    free(J.p);
    alloc_procs(cnt[SERVER] + cnt[WORKER]);
    for (int r = SERVER; r >= WORKER; r--) /* servers first, then workers (ports in that order, as Paddle) */
        for (int j = 0; j < cnt[r]; j++, m++) {
            proc_t *p = &J.p[m];
            p->role = r, p->rank = p->local = j, p->is_local = 1, p->probe = -1;
            snprintf(p->ip, sizeof p->ip, "%s", ip);
            p->want_port = port0 ? port0 + m : 0;
        }
}

void fr_layout_apply(const fr_node *nodes, int nn, int me)
{
    long total = 0;
    for (int k = 0; k < nn; k++) total += nodes[k].cnt[WORKER] + nodes[k].cnt[SERVER];
    if (total > MAX_TOTAL) fatal("the rendezvous gave %ld processes, more than %d", total, MAX_TOTAL);
    proc_t *np = calloc((size_t)total, sizeof *np);
    if (!np) fatal("out of memory");
    int m = 0;
    J.total[WORKER] = J.total[SERVER] = 0;
    for (int r = J.ps ? SERVER : WORKER; r >= WORKER; r--)
        for (int k = 0; k < nn; k++)
            for (int j = 0; j < nodes[k].cnt[r]; j++) {
                proc_t *q = &np[m++];
                q->role = r, q->rank = J.total[r]++, q->local = j, q->node = k, q->is_local = k == me, q->probe = -1;
                snprintf(q->ip, sizeof q->ip, "%s", nodes[k].ip);
                q->want_port = q->port = nodes[k].port[r][j];
                for (int i = 0; q->is_local && i < J.n; i++) /* this node's socket holding the port */
                    if (J.p[i].role == r && J.p[i].local == j) q->want_port = J.p[i].want_port, q->probe = J.p[i].probe;
                snprintf(q->ep, sizeof q->ep, "%s:%d", q->ip, q->port);
            }
    free(J.p);
    J.p = np, J.n = m, J.node_rank = me;
}

void fr_layout_rearm(void)
{
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        p->pid = 0, p->reaped = p->status = p->stopped = 0, p->probe = -1;
    }
    J.tee = NULL;
}

char *fr_join_eps(int role, const char *sep)
{
    fl_buf b = {0};
    for (int i = 0; i < J.n; i++)
        if (J.p[i].role == role) fl__buf_printf(&b, "%s%s", b.len ? sep : "", J.p[i].ep);
    fl__buf_put(&b, "", 1);
    if (b.failed) fatal("out of memory");
    return b.p;
}

void fr_write_endpoints_log(void) /* as Paddle: a header line, then one endpoint a line */
{
    char *path = fr_fmt("%s/endpoints.log", J.log_dir), *w = fr_join_eps(WORKER, "\n"), *s = fr_join_eps(SERVER, "\n");
    char *text = J.ps ? fr_fmt("PADDLE_PSERVERS_IP_PORT_LIST: \n%s\nPADDLE_TRAINER_ENDPOINTS: \n%s\n", s, w)
                      : fr_fmt("PADDLE_TRAINER_ENDPOINTS: \n%s\n", w);
    int fd = fr_open_log(path, 1);
    if (fr_write_all(fd, text, strlen(text)) != 0) fatal("cannot write %s: %s", path, strerror(errno));
    close(fd);
    free(path), free(w), free(s), free(text);
}

#define KW 30
#define VW 58
static void row(const char *k, const char *v) /* a table row; long values wrap after commas */
{
    size_t len = strlen(v), off = 0;
    do {
        size_t take = len - off, c = VW;
        if (take > VW)
            for (take = VW; c > VW / 2 && off + c <= len; c--)
                if (v[off + c - 1] == ',') {
                    take = c;
                    break;
                }
        fprintf(stderr, "    | %-*s %-*.*s |\n", KW, off ? "" : k, VW, (int)take, v + off);
        off += take;
    } while (off < len);
}

void fr_print_table(void) /* Paddle's "Distributed Envs" box; never the secret */
{
    char num[5][80], line[KW + VW + 4];
    memset(line, '=', sizeof line - 1), line[sizeof line - 1] = 0;
    snprintf(num[0], sizeof num[0], "%d", J.ps ? J.server_num : J.nproc);
    snprintf(num[1], sizeof num[1], "%d", J.total[WORKER]);
    snprintf(num[2], sizeof num[2], "%d of %d", J.node_rank, J.nnodes);
    snprintf(num[3], sizeof num[3], "%s:%d%s", J.master_ip, J.master_port, J.is_host ? " (hosted by this node)" : "");
    snprintf(num[4], sizeof num[4], "%d", J.max_restart);
    const char *me = "";
    for (int i = J.n - 1; i >= 0; i--) me = J.p[i].is_local ? J.p[i].ip : me;
    fprintf(stderr, "    +%s+\n    | %-*s %-*s |\n", line, KW, "Distributed Envs", VW, "Value");
    memset(line, '-', sizeof line - 1);
    fprintf(stderr, "    +%s+\n", line);
    row("mode", J.ps ? "ps (parameter server)" : "collective");
    row(J.ps ? "server_num (this node)" : "nproc_per_node", num[0]);
    if (J.rdzv) row("master", num[3]), row("node rank", num[2]);
    if (J.ps) row("PADDLE_PSERVERS_IP_PORT_LIST", J.server_list);
    else if (!J.rdzv) row("ips", J.ips ? J.ips : "127.0.0.1");
    row("node_ip", me);
    row("PADDLE_TRAINERS_NUM", num[1]);
    row("PADDLE_TRAINER_ENDPOINTS", J.worker_list);
    if (J.ndev) row("FLAGS_selected_gpus", J.devices);
    row("PADDLE_JOB_ID", J.job_id);
    if (J.max_restart) row("max_restart", num[4]);
    if (J.log_level) row("FLEET_LOG_LEVEL", J.log_level);
    row("log_dir", J.log_dir);
    row("job secret", J.secret_how);
    row("program", J.prog);
    memset(line, '=', sizeof line - 1);
    fprintf(stderr, "    +%s+\n", line);
}
