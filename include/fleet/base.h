/*
 * fleet/base.h - status codes, error messages and logging.
 *
 * This module is the bottom layer of Fleet: every fallible call in the library returns
 * an int status (0 = FL_OK, a small negative code otherwise) and leaves a readable message
 * in a thread-local buffer reachable through fl_last_error().  The library never calls
 * exit() or abort() for runtime errors.
 *
 * It is not a general utility library: hashing, time and threads helpers used inside
 * Fleet live in the private header src/base/base_internal.h.
 */
#ifndef FLEET_BASE_H
#define FLEET_BASE_H

#include <stddef.h>
#include <stdint.h>

/* FL_API marks the public functions: the library is built with -fvisibility=hidden, so
 * only these are exported from libfleet.so (internal fl__ helpers never are). */
#if defined(__GNUC__) || defined(__clang__)
#define FL_API __attribute__((visibility("default")))
#else
#define FL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes.  Every public function that can fail returns one of these. */
enum {
    FL_OK = 0,
    FL_EINVAL = -1,       /* bad argument, ill-formed program, wrong feed */
    FL_ENOMEM = -2,       /* allocation failed */
    FL_EIO = -3,          /* file or socket I/O failed */
    FL_ECORRUPT = -4,     /* a file or frame is truncated or malformed */
    FL_ENOTFOUND = -5,    /* unknown variable, op, file or key */
    FL_ETIMEDOUT = -6,    /* a deadline expired */
    FL_EREMOTE = -7,      /* a peer reported an error or went away */
    FL_EPROTO = -8,       /* protocol violation */
    FL_EUNSUPPORTED = -9, /* a valid request that this build does not implement */
    FL_ESTATE = -10       /* call made in the wrong state (e.g. run before startup) */
};

/* The library's version, "MAJOR.MINOR.PATCH" (the Makefile's VERSION, e.g. "0.1.0"): a static
 * string, never NULL.  Compare it with the headers a program was built against when the
 * shared library may be a different install. */
FL_API const char *fl_version(void);

/* Returns a static name for a status code ("FL_EINVAL"). Never NULL. */
FL_API const char *fl_strerror(int status);

/* Returns the message of the last error set on the calling thread ("" if none).
 * The pointer stays valid until the next failing Fleet call on this thread. */
FL_API const char *fl_last_error(void);

/* Returns the status code of the last error on the calling thread (FL_OK if none). */
FL_API int fl_last_status(void);

/* Clears the calling thread's error. */
FL_API void fl_clear_error(void);

/* Log levels, lowest to highest verbosity.  The level comes from FLEET_LOG_LEVEL
 * (error|warn|info|debug|trace, default warn) and the subsystem mask from
 * FLEET_LOG_SUBSYS (comma list of base,tensor,graph,exec,io,data,net,ps,coll,fleet or
 * "all"; a leading ^ excludes).  Each line carries role, rank and pid. */
typedef enum { FL_LOG_ERROR = 0, FL_LOG_WARN, FL_LOG_INFO, FL_LOG_DEBUG, FL_LOG_TRACE } fl_log_level;

typedef enum {
    FL_SUB_BASE = 1 << 0,
    FL_SUB_TENSOR = 1 << 1,
    FL_SUB_GRAPH = 1 << 2,
    FL_SUB_EXEC = 1 << 3,
    FL_SUB_IO = 1 << 4,
    FL_SUB_DATA = 1 << 5,
    FL_SUB_NET = 1 << 6,
    FL_SUB_PS = 1 << 7,
    FL_SUB_COLL = 1 << 8,
    FL_SUB_FLEET = 1 << 9,
    FL_SUB_ALL = 0x3ff
} fl_log_subsys;

/* Optional sink replacing stderr.  Set before the first handle is created; not thread
 * safe with concurrent logging.  `line` is one complete line without trailing newline. */
typedef void (*fl_log_fn)(fl_log_level level, const char *line, void *user);
FL_API void fl_log_set_sink(fl_log_fn fn, void *user);

/* Sets the role and rank shown in each log line (e.g. "worker", 3). */
FL_API void fl_log_set_identity(const char *role, int rank);

#ifdef __cplusplus
}
#endif
#endif
