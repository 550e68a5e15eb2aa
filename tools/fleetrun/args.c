/* args.c - fleetrun's command line: the flags, their values and small parsing helpers. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fleetrun.h"

static void usage(void)
{
    puts("usage: fleetrun [flags] PROG [ARGS...]        (flags: --name VALUE or --name=VALUE)\n"
         "collective mode (default):\n"
         "  --nproc_per_node N   processes on this node (default: number of devices, else 1)\n"
         "  --gpus|--selected_gpus|--devices LIST  device ids, e.g. 0,1,2,3 -> FLAGS_selected_gpus\n"
         "  --ips IP,IP,...      the job's machines, same order on each; --node_ip IP names this\n"
         "                       one (default $POD_IP)\n"
         "  --start_port P       fixed ports P, P+1, ... (default: free ports, picked on each node;\n"
         "                       $FLAGS_START_PORT or 6070 with --ips on several machines)\n"
         "parameter-server mode (any of these flags):\n"
         "  --server_num S --worker_num W   S servers and W workers here (default 1 each)\n"
         "  --servers IP[:PORT],... --workers IP[:PORT],...   endpoints (fixed ports from 6170)\n"
         "  --server_grace_s SECS  after the workers succeed, wait this long for the servers (30)\n"
         "several nodes (the same command line on each):\n"
         "  --master IP:PORT     where the nodes meet; the node that owns IP (or whose --node_ip\n"
         "                       is IP) hosts the rendezvous\n"
         "  --nnodes N           how many nodes (default 1); the job secret must come from\n"
         "                       FLEET_JOB_SECRET or FLEET_JOB_SECRET_FILE, the same on each\n"
         "  --rdzv_timeout_s SECS  how long nodes wait for each other (default 300)\n"
         "restarts, identity, logs:\n"
         "  --max_restart N        on a failure, stop and start the whole job again, N times at\n"
         "                         most (default 0); processes get PADDLE_RESTART_COUNT\n"
         "  --job_id ID            PADDLE_JOB_ID (default: a fresh id)\n"
         "  --log_level LEVEL      error|warn|info|debug|trace -> FLEET_LOG_LEVEL\n"
         "  --log_dir DIR          workerlog.N, serverlog.N, endpoints.log (default log)\n"
         "  --grace_s SECS         SIGTERM-to-SIGKILL grace when stopping the job (default 5)\n"
         "  --run_mode collective|ps\n"
         "  --version, -h/--help\n"
         "Processes get Paddle's variables (PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS, ...) and\n"
         "the job secret FLEET_JOB_SECRET (generated, or FLEET_JOB_SECRET / FLEET_JOB_SECRET_FILE\n"
         "passed through). Exit: 0 ok, 1 a process failed, 128+N killed by signal N, 2 usage.\n"
         "See docs/fleetrun.md.");
}

/* ---------------------------------------------------------------- flags, endpoints */

long fr_parse_long(const char *flag, const char *v, long lo, long hi, const char *form)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end || errno || x < lo || x > hi)
        usage_error("%s expects %s, got '%s'", flag, form, v);
    return x;
}

void fr_parse_args(int argc, char **argv)
{
    enum { A_STR, A_DEV, A_NUM, A_COUNT, A_PORT, A_SECS, A_NODES };
    static const struct {
        const char *name;
        int kind;
        void *dst;
    } opts[] = {{"--nproc_per_node", A_NUM, &J.nproc},
                {"--server_num", A_NUM, &J.server_num},
                {"--worker_num", A_NUM, &J.worker_num},
                {"--start_port", A_PORT, &J.start_port},
                {"--grace_s", A_SECS, &J.grace},
                {"--server_grace_s", A_SECS, &J.server_grace},
                {"--gpus", A_DEV, NULL},
                {"--selected_gpus", A_DEV, NULL},
                {"--devices", A_DEV, NULL},
                {"--ips", A_STR, &J.ips},
                {"--node_ip", A_STR, &J.node_ip},
                {"--log_dir", A_STR, &J.log_dir},
                {"--servers", A_STR, &J.servers},
                {"--workers", A_STR, &J.workers},
                {"--run_mode", A_STR, &J.run_mode},
                {"--master", A_STR, &J.master},
                {"--nnodes", A_NODES, &J.nnodes},
                {"--max_restart", A_COUNT, &J.max_restart},
                {"--job_id", A_STR, &J.job_id_flag},
                {"--log_level", A_STR, &J.log_level},
                {"--rdzv_timeout_s", A_SECS, &J.rdzv_timeout}};
    enum { NOPTS = sizeof opts / sizeof opts[0] };
    struct option longopts[NOPTS + 3];
    for (int k = 0; k < NOPTS; k++) longopts[k] = (struct option){opts[k].name + 2, required_argument, NULL, k};
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[NOPTS + 2] = (struct option){0};
    char name[64];
    const char *v;
    int k;
    cli_begin(1);
    while ((k = cli_next(argc, argv, "h", longopts, name, &v)) != -1) {
        if (k == 'h') usage(), exit(0);
        if (k == 'V') puts("fleetrun " FLEET_VERSION), exit(0);
        if (k == '?')
            usage_error("unknown flag '%s' (flags are --name VALUE or --name=VALUE; the program "
                        "and its arguments come after the flags)",
                        name);
        if (!*v) usage_error("%s expects a value, got an empty string", name);
        char *end;
        double d;
        switch (opts[k].kind) {
        case A_NUM: *(int *)opts[k].dst = (int)fr_parse_long(name, v, 1, MAX_LOCAL, "a positive integer (1..1024)"); break;
        case A_COUNT: *(int *)opts[k].dst = (int)fr_parse_long(name, v, 0, 1000, "an integer in 0..1000"); break;
        case A_NODES:
            if (strchr(v, ':'))
                usage_error("%s %s: elastic node ranges (MIN:MAX) are not supported; give a fixed count, "
                            "e.g. %s 2",
                            name, v, name);
            *(int *)opts[k].dst = (int)fr_parse_long(name, v, 1, MAX_NODES, "a node count (1..1024)");
            break;
        case A_PORT: *(int *)opts[k].dst = (int)fr_parse_long(name, v, 1, 65535, "a port number (1..65535)"); break;
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

/* Whether this machine has GPUs that device ids could name: an NVIDIA driver with GPUs
 * (/proc/driver/nvidia/gpus/ not empty, or a /dev/nvidiaN node) or the AMD ROCm driver
 * (/dev/kfd).  docs/fleetrun.md states the same probe. */
static int have_devices(void)
{
    static const char *const dirs[] = {"/proc/driver/nvidia/gpus", "/dev"};
    if (access("/dev/kfd", F_OK) == 0) return 1;
    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        int found = 0;
        for (struct dirent *e; d && !found && (e = readdir(d));)
            found = k == 0 ? e->d_name[0] != '.' : !strncmp(e->d_name, "nvidia", 6) && isdigit((unsigned char)e->d_name[6]);
        if (d) closedir(d);
        if (found) return 1;
    }
    return 0;
}

/* On a machine without GPUs, --gpus LIST starts one CPU process per id (programs written for
 * GPUs are launched that way, and CUDAPlace runs on the CPU), each with FLAGS_selected_gpus =
 * its local rank.  FLEET_ALLOW_NO_DEVICES=1 passes the ids on unchecked instead; set to 0, it
 * asks for real devices, and their absence is an error. */
static void check_devices(void)
{
    int64_t allow;
    const char *set = fr_env("FLEET_ALLOW_NO_DEVICES", NULL);
    J.ndev = fr_split(J.dev_flag, J.devices, J.dev, MAX_LOCAL);
    for (int i = 0; i < J.ndev; i++) fr_parse_long(J.dev_flag, J.dev[i], 0, 1 << 20, "device ids, e.g. 0,1,2,3");
    if (J.nproc > 0 && J.nproc != J.ndev)
        usage_error("--nproc_per_node %d does not match %s %s (%d devices); give one of them", J.nproc, J.dev_flag,
                    J.devices, J.ndev);
    J.nproc = J.ndev;
    if (fl__env_int("FLEET_ALLOW_NO_DEVICES", 0, 0, 1, &allow) != FL_OK) usage_error("%s", fl_last_error());
    if (allow || have_devices()) return;
    if (set)
        usage_error("%s %s: this machine has no GPU (no /proc/driver/nvidia/gpus/*, /dev/nvidiaN or /dev/kfd) and "
                    "FLEET_ALLOW_NO_DEVICES=0 asks for real devices; unset it to run one CPU process per id",
                    J.dev_flag, J.devices);
    cli_say("info: %s %s: no GPU on this machine (no /proc/driver/nvidia/gpus/*, /dev/nvidiaN or /dev/kfd): "
            "starting %d CPU process%s, FLAGS_selected_gpus = the local rank (CUDAPlace runs on the CPU)",
            J.dev_flag, J.devices, J.ndev, J.ndev == 1 ? "" : "es");
    for (int i = 0; i < J.ndev; i++) J.dev[i] = fr_fmt("%d", i);
    J.devices = J.ndev == 1 ? "0" : fr_fmt("0..%d (local rank; no GPU here)", J.ndev - 1);
}

/* --master IP:PORT into J.master_ip and J.master_port. */
static void check_master(void)
{
    const char *m = J.master, *c = strrchr(m, ':');
    if (strstr(m, "://"))
        usage_error("--master %s: only IP:PORT is supported (fleetrun hosts the rendezvous itself, on the node "
                    "that owns that IP; there is no etcd or HTTP store)",
                    m);
    if (!c || (size_t)(c - m) >= sizeof J.master_ip)
        usage_error("--master expects IP:PORT, e.g. 10.0.0.1:6170, got '%s'", m);
    snprintf(J.master_ip, sizeof J.master_ip, "%.*s", (int)(c - m), m);
    fr_check_ip("--master", J.master_ip);
    J.master_port = (int)fr_parse_long("--master", c + 1, 1, 65535, "IP:PORT with a port in 1..65535");
}

void fr_check_args(void)
{
    static const char *const levels[][2] = {{"error", "error"}, {"warn", "warn"},   {"warning", "warn"},
                                            {"info", "info"},   {"debug", "debug"}, {"trace", "trace"}};
    if (J.run_mode && strcmp(J.run_mode, "collective") && strcmp(J.run_mode, "ps"))
        usage_error("--run_mode expects collective or ps, got '%s'", J.run_mode);
    int ps_flags = J.server_num > 0 || J.worker_num > 0 || J.servers || J.workers;
    if (J.run_mode && !strcmp(J.run_mode, "collective") && ps_flags)
        usage_error("--run_mode collective conflicts with --server_num/--worker_num/--servers/--workers");
    J.ps = ps_flags || (J.run_mode && !strcmp(J.run_mode, "ps"));
    if (J.ps && J.devices) usage_error("%s is for collective mode, not PS mode", J.dev_flag);
    if (J.ps && J.nproc > 0) usage_error("--nproc_per_node is for collective mode; in PS mode use --worker_num");
    if (J.log_level) {
        const char *canon = NULL;
        for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
            if (!strcasecmp(J.log_level, levels[i][0])) canon = levels[i][1];
        if (!canon)
            usage_error("--log_level expects error, warn, info, debug or trace (exported as FLEET_LOG_LEVEL), "
                        "got '%s'",
                        J.log_level);
        J.log_level = canon;
    }
    if (J.job_id_flag) {
        size_t n = strlen(J.job_id_flag);
        if (n >= FR_JOB_ID_MAX || strspn(J.job_id_flag, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789._-") != n)
            usage_error("--job_id expects at most %d letters, digits, '.', '_' or '-', got '%s'", FR_JOB_ID_MAX - 1,
                        J.job_id_flag);
    }
    if (J.rdzv_timeout <= 0) usage_error("--rdzv_timeout_s must be more than 0 seconds");
    if (J.nnodes < 0) J.nnodes = 1;
    if (J.nnodes > 1 && !J.master)
        usage_error("--nnodes %d needs --master IP:PORT, the endpoint where the nodes meet", J.nnodes);
    if (J.master) {
        check_master();
        if (J.ips) usage_error("--master and --ips are two ways to name the machines of a job; give one of them");
        if (J.servers || J.workers)
            usage_error("--servers/--workers list fixed endpoints; with --master give --server_num and --worker_num "
                        "(the processes of each node)");
        if (J.nnodes == 1) cli_say("note: --nnodes 1: a one-node job, --master %s is not used", J.master);
    }
    J.rdzv = J.master && J.nnodes > 1;
    if (J.devices) check_devices();
}

/* Splits a comma list into trimmed items (copies kept in J.split_buf); returns the count. */
int fr_split(const char *flag, const char *s, const char **out, int max)
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

void fr_check_ip(const char *flag, const char *ip)
{
    struct in_addr a;
    if (strlen(ip) >= INET_ADDRSTRLEN || inet_pton(AF_INET, ip, &a) != 1)
        usage_error("%s: '%s' is not an IPv4 address (expected the form 10.0.0.1)", flag, ip);
}

const char *fr_env(const char *name, const char *def)
{
    const char *v = NULL;
    fl__env_str(name, def, &v);
    return v;
}
