/*
 * data_internal.h - private pieces of the data layer shared by its files:
 *
 *   parse.c    line parsers (MultiSlot, Criteo, libsvm) that turn one text line into one
 *              binary record, the fast integer / float scanners they use, and the byte
 *              arenas they write into;
 *   source.c   reading a data file line by line, directly or through a pipe_command child;
 *   store.c    the in-memory record store (chunks + record references), batches;
 *   dataset.c  the fl_dataset handle, its setters and the reading passes;
 *   load.c     load_into_memory / preload (parallel parsing into the store);
 *   shuffle.c  local and global shuffle.
 *
 * Record layout (native byte order, no alignment): for each slot in use_var order, a dense
 * slot is `width` values; a LoD slot is a uint32 count followed by `count` values.  int64
 * slots hold 8-byte values (uint64 ids bit for bit), float32 slots 4-byte floats.
 */
#ifndef FL_DATA_INTERNAL_H
#define FL_DATA_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "fleet/data.h"
#include "../base/base_internal.h"

#define FL_DATASET_MAGIC 0x44415453u /* "DATS" */
#define FL_BATCH_MAGIC 0x42415443u   /* "BATC" */

/* Longest line a source accepts (a longer one is reported, not buffered without bound). */
#define FL__DATA_MAX_LINE ((size_t)256 << 20)
/* Skipped lines whose message is logged (the rest are only counted). */
#define FL__DATA_LOG_FIRST 5

typedef enum { FL__FMT_MULTISLOT = 0, FL__FMT_CRITEO, FL__FMT_LIBSVM } fl__data_format;

typedef struct {
    char *name;
    fl_dtype dtype; /* FL_INT64 or FL_FLOAT32 */
    int dense;      /* lod_level 0 */
    int width;      /* dense: values per instance */
    int esize;      /* bytes per value: 8 or 4 */
} fl__slot;

/* ---- growable byte arena (reused; never shrinks) ---- */
typedef struct {
    char *p;
    size_t len, cap;
} fl__arena;
int fl__arena_grow(fl__arena *a, size_t need);
static inline int fl__arena_reserve(fl__arena *a, size_t need)
{
    return FL_LIKELY(a->cap - a->len >= need) ? FL_OK : fl__arena_grow(a, need);
}
void fl__arena_free(fl__arena *a);

/* ---- parsing (parse.c) ---- */
typedef struct {
    const fl__slot *slots;
    int nslots;
    fl__data_format fmt;
    uint64_t sparse_dim; /* criteo */
    const char *file;    /* for messages */
} fl__parser;

/* Criteo dense scaling constants (Paddle's criteo reader). */
extern const double fl__criteo_min[13];
extern const double fl__criteo_diff[13];

/* Parses one line (without its '\n') and appends one record to out.  Returns FL_OK, or
 * FL_ECORRUPT with "FILE:LINE: slot 'NAME' (#K): what" in fl_last_error (out->len is then
 * unchanged), or FL_ENOMEM.  Allocates only when `out` must grow. */
int fl__parse_line(const fl__parser *ps, const char *line, size_t len, int64_t lineno, fl__arena *out);

/* Checks that `slots` fit the format; FL_EINVAL naming `fn` and the wrong variable. */
int fl__check_layout(const char *fn, fl__data_format fmt, const fl__slot *slots, int nslots);

/* Byte size of the record at p (at most avail bytes); 0 if it is not a well-formed record
 * of these slots (used to validate records received from other ranks). */
size_t fl__record_size(const fl__slot *slots, int nslots, const char *p, size_t avail);

/* Number scanners.  Each reads the whole token [s, e) and returns 0 ok, 1 not a number,
 * 2 out of range. */
int fl__scan_u64(const char *s, const char *e, uint64_t *out);
int fl__scan_i64(const char *s, const char *e, int64_t *out);
int fl__scan_f32(const char *s, const char *e, float *out);
int fl__scan_f64(const char *s, const char *e, double *out);

/* Writes a quoted, escaped, length-limited copy of [s, e) into buf ("'abc'"). */
void fl__quote(char *buf, size_t cap, const char *s, const char *e);

/* ---- sources (source.c) ---- */
typedef struct fl__source fl__source;
/* Opens `file`, directly when cmd is NULL or "cat", else through `/bin/sh -c cmd` with the
 * file on standard input.  timeout: seconds without output before the child is killed. */
int fl__source_open(fl__source **out, const char *file, const char *cmd, double timeout);
/* Next line (without '\n'; valid until the next call): 1, 0 at the end (the command, if any,
 * has exited with status 0), < 0 on error. */
int fl__source_next(fl__source *s, const char **line, size_t *len);
/* While *flag (read atomically) is non-zero, reads fail with FL_ESTATE; a wait for a silent
 * command looks at it every 100 ms.  Used to stop a background load. */
void fl__source_set_cancel(fl__source *s, const int *flag);
/* Bytes of the file behind the lines returned so far; -1 when a command reads the file
 * (its output says nothing about how much of the file it read). */
int64_t fl__source_consumed(const fl__source *s);
/* Kills a still running child, reaps it and frees everything.  NULL is ignored. */
void fl__source_close(fl__source *s);

/* ---- record store (store.c) ---- */
typedef struct {
    const char *p;
    uint64_t len;
} fl__rec;

typedef struct {
    char **chunks; /* malloc'd blocks the records point into */
    size_t nchunks, chunk_cap;
    fl__rec *recs;
    size_t nrec, rec_cap;
    size_t bytes; /* record bytes held */
} fl__store;
int fl__store_add_chunk(fl__store *st, char *chunk);
int fl__store_add_recs(fl__store *st, const fl__rec *r, size_t n);
/* Moves everything of src to the end of dst (src is left empty). */
int fl__store_append(fl__store *dst, fl__store *src);
void fl__store_free(fl__store *st);

/* Builder used by loaders: parses into the open chunk and seals it at ~4 MiB. */
typedef struct {
    fl__store st;
    fl__arena cur;
    size_t *offs;
    size_t noffs, offs_cap;
} fl__store_builder;
/* Records the record that occupies cur[start, cur.len). */
int fl__builder_commit(fl__store_builder *b, size_t start);
/* Seals the open chunk into the store (done at ~4 MiB by commit, and once at the end). */
int fl__builder_seal(fl__store_builder *b);
void fl__builder_free(fl__store_builder *b);

/* FL_EINVAL (naming fn) unless b is a live batch made for ds's slots. */
int fl__batch_check(const fl_data_batch *b, const fl_dataset *ds, const char *fn);
/* Fills the batch's tensors from n >= 1 records. */
int fl__batch_fill(fl_data_batch *b, const fl__rec *recs, int n);

/* ---- the dataset handle ---- */
typedef enum { FL__DS_QUEUE = 0, FL__DS_INMEM } fl__ds_kind;

typedef struct {
    fl__source *src;
    int file;
    int64_t lineno;
    fl__arena recs; /* records of the batch being built (queue) */
    size_t *offs;   /* their offsets in recs */
    fl__rec *refs;
    size_t begin, end, pos; /* share of the store (in-memory) */
    int done;
    int64_t counted; /* bytes of the current file already added to the pass's progress */
} fl__reader;

/* Counting and logging of skipped lines during one pass or load. */
typedef struct {
    int64_t bad;    /* atomic */
    int failed;     /* atomic: a reader failed (policy stop); others stop */
    int err_status; /* first error (under mu) */
    char err_msg[1024];
} fl__pass_log;

struct fl_dataset {
    uint32_t magic;
    fl__ds_kind kind;
    char **files;
    int nfiles;
    int batch_size;
    int thread_req;
    fl__slot *slots;
    int nslots;
    char *pipe_cmd;
    double pipe_timeout;
    fl__data_format fmt;
    int fmt_set;
    uint64_t sparse_dim;
    int skip_bad;

    pthread_mutex_t mu;
    /* pass */
    int in_pass;
    int next_file;
    int nreaders;
    fl__reader *readers;
    fl__pass_log log;
    int64_t last_bad;
    /* progress of the current or last pass (fl_dataset_progress): done and files_done are
     * atomics added to by the readers; file_bytes[i] is file i's size at fl_dataset_begin */
    int64_t prog_done, prog_total, prog_files_done;
    int64_t *file_bytes;

    /* in-memory */
    fl__store store;
    pthread_t preload_thr;
    int preloading; /* a preload thread exists (not yet joined) */
    int cancel;     /* atomic: stop a running load */
    int preload_status;
    char preload_msg[1024];
};

int fl__ds_nthreads(const fl_dataset *ds);
void fl__ds_parser(const fl_dataset *ds, const char *file, fl__parser *ps);
/* Records a bad line under the skip policy (counts it, logs the first few). */
void fl__ds_note_bad(fl_dataset *ds, fl__pass_log *lg);
/* Records the first error of a pass or load (message from fl_last_error()). */
void fl__ds_note_error(fl_dataset *ds, fl__pass_log *lg, int st);
void fl__pass_log_reset(fl__pass_log *lg);
/* Logs the total of skipped lines; returns the first error (restoring its message). */
int fl__pass_log_finish(fl_dataset *ds, fl__pass_log *lg, const char *what);

/* load.c */
int fl__ds_load(fl_dataset *ds);

#endif
