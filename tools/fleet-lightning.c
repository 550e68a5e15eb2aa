/*
 * fleet-lightning - trains a standard model (DeepFM, Wide&Deep, ResNet, ...) without writing
 * one: the command line of the model registry (fleet/app.h).
 *
 *   fleet-lightning list
 *   fleet-lightning train --model NAME --train_data DIR [--test_data DIR] [--config FILE] [options]
 *   fleet-lightning eval  --model NAME --model_dir DIR --test_data DIR
 *   fleet-lightning infer --model NAME --model_dir DIR --test_data DIR [--output FILE]
 *
 * Options are the registry's (fl_app_option), in the spirit of lightning's
 * parse_train_configs: the model's defaults, then the --config file (key=value lines),
 * then the command line.  The same command runs under fleetrun (parameter servers or
 * collective, as the model's kind says or --mode), mpirun and srun.
 * Exit status: 0 done, 1 runtime error, 2 usage error.  See docs/lightning.md.
 */
#include <fleet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLI_NAME "fleet-lightning"
#define CLI_HELP_HINT "(run 'fleet-lightning --help' for the options)"
#include "cli.h"

#define MAX_OPTS 64
#define MAX_ARGS 256

enum { OPT_CONFIG = 1, OPT_HELP, OPT_VERSION, OPT_BASE = 1000 } /* above every letter of the short options */;

static void usage(const fl_app_row *row)
{
    fl_app_config def;
    fl_app_config_default(row, &def);
    printf("usage: fleet-lightning COMMAND [options]   (--name VALUE or --name=VALUE)\n"
           "Trains a standard model without writing one; the same command runs locally and under\n"
           "fleetrun, mpirun or srun (parameter servers or collective, as the model's kind says).\n"
           "Commands:\n"
           "  list                      the models: kind, data, metric, modes, default configuration\n"
           "  train --model NAME --train_data DIR [--test_data DIR]   train, save model_dir, score test_data\n"
           "  eval  --model NAME --model_dir DIR --test_data DIR      the metric of a saved model\n"
           "  infer --model NAME --model_dir DIR --test_data DIR [--output FILE]   its predictions\n"
           "Options (defaults%s%s; --model NAME --help shows a model's):\n"
           "  --config FILE             key=value lines setting the options below (the command line wins)\n",
           row ? " of " : " common to all models", row ? row->name : "");
    for (int i = 0;; i++) {
        const char *help, *name = fl_app_option(i, &help);
        if (!name) break;
        char v[FL_APP_PATH];
        fl_app_config_get(&def, name, v, sizeof v);
        printf("  --%-22s  %s (default: %s)\n", name, help, *v ? v : "none");
    }
    printf("  --help, --version\n"
           "Exit status: 0 done, 1 runtime error, 2 usage error.\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct option lo[MAX_OPTS + 4];
    int n = 0;
    for (const char *name; n < MAX_OPTS && (name = fl_app_option(n, NULL)); n++)
        lo[n] = (struct option){name, required_argument, NULL, OPT_BASE + n};
    lo[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
    lo[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    lo[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    lo[n] = (struct option){NULL, 0, NULL, 0};

    int first = 1;
    const char *cmd = NULL;
    if (argc > 1 && argv[1][0] != '-') {
        cmd = argv[1];
        first = 2;
    }
    /* pass 1: collect the options; the model and the config file pick the defaults */
    const char *names[MAX_ARGS], *values[MAX_ARGS], *model = NULL, *config = NULL;
    int nargs = 0, help = 0;
    char name[64];
    const char *value;
    int c;
    cli_begin(first);
    while ((c = cli_next(argc, argv, "h", lo, name, &value)) != -1) {
        if (c == '?') cli_die(2, "unknown option %s", name);
        if (c == OPT_HELP || c == 'h') help = 1;
        else if (c == OPT_VERSION) {
            printf("fleet-lightning %s\n", fl_version());
            return 0;
        } else if (c == OPT_CONFIG) config = value;
        else if (nargs < MAX_ARGS) {
            names[nargs] = lo[c - OPT_BASE].name;
            values[nargs++] = value;
            if (!strcmp(lo[c - OPT_BASE].name, "model")) model = value;
        }
    }
    if (optind < argc) cli_die(2, "unexpected argument '%s'", argv[optind]);
    fl_app_config cfg;
    if (config && !model) { /* the model may come from the config file */
        fl_app_config_default(NULL, &cfg);
        if (fl_app_config_load(&cfg, config) != FL_OK) cli_die(2, "--config: %s", fl_last_error());
        if (cfg.model[0]) model = cfg.model;
    }
    static char model_buf[FL_APP_WORD];
    if (model) snprintf(model_buf, sizeof model_buf, "%s", model);
    const fl_app_row *row = NULL;
    if (model && !(row = fl_app_find(model_buf))) cli_die(2, "--model: %s", fl_last_error());
    if (help || !cmd) {
        usage(row);
        return help ? 0 : 2;
    }
    if (!strcmp(cmd, "list")) return fl_app_list(stdout) == FL_OK ? 0 : 1;
    int train = !strcmp(cmd, "train"), eval = !strcmp(cmd, "eval"), infer = !strcmp(cmd, "infer");
    if (!train && !eval && !infer) cli_die(2, "unknown command '%s' (list, train, eval, infer)", cmd);
    if (!row) cli_die(2, "%s needs --model NAME (fleet-lightning list shows the models)", cmd);

    fl_app_config_default(row, &cfg);
    if (eval || infer) { /* the training run's options, saved beside the model */
        const char *dir = cfg.model_dir;
        for (int i = 0; i < nargs; i++)
            if (!strcmp(names[i], "model_dir")) dir = values[i];
        char conf[FL_APP_PATH + 32];
        snprintf(conf, sizeof conf, "%s/lightning.conf", dir);
        if (!access(conf, F_OK) && fl_app_config_load(&cfg, conf) != FL_OK) cli_die(1, "%s", fl_last_error());
    }
    if (config && fl_app_config_load(&cfg, config) != FL_OK) cli_die(2, "--config: %s", fl_last_error());
    for (int i = 0; i < nargs; i++)
        if (fl_app_config_set(&cfg, names[i], values[i]) != FL_OK) cli_die(2, "%s", fl_last_error());
    if (strcmp(cfg.model, row->name)) cli_die(2, "--config sets model '%s' but --model is '%s'", cfg.model, row->name);
    if (train && !cfg.train_data[0] && strcmp(row->reader, "idx"))
        cli_die(2, "train needs --train_data DIR (a directory of %s files)", row->reader);
    if ((eval || infer) && !cfg.test_data[0] && strcmp(row->reader, "idx"))
        cli_die(2, "%s needs --test_data DIR (a directory of %s files)", cmd, row->reader);

    int st = train ? fl_app_train(row, &cfg) : eval ? fl_app_eval(row, &cfg, NULL) : fl_app_infer(row, &cfg);
    if (st != FL_OK) cli_die(1, "%s %s: %s", cmd, row->name, fl_last_error());
    return 0;
}
