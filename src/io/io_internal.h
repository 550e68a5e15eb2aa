/*
 * io_internal.h - helpers shared inside src/io: atomic file writes, whole-file reads,
 * directory creation and the JSON string quoting used by safetensors headers and by the
 * feed/fetch lines of inference models.
 */
#ifndef FL_IO_INTERNAL_H
#define FL_IO_INTERNAL_H

#include <stddef.h>

#include "fleet/io.h"
#include "../exec/exec_internal.h"

/* ---- atomic.c -------------------------------------------------------------------------- */

/* A file being written atomically: data goes to "<path>.tmp.<pid>"; commit fsyncs it,
 * renames it over <path> and fsyncs the directory; abort (or any failure) removes the
 * temporary file.  Every error is FL_EIO naming the path and strerror(errno). */
typedef struct {
    int fd;
    char *path;
    char *tmp;
} fl__afile;

/* Creates the parent directory of path if needed and opens the temporary file. */
int fl__afile_open(fl__afile *f, const char *path);
/* Writes all n bytes (retries short writes and EINTR); on failure aborts the file. */
int fl__afile_write(fl__afile *f, const void *data, size_t n);
/* fsync + close + rename + fsync(dir).  The file is closed whatever the result. */
int fl__afile_commit(fl__afile *f);
/* Closes and removes the temporary file (safe on an unopened or closed file). */
void fl__afile_abort(fl__afile *f);
/* One-shot atomic write of a buffer. */
int fl__write_file_atomic(const char *path, const void *data, size_t n);
/* mkdir -p (mode 0777 & ~umask).  "" and "." succeed. */
int fl__mkdir_p(const char *dir);
/* Reads a whole file of at most max_bytes into a malloc'ed, NUL-terminated buffer.
 * Missing file: FL_ENOTFOUND; larger than max_bytes: FL_ECORRUPT; else FL_EIO. */
int fl__read_file(const char *path, size_t max_bytes, char **out, size_t *len);
/* "<dir>/<name>" (malloc'ed), or NULL with FL_ENOMEM set. */
char *fl__path_join(const char *dir, const char *name);

/* ---- safetensors.c --------------------------------------------------------------------- */

/* Appends s as a JSON string literal (with quotes) to b.  Returns FL_EINVAL if s is not
 * valid UTF-8. */
int fl__json_quote(fl_buf *b, const char *s);
/* Parses a JSON string literal starting at text[*pos] (which must be '"'); on success
 * *out is the malloc'ed UTF-8 value and *pos is just past the closing quote.  Rejects
 * control characters, bad escapes, invalid UTF-8 and \u0000.  On failure returns
 * FL_ECORRUPT with a short reason in why (no path: the caller names the file). */
int fl__json_unquote(const char *text, size_t len, size_t *pos, char **out, char *why, size_t why_cap);

#endif
