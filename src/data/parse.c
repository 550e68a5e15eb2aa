/*
 * parse.c - the line parsers (MultiSlot, Criteo, libsvm) and the number scanners.
 *
 * One call parses one line into one binary record appended to an arena (layout in
 * data_internal.h).  Nothing is allocated per line: the arena is reused, and the only other
 * allocation is the rare strtof fallback for a number token longer than 63 bytes.
 *
 * Integers are scanned by hand.  Floats take a fast path for plain decimals ([+-]digits
 * [.digits][e[+-]digits] with at most 19 digits in all and |exponent| <= 22); digits are read
 * 8 at a time (SWAR) where 8 bytes of the line remain.  The
 * mantissa w (<= 2^53) and 10^|e| are then exact doubles.  For float64 (Criteo's dense columns)
 * one multiply or divide gives the correctly rounded double.  For float32 a negative exponent
 * is applied as a multiply by the rounded 10^-k (a divide costs ~15 cycles), which leaves the
 * double within 2 ulps of the value; rounding that double to float gives strtof's result
 * unless a float32 rounding midpoint lies within 3 double ulps, which is checked on the bits.
 * Those rare cases, and every unusual form (hex, inf, nan, long mantissas, subnormals, huge
 * exponents), go to strtof/strtod.  tests/test_data.c compares against strtof bit for bit.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "data_internal.h"

const double fl__criteo_min[13] = {0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
const double fl__criteo_diff[13] = {20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50};

static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int is_sep(char c) { return c == ' ' || c == '\t'; }
static inline const char *skip_sep(const char *p, const char *e)
{
    while (p < e && is_sep(*p)) p++;
    return p;
}
static inline const char *token_end(const char *p, const char *e)
{
    while (p < e && !is_sep(*p)) p++;
    return p;
}

/* ---- arenas (the parsers' output buffers) ---- */

int fl__arena_grow(fl__arena *a, size_t need)
{
    size_t nc = a->cap ? a->cap : 4096;
    while (nc - a->len < need) {
        if (nc > SIZE_MAX / 2) return fl__err(FL_ENOMEM, "data: record buffer of %zu bytes is too large", a->len + need);
        nc *= 2;
    }
    char *np = realloc(a->p, nc);
    if (!np) return fl__err(FL_ENOMEM, "data: cannot grow a record buffer to %zu bytes", nc);
    a->p = np;
    a->cap = nc;
    return FL_OK;
}

void fl__arena_free(fl__arena *a)
{
    free(a->p);
    a->p = NULL;
    a->len = a->cap = 0;
}

/* ---- number scanners ------------------------------------------------------------------- */

static const uint64_t pow10_u64[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* Reads up to 8 leading decimal digits at p: returns how many (0..8) and their value.  With 8
 * bytes available this is branch-free SWAR (one load, a digit mask, three multiplies);
 * nearer the end of the line, a plain loop (never reads at or past e). */
static inline int digits8(const char *p, const char *e, uint64_t *val)
{
    if (e - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t t = v ^ 0x3030303030303030ULL;                                 /* a digit becomes 0..9 */
        uint64_t m = ((t + 0x7676767676767676ULL) | t) & 0x8080808080808080ULL; /* bytes > 9 */
        int n = m ? __builtin_ctzll(m) >> 3 : 8;
        if (n == 0) {
            *val = 0;
            return 0;
        }
        t <<= 64 - 8 * n; /* keep the n digits, as the high bytes (leading zeros below) */
        t = t * 10 + (t >> 8);
        t = (((t & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
             (((t >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
            32;
        *val = t;
        return n;
    }
    uint64_t v = 0;
    int n = 0;
    for (; n < 8 && p + n < e; n++) {
        unsigned d = (unsigned)(unsigned char)p[n] - '0';
        if (d > 9) break;
        v = v * 10 + d;
    }
    *val = v;
    return n;
}

/* Consumes a run of digits into *w (counting them in *nd); returns -1 when the next chunk
 * would make more than 19 digits in all, with *pp and *w at the last chunk that fitted. */
static inline int run_digits(const char **pp, const char *e, uint64_t *w, int *nd)
{
    for (;;) {
        uint64_t c;
        int n = digits8(*pp, e, &c);
        if (*nd + n > 19) return -1;
        *w = *w * pow10_u64[n] + c;
        *nd += n;
        *pp += n;
        if (n < 8) return 0;
    }
}

/* Scans decimal digits from p; *ovf is set when the value does not fit in 64 bits. */
static inline const char *scan_digits(const char *p, const char *e, uint64_t *out, int *ovf)
{
    uint64_t v = 0;
    int nd = 0;
    if (run_digits(&p, e, &v, &nd) == 0) {
        *out = v;
        return p;
    }
    while (p < e) { /* 20 digits or more: overflow checks */
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d > 9) break;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d, &v)) *ovf = 1;
        p++;
    }
    *out = v;
    return p;
}

int fl__scan_u64(const char *s, const char *e, uint64_t *out)
{
    int ovf = 0;
    const char *p = scan_digits(s, e, out, &ovf);
    if (p == s || p != e) return 1;
    return ovf ? 2 : 0;
}

int fl__scan_i64(const char *s, const char *e, int64_t *out)
{
    int neg = 0;
    if (s < e && (*s == '-' || *s == '+')) neg = *s++ == '-';
    uint64_t v = 0;
    int r = fl__scan_u64(s, e, &v);
    if (r) return r;
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return 2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* strtof/strtod on a copy of the token; rejects partial parses, inf and nan. */
static int scan_slow(const char *s, const char *e, int want_double, double *out)
{
    char small[64], *buf = small;
    size_t n = (size_t)(e - s);
    if (n == 0 || (unsigned char)*s <= ' ') return 1; /* strto* would skip leading space */
    if (n >= sizeof small && !(buf = malloc(n + 1))) return 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end = NULL;
    errno = 0;
    double v = want_double ? strtod(buf, &end) : (double)strtof(buf, &end);
    int err = errno;
    int r = end != buf + n ? 1 : 0;
    if (buf != small) free(buf);
    if (r) return 1;
    if (isnan(v) || isinf(v)) return 2;
    (void)err; /* ERANGE with a finite result is underflow: kept, as strtof gives it */
    *out = v;
    return 0;
}

static const double npow10_tab[23] = {1e0,   1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,  1e-8,  1e-9,  1e-10, 1e-11,
                                      1e-12, 1e-13, 1e-14, 1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};

/* Fast path for plain decimals; returns 0 ok, -1 "use the slow path".  exact: the result is
 * the correctly rounded double (one multiply or divide of exact operands); otherwise a
 * negative power of ten is applied as a multiply by its rounded inverse (no divide), which is
 * within 2 ulps of the true value. */
static inline int scan_fast(const char *s, const char *e, double *out, int exact, const char **stop)
{
    const char *p = s;
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+')) neg = *p++ == '-';
    uint64_t w = 0;
    int nd = 0, ex = 0;
    const char *ds = p;
    if (run_digits(&p, e, &w, &nd)) return -1;
    int any = p != ds;
    if (p < e && *p == '.') {
        const char *fs = ++p;
        if (run_digits(&p, e, &w, &nd)) return -1;
        ex = -(int)(p - fs);
        any |= p != fs;
    }
    unsigned d;
    if (!any) return -1;
    if (p < e && (*p | 0x20) == 'e') {
        p++;
        int eneg = 0, edig = 0, ev = 0;
        if (p < e && (*p == '-' || *p == '+')) eneg = *p++ == '-';
        while (p < e && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
            if (ev < 100000) ev = ev * 10 + (int)d;
            p++;
            edig = 1;
        }
        if (!edig) return -1;
        ex += eneg ? -ev : ev;
    }
    *stop = p;
    if (w == 0) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
    if (w > (1ull << 53) || ex < -22 || ex > 22) return -1;
    double v = (double)w;
    if (ex >= 0) v *= pow10_tab[ex];
    else v = exact ? v / pow10_tab[-ex] : v * npow10_tab[-ex];
    *out = neg ? -v : v;
    return 0;
}

int fl__scan_f64(const char *s, const char *e, double *out)
{
    const char *stop;
    if (scan_fast(s, e, out, 1, &stop) == 0 && stop == e) return 0;
    return scan_slow(s, e, 1, out);
}

/* d is within 2 double ulps of the value; rounding it to float gives strtof's result unless
 * a float rounding midpoint (low 29 bits 0x10000000) lies within 3 ulps. */
static inline int f32_safe(double d)
{
    double a = fabs(d);
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint32_t low = (uint32_t)(bits & ((1u << 29) - 1));
    return a == 0 || (a >= FLT_MIN && a <= FLT_MAX && low - (0x10000000u - 3u) > 6u);
}

int fl__scan_f32(const char *s, const char *e, float *out)
{
    double d;
    const char *stop;
    if (scan_fast(s, e, &d, 0, &stop) == 0 && stop == e && f32_safe(d)) {
        *out = (float)d;
        return 0;
    }
    int r = scan_slow(s, e, 0, &d);
    if (r == 0) *out = (float)d;
    return r;
}

/* A float token starting at s inside a line: scans it in one pass where the fast path
 * applies, and sets *te to the token's end. */
static inline int scan_f32_token(const char *s, const char *e, float *out, const char **te)
{
    double d;
    const char *stop;
    if (FL_LIKELY(scan_fast(s, e, &d, 0, &stop) == 0) && (stop == e || is_sep(*stop)) && FL_LIKELY(f32_safe(d))) {
        *out = (float)d;
        *te = stop;
        return 0;
    }
    *te = token_end(s, e);
    int r = scan_slow(s, *te, 0, &d);
    if (r == 0) *out = (float)d;
    return r;
}

void fl__quote(char *buf, size_t cap, const char *s, const char *e)
{
    size_t o = 0;
    const size_t lim = 40;
    if (cap < 16) {
        if (cap) buf[0] = 0;
        return;
    }
    buf[o++] = '\'';
    for (const char *p = s; p < e && o + 8 < cap; p++) {
        if ((size_t)(p - s) >= lim) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            buf[o++] = (char)c;
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        }
    }
    buf[o++] = '\'';
    buf[o] = 0;
}

/* ---- errors ---------------------------------------------------------------------------- */

static int bad_slot(const fl__parser *ps, int64_t ln, int k, const char *fmt, ...) FL_PRINTF(4, 5);
static int bad_slot(const fl__parser *ps, int64_t ln, int k, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fl__err(FL_ECORRUPT, "%s:%lld: slot '%s' (#%d): %s", ps->file, (long long)ln, ps->slots[k].name, k + 1, what);
}

#define QUOTE(q, s, e) fl__quote((q), sizeof(q), (s), (e))

/* ---- MultiSlot ------------------------------------------------------------------------- */

static int bad_count(const fl__parser *ps, int64_t ln, int k, const char *t, const char *e)
{
    char q[64];
    const char *te = token_end(t, e);
    QUOTE(q, t, te);
    if (*t == '-') {
        uint64_t v;
        if (fl__scan_u64(t + 1, te, &v) != 1) return bad_slot(ps, ln, k, "the number of values is negative: %s", q);
    }
    return bad_slot(ps, ln, k, "expected the number of values, got %s", q);
}

static int bad_value(const fl__parser *ps, int64_t ln, int k, uint64_t i, uint64_t n, int why, const char *t, const char *e)
{
    char q[64];
    QUOTE(q, t, token_end(t, e));
    const fl__slot *sl = &ps->slots[k];
    if (why == 2)
        return bad_slot(ps, ln, k, "value %llu of %llu: value out of range for %s: %s", (unsigned long long)i + 1,
                        (unsigned long long)n, sl->dtype == FL_INT64 ? "uint64" : "float32", q);
    return bad_slot(ps, ln, k, "value %llu of %llu is not %s: %s", (unsigned long long)i + 1, (unsigned long long)n,
                    sl->dtype == FL_INT64 ? "an unsigned integer" : "a number", q);
}

static int parse_multislot(const fl__parser *ps, const char *s, const char *e, int64_t ln, fl__arena *out)
{
    const char *p = s;
    for (int k = 0; k < ps->nslots; k++) {
        const fl__slot *sl = &ps->slots[k];
        p = skip_sep(p, e);
        if (p == e) {
            if (k == 0) return bad_slot(ps, ln, k, "missing: the line is empty");
            return bad_slot(ps, ln, k, "missing: the line ends after %d of %d slots", k, ps->nslots);
        }
        const char *t = p;
        uint64_t n = 0;
        int ovf = 0;
        p = scan_digits(p, e, &n, &ovf);
        if (p == t || (p < e && !is_sep(*p))) return bad_count(ps, ln, k, t, e);
        if (ovf || n > INT_MAX) {
            char q[64];
            QUOTE(q, t, p);
            return bad_slot(ps, ln, k, "the number of values is out of range (at most %d): %s", INT_MAX, q);
        }
        if (n == 0) return bad_slot(ps, ln, k, "the number of ids can not be zero, you need padding it");
        if (sl->dense && n != (uint64_t)sl->width)
            return bad_slot(ps, ln, k, "dense slot of width %d has %llu values", sl->width, (unsigned long long)n);
        /* each value takes a separator and a character, so the line bounds what is reserved */
        uint64_t fit = (uint64_t)(e - p) / 2, rv = n < fit ? n : fit;
        if (fl__arena_reserve(out, 4 + (size_t)rv * (size_t)sl->esize)) return FL_ENOMEM;
        char *w = out->p + out->len;
        if (!sl->dense) {
            uint32_t n32 = (uint32_t)n;
            memcpy(w, &n32, 4);
            w += 4;
        }
        for (uint64_t i = 0; i < n; i++) {
            p = skip_sep(p, e);
            if (p == e || i >= rv)
                return bad_slot(ps, ln, k, "expected %llu values, the line ends after %llu", (unsigned long long)n,
                                (unsigned long long)i);
            t = p;
            if (sl->dtype == FL_INT64) {
                uint64_t v;
                ovf = 0;
                p = scan_digits(p, e, &v, &ovf);
                if (p == t || (p < e && !is_sep(*p))) return bad_value(ps, ln, k, i, n, 1, t, e);
                if (ovf) return bad_value(ps, ln, k, i, n, 2, t, e);
                memcpy(w, &v, 8);
                w += 8;
            } else {
                float v;
                int r = scan_f32_token(t, e, &v, &p);
                if (r) return bad_value(ps, ln, k, i, n, r, t, e);
                memcpy(w, &v, 4);
                w += 4;
            }
        }
        out->len = (size_t)(w - out->p);
    }
    p = skip_sep(p, e);
    if (p != e) {
        char q[64];
        QUOTE(q, p, e);
        return bad_slot(ps, ln, ps->nslots - 1, "unexpected text after the last slot: %s", q);
    }
    return FL_OK;
}

/* ---- Criteo ---------------------------------------------------------------------------- */

static inline uint64_t fnv_byte(uint64_t h, unsigned char c) { return (h ^ c) * 0x100000001b3ULL; }

uint64_t fl_data_criteo_id(int k, const char *field, size_t len, uint64_t dim)
{
    /* "C<k>:" without snprintf: this runs 26 times per line */
    uint64_t h = fnv_byte(0xcbf29ce484222325ULL, 'C');
    char d[12];
    int nd = 0;
    unsigned u = (unsigned)k;
    do {
        d[nd++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (nd) h = fnv_byte(h, (unsigned char)d[--nd]);
    h = fnv_byte(h, ':');
    for (size_t i = 0; i < len; i++) h = fnv_byte(h, (unsigned char)field[i]);
    return dim ? h % dim : h;
}

static int parse_criteo(const fl__parser *ps, const char *s, const char *e, int64_t ln, fl__arena *out)
{
    const char *cs[40], *ce[40];
    int nc = 0;
    for (const char *p = s;;) {
        const char *q = memchr(p, '\t', (size_t)(e - p));
        if (nc < 40) {
            cs[nc] = p;
            ce[nc] = q ? q : e;
        }
        nc++;
        if (!q) break;
        p = q + 1;
    }
    if (nc != 40)
        return fl__err(FL_ECORRUPT, "%s:%lld: expected 40 tab-separated columns (label, I1..I13, C1..C26), got %d",
                       ps->file, (long long)ln, s == e ? 0 : nc);
    char q[64];
    /* label (slot #28) */
    int64_t label = -1;
    if (ce[0] - cs[0] == 1 && (cs[0][0] == '0' || cs[0][0] == '1')) label = cs[0][0] - '0';
    if (label < 0) {
        QUOTE(q, cs[0], ce[0]);
        return bad_slot(ps, ln, 27, "column label: expected 0 or 1, got %s", q);
    }
    if (fl__arena_reserve(out, 13 * 4 + 26 * 12 + 8)) return FL_ENOMEM;
    char *w = out->p + out->len;
    for (int i = 0; i < 13; i++) {
        float v = 0.0f;
        if (ce[1 + i] != cs[1 + i]) {
            double x;
            int r = fl__scan_f64(cs[1 + i], ce[1 + i], &x);
            if (r) {
                QUOTE(q, cs[1 + i], ce[1 + i]);
                return bad_slot(ps, ln, 0, "column I%d: %s: %s", i + 1, r == 2 ? "value out of range" : "not a number", q);
            }
            v = (float)((x - fl__criteo_min[i]) / fl__criteo_diff[i]);
        }
        memcpy(w, &v, 4);
        w += 4;
    }
    for (int i = 0; i < 26; i++) {
        uint32_t one = 1;
        uint64_t id = fl_data_criteo_id(i + 1, cs[14 + i], (size_t)(ce[14 + i] - cs[14 + i]), ps->sparse_dim);
        memcpy(w, &one, 4);
        memcpy(w + 4, &id, 8);
        w += 12;
    }
    memcpy(w, &label, 8);
    out->len = (size_t)(w + 8 - out->p);
    return FL_OK;
}

/* ---- libsvm ---------------------------------------------------------------------------- */

static int parse_libsvm(const fl__parser *ps, const char *s, const char *e, int64_t ln, fl__arena *out)
{
    char q[64];
    const fl__slot *lab = &ps->slots[2];
    const char *p = skip_sep(s, e);
    if (p == e) return bad_slot(ps, ln, 2, "missing: the line is empty");
    const char *t = p, *te = token_end(p, e);
    int64_t li = 0;
    float lf = 0;
    int r = lab->dtype == FL_INT64 ? fl__scan_i64(t, te, &li) : fl__scan_f32(t, te, &lf);
    if (r) {
        QUOTE(q, t, te);
        return bad_slot(ps, ln, 2, "the label %s: %s",
                        r == 2                   ? "is out of range"
                        : lab->dtype == FL_INT64 ? "is not an integer"
                                                 : "is not a number",
                        q);
    }
    uint64_t n = 0;
    for (const char *c = skip_sep(te, e); c < e; c = skip_sep(token_end(c, e), e)) n++;
    if (n == 0)
        return bad_slot(ps, ln, 0,
                        "no idx:val pairs after the label; the number of ids can not be zero, you need padding it");
    if (n > INT_MAX) return bad_slot(ps, ln, 0, "more than %d idx:val pairs", INT_MAX);
    size_t need = 4 + (size_t)n * 8 + 4 + (size_t)n * 4 + (size_t)lab->esize;
    if (fl__arena_reserve(out, need)) return FL_ENOMEM;
    char *ids = out->p + out->len, *vals = ids + 4 + n * 8;
    uint32_t n32 = (uint32_t)n;
    memcpy(ids, &n32, 4);
    memcpy(vals, &n32, 4);
    ids += 4;
    vals += 4;
    p = te;
    for (uint64_t j = 0; j < n; j++) {
        t = skip_sep(p, e);
        te = token_end(t, e);
        p = te;
        const char *colon = memchr(t, ':', (size_t)(te - t));
        if (!colon) {
            QUOTE(q, t, te);
            return bad_slot(ps, ln, 0, "feature %llu: expected idx:val, got %s", (unsigned long long)j + 1, q);
        }
        uint64_t idx;
        r = fl__scan_u64(t, colon, &idx);
        if (r) {
            QUOTE(q, t, te);
            return bad_slot(ps, ln, 0, "feature %llu: %s: %s", (unsigned long long)j + 1,
                            r == 2 ? "index out of range for uint64" : "index is not an unsigned integer", q);
        }
        float v;
        r = fl__scan_f32(colon + 1, te, &v);
        if (r) {
            QUOTE(q, t, te);
            return bad_slot(ps, ln, 1, "feature %llu: %s: %s", (unsigned long long)j + 1,
                            r == 2 ? "value out of range for float32" : "value is not a number", q);
        }
        memcpy(ids, &idx, 8);
        memcpy(vals, &v, 4);
        ids += 8;
        vals += 4;
    }
    if (lab->dtype == FL_INT64) memcpy(vals, &li, 8);
    else memcpy(vals, &lf, 4);
    out->len += need;
    return FL_OK;
}

int fl__parse_line(const fl__parser *ps, const char *line, size_t len, int64_t lineno, fl__arena *out)
{
    const char *e = line + len;
    size_t start = out->len;
    int st;
    if (ps->fmt == FL__FMT_CRITEO) {
        while (e > line && (e[-1] == '\r' || e[-1] == ' ')) e--; /* tabs separate columns: kept */
        st = parse_criteo(ps, line, e, lineno, out);
    } else {
        while (e > line && (e[-1] == '\r' || is_sep(e[-1]))) e--;
        st = ps->fmt == FL__FMT_LIBSVM ? parse_libsvm(ps, line, e, lineno, out) : parse_multislot(ps, line, e, lineno, out);
    }
    if (st != FL_OK) out->len = start;
    return st;
}

/* ---- layouts --------------------------------------------------------------------------- */

static void describe(const fl__slot *s, char *buf, size_t cap)
{
    if (s->dense) snprintf(buf, cap, "%s, lod_level 0, width %d", s->dtype == FL_INT64 ? "int64" : "float32", s->width);
    else snprintf(buf, cap, "%s, lod_level 1", s->dtype == FL_INT64 ? "int64" : "float32");
}

int fl__check_layout(const char *fn, fl__data_format fmt, const fl__slot *slots, int nslots)
{
    char d[96];
    if (fmt == FL__FMT_CRITEO) {
        static const char want[] = "format 'criteo' needs use_var = [dense float32 of width 13, 26 int64 slots with "
                                   "lod_level 1, int64 label of width 1]";
        if (nslots != 28) return fl__err(FL_EINVAL, "%s: %s (28 variables); got %d variables", fn, want, nslots);
        for (int i = 0; i < 28; i++) {
            const fl__slot *s = &slots[i];
            int ok = i == 0   ? s->dense && s->dtype == FL_FLOAT32 && s->width == 13
                     : i < 27 ? !s->dense && s->dtype == FL_INT64
                              : s->dense && s->dtype == FL_INT64 && s->width == 1;
            if (!ok) {
                describe(s, d, sizeof d);
                return fl__err(FL_EINVAL, "%s: %s; variable #%d '%s' is %s", fn, want, i + 1, s->name, d);
            }
        }
    } else if (fmt == FL__FMT_LIBSVM) {
        static const char want[] = "format 'libsvm' needs use_var = [int64 ids with lod_level 1, float32 values with "
                                   "lod_level 1, label (int64 or float32) of width 1]";
        if (nslots != 3) return fl__err(FL_EINVAL, "%s: %s (3 variables); got %d variables", fn, want, nslots);
        for (int i = 0; i < 3; i++) {
            const fl__slot *s = &slots[i];
            int ok = i == 0   ? !s->dense && s->dtype == FL_INT64
                     : i == 1 ? !s->dense && s->dtype == FL_FLOAT32
                              : s->dense && s->width == 1;
            if (!ok) {
                describe(s, d, sizeof d);
                return fl__err(FL_EINVAL, "%s: %s; variable #%d '%s' is %s", fn, want, i + 1, s->name, d);
            }
        }
    }
    return FL_OK;
}

size_t fl__record_size(const fl__slot *slots, int nslots, const char *p, size_t avail)
{
    size_t o = 0;
    for (int k = 0; k < nslots; k++) {
        uint64_t n = (uint64_t)slots[k].width;
        if (!slots[k].dense) {
            uint32_t c;
            if (avail - o < 4) return 0;
            memcpy(&c, p + o, 4);
            o += 4;
            n = c;
        }
        if ((avail - o) / (size_t)slots[k].esize < n) return 0;
        o += (size_t)n * (size_t)slots[k].esize;
    }
    return o;
}
