/*
 * fleetrun - starts the processes of a distributed Fleet job on this machine, as Paddle
 * 2.x's `fleetrun` (python -m paddle.distributed.launch) and 1.8's `launch_ps` do, and
 * watches them: the first failure stops the whole job and is reported with its log.
 *
 *   fleetrun [--nproc_per_node N | --gpus LIST] [--ips IP,...] [--log_dir DIR] PROG ARGS...
 *   fleetrun --server_num S --worker_num W [--log_dir DIR] PROG ARGS...
 *
 * Exit status: 0 every process succeeded; 1 the first failure was an exit code != 0, or the
 * job could not be started; 128+N the first failure was a death by signal N, or fleetrun
 * itself received signal N; 2 usage error.  See docs/fleetrun.md.
 *
 * No orphans: each process runs in its own process group with PR_SET_PDEATHSIG(SIGKILL);
 * fleetrun is a child subreaper (orphaned grandchildren come back to it) and keeps a small
 * guard process that SIGKILLs every group of the job if fleetrun itself is SIGKILLed.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base_internal.h"
#include "fleet/net.h"

#define CLI_NAME "fleetrun"
#define CLI_HELP_HINT "(run 'fleetrun --help' for the flags)"
#include "cli.h"

extern char **environ;

#define MAX_LOCAL 1024   /* processes of one role on one node; devices in a list */
#define MAX_TOTAL 16384  /* ranks in the whole job */
#define TAIL_LINES 20    /* log lines shown for the root cause */
#define KILL_WAIT_S 10.0 /* after SIGKILL, how long to wait for the kernel to reap */

enum { WORKER, SERVER };
static const char *const role_name[] = {"worker", "server"};
enum { PH_RUN, PH_SERVER_WAIT, PH_TERM, PH_KILL };

typedef struct {
    int role, rank, local;       /* local: position among this node's processes */
    char ip[INET_ADDRSTRLEN];
    int port, is_local, probe;   /* probe: socket holding the port until the fork, or -1 */
    char ep[INET_ADDRSTRLEN + 8];
    char log[PATH_MAX];
    off_t log_start;             /* size of the (appended) log before this run */
    pid_t pid;
    int reaped, status, stopped; /* stopped: last signal fleetrun sent it (0: none) */
} proc_t;

static struct {
    int nproc, server_num, worker_num, start_port; /* -1: not given */
    const char *devices, *dev_flag, *ips, *node_ip, *log_dir, *servers, *workers, *run_mode;
    double grace, server_grace;
    char **argv;
    int ps, multi, n, ndev, nsplit;
    proc_t *p; /* every rank of the job (servers first in PS mode); only is_local ones start */
    char *server_list, *worker_list, *split_buf[8], *secret_env, prog[PATH_MAX];
    const char *dev[MAX_LOCAL], *secret_how;
    int sfd, tee_rd, tee_log, guard_fd;
    proc_t *tee;
    pid_t guard_pid;
    double t0;
} J = {.nproc = -1, .server_num = -1, .worker_num = -1, .start_port = -1, .log_dir = "log",
       .grace = 5, .server_grace = 30, .tee_rd = -1, .guard_fd = -1, .guard_pid = -1};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Exits with code 2 (usage: the flag is named, with the expected form) or 1 (runtime). */
#define usage_error(...) cli_die(2, __VA_ARGS__)
#define fatal(...) cli_die(1, __VA_ARGS__)

static char *fmt(const char *f, ...) FL_PRINTF(1, 2);
static char *fmt(const char *f, ...)
{
    char *s;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    if (n < 0) fatal("out of memory");
    return s;
}

static void usage(void)
{
    puts("usage: fleetrun [flags] PROG [ARGS...]        (flags: --name VALUE or --name=VALUE)\n"
         "collective mode (default):\n"
         "  --nproc_per_node N   processes on this node (default: number of devices, else 1)\n"
         "  --gpus|--selected_gpus|--devices LIST  device ids, e.g. 0,1,2,3 -> FLAGS_selected_gpus\n"
         "  --ips IP,IP,...      the job's machines, same order on each; --node_ip IP names this\n"
         "                       one (default $POD_IP)\n"
         "  --start_port P       fixed ports P, P+1, ... (default: free ports on one machine;\n"
         "                       $FLAGS_START_PORT or 6070 on several)\n"
         "parameter-server mode (any of these flags):\n"
         "  --server_num S --worker_num W   S servers and W workers here (default 1 each)\n"
         "  --servers IP[:PORT],... --workers IP[:PORT],...   endpoints (fixed ports from 6170)\n"
         "  --server_grace_s SECS  after the workers succeed, wait this long for the servers (30)\n"
         "  --log_dir DIR          workerlog.N, serverlog.N, endpoints.log (default log)\n"
         "  --grace_s SECS         SIGTERM-to-SIGKILL grace when stopping the job (default 5)\n"
         "  --run_mode collective|ps\n"
         "Processes get Paddle's variables (PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS, ...) and\n"
         "the job secret FLEET_JOB_SECRET (generated, or FLEET_JOB_SECRET / FLEET_JOB_SECRET_FILE\n"
         "passed through). Exit: 0 ok, 1 a process failed, 128+N killed by signal N, 2 usage.");
}

/* ---------------------------------------------------------------- flags, endpoints */

static long parse_long(const char *flag, const char *v, long lo, long hi, const char *form)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end || errno || x < lo || x > hi)
        usage_error("%s expects %s, got '%s'", flag, form, v);
    return x;
}

static void parse_args(int argc, char **argv)
{
    enum { A_STR, A_DEV, A_NUM, A_PORT, A_SECS };
    static const struct { const char *name; int kind; void *dst; } opts[] = {
        {"--nproc_per_node", A_NUM, &J.nproc}, {"--server_num", A_NUM, &J.server_num},
        {"--worker_num", A_NUM, &J.worker_num}, {"--start_port", A_PORT, &J.start_port},
        {"--grace_s", A_SECS, &J.grace},        {"--server_grace_s", A_SECS, &J.server_grace},
        {"--gpus", A_DEV, NULL},                {"--selected_gpus", A_DEV, NULL},
        {"--devices", A_DEV, NULL},             {"--ips", A_STR, &J.ips},
        {"--node_ip", A_STR, &J.node_ip},       {"--log_dir", A_STR, &J.log_dir},
        {"--servers", A_STR, &J.servers},       {"--workers", A_STR, &J.workers},
        {"--run_mode", A_STR, &J.run_mode}};
    enum { NOPTS = sizeof opts / sizeof opts[0] };
    struct option longopts[NOPTS + 2];
    for (int k = 0; k < NOPTS; k++) longopts[k] = (struct option){opts[k].name + 2, required_argument, NULL, k};
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){0};
    char name[64];
    const char *v;
    int k;
    cli_begin(1);
    while ((k = cli_next(argc, argv, "h", longopts, name, &v)) != -1) {
        if (k == 'h') usage(), exit(0);
        if (k == '?')
            usage_error("unknown flag '%s' (flags are --name VALUE or --name=VALUE; the program "
                        "and its arguments come after the flags)", name);
        if (!*v) usage_error("%s expects a value, got an empty string", name);
        char *end;
        double d;
        switch (opts[k].kind) {
        case A_NUM:
            *(int *)opts[k].dst = (int)parse_long(name, v, 1, MAX_LOCAL, "a positive integer (1..1024)");
            break;
        case A_PORT: *(int *)opts[k].dst = (int)parse_long(name, v, 1, 65535, "a port number (1..65535)"); break;
        case A_SECS:
            errno = 0, d = strtod(v, &end);
            if (*end || errno || !isfinite(d) || d < 0 || d > 86400)
                usage_error("%s expects seconds in [0, 86400], e.g. 5 or 0.5, got '%s'", name, v);
            *(double *)opts[k].dst = d;
            break;
        case A_DEV: J.devices = v, J.dev_flag = opts[k].name; break;
        default: *(const char **)opts[k].dst = v;
        }
    }
    int i = optind;
    if (i >= argc) usage_error("no program given: fleetrun [flags] PROG [ARGS...]");
    J.argv = argv + i;
}

/* Splits a comma list into trimmed items (copies kept in J.split_buf); returns the count. */
static int split(const char *flag, const char *s, const char **out, int max)
{
    char *b = fl__strdup(s);
    if (!b) fatal("out of memory");
    J.split_buf[J.nsplit++] = b;
    int n = 0;
    for (char *save = NULL, *t = strtok_r(b, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*t)) t++;
        char *e = t + strlen(t);
        while (e > t && isspace((unsigned char)e[-1])) *--e = 0;
        if (!*t) continue;
        if (n == max) usage_error("%s lists more than %d entries", flag, max);
        out[n++] = t;
    }
    if (!n) usage_error("%s expects a comma-separated list, got '%s'", flag, s);
    return n;
}

static void check_ip(const char *flag, const char *ip)
{
    struct in_addr a;
    if (strlen(ip) >= INET_ADDRSTRLEN || inet_pton(AF_INET, ip, &a) != 1)
        usage_error("%s: '%s' is not an IPv4 address (expected the form 10.0.0.1)", flag, ip);
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = NULL;
    fl__env_str(name, def, &v);
    return v;
}

/* The first fixed port: --start_port, else $FLAGS_START_PORT, else def. */
static int start_port(int def)
{
    int64_t v;
    if (J.start_port > 0) return J.start_port;
    if (fl__env_int("FLAGS_START_PORT", def, 1, 65535, &v) != FL_OK) usage_error("%s", fl_last_error());
    return (int)v;
}
static int fixed_ports(void) { return J.multi || J.start_port > 0 || env_or("FLAGS_START_PORT", NULL); }

/* Which of the job's IPs is this machine: the only one, or --node_ip / $POD_IP. */
static const char *this_node(const char **ips, int n, const char *what)
{
    if (n == 1) {
        if (J.node_ip && strcmp(J.node_ip, ips[0]))
            usage_error("--node_ip %s is not among the IPs of %s (%s)", J.node_ip, what, ips[0]);
        return ips[0];
    }
    const char *me = J.node_ip ? J.node_ip : env_or("POD_IP", NULL), *src = J.node_ip ? "--node_ip" : "POD_IP";
    if (!me)
        usage_error("%s name %d machines: tell fleetrun which one this is with --node_ip IP "
                    "(or the POD_IP environment variable)", what, n);
    check_ip(src, me);
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

static void build_collective(void)
{
    const char *ips[MAX_LOCAL];
    int nn = split("--ips", J.ips ? J.ips : "127.0.0.1", ips, MAX_LOCAL);
    for (int i = 0; i < nn; i++) {
        check_ip("--ips", ips[i]);
        for (int k = 0; k < i; k++)
            if (!strcmp(ips[i], ips[k])) usage_error("--ips lists %s twice", ips[i]);
    }
    const char *me = this_node(ips, nn, "--ips");
    if (J.devices) {
        J.ndev = split(J.dev_flag, J.devices, J.dev, MAX_LOCAL);
        for (int i = 0; i < J.ndev; i++) parse_long(J.dev_flag, J.dev[i], 0, 1 << 20, "device ids, e.g. 0,1,2,3");
        if (J.nproc > 0 && J.nproc != J.ndev)
            usage_error("--nproc_per_node %d does not match %s %s (%d devices); give one of them", J.nproc,
                        J.dev_flag, J.devices, J.ndev);
        J.nproc = J.ndev;
    }
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
            p->port = port0 ? port0 + j : 0;
        }
}

static void build_ps(void)
{
    const char *lst[2][MAX_LOCAL], *ips[2 * MAX_LOCAL];
    const char *list[2] = {J.workers, J.servers}, *flag[2] = {"--workers", "--servers"};
    int *num[2] = {&J.worker_num, &J.server_num}, cnt[2], nips = 0, loc[2] = {0, 0};
    if (J.ips && strchr(J.ips, ','))
        usage_error("--ips is for collective mode; in PS mode give the endpoints with --servers and --workers");
    if (J.devices) usage_error("%s is for collective mode, not PS mode", J.dev_flag);
    if (J.nproc > 0) usage_error("--nproc_per_node is for collective mode; in PS mode use --worker_num");
    for (int r = WORKER; r <= SERVER; r++) {
        cnt[r] = list[r] ? split(flag[r], list[r], lst[r], MAX_LOCAL) : *num[r] > 0 ? *num[r] : 1;
        if (list[r] && *num[r] > 0 && *num[r] != cnt[r])
            usage_error("%s_num %d does not match the %d endpoints of %s", r ? "--server" : "--worker", *num[r],
                        cnt[r], flag[r]);
        *num[r] = cnt[r];
    }
    alloc_procs(cnt[SERVER] + cnt[WORKER]);
    const char *defip = J.node_ip ? J.node_ip : J.ips ? J.ips : "127.0.0.1";
    check_ip(J.node_ip ? "--node_ip" : "--ips", defip);
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        int r = i < cnt[SERVER] ? SERVER : WORKER;
        p->role = r, p->rank = r == SERVER ? i : i - cnt[SERVER];
        const char *s = list[r] ? lst[r][p->rank] : defip, *c = strchr(s, ':');
        size_t il = c ? (size_t)(c - s) : strlen(s);
        snprintf(p->ip, sizeof p->ip, "%.*s", (int)(il < sizeof p->ip ? il : 0), s);
        check_ip(flag[r], il < sizeof p->ip ? p->ip : s);
        if (c) p->port = (int)parse_long(flag[r], c + 1, 1, 65535, "endpoints IP[:PORT] with a port in 1..65535");
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
        if (!p->port && fixed_ports() && (p->port = port0 + i) > 65535)
            usage_error("start port %d + %d processes runs past port 65535", port0, J.n);
        for (int k = 0; k < i; k++)
            if (p->port && J.p[k].port == p->port && !strcmp(J.p[k].ip, p->ip))
                usage_error("endpoint %s:%d is given twice in --servers/--workers", p->ip, p->port);
    }
}

/* Binds every local endpoint (port 0: a free port chosen by the kernel) and keeps the socket
 * open until that process is forked, so no two of our processes get the same port. */
static void claim_ports(void)
{
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        p->probe = -1;
        if (p->is_local) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
            socklen_t al = sizeof a;
            inet_pton(AF_INET, p->ip, &a.sin_addr);
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), e;
            if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
                e = errno, fatal("%s %d cannot have %s:%d: %s%s", role_name[p->role], p->rank, p->ip, p->port,
                                 strerror(e), e == EADDRINUSE ? " (another program holds it; choose other ports "
                                 "or let fleetrun pick free ones)" : e == EADDRNOTAVAIL ?
                                 " (that IP is not an address of this machine)" : "");
            getsockname(fd, (struct sockaddr *)&a, &al);
            p->port = ntohs(a.sin_port), p->probe = fd;
        }
        snprintf(p->ep, sizeof p->ep, "%s:%d", p->ip, p->port);
    }
}

static char *join_eps(int role, const char *sep)
{
    fl_buf b = {0};
    for (int i = 0; i < J.n; i++)
        if (J.p[i].role == role) fl__buf_printf(&b, "%s%s", b.len ? sep : "", J.p[i].ep);
    fl__buf_put(&b, "", 1);
    if (b.failed) fatal("out of memory");
    return b.p;
}

/* ---------------------------------------------------------------- secret, program, logs */

/* The secret's format and checks are the net layer's (fl_net_secret_*), so a secret that
 * fleetrun accepts is one the processes accept. */
static void setup_secret(void)
{
    const char *s = env_or("FLEET_JOB_SECRET", NULL), *f = env_or("FLEET_JOB_SECRET_FILE", NULL);
    fl_net_secret sec;
    if (s && f) usage_error("both FLEET_JOB_SECRET and FLEET_JOB_SECRET_FILE are set; set only one");
    if (s || f) { /* passed through; checked now so that a bad one fails before anything starts */
        int st = s ? fl_net_secret_from_hex(s, "environment variable FLEET_JOB_SECRET", &sec)
                   : fl_net_secret_from_file(f, &sec);
        fl_net_secret_clear(&sec);
        if (st != FL_OK) usage_error("%s (make a secret with: openssl rand -hex 32)", fl_last_error());
        J.secret_env = s ? fmt("FLEET_JOB_SECRET=%s", s) : fmt("FLEET_JOB_SECRET_FILE=%s", f);
        J.secret_how = s ? "FLEET_JOB_SECRET, from fleetrun's environment"
                         : "FLEET_JOB_SECRET_FILE, from fleetrun's environment";
        return;
    }
    if (J.multi)
        usage_error("a job on several machines needs the same secret on all of them: set FLEET_JOB_SECRET "
                    "(64 hex characters) or FLEET_JOB_SECRET_FILE (a 0600 file) in fleetrun's environment "
                    "on each machine");
    if (fl_net_secret_generate(&sec) != FL_OK) fatal("%s", fl_last_error());
    J.secret_env = fmt("FLEET_JOB_SECRET=%064d", 0);
    fl_net_secret_to_hex(&sec, J.secret_env + strlen("FLEET_JOB_SECRET="), 2 * 32 + 1);
    fl_net_secret_clear(&sec);
    J.secret_how = "generated (32 random bytes) -> FLEET_JOB_SECRET, not shown";
}

static void resolve_program(void)
{
    const char *name = J.argv[0], *path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
    struct stat st;
    snprintf(J.prog, sizeof J.prog, "%s", name);
    for (const char *d = path; !strchr(name, '/');) {
        size_t dl = strcspn(d, ":");
        snprintf(J.prog, sizeof J.prog, "%.*s%s%s", (int)dl, d, dl ? "/" : "", name);
        if (stat(J.prog, &st) == 0 && S_ISREG(st.st_mode) && access(J.prog, X_OK) == 0) return;
        if (!d[dl])
            usage_error("program '%s' not found in PATH (give its path, e.g. ./%s; a script runs through "
                        "its interpreter: fleetrun ... python3 %s)", name, name, name);
        d += dl + 1;
    }
    if (stat(J.prog, &st) != 0) usage_error("program '%s' does not exist", name);
    if (!S_ISREG(st.st_mode) || access(J.prog, X_OK) != 0)
        usage_error("program '%s' is not an executable file (a script runs through its interpreter: "
                    "fleetrun ... python3 %s)", name, name);
}

static void mkdirs(const char *dir) /* mkdir -p, without a shell */
{
    char b[PATH_MAX];
    struct stat st;
    if (snprintf(b, sizeof b, "%s", dir) >= (int)sizeof b) fatal("--log_dir is too long");
    for (char *s = b + 1;; s++) {
        char c = *s;
        if (c != '/' && c) continue;
        *s = 0;
        if (mkdir(b, 0755) != 0 && errno != EEXIST) fatal("cannot create log directory %s: %s", b, strerror(errno));
        if (!(*s = c)) break;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("--log_dir %s is not a directory", dir);
}

static int open_log(const char *path, int trunc)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (trunc ? O_TRUNC : O_APPEND), 0644);
    if (fd < 0) fatal("cannot open log file %s: %s", path, strerror(errno));
    return fd;
}

static int write_all(int fd, const void *buf, size_t n)
{
    for (const char *p = buf; n;) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static void write_endpoints_log(void) /* as Paddle: a header line, then one endpoint a line */
{
    char *path = fmt("%s/endpoints.log", J.log_dir), *w = join_eps(WORKER, "\n"), *s = join_eps(SERVER, "\n");
    char *text = J.ps ? fmt("PADDLE_PSERVERS_IP_PORT_LIST: \n%s\nPADDLE_TRAINER_ENDPOINTS: \n%s\n", s, w)
                      : fmt("PADDLE_TRAINER_ENDPOINTS: \n%s\n", w);
    int fd = open_log(path, 1);
    if (write_all(fd, text, strlen(text)) != 0) fatal("cannot write %s: %s", path, strerror(errno));
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
            for (take = VW; c > VW / 2; c--)
                if (v[off + c - 1] == ',') {
                    take = c;
                    break;
                }
        fprintf(stderr, "    | %-*s %-*.*s |\n", KW, off ? "" : k, VW, (int)take, v + off);
        off += take;
    } while (off < len);
}

static void print_table(void) /* Paddle's "Distributed Envs" box; never the secret */
{
    char num[3][16], line[KW + VW + 4];
    memset(line, '=', sizeof line - 1), line[sizeof line - 1] = 0;
    snprintf(num[0], 16, "%d", J.ps ? J.server_num : J.nproc);
    snprintf(num[1], 16, "%d", J.ps ? J.worker_num : J.n);
    const char *me = "";
    for (int i = J.n - 1; i >= 0; i--) me = J.p[i].is_local ? J.p[i].ip : me;
    fprintf(stderr, "    +%s+\n    | %-*s %-*s |\n", line, KW, "Distributed Envs", VW, "Value");
    memset(line, '-', sizeof line - 1);
    fprintf(stderr, "    +%s+\n", line);
    row("mode", J.ps ? "ps (parameter server)" : "collective");
    row(J.ps ? "server_num" : "nproc_per_node", num[0]);
    if (J.ps) row("PADDLE_PSERVERS_IP_PORT_LIST", J.server_list);
    else row("ips", J.ips ? J.ips : "127.0.0.1");
    row("node_ip", me);
    row("PADDLE_TRAINERS_NUM", num[1]);
    row("PADDLE_TRAINER_ENDPOINTS", J.worker_list);
    if (J.ndev) row("FLAGS_selected_gpus", J.devices);
    row("log_dir", J.log_dir);
    row("job secret", J.secret_how);
    row("program", J.prog);
    memset(line, '=', sizeof line - 1);
    fprintf(stderr, "    +%s+\n", line);
}

/* ---------------------------------------------------------------- processes */

/* The guard outlives a `kill -9 fleetrun`: it reads the pid of every process fleetrun starts
 * from a pipe; end-of-file without the final 0 means fleetrun died, and it SIGKILLs each of
 * their process groups (grandchildren too, which PR_SET_PDEATHSIG does not reach). */
static void start_guard(void)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) fatal("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        static int32_t pids[2 * MAX_LOCAL + 2];
        int n = 0, k = 0, nul = open("/dev/null", O_RDWR);
        int32_t v;
        sigset_t none;
        signal(SIGINT, SIG_IGN), signal(SIGTERM, SIG_IGN), signal(SIGHUP, SIG_IGN);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(nul, 0), dup2(nul, 1), dup2(fds[0], 3);
        close_range(4, ~0U, 0);
        prctl(PR_SET_NAME, "fleetrun-guard");
        for (ssize_t r; (r = read(3, &v, sizeof v)) == (ssize_t)sizeof v || (r < 0 && errno == EINTR);) {
            if (r > 0 && v == 0) _exit(0);
            if (r > 0 && n < (int)(sizeof pids / sizeof pids[0])) pids[n++] = v;
        }
        for (int i = 0; i < n; i++) k += kill(-pids[i], SIGKILL) == 0, kill(pids[i], SIGKILL);
        if (k) dprintf(2, "fleetrun-guard: fleetrun died; killed %d process group(s) of its job\n", k);
        _exit(0);
    }
    close(fds[0]);
    J.guard_fd = fds[1], J.guard_pid = pid;
}

static void guard_send(int32_t v)
{
    if (J.guard_fd >= 0 && write_all(J.guard_fd, &v, sizeof v) != 0) close(J.guard_fd), J.guard_fd = -1;
}

/* Variables fleetrun sets: removed from the inherited environment (POD_IP only in PS mode). */
static int managed(const char *e)
{
    static const char *const names[] = {
        "PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS",
        "PADDLE_RANK_IN_NODE", "PADDLE_TRAINING_ROLE", "TRAINING_ROLE", "PADDLE_PSERVERS_IP_PORT_LIST",
        "PADDLE_PORT", "FLAGS_selected_gpus", "FLEET_JOB_SECRET", "FLEET_JOB_SECRET_FILE", "POD_IP"};
    const size_t nn = sizeof names / sizeof names[0], l = strcspn(e, "=");
    for (size_t i = 0; i < nn; i++)
        if (strlen(names[i]) == l && !strncmp(e, names[i], l)) return J.ps || i != nn - 1;
    return 0;
}

/* Paddle's variables for process p (PaddleCloudRoleMaker reads them), into own[]. */
static int own_env(const proc_t *p, char **own)
{
    int m = 0;
    own[m++] = fmt("PADDLE_TRAINERS_NUM=%d", J.ps ? J.worker_num : J.n);
    own[m++] = fmt("PADDLE_TRAINER_ENDPOINTS=%s", J.worker_list);
    own[m++] = fmt("PADDLE_CURRENT_ENDPOINT=%s", p->ep);
    if (p->role == WORKER) own[m++] = fmt("PADDLE_TRAINER_ID=%d", p->rank);
    if (J.ps) {
        own[m++] = fmt("TRAINING_ROLE=%s", p->role == SERVER ? "PSERVER" : "TRAINER");
        own[m++] = fmt("PADDLE_PSERVERS_IP_PORT_LIST=%s", J.server_list);
        own[m++] = fmt("POD_IP=%s", p->ip);
        own[m++] = fmt("PADDLE_PORT=%d", p->port);
    } else {
        own[m++] = fmt("PADDLE_TRAINING_ROLE=TRAINER");
        own[m++] = fmt("PADDLE_RANK_IN_NODE=%d", p->local);
        if (J.ndev) own[m++] = fmt("FLAGS_selected_gpus=%s", J.dev[p->local]);
    }
    own[m++] = J.secret_env;
    return m;
}

static void spawn(proc_t *p)
{
    char *own[16];
    int nown = own_env(p, own), fds[2] = {-1, -1}, sync[2];
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **env = calloc(n + (size_t)nown + 1, sizeof *env);
    if (!env) fatal("out of memory");
    for (size_t i = 0; i < n; i++)
        if (!managed(environ[i])) env[k++] = environ[i];
    memcpy(env + k, own, (size_t)nown * sizeof *own);
    snprintf(p->log, sizeof p->log, "%s/%slog.%d", J.log_dir, p->role == SERVER ? "server" : "worker", p->rank);
    int logfd = open_log(p->log, 0), out = logfd;
    p->log_start = lseek(logfd, 0, SEEK_END);
    if (p == J.tee) {
        if (pipe2(fds, O_CLOEXEC) != 0) fatal("pipe: %s", strerror(errno));
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        out = fds[1];
    }
    /* The port is free from here; the process binds it after its exec.  An unrelated program
     * could take it in between: the race documented in docs/fleetrun.md. */
    if (p->probe >= 0) close(p->probe), p->probe = -1;
    if (pipe2(sync, O_CLOEXEC) != 0) fatal("pipe: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT};
        sigset_t none;
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127); /* parent gone */
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
        execve(J.prog, J.argv, env);
        dprintf(2, "fleetrun: cannot execute %s: %s\n", J.prog, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so a kill(-pid) right after the fork reaches it */
    p->pid = pid;
    guard_send(pid);
    /* Wait for the exec (end-of-file when the close-on-exec write end goes): by then the child
     * holds no copies of the other processes' port probes. */
    close(sync[1]);
    for (char c; read(sync[0], &c, 1) < 0 && errno == EINTR;) {
    }
    close(sync[0]);
    if (p == J.tee) close(fds[1]), J.tee_rd = fds[0], J.tee_log = logfd;
    else close(logfd);
    for (int i = 0; i < nown - 1; i++) free(own[i]);
    free(env);
}

static proc_t *find(pid_t pid)
{
    for (int i = 0; i < J.n; i++)
        if (J.p[i].pid == pid) return &J.p[i];
    return NULL;
}

static void describe(const proc_t *p, char *b, size_t n)
{
    int ws = p->status, s = WTERMSIG(ws);
    const char *ab = sigabbrev_np(s);
    if (!p->reaped) snprintf(b, n, "could not be stopped");
    else if (WIFEXITED(ws)) snprintf(b, n, "exited with code %d", WEXITSTATUS(ws));
    else snprintf(b, n, "killed by signal %s%s (%s)%s", ab ? "SIG" : "", ab ? ab : "", strsignal(s),
                  WCOREDUMP(ws) ? ", core dumped" : "");
}

/* Processes that came to fleetrun (the subreaper) after leaving their process group. */
static int adopted(pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < max;) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char path[64], buf[512], st = 0;
        int ppid = 0;
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = pid > 0 ? fopen(path, "re") : NULL;
        if (!f) continue;
        size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = 0;
        char *rp = strrchr(buf, ')');
        if (rp && sscanf(rp + 1, " %c %d", &st, &ppid) == 2 && ppid == getpid() && st != 'Z' &&
            pid != J.guard_pid && !find(pid))
            out[n++] = pid;
    }
    if (d) closedir(d);
    return n;
}

/* Sends sig (0: only count) to the process group of every local process that still has
 * members (only servers if servers_only) and to adopted strays; returns how many are alive. */
static int signal_job(int sig, int servers_only)
{
    int alive = 0;
    for (int i = 0; i < J.n; i++) {
        proc_t *p = &J.p[i];
        if (!p->pid || (servers_only && p->role != SERVER)) continue;
        int grp = kill(-p->pid, sig) == 0;
        if (!p->reaped) kill(p->pid, sig), p->stopped = sig ? sig : p->stopped; /* if it left its group */
        alive += grp || !p->reaped;
    }
    pid_t strays[256];
    int ns = servers_only ? 0 : adopted(strays, 256);
    for (int i = 0; i < ns; i++) kill(strays[i], sig);
    return alive + ns;
}

static int reaped_all(int role)
{
    for (int i = 0; i < J.n; i++)
        if (J.p[i].pid && !J.p[i].reaped && (role < 0 || J.p[i].role == role)) return 0;
    return 1;
}

static void pump_tee(void) /* rank 0's output: to its log, and to our stdout (best effort) */
{
    char buf[65536];
    for (ssize_t r; J.tee_rd >= 0;) {
        if ((r = read(J.tee_rd, buf, sizeof buf)) < 0 && (errno == EINTR || errno == EAGAIN)) {
            if (errno == EAGAIN) return;
            continue;
        }
        if (r <= 0) close(J.tee_rd), J.tee_rd = -1;
        else write_all(J.tee_log, buf, (size_t)r), write_all(1, buf, (size_t)r);
    }
}

static void print_tail(const proc_t *p) /* the last lines this run wrote to p's log */
{
    static char buf[16384];
    int fd = open(p->log, O_RDONLY | O_CLOEXEC), lines = 0;
    off_t from = fd < 0 ? 0 : lseek(fd, 0, SEEK_END) - (off_t)sizeof buf + 1;
    if (from < p->log_start) from = p->log_start;
    ssize_t r = fd < 0 ? -1 : pread(fd, buf, sizeof buf - 1, from);
    if (fd >= 0) close(fd);
    if (r <= 0) {
        cli_say("  (it wrote nothing to its log in this run)");
        return;
    }
    char *s = buf + r, *e;
    *s = 0;
    if (s[-1] == '\n') *--s = 0;
    while (s > buf && lines < TAIL_LINES) lines += *--s == '\n';
    if (*s == '\n') s++;
    else if (from > p->log_start && strchr(s, '\n')) s = strchr(s, '\n') + 1; /* drop a cut line */
    cli_say("  last lines of %s:", p->log);
    for (char *l = s; l; l = e ? e + 1 : NULL) {
        if ((e = strchr(l, '\n'))) *e = 0;
        cli_say("  | %s", l);
    }
}

static void report_failure(const proc_t *c, int sig)
{
    char d[160];
    int others = 0;
    cli_say("================ root cause (first failure observed) ================");
    if (!c) {
        cli_say("  fleetrun received SIG%s; it stopped every process of the job", sigabbrev_np(sig));
    } else {
        describe(c, d, sizeof d);
        cli_say("  role:   %s", role_name[c->role]);
        cli_say("  rank:   %d", c->rank);
        cli_say("  pid:    %d", (int)c->pid);
        cli_say("  status: %s", d);
        cli_say("  log:    %s", c->log);
        print_tail(c);
    }
    for (int i = 0; i < J.n; i++) {
        const proc_t *p = &J.p[i];
        if (p == c || !p->pid) continue;
        if (others++ == 32) {
            cli_say("  ... and more: see the logs in %s", J.log_dir);
            break;
        }
        describe(p, d, sizeof d);
        cli_say("  other: %s %d (pid %d) %s%s", role_name[p->role], p->rank, (int)p->pid, d,
            p->stopped == SIGKILL ? ": SIGKILLed by fleetrun after --grace_s" : p->stopped ? ": stopped by fleetrun" : "");
    }
    cli_say("=====================================================================");
}

int main(int argc, char **argv)
{
    J.t0 = now_s();
    int fd; /* make sure fds 0-2 exist, so no pipe or socket of ours becomes "stdout" */
    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2) {
    }
    if (fd > 2) close(fd);
    parse_args(argc, argv);
    if (J.run_mode && strcmp(J.run_mode, "collective") && strcmp(J.run_mode, "ps"))
        usage_error("--run_mode expects collective or ps, got '%s'", J.run_mode);
    int ps_flags = J.server_num > 0 || J.worker_num > 0 || J.servers || J.workers;
    if (J.run_mode && !strcmp(J.run_mode, "collective") && ps_flags)
        usage_error("--run_mode collective conflicts with --server_num/--worker_num/--servers/--workers");
    J.ps = ps_flags || (J.run_mode && !strcmp(J.run_mode, "ps"));
    if (J.ps) build_ps();
    else build_collective();
    resolve_program();
    setup_secret();
    mkdirs(J.log_dir);

    /* Signals arrive through a signalfd; the children reset mask and handlers before exec. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD), sigaddset(&set, SIGINT), sigaddset(&set, SIGTERM), sigaddset(&set, SIGHUP);
    signal(SIGCHLD, SIG_DFL), signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if ((J.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) fatal("signalfd: %s", strerror(errno));
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    start_guard();
    claim_ports();
    J.worker_list = join_eps(WORKER, ",");
    J.server_list = join_eps(SERVER, ",");
    for (int i = 0; i < J.n && !J.tee; i++)
        if (J.p[i].is_local && J.p[i].role == WORKER) J.tee = &J.p[i];
    print_table();
    write_endpoints_log();
    int started = 0;
    for (int i = 0; i < J.n; i++)
        if (J.p[i].is_local && (spawn(&J.p[i]), started++ < 32))
            cli_say("started %s %d (pid %d) at %s, log %s%s", role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid,
                J.p[i].ep, J.p[i].log, &J.p[i] == J.tee ? " (also shown here)" : "");
    explicit_bzero(J.secret_env, strlen(J.secret_env));
    if (started > 32) cli_say("started %d processes in all", started);

    int phase = PH_RUN, exit_sig = 0, servers_stopped = 0, leftovers = 0, stuck = 0, ws;
    double deadline = 0;
    proc_t *cause = NULL;
    for (;;) {
        for (pid_t pid; (pid = waitpid(-1, &ws, WNOHANG)) > 0;) {
            proc_t *p = find(pid);
            J.guard_pid = pid == J.guard_pid ? -1 : J.guard_pid;
            if (!p) continue; /* an adopted grandchild */
            p->reaped = 1, p->status = ws;
            if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !p->stopped && !cause && !exit_sig) {
                char d[160];
                describe(p, d, sizeof d);
                cause = p;
                cli_say("%s %d (pid %d) %s; stopping the job", role_name[p->role], p->rank, (int)pid, d);
            }
        }
        double now = now_s();
        if (phase < PH_TERM && (cause || exit_sig)) {
            int n = signal_job(SIGTERM, 0);
            cli_say("sent SIGTERM to %d process group(s); SIGKILL follows after --grace_s=%g s", n, J.grace);
            phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase == PH_RUN && J.ps && reaped_all(WORKER) && !reaped_all(SERVER)) {
            cli_say("all workers finished; waiting up to --server_grace_s=%g s for the servers to exit", J.server_grace);
            phase = PH_SERVER_WAIT, deadline = now + J.server_grace;
        }
        if (phase == PH_SERVER_WAIT && !reaped_all(SERVER) && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].role == SERVER && J.p[i].pid && !J.p[i].reaped)
                    cli_say("warning: server %d (pid %d) did not exit within --server_grace_s=%g s after the workers "
                        "finished; stopping it (SIGTERM, then SIGKILL after --grace_s=%g s)", J.p[i].rank,
                        (int)J.p[i].pid, J.server_grace, J.grace);
            signal_job(SIGTERM, 1);
            servers_stopped = 1, phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase <= PH_SERVER_WAIT && reaped_all(-1)) {
            if (!signal_job(0, 0)) break;
            cli_say("stopping processes left behind by the job's processes (SIGTERM, SIGKILL after --grace_s=%g s)",
                J.grace);
            signal_job(SIGTERM, 0);
            leftovers = 1, phase = PH_TERM, deadline = now + J.grace;
        }
        if (phase >= PH_TERM && reaped_all(-1) && !signal_job(0, 0)) break;
        if (phase == PH_TERM && now >= deadline) {
            for (int i = 0; i < J.n; i++)
                if (J.p[i].pid && !J.p[i].reaped)
                    cli_say("%s %d (pid %d) did not exit within --grace_s=%g s after SIGTERM; sending SIGKILL",
                        role_name[J.p[i].role], J.p[i].rank, (int)J.p[i].pid, J.grace);
            signal_job(SIGKILL, 0);
            phase = PH_KILL, deadline = now + KILL_WAIT_S;
        }
        if (phase == PH_KILL && now >= deadline) {
            cli_say("error: processes survived SIGKILL for %g s (stuck in the kernel?); giving up", KILL_WAIT_S);
            stuck = 1;
            break;
        }
        struct pollfd pf[2] = {{J.sfd, POLLIN, 0}, {J.tee_rd, POLLIN, 0}};
        double left_ms = fmax(0, fmin(1e8, ceil((deadline - now) * 1000)));
        int timeout = phase == PH_RUN ? -1 : phase == PH_SERVER_WAIT ? (int)left_ms : (int)fmin(50, left_ms);
        if (poll(pf, J.tee_rd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR) fatal("poll: %s", strerror(errno));
        if (pf[1].revents && J.tee_rd >= 0) pump_tee();
        struct signalfd_siginfo si;
        while (read(J.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int s = (int)si.ssi_signo;
            if (s == SIGCHLD) continue;
            if (phase < PH_TERM && !exit_sig && !cause) {
                exit_sig = s;
                cli_say("received SIG%s; stopping the job", sigabbrev_np(s));
            } else if (phase < PH_KILL) { /* a second signal: no more grace */
                exit_sig = exit_sig || cause ? exit_sig : s;
                cli_say("received SIG%s again; sending SIGKILL now", sigabbrev_np(s));
                signal_job(SIGKILL, 0);
                phase = PH_KILL, deadline = now_s() + KILL_WAIT_S;
            }
        }
    }
    pump_tee();
    guard_send(0);
    if (J.guard_pid > 0) waitpid(J.guard_pid, NULL, 0);
    double el = now_s() - J.t0;
    if (cause || exit_sig) {
        report_failure(cause, exit_sig);
        int code = exit_sig ? 128 + exit_sig : WIFSIGNALED(cause->status) ? 128 + WTERMSIG(cause->status) : 1;
        cli_say("job failed after %.1f s; exit status %d", el, code);
        return code;
    }
    if (leftovers) cli_say("note: stopped processes that the job's processes had left running");
    if (servers_stopped) cli_say("job finished: the workers succeeded; the servers were stopped (%.1f s)", el);
    else cli_say("job finished: all %d processes on this node succeeded (%.1f s)", started, el);
    return stuck;
}
