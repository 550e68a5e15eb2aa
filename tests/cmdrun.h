/*
 * cmdrun.h - the tests that run the examples and tools as a user would (test_ctr,
 * test_zoo, test_lightning): a shell command bounded by `timeout`, its output kept in
 * DIR/NAME.log and returned.  Include after testhelp.h.
 */
#ifndef FLEET_TESTS_CMDRUN_H
#define FLEET_TESTS_CMDRUN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs the command fmt... under `timeout -k 5 seconds` with stdout and stderr to
 * dir/name.log and returns the log (malloc'd).  rc NULL: a non-zero status fails the test;
 * otherwise *rc gets the exit status (of `timeout`, so of the command; -1 if killed). */
__attribute__((format(printf, 5, 6))) static char *th_cmd(const char *dir, const char *name, int seconds, int *rc,
                                                          const char *fmt, ...)
{
    char cmd[8192], body[7000], log[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    snprintf(cmd, sizeof cmd, "timeout -k 5 %d %s > %s 2>&1", seconds, body, log);
    int ws = system(cmd);
    FILE *f = fopen(log, "r");
    CHECK(f);
    static char buf[1 << 16];
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    char *s = strdup(buf);
    if (rc) *rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    else if (ws != 0) TFAIL("'%s' failed (status %d):\n%s", body, ws, s);
    return s;
}

/* The number printed right after key in s (a failed test if key is absent). */
static double th_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    if (!p) TFAIL("'%s' not found in:\n%s", key, s);
    return atof(p + strlen(key));
}

#endif
