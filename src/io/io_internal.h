/*
 * io_internal.h - helpers shared inside src/io: atomic file writes, whole-file reads,
 * directory creation, and the safetensors header writer that the parameter server's
 * streamed checkpoint files share.  (JSON itself is src/base/json.c.)
 */
#ifndef FL_IO_INTERNAL_H
#define FL_IO_INTERNAL_H

#include <stddef.h>

#include "fleet/io.h"
#include "../exec/exec_internal.h"

/* ---- atomic.c -------------------------------------------------------------------------- */

/* A file being written atomically: data goes to "<path>.tmp.<pid>.<host>"; commit fsyncs
 * it, renames it over <path> and fsyncs the directory; abort (or any failure) removes the
 * temporary file.  Every error is FL_EIO naming the path and strerror(errno).  Opening one
 * first sweeps the directory (fl__tmp_sweep). */
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
/* Removes from dir the temporary files of fl__afile that a process of this host left when it
 * was killed mid-write: names "<file>.tmp.<pid>.<host>" (or the older "<file>.tmp.<pid>")
 * whose host is this one and whose pid is gone (kill(pid, 0) fails with ESRCH).  Only regular
 * files; other hosts' temporaries (a shared file system) are left alone.  Best effort: returns
 * how many were removed, each logged at info level. */
int fl__tmp_sweep(const char *dir);
/* fl__tmp_sweep of the directory that holds path (loads call it: a load after a killed save). */
int fl__tmp_sweep_near(const char *path);
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

/* A tensor as a safetensors header describes it. */
typedef struct {
    const char *name;
    fl_dtype dtype;
    int ndim;
    const int64_t *shape;
} fl__st_desc;

/* Appends a complete safetensors header to out: the 8-byte little-endian length, then the
 * JSON (written with cJSON), padded with spaces to a multiple of 8.  The tensors' data
 * follows in the order given, packed.  __metadata__ holds "format": "fleet" and, when
 * meta_key is not NULL, meta_key: meta_val.  Names must be non-empty, valid UTF-8, unique
 * and not "__metadata__", dtypes one of the six: FL_EINVAL naming the tensor, without a
 * prefix (the caller adds which file). */
int fl__st_header(const fl__st_desc *t, int n, const char *meta_key, const char *meta_val, fl_buf *out);
/* The same with nmeta metadata entries mkeys[i]: mvals[i] after "format": "fleet". */
int fl__st_header_meta(const fl__st_desc *t, int n, const char *const *mkeys, const char *const *mvals, int nmeta,
                       fl_buf *out);
/* fl_io_write_safetensors with metadata entries, as fl__st_header_meta. */
int fl__st_write(const char *path, const char *const *names, const fl_tensor *const *tensors, int n,
                 const char *const *mkeys, const char *const *mvals, int nmeta);

/* The "__metadata__" strings of a safetensors file (malloc'ed copies). */
typedef struct {
    int n;
    char **keys, **vals;
} fl__st_meta;
void fl__st_meta_free(fl__st_meta *m);
/* The value of key, or NULL. */
const char *fl__st_meta_get(const fl__st_meta *m, const char *key);
/* fl_io_read_safetensors that also returns the metadata (meta may be NULL; on failure it is
 * left empty). */
int fl__st_read(const char *path, char ***names, fl_tensor ***tensors, int *n, fl__st_meta *meta);

/* ---- rows.c: tables stored as their non-zero rows ---------------------------------------- */

/* Tensors as written to a file: some of the caller's, borrowed, and the packed ones, owned. */
typedef struct {
    int n;
    const char **names;
    const fl_tensor **ts;
    char **own_names; /* the packed tensors' names and tensors, freed by fl__rows_free */
    fl_tensor **own_ts;
    int nown;
    char **mkeys, **mvals; /* "NAME@height": "<rows>" for each packed table */
    int nmeta;
} fl__rows_pack;

/* Packs each 2-D tensor of (names, ts) of at least 2 rows of which fewer than half are
 * non-zero (any bit set) into NAME@ids (int64 [n], ascending) and NAME@rows ([n, dim], the
 * tensor's dtype), with "NAME@height" in the metadata; other tensors pass through.  path
 * names the file in errors. */
int fl__rows_pack_tables(const char *path, const char *const *names, const fl_tensor *const *ts, int n, fl__rows_pack *out);
void fl__rows_pack_free(fl__rows_pack *p);
/* Rebuilds every table the metadata lists ("NAME@height") from NAME@ids and NAME@rows, bit
 * for bit (absent rows are zero), replacing the two entries of the arrays by NAME.  An id out
 * of range, ids not ascending, or a missing or misshapen part is FL_ECORRUPT naming path. */
int fl__rows_unpack_tables(const char *path, const fl__st_meta *meta, char ***names, fl_tensor ***ts, int *n);

#endif
