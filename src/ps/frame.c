/*
 * frame.c - the PS wire protocol: frame headers, body validation (also the fuzzer's entry
 * point fl__ps_frame_decode), frame building and sending, and receiving whole frames with
 * every length checked before anything is allocated.  Layouts are listed in ps_internal.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

static const char *const type_names[FL__PS_TYPE_END] = {
    "?",    "hello", "pull_dense", "push_dense", "init_dense", "pull_sparse", "push_sparse", "barrier",
    "save", "load",  "shrink",     "stats",      "stop",       "heartbeat",   "scan_sparse"};

const char *fl__ps_type_name(unsigned type) { return type > 0 && type < FL__PS_TYPE_END ? type_names[type] : "unknown"; }

static inline uint16_t ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- headers ----------------------------------------------------------------------------- */

void fl__ps_hdr_encode(uint8_t *out, uint16_t type, uint32_t flags, uint64_t req_id, uint64_t len)
{
    st32(out, FL__PS_MAGIC);
    st16(out + 4, FL__PS_VERSION);
    st16(out + 6, type);
    st32(out + 8, flags);
    st32(out + 12, 0);
    st64(out + 16, req_id);
    st64(out + 24, len);
}

int fl__ps_hdr_decode(const uint8_t *in, uint64_t max_body, fl__ps_hdr *out)
{
    uint32_t magic = ld32(in);
    if (magic != FL__PS_MAGIC) return fl__err(FL_EPROTO, "bad frame magic 0x%08x (not a PS frame)", magic);
    uint16_t ver = ld16(in + 4);
    if (ver != FL__PS_VERSION)
        return fl__err(FL_EPROTO, "unsupported PS protocol version %u (this build speaks %u)", ver, FL__PS_VERSION);
    out->type = ld16(in + 6);
    out->flags = ld32(in + 8);
    out->req_id = ld64(in + 16);
    out->len = ld64(in + 24);
    if (out->type == 0 || out->type >= FL__PS_TYPE_END) return fl__err(FL_EPROTO, "unknown frame type %u", out->type);
    if (out->flags & ~(FL__PS_F_REPLY | FL__PS_F_ERROR))
        return fl__err(FL_EPROTO, "unknown header flags 0x%x in a %s frame", out->flags, fl__ps_type_name(out->type));
    if ((out->flags & FL__PS_F_ERROR) && !(out->flags & FL__PS_F_REPLY))
        return fl__err(FL_EPROTO, "error flag on a %s request", fl__ps_type_name(out->type));
    if (ld32(in + 12) != 0) return fl__err(FL_EPROTO, "reserved header field is not zero");
    if (out->len > max_body)
        return fl__err(FL_EPROTO, "%s frame announces a body of %llu bytes, above the limit of %llu",
                       fl__ps_type_name(out->type), (unsigned long long)out->len, (unsigned long long)max_body);
    return FL_OK;
}

/* ---- bodies ------------------------------------------------------------------------------ */

#define BAD(...) fl__err(FL_EPROTO, __VA_ARGS__)

/* expected = a + b * c with overflow checks; 0 on overflow. */
static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
    uint64_t p;
    if (__builtin_mul_overflow(b, c, &p) || __builtin_add_overflow(a, p, out)) return 0;
    return 1;
}

static int need(const fl__ps_hdr *h, uint64_t fixed)
{
    if (h->len < fixed)
        return BAD("%s%s body of %llu bytes is shorter than its fixed part (%llu)", fl__ps_type_name(h->type),
                   h->flags & FL__PS_F_REPLY ? " reply" : "", (unsigned long long)h->len, (unsigned long long)fixed);
    return FL_OK;
}

static int exact(const fl__ps_hdr *h, uint64_t want)
{
    if (h->len != want)
        return BAD("%s%s body has %llu bytes but its counts imply %llu", fl__ps_type_name(h->type),
                   h->flags & FL__PS_F_REPLY ? " reply" : "", (unsigned long long)h->len, (unsigned long long)want);
    return FL_OK;
}

static int flags_ok(const fl__ps_msg *m, uint32_t allowed)
{
    if (m->bflags & ~allowed) return BAD("unknown body flags 0x%x in a %s request", m->bflags, fl__ps_type_name(m->h.type));
    return FL_OK;
}

static int decode_string(const fl__ps_hdr *h, const uint8_t *b, uint64_t at, fl__ps_msg *m, uint32_t max)
{
    m->str_len = ld32(b + at);
    if (m->str_len > max) return BAD("%s: string of %u bytes exceeds %u", fl__ps_type_name(h->type), m->str_len, max);
    FL_CHECK(exact(h, at + 8 + m->str_len));
    m->str = (const char *)(b + at + 8);
    if (memchr(m->str, 0, m->str_len)) return BAD("%s: string contains a NUL byte", fl__ps_type_name(h->type));
    return FL_OK;
}

static int decode_request(const fl__ps_hdr *h, const uint8_t *b, fl__ps_msg *m)
{
    uint64_t want;
    switch (h->type) {
    case FL__PS_HELLO:
        FL_CHECK(need(h, 32));
        m->session = ld64(b);
        m->worker_rank = ld32(b + 8);
        m->num_workers = ld32(b + 12);
        m->num_servers = ld32(b + 16);
        m->server_index = ld32(b + 20);
        m->ntables = ld32(b + 24);
        if (ld32(b + 28)) return BAD("hello: reserved field is not zero");
        if (m->ntables > FL_PS_MAX_TABLES)
            return BAD("hello: %u tables exceeds the limit of %d", m->ntables, FL_PS_MAX_TABLES);
        FL_CHECK(exact(h, 32 + (uint64_t)FL__PS_HELLO_TABLE * m->ntables));
        m->tables_wire = b + 32;
        for (uint32_t i = 0; i < m->ntables; i++)
            if (ld32(b + 32 + FL__PS_HELLO_TABLE * i + 20)) return BAD("hello: reserved field of table %u is not zero", i);
        return FL_OK;
    case FL__PS_PULL_DENSE:
        FL_CHECK(exact(h, 24));
        m->table = ld32(b);
        m->bflags = ld32(b + 4);
        FL_CHECK(flags_ok(m, FL__PS_B_BF16));
        m->offset = ld64(b + 8);
        m->n = ld64(b + 16);
        if (m->n > FL_PS_MAX_BODY / 4) return BAD("pull_dense: count %llu exceeds one frame", (unsigned long long)m->n);
        return FL_OK;
    case FL__PS_PUSH_DENSE:
        FL_CHECK(need(h, 40));
        m->table = ld32(b);
        m->bflags = ld32(b + 4);
        FL_CHECK(flags_ok(m, FL__PS_B_LAST | FL__PS_B_BF16));
        m->session = ld64(b + 8);
        m->seq = ld64(b + 16);
        m->offset = ld64(b + 24);
        m->n = ld64(b + 32);
        {
            uint64_t esz = m->bflags & FL__PS_B_BF16 ? 2 : 4;
            if (m->n > (h->len - 40) / esz) return BAD("push_dense: count %llu exceeds the body", (unsigned long long)m->n);
            FL_CHECK(exact(h, 40 + esz * m->n));
            if (esz == 2) m->vals16 = (const uint16_t *)(b + 40);
            else m->vals = (const float *)(b + 40);
        }
        return FL_OK;
    case FL__PS_INIT_DENSE:
        FL_CHECK(need(h, 24));
        m->table = ld32(b);
        m->bflags = ld32(b + 4);
        FL_CHECK(flags_ok(m, FL__PS_B_LAST | FL__PS_B_FORCE));
        m->offset = ld64(b + 8);
        m->n = ld64(b + 16);
        if (m->n > (h->len - 24) / 4) return BAD("init_dense: count %llu exceeds the body", (unsigned long long)m->n);
        FL_CHECK(exact(h, 24 + 4 * m->n));
        m->vals = (const float *)(b + 24);
        return FL_OK;
    case FL__PS_PULL_SPARSE:
        FL_CHECK(need(h, 16));
        m->table = ld32(b);
        m->bflags = ld32(b + 4);
        FL_CHECK(flags_ok(m, FL__PS_B_TRAINING));
        m->n = ld64(b + 8);
        if (m->n > (h->len - 16) / 8) return BAD("pull_sparse: %llu ids exceed the body", (unsigned long long)m->n);
        FL_CHECK(exact(h, 16 + 8 * m->n));
        m->ids = (const uint64_t *)(b + 16);
        return FL_OK;
    case FL__PS_PUSH_SPARSE: {
        FL_CHECK(need(h, 40));
        m->table = ld32(b);
        m->bflags = ld32(b + 4);
        FL_CHECK(flags_ok(m, FL__PS_B_LAST | FL__PS_B_SHOWCLICK));
        m->session = ld64(b + 8);
        m->seq = ld64(b + 16);
        m->n = ld64(b + 24);
        m->dim = ld32(b + 32);
        if (ld32(b + 36)) return BAD("push_sparse: reserved field is not zero");
        if (m->dim < 1 || m->dim > FL_PS_MAX_DIM) return BAD("push_sparse: dim %u outside [1, %d]", m->dim, FL_PS_MAX_DIM);
        if (m->n > (h->len - 40) / 8) return BAD("push_sparse: %llu ids exceed the body", (unsigned long long)m->n);
        uint64_t per = 8 + 4ull * m->dim + ((m->bflags & FL__PS_B_SHOWCLICK) ? 8 : 0);
        if (!mul_add(40, m->n, per, &want))
            return BAD("push_sparse: %llu ids x dim %u overflows", (unsigned long long)m->n, m->dim);
        FL_CHECK(exact(h, want));
        m->ids = (const uint64_t *)(b + 40);
        m->vals = (const float *)(b + 40 + 8 * m->n);
        if (m->bflags & FL__PS_B_SHOWCLICK) {
            m->shows = m->vals + m->n * m->dim;
            m->clicks = m->shows + m->n;
        }
        return FL_OK;
    }
    case FL__PS_BARRIER:
        FL_CHECK(exact(h, 8));
        m->seq = ld64(b);
        return FL_OK;
    case FL__PS_SAVE:
        FL_CHECK(need(h, 32));
        m->phase = ld32(b);
        m->mode = ld32(b + 4);
        m->gen = ld64(b + 8);
        m->step = (int64_t)ld64(b + 16);
        if (m->phase < 1 || m->phase > 3) return BAD("save: unknown phase %u", m->phase);
        if (m->mode > 3) return BAD("save: unknown mode %u", m->mode);
        if (ld32(b + 28)) return BAD("save: reserved field is not zero");
        return decode_string(h, b, 24, m, FL__PS_DIR_MAX);
    case FL__PS_LOAD:
        FL_CHECK(need(h, 8));
        if (ld32(b + 4)) return BAD("load: reserved field is not zero");
        return decode_string(h, b, 0, m, FL__PS_DIR_MAX);
    case FL__PS_SHRINK:
    case FL__PS_STATS:
        FL_CHECK(exact(h, 8));
        m->table = ld32(b);
        if (ld32(b + 4)) return BAD("%s: reserved field is not zero", fl__ps_type_name(h->type));
        return FL_OK;
    case FL__PS_STOP:
    case FL__PS_HEARTBEAT: return exact(h, 0);
    case FL__PS_SCAN_SPARSE:
        FL_CHECK(exact(h, 24));
        m->table = ld32(b);
        if (ld32(b + 4)) return BAD("scan_sparse: reserved field is not zero");
        m->offset = ld64(b + 8);
        m->n = ld64(b + 16);
        if (m->n > FL_PS_MAX_BODY / 12) return BAD("scan_sparse: %llu rows exceed one frame", (unsigned long long)m->n);
        return FL_OK;
    }
    return BAD("unknown frame type %u", h->type);
}

static int decode_reply(const fl__ps_hdr *h, const uint8_t *b, fl__ps_msg *m)
{
    uint64_t want;
    if (h->flags & FL__PS_F_ERROR) {
        FL_CHECK(need(h, 8));
        m->status = (int32_t)ld32(b);
        if (m->status >= 0 || m->status < -100) return BAD("error reply with status %d", m->status);
        m->str_len = ld32(b + 4);
        if (m->str_len > FL__PS_MSG_MAX)
            return BAD("error reply: message of %u bytes exceeds %d", m->str_len, FL__PS_MSG_MAX);
        FL_CHECK(exact(h, 8ull + m->str_len));
        m->str = (const char *)(b + 8);
        return FL_OK;
    }
    switch (h->type) {
    case FL__PS_PULL_DENSE:
        FL_CHECK(need(h, 8));
        m->n = ld64(b);
        if (m->n > (h->len - 8) / 4) return BAD("pull_dense reply: count exceeds the body");
        FL_CHECK(exact(h, 8 + 4 * m->n));
        m->vals = (const float *)(b + 8);
        return FL_OK;
    case FL__PS_PULL_SPARSE:
        FL_CHECK(need(h, 16));
        m->n = ld64(b);
        m->dim = ld32(b + 8);
        if (m->dim < 1 || m->dim > FL_PS_MAX_DIM)
            return BAD("pull_sparse reply: dim %u outside [1, %d]", m->dim, FL_PS_MAX_DIM);
        if (m->n > (h->len - 16) / 4) return BAD("pull_sparse reply: count exceeds the body");
        if (!mul_add(16, m->n, 4ull * m->dim, &want)) return BAD("pull_sparse reply: n x dim overflows");
        FL_CHECK(exact(h, want));
        m->vals = (const float *)(b + 16);
        return FL_OK;
    case FL__PS_SCAN_SPARSE:
        FL_CHECK(need(h, 16));
        m->n = ld64(b);
        m->dim = ld32(b + 8);
        if (ld32(b + 12)) return BAD("scan_sparse reply: reserved field is not zero");
        if (m->dim < 1 || m->dim > FL_PS_MAX_DIM)
            return BAD("scan_sparse reply: dim %u outside [1, %d]", m->dim, FL_PS_MAX_DIM);
        if (m->n > (h->len - 16) / 12) return BAD("scan_sparse reply: count exceeds the body");
        if (!mul_add(16, m->n, 8 + 4ull * m->dim, &want)) return BAD("scan_sparse reply: n x dim overflows");
        FL_CHECK(exact(h, want));
        m->ids = (const uint64_t *)(b + 16);
        m->vals = (const float *)(b + 16 + 8 * m->n);
        return FL_OK;
    case FL__PS_INIT_DENSE:
        FL_CHECK(exact(h, 8));
        m->applied = ld32(b);
        return FL_OK;
    case FL__PS_HELLO:
        FL_CHECK(exact(h, 8));
        m->mode = ld32(b);
        if (m->mode > 1 || ld32(b + 4)) return BAD("hello reply: bad mode %u", m->mode);
        return FL_OK;
    case FL__PS_LOAD:
    case FL__PS_SHRINK:
        FL_CHECK(exact(h, 8));
        m->i64[0] = (int64_t)ld64(b);
        return FL_OK;
    case FL__PS_STATS:
        FL_CHECK(exact(h, 32));
        for (int k = 0; k < 3; k++) m->i64[k] = (int64_t)ld64(b + 8 * k);
        memcpy(&m->f64, b + 24, 8);
        return FL_OK;
    default: return exact(h, 0);
    }
}

int fl__ps_body_decode(const fl__ps_hdr *h, const uint8_t *body, fl__ps_msg *m)
{
    memset(m, 0, sizeof *m);
    m->h = *h;
    if (h->len && ((uintptr_t)body & 7)) return fl__err(FL_EINVAL, "fl__ps_body_decode: body is not 8-byte aligned");
    return (h->flags & FL__PS_F_REPLY) ? decode_reply(h, body, m) : decode_request(h, body, m);
}

int fl__ps_frame_decode(const uint8_t *buf, size_t len, fl__ps_msg *m)
{
    memset(m, 0, sizeof *m);
    if (!buf || len < FL__PS_HDR) return BAD("frame of %zu bytes is shorter than a header", len);
    if ((uintptr_t)buf & 7) return fl__err(FL_EINVAL, "fl__ps_frame_decode: buffer is not 8-byte aligned");
    fl__ps_hdr h;
    FL_CHECK(fl__ps_hdr_decode(buf, FL_PS_MAX_BODY, &h));
    if (h.len != len - FL__PS_HDR)
        return fl__err(FL_ECORRUPT, "truncated frame: header announces %llu body bytes, %zu present",
                       (unsigned long long)h.len, len - FL__PS_HDR);
    return fl__ps_body_decode(&h, buf + FL__PS_HDR, m);
}

/* ---- building and sending ----------------------------------------------------------------- */

int fl__ps_wbuf_reserve(fl__ps_wbuf *b, size_t extra)
{
    if (b->len + extra <= b->cap) return FL_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return fl__err(FL_ENOMEM, "out of memory for a %zu-byte frame", cap);
    b->p = p;
    b->cap = cap;
    return FL_OK;
}

void fl__ps_wbuf_begin(fl__ps_wbuf *b) { b->len = FL__PS_HDR; }

int fl__ps_put(fl__ps_wbuf *b, const void *p, size_t n)
{
    FL_CHECK(fl__ps_wbuf_reserve(b, n));
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return FL_OK;
}
int fl__ps_put_u32(fl__ps_wbuf *b, uint32_t v) { return fl__ps_put(b, &v, 4); }
int fl__ps_put_u64(fl__ps_wbuf *b, uint64_t v) { return fl__ps_put(b, &v, 8); }

void fl__ps_wbuf_finish(fl__ps_wbuf *b, uint16_t type, uint32_t flags, uint64_t req_id, uint64_t extra_len)
{
    fl__ps_hdr_encode(b->p, type, flags, req_id, b->len - FL__PS_HDR + extra_len);
}

void fl__ps_wbuf_free(fl__ps_wbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Payloads up to this size are copied behind the fixed part so a frame leaves in one send. */
#define COALESCE_MAX (64u << 10)

int fl__ps_send(fl_net_conn *c, const fl__ps_wbuf *b, const void *const *parts, const size_t *lens, int nparts,
                uint64_t deadline)
{
    size_t extra = 0;
    for (int i = 0; i < nparts; i++) extra += lens[i];
    if (extra > 0 && extra <= COALESCE_MAX) {
        uint8_t stackbuf[512];
        size_t tot = b->len + extra;
        uint8_t *tmp = tot <= sizeof stackbuf ? stackbuf : malloc(tot);
        if (!tmp) return fl__err(FL_ENOMEM, "out of memory for a frame to %s", fl_net_conn_label(c));
        memcpy(tmp, b->p, b->len);
        size_t at = b->len;
        for (int i = 0; i < nparts; i++) {
            if (lens[i]) memcpy(tmp + at, parts[i], lens[i]);
            at += lens[i];
        }
        int st = fl_net_send_all(c, tmp, tot, deadline);
        if (tmp != stackbuf) free(tmp);
        return st;
    }
    FL_CHECK(fl_net_send_all(c, b->p, b->len, deadline));
    for (int i = 0; i < nparts; i++)
        if (lens[i]) FL_CHECK(fl_net_send_all(c, parts[i], lens[i], deadline));
    return FL_OK;
}

int fl__ps_send_error(fl_net_conn *c, uint16_t type, uint64_t req_id, int status, const char *msg, uint64_t deadline)
{
    uint8_t buf[FL__PS_HDR + 8 + FL__PS_MSG_MAX];
    size_t n = strlen(msg);
    if (n > FL__PS_MSG_MAX) n = FL__PS_MSG_MAX;
    if (status >= 0 || status < -100) status = FL_EREMOTE;
    fl__ps_hdr_encode(buf, type, FL__PS_F_REPLY | FL__PS_F_ERROR, req_id, 8 + n);
    st32(buf + FL__PS_HDR, (uint32_t)status);
    st32(buf + FL__PS_HDR + 4, (uint32_t)n);
    memcpy(buf + FL__PS_HDR + 8, msg, n);
    return fl_net_send_all(c, buf, FL__PS_HDR + 8 + n, deadline);
}

/* ---- receiving ------------------------------------------------------------------------------ */

void fl__ps_rbuf_free(fl__ps_rbuf *r)
{
    free(r->p);
    r->p = NULL;
    r->cap = 0;
}

int fl__ps_recv(fl_net_conn *c, fl__ps_rbuf *r, uint64_t max_body, fl__ps_msg *m, uint64_t deadline)
{
    uint8_t hb[FL__PS_HDR];
    fl__ps_hdr h;
    FL_CHECK(fl_net_recv_all(c, hb, sizeof hb, deadline));
    int st = fl__ps_hdr_decode(hb, max_body, &h);
    if (st) return fl__err(st, "bad frame from %s: %s", fl_net_conn_label(c), fl_last_error());
    if (h.len > r->cap) {
        /* The header is checked against max_body above: this allocation is bounded. */
        size_t cap = (size_t)h.len < 4096 ? 4096 : (size_t)h.len;
        void *p = NULL;
        if (posix_memalign(&p, 64, cap))
            return fl__err(FL_ENOMEM, "out of memory for a %llu-byte frame from %s", (unsigned long long)h.len,
                           fl_net_conn_label(c));
        free(r->p);
        r->p = p;
        r->cap = cap;
    }
    st = fl_net_recv_all(c, r->p, (size_t)h.len, deadline);
    if (st == FL_EREMOTE) /* closed between header and body: a truncated frame */
        return fl__err(FL_ECORRUPT, "truncated %s frame from %s: the connection closed before its %llu-byte body",
                       fl__ps_type_name(h.type), fl_net_conn_label(c), (unsigned long long)h.len);
    FL_CHECK(st);
    st = fl__ps_body_decode(&h, r->p, m);
    if (st) return fl__err(st, "bad %s frame from %s: %s", fl__ps_type_name(h.type), fl_net_conn_label(c), fl_last_error());
    return FL_OK;
}
