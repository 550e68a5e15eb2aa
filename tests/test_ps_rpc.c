/*
 * test_ps_rpc.c - servers and clients over loopback TCP inside one process (servers run in
 * threads): dense and sparse round trips across 2 servers, duplicate ids, barriers among
 * worker threads, sync mode equal to local training on the global batch (Adam), retried
 * pushes applied once, malformed frames closing only their connection, wrong / missing
 * secrets, configuration mismatch, save -> load bit-exact, a save interrupted by a failing
 * shard write keeping the previous checkpoint, a lost worker, an unreachable server.
 */
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "testhelp.h"
#include <fleet/ps.h>
#include "ps/ps_internal.h"

#define MAXS 4

typedef struct {
    fl_ps_server *srv[MAXS];
    pthread_t th[MAXS];
    int rc[MAXS];
    char msg[MAXS][1024];
    char *eps[MAXS];
    int ns;
} cluster;

typedef struct {
    cluster *c;
    int i;
} srv_arg;

static void *server_thread(void *p)
{
    srv_arg *a = p;
    a->c->rc[a->i] = fl_ps_server_run(a->c->srv[a->i]);
    snprintf(a->c->msg[a->i], sizeof a->c->msg[a->i], "%s", fl_last_error());
    free(a);
    return NULL;
}

static fl_ps_server_opts server_opts(const fl_ps_table_config *t, int nt, int ns, int nw)
{
    fl_ps_server_opts o = {0};
    o.num_servers = ns;
    o.num_workers = nw;
    o.tables = t;
    o.num_tables = nt;
    o.insecure_local = 1;
    o.reconnect_grace_ms = 500;
    return o;
}

static void cluster_start(cluster *c, fl_ps_server_opts o)
{
    memset(c, 0, sizeof *c);
    c->ns = o.num_servers;
    for (int i = 0; i < c->ns; i++) {
        o.server_index = i;
        o.endpoint = "127.0.0.1:0";
        CHECK_OK(fl_ps_server_create(&o, &c->srv[i]));
        c->eps[i] = strdup(fl_ps_server_endpoint(c->srv[i]));
    }
    for (int i = 0; i < c->ns; i++) {
        srv_arg *a = malloc(sizeof *a);
        *a = (srv_arg){c, i};
        CHECK(pthread_create(&c->th[i], NULL, server_thread, a) == 0);
    }
}

/* Joins the servers; each must have returned `want`. */
static void cluster_join(cluster *c, int want)
{
    for (int i = 0; i < c->ns; i++) {
        pthread_join(c->th[i], NULL);
        if (c->rc[i] != want)
            TFAIL("server %d returned %s (%s), expected %s", i, fl_strerror(c->rc[i]), c->msg[i], fl_strerror(want));
        fl_ps_server_free(c->srv[i]);
        free(c->eps[i]);
    }
}

static fl_ps_client_opts client_opts(cluster *c, const fl_ps_table_config *t, int nt, int rank, int nw)
{
    fl_ps_client_opts o = {0};
    o.endpoints = (const char *const *)c->eps;
    o.num_servers = c->ns;
    o.worker_rank = rank;
    o.num_workers = nw;
    o.tables = t;
    o.num_tables = nt;
    o.insecure_local = 1;
    o.connect_timeout_ms = 5000;
    o.request_timeout_ms = 10000;
    o.barrier_timeout_ms = 20000;
    return o;
}

static fl_ps_table_config dense_t(const char *name, int64_t r, int64_t cols, fl_ps_opt_kind k)
{
    fl_ps_table_config t = {0};
    t.name = name;
    t.kind = FL_PS_DENSE;
    t.rows = r;
    t.cols = cols;
    t.opt = (fl_ps_optimizer){k, 0.1f, 0, 0, 0, 0};
    return t;
}

static fl_ps_table_config sparse_t(const char *name, int dim, fl_ps_opt_kind k)
{
    fl_ps_table_config t = {0};
    t.name = name;
    t.kind = FL_PS_SPARSE;
    t.dim = dim;
    t.init = fl_init_uniform(-0.1f, 0.1f);
    t.opt = (fl_ps_optimizer){k, 0.1f, 0, 0, 0, 0};
    return t;
}

/* ---- round trips ----------------------------------------------------------------------------------- */

TEST(dense_roundtrip_two_servers)
{
    fl_ps_table_config t[1] = {dense_t("fc.w", 5, 3, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 1, 2, 1));
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    float w[15], g[15], out[15], other[15];
    for (int i = 0; i < 15; i++) w[i] = (float)i, g[i] = 1.0f, other[i] = -1;
    int applied = 0;
    CHECK_OK(fl_ps_client_init_dense(cl, 0, w, 0, &applied));
    CHECK(applied);
    CHECK_OK(fl_ps_client_init_dense(cl, 0, other, 0, &applied)); /* already initialized: kept */
    CHECK(!applied);
    CHECK_OK(fl_ps_client_pull_dense(cl, 0, out));
    CHECK(memcmp(out, w, sizeof w) == 0);
    CHECK_OK(fl_ps_client_push_dense(cl, 0, g));
    CHECK_OK(fl_ps_client_pull_dense(cl, 0, out));
    for (int i = 0; i < 15; i++) CHECK_NEAR(out[i], w[i] - 0.1f, 1e-6);
    CHECK_FAILS(fl_ps_client_pull_sparse(cl, 0, NULL, 0, NULL, 1), FL_EINVAL, "is dense");
    CHECK_OK(fl_ps_client_stop(cl));
    CHECK_FAILS(fl_ps_client_pull_dense(cl, 0, out), FL_ESTATE, "already called");
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* dense_wire_dtype = FL_BFLOAT16: pulls read the servers' float32 values rounded to bf16,
 * pushes arrive as bf16 and update float32; a float32 client of the same job sees the exact
 * values; the traffic counters count 2 bytes per dense value against 4. */
TEST(bf16_dense_wire_and_traffic)
{
    fl_ps_table_config t[1] = {dense_t("fc.w", 5, 3, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 1, 2, 2));
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 2), cb = client_opts(&c, t, 1, 1, 2);
    cb.dense_wire_dtype = FL_BFLOAT16;
    fl_ps_client *f32, *b16;
    CHECK_OK(fl_ps_client_create(&co, &f32));
    CHECK_OK(fl_ps_client_create(&cb, &b16));
    float w[15], g[15], out[15];
    for (int i = 0; i < 15; i++) w[i] = (float)i / 3.0f + 0.001f, g[i] = 1.0f / 3.0f;
    CHECK_OK(fl_ps_client_init_dense(b16, 0, w, 0, NULL)); /* init stays float32 */
    CHECK_OK(fl_ps_client_pull_dense(f32, 0, out));
    CHECK(memcmp(out, w, sizeof w) == 0);
    CHECK_OK(fl_ps_client_pull_dense(b16, 0, out));
    for (int i = 0; i < 15; i++) CHECK(out[i] == bf16_round(w[i]));
    CHECK_OK(fl_ps_client_push_dense(b16, 0, g));
    CHECK_OK(fl_ps_client_pull_dense(f32, 0, out));
    for (int i = 0; i < 15; i++) CHECK(out[i] == w[i] - 0.1f * bf16_round(g[i]));
    fl_ps_traffic tf, tb;
    CHECK_OK(fl_ps_client_traffic(f32, &tf));
    CHECK_OK(fl_ps_client_traffic(b16, &tb));
    CHECK_EQ_INT((int)tf.dense_bytes_received, 2 * 15 * 4);
    CHECK_EQ_INT((int)tf.dense_bytes_sent, 0);
    CHECK_EQ_INT((int)tb.dense_bytes_received, 15 * 2);
    CHECK_EQ_INT((int)tb.dense_bytes_sent, 15 * 4 + 15 * 2); /* init float32, push bf16 */
    CHECK(tf.requests >= 4 && tb.requests >= 6);             /* 2 servers per call */
    CHECK(tb.bytes_sent > tb.dense_bytes_sent && tb.bytes_received > tb.dense_bytes_received);
    CHECK_OK(fl_ps_client_stop(f32));
    CHECK_OK(fl_ps_client_stop(b16));
    fl_ps_client_free(f32);
    fl_ps_client_free(b16);
    cluster_join(&c, FL_OK);
}

/* fl_ps_client_pull_dense_many / push_dense_many: several dense tables in one request
 * round, in any table order, give what single calls give; in bf16 on the wire too (each
 * table's values at its own place in the client's bf16 buffer); bad arguments are named. */
TEST(dense_many_matches_single_calls)
{
    fl_ps_table_config t[4] = {dense_t("a", 3, 4, FL_PS_OPT_SGD), dense_t("b", 5, 2, FL_PS_OPT_SGD),
                               dense_t("c", 1, 1, FL_PS_OPT_SGD), sparse_t("emb", 2, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 4, 2, 2));
    fl_ps_client_opts co = client_opts(&c, t, 4, 0, 2), cb = client_opts(&c, t, 4, 1, 2);
    cb.dense_wire_dtype = FL_BFLOAT16;
    fl_ps_client *cl, *b16;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    CHECK_OK(fl_ps_client_create(&cb, &b16));
    float w[3][12], g[3][12], out[3][12], one[12];
    const int n[3] = {12, 10, 1};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n[k]; i++) w[k][i] = (float)(k * 20 + i) / 7.0f, g[k][i] = (float)(i + 1) / 3.0f;
    for (int k = 0; k < 3; k++) CHECK_OK(fl_ps_client_init_dense(cl, k, w[k], 0, NULL));
    int order[3] = {1, 2, 0};
    float *outs[3] = {out[1], out[2], out[0]};
    CHECK_OK(fl_ps_client_pull_dense_many(cl, 3, order, outs));
    for (int k = 0; k < 3; k++) CHECK(memcmp(out[k], w[k], (size_t)n[k] * 4) == 0);
    CHECK_OK(fl_ps_client_pull_dense_many(b16, 3, order, outs));
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n[k]; i++) CHECK(out[k][i] == bf16_round(w[k][i]));
    const float *grads[3] = {g[1], g[2], g[0]};
    CHECK_OK(fl_ps_client_push_dense_many(cl, 3, order, grads));
    CHECK_OK(fl_ps_client_push_dense_many(b16, 2, order, grads)); /* b and c only */
    for (int k = 0; k < 3; k++) {
        CHECK_OK(fl_ps_client_pull_dense(cl, k, one));
        for (int i = 0; i < n[k]; i++) {
            float want = w[k][i] - 0.1f * g[k][i];
            if (k > 0) want -= 0.1f * bf16_round(g[k][i]);
            CHECK(one[i] == want);
        }
    }
    CHECK_OK(fl_ps_client_pull_dense_many(cl, 0, NULL, NULL));
    CHECK_FAILS(fl_ps_client_pull_dense_many(cl, -1, order, outs), FL_EINVAL, "bad table list");
    int bad[2] = {0, 3};
    CHECK_FAILS(fl_ps_client_pull_dense_many(cl, 2, bad, outs), FL_EINVAL, "'emb' is sparse");
    int neg[1] = {-1};
    CHECK_FAILS(fl_ps_client_pull_dense_many(cl, 1, neg, outs), FL_EINVAL, "table -1 outside [0, 4)");
    float *nul[2] = {out[0], NULL};
    CHECK_FAILS(fl_ps_client_pull_dense_many(cl, 2, order, nul), FL_EINVAL, "values of table 2 are NULL");
    CHECK_OK(fl_ps_client_stop(cl));
    CHECK_OK(fl_ps_client_stop(b16));
    CHECK_FAILS(fl_ps_client_push_dense_many(cl, 1, order, grads), FL_ESTATE, "already called");
    fl_ps_client_free(cl);
    fl_ps_client_free(b16);
    cluster_join(&c, FL_OK);
}

TEST(sparse_roundtrip_duplicates_two_servers)
{
    fl_ps_table_config t[2] = {sparse_t("emb", 4, FL_PS_OPT_SGD), dense_t("b", 1, 1, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 2, 2, 1));
    fl_ps_client_opts co = client_opts(&c, t, 2, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    uint64_t ids[6] = {3, 1ull << 60, 3, 42, 99, 42};
    float out[24], g[24], after[24], ref[4];
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, ids, 6, out, 1));
    fl__ps_sparse *loc;
    CHECK_OK(fl__ps_sparse_create(&t[0], 0, 1, &loc));
    for (int i = 0; i < 6; i++) {
        fl__ps_sparse_init_row(loc, ids[i], ref);
        CHECK(memcmp(out + 4 * i, ref, sizeof ref) == 0);
    }
    for (int i = 0; i < 24; i++) g[i] = 1.0f;
    CHECK_OK(fl_ps_client_push_sparse(cl, 0, ids, 6, g, NULL, NULL));
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, ids, 6, after, 1));
    for (int i = 0; i < 6; i++) {
        int dup = ids[i] == 3 || ids[i] == 42;
        for (int j = 0; j < 4; j++) CHECK_NEAR(after[4 * i + j], out[4 * i + j] - 0.1f * (dup ? 2 : 1), 1e-6);
    }
    fl_ps_table_stats st;
    CHECK_OK(fl_ps_client_table_stats(cl, 0, &st));
    CHECK_EQ_INT(st.rows, 4);
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, ids, 0, NULL, 1)); /* empty batch */
    CHECK_OK(fl_ps_client_push_sparse(cl, 0, ids, 0, NULL, NULL, NULL));
    fl__ps_sparse_free(loc);
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

/* ---- barrier and sync mode --------------------------------------------------------------------------- */

typedef struct {
    cluster *c;
    const fl_ps_table_config *t;
    int nt, rank, nw;
    int *counter;
    pthread_mutex_t *mu;
    int ok;
    float *dense_out;
    float *sparse_out;
} worker_arg;

static void *barrier_worker(void *p)
{
    worker_arg *a = p;
    fl_ps_client_opts co = client_opts(a->c, a->t, a->nt, a->rank, a->nw);
    fl_ps_client *cl;
    if (fl_ps_client_create(&co, &cl)) return NULL;
    for (int round = 1; round <= 3; round++) {
        pthread_mutex_lock(a->mu);
        (*a->counter)++;
        pthread_mutex_unlock(a->mu);
        usleep((useconds_t)(a->rank * 20000));
        if (fl_ps_client_barrier(cl)) return NULL;
        pthread_mutex_lock(a->mu);
        int seen = *a->counter;
        pthread_mutex_unlock(a->mu);
        if (seen < round * a->nw) return NULL;
        if (fl_ps_client_barrier(cl)) return NULL;
    }
    a->ok = fl_ps_client_stop(cl) == FL_OK;
    fl_ps_client_free(cl);
    return NULL;
}

TEST(barrier_among_three_workers)
{
    fl_ps_table_config t[1] = {dense_t("w", 2, 2, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 1, 2, 3));
    int counter = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    worker_arg a[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        a[r] = (worker_arg){&c, t, 1, r, 3, &counter, &mu, 0, NULL, NULL};
        CHECK(pthread_create(&th[r], NULL, barrier_worker, &a[r]) == 0);
    }
    for (int r = 0; r < 3; r++) {
        pthread_join(th[r], NULL);
        CHECK(a[r].ok);
    }
    cluster_join(&c, FL_OK);
}

#define SYNC_STEPS 6
#define SYNC_N 5

static void sync_grads(int rank, int step, uint64_t *ids, float *sg, float *dg)
{
    for (int i = 0; i < SYNC_N; i++) ids[i] = (uint64_t)((rank * 3 + step + i * 2) % 9); /* overlapping ids */
    th_fill_uniform(sg, SYNC_N * 3, -1, 1, (unsigned)(100 * rank + step));
    th_fill_uniform(dg, 8, -1, 1, (unsigned)(1000 + 100 * rank + step));
}

static void *sync_worker(void *p)
{
    worker_arg *a = p;
    fl_ps_client_opts co = client_opts(a->c, a->t, a->nt, a->rank, a->nw);
    fl_ps_client *cl;
    if (fl_ps_client_create(&co, &cl)) {
        fprintf(stderr, "create: %s\n", fl_last_error());
        return NULL;
    }
    uint64_t ids[SYNC_N];
    float sg[SYNC_N * 3], dg[8], tmp[SYNC_N * 3];
    for (int s = 0; s < SYNC_STEPS; s++) {
        sync_grads(a->rank, s, ids, sg, dg);
        if (fl_ps_client_pull_sparse(cl, 0, ids, SYNC_N, tmp, 1) ||
            fl_ps_client_push_sparse(cl, 0, ids, SYNC_N, sg, NULL, NULL) || fl_ps_client_push_dense(cl, 1, dg)) {
            fprintf(stderr, "worker %d step %d: %s\n", a->rank, s, fl_last_error());
            return NULL;
        }
    }
    uint64_t all[9];
    for (int i = 0; i < 9; i++) all[i] = (uint64_t)i;
    if (fl_ps_client_pull_sparse(cl, 0, all, 9, a->sparse_out, 0) || fl_ps_client_pull_dense(cl, 1, a->dense_out))
        return NULL;
    a->ok = fl_ps_client_stop(cl) == FL_OK;
    fl_ps_client_free(cl);
    return NULL;
}

TEST(sync_mode_equals_local_training_on_global_batch)
{
    fl_ps_table_config t[2] = {sparse_t("emb", 3, FL_PS_OPT_ADAM), dense_t("fc", 4, 2, FL_PS_OPT_ADAM)};
    t[0].opt.l2 = 0.01f;
    fl_ps_server_opts so = server_opts(t, 2, 2, 2);
    so.sync = 1;
    cluster c;
    cluster_start(&c, so);
    worker_arg a[2];
    pthread_t th[2];
    float sout[2][27], dout[2][8];
    for (int r = 0; r < 2; r++) {
        a[r] = (worker_arg){&c, t, 2, r, 2, NULL, NULL, 0, dout[r], sout[r]};
        CHECK(pthread_create(&th[r], NULL, sync_worker, &a[r]) == 0);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        CHECK(a[r].ok);
    }
    cluster_join(&c, FL_OK);
    /* local reference: one table, the mean of both workers' gradients per step (rows of
     * both workers merged; a row one worker did not touch gets a zero gradient from it) */
    fl__ps_sparse *ls;
    fl__ps_dense *ld;
    CHECK_OK(fl__ps_sparse_create(&t[0], 0, 1, &ls));
    CHECK_OK(fl__ps_dense_create(&t[1], 0, 1, &ld));
    for (int s = 0; s < SYNC_STEPS; s++) {
        float gsum[9][3] = {{0}}, dsum[8] = {0};
        int touched[9] = {0};
        for (int r = 0; r < 2; r++) {
            uint64_t ids[SYNC_N];
            float sg[SYNC_N * 3], dg[8], tmp[SYNC_N * 3];
            sync_grads(r, s, ids, sg, dg);
            CHECK_OK(fl__ps_sparse_pull(ls, ids, SYNC_N, tmp, 1));
            for (int i = 0; i < SYNC_N; i++) {
                touched[ids[i]] = 1;
                for (int j = 0; j < 3; j++) gsum[ids[i]][j] += sg[i * 3 + j];
            }
            for (int j = 0; j < 8; j++) dsum[j] += dg[j];
        }
        uint64_t u[9];
        float ug[27];
        int nu = 0;
        for (int i = 0; i < 9; i++)
            if (touched[i]) {
                u[nu] = (uint64_t)i;
                for (int j = 0; j < 3; j++) ug[nu * 3 + j] = gsum[i][j] * 0.5f;
                nu++;
            }
        for (int j = 0; j < 8; j++) dsum[j] *= 0.5f;
        CHECK_OK(fl__ps_sparse_push(ls, u, (uint64_t)nu, ug, NULL, NULL, 1.0f, 1));
        CHECK_OK(fl__ps_dense_push(ld, 0, 8, dsum, 1.0f, 1));
    }
    float lv[27], ldv[8];
    uint64_t all[9];
    for (int i = 0; i < 9; i++) all[i] = (uint64_t)i;
    CHECK_OK(fl__ps_sparse_pull(ls, all, 9, lv, 0));
    fl__ps_dense_pull(ld, 0, 8, ldv);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 27; i++) CHECK_NEAR(sout[r][i], lv[i], 1e-6);
        for (int i = 0; i < 8; i++) CHECK_NEAR(dout[r][i], ldv[i], 1e-6);
    }
    fl__ps_sparse_free(ls);
    fl__ps_dense_free(ld);
}

/* A worker that called stop has finished its data (Paddle's trainer "complete"): the sync
 * steps after it complete with the others' pushes, scaled by 1/num_workers as before. */
TEST(sync_steps_continue_after_a_worker_stopped)
{
    fl_ps_table_config t[1] = {dense_t("fc", 4, 2, FL_PS_OPT_SGD)};
    fl_ps_server_opts so = server_opts(t, 1, 1, 2);
    so.sync = 1;
    cluster c;
    cluster_start(&c, so);
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 2);
    fl_ps_client *w0, *w1;
    CHECK_OK(fl_ps_client_create(&co, &w0));
    co.worker_rank = 1;
    CHECK_OK(fl_ps_client_create(&co, &w1));
    float w[8] = {0}, g[8], out[8];
    for (int i = 0; i < 8; i++) g[i] = (float)(i + 1);
    CHECK_OK(fl_ps_client_init_dense(w0, 0, w, 0, NULL));
    CHECK_OK(fl_ps_client_stop(w1));
    /* The server acknowledges the stop before it marks worker 1 stopped, so this push may
     * arrive before the mark (it waits, and the mark completes the step) or after it (it
     * completes the step at once): the same update either way. */
    for (int step = 1; step <= 2; step++) {
        CHECK_OK(fl_ps_client_push_dense(w0, 0, g));
        CHECK_OK(fl_ps_client_pull_dense(w0, 0, out));
        for (int i = 0; i < 8; i++) CHECK_NEAR(out[i], -0.1f * step * g[i] / 2, 1e-5);
    }
    CHECK_FAILS(fl_ps_client_barrier(w0), FL_EREMOTE, "worker 1 has already stopped");
    CHECK_OK(fl_ps_client_stop(w0));
    fl_ps_client_free(w0);
    fl_ps_client_free(w1);
    cluster_join(&c, FL_OK);
}

/* ---- raw connections: retries, bad frames, secrets ---------------------------------------------------- */

static fl_net_conn *raw_connect(const char *ep, int rank)
{
    char host[64];
    int port;
    CHECK_OK(fl_net_parse_endpoint(ep, host, sizeof host, &port, 0));
    fl_net_auth au = {NULL, 0, 1, FL_NET_SERVICE_PS, FL_PS_ROLE_WORKER, rank};
    fl_net_conn *nc;
    CHECK_OK(fl_net_connect(host, port, &au, fl_net_deadline(3000), &nc));
    return nc;
}

static void send_push(fl_net_conn *nc, uint64_t seq, float g)
{
    fl__ps_wbuf b = {0};
    fl__ps_wbuf_begin(&b);
    uint64_t id = 11;
    CHECK_OK(fl__ps_put_u32(&b, 0));
    CHECK_OK(fl__ps_put_u32(&b, FL__PS_B_LAST));
    CHECK_OK(fl__ps_put_u64(&b, 0x5e55));
    CHECK_OK(fl__ps_put_u64(&b, seq));
    CHECK_OK(fl__ps_put_u64(&b, 1));
    CHECK_OK(fl__ps_put_u32(&b, 1));
    CHECK_OK(fl__ps_put_u32(&b, 0));
    CHECK_OK(fl__ps_put(&b, &id, 8));
    CHECK_OK(fl__ps_put(&b, &g, 4));
    fl__ps_wbuf_finish(&b, FL__PS_PUSH_SPARSE, 0, seq, 0);
    CHECK_OK(fl_net_send_all(nc, b.p, b.len, fl_net_deadline(3000)));
    fl__ps_rbuf rb = {0};
    fl__ps_msg m;
    CHECK_OK(fl__ps_recv(nc, &rb, 1 << 20, &m, fl_net_deadline(3000)));
    CHECK(m.h.flags == FL__PS_F_REPLY && m.h.req_id == seq);
    fl__ps_rbuf_free(&rb);
    fl__ps_wbuf_free(&b);
}

/* A connection that sent only heartbeats, which the server's poll loop answers itself, is
 * not handed to a request thread afterwards (the thread would wait in the read for that
 * connection's next frame while other requests queue).  With one request thread, a silent
 * connection that has just had its heartbeat answered must not hold up a worker's pulls. */
TEST(answered_heartbeat_holds_no_request_thread)
{
    fl_ps_table_config t[1] = {sparse_t("emb", 2, FL_PS_OPT_SGD)};
    fl_ps_server_opts so = server_opts(t, 1, 1, 1);
    so.num_threads = 1;
    so.request_timeout_ms = 30000;
    cluster c;
    cluster_start(&c, so);
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 1);
    co.request_timeout_ms = 5000;
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    fl_net_conn *nc = raw_connect(c.eps[0], 0);
    for (int round = 0; round < 3; round++) {
        uint8_t h[FL__PS_HDR];
        fl__ps_hdr_encode(h, FL__PS_HEARTBEAT, 0, 100 + (uint64_t)round, 0);
        CHECK_OK(fl_net_send_all(nc, h, sizeof h, fl_net_deadline(2000)));
        fl__ps_rbuf rb = {0};
        fl__ps_msg m;
        CHECK_OK(fl__ps_recv(nc, &rb, 1 << 20, &m, fl_net_deadline(3000)));
        CHECK(m.h.type == FL__PS_HEARTBEAT && (m.h.flags & FL__PS_F_REPLY) && m.h.req_id == 100 + (uint64_t)round);
        fl__ps_rbuf_free(&rb);
        usleep(20000); /* the loop's turn after the answer is over */
        uint64_t t0 = fl__now_ns(), id = 7;
        float v[2];
        for (int i = 0; i < 5; i++) CHECK_OK(fl_ps_client_pull_sparse(cl, 0, &id, 1, v, 1));
        double s = (double)(fl__now_ns() - t0) / 1e9;
        if (s > 2.5) TFAIL("round %d: 5 pulls took %.1f s behind a silent connection's answered heartbeat", round, s);
    }
    fl_net_conn_free(nc);
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

TEST(retried_push_applied_once)
{
    fl_ps_table_config t[1] = {sparse_t("emb", 1, FL_PS_OPT_SUM)};
    t[0].init = fl_init_constant(0);
    cluster c;
    cluster_start(&c, server_opts(t, 1, 1, 1));
    fl_net_conn *a = raw_connect(c.eps[0], 0);
    send_push(a, 1, 1.0f);
    send_push(a, 2, 10.0f);
    fl_net_conn_free(a); /* the "client" reconnects and retries push 2 */
    fl_net_conn *b = raw_connect(c.eps[0], 0);
    send_push(b, 2, 10.0f);
    send_push(b, 3, 100.0f);
    fl_net_conn_free(b);
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    uint64_t id = 11;
    float v;
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, &id, 1, &v, 0));
    CHECK_NEAR(v, 111, 0);
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

TEST(malformed_frames_close_only_their_connection)
{
    fl_ps_table_config t[1] = {sparse_t("emb", 2, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 1, 1, 1));
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl)); /* a good client stays connected throughout */
    struct {
        const char *what;
        uint32_t w[12];
        int nw;
    } bad[] = {
        {"bad magic", {0xdeadbeef, 1, 0, 0, 1, 0, 0, 0}, 8},
        {"huge length", {FL__PS_MAGIC, 1 | (FL__PS_PULL_SPARSE << 16), 0, 0, 1, 0, 0, 0x40}, 8},
        {"unknown type", {FL__PS_MAGIC, 1 | (77u << 16), 0, 0, 1, 0, 0, 0}, 8},
        {"key count overflow", {FL__PS_MAGIC, 1 | (FL__PS_PULL_SPARSE << 16), 0, 0, 1, 0, 16, 0, 0, 0, 0, 1u << 30}, 12},
        {"truncated body then close", {FL__PS_MAGIC, 1 | (FL__PS_PULL_SPARSE << 16), 0, 0, 1, 0, 64, 0, 0, 0}, 10},
        {"a reply frame", {FL__PS_MAGIC, 1 | (FL__PS_HEARTBEAT << 16), FL__PS_F_REPLY, 0, 1, 0, 0, 0}, 8},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fl_net_conn *nc = raw_connect(c.eps[0], 0);
        CHECK_OK(fl_net_send_all(nc, bad[i].w, (size_t)bad[i].nw * 4, fl_net_deadline(2000)));
        if (i == 4) fl_net_conn_shutdown(nc); /* send half, then hang up */
        uint8_t buf[64];
        int st = fl_net_recv_all(nc, buf, 32, fl_net_deadline(5000));
        if (st != FL_EREMOTE && !(i == 4 && st != FL_OK))
            TFAIL("'%s': connection not closed (%s)", bad[i].what, fl_strerror(st));
        fl_net_conn_free(nc);
    }
    /* plain TCP junk without a handshake */
    char host[64];
    int port;
    CHECK_OK(fl_net_parse_endpoint(c.eps[0], host, sizeof host, &port, 0));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    char junk[200];
    memset(junk, 'A', sizeof junk);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    /* the server still serves the good client */
    uint64_t id = 5;
    float v[2];
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, &id, 1, v, 1));
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

TEST(wrong_or_missing_secret_refused)
{
    fl_net_secret good, bad;
    CHECK_OK(fl_net_secret_generate(&good));
    CHECK_OK(fl_net_secret_generate(&bad));
    fl_ps_table_config t[1] = {dense_t("w", 2, 2, FL_PS_OPT_SGD)};
    fl_ps_server_opts so = server_opts(t, 1, 1, 1);
    so.secret = &good;
    so.insecure_local = 0;
    cluster c;
    cluster_start(&c, so);
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 1);
    co.insecure_local = 0;
    fl_ps_client *cl;
    CHECK_FAILS(fl_ps_client_create(&co, &cl), FL_EINVAL, "no job secret");
    co.secret = &bad;
    CHECK_FAILS(fl_ps_client_create(&co, &cl), FL_EPROTO, "authentication failed");
    co.secret = NULL;
    co.insecure_local = 1; /* no secret at all: the server refuses it */
    CHECK(fl_ps_client_create(&co, &cl) != FL_OK);
    CHECK_STR_HAS(fl_last_error(), "server 0");
    co.secret = &good;
    co.insecure_local = 0;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

TEST(config_mismatch_names_the_table)
{
    fl_ps_table_config t[2] = {dense_t("w", 2, 2, FL_PS_OPT_SGD), sparse_t("emb", 4, FL_PS_OPT_ADAM)};
    cluster c;
    cluster_start(&c, server_opts(t, 2, 1, 1));
    fl_ps_table_config t2[2] = {t[0], t[1]};
    t2[1].dim = 8;
    fl_ps_client_opts co = client_opts(&c, t2, 2, 0, 1);
    fl_ps_client *cl;
    CHECK_FAILS(fl_ps_client_create(&co, &cl), FL_EINVAL, "table 1 'emb' is configured differently");
    co = client_opts(&c, t, 2, 0, 1);
    CHECK_OK(fl_ps_client_create(&co, &cl));
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

/* The update rule is the server's (as Paddle's pserver runs its own program's optimizer):
 * a client with another rule, rate or initializer is accepted and the server's rule
 * applies; what the pushes carry (gradients, scaled gradients, GEO deltas) must agree. */
TEST(server_rule_applies_pushes_must_agree)
{
    fl_ps_table_config t[2] = {dense_t("w", 1, 2, FL_PS_OPT_SGD), sparse_t("emb", 4, FL_PS_OPT_ADAM)};
    t[0].opt.lr = 0.5f;
    cluster c;
    cluster_start(&c, server_opts(t, 2, 1, 1));
    fl_ps_table_config t2[2] = {t[0], t[1]};
    t2[0].opt = (fl_ps_optimizer){FL_PS_OPT_ADAM, 0.01f, 0, 0, 0, 0};
    t2[1].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 0.3f, 0, 0, 0, 0};
    t2[1].init = fl_init_constant(0.25f);
    fl_ps_client *cl;
    for (int bad = 0; bad < 2; bad++) {
        fl_ps_table_config t3[2] = {t2[0], t2[1]};
        if (bad) t3[0].opt = (fl_ps_optimizer){FL_PS_OPT_SUM, 0, 0, 0, 0, 0};
        else t3[0].opt = (fl_ps_optimizer){FL_PS_OPT_SGD, 1.0f, 0, 0, 0, 0, 0, 0, 1};
        fl_ps_client_opts co = client_opts(&c, t3, 2, 0, 1);
        CHECK_FAILS(fl_ps_client_create(&co, &cl), FL_EINVAL, "table 0 'w': worker 0 pushes");
        CHECK_STR_HAS(fl_last_error(), bad ? "parameter deltas" : "already multiplied");
        CHECK_STR_HAS(fl_last_error(), "this server expects gradients");
    }
    fl_ps_client_opts co = client_opts(&c, t2, 2, 0, 1);
    CHECK_OK(fl_ps_client_create(&co, &cl));
    float w[2] = {1.0f, -1.0f}, g[2] = {0.5f, 2.0f}, out[2];
    CHECK_OK(fl_ps_client_init_dense(cl, 0, w, 0, NULL));
    CHECK_OK(fl_ps_client_push_dense(cl, 0, g));
    CHECK_OK(fl_ps_client_pull_dense(cl, 0, out));
    CHECK_NEAR(out[0], 1.0f - 0.5f * 0.5f, 1e-6); /* the server's sgd at 0.5, not the client's adam */
    CHECK_NEAR(out[1], -1.0f - 0.5f * 2.0f, 1e-6);
    uint64_t id = 7;
    float row[4];
    CHECK_OK(fl_ps_client_pull_sparse(cl, 1, &id, 1, row, 1));
    for (int k = 0; k < 4; k++) CHECK(row[k] >= -0.1f && row[k] <= 0.1f && row[k] != 0.25f); /* the server's init */
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
}

/* ---- checkpoints -------------------------------------------------------------------------------------- */

static void train_steps(fl_ps_client *cl, int steps, int seed)
{
    uint64_t ids[64];
    float g[64 * 8], out[64 * 8], dg[12];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 64; i++) ids[i] = (uint64_t)((seed * 977 + s * 61 + i * 7) % 3000);
        th_fill_uniform(g, 64 * 8, -1, 1, (unsigned)(seed * 100 + s));
        th_fill_uniform(dg, 12, -1, 1, (unsigned)(seed * 100 + s + 50));
        CHECK_OK(fl_ps_client_pull_sparse(cl, 0, ids, 64, out, 1));
        CHECK_OK(fl_ps_client_push_sparse(cl, 0, ids, 64, g, NULL, NULL));
        CHECK_OK(fl_ps_client_push_dense(cl, 1, dg));
    }
}

static void snapshot(fl_ps_client *cl, float *sv, float *dv)
{
    static uint64_t all[3000];
    for (int i = 0; i < 3000; i++) all[i] = (uint64_t)i;
    CHECK_OK(fl_ps_client_pull_sparse(cl, 0, all, 3000, sv, 0));
    CHECK_OK(fl_ps_client_pull_dense(cl, 1, dv));
}

TEST(save_load_bit_exact_through_clients)
{
    fl_ps_table_config t[2] = {sparse_t("emb", 8, FL_PS_OPT_ADAM), dense_t("fc", 4, 3, FL_PS_OPT_ADAGRAD)};
    cluster c;
    cluster_start(&c, server_opts(t, 2, 2, 1));
    fl_ps_client_opts co = client_opts(&c, t, 2, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_ckpt");
    int64_t step = -1;
    CHECK_FAILS(fl_ps_client_load(cl, dir, &step), FL_ENOTFOUND, "ps_manifest.json");
    train_steps(cl, 10, 1);
    CHECK_OK(fl_ps_client_save(cl, dir, 0, 10));
    static float s1[3000 * 8], s2[3000 * 8], s3[3000 * 8];
    float d1[12], d2[12], d3[12];
    snapshot(cl, s1, d1);
    train_steps(cl, 5, 2);
    snapshot(cl, s2, d2);
    CHECK_OK(fl_ps_client_save(cl, dir, 0, 15)); /* a second save replaces the first */
    train_steps(cl, 5, 3);
    CHECK_OK(fl_ps_client_load(cl, dir, &step));
    CHECK_EQ_INT(step, 15);
    snapshot(cl, s3, d3);
    CHECK(memcmp(s2, s3, sizeof s2) == 0 && memcmp(d2, d3, sizeof d2) == 0);
    /* training after the load repeats exactly what followed the save */
    train_steps(cl, 5, 3);
    snapshot(cl, s1, d1);
    CHECK_OK(fl_ps_client_load(cl, dir, &step));
    train_steps(cl, 5, 3);
    snapshot(cl, s3, d3);
    CHECK(memcmp(s1, s3, sizeof s1) == 0 && memcmp(d1, d3, sizeof d1) == 0);
    /* only the committed generation's files remain */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls %s/emb | wc -l) -eq 2 && test $(ls %s/fc | wc -l) -eq 2", dir, dir);
    CHECK(system(cmd) == 0);
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
    th_rmtree(dir);
}

TEST(interrupted_save_keeps_previous_checkpoint)
{
    fl_ps_table_config t[2] = {sparse_t("emb", 8, FL_PS_OPT_ADAM), dense_t("fc", 4, 3, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 2, 2, 1));
    fl_ps_client_opts co = client_opts(&c, t, 2, 0, 1);
    fl_ps_client *cl;
    CHECK_OK(fl_ps_client_create(&co, &cl));
    char dir[64];
    th_mktemp(dir, sizeof dir, "fl_ps_intr");
    train_steps(cl, 3, 1);
    CHECK_OK(fl_ps_client_save(cl, dir, 0, 3));
    static float s1[3000 * 8], s2[3000 * 8];
    float d1[12], d2[12];
    snapshot(cl, s1, d1);
    train_steps(cl, 40, 2); /* many more rows: the emb shards grow past the limit below */
    /* files larger than 64 KiB can no longer be written: the emb shard writes fail, the
     * small dense shards succeed, so the save dies between shard writes */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {64 << 10, 64 << 10};
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    CHECK_FAILS(fl_ps_client_save(cl, dir, 0, 43), FL_EIO, "previous checkpoint");
    rl.rlim_cur = rl.rlim_max = RLIM_INFINITY;
    setrlimit(RLIMIT_FSIZE, &rl);
    int64_t step;
    CHECK_OK(fl_ps_client_load(cl, dir, &step));
    CHECK_EQ_INT(step, 3);
    snapshot(cl, s2, d2);
    CHECK(memcmp(s1, s2, sizeof s1) == 0 && memcmp(d1, d2, sizeof d1) == 0);
    CHECK_OK(fl_ps_client_stop(cl));
    fl_ps_client_free(cl);
    cluster_join(&c, FL_OK);
    th_rmtree(dir);
}

/* ---- failures ------------------------------------------------------------------------------------------ */

TEST(lost_worker_fails_the_server)
{
    fl_ps_table_config t[1] = {dense_t("w", 2, 2, FL_PS_OPT_SGD)};
    cluster c;
    cluster_start(&c, server_opts(t, 1, 1, 2));
    fl_ps_client_opts co = client_opts(&c, t, 1, 0, 2);
    fl_ps_client *w0, *w1;
    CHECK_OK(fl_ps_client_create(&co, &w0));
    co.worker_rank = 1;
    CHECK_OK(fl_ps_client_create(&co, &w1));
    CHECK_OK(fl_ps_client_stop(w0));
    fl_ps_client_free(w1); /* gone without stop */
    pthread_join(c.th[0], NULL);
    CHECK_EQ_INT(c.rc[0], FL_EREMOTE);
    CHECK_STR_HAS(c.msg[0], "worker 1");
    CHECK_STR_HAS(c.msg[0], "without calling stop");
    fl_ps_client_free(w0);
    fl_ps_server_free(c.srv[0]);
    free(c.eps[0]);
}

TEST(unreachable_server_is_named)
{
    fl_net_listener *l;
    CHECK_OK(fl_net_listen("127.0.0.1", 0, &l));
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", fl_net_listener_port(l));
    fl_net_listener_free(l);
    const char *eps[1] = {ep};
    fl_ps_table_config t[1] = {dense_t("w", 2, 2, FL_PS_OPT_SGD)};
    fl_ps_client_opts co = {0};
    co.endpoints = eps;
    co.num_servers = 1;
    co.num_workers = 1;
    co.tables = t;
    co.num_tables = 1;
    co.insecure_local = 1;
    co.connect_timeout_ms = 400;
    fl_ps_client *cl;
    CHECK_FAILS(fl_ps_client_create(&co, &cl), FL_ETIMEDOUT, ep);
    CHECK_STR_HAS(fl_last_error(), "server 0");
}

/* The heartbeat thread stamps alive_ns (and resumed_ns) with its own clock, which can be later
 * than the clock a waiting request read just before it: that server was just heard from.
 * Unsigned subtraction made it "answered nothing for 18446744073.7 s" and failed the request
 * (or, in a timeout's message, lost "though it answers heartbeats"). */
TEST(later_stamp_of_the_heartbeat_thread_is_fresh)
{
    fl_ps_client c;
    fl__ps_csrv sv;
    memset(&c, 0, sizeof c);
    memset(&sv, 0, sizeof sv);
    c.o.heartbeat_ms = 1000;
    c.o.server_timeout_ms = 8000;
    c.ns = 1;
    c.srv = &sv;
    sv.client = &c;
    snprintf(sv.label, sizeof sv.label, "server 0 (test)");
    uint64_t later = fl__now_ns() + 1000000000ull;
    atomic_store(&sv.alive_ns, later);
    CHECK_OK(fl__ps_client_watch(&sv, NULL, 0, 0));
    CHECK(!sv.gone);
    atomic_store(&sv.alive_ns, 0);
    atomic_store(&c.live.resumed_ns, later);
    CHECK_OK(fl__ps_client_watch(&sv, NULL, 0, 0));
    CHECK(!sv.gone);
    atomic_store(&c.live.resumed_ns, 0);
    atomic_store(&sv.alive_ns, later);
    fl__err(FL_ETIMEDOUT, "receive from server 0 (test) timed out");
    CHECK_EQ_INT(fl__ps_client_timeout_error(&c, 0, "pull_dense"), FL_ETIMEDOUT);
    CHECK_STR_HAS(fl_last_error(), "though it answers heartbeats");
    /* a server silent for longer than server_timeout_ms is still named */
    atomic_store(&sv.alive_ns, 1);
    CHECK_EQ_INT(fl__ps_client_watch(&sv, NULL, 9000000000ull, 0), FL_EREMOTE);
    CHECK_STR_HAS(fl_last_error(), "server 0 (test) has answered nothing");
    CHECK(sv.gone);
}

TEST_MAIN(T(dense_roundtrip_two_servers), T(bf16_dense_wire_and_traffic), T(dense_many_matches_single_calls),
          T(sparse_roundtrip_duplicates_two_servers), T(barrier_among_three_workers),
          T(sync_mode_equals_local_training_on_global_batch), T(sync_steps_continue_after_a_worker_stopped),
          T(answered_heartbeat_holds_no_request_thread), T(retried_push_applied_once),
          T(malformed_frames_close_only_their_connection), T(wrong_or_missing_secret_refused),
          T(config_mismatch_names_the_table), T(server_rule_applies_pushes_must_agree),
          T(save_load_bit_exact_through_clients), T(interrupted_save_keeps_previous_checkpoint),
          T(lost_worker_fails_the_server), T(unreachable_server_is_named), T(later_stamp_of_the_heartbeat_thread_is_fresh))
