/*
 * env.c - every environment variable Fleet reads goes through these getters, and every
 * variable is listed here with its meaning:
 *
 *   FLEET_LOG_LEVEL    error|warn|info|debug|trace (default warn)
 *   FLEET_LOG_SUBSYS   comma list of subsystems, "all", ^name excludes (default all)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base_internal.h"

int fl__env_str(const char *name, const char *def, const char **out)
{
    const char *v = getenv(name);
    *out = (v && *v) ? v : def;
    return FL_OK;
}

int fl__env_int(const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return FL_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return fl__err(FL_EINVAL, "environment variable %s='%s' is invalid: expected an integer in [%lld, %lld]",
                       name, v, (long long)lo, (long long)hi);
    *out = x;
    return FL_OK;
}

int fl__env_double(const char *name, double def, double *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = def;
        return FL_OK;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end)
        return fl__err(FL_EINVAL, "environment variable %s='%s' is invalid: expected a number", name, v);
    *out = x;
    return FL_OK;
}
