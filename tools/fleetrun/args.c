/* args.c - fleetrun's command line: the flags, their values and small parsing helpers. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleetrun.h"

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
            *(int *)opts[k].dst = (int)fr_parse_long(name, v, 1, MAX_LOCAL, "a positive integer (1..1024)");
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
