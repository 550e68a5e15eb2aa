/*
 * ps_internal.h - private interfaces of the parameter server (src/ps): the wire protocol
 * (frame.c), optimizer rules (optim.c), dense and sparse tables (table_dense.c,
 * table_sparse.c), checkpoint files (table_io.c, manifest.c), configuration helpers
 * (config.c), and the server's request service (service.c) behind its connection loop
 * (server.c).  The client (client.c, client_ops.c) uses only the frame layer.
 */
#ifndef FL_PS_INTERNAL_H
#define FL_PS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "fleet/ps.h"
#include "../base/base_internal.h"
#include "../io/io_internal.h"
#include "../net/liveness.h"
#include "../tensor/tensor_internal.h" /* the optimizer kernels and bfloat16 converters */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the PS wire protocol and checkpoint code assume a little-endian host"
#endif

#define FL_PS_MAGIC_SERVER 0x50535256u /* "VRSP" */
#define FL_PS_MAGIC_CLIENT 0x5053434cu

/* ---- frame.c: wire protocol ----------------------------------------------------------------
 *
 * Header (32 bytes, little-endian):
 *   magic u32 = "FPS1" (0x31535046), version u16 = 1, type u16, flags u32, reserved u32 = 0,
 *   request id u64, body length u64 (<= FL_PS_MAX_BODY).
 * A reply carries the request's id and type with FL__PS_F_REPLY; an error reply also has
 * FL__PS_F_ERROR and the body {status i32, message length u32, message bytes}.
 * Request bodies (offsets are multiples of 8 so ids and floats are aligned):
 *   HELLO       session u64, worker_rank u32, num_workers u32, num_servers u32,
 *               server_index u32, ntables u32, reserved u32, then per table: shape hash
 *               u64, rule hash u64, pushes u32, reserved u32 (config.c)
 *   PULL_DENSE  table u32, flags u32 (BF16), offset u64, count u64   (values of this shard)
 *   PUSH_DENSE  table u32, flags u32 (LAST | BF16), session u64, seq u64, offset u64,
 *               count u64, f32[count] (BF16: bf16[count])
 *   INIT_DENSE  table u32, flags u32 (LAST | FORCE), offset u64, count u64, f32[count]
 *   PULL_SPARSE table u32, flags u32 (TRAINING), n u64, ids u64[n]
 *   PUSH_SPARSE table u32, flags u32 (LAST | SHOWCLICK), session u64, seq u64, n u64,
 *               dim u32, reserved u32, ids u64[n], grads f32[n*dim],
 *               (SHOWCLICK:) shows f32[n], clicks f32[n]
 *   BARRIER     number u64 (1 for the first barrier of this worker)
 *   SAVE        phase u32 (1 write shards, 2 commit manifest, 3 remove old files),
 *               mode u32, generation u64, step i64, dir length u32, reserved u32, dir bytes
 *   LOAD        dir length u32, reserved u32, dir bytes
 *   SHRINK, STATS  table u32, reserved u32
 *   STOP, HEARTBEAT  (empty)
 *   SCAN_SPARSE table u32, reserved u32, first u64, n u64   (rows [first, first+n) of the
 *               shard, in storage order; the client learns the row count from STATS)
 * Reply bodies:
 *   PULL_DENSE  count u64, f32[count]          PULL_SPARSE n u64, dim u32, reserved u32,
 *   INIT_DENSE  applied u32, reserved u32                  f32[n*dim]
 *   HELLO       sync u32 (1: the server runs in sync mode), reserved u32
 *   LOAD        step i64                       SHRINK deleted i64
 *   STATS       rows i64, pending i64, bytes i64, payload_per_key f64
 *   SCAN_SPARSE n u64, dim u32, reserved u32, ids u64[n], f32[n*dim]
 *   others      (empty)
 * Every count is checked against the body length (n <= body/8 before any product; products
 * with dim in 64 bits with overflow checks), and the body length must equal exactly what
 * the counts imply. */

#define FL__PS_MAGIC 0x31535046u
#define FL__PS_VERSION 2 /* 2: hello tables of 24 bytes (shape and rule hashes, push kind) */
#define FL__PS_HDR 32
#define FL__PS_HELLO_TABLE 24
#define FL__PS_DIR_MAX 4096
#define FL__PS_MSG_MAX 4096

enum {
    FL__PS_HELLO = 1,
    FL__PS_PULL_DENSE,
    FL__PS_PUSH_DENSE,
    FL__PS_INIT_DENSE,
    FL__PS_PULL_SPARSE,
    FL__PS_PUSH_SPARSE,
    FL__PS_BARRIER,
    FL__PS_SAVE,
    FL__PS_LOAD,
    FL__PS_SHRINK,
    FL__PS_STATS,
    FL__PS_STOP,
    FL__PS_HEARTBEAT,
    FL__PS_SCAN_SPARSE,
    FL__PS_TYPE_END
};
/* header flags */
#define FL__PS_F_REPLY 1u
#define FL__PS_F_ERROR 2u
/* body flags */
#define FL__PS_B_LAST 1u
#define FL__PS_B_FORCE 2u
#define FL__PS_B_TRAINING 4u
#define FL__PS_B_SHOWCLICK 8u
/* dense values travel as bfloat16 (a PULL_DENSE reply then holds count u64, bf16[count]);
 * the server converts, its tables stay float32 */
#define FL__PS_B_BF16 16u

const char *fl__ps_type_name(unsigned type);

/* float32 <-> bfloat16 of the dense wire: the tensor layer's (src/tensor/half.h, one value;
 * fl__cvt_f32_to_bf16 / fl__cvt_bf16_to_f32, a vector). */

typedef struct {
    uint16_t type;
    uint32_t flags;
    uint64_t req_id;
    uint64_t len;
} fl__ps_hdr;

/* A decoded message; pointers point into the decoded buffer. */
typedef struct {
    fl__ps_hdr h;
    uint32_t table, bflags, mode, phase;
    uint64_t session, seq, gen, offset, n;
    int64_t step;
    uint32_t dim;
    const uint64_t *ids;
    const float *vals, *shows, *clicks;
    const uint16_t *vals16; /* PUSH_DENSE with BF16: the values (vals is NULL) */
    const char *str;        /* dir or error message (not NUL-terminated) */
    uint32_t str_len;
    int32_t status; /* error replies */
    uint32_t worker_rank, num_workers, num_servers, server_index, ntables, applied;
    const uint8_t *tables_wire; /* HELLO: ntables entries of FL__PS_HELLO_TABLE bytes */
    int64_t i64[3];
    double f64;
} fl__ps_msg;

/* Writes a header into out[FL__PS_HDR]. */
void fl__ps_hdr_encode(uint8_t *out, uint16_t type, uint32_t flags, uint64_t req_id, uint64_t len);
/* Checks magic, version, reserved bits, type, flags and len <= max_body.  FL_EPROTO with a
 * reason (no peer name: the caller adds it). */
int fl__ps_hdr_decode(const uint8_t *in, uint64_t max_body, fl__ps_hdr *out);
/* Decodes and validates a body of the given header.  `body` must be 8-byte aligned (or
 * len 0).  FL_EPROTO for malformed content. */
int fl__ps_body_decode(const fl__ps_hdr *h, const uint8_t *body, fl__ps_msg *m);
/* Whole frame (header + body, exactly len bytes) - the fuzzer's entry point.  buf must be
 * 8-byte aligned. */
int fl__ps_frame_decode(const uint8_t *buf, size_t len, fl__ps_msg *m);

/* Growable, 8-aligned byte buffer used to build frames (header space first). */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} fl__ps_wbuf;
int fl__ps_wbuf_reserve(fl__ps_wbuf *b, size_t extra);
/* Starts a frame: len = FL__PS_HDR (header written by fl__ps_wbuf_finish). */
void fl__ps_wbuf_begin(fl__ps_wbuf *b);
int fl__ps_put_u32(fl__ps_wbuf *b, uint32_t v);
int fl__ps_put_u64(fl__ps_wbuf *b, uint64_t v);
int fl__ps_put(fl__ps_wbuf *b, const void *p, size_t n);
/* Fills the header for body length len - FL__PS_HDR + extra_len (payload sent separately). */
void fl__ps_wbuf_finish(fl__ps_wbuf *b, uint16_t type, uint32_t flags, uint64_t req_id, uint64_t extra_len);
void fl__ps_wbuf_free(fl__ps_wbuf *b);

/* Sends b (header + fixed part) then each payload slice, all before deadline. */
int fl__ps_send(fl_net_conn *c, const fl__ps_wbuf *b, const void *const *parts, const size_t *lens, int nparts,
                uint64_t deadline);
/* Sends an error reply {status, message}. */
int fl__ps_send_error(fl_net_conn *c, uint16_t type, uint64_t req_id, int status, const char *msg, uint64_t deadline);

/* Receive buffer reused across frames. */
typedef struct {
    uint8_t *p;
    size_t cap;
} fl__ps_rbuf;
void fl__ps_rbuf_free(fl__ps_rbuf *r);
/* Receives one whole frame into r and decodes it into m. FL_EREMOTE: peer closed before a
 * frame; FL_EPROTO / FL_ECORRUPT: bad or truncated frame; FL_ETIMEDOUT. */
int fl__ps_recv(fl_net_conn *c, fl__ps_rbuf *r, uint64_t max_body, fl__ps_msg *m, uint64_t deadline);

/* ---- optim.c: optimizer rules ------------------------------------------------------------ */

typedef struct {
    fl_ps_opt_kind kind;
    float lr, l2, eps_f; /* eps_f: Adagrad epsilon as float */
    double b1, b2, eps;  /* Adam */
    float mu;            /* Momentum */
    int nesterov;
    int nstate; /* state floats per parameter float: 0, 1 (Adagrad, Momentum) or 2 (Adam) */
} fl__ps_opt;

void fl__ps_opt_init(fl__ps_opt *o, const fl_ps_optimizer *cfg);
/* Adam's pow accumulators at step 1 (beta1, beta2 as floats). */
void fl__ps_opt_pows_init(const fl__ps_opt *o, float pows[2]);
/* pows *= beta, as the local adam op does (no-op for other rules). */
void fl__ps_opt_pows_advance(const fl__ps_opt *o, float pows[2]);
/* One push's step: the rule, the gradient scale and Adam's coefficients, computed once by
 * fl__ps_step_begin (FL_EINVAL for Adam pows outside [0, 1) or an unknown kind), then
 * applied to each dense block or sparse row by fl__ps_step_apply through the tensor layer's
 * kernels (src/tensor/optim_kernels.c, those of the local ops). */
typedef struct {
    const fl__ps_opt *o;
    float scale;
    fl__adam_coef adam;
} fl__ps_step;
int fl__ps_step_begin(const fl__ps_opt *o, const float pows[2], float scale, fl__ps_step *s);
/* g = grad * scale (scale 1 for async, 1/W for sync) on n parameters.  m1, m2: state
 * arrays (Adagrad moment or Momentum velocity in m1; Adam moments in m1, m2), NULL when
 * unused. */
void fl__ps_step_apply(const fl__ps_step *s, float *w, float *m1, float *m2, const float *grad, int64_t n);
/* Both at once (one block). */
int fl__ps_opt_apply(const fl__ps_opt *o, float *w, float *m1, float *m2, const float *grad, int64_t n, float scale,
                     const float pows[2]);

/* ---- config.c ------------------------------------------------------------------------------ */

typedef struct {
    int kind; /* 0 none, 1 count filter, 2 probability */
    uint32_t count;
    double prob;
} fl__ps_entry;

int fl__ps_entry_parse(const char *s, const char *table, fl__ps_entry *out);
/* Accessor with defaults filled. */
void fl__ps_accessor_fill(const fl_ps_accessor *in, fl_ps_accessor *out);
/* A stable 64-bit hash of a table's configuration (what client and server compare). */
/* What a table's pushes carry (FL__PS_PUSH_*), and its words for messages. */
enum { FL__PS_PUSH_GRADS = 0, FL__PS_PUSH_SCALED = 1, FL__PS_PUSH_DELTAS = 2 };
int fl__ps_table_pushes(const fl_ps_table_config *t);
const char *fl__ps_pushes_name(int pushes);
/* The hello's two hashes per table: what client and server must share (name, kind, shape
 * or dim, what pushes carry), and the server's own settings (optimizer and its
 * hyperparameters, sparse initializer, entry, accessor), which apply when a client's
 * differ. */
uint64_t fl__ps_table_shape_hash(const fl_ps_table_config *t);
uint64_t fl__ps_table_rule_hash(const fl_ps_table_config *t);
/* Deep copy of a table list (names and entries strdup'ed); free with fl__ps_tables_free. */
int fl__ps_tables_copy(const fl_ps_table_config *in, int n, fl_ps_table_config **out);
void fl__ps_tables_free(fl_ps_table_config *t, int n);
const char *fl__ps_opt_name(fl_ps_opt_kind k);

/* ---- table_dense.c ------------------------------------------------------------------------- */

typedef struct fl__ps_dense fl__ps_dense;
int fl__ps_dense_create(const fl_ps_table_config *cfg, int server, int nservers, fl__ps_dense **out);
void fl__ps_dense_free(fl__ps_dense *t);
int64_t fl__ps_dense_numel(const fl__ps_dense *t); /* floats held by this shard */
void fl__ps_dense_rows(const fl__ps_dense *t, int64_t *row0, int64_t *row1);
/* [offset, offset+count) must lie inside the shard (checked by the caller). */
void fl__ps_dense_pull(fl__ps_dense *t, uint64_t offset, uint64_t count, float *out);
int fl__ps_dense_push(fl__ps_dense *t, uint64_t offset, uint64_t count, const float *grad, float scale, int last);
/* *applied: 1 when the values were taken (force, or not initialized yet). */
void fl__ps_dense_init(fl__ps_dense *t, uint64_t offset, uint64_t count, const float *vals, int force, int last,
                       int *applied);
void fl__ps_dense_stats(fl__ps_dense *t, fl_ps_table_stats *out);
/* Checkpoint: writes this shard's safetensors file; load reads one (all-or-nothing into a
 * fresh table made by the caller). */
int fl__ps_dense_save(fl__ps_dense *t, const char *path);
int fl__ps_dense_load(fl__ps_dense *t, const char *path);

/* ---- table_sparse.c ------------------------------------------------------------------------ */

#define FL__PS_STRIPES 64

typedef struct fl__ps_sparse fl__ps_sparse;
/* server / nservers: this shard's index (load checks that every key belongs here). */
int fl__ps_sparse_create(const fl_ps_table_config *cfg, int server, int nservers, fl__ps_sparse **out);
void fl__ps_sparse_free(fl__ps_sparse *t);
int fl__ps_sparse_dim(const fl__ps_sparse *t);
/* out: n x dim.  training: create / count absent ids per the entry policy. */
int fl__ps_sparse_pull(fl__ps_sparse *t, const uint64_t *ids, uint64_t n, float *out, int training);
/* Applies grads (n x dim, ids distinct) scaled by `scale`; shows/clicks may be NULL (1 and
 * 0).  The table's Adam pows are read at the start and advanced when `last`. */
int fl__ps_sparse_push(fl__ps_sparse *t, const uint64_t *ids, uint64_t n, const float *grads, const float *shows,
                       const float *clicks, float scale, int last);
/* CtrCommonAccessor shrink; returns rows deleted. */
int64_t fl__ps_sparse_shrink(fl__ps_sparse *t);
void fl__ps_sparse_stats(fl__ps_sparse *t, fl_ps_table_stats *out);
/* The value one absent id would be created with (for tests and documentation). */
void fl__ps_sparse_init_row(const fl__ps_sparse *t, uint64_t id, float *out);
/* Checkpoint of this shard (mode 0..3 as fl_ps_client_save), streamed under the table's
 * write lock; load replaces the contents of a fresh table. */
int fl__ps_sparse_save(fl__ps_sparse *t, const char *path, int mode);
int fl__ps_sparse_load(fl__ps_sparse *t, const char *path);
/* Row access for table_io helpers and tests: returns 1 and copies the row's values (and
 * show, click when non-NULL) if id is stored. */
int fl__ps_sparse_get(fl__ps_sparse *t, uint64_t id, float *vals, float *show, float *click);
/* Rows [first, first + n) of the shard in its storage order (stable while nothing is
 * inserted or deleted): ids[n] and vals[n x dim].  FL_ESTATE if the shard holds fewer. */
int fl__ps_sparse_scan(fl__ps_sparse *t, uint64_t first, uint64_t n, uint64_t *ids, float *vals);

/* Layout shared by table_sparse.c, table_sparse_io.c and table_ssd.c.  A stripe is an
 * open-addressing (linear probing) map from id to a row index (3/5 to 3/4 full, growing by
 * a quarter, stripes at different row counts: table_sparse.c), rows living in chunks of
 * 2^chunk_shift rows (FL__PS_CHUNK_SHIFT, smaller for small SSD budgets) of `stride` bytes: {id u64, show f32, click f32, delta_score f32,
 * unseen_days u16, flags u16, values f32[dim], state f32[nstate*dim]}.  A free row (on the
 * free list) has FL__PS_ROW_FREE in its flags; FL__PS_ROW_REF is the CLOCK reference bit of
 * SSD tables (set by every training touch).  The same bytes are an SSD table's RocksDB
 * value.  Ids waiting for admission by count_filter_entry live in a second small map (pkeys,
 * pcounts; count 0 = empty slot). */
#define FL__PS_CHUNK_SHIFT 8 /* 256 rows per chunk */
#define FL__PS_ROW_HDR 24
#define FL__PS_ROW_FREE 1u
#define FL__PS_ROW_REF 2u
#define FL__PS_UNSEEN_MAX 0xffffu /* unseen_days saturates here */

typedef struct {
    uint64_t key;
    float show, click, delta_score;
    uint16_t unseen_days;
    uint16_t flags;
} fl__ps_rowhdr;

/* A slot holds ((row index + 1) << 6) | tag, 0 = empty; the tag (6 bits of the inner hash)
 * lets a probe skip most non-matching slots without reading their row.  Row indices of a
 * stripe stay below 2^26 - 1 (about 4.3e9 rows per server shard). */
#define FL__PS_MAX_STRIPE_ROWS ((1u << 26) - 2)
#define FL__PS_SLOT_TAG(hs) ((uint32_t)((hs) >> 52) & 63u)
#define FL__PS_SLOT_MAKE(idx, hs) ((((uint32_t)(idx) + 1u) << 6) | FL__PS_SLOT_TAG(hs))
#define FL__PS_SLOT_IDX(v) (((v) >> 6) - 1u)

typedef struct {
    pthread_mutex_t mu;
    uint32_t *slots; /* see FL__PS_SLOT_MAKE; 0 = empty */
    uint64_t cap;    /* slots (0: none yet); any size below 2^32 */
    uint32_t nrows, nalloc, nchunks, chunks_cap;
    uint8_t **chunks;
    uint32_t *freel;
    uint32_t nfree, free_cap;
    uint64_t *pkeys;
    uint32_t *pcounts;
    uint64_t pcap;
    uint32_t plen;
    uint32_t hand; /* SSD tables: the CLOCK hand (a row index) */
    fl_rng rng;    /* probability_entry draws */
} fl__ps_stripe;

typedef struct fl__ps_ssd fl__ps_ssd; /* table_ssd.c */

struct fl__ps_sparse {
    fl_ps_table_config cfg;
    fl__ps_opt opt;
    fl__ps_entry entry;
    fl_ps_accessor acc;
    int dim, server, nservers;
    size_t stride;
    uint32_t chunk_shift; /* rows per chunk: 2^chunk_shift */
    uint64_t seed;
    pthread_rwlock_t lk; /* read: requests (then stripe locks); write: save (whole table) */
    pthread_mutex_t pow_mu;
    float pows[2];
    fl__ps_ssd *ssd;      /* NULL: in memory only */
    uint32_t stripe_rows; /* SSD tables: rows a stripe keeps in memory */
    /* rows inserted or deleted so far (either tier): a scan cursor is valid while it holds */
    _Atomic uint64_t changes;
    /* Where the last fl__ps_sparse_scan page ended, so that paging through the shard is one
     * pass: the next page starts there when it asks for row `rank` and nothing changed.
     * stripe < FL__PS_STRIPES: row index idx of that stripe; FL__PS_STRIPES: the disk rows
     * after disk_key (or the first one when !disk_key_set). */
    pthread_mutex_t scan_mu;
    struct {
        int valid, stripe, disk_key_set;
        uint32_t idx;
        uint64_t rank, changes, disk_key;
    } scan;
    fl__ps_stripe st[FL__PS_STRIPES];
};

/* Hash used inside a server (independent of the server choice fl__hash_u64(id) % n):
 * stripe = top 6 bits, slot = low bits. */
static inline uint64_t fl__ps_inner_hash(uint64_t id) { return fl__hash_u64(fl__hash_u64(id) ^ 0x9e3779b97f4a7c15ULL); }
static inline uint8_t *fl__ps_row(const fl__ps_sparse *t, const fl__ps_stripe *s, uint32_t idx)
{
    return s->chunks[idx >> t->chunk_shift] + (size_t)(idx & ((1u << t->chunk_shift) - 1)) * t->stride;
}
/* The row of id in stripe s or NULL (stripe lock held). */
uint8_t *fl__ps_stripe_find(const fl__ps_sparse *t, const fl__ps_stripe *s, uint64_t id, uint64_t hs);
/* Inserts a row for id (absent) with the given header and values (NULL: initializer) and
 * zero state; returns its pointer or NULL (FL_ENOMEM set).  Stripe lock held. */
uint8_t *fl__ps_stripe_insert(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs);
/* Inserts id (absent) with a whole stored row (header and values, as FL__PS_ROW_HDR +
 * stride bytes of another row); returns its pointer or NULL.  Stripe lock held. */
uint8_t *fl__ps_stripe_insert_raw(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs, const uint8_t *row);
/* Removes the row of id if present (1), else 0; < 0 when out of memory.  Stripe lock held. */
int fl__ps_stripe_remove(fl__ps_sparse *t, fl__ps_stripe *s, uint64_t id, uint64_t hs);
/* Sets a pending count (insert or overwrite).  Stripe lock held. */
int fl__ps_pending_set(fl__ps_stripe *s, uint64_t id, uint64_t hs, uint32_t count);
/* Whether a row is written by a save of this mode (0..3). */
int fl__ps_row_selected(const fl__ps_sparse *t, const fl__ps_rowhdr *h, int mode);
/* Shrink of one row: decays show and click; returns 1 if the row is to be deleted. */
int fl__ps_row_shrink(const fl__ps_sparse *t, fl__ps_rowhdr *h);

/* ---- table_ssd.c: the RocksDB tier of SSD tables (FL_HAVE_ROCKSDB) -------------------------- */

/* Checks ssd_path / mem_budget_mb of a sparse table config (FL_EUNSUPPORTED without RocksDB). */
int fl__ps_ssd_check(const fl_ps_table_config *t);
/* Opens a fresh, empty database for t (sets t->ssd and t->stripe_rows); close removes it. */
int fl__ps_ssd_open(fl__ps_sparse *t);
void fl__ps_ssd_close(fl__ps_sparse *t);
/* Rows on disk. */
int64_t fl__ps_ssd_rows(const fl__ps_sparse *t);
/* Ids order[q] for q in [q0, q1) of stripe s (inner hashes hs[]) that are not in memory are
 * looked up on disk in one MultiGet.  promote = 1: found rows move into memory (a training
 * touch); 0: their values are copied to out + position * dim and *found[position] is set.
 * Stripe lock held. */
int fl__ps_ssd_fetch(fl__ps_sparse *t, fl__ps_stripe *s, const uint64_t *ids, const uint64_t *hs, const uint32_t *order,
                     uint32_t q0, uint32_t q1, int promote, float *out, uint8_t *found);
/* Moves rows of stripe s to disk (CLOCK: the first rows found without a reference bit,
 * clearing bits on the way) until it holds no more than t->stripe_rows.  Stripe lock held. */
int fl__ps_ssd_evict(fl__ps_sparse *t, fl__ps_stripe *s);
/* Copies the disk row of id (FL__PS_ROW_HDR + values + state bytes) into row; 1 found, 0
 * not, < 0 error. */
int fl__ps_ssd_get(fl__ps_sparse *t, uint64_t id, uint8_t *row);
/* Visits every disk row in key order (table write lock held, or nothing changes the table).
 * fn may change the row and returns FL__PS_VISIT_*; changes are written in batches (each
 * row whole). */
enum { FL__PS_VISIT_KEEP, FL__PS_VISIT_WRITE, FL__PS_VISIT_DELETE, FL__PS_VISIT_STOP };
typedef int (*fl__ps_ssd_visit_fn)(void *user, uint8_t *row);
int fl__ps_ssd_foreach(fl__ps_sparse *t, fl__ps_ssd_visit_fn fn, void *user);
/* The same from the first disk row whose key (8 id bytes, compared as bytes) is >= *from
 * (from NULL: the first row). */
int fl__ps_ssd_foreach_from(fl__ps_sparse *t, const uint64_t *from, fl__ps_ssd_visit_fn fn, void *user);

/* ---- table_io.c: streaming safetensors writer shared by both tables ------------------------ */

typedef struct {
    const char *name;
    fl_dtype dtype;
    int ndim;
    int64_t shape[2];
} fl__ps_st_tensor;

/* Writes a safetensors header for these tensors (in this order, packed) to an open atomic
 * file; the caller then writes each tensor's bytes in order and commits. */
int fl__ps_st_write_header(fl__afile *f, const fl__ps_st_tensor *t, int n, const char *table);
/* Finds a tensor by name among those read; checks dtype and shape (dims < 0 = any).
 * FL_ECORRUPT names the file and tensor. */
int fl__ps_st_find(char **names, fl_tensor **tensors, int n, const char *path, const char *name, fl_dtype dt, int ndim,
                   const int64_t *shape, fl_tensor **out);

/* ---- manifest.c ------------------------------------------------------------------------------ */

#define FL__PS_MANIFEST "ps_manifest.json"

/* "<dir>/<table>/part-<server>-<gen>.safetensors" (malloc'ed) */
char *fl__ps_part_path(const char *dir, const char *table, int server, uint64_t gen);
int fl__ps_manifest_write(const char *dir, uint64_t gen, int64_t step, int mode, int nservers,
                          const fl_ps_table_config *tables, int ntables);
/* Reads and checks the manifest against the table list and server count. */
int fl__ps_manifest_read(const char *dir, const fl_ps_table_config *tables, int ntables, int nservers, uint64_t *gen,
                         int64_t *step);
/* Removes this server's part files of generations other than keep_gen (errors logged). */
void fl__ps_remove_old_parts(const char *dir, const fl_ps_table_config *tables, int ntables, int server, uint64_t keep_gen);

/* ---- the client (client.c: connections, requests, control calls; client_ops.c: tables) ---- */

typedef struct {
    char host[FL_NET_HOST_MAX];
    int port;
    struct fl_ps_client *client;
    fl_net_conn *conn;         /* NULL after a failure: reconnected on the next request */
    int gone;                  /* the last request failed because the server answered nothing, not
                        * even heartbeats: not retried (request thread only) */
    _Atomic uint64_t alive_ns; /* when the server last answered a heartbeat or a connect */
    char lost[512];            /* why conn was dropped in the current call (request thread only) */
    /* heartbeat thread only */
    fl_net_conn *hb; /* its own connection */
    uint64_t hb_id;  /* the heartbeat waiting for its answer (0: none) */
    uint8_t hb_rx[FL__PS_HDR];
    size_t hb_got;
    char label[FL_NET_HOST_MAX + 32]; /* "server 1 (host:port)" */
} fl__ps_csrv;

/* One request of a call to several servers, and where its reply goes. */
typedef struct {
    int server;
    uint16_t type;
    fl__ps_wbuf fixed; /* header + fixed part */
    const void *parts[4];
    size_t lens[4];
    int nparts;
    void *dst; /* reply payload after the fixed reply part goes here (or NULL) */
    uint64_t dst_len;
    int wire16;       /* PULL_DENSE asked for bf16: the payload holds 2 bytes per value */
    fl__ps_msg reply; /* decoded fixed reply (pointers not valid after the call) */
    int st;
} fl__ps_call;

struct fl_ps_client {
    uint32_t magic;
    fl_ps_client_opts o;
    fl_ps_table_config *cfgs;
    int ntables, ns, server_sync;
    int64_t nofile; /* descriptors counted in fl__nofile_hold: a request and a heartbeat connection per server */
    fl_net_secret secret;
    fl_net_auth auth;
    fl__ps_csrv *srv;
    pthread_mutex_t mu; /* one call at a time */
    uint64_t session, seq, req_id, barriers;
    uint64_t hb_seq; /* the last heartbeat id (heartbeat thread only) */
    int stopped;
    fl__ps_rbuf rb;
    /* liveness (client_hb.c, on src/net/liveness.h) */
    fl__live_hb hb;
    fl__live_clock live; /* when this process last ran again after being stopped */
    /* scratch of client_ops.c */
    fl__ps_call *calls;
    int ncalls_cap;
    uint64_t *uids, *gids, *hkeys;
    uint32_t *pos, *gidx, *hslot;
    float *gvals, *gshow, *gclick;
    size_t cap_n, cap_u, cap_h, cap_vals;
    uint16_t *wire16; /* dense values in bf16 (dense_wire_dtype) */
    size_t cap_wire16;
    /* traffic (fl_ps_client_traffic) */
    _Atomic uint64_t tx_bytes, rx_bytes, tx_dense, rx_dense, nreq;
};

/* client_hb.c: heartbeats and the liveness of servers */
/* Starts / stops the heartbeat thread (no-op with heartbeat_ms <= 0). */
int fl__ps_client_hb_start(fl_ps_client *c);
void fl__ps_client_hb_stop(fl_ps_client *c);
/* The watch set on every request connection (fl__net_conn_set_watch): fails a wait whose
 * server has answered nothing, not even a heartbeat, for server_timeout_ms (FL_EREMOTE,
 * sets sv->gone); notes when this process itself was stopped. */
int fl__ps_client_watch(void *sv, fl_net_conn *nc, uint64_t idle_ns, uint64_t stalled_ns);
/* Rewords a request's FL_ETIMEDOUT: a server that answers heartbeats is slow, not silent;
 * a process that was itself stopped past the deadline says so. */
int fl__ps_client_timeout_error(fl_ps_client *c, int server, const char *what);

/* client.c */
/* Runs n calls: sends every request, then collects every reply (payloads straight into
 * dst).  Connection failures of idempotent calls are retried (reconnect + resend) for up
 * to retry_ms.  Returns the first error, naming the server. */
int fl__ps_client_run(fl_ps_client *c, fl__ps_call *calls, int n, uint64_t deadline, int idempotent);
/* Makes room for n calls in c->calls (fixed buffers kept across calls). */
int fl__ps_client_calls(fl_ps_client *c, int n);
/* Deadline of pushes (barrier timeout in sync mode, request timeout otherwise). */
uint64_t fl__ps_client_push_deadline(const fl_ps_client *c);
int fl__ps_client_enter(fl_ps_client *c, const char *fn, int table, fl_ps_table_kind kind);
/* The table check of fl__ps_client_enter alone (kind < 0: any kind). */
int fl__ps_client_check_table(const fl_ps_client *c, const char *fn, int table, fl_ps_table_kind kind);

/* ---- the server: connections and loop (server.c), requests (service.c, sync.c) ------------- */

typedef struct {
    fl_ps_table_config cfg;
    fl__ps_dense *dense;
    fl__ps_sparse *sparse;
} fl__ps_table;

/* One accepted connection.  A pool thread that reads a request "owns" it (busy) until it
 * has answered or deferred it (serving while it executes a whole request, as opposed to
 * waiting for the rest of one); deferred replies (barrier, sync push) hold a reference and
 * send under send_mu.  Freed when closed and unreferenced (server mutex). */
typedef struct {
    fl_net_conn *nc;
    int rank, busy, serving, closed, refs;
    pthread_mutex_t send_mu;
    fl__ps_rbuf rb;
    fl__ps_wbuf wb;
    float *f32; /* a bf16 push converted to float32 */
    size_t cap_f32;
    char label[128];
} fl__ps_sconn;

typedef struct {
    fl__ps_sconn *c;
    uint64_t req_id;
    uint16_t type;
} fl__ps_waiter;

typedef struct {
    fl__ps_waiter *w;
    int n, cap;
} fl__ps_waitlist;

/* Sync-mode step of one table on this server. */
typedef struct {
    pthread_mutex_t mu;
    uint64_t step;
    uint8_t *pushed; /* per worker: 0 not yet, 1 some chunks, 2 complete */
    uint64_t *pend_seq, *pend_session;
    int ncomplete;
    fl__ps_waitlist waiters;
    float *acc; /* dense: shard-sized sum of acc_n floats */
    int64_t acc_n;
    /* sparse: merged ids of this step (open addressing: slot -> index + 1) */
    uint64_t *ids;
    float *grads, *shows, *clicks;
    uint64_t nids, idcap;
    uint32_t *slots;
    uint64_t slotcap;
} fl__ps_sync;

typedef struct {
    uint64_t session, last_seq;
    pthread_mutex_t mu;
} fl__ps_session;

typedef struct {
    fl__ps_sconn *c; /* a connection with a request to read */
} fl__ps_job;

struct fl_ps_server {
    uint32_t magic;
    fl_ps_server_opts o;
    fl_ps_table_config *cfgs;
    int ntables;
    fl_net_secret secret;
    fl_net_auth auth;
    fl_net_listener *lis;
    fl_net_acceptor *acc;             /* handshakes, run by the loop thread */
    fl_net_acceptor_stats acc_logged; /* counts at the last log line about refusals */
    uint64_t acc_log_ns;
    char endpoint[FL_NET_HOST_MAX + 16];
    char me[64];         /* "server 0 (host:port)" for messages */
    fl__live_clock live; /* the loop's stopped-self clock (src/net/liveness.h) */

    pthread_rwlock_t tab_lk; /* read: any request; write: load swaps tables */
    fl__ps_table *tab;
    fl__ps_sync *sync; /* per table, sync mode only */

    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    int wake[2];
    uint8_t rule_noted[FL_PS_MAX_TABLES]; /* a worker's table settings differed (logged once) */
    fl__ps_sconn **conns;
    int nconns, conns_cap;
    fl__ps_job *jobs;
    int njobs, jobs_head, jobs_cap, quit;
    int lingering; /* request threads waiting for their connection's next frame */
    pthread_t *threads;
    int nthreads, running;
    volatile int shutdown_req;
    int failed, fail_st;
    char fail_msg[768];
    /* per worker */
    int *nconn, *stopped, *seen;
    uint64_t *last_seen, *lost_since;
    char (*addr)[64];
    /* barrier (server 0) */
    uint64_t bar_done;
    uint8_t *arrived;
    int narrived;
    fl__ps_waitlist bar_waiters;
    fl__ps_session **sessions;
    int nsessions, sessions_cap;
};

/* server.c */
void fl__ps_conn_unref(fl_ps_server *s, fl__ps_sconn *c);
/* Marks a worker as heard from now (server mutex taken inside). */
void fl__ps_note_seen(fl_ps_server *s, int rank);
/* Records the first fatal failure; run returns it. */
void fl__ps_server_fail(fl_ps_server *s, int st, const char *msg);
/* Fresh tables for a load; swap them in (old ones freed) or drop them. */
int fl__ps_server_new_tables(fl_ps_server *s, fl__ps_table **out);
int fl__ps_server_swap_tables(fl_ps_server *s, fl__ps_table *fresh);
void fl__ps_server_drop_tables(fl_ps_server *s, fl__ps_table *t);

/* service.c: handles one decoded request from c (replies or defers); returns FL_OK, or an
 * error after which the connection must be closed (the reply could not be sent). */
int fl__ps_dispatch(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m);
int fl__ps_reply(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, const fl__ps_wbuf *b, const void *payload,
                 size_t plen);
int fl__ps_reply_error(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, int st, const char *fmt, ...) FL_PRINTF(5, 6);
/* Answers (empty reply, or error when st != 0) and releases every waiter of the list. */
void fl__ps_waiters_finish(fl_ps_server *s, fl__ps_waitlist *wl, int st, const char *msg);
int fl__ps_waiters_add(fl__ps_waitlist *wl, fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m);
/* Load every table of this server from dir (all-or-nothing, swaps under tab_lk). */
int fl__ps_server_load_dir(fl_ps_server *s, const char *dir, int64_t *step);
fl__ps_session *fl__ps_session_get(fl_ps_server *s, uint64_t session);

/* sync.c: sync-mode pushes and the failure of steps that can no longer complete. */
int fl__ps_sync_init(fl_ps_server *s);
void fl__ps_sync_free(fl_ps_server *s);
int fl__ps_sync_push(fl_ps_server *s, fl__ps_sconn *c, const fl__ps_msg *m, fl__ps_table *t);
/* A worker stopped: fail steps still waiting for it. */
void fl__ps_sync_worker_stopped(fl_ps_server *s, int rank);
/* Fail every pending step (server failure). */
void fl__ps_sync_fail_all(fl_ps_server *s, int st, const char *msg);

#endif
