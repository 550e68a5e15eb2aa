/*
 * shm.c - the "shm" backend: collectives through one shared-memory segment, for ranks on
 * one host.  Not available with disable_shm, or when chunk_bytes is below 256 per rank.
 *
 * Segment.  Rank 0 creates a POSIX shm object named /fleet-coll-<pid>-<64 random bits>
 * (mode 0600, pages reserved with posix_fallocate so a full /dev/shm is an error, not a
 * SIGBUS), writes a header with a 32-byte random token and offers name + token to every
 * rank over its authenticated TCP connection.  Each rank maps it and checks the token; rank
 * 0 collects the answers, tells everyone whether all attached, and unlinks the name at once
 * (nothing is left in /dev/shm even if a process crashes later).  Layout:
 *   [header 4 KiB][control: 256 B per rank][stage: 2 slots of chunk bytes per rank]
 *   [result: 2 slots of chunk bytes]
 * A rank's control block holds flag `a` and two op descriptors in one cache line, flag `b`
 * two lines further, and its futex word, sleeper count and CPU in the last line (no false
 * sharing).  Flags carry step numbers that only grow.
 *
 * Protocol.  Every op is a series of steps t = 1, 2, ...; slot t & 1 of each buffer
 * belongs to step t.  In a step a rank writes its stage slot, publishes a = t (release),
 * waits until every peer's a >= t (acquire), then reads peers' slots.  Because a rank
 * publishes a = t+1 only after finishing step t, waiting for everyone's a >= t+1 also
 * proves every slot of step t-1 is free again: two slots suffice and no further handshake
 * is needed.  The first step of every op also publishes its descriptor (slot seq & 1) and
 * checks every peer's, so different calls fail with FL_EPROTO on every rank before any
 * data is combined.  The reduce-scatter + allgather allreduce (3+ ranks) adds flag b per step
 * (results published); its result slots are protected by the same argument.
 *
 * Waits spin (pause) for 20 us when this host has a core per rank (yield instead when the
 * awaited peer last ran on this same core: it needs the core), then sleep on the
 * peer's futex word (a publisher wakes sleepers; a sleeper wakes at least every 1 ms).  A
 * spinning or yielding waiter keeps losing its core to other busy processes; a sleeper is
 * woken as soon as its peer publishes and, having slept, gets the core back at once.  Every
 * 200 us the waits poll the TCP connections, so a peer that died (its sockets close) or
 * aborted (its notice arrives) fails the wait at once, and a wait longer than timeout_ms
 * fails with FL_ETIMEDOUT naming the ranks that did not arrive.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

#define SHM_MAGIC 0x314d48534c46ull /* "FLSHM1" */
#define HDR_BYTES 4096
#define CTL_BYTES 256
#define NAME_MAX_ 64
#define CHECK_NS 200000ull /* poll the TCP connections this often while waiting */
#define SPIN_NS 20000ull   /* spin this long (only with a core per rank), then sleep on a futex */
#define NAP_NS 1000000ull  /* futex sleeps last at most this long */
enum { OFFER = 10, NONE = 11, RESULT = 12, DECIDE = 13 };

typedef struct {
    _Atomic uint64_t a; /* line 0: flag a and the op descriptors */
    fl__coll_desc desc[2];
    char pad0[CTL_BYTES / 2 - 8 - 2 * sizeof(fl__coll_desc)];
    _Atomic uint64_t b; /* line 2: flag b */
    char pad1[CTL_BYTES / 4 - 8];
    _Atomic uint32_t fseq;    /* line 3: futex word, bumped on every publish */
    _Atomic uint32_t waiters; /* peers asleep on fseq */
    _Atomic int32_t cpu;      /* the CPU this rank last published from */
    char pad2[CTL_BYTES / 4 - 12];
} shm_ctl;
_Static_assert(sizeof(shm_ctl) == CTL_BYTES, "control block size");

typedef struct {
    uint64_t magic;
    uint64_t total, chunk;
    uint32_t nranks, pad;
    uint8_t token[32];
} shm_hdr;

typedef struct { /* the backend's state, c->be */
    uint8_t *base;
    size_t bytes, slot;
    int P, me;
    uint64_t step;
    shm_ctl *ctl;
    uint8_t *stage, *res;
} shm_seg;

static size_t layout(int P, size_t chunk, size_t *ctl_off, size_t *stage_off, size_t *res_off)
{
    *ctl_off = HDR_BYTES;
    *stage_off = (HDR_BYTES + (size_t)P * CTL_BYTES + 4095) / 4096 * 4096;
    *res_off = *stage_off + (size_t)P * 2 * chunk;
    return *res_off + 2 * chunk;
}

static shm_seg *shm_wrap(uint8_t *base, size_t bytes, int P, int me, size_t chunk)
{
    shm_seg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t co, so, ro;
    layout(P, chunk, &co, &so, &ro);
    s->base = base;
    s->bytes = bytes;
    s->slot = chunk;
    s->P = P;
    s->me = me;
    s->ctl = (shm_ctl *)(base + co);
    s->stage = base + so;
    s->res = base + ro;
    return s;
}

static void shm_close(fl_coll *c)
{
    shm_seg *s = c->be;
    if (!s) return;
    munmap(s->base, s->bytes);
    free(s);
    c->be = NULL;
}

/* Rank 0: create and map.  Returns 0 on success (name, token, map filled), else -1 with
 * the reason in why. */
static int shm_create(fl_coll *c, char *name, uint8_t *token, uint8_t **map, size_t *bytes, char *why, size_t cap)
{
    size_t co, so, ro, total = layout(c->size, c->chunk, &co, &so, &ro);
    uint64_t rnd;
    if (RAND_bytes((unsigned char *)&rnd, sizeof rnd) != 1 || RAND_bytes(token, 32) != 1) {
        snprintf(why, cap, "no random bytes for the segment name");
        return -1;
    }
    snprintf(name, NAME_MAX_, "/fleet-coll-%d-%016llx", (int)getpid(), (unsigned long long)rnd);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, cap, "shm_open(%s) failed: %s", name, strerror(errno));
        return -1;
    }
    int e = ftruncate(fd, (off_t)total) ? errno : posix_fallocate(fd, 0, (off_t)total);
    uint8_t *m = e ? MAP_FAILED : mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!e && m == MAP_FAILED) e = errno;
    close(fd);
    if (e) {
        snprintf(why, cap, "cannot reserve %zu bytes of shared memory (%s): %s", total, name, strerror(e));
        shm_unlink(name);
        return -1;
    }
    shm_hdr *h = (shm_hdr *)m;
    h->total = total;
    h->chunk = c->chunk;
    h->nranks = (uint32_t)c->size;
    memcpy(h->token, token, 32);
    h->magic = SHM_MAGIC;
    *map = m;
    *bytes = total;
    return 0;
}

/* Other ranks: open, map and check rank 0's segment.  0 on success, else -1 with why. */
static int shm_attach(fl_coll *c, const char *name, const uint8_t *token, size_t total, uint8_t **map, char *why,
                      size_t cap)
{
    size_t co, so, ro;
    if (total != layout(c->size, c->chunk, &co, &so, &ro)) {
        snprintf(why, cap, "the offered segment has %zu bytes, expected %zu", total,
                 layout(c->size, c->chunk, &co, &so, &ro));
        return -1;
    }
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, cap, "cannot open %s: %s", name, strerror(errno));
        return -1;
    }
    struct stat sb;
    uint8_t *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size == total)
        m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(why, cap, "cannot map %s", name);
        return -1;
    }
    const shm_hdr *h = (const shm_hdr *)m;
    if (h->magic != SHM_MAGIC || h->total != total || h->chunk != c->chunk || h->nranks != (uint32_t)c->size ||
        memcmp(h->token, token, 32) != 0) {
        munmap(m, total);
        snprintf(why, cap, "%s is not the segment rank 0 offered (another object of that name)", name);
        return -1;
    }
    *map = m;
    return 0;
}

/* Refuses what rules shared memory out before any connection exists. */
static int shm_available(const fl_coll *c, const fl_coll_opts *o)
{
    if (o->disable_shm) return fl__err(FL_EINVAL, "disable_shm is set");
    if (c->size > 1 && c->chunk < (size_t)c->size * 256)
        return fl__err(FL_EINVAL, "chunk_bytes %zu is too small for %d ranks in shared memory (at least %zu)", c->chunk,
                       c->size, (size_t)c->size * 256);
    return FL_OK;
}

#define NO_SHM "fl_coll_create: the 'shm' collective backend was requested, but "
#define NO_SHM_HINT " (are the ranks on different hosts, or in different /dev/shm namespaces?)"

/* Rank 0 creates the segment and offers it to the others over TCP; every rank attaches or
 * not and tells rank 0, which decides for everyone: shared memory is used when all
 * attached.  When it was named, a rank that could not is an error on every rank. */
static int shm_setup(fl_coll *c, int named, uint64_t dl, int *used)
{
    uint8_t msg[NAME_MAX_ + 32 + 8] = {0}, *map = NULL;
    size_t bytes = 0;
    char why[256] = "";
    int ok = 1, bad = -1; /* bad: the first rank that could not attach */
    *used = 0;
    if (c->rank == 0) {
        char name[NAME_MAX_] = {0};
        uint8_t token[32];
        int have = shm_create(c, name, token, &map, &bytes, why, sizeof why) == 0;
        if (!have) FL_INFO(FL_SUB_COLL, "rank 0: %s; no shared memory", why);
        memcpy(msg, name, NAME_MAX_);
        memcpy(msg + NAME_MAX_, token, 32);
        fl__put_u64(msg + NAME_MAX_ + 32, bytes);
        int st = FL_OK;
        for (int p = 1; p < c->size && st == FL_OK; p++)
            st = fl_net_send_frame(c->conns[p], have ? OFFER : NONE, 0, msg, sizeof msg, dl);
        for (int p = 1; p < c->size && st == FL_OK && have; p++) {
            fl_net_frame f;
            uint8_t r[4];
            st = fl_net_recv_frame_header(c->conns[p], sizeof r, &f, dl);
            if (st == FL_OK && (f.type != RESULT || f.len != sizeof r))
                st = fl__err(FL_EPROTO, "unexpected setup message from %s", fl__coll_peer(c, p));
            if (st == FL_OK) st = fl_net_recv_all(c->conns[p], r, sizeof r, dl);
            if (st == FL_OK && !fl__get_u32(r) && bad < 0) bad = p;
        }
        if (have) shm_unlink(name);
        ok = bad < 0 && have && st == FL_OK;
        uint8_t dmsg[8];
        fl__put_u32(dmsg, (uint32_t)ok);
        fl__put_u32(dmsg + 4, (uint32_t)bad);
        for (int p = 1; p < c->size && st == FL_OK && have; p++)
            st = fl_net_send_frame(c->conns[p], DECIDE, 0, dmsg, sizeof dmsg, dl);
        if (st) {
            if (map) munmap(map, bytes);
            return fl__err(st, "shared-memory setup: %s", fl_last_error());
        }
        if (!have && named)
            return fl__err(FL_EINVAL, NO_SHM "rank 0 (%s) cannot create the segment: %s", c->endpoints[0], why);
    } else {
        fl_net_frame f;
        int st = fl_net_recv_frame_header(c->conns[0], sizeof msg, &f, dl);
        if (st == FL_OK && ((f.type != OFFER && f.type != NONE) || f.len != sizeof msg))
            st = fl__err(FL_EPROTO, "unexpected setup message from %s", fl__coll_peer(c, 0));
        if (st == FL_OK) st = fl_net_recv_all(c->conns[0], msg, sizeof msg, dl);
        if (st) return fl__err(st, "shared-memory setup: %s", fl_last_error());
        if (f.type == NONE) {
            if (named) return fl__err(FL_EINVAL, NO_SHM "%s could not create the segment", fl__coll_peer(c, 0));
            return FL_OK;
        }
        char name[NAME_MAX_];
        memcpy(name, msg, NAME_MAX_);
        name[NAME_MAX_ - 1] = 0;
        bytes = (size_t)fl__get_u64(msg + NAME_MAX_ + 32);
        int have = shm_attach(c, name, msg + NAME_MAX_, bytes, &map, why, sizeof why) == 0;
        if (!have) FL_INFO(FL_SUB_COLL, "rank %d: %s; no shared memory", c->rank, why);
        uint8_t r[8];
        fl__put_u32(r, (uint32_t)have);
        st = fl_net_send_frame(c->conns[0], RESULT, 0, r, 4, dl);
        if (st == FL_OK) st = fl_net_recv_frame_header(c->conns[0], sizeof r, &f, dl);
        if (st == FL_OK && (f.type != DECIDE || f.len != sizeof r))
            st = fl__err(FL_EPROTO, "unexpected setup message from %s", fl__coll_peer(c, 0));
        if (st == FL_OK) st = fl_net_recv_all(c->conns[0], r, sizeof r, dl);
        if (st) {
            if (map) munmap(map, bytes);
            return fl__err(st, "shared-memory setup: %s", fl_last_error());
        }
        ok = have && fl__get_u32(r);
        bad = (int32_t)fl__get_u32(r + 4);
        if (named && !have)
            return fl__err(FL_EINVAL, NO_SHM "this rank, %d (%s), cannot attach rank 0's segment: %s" NO_SHM_HINT, c->rank,
                           c->endpoints[c->rank], why);
    }
    if (!ok) {
        if (map) munmap(map, bytes);
        if (!named) return FL_OK;
        if (bad < 0 || bad >= c->size) bad = 0;
        return fl__err(FL_EINVAL, NO_SHM "rank %d (%s) could not attach the segment" NO_SHM_HINT, bad, c->endpoints[bad]);
    }
    shm_seg *s = shm_wrap(map, bytes, c->size, c->rank, c->chunk);
    if (!s) {
        munmap(map, bytes);
        return fl__err(FL_ENOMEM, "shared-memory setup: out of memory");
    }
    atomic_store(&s->ctl[c->rank].cpu, sched_getcpu());
    c->be = s;
    *used = 1;
    return FL_OK;
}

/* ---- waits ----------------------------------------------------------------------------------- */

static inline _Atomic uint64_t *flag(shm_seg *s, int p, int which) { return which ? &s->ctl[p].b : &s->ctl[p].a; }

static int wait_timeout(fl_coll *c, const fl__coll_desc *d, int which, uint64_t t)
{
    char ds[160], who[512] = "";
    size_t o = 0;
    fl__coll_desc_str(d, ds, sizeof ds);
    for (int p = 0; p < c->size && o < sizeof who - 80; p++)
        if (p != c->rank && atomic_load_explicit(flag(c->be, p, which), memory_order_acquire) < t)
            o += (size_t)snprintf(who + o, sizeof who - o, "%s%s", o ? ", " : "", fl__coll_peer(c, p));
    return fl__err(FL_ETIMEDOUT,
                   "%s timed out after %d ms waiting in shared memory for %s (stalled, or busy in "
                   "another call)",
                   ds, c->timeout_ms, who);
}

/* Abort notices from anyone fail the wait; a closed connection does only for a peer that
 * has not arrived (re-read after the close: a peer publishes before it exits). */
static int check_alive(fl_coll *c, const fl__coll_desc *d, int which, uint64_t t)
{
    FL_CHECK(fl__coll_check_peers(c, d, NULL, 0));
    for (int p = 0; p < c->size; p++)
        if (p != c->rank && c->peer_closed[p] && atomic_load_explicit(flag(c->be, p, which), memory_order_acquire) < t)
            return fl__coll_closed_error(c, d, p, 0);
    return FL_OK;
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

/* Publishes flag `which` = t, then wakes peers that sleep on this rank's futex word. */
static void publish(shm_seg *s, int which, uint64_t t)
{
    shm_ctl *me = &s->ctl[s->me];
    atomic_store_explicit(which ? &me->b : &me->a, t, memory_order_release);
    int cpu = sched_getcpu();
    if (atomic_load_explicit(&me->cpu, memory_order_relaxed) != cpu)
        atomic_store_explicit(&me->cpu, cpu, memory_order_relaxed);
    atomic_fetch_add(&me->fseq, 1);
    if (atomic_load(&me->waiters)) syscall(SYS_futex, (uint32_t *)&me->fseq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int shm_wait(fl_coll *c, const fl__coll_desc *d, int which, uint64_t t)
{
    shm_seg *s = c->be;
    int p = 0, P = c->size;
    unsigned it = 0;
    uint64_t t0 = 0, next = 0, tmo = (uint64_t)c->timeout_ms * 1000000ull;
    for (;;) {
        while (p < P && (p == s->me || atomic_load_explicit(flag(s, p, which), memory_order_acquire) >= t)) p++;
        if (p == P) return FL_OK;
        if (c->spin && (++it & 63)) {
            fl__cpu_relax();
            continue;
        }
        uint64_t now = fl__now_ns();
        if (!t0) {
            t0 = now;
            next = now + CHECK_NS;
        }
        if (now >= next) {
            FL_CHECK(check_alive(c, d, which, t));
            next = now + CHECK_NS;
            t0 = fl__live_since(&c->live, t0); /* this process was stopped: restart the clock */
        }
        uint64_t waited = fl__ns_since(now, t0); /* t0 may be the heartbeat thread's clock: after now */
        if (waited >= tmo) return wait_timeout(c, d, which, t);
        shm_ctl *pc = &s->ctl[p];
        if (waited < SPIN_NS && atomic_load_explicit(&pc->cpu, memory_order_relaxed) == sched_getcpu()) {
            sched_yield(); /* the peer last ran on this very core: let it have it */
            continue;
        }
        if (c->spin && waited < SPIN_NS) {
            fl__cpu_relax();
            continue;
        }
        /* sleep until rank p publishes (no lost wake-up: the count of sleepers is raised
         * before the flag is re-read, and the publisher bumps fseq before reading the count) */
        atomic_fetch_add(&pc->waiters, 1);
        uint32_t v = atomic_load(&pc->fseq);
        if (atomic_load_explicit(flag(s, p, which), memory_order_acquire) < t)
            futex_wait(&pc->fseq, v, tmo - waited < NAP_NS ? tmo - waited : NAP_NS);
        atomic_fetch_sub(&pc->waiters, 1);
    }
}

/* Publishes flag a = t (with the op descriptor on an op's first step), waits for every
 * peer's a >= t, and on the first step compares descriptors. */
static int pub_wait(fl_coll *c, const fl__coll_desc *d, uint64_t t, int first)
{
    shm_seg *s = c->be;
    if (first) s->ctl[s->me].desc[d->seq & 1] = *d;
    publish(s, 0, t);
    FL_CHECK(shm_wait(c, d, 0, t));
    if (!first) return FL_OK;
    for (int p = 0; p < c->size; p++) {
        if (p == s->me) continue;
        fl__coll_desc pd = s->ctl[p].desc[d->seq & 1];
        if (!fl__coll_desc_equal(&pd, d)) return fl__coll_mismatch_error(c, d, &pd, p);
    }
    return FL_OK;
}

/* ---- algorithms -------------------------------------------------------------------------------- */

static inline uint8_t *stage(shm_seg *s, int r, uint64_t t) { return s->stage + ((size_t)r * 2 + (t & 1)) * s->slot; }
static inline uint8_t *result(shm_seg *s, uint64_t t) { return s->res + (t & 1) * s->slot; }
static inline size_t clamp_len(size_t total, size_t off, size_t q)
{
    return off >= total ? 0 : (total - off < q ? total - off : q);
}

/* fl_coll_bytes_sent: the bytes this rank writes into the segment. */
static inline void sent(fl_coll *c, size_t bytes)
{
    atomic_fetch_add_explicit(&c->bytes_sent, bytes, memory_order_relaxed);
}

static int shm_barrier(fl_coll *c, const fl__coll_desc *d) { return pub_wait(c, d, ++((shm_seg *)c->be)->step, 1); }

static int shm_allreduce(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t n, fl_dtype dt,
                         fl_coll_op op)
{
    shm_seg *s = c->be;
    int P = c->size, r = s->me;
    size_t es = fl_dtype_size(dt), nb = n * es;
    const uint8_t *in = send;
    uint8_t *out = recv;
    const void *srcs[P];
    if ((nb <= c->small_max && nb <= s->slot) || P == 2) {
        /* direct, chunk by chunk: every rank publishes its chunk and reduces all of them in
         * rank order (one flag wait per chunk).  With 2 ranks this moves as many bytes
         * between the cores as reduce-scatter + allgather, with half the waits. */
        size_t k = s->slot / es;
        int first = 1;
        for (size_t base = 0; base < n || first; base += k) {
            size_t l = clamp_len(n, base, k);
            uint64_t t = ++s->step;
            if (l) memcpy(stage(s, r, t), in + base * es, l * es);
            sent(c, l * es);
            FL_CHECK(pub_wait(c, d, t, first));
            first = 0;
            for (int p = 0; p < P; p++) srcs[p] = stage(s, p, t);
            if (nb >= FL_COLL_NT_MIN) fl__coll_reduce_nt(out + base * es, dt, srcs, P, dt, l, op, P);
            else fl__coll_reduce(out + base * es, dt, srcs, P, dt, l, op, P);
        }
        return FL_OK;
    }
    /* pipelined reduce-scatter + allgather: per chunk, P cache-line aligned parts of q elements */
    size_t al = 64 / es, qmax = s->slot / es / (size_t)P / al * al, cmax = qmax * (size_t)P;
    int first = 1;
    for (size_t base = 0; base < n; base += cmax) {
        size_t ce = n - base < cmax ? n - base : cmax;
        size_t q = ((ce + (size_t)P - 1) / (size_t)P + al - 1) / al * al;
        uint64_t t = ++s->step;
        uint8_t *mine = stage(s, r, t), *res = result(s, t);
        for (int p = 0; p < P; p++) {
            size_t o = (size_t)p * q, l = clamp_len(ce, o, q);
            if (p != r && l) memcpy(mine + o * es, in + (base + o) * es, l * es);
            if (p != r) sent(c, l * es);
        }
        FL_CHECK(pub_wait(c, d, t, first));
        first = 0;
        size_t o = (size_t)r * q, l = clamp_len(ce, o, q);
        if (l) {
            for (int p = 0; p < P; p++) srcs[p] = p == r ? in + (base + o) * es : stage(s, p, t) + o * es;
            fl__coll_reduce(res + o * es, dt, srcs, P, dt, l, op, P);
            sent(c, l * es);
            memcpy(out + (base + o) * es, res + o * es, l * es);
        }
        publish(s, 1, t);
        FL_CHECK(shm_wait(c, d, 1, t));
        for (int p = 0; p < P; p++) {
            size_t po = (size_t)p * q, pl = clamp_len(ce, po, q);
            if (p != r && pl) memcpy(out + (base + po) * es, res + po * es, pl * es);
        }
    }
    return FL_OK;
}

static int shm_broadcast(fl_coll *c, const fl__coll_desc *d, void *buf, size_t n, fl_dtype dt, int root)
{
    shm_seg *s = c->be;
    size_t es = fl_dtype_size(dt), k = s->slot / es;
    uint8_t *b = buf;
    int first = 1;
    for (size_t base = 0; base < n || first; base += k) {
        size_t l = clamp_len(n, base, k);
        uint64_t t = ++s->step;
        if (s->me == root && l) memcpy(stage(s, root, t), b + base * es, l * es);
        if (s->me == root) sent(c, l * es);
        FL_CHECK(pub_wait(c, d, t, first));
        first = 0;
        if (s->me != root && l) memcpy(b + base * es, stage(s, root, t), l * es);
    }
    return FL_OK;
}

static int shm_allgather(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt)
{
    shm_seg *s = c->be;
    int P = c->size, r = s->me;
    size_t es = fl_dtype_size(dt), k = s->slot / es;
    uint8_t *out = recv;
    const uint8_t *in = send;
    if (cpr && in != out + (size_t)r * cpr * es) memmove(out + (size_t)r * cpr * es, in, cpr * es);
    in = out + (size_t)r * cpr * es;
    int first = 1;
    for (size_t base = 0; base < cpr || first; base += k) {
        size_t l = clamp_len(cpr, base, k);
        uint64_t t = ++s->step;
        if (l) memcpy(stage(s, r, t), in + base * es, l * es);
        sent(c, l * es);
        FL_CHECK(pub_wait(c, d, t, first));
        first = 0;
        for (int p = 0; p < P && l; p++)
            if (p != r) memcpy(out + ((size_t)p * cpr + base) * es, stage(s, p, t), l * es);
    }
    return FL_OK;
}

static int shm_reduce_scatter(fl_coll *c, const fl__coll_desc *d, const void *send, void *recv, size_t cpr, fl_dtype dt,
                              fl_coll_op op)
{
    shm_seg *s = c->be;
    int P = c->size, r = s->me;
    size_t es = fl_dtype_size(dt), q = s->slot / es / (size_t)P;
    const uint8_t *in = send;
    uint8_t *out = recv;
    const void *srcs[P];
    int first = 1;
    for (size_t base = 0; base < cpr || first; base += q) {
        size_t l = clamp_len(cpr, base, q);
        uint64_t t = ++s->step;
        uint8_t *mine = stage(s, r, t);
        for (int p = 0; p < P && l; p++)
            if (p != r) memcpy(mine + (size_t)p * q * es, in + ((size_t)p * cpr + base) * es, l * es);
        sent(c, (size_t)(P - 1) * l * es);
        FL_CHECK(pub_wait(c, d, t, first));
        first = 0;
        if (!l) continue;
        for (int p = 0; p < P; p++)
            srcs[p] = p == r ? in + ((size_t)r * cpr + base) * es : stage(s, p, t) + (size_t)r * q * es;
        fl__coll_reduce(out + base * es, dt, srcs, P, dt, l, op, P);
    }
    return FL_OK;
}

const fl__coll_backend fl__coll_backend_shm = {
    .name = "shm",
    .available = shm_available,
    .setup = shm_setup,
    .close = shm_close,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .reduce_scatter = shm_reduce_scatter,
    .barrier = shm_barrier,
    .data_on_conns = 0,
};
