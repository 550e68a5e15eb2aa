/* ring.c - the workers' communicator of a fleet: registry by ring id, blocking collectives,
 * and the communication thread that overlaps bucket allreduces with backward.  The
 * collective runtime trains over it; util collectives and datasets use it in every
 * runtime. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ring.h"
#include "fleet/coll.h"

#define MAX_RINGS 64
#define MAX_BUCKETS 4096

typedef struct {
    float *buf;
    size_t cap;
} bucket;

struct fl_ring {
    fl_coll *coll;
    int ring_id, rank, size;
    bucket *buckets;
    int nbuckets;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float **queue; /* bucket buffers waiting (ring buffer); the buffer pointers, not
                            bucket ids, so the main thread may grow c->buckets meanwhile */
    size_t *qcount;
    int qhead, qtail, qcap, busy, stop;
    int err;
    char errmsg[512];
    fleet_dgc_stats dgc;           /* fl__ring_dgc_count */
    int64_t dgc_last[2];           /* the last step counted, dense and sparse */
};

/* The process-wide ring table: ring id -> communicator (ops find theirs by attribute). */
static fl_ring *rings[MAX_RINGS];
static pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;

fl_ring *fl__ring_lookup(int64_t id)
{
    if (id < 0 || id >= MAX_RINGS) return NULL;
    pthread_mutex_lock(&rings_mu);
    fl_ring *c = rings[id];
    pthread_mutex_unlock(&rings_mu);
    return c;
}

int fl__ring_id(const fl_ring *c) { return c->ring_id; }
int fl__ring_rank(const fl_ring *c) { return c->rank; }
int fl__ring_size(const fl_ring *c) { return c->size; }

static int check_idle(fl_ring *c, const char *what)
{
    pthread_mutex_lock(&c->mu);
    int busy = c->qhead != c->qtail;
    pthread_mutex_unlock(&c->mu);
    if (busy) return fl__err(FL_ESTATE, "collective %s called while gradient allreduces are in flight", what);
    return FL_OK;
}

int fl__ring_allreduce(fl_ring *c, void *buf, size_t count, fl_dtype dt, const char *op)
{
    FL_CHECK(check_idle(c, "allreduce"));
    fl_coll_op o = FL_COLL_SUM;
    FL_CHECK(fl_coll_op_parse(op, &o));
    if (c->size == 1 || count == 0) return FL_OK;
    return fl_coll_allreduce(c->coll, buf, buf, count, dt, o);
}

int fl__ring_broadcast(fl_ring *c, void *buf, size_t count, fl_dtype dt, int root)
{
    FL_CHECK(check_idle(c, "broadcast"));
    if (c->size == 1 || count == 0) return FL_OK;
    return fl_coll_broadcast(c->coll, buf, count, dt, root);
}

int fl__ring_allgather(fl_ring *c, const void *send, void *recv, size_t count, fl_dtype dt)
{
    FL_CHECK(check_idle(c, "allgather"));
    if (c->size == 1) {
        if (count) memmove(recv, send, count * fl_dtype_size(dt));
        return FL_OK;
    }
    return fl_coll_allgather(c->coll, send, recv, count, dt);
}

uint64_t fl__ring_bytes_sent(const fl_ring *c) { return c->size > 1 ? fl_coll_bytes_sent(c->coll) : 0; }

void fl__ring_dgc_count(fl_ring *c, int64_t step, int sparse, uint64_t bytes)
{
    if (c->dgc_last[sparse != 0] != step + 1) {
        c->dgc_last[sparse != 0] = step + 1;
        if (sparse) c->dgc.sparse_steps++;
        else c->dgc.dense_steps++;
    }
    if (sparse) c->dgc.sparse_bytes += bytes;
    else c->dgc.dense_bytes += bytes;
}

fleet_dgc_stats fl__ring_dgc_stats(const fl_ring *c) { return c->dgc; }

int fl__ring_barrier(fl_ring *c)
{
    FL_CHECK(check_idle(c, "barrier"));
    return c->size == 1 ? FL_OK : fl_coll_barrier(c->coll);
}

float *fl__ring_bucket(fl_ring *c, int b, size_t n)
{
    if (b < 0 || b >= MAX_BUCKETS) {
        fl__err(FL_EINVAL, "collective: bucket %d out of range", b);
        return NULL;
    }
    if (b >= c->nbuckets) {
        int nb = b + 1;
        bucket *nbk = realloc(c->buckets, (size_t)nb * sizeof *nbk);
        if (!nbk) {
            fl__err(FL_ENOMEM, "collective: out of memory");
            return NULL;
        }
        memset(nbk + c->nbuckets, 0, (size_t)(nb - c->nbuckets) * sizeof *nbk);
        c->buckets = nbk;
        c->nbuckets = nb;
    }
    bucket *k = &c->buckets[b];
    if (n > k->cap) {
        float *nbuf = fl__alloc_aligned(n * sizeof(float));
        if (!nbuf) {
            fl__err(FL_ENOMEM, "collective: cannot allocate a %zu-element bucket", n);
            return NULL;
        }
        fl__free_aligned(k->buf);
        k->buf = nbuf;
        k->cap = n;
    }
    return k->buf;
}

static void *comm_main(void *arg)
{
    fl_ring *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->qhead == c->qtail && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
        if (c->qhead == c->qtail && c->stop) break;
        float *buf = c->queue[c->qhead % c->qcap];
        size_t n = c->qcount[c->qhead % c->qcap];
        c->busy = 1;
        int failed = c->err != FL_OK;
        pthread_mutex_unlock(&c->mu);
        /* after a failure the remaining jobs are dropped: the step reports the first error */
        int st = failed ? FL_OK : fl_coll_allreduce(c->coll, buf, buf, n, FL_FLOAT32, FL_COLL_SUM);
        pthread_mutex_lock(&c->mu);
        if (st != FL_OK && c->err == FL_OK) {
            c->err = st;
            snprintf(c->errmsg, sizeof c->errmsg, "%s", fl_last_error());
        }
        c->qhead++;
        c->busy = 0;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int fl__ring_start(fl_ring *c, int b, size_t n)
{
    if (c->size == 1 || n == 0) return FL_OK;
    pthread_mutex_lock(&c->mu);
    if (c->qtail - c->qhead >= c->qcap) {
        int nc = c->qcap ? c->qcap * 2 : 64;
        float **nq = malloc((size_t)nc * sizeof *nq);
        size_t *nn = malloc((size_t)nc * sizeof *nn);
        if (!nq || !nn) {
            free(nq);
            free(nn);
            pthread_mutex_unlock(&c->mu);
            return fl__err(FL_ENOMEM, "collective: out of memory");
        }
        for (int i = c->qhead; i < c->qtail; i++) {
            nq[i - c->qhead] = c->queue[i % c->qcap];
            nn[i - c->qhead] = c->qcount[i % c->qcap];
        }
        c->qtail -= c->qhead;
        c->qhead = 0;
        free(c->queue);
        free(c->qcount);
        c->queue = nq;
        c->qcount = nn;
        c->qcap = nc;
    }
    if (b < 0 || b >= c->nbuckets || c->buckets[b].cap < n) {
        pthread_mutex_unlock(&c->mu);
        return fl__err(FL_EINVAL, "collective: bucket %d was not prepared for %zu elements", b, n);
    }
    c->queue[c->qtail % c->qcap] = c->buckets[b].buf;
    c->qcount[c->qtail % c->qcap] = n;
    c->qtail++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return FL_OK;
}

int fl__ring_wait_all(fl_ring *c)
{
    if (c->size == 1) return FL_OK;
    pthread_mutex_lock(&c->mu);
    while (c->qhead != c->qtail) pthread_cond_wait(&c->cv, &c->mu);
    int st = c->err;
    char msg[512];
    memcpy(msg, c->errmsg, sizeof msg);
    c->err = FL_OK;
    pthread_mutex_unlock(&c->mu);
    if (st != FL_OK) return fl__err(st, "gradient allreduce failed: %s", msg);
    return FL_OK;
}

int fl__ring_create(const fleet_role *role, const fl_net_secret *secret, const char *allreduce_dtype, fl_ring **out)
{
    *out = NULL;
    fl_ring *c = calloc(1, sizeof *c);
    if (!c) return fl__err(FL_ENOMEM, "collective: out of memory");
    c->rank = role->worker_index;
    c->size = role->nworkers ? role->nworkers : 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int st = FL_OK;
    if (c->size > 1 && !secret) {
        st = fl__err(FL_EINVAL, "collective: %d workers need the job secret to connect", c->size);
        goto fail;
    }
    if (c->size > 1) {
        fl_coll_opts o;
        memset(&o, 0, sizeof o);
        o.rank = c->rank;
        o.world_size = c->size;
        o.endpoints = (const char *const *)role->workers;
        o.secret = secret;
        o.allreduce_dtype = allreduce_dtype;
        st = fl_coll_create(&o, &c->coll);
        if (st != FL_OK) goto fail;
        if (pthread_create(&c->thread, NULL, comm_main, c) != 0) {
            st = fl__err(FL_ENOMEM, "collective: cannot start the communication thread");
            goto fail;
        }
        c->thread_started = 1;
    }
    pthread_mutex_lock(&rings_mu);
    c->ring_id = -1;
    for (int i = 0; i < MAX_RINGS; i++)
        if (!rings[i]) {
            rings[i] = c;
            c->ring_id = i;
            break;
        }
    pthread_mutex_unlock(&rings_mu);
    if (c->ring_id < 0) {
        st = fl__err(FL_ENOMEM, "collective: more than %d communicators in one process", MAX_RINGS);
        goto fail;
    }
    *out = c;
    return FL_OK;
fail:
    fl__ring_free(c);
    return st;
}

void fl__ring_free(fl_ring *c)
{
    if (!c) return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    pthread_mutex_lock(&rings_mu);
    if (c->ring_id >= 0 && c->ring_id < MAX_RINGS && rings[c->ring_id] == c) rings[c->ring_id] = NULL;
    pthread_mutex_unlock(&rings_mu);
    if (c->coll) fl_coll_free(c->coll);
    for (int i = 0; i < c->nbuckets; i++) fl__free_aligned(c->buckets[i].buf);
    free(c->buckets);
    free(c->queue);
    free(c->qcount);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}
