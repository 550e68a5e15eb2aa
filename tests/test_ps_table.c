/*
 * test_ps_table.c - the PS building blocks without sockets: frame encoding and a corpus of
 * malformed frames, the dense split, optimizer rules against a hand-written reference,
 * sparse tables (lazy creation, reproducible initial values, concurrent pushes from 8
 * threads against the serial sum, shrink, entry policies), shard save -> load bit-exact,
 * the checkpoint manifest (round trip and damaged files), and memory per key.
 */
#include <pthread.h>
#include <sys/stat.h>

#include "testhelp.h"
#include <fleet/ps.h>
#include "ps/ps_internal.h"

/* ---- frames ------------------------------------------------------------------------------------ */

/* Builds header + fixed + payload into an 8-aligned buffer (caller frees). */
static uint8_t *frame(fl__ps_wbuf *b, uint16_t type, uint32_t flags, const void *pay, size_t plen, size_t *len)
{
    fl__ps_wbuf_finish(b, type, flags, 42, plen);
    *len = b->len + plen;
    uint8_t *p = NULL;
    CHECK(posix_memalign((void **)&p, 64, *len + 8) == 0);
    memcpy(p, b->p, b->len);
    if (plen) memcpy(p + b->len, pay, plen);
    return p;
}

TEST(frame_roundtrip)
{
    fl__ps_wbuf b = {0};
    fl__ps_wbuf_begin(&b);
    uint64_t ids[3] = {7, 1ull << 63, 99};
    float pay[3 * 2 + 3 + 3] = {1, 2, 3, 4, 5, 6, 1, 1, 1, 0, 1, 0};
    uint8_t tmp[3 * 8 + sizeof pay];
    memcpy(tmp, ids, sizeof ids);
    memcpy(tmp + sizeof ids, pay, sizeof pay);
    CHECK_OK(fl__ps_put_u32(&b, 5));
    CHECK_OK(fl__ps_put_u32(&b, FL__PS_B_LAST | FL__PS_B_SHOWCLICK));
    CHECK_OK(fl__ps_put_u64(&b, 0xabcdef));
    CHECK_OK(fl__ps_put_u64(&b, 17));
    CHECK_OK(fl__ps_put_u64(&b, 3));
    CHECK_OK(fl__ps_put_u32(&b, 2));
    CHECK_OK(fl__ps_put_u32(&b, 0));
    size_t len;
    uint8_t *f = frame(&b, FL__PS_PUSH_SPARSE, 0, tmp, sizeof tmp, &len);
    fl__ps_msg m;
    CHECK_OK(fl__ps_frame_decode(f, len, &m));
    CHECK_EQ_INT(m.h.type, FL__PS_PUSH_SPARSE);
    CHECK_EQ_INT(m.h.req_id, 42);
    CHECK_EQ_INT(m.table, 5);
    CHECK_EQ_INT(m.session, 0xabcdef);
    CHECK_EQ_INT(m.seq, 17);
    CHECK_EQ_INT(m.n, 3);
    CHECK_EQ_INT(m.dim, 2);
    CHECK(m.ids[1] == 1ull << 63);
    CHECK_NEAR(m.vals[5], 6, 0);
    CHECK_NEAR(m.shows[2], 1, 0);
    CHECK_NEAR(m.clicks[1], 1, 0);
    /* every truncation of the frame is refused */
    for (size_t cut = 0; cut < len; cut++) CHECK(fl__ps_frame_decode(f, cut, &m) != FL_OK);
    free(f);
    fl__ps_wbuf_free(&b);
}

typedef struct {
    const char *what;
    uint16_t type;
    uint32_t flags;
    uint32_t magic, version_reserved; /* 0: default */
    uint64_t len_override;            /* 0: real */
    uint32_t body32[8];
    uint64_t body64[4];
    int n32, n64;
} bad_frame;

/* Header with arbitrary fields, then u32 words, then u64 words. */
static uint8_t *raw(const bad_frame *b, size_t *len)
{
    size_t body = (size_t)b->n32 * 4 + (size_t)b->n64 * 8;
    uint8_t *p = NULL;
    CHECK(posix_memalign((void **)&p, 64, FL__PS_HDR + body + 8) == 0);
    fl__ps_hdr_encode(p, b->type, b->flags, 1, b->len_override ? b->len_override : body);
    if (b->magic) memcpy(p, &b->magic, 4);
    if (b->version_reserved) memcpy(p + 4, &b->version_reserved, 2);
    memcpy(p + FL__PS_HDR, b->body32, (size_t)b->n32 * 4);
    memcpy(p + FL__PS_HDR + b->n32 * 4, b->body64, (size_t)b->n64 * 8);
    *len = FL__PS_HDR + body;
    return p;
}

TEST(frame_malformed_corpus)
{
    const bad_frame corpus[] = {
        {"bad magic", FL__PS_HEARTBEAT, 0, 0xdeadbeef, 0, 0, {0}, {0}, 0, 0},
        {"bad version", FL__PS_HEARTBEAT, 0, 0, 9, 0, {0}, {0}, 0, 0},
        {"unknown type", 200, 0, 0, 0, 0, {0}, {0}, 0, 0},
        {"type zero", 0, 0, 0, 0, 0, {0}, {0}, 0, 0},
        {"unknown flags", FL__PS_HEARTBEAT, 0x80, 0, 0, 0, {0}, {0}, 0, 0},
        {"error flag on a request", FL__PS_HEARTBEAT, FL__PS_F_ERROR, 0, 0, 0, {0}, {0}, 0, 0},
        {"huge length", FL__PS_PULL_SPARSE, 0, 0, 0, (1ull << 62), {0}, {0}, 0, 0},
        {"length above max by one", FL__PS_PULL_SPARSE, 0, 0, 0, FL_PS_MAX_BODY + 1, {0}, {0}, 0, 0},
        {"truncated body", FL__PS_PULL_SPARSE, 0, 0, 0, 64, {1, 0}, {4}, 2, 1},
        {"id count beyond body", FL__PS_PULL_SPARSE, 0, 0, 0, 0, {1, 0}, {1000000}, 2, 1},
        {"id count near 2^64", FL__PS_PULL_SPARSE, 0, 0, 0, 0, {1, 0}, {~0ull}, 2, 1},
        {"push keys x dim overflow", FL__PS_PUSH_SPARSE, 0, 0, 0, 0, {1, 1}, {1, 1, 1ull << 61, 65536}, 2, 4},
        {"push dim zero", FL__PS_PUSH_SPARSE, 0, 0, 0, 0, {1, 1}, {1, 1, 0, 0}, 2, 4},
        {"push dim too big", FL__PS_PUSH_SPARSE, 0, 0, 0, 0, {1, 1}, {1, 1, 0, 1ull << 20}, 2, 4},
        {"push count vs body", FL__PS_PUSH_SPARSE, 0, 0, 0, 0, {1, 1}, {1, 1, 2, 4}, 2, 4},
        {"unknown body flags", FL__PS_PULL_SPARSE, 0, 0, 0, 0, {1, 0x100}, {0}, 2, 1},
        {"dense count beyond body", FL__PS_PUSH_DENSE, 0, 0, 0, 0, {0, 1}, {1, 1, 0, 1ull << 40}, 2, 4},
        {"hello too many tables", FL__PS_HELLO, 0, 0, 0, 0, {0, 0, 0, 1, 1, 1, 100000, 0}, {0}, 8, 0},
        {"save unknown phase", FL__PS_SAVE, 0, 0, 0, 0, {9, 0}, {0, 0, 0}, 2, 3},
        {"save dir too long", FL__PS_SAVE, 0, 0, 0, 0, {1, 0}, {0, 0, 1ull << 20}, 2, 3},
        {"stop with a body", FL__PS_STOP, 0, 0, 0, 0, {1, 2}, {0}, 2, 0},
        {"barrier too short", FL__PS_BARRIER, 0, 0, 0, 0, {1}, {0}, 1, 0},
        {"reply with a bad error status", FL__PS_STATS, FL__PS_F_REPLY | FL__PS_F_ERROR, 0, 0, 0, {5, 0}, {0}, 2, 0},
        {"pull reply dim zero", FL__PS_PULL_SPARSE, FL__PS_F_REPLY, 0, 0, 0, {0}, {1, 0}, 0, 2},
    };
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        size_t len;
        uint8_t *p = raw(&corpus[i], &len);
        fl__ps_msg m;
        int st = fl__ps_frame_decode(p, len, &m);
        if (st != FL_EPROTO && st != FL_ECORRUPT) TFAIL("'%s' decoded with %s", corpus[i].what, fl_strerror(st));
        free(p);
    }
    /* a save request whose directory holds a NUL byte */
    fl__ps_wbuf b = {0};
    fl__ps_wbuf_begin(&b);
    uint32_t f[8] = {1, 0, 0, 0, 0, 0, 3, 0};
    CHECK_OK(fl__ps_put(&b, f, sizeof f));
    size_t len;
    uint8_t *p = frame(&b, FL__PS_SAVE, 0, "a\0b", 3, &len);
    fl__ps_msg m;
    CHECK_FAILS(fl__ps_frame_decode(p, len, &m), FL_EPROTO, "NUL");
    free(p);
    fl__ps_wbuf_free(&b);
}

/* ---- dense split and optimizers ---------------------------------------------------------------- */

TEST(dense_split_rule)
{
    int64_t a, e;
    fl_ps_dense_split(10, 3, 0, &a, &e);
    CHECK(a == 0 && e == 4);
    fl_ps_dense_split(10, 3, 1, &a, &e);
    CHECK(a == 4 && e == 8);
    fl_ps_dense_split(10, 3, 2, &a, &e);
    CHECK(a == 8 && e == 10);
    fl_ps_dense_split(2, 4, 3, &a, &e);
    CHECK(a == 2 && e == 2);
    for (int64_t R = 1; R < 40; R++)
        for (int n = 1; n < 9; n++) {
            int64_t at = 0;
            for (int i = 0; i < n; i++) {
                fl_ps_dense_split(R, n, i, &a, &e);
                CHECK(a == at && e >= a);
                at = e;
            }
            CHECK(at == R);
        }
    /* the sparse rule is the documented hash */
    for (uint64_t id = 0; id < 1000; id++) CHECK(fl_ps_sparse_server(id, 7) == (int)(fl__hash_u64(id) % 7));
}

static fl_ps_table_config dense_cfg(fl_ps_opt_kind k, int64_t rows, int64_t cols)
{
    fl_ps_table_config t = {0};
    t.name = "w";
    t.kind = FL_PS_DENSE;
    t.rows = rows;
    t.cols = cols;
    t.opt = (fl_ps_optimizer){k, 0.1f, 0.01f, 0, 0, 0, k == FL_PS_OPT_MOMENTUM ? 0.9 : 0, 0};
    return t;
}

TEST(optimizers_match_hand_reference)
{
    const int n = 6, steps = 5;
    for (int k = FL_PS_OPT_SGD; k <= FL_PS_OPT_MOMENTUM; k++) {
        fl_ps_table_config cfg = dense_cfg((fl_ps_opt_kind)k, 3, 2);
        fl__ps_dense *t;
        CHECK_OK(fl__ps_dense_create(&cfg, 0, 1, &t));
        float w0[6] = {0.5f, -0.25f, 1, 2, -1, 0.1f}, w[6], g[6];
        int applied;
        fl__ps_dense_init(t, 0, n, w0, 0, 1, &applied);
        CHECK(applied);
        double rw[6], m1[6] = {0}, m2[6] = {0}, p1 = 0.9, p2 = 0.999;
        for (int j = 0; j < n; j++) rw[j] = w0[j];
        for (int s = 0; s < steps; s++) {
            for (int j = 0; j < n; j++) g[j] = (float)(0.1 * (j + 1) * (s % 2 ? -1 : 1) + 0.05 * s);
            CHECK_OK(fl__ps_dense_push(t, 0, n, g, 1.0f, 1));
            for (int j = 0; j < n; j++) {
                double gj = g[j] + 0.01 * rw[j];
                switch (k) {
                case FL_PS_OPT_SGD: rw[j] -= 0.1 * gj; break;
                case FL_PS_OPT_SUM: rw[j] += g[j]; break;
                case FL_PS_OPT_MOMENTUM:
                    m1[j] = 0.9 * m1[j] + gj;
                    rw[j] -= 0.1 * m1[j];
                    break;
                case FL_PS_OPT_ADAGRAD:
                    m1[j] += gj * gj;
                    rw[j] -= 0.1 * gj / (sqrt(m1[j]) + 1e-6);
                    break;
                case FL_PS_OPT_ADAM: {
                    m1[j] = 0.9 * m1[j] + 0.1 * gj;
                    m2[j] = 0.999 * m2[j] + 0.001 * gj * gj;
                    double lr = 0.1 * sqrt(1 - p2) / (1 - p1);
                    rw[j] -= lr * m1[j] / (sqrt(m2[j]) + 1e-8 * sqrt(1 - p2));
                    break;
                }
                }
            }
            p1 *= 0.9, p2 *= 0.999;
        }
        fl__ps_dense_pull(t, 0, n, w);
        for (int j = 0; j < n; j++) CHECK_NEAR(w[j], rw[j], 2e-5 * (1 + fabs(rw[j])));
        fl__ps_dense_free(t);
    }
}

/* ---- sparse tables ---------------------------------------------------------------------------- */

static fl_ps_table_config sparse_cfg(int dim, fl_ps_opt_kind k, const char *entry)
{
    fl_ps_table_config t = {0};
    t.name = "emb";
    t.kind = FL_PS_SPARSE;
    t.dim = dim;
    t.init = fl_init_uniform(-0.5f, 0.5f);
    t.init.seed = 7;
    t.opt = (fl_ps_optimizer){k, 0.05f, 0, 0, 0, 0, k == FL_PS_OPT_MOMENTUM ? 0.9 : 0, 0};
    t.entry = entry;
    return t;
}

TEST(sparse_lazy_creation_and_seeded_init)
{
    fl_ps_table_config cfg = sparse_cfg(8, FL_PS_OPT_SGD, NULL);
    fl__ps_sparse *a, *b;
    CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &a));
    CHECK_OK(fl__ps_sparse_create(&cfg, 1, 3, &b)); /* another shard layout: same initial rows */
    uint64_t ids[3] = {5, 123456789012345ull, 5};
    float out[24], again[24], ref[8];
    CHECK_OK(fl__ps_sparse_pull(a, ids, 3, out, 0)); /* not training: zeros, nothing stored */
    for (int j = 0; j < 24; j++) CHECK(out[j] == 0);
    fl_ps_table_stats st;
    fl__ps_sparse_stats(a, &st);
    CHECK_EQ_INT(st.rows, 0);
    CHECK_OK(fl__ps_sparse_pull(a, ids, 3, out, 1));
    fl__ps_sparse_stats(a, &st);
    CHECK_EQ_INT(st.rows, 2);
    CHECK_OK(fl__ps_sparse_pull(b, ids, 3, again, 1));
    CHECK(memcmp(out, again, sizeof out) == 0);
    fl__ps_sparse_init_row(a, 5, ref);
    CHECK(memcmp(out, ref, sizeof ref) == 0 && memcmp(out + 16, ref, sizeof ref) == 0);
    int differ = 0;
    for (int j = 0; j < 8; j++) {
        CHECK(out[j] >= -0.5f && out[j] < 0.5f);
        differ |= out[j] != out[8 + j];
    }
    CHECK(differ);
    fl__ps_sparse_free(a);
    fl__ps_sparse_free(b);
}

typedef struct {
    fl__ps_sparse *t;
    int tid;
} push_arg;

#define NT 8
#define PUSHES 300
#define BATCH 64

static void batch_of(int tid, int it, uint64_t *ids, float *g)
{
    for (int i = 0; i < BATCH; i++) {
        ids[i] = (uint64_t)((tid * 7919 + it * 31 + i * 17) % 1000); /* overlapping ids */
        for (int j = 0; j < 4; j++) g[i * 4 + j] = (float)((tid + it + i + j) % 5 - 2);
    }
}

static void *pusher(void *p)
{
    push_arg *a = p;
    uint64_t ids[BATCH];
    float g[BATCH * 4];
    for (int it = 0; it < PUSHES; it++) {
        batch_of(a->tid, it, ids, g);
        /* a batch's ids are distinct per push in the protocol; dedupe by summing here */
        uint64_t u[BATCH];
        float ug[BATCH * 4];
        int nu = 0;
        for (int i = 0; i < BATCH; i++) {
            int k = 0;
            while (k < nu && u[k] != ids[i]) k++;
            if (k == nu) {
                u[nu] = ids[i];
                memset(ug + nu * 4, 0, 16);
                nu++;
            }
            for (int j = 0; j < 4; j++) ug[k * 4 + j] += g[i * 4 + j];
        }
        if (fl__ps_sparse_push(a->t, u, (uint64_t)nu, ug, NULL, NULL, 1.0f, 1) != FL_OK) return (void *)1;
    }
    return NULL;
}

TEST(sparse_concurrent_pushes_equal_serial_sum)
{
    fl_ps_table_config cfg = sparse_cfg(4, FL_PS_OPT_SUM, NULL);
    cfg.init = fl_init_constant(0);
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &t));
    pthread_t th[NT];
    push_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (push_arg){t, i};
        CHECK(pthread_create(&th[i], NULL, pusher, &args[i]) == 0);
    }
    for (int i = 0; i < NT; i++) {
        void *r;
        pthread_join(th[i], &r);
        CHECK(r == NULL);
    }
    static double ref[1000][4];
    static float shows[1000];
    uint64_t ids[BATCH];
    float g[BATCH * 4];
    for (int tid = 0; tid < NT; tid++)
        for (int it = 0; it < PUSHES; it++) {
            batch_of(tid, it, ids, g);
            uint64_t seen[BATCH];
            int ns = 0;
            for (int i = 0; i < BATCH; i++) {
                for (int j = 0; j < 4; j++) ref[ids[i]][j] += g[i * 4 + j];
                int k = 0;
                while (k < ns && seen[k] != ids[i]) k++;
                if (k == ns) seen[ns++] = ids[i], shows[ids[i]] += 1;
            }
        }
    int stored = 0;
    for (uint64_t id = 0; id < 1000; id++) {
        float v[4], show, click;
        if (!fl__ps_sparse_get(t, id, v, &show, &click)) continue;
        stored++;
        for (int j = 0; j < 4; j++) CHECK_NEAR(v[j], ref[id][j], 0);
        CHECK_NEAR(show, shows[id], 0);
    }
    fl_ps_table_stats st;
    fl__ps_sparse_stats(t, &st);
    CHECK_EQ_INT(st.rows, stored);
    CHECK(stored > 900);
    fl__ps_sparse_free(t);
}

TEST(shrink_decays_and_deletes)
{
    fl_ps_table_config cfg = sparse_cfg(2, FL_PS_OPT_SGD, NULL);
    cfg.accessor.show_click_decay_rate = 0.5f;
    cfg.accessor.delete_threshold = 0.4f;
    cfg.accessor.delete_after_unseen_days = 2;
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &t));
    uint64_t ids[3] = {1, 2, 3};
    float g[6] = {0}, shows[3] = {10, 1, 10}, clicks[3] = {2, 0, 0};
    CHECK_OK(fl__ps_sparse_push(t, ids, 3, g, shows, clicks, 1.0f, 1));
    /* scores after decay 0.5: id1 (4*0.1 + 1*1) = 1.4, id2 0.05, id3 0.5 */
    CHECK_EQ_INT(fl__ps_sparse_shrink(t), 1);
    float show, click;
    CHECK(fl__ps_sparse_get(t, 1, NULL, &show, &click));
    CHECK_NEAR(show, 5, 0);
    CHECK_NEAR(click, 1, 0);
    CHECK(!fl__ps_sparse_get(t, 2, NULL, NULL, NULL));
    /* second decay: id3 score 0.25 < 0.4 goes, id1 stays (0.7) */
    CHECK_EQ_INT(fl__ps_sparse_shrink(t), 1);
    CHECK(fl__ps_sparse_get(t, 1, NULL, NULL, NULL) && !fl__ps_sparse_get(t, 3, NULL, NULL, NULL));
    /* daily saves (mode 3) age rows: a row unseen for more than 2 days is deleted */
    fl_ps_table_config c2 = sparse_cfg(2, FL_PS_OPT_SGD, NULL);
    c2.accessor.delete_after_unseen_days = 2;
    fl__ps_sparse *t2;
    CHECK_OK(fl__ps_sparse_create(&c2, 0, 1, &t2));
    CHECK_OK(fl__ps_sparse_push(t2, ids, 1, g, shows, clicks, 1.0f, 1));
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_shrink");
    char path[256];
    snprintf(path, sizeof path, "%s/p.safetensors", dir);
    for (int day = 0; day < 2; day++) CHECK_OK(fl__ps_sparse_save(t2, path, 3));
    CHECK_EQ_INT(fl__ps_sparse_shrink(t2), 0);
    CHECK_OK(fl__ps_sparse_save(t2, path, 3));
    CHECK_EQ_INT(fl__ps_sparse_shrink(t2), 1);
    CHECK(!fl__ps_sparse_get(t2, 1, NULL, NULL, NULL));
    fl__ps_sparse_free(t2);
    /* a freed row is reused and the map still finds everything */
    uint64_t many[200];
    float gm[400] = {0}, out[400];
    for (int i = 0; i < 200; i++) many[i] = 1000 + (uint64_t)i;
    CHECK_OK(fl__ps_sparse_push(t, many, 200, gm, NULL, NULL, 1.0f, 1));
    CHECK_OK(fl__ps_sparse_pull(t, many, 200, out, 0));
    for (int i = 0; i < 200; i++) CHECK(fl__ps_sparse_get(t, many[i], NULL, NULL, NULL));
    th_rmtree(dir);
    fl__ps_sparse_free(t);
}

TEST(entry_count_filter)
{
    fl_ps_table_config cfg = sparse_cfg(3, FL_PS_OPT_SGD, "count_filter_entry:3");
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &t));
    uint64_t id = 77;
    float out[3], g[3] = {1, 1, 1}, ref[3];
    fl_ps_table_stats st;
    CHECK_OK(fl__ps_sparse_pull(t, &id, 1, out, 1));
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0);
    CHECK_OK(fl__ps_sparse_push(t, &id, 1, g, NULL, NULL, 1.0f, 1)); /* 2nd touch: dropped */
    fl__ps_sparse_stats(t, &st);
    CHECK_EQ_INT(st.rows, 0);
    CHECK_EQ_INT(st.pending, 1);
    CHECK_OK(fl__ps_sparse_pull(t, &id, 1, out, 1)); /* 3rd touch: created, initial values */
    fl__ps_sparse_init_row(t, id, ref);
    CHECK(memcmp(out, ref, sizeof ref) == 0);
    fl__ps_sparse_stats(t, &st);
    CHECK_EQ_INT(st.rows, 1);
    CHECK_EQ_INT(st.pending, 0);
    fl__ps_sparse_free(t);
    fl_ps_table_config bad = sparse_cfg(3, FL_PS_OPT_SGD, "count_filter_entry:x");
    CHECK_FAILS(fl_ps_table_config_check(&bad), FL_EINVAL, "count_filter_entry");
    bad.entry = "show_click_entry:a:b";
    CHECK_FAILS(fl_ps_table_config_check(&bad), FL_EINVAL, "unknown entry policy");
}

TEST(entry_probability)
{
    fl_ps_table_config cfg = sparse_cfg(1, FL_PS_OPT_SGD, "probability_entry:0.3");
    fl__ps_sparse *t;
    CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &t));
    static uint64_t ids[20000];
    static float out[20000];
    for (int i = 0; i < 20000; i++) ids[i] = (uint64_t)i * 2654435761u;
    CHECK_OK(fl__ps_sparse_pull(t, ids, 20000, out, 1));
    fl_ps_table_stats st;
    fl__ps_sparse_stats(t, &st);
    CHECK(st.rows > 5600 && st.rows < 6400);
    fl__ps_sparse_free(t);
}

/* ---- checkpoints ---------------------------------------------------------------------------------- */

static void train(fl__ps_sparse *t, int steps, unsigned seed)
{
    uint64_t ids[32];
    float g[32 * 5], sh[32], ck[32];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 32; i++) {
            ids[i] = (uint64_t)((seed * 131 + (unsigned)s * 7 + (unsigned)i * 13) % 500) * 1000003ull;
            sh[i] = 1;
            ck[i] = (float)(i % 3 == 0);
        }
        /* distinct ids per push */
        for (int i = 0; i < 32; i++)
            for (int k = 0; k < i; k++)
                if (ids[k] == ids[i]) ids[i] += 1ull << 40;
        th_fill_uniform(g, 32 * 5, -1, 1, seed + (unsigned)s);
        float out[32 * 5];
        CHECK_OK(fl__ps_sparse_pull(t, ids, 32, out, 1));
        CHECK_OK(fl__ps_sparse_push(t, ids, 32, g, sh, ck, 1.0f, 1));
    }
}

TEST(sparse_save_load_bit_exact)
{
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_save");
    char path[256];
    snprintf(path, sizeof path, "%s/emb/part-00000.safetensors", dir);
    fl_ps_opt_kind kinds[4] = {FL_PS_OPT_ADAM, FL_PS_OPT_ADAGRAD, FL_PS_OPT_SGD, FL_PS_OPT_MOMENTUM};
    for (int k = 0; k < 4; k++) {
        fl_ps_table_config cfg = sparse_cfg(5, kinds[k], k == 2 ? "count_filter_entry:2" : NULL);
        fl__ps_sparse *a, *b;
        CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &a));
        CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &b));
        train(a, 40, 1);
        CHECK_OK(fl__ps_sparse_save(a, path, 0));
        CHECK_OK(fl__ps_sparse_load(b, path));
        fl_ps_table_stats sa, sb;
        fl__ps_sparse_stats(a, &sa);
        fl__ps_sparse_stats(b, &sb);
        CHECK_EQ_INT(sa.rows, sb.rows);
        CHECK_EQ_INT(sa.pending, sb.pending);
        /* training both on goes on bit for bit (values, optimizer state, pows, counters) */
        train(a, 20, 2);
        train(b, 20, 2);
        for (uint64_t i = 0; i < 500; i++)
            for (uint64_t hi = 0; hi < 3; hi++) {
                uint64_t id = i * 1000003ull + (hi << 40);
                float va[5], vb[5], s1, s2, c1, c2;
                int ga = fl__ps_sparse_get(a, id, va, &s1, &c1), gb = fl__ps_sparse_get(b, id, vb, &s2, &c2);
                CHECK_EQ_INT(ga, gb);
                if (ga) CHECK(memcmp(va, vb, sizeof va) == 0 && s1 == s2 && c1 == c2);
            }
        fl__ps_sparse_free(a);
        fl__ps_sparse_free(b);
    }
    /* a shard of another server is refused */
    fl_ps_table_config cfg = sparse_cfg(5, FL_PS_OPT_SGD, "count_filter_entry:2");
    fl__ps_sparse *c;
    CHECK_OK(fl__ps_sparse_create(&cfg, 1, 2, &c));
    CHECK_FAILS(fl__ps_sparse_load(c, path), FL_ECORRUPT, "expected server 1 of 2");
    fl__ps_sparse_free(c);
    th_rmtree(dir);
}

TEST(dense_save_load_bit_exact)
{
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_dsave");
    char path[256];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    fl_ps_table_config cfg = dense_cfg(FL_PS_OPT_ADAM, 7, 3);
    fl__ps_dense *a, *b;
    CHECK_OK(fl__ps_dense_create(&cfg, 1, 2, &a));
    CHECK_OK(fl__ps_dense_create(&cfg, 1, 2, &b));
    int64_t n = fl__ps_dense_numel(a);
    CHECK_EQ_INT(n, 3 * 3); /* rows [4, 7) */
    float g[9], wa[9], wb[9];
    for (int s = 0; s < 4; s++) {
        th_fill_uniform(g, 9, -1, 1, (unsigned)s);
        CHECK_OK(fl__ps_dense_push(a, 0, 9, g, 1.0f, 1));
    }
    CHECK_OK(fl__ps_dense_save(a, path));
    CHECK_OK(fl__ps_dense_load(b, path));
    for (int s = 0; s < 3; s++) {
        th_fill_uniform(g, 9, -1, 1, 10u + (unsigned)s);
        CHECK_OK(fl__ps_dense_push(a, 0, 9, g, 1.0f, 1));
        CHECK_OK(fl__ps_dense_push(b, 0, 9, g, 1.0f, 1));
    }
    fl__ps_dense_pull(a, 0, 9, wa);
    fl__ps_dense_pull(b, 0, 9, wb);
    CHECK(memcmp(wa, wb, sizeof wa) == 0);
    fl__ps_dense_free(b);
    /* another shard of the same table is refused */
    CHECK_OK(fl__ps_dense_create(&cfg, 0, 2, &b));
    CHECK_FAILS(fl__ps_dense_load(b, path), FL_ECORRUPT, "");
    fl__ps_dense_free(a);
    fl__ps_dense_free(b);
    th_rmtree(dir);
}

/* ---- the checkpoint manifest ------------------------------------------------------------------- */

/* Writes the manifest text with the first `from` replaced by `to` (or cut to `cut` bytes). */
static void damage(const char *path, const char *text, const char *from, const char *to, size_t cut)
{
    char buf[4096];
    const char *at = from ? strstr(text, from) : NULL;
    CHECK(!from || at);
    if (at) snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else snprintf(buf, sizeof buf, "%.*s", (int)cut, text);
    CHECK_OK(fl__write_file_atomic(path, buf, strlen(buf)));
}

TEST(manifest_round_trip_and_damage)
{
    char dir[64], path[128];
    th_mktemp(dir, sizeof dir, "fl_ps_man");
    snprintf(path, sizeof path, "%s/" FL__PS_MANIFEST, dir);
    fl_ps_table_config t[2] = {sparse_cfg(5, FL_PS_OPT_ADAM, NULL), dense_cfg(FL_PS_OPT_SGD, 7, 3)};
    uint64_t gen = 0;
    int64_t step = 0;
    /* integers are exact up to 2^53 - 1; beyond, a double may not hold the written value */
    CHECK_OK(fl__ps_manifest_write(dir, 0x0123456789abcdefull, 9007199254740991ll, 1, 2, t, 2));
    CHECK_OK(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step));
    CHECK(gen == 0x0123456789abcdefull && step == 9007199254740991ll);
    CHECK_OK(fl__ps_manifest_write(dir, 0x0123456789abcdefull, 9007199254740993ll, 1, 2, t, 2));
    CHECK_FAILS(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step), FL_ECORRUPT,
                "key 'step' is too large: 9007199254740992 (the limit is 9007199254740991)");
    CHECK_OK(fl__ps_manifest_write(dir, 0x0123456789abcdefull, 20, 1, 2, t, 2));
    CHECK_OK(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step));
    CHECK(step == 20);
    char *text;
    size_t len;
    CHECK_OK(fl__read_file(path, 1 << 20, &text, &len));
    CHECK(strstr(text, "\"emb/part-00001-0123456789abcdef.safetensors\"") != NULL);
    struct {
        const char *from, *to;
        size_t cut;
        const char *why;
    } cases[] = {
        {NULL, NULL, 40, "invalid JSON at byte 38 (line 3): 've' (then the text ends)"},
        {NULL, NULL, 47, "invalid JSON: it ends early or is malformed at its last byte (byte 46, line 3)"},
        {"\"step\"", "\"stop\"", 0, "key 'step' is missing"},
        {"\"num_servers\":\t2", "\"num_servers\":\t\"2\"", 0, "key 'num_servers' must be an integer"},
        {"\"generation\":\t\"", "\"generation\":\t\"x", 0, "key 'generation' must be 16 hex digits"},
        {"\"fleet-ps-checkpoint\"", "\"other\"", 0, "not a Fleet PS manifest: format is 'other'"},
        {"\"version\":\t1", "\"version\":\t2", 0, "key 'version' is too large: 2 (the limit is 1)"},
        {"\"tables\":\t[", "\"tables\":\t7, \"x\": [", 0, "key 'tables' must be an array"},
        {"\"name\":\t\"emb\"", "\"nome\":\t\"emb\"", 0, "key 'tables[0].name' is missing"},
        {"\"dim\":\t5", "\"dim\":\t5.5", 0, "key 'tables[0].dim' must be an integer, not 5.5"},
        {"\"rows\"", "\"rowz\"", 0, "key 'tables[1].rows' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        damage(path, text, cases[i].from, cases[i].to, cases[i].cut);
        CHECK_FAILS(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step), FL_ECORRUPT, cases[i].why);
        CHECK_STR_HAS(fl_last_error(), path);
    }
    CHECK_OK(fl__write_file_atomic(path, "[1, 2]\n", 7));
    CHECK_FAILS(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step), FL_ECORRUPT, "the manifest must be a JSON object");
    CHECK_STR_HAS(fl_last_error(), path);
    CHECK_OK(fl__write_file_atomic(path, "{}\n}\n", 5));
    CHECK_FAILS(fl__ps_manifest_read(dir, t, 2, 2, &gen, &step), FL_ECORRUPT,
                "unexpected data after the JSON value at byte 3 (line 2): '}\\x0a'");
    CHECK_STR_HAS(fl_last_error(), path);
    /* a well-formed manifest of another job is FL_EINVAL / FL_ENOTFOUND naming the mismatch */
    CHECK_OK(fl__write_file_atomic(path, text, len));
    CHECK_FAILS(fl__ps_manifest_read(dir, t, 2, 3, &gen, &step), FL_EINVAL, "saved by 2 servers, this job has 3");
    fl_ps_table_config other = dense_cfg(FL_PS_OPT_SGD, 8, 3);
    CHECK_FAILS(fl__ps_manifest_read(dir, &other, 1, 2, &gen, &step), FL_EINVAL, "has shape 7 x 3 there, 8 x 3 here");
    other.name = "v";
    CHECK_FAILS(fl__ps_manifest_read(dir, &other, 1, 2, &gen, &step), FL_ENOTFOUND, "has no table 'v'");
    free(text);
    th_rmtree(dir);
}

/* ---- memory per key -------------------------------------------------------------------------------- */

TEST(bytes_per_key)
{
    struct {
        int dim;
        fl_ps_opt_kind k;
        double bound;
    } cases[] = {{10, FL_PS_OPT_SGD, 2.0},
                 {10, FL_PS_OPT_ADAGRAD, 1.5},
                 {10, FL_PS_OPT_ADAM, 1.5},
                 {64, FL_PS_OPT_SGD, 1.5},
                 {64, FL_PS_OPT_ADAM, 1.5}};
    static uint64_t ids[200000];
    for (int i = 0; i < 200000; i++) ids[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fl_ps_table_config cfg = sparse_cfg(cases[c].dim, cases[c].k, NULL);
        fl__ps_sparse *t;
        CHECK_OK(fl__ps_sparse_create(&cfg, 0, 1, &t));
        float *out = malloc((size_t)20000 * cases[c].dim * 4);
        for (int b = 0; b < 10; b++) CHECK_OK(fl__ps_sparse_pull(t, ids + b * 20000, 20000, out, 1));
        free(out);
        fl_ps_table_stats st;
        fl__ps_sparse_stats(t, &st);
        CHECK_EQ_INT(st.rows, 200000);
        double ratio = st.bytes_per_key / st.payload_per_key;
        printf("  dim %2d %-7s: %.1f bytes/key for a payload of %.0f (%.2fx)\n", cases[c].dim, fl__ps_opt_name(cases[c].k),
               st.bytes_per_key, st.payload_per_key, ratio);
        CHECK(ratio <= cases[c].bound);
        fl__ps_sparse_free(t);
    }
}

TEST_MAIN(T(frame_roundtrip), T(frame_malformed_corpus), T(dense_split_rule), T(optimizers_match_hand_reference),
          T(sparse_lazy_creation_and_seeded_init), T(sparse_concurrent_pushes_equal_serial_sum),
          T(shrink_decays_and_deletes), T(entry_count_filter), T(entry_probability), T(sparse_save_load_bit_exact),
          T(dense_save_load_bit_exact), T(manifest_round_trip_and_damage), T(bytes_per_key))
