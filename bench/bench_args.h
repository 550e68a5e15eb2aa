/*
 * bench_args.h - the command line of the C benchmarks: a table of options read under
 * tools/cli.h's rules (getopt_long; an option spelled out in full; "--name VALUE" or
 * "--name=VALUE"; "-h" / "--help" prints the usage line), each value stored into its
 * variable as its kind says and checked as a number.  Range checks stay with each
 * benchmark.  Before including it, a benchmark defines CLI_NAME (its name) and
 * CLI_HELP_HINT (its usage line, printed after a usage error):
 *
 *   #define CLI_NAME "bench_x"
 *   #define CLI_HELP_HINT "usage: bench_x [--n N] [--seconds S] [--no-ref]"
 *   #include "bench_args.h"
 *
 *   const bench_opt opts[] = {{"n", BA_INT, &n}, {"seconds", BA_DOUBLE, &secs}, {"no-ref", BA_FLAG, &noref}};
 *   bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
 *
 * A usage error exits with status 2 and a message naming the option ("bench_x: error:
 * --n expects an integer, got 'x'").
 */
#ifndef FLEET_BENCH_ARGS_H
#define FLEET_BENCH_ARGS_H

#include <errno.h>
#include <stdint.h>

#include "../tools/cli.h"

typedef enum {
    BA_INT,    /* int */
    BA_I64,    /* int64_t */
    BA_U64,    /* uint64_t */
    BA_DOUBLE, /* double */
    BA_STR,    /* const char * (points into argv) */
    BA_FLAG,   /* int set to 1; takes no value */
    BA_FN      /* fn(value, dst) parses it; returns 0, or -1 for a bad value */
} bench_arg_kind;

typedef struct {
    const char *name; /* without the leading "--" */
    bench_arg_kind kind;
    void *dst;
    int (*fn)(const char *value, void *dst); /* BA_FN only */
} bench_opt;

#define BA_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static inline long long bench__int(const char *opt, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) cli_die(2, "%s expects an integer, got '%s'", opt, v);
    return x;
}

/* Reads argv[first..] against opts[0..n).  The arguments that are not options go to
 * rest[0..*nrest) (rest must hold argc entries) when rest is given, and are a usage error
 * otherwise. */
static inline void bench_args(int argc, char **argv, int first, const bench_opt *opts, int n, const char **rest, int *nrest)
{
    struct option lo[34];
    if (n > 32) cli_die(1, "internal: more than 32 options");
    for (int i = 0; i < n; i++)
        lo[i] = (struct option){opts[i].name, opts[i].kind == BA_FLAG ? no_argument : required_argument, NULL, 256 + i};
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){0};
    if (nrest) *nrest = 0;
    char name[64];
    const char *v;
    cli_begin(first);
    for (;;) {
        int c = cli_next(argc, argv, "h", lo, name, &v);
        if (c == -1) {
            if (optind >= argc) return;
            if (!rest) cli_die(2, "unexpected argument '%s'", argv[optind]);
            if (!strcmp(name, "--")) { /* everything after "--" is an argument */
                while (optind < argc) rest[(*nrest)++] = argv[optind++];
                return;
            }
            rest[(*nrest)++] = argv[optind];
            cli_begin(optind + 1); /* arguments and options may alternate */
            continue;
        }
        if (c == 'h') {
            puts(CLI_HELP_HINT);
            exit(0);
        }
        if (c == '?') cli_die(2, "unknown option '%s'", name);
        const bench_opt *o = &opts[c - 256];
        switch (o->kind) {
        case BA_INT: *(int *)o->dst = (int)bench__int(name, v, INT32_MIN, INT32_MAX); break;
        case BA_I64: *(int64_t *)o->dst = bench__int(name, v, INT64_MIN, INT64_MAX); break;
        case BA_U64: *(uint64_t *)o->dst = (uint64_t)bench__int(name, v, 0, INT64_MAX); break;
        case BA_DOUBLE: {
            char *end;
            double x = strtod(v, &end);
            if (!*v || *end) cli_die(2, "%s expects a number, got '%s'", name, v);
            *(double *)o->dst = x;
            break;
        }
        case BA_STR: *(const char **)o->dst = v; break;
        case BA_FLAG: *(int *)o->dst = 1; break;
        case BA_FN:
            if (o->fn(v, o->dst)) cli_die(2, "%s: bad value '%s'", name, v);
            break;
        }
    }
}

#endif
