/*
 * args.h - what the text-model examples (simnet/train.c, word2vec/train.c) share: option
 * parsing from a table (`--name VALUE`, every option with its default in --help), the
 * optimizer by name, the distributed strategy of --mode, and the epoch loop.
 */
#ifndef ZOO_ARGS_H
#define ZOO_ARGS_H

#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ctr/files.h"

typedef struct {
    const char *name;
    char type; /* 'i' int, 'd' double, 's' string, 'S' repeatable string (KEY=VALUE list) */
    void *dst;
    const char *help;
} zoo_opt;

/* The options both examples take. */
typedef struct {
    int is_local, epochs, batch_size, thread_num, print_period;
    double lr;
    const char *train_data, *test_data, *optimizer, *mode;
    const char *strategy[16];
    int nstrategy;
} zoo_common;

#define ZOO_COMMON_OPTS(c)                                                                                            \
    {"is_local", 'i', &(c)->is_local, "1: train here without a fleet"},                                               \
        {"epochs", 'i', &(c)->epochs, "passes over the training data"},                                               \
        {"batch_size", 'i', &(c)->batch_size, "examples per batch"},                                                  \
        {"thread_num", 'i', &(c)->thread_num, "reader and trainer threads (Hogwild)"},                                \
        {"print_period", 'i', &(c)->print_period, "batches between progress lines (0: none)"},                        \
        {"lr", 'd', &(c)->lr, "learning rate"}, {"train_data", 's', &(c)->train_data, "directory of training files"}, \
        {"test_data", 's', &(c)->test_data, "directory of test files (the metric)"},                                  \
        {"optimizer", 's', &(c)->optimizer, "sgd, adam or adagrad"},                                                  \
        {"mode", 's', &(c)->mode, "parameter-server mode (fleet_ps_mode_info): sync, half_async, async, geo"},        \
    {                                                                                                                 \
        "strategy", 'S', (c), "KEY=VALUE, any DistributedStrategy field (repeatable)"                                 \
    }

static void zoo_usage(FILE *f, const char *prog, const zoo_opt *o, int n)
{
    fprintf(f, "usage: %s [--option VALUE ...]\n", prog);
    for (int i = 0; i < n; i++) {
        char def[64] = "";
        if (o[i].type == 'i') snprintf(def, sizeof def, "%d", *(int *)o[i].dst);
        else if (o[i].type == 'd') snprintf(def, sizeof def, "%g", *(double *)o[i].dst);
        else if (o[i].type == 's')
            snprintf(def, sizeof def, "%s", *(const char **)o[i].dst ? *(const char **)o[i].dst : "none");
        else snprintf(def, sizeof def, "none");
        fprintf(f, "  --%-16s %s (default %s)\n", o[i].name, o[i].help, def);
    }
}

/* 0 parsed, 1 --help shown, 2 usage error (printed). */
static int zoo_parse(int argc, char **argv, const zoo_opt *o, int n)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) return zoo_usage(stdout, argv[0], o, n), 1;
        if (strncmp(k, "--", 2) != 0 || !v) {
            fprintf(stderr, "%s: expected --option VALUE, got '%s' (see --help)\n", argv[0], k);
            return 2;
        }
        int j = 0;
        while (j < n && strcmp(o[j].name, k + 2)) j++;
        if (j == n) {
            fprintf(stderr, "%s: unknown option %s (see --help)\n", argv[0], k);
            return 2;
        }
        char *end = NULL;
        i++;
        if (o[j].type == 'i') {
            long x = strtol(v, &end, 10);
            if (!*v || *end) goto bad;
            *(int *)o[j].dst = (int)x;
        } else if (o[j].type == 'd') {
            double x = strtod(v, &end);
            if (!*v || *end) goto bad;
            *(double *)o[j].dst = x;
        } else if (o[j].type == 's') {
            *(const char **)o[j].dst = v;
        } else {
            zoo_common *c = o[j].dst;
            if (c->nstrategy == 16) goto bad;
            c->strategy[c->nstrategy++] = v;
        }
        continue;
    bad:
        fprintf(stderr, "%s: bad value '%s' for --%s (%s)\n", argv[0], v, o[j].name, o[j].help);
        return 2;
    }
    return 0;
}

static int zoo_check_common(const char *prog, const zoo_common *c)
{
    if (c->epochs < 1 || c->batch_size < 1 || c->thread_num < 1 || !(c->lr > 0)) {
        fprintf(stderr, "%s: --epochs, --batch_size, --thread_num and --lr must be positive\n", prog);
        return 2;
    }
    fleet_ps_mode m; /* a row of the library's mode table: sync, half_async, async, geo, ... */
    if (fleet_ps_mode_info(c->mode, &m) != FL_OK) {
        fprintf(stderr, "%s: --mode: %s\n", prog, fl_last_error());
        return 2;
    }
    return 0;
}

static fl_opt *zoo_optimizer(const zoo_common *c)
{
    if (!strcmp(c->optimizer, "sgd")) return fl_opt_sgd((float)c->lr);
    if (!strcmp(c->optimizer, "adam")) return fl_opt_adam((float)c->lr, 0.9f, 0.999f, 1e-8f);
    if (!strcmp(c->optimizer, "adagrad")) return fl_opt_adagrad((float)c->lr, 1e-6f);
    fprintf(stderr, "--optimizer must be sgd, adam or adagrad, got '%s'\n", c->optimizer);
    return NULL;
}

/* The strategy of --mode and --strategy, and the mode it selects (a --strategy may change
 * it: *mode says whether the sparse tables live on the servers, how many trainer threads),
 * or -1 with fl_last_error(). */
static int zoo_strategy(const zoo_common *c, fleet_strategy *s, fleet_ps_mode *mode)
{
    *s = fleet_strategy_default();
    if (fleet_strategy_set_ps_mode(s, c->mode) != FL_OK) return -1;
    for (int i = 0; i < c->nstrategy; i++)
        if (fleet_strategy_parse(s, c->strategy[i]) != FL_OK) return -1;
    return fleet_strategy_ps_mode(s, mode) == FL_OK ? 0 : -1;
}

/* --epochs passes of prog over ds, printing each; an epoch that reads nothing is an error. */
static int zoo_train(const zoo_common *c, fl_exe *exe, fl_prog *prog, fl_dataset *ds, fl_var *loss, int thread)
{
    const char *fetch[1] = {fl_var_name(loss)}, *info[1] = {"loss"};
    for (int i = 0; i < c->epochs; i++) {
        fl_exe_dataset_stats s;
        if (fl_exe_train_from_dataset(exe, prog, ds, thread, fetch, info, 1, c->print_period, &s) != FL_OK) return -1;
        printf("epoch %d: %lld examples in %.2f s (%.0f examples/s), loss %.4f\n", i, (long long)s.instances, s.seconds,
               s.seconds > 0 ? (double)s.instances / s.seconds : 0.0, s.fetch[0]);
        fflush(stdout);
        if (!s.instances) {
            fprintf(stderr, "epoch %d read 0 examples (empty or unreadable training files)\n", i);
            return -2;
        }
    }
    return 0;
}

#endif
