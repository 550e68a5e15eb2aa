/* error.c - thread-local last error and status names. */
#include <stdio.h>
#include <string.h>

#include "base_internal.h"

static _Thread_local int tl_status;
static _Thread_local char tl_msg[1024];

const char *fl_strerror(int st)
{
    switch (st) {
    case FL_OK: return "FL_OK";
    case FL_EINVAL: return "FL_EINVAL";
    case FL_ENOMEM: return "FL_ENOMEM";
    case FL_EIO: return "FL_EIO";
    case FL_ECORRUPT: return "FL_ECORRUPT";
    case FL_ENOTFOUND: return "FL_ENOTFOUND";
    case FL_ETIMEDOUT: return "FL_ETIMEDOUT";
    case FL_EREMOTE: return "FL_EREMOTE";
    case FL_EPROTO: return "FL_EPROTO";
    case FL_EUNSUPPORTED: return "FL_EUNSUPPORTED";
    case FL_ESTATE: return "FL_ESTATE";
    default: return "FL_E?";
    }
}

const char *fl_last_error(void) { return tl_msg; }
int fl_last_status(void) { return tl_status; }
void fl_clear_error(void)
{
    tl_status = FL_OK;
    tl_msg[0] = 0;
}

int fl__set_error(int status, const char *file, int line, const char *fmt, ...)
{
    char tmp[sizeof tl_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(tl_msg, tmp, sizeof tl_msg);
    tl_status = status;
    FL_LOG(FL_LOG_DEBUG, FL_SUB_BASE, "%s at %s:%d: %s", fl_strerror(status), file, line, tl_msg);
    return status;
}

int fl__set_handle_error(const void *h, const char *file, int line, const char *fmt, ...)
{
    char tmp[sizeof tl_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (h || tl_status == FL_OK || !tl_msg[0]) return fl__set_error(FL_EINVAL, file, line, "%s", tmp);
    char prev[sizeof tl_msg];
    memcpy(prev, tl_msg, sizeof prev);
    return fl__set_error(FL_EINVAL, file, line, "%.500s (an earlier call failed: %.500s)", tmp, prev);
}
