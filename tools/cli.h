/*
 * cli.h - the command line of the tools (fleetrun, fleet-datagen): one way to print a note
 * or a fatal error, and option parsing with getopt_long under the tools' rules:
 *
 *   - an option is spelled out in full: getopt_long's abbreviations ("--nproc" for
 *     "--nproc_per_node") are refused as unknown options;
 *   - a value comes as "--name VALUE" or "--name=VALUE"; the next argument is the value even
 *     when it starts with '-', so "--seed -1" reaches the tool's own range check;
 *   - parsing stops at the first argument that is not an option, or after "--" (getopt's
 *     "+" mode: nothing is reordered, so a program's own arguments are left alone).
 *
 * Not a general parser: short options may not take values and are never grouped ("-hx"
 * is unknown, as is "-h=1").  Before including this header a tool defines CLI_NAME (its
 * name, the prefix of every message) and CLI_HELP_HINT (the line printed after a usage
 * error).  Header-only (static functions), so a tool of several files (fleetrun) includes it
 * from each of them.
 */
#ifndef FLEET_TOOLS_CLI_H
#define FLEET_TOOLS_CLI_H

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base_internal.h"

#if !defined(CLI_NAME) || !defined(CLI_HELP_HINT)
#error "define CLI_NAME and CLI_HELP_HINT before including cli.h"
#endif

/* Prints "NAME: message" on stderr. */
static inline void cli_say(const char *fmt, ...) FL_PRINTF(1, 2);
static inline void cli_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(CLI_NAME ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints "NAME: error: message" on stderr and exits with `code`: 2 for a usage error (then
 * CLI_HELP_HINT follows on its own line; name the option and the form it expects), 1 for a
 * runtime error. */
static _Noreturn inline void cli_die(int code, const char *fmt, ...) FL_PRINTF(2, 3);
static _Noreturn inline void cli_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(CLI_NAME ": error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(code == 2 ? "\n" CLI_HELP_HINT "\n" : "\n", stderr);
    va_end(ap);
    exit(code);
}

/* Whether `arg` (as written) names an option of the tables exactly: "-X" for a letter of
 * shortopts, "--NAME" or "--NAME=..." for a long option. */
static inline int cli__exact(const char *arg, const char *shortopts, const struct option *longopts)
{
    if (arg[0] == '-' && arg[1] && arg[1] != '-' && arg[1] != ':' && !arg[2]) return strchr(shortopts, arg[1]) != NULL;
    if (strncmp(arg, "--", 2)) return 0;
    size_t n = strcspn(arg + 2, "=");
    for (const struct option *o = longopts; o->name; o++)
        if (strlen(o->name) == n && !strncmp(o->name, arg + 2, n)) return 1;
    return 0;
}

/* Sets where parsing starts: argv[first] (1, or the argument after a subcommand). */
static inline void cli_begin(int first)
{
    optind = first;
    opterr = 0;
}

/* The next option of argv, parsed with getopt_long: returns its val in longopts (or the
 * letter of a short option) and sets *value to its argument (NULL if it takes none).
 * `name` (64 bytes) receives the option as written, up to any '=' and at most 63
 * characters, for the tool's messages.
 *
 * Returns '?' for an option that is not in the tables, is abbreviated, or is given a value
 * it does not take: the tool reports `name` with its own list of options.  Returns -1 at
 * the end of the options: optind then indexes the first argument that is not an option
 * (argc if none); when "--" ended them, optind is past it and `name` is "--".  An option
 * that needs a value and has none is a usage error here ("NAME expects a value (NAME VALUE
 * or NAME=VALUE)", exit 2). */
static inline int cli_next(int argc, char **argv, const char *shortopts, const struct option *longopts, char name[64],
                           const char **value)
{
    char sopts[64];
    snprintf(sopts, sizeof sopts, "+:%s", shortopts); /* +: stop at a non-option; ':' for a missing value */
    int at = optind;
    int c = getopt_long(argc, argv, sopts, longopts, NULL);
    name[0] = 0;
    *value = NULL;
    if (c == -1) {
        if (optind > at && at < argc && !strcmp(argv[at], "--")) snprintf(name, 64, "--");
        return -1;
    }
    const char *a = argv[at];
    size_t n = strcspn(a, "=");
    snprintf(name, 64, "%.*s", (int)(n < 63 ? n : 63), a);
    if (c == '?' || !cli__exact(a, shortopts, longopts)) return '?';
    if (c == ':') cli_die(2, "%s expects a value (%s VALUE or %s=VALUE)", name, name, name);
    *value = optarg;
    return c;
}

#endif
