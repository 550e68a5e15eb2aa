/*
 * safetensors.c - reads and writes the safetensors format
 * (https://huggingface.co/docs/safetensors):
 *
 *   [8 bytes]  N, little-endian u64: size of the header
 *   [N bytes]  JSON object, UTF-8, padded with spaces (we pad to a multiple of 8):
 *                {"__metadata__": {"format": "fleet"},
 *                 "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 *   [rest]     the data buffer; offsets are relative to its start, tensors are raw
 *              little-endian row-major arrays that cover it exactly (no holes, no overlap).
 *
 * The reader parses a strict JSON subset (objects, strings, arrays of non-negative
 * integers) and validates every length against the file size before allocating.  Any
 * defect is FL_ECORRUPT naming the file and what is wrong; nothing is returned then.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_internal.h"

#define ST_MAX_HEADER ((uint64_t)100 << 20) /* as the reference implementation */

static const struct {
    const char *name;
    fl_dtype dt;
} st_dtypes[] = {{"F32", FL_FLOAT32}, {"I64", FL_INT64}, {"F64", FL_FLOAT64},
                 {"I32", FL_INT32},   {"F16", FL_FLOAT16}, {"BF16", FL_BFLOAT16}};
#define ST_NDTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static const char *st_dtype_name(fl_dtype dt)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt) return st_dtypes[i].name;
    return NULL;
}

static int host_big_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 0;
}

/* Reverses the bytes of each `size`-byte element (little <-> big endian). */
static void swap_elems(void *data, size_t nbytes, size_t size)
{
    unsigned char *p = data;
    for (size_t off = 0; off + size <= nbytes; off += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char t = p[off + a];
            p[off + a] = p[off + b];
            p[off + b] = t;
        }
}

/* ---- JSON strings ----------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

int fl__json_quote(fl_buf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    fl__buf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            fl__buf_put(b, e, 2);
            i++;
        } else if (c < 0x20) {
            const char *e = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (e)
                fl__buf_put(b, e, 2);
            else
                fl__buf_printf(b, "\\u%04x", c);
            i++;
        } else {
            size_t k = utf8_seq(u + i, n - i);
            if (!k) return fl__err(FL_EINVAL, "name '%s' is not valid UTF-8 (byte %zu)", s, i);
            fl__buf_put(b, u + i, k);
            i += k;
        }
    }
    fl__buf_put(b, "\"", 1);
    return FL_OK;
}

static int hex4(const char *t, size_t len, size_t at, uint32_t *out)
{
    uint32_t v = 0;
    if (at + 4 > len) return 0;
    for (int k = 0; k < 4; k++) {
        char c = t[at + (size_t)k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 1;
}

static void put_utf8(fl_buf *b, uint32_t cp)
{
    unsigned char o[4];
    size_t n;
    if (cp < 0x80) o[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) o[0] = (unsigned char)(0xc0 | (cp >> 6)), o[1] = (unsigned char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        o[0] = (unsigned char)(0xe0 | (cp >> 12)), o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)),
        o[2] = (unsigned char)(0x80 | (cp & 0x3f)), n = 3;
    else
        o[0] = (unsigned char)(0xf0 | (cp >> 18)), o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f)),
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (unsigned char)(0x80 | (cp & 0x3f)), n = 4;
    fl__buf_put(b, o, n);
}

int fl__json_unquote(const char *t, size_t len, size_t *pos, char **out, char *why, size_t why_cap)
{
    size_t i = *pos;
    fl_buf b = {0};
    *out = NULL;
    if (i >= len || t[i] != '"') {
        snprintf(why, why_cap, "expected a string at byte %zu", i);
        return FL_ECORRUPT;
    }
    size_t start = i++;
    for (;;) {
        if (i >= len) {
            snprintf(why, why_cap, "unterminated string starting at byte %zu", start);
            goto bad;
        }
        unsigned char c = (unsigned char)t[i];
        if (c == '"') break;
        if (c < 0x20) {
            snprintf(why, why_cap, "control character 0x%02x inside a string at byte %zu", c, i);
            goto bad;
        }
        if (c != '\\') {
            size_t k = utf8_seq((const unsigned char *)t + i, len - i);
            if (!k) {
                snprintf(why, why_cap, "invalid UTF-8 at byte %zu", i);
                goto bad;
            }
            fl__buf_put(&b, t + i, k);
            i += k;
            continue;
        }
        if (i + 1 >= len) {
            snprintf(why, why_cap, "unterminated escape at byte %zu", i);
            goto bad;
        }
        char e = t[i + 1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            fl__buf_put(&b, &map[simple - "\"\\/bfnrt"], 1);
            i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || !hex4(t, len, i + 2, &cp)) {
            snprintf(why, why_cap, "bad escape sequence at byte %zu", i);
            goto bad;
        }
        i += 6;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (i + 1 < len && t[i] == '\\' && t[i + 1] == 'u' && hex4(t, len, i + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            } else {
                snprintf(why, why_cap, "unpaired surrogate escape at byte %zu", i - 6);
                goto bad;
            }
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            snprintf(why, why_cap, "unpaired surrogate escape at byte %zu", i - 6);
            goto bad;
        } else if (cp == 0) {
            snprintf(why, why_cap, "\\u0000 inside a string at byte %zu", i - 6);
            goto bad;
        }
        put_utf8(&b, cp);
    }
    fl__buf_put(&b, "", 0); /* allocates even for an empty string */
    if (b.failed) {
        fl__buf_free(&b);
        snprintf(why, why_cap, "out of memory");
        return FL_ENOMEM;
    }
    *out = b.p;
    *pos = i + 1;
    return FL_OK;
bad:
    fl__buf_free(&b);
    return FL_ECORRUPT;
}

/* ---- header parser ---------------------------------------------------------------------- */

typedef struct {
    char *name;
    fl_dtype dt;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

typedef struct {
    const char *s;
    size_t n, i;
    char why[384];
    int st;
    st_entry *e;
    int ne, cap;
    fl_strmap seen;
} jparse;

#define JFAIL(j, ...) (snprintf((j)->why, sizeof (j)->why, __VA_ARGS__), (j)->st = FL_ECORRUPT)

static void jws(jparse *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static int jexpect(jparse *j, char c)
{
    jws(j);
    if (j->i < j->n && j->s[j->i] == c) {
        j->i++;
        return FL_OK;
    }
    if (j->i >= j->n) return JFAIL(j, "expected '%c' at byte %zu, found the end of the header", c, j->i);
    unsigned char f = (unsigned char)j->s[j->i];
    if (f < 0x20 || f >= 0x7f) return JFAIL(j, "expected '%c' at byte %zu, found byte 0x%02x", c, j->i, f);
    return JFAIL(j, "expected '%c' at byte %zu, found '%c'", c, j->i, f);
}

/* ',' -> 1 (more), closing -> 0 (done), else error (<0). */
static int jnext(jparse *j, char closing)
{
    jws(j);
    if (j->i < j->n && j->s[j->i] == ',') {
        j->i++;
        return 1;
    }
    if (j->i < j->n && j->s[j->i] == closing) {
        j->i++;
        return 0;
    }
    return JFAIL(j, "expected ',' or '%c' at byte %zu", closing, j->i);
}

static int jstring(jparse *j, char **out)
{
    jws(j);
    int st = fl__json_unquote(j->s, j->n, &j->i, out, j->why, sizeof j->why);
    if (st != FL_OK) j->st = st;
    return st;
}

static int juint(jparse *j, uint64_t *out)
{
    jws(j);
    size_t at = j->i;
    if (at >= j->n || j->s[at] < '0' || j->s[at] > '9')
        return JFAIL(j, "expected a non-negative integer at byte %zu", at);
    uint64_t v = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i] - '0');
        if (v > (UINT64_MAX - d) / 10) return JFAIL(j, "integer at byte %zu is too large", at);
        v = v * 10 + d;
        j->i++;
    }
    if (j->i - at > 1 && j->s[at] == '0') return JFAIL(j, "integer with a leading zero at byte %zu", at);
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
        return JFAIL(j, "expected an integer at byte %zu, found a fraction or exponent", at);
    *out = v;
    return FL_OK;
}

/* [u, u, ...] with at most max entries; *n receives the count. */
static int juint_array(jparse *j, uint64_t *vals, int max, int *n, const char *what, const char *tname)
{
    *n = 0;
    if (jexpect(j, '[')) return j->st;
    jws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
        return FL_OK;
    }
    for (;;) {
        if (*n == max) return JFAIL(j, "tensor '%s': %s has more than %d entries", tname, what, max);
        if (juint(j, &vals[*n])) return j->st;
        (*n)++;
        int more = jnext(j, ']');
        if (more < 0) return j->st;
        if (!more) return FL_OK;
    }
}

static int parse_entry(jparse *j, st_entry *e)
{
    int have_dt = 0, have_shape = 0, have_off = 0;
    if (jexpect(j, '{')) return j->st;
    jws(j);
    if (j->i < j->n && j->s[j->i] == '}') return JFAIL(j, "tensor '%s': empty description", e->name);
    for (;;) {
        char *key = NULL;
        if (jstring(j, &key)) return j->st;
        int st = jexpect(j, ':');
        if (st == FL_OK && !strcmp(key, "dtype")) {
            char *dt = NULL;
            if (have_dt++) st = JFAIL(j, "tensor '%s': duplicate field 'dtype'", e->name);
            else if ((st = jstring(j, &dt)) == FL_OK) {
                int k = 0;
                while (k < ST_NDTYPES && strcmp(st_dtypes[k].name, dt) != 0) k++;
                if (k == ST_NDTYPES)
                    st = JFAIL(j, "tensor '%s': unknown or unsupported dtype '%.40s' (expected F32, I64, F64, I32, F16 or BF16)",
                               e->name, dt);
                else
                    e->dt = st_dtypes[k].dt;
            }
            free(dt);
        } else if (st == FL_OK && !strcmp(key, "shape")) {
            uint64_t dims[FL_MAX_DIMS];
            int nd = 0;
            if (have_shape++) st = JFAIL(j, "tensor '%s': duplicate field 'shape'", e->name);
            else if ((st = juint_array(j, dims, FL_MAX_DIMS, &nd, "shape", e->name)) == FL_OK) {
                e->ndim = nd;
                for (int k = 0; k < nd && st == FL_OK; k++) {
                    if (dims[k] > (uint64_t)INT64_MAX) st = JFAIL(j, "tensor '%s': dimension %d is too large", e->name, k);
                    e->shape[k] = (int64_t)dims[k];
                }
            }
        } else if (st == FL_OK && !strcmp(key, "data_offsets")) {
            uint64_t off[2];
            int no = 0;
            if (have_off++) st = JFAIL(j, "tensor '%s': duplicate field 'data_offsets'", e->name);
            else if ((st = juint_array(j, off, 2, &no, "data_offsets", e->name)) == FL_OK) {
                if (no != 2) st = JFAIL(j, "tensor '%s': data_offsets must have 2 entries, has %d", e->name, no);
                e->begin = off[0];
                e->end = off[1];
            }
        } else if (st == FL_OK) {
            st = JFAIL(j, "tensor '%s': unexpected field '%.40s'", e->name, key);
        }
        free(key);
        if (st != FL_OK) return j->st;
        int more = jnext(j, '}');
        if (more < 0) return j->st;
        if (!more) break;
    }
    if (!have_dt || !have_shape || !have_off)
        return JFAIL(j, "tensor '%s': missing field '%s'", e->name, !have_dt ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return FL_OK;
}

static int parse_metadata(jparse *j)
{
    if (jexpect(j, '{')) return j->st;
    jws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
        return FL_OK;
    }
    for (;;) {
        char *k = NULL, *v = NULL;
        if (jstring(j, &k) == FL_OK && jexpect(j, ':') == FL_OK) {
            jws(j);
            if (j->i < j->n && j->s[j->i] != '"') JFAIL(j, "__metadata__ value of '%.40s' is not a string", k);
            else jstring(j, &v);
        }
        free(k);
        free(v);
        if (j->st != FL_OK) return j->st;
        int more = jnext(j, '}');
        if (more < 0) return j->st;
        if (!more) return FL_OK;
    }
}

static int parse_header(jparse *j)
{
    int have_meta = 0;
    if (jexpect(j, '{')) return j->st;
    jws(j);
    if (j->i < j->n && j->s[j->i] == '}') {
        j->i++;
    } else {
        for (;;) {
            char *key = NULL;
            if (jstring(j, &key)) return j->st;
            if (jexpect(j, ':')) {
                free(key);
                return j->st;
            }
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (have_meta++) return JFAIL(j, "duplicate key '__metadata__'");
                if (parse_metadata(j)) return j->st;
            } else {
                if (fl__strmap_get(&j->seen, key, NULL)) {
                    JFAIL(j, "duplicate tensor name '%.200s'", key);
                    free(key);
                    return j->st;
                }
                if (j->ne == j->cap) {
                    int nc = j->cap ? j->cap * 2 : 16;
                    st_entry *ne = realloc(j->e, (size_t)nc * sizeof *ne);
                    if (!ne) {
                        free(key);
                        snprintf(j->why, sizeof j->why, "out of memory");
                        return j->st = FL_ENOMEM;
                    }
                    j->e = ne;
                    j->cap = nc;
                }
                st_entry *e = &j->e[j->ne++];
                memset(e, 0, sizeof *e);
                e->name = key;
                if (fl__strmap_put(&j->seen, key, j->ne - 1) != FL_OK) {
                    snprintf(j->why, sizeof j->why, "out of memory");
                    return j->st = FL_ENOMEM;
                }
                if (parse_entry(j, e)) return j->st;
            }
            int more = jnext(j, '}');
            if (more < 0) return j->st;
            if (!more) break;
        }
    }
    jws(j);
    if (j->i != j->n) return JFAIL(j, "unexpected data after the JSON object at byte %zu", j->i);
    return FL_OK;
}

/* ---- validation ------------------------------------------------------------------------- */

static int entry_before(const st_entry *a, const st_entry *b)
{
    return a->begin < b->begin || (a->begin == b->begin && a->end <= b->end);
}

/* Stable merge sort of entry indices by (begin, end); tmp has room for n ints. */
static void sort_entries(const st_entry *e, int *idx, int *tmp, int n)
{
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int a = lo, b = mid, k = lo;
            while (a < mid && b < hi) tmp[k++] = entry_before(&e[idx[a]], &e[idx[b]]) ? idx[a++] : idx[b++];
            while (a < mid) tmp[k++] = idx[a++];
            while (b < hi) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)n * sizeof *idx);
    }
}

static int validate(const char *path, const st_entry *e, int n, uint64_t data_len)
{
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1, esz = fl_dtype_size(e[i].dt);
        for (int k = 0; k < e[i].ndim; k++) {
            uint64_t d = (uint64_t)e[i].shape[k];
            if (d && numel > UINT64_MAX / d)
                return fl__err(FL_ECORRUPT, "'%s': tensor '%s': shape overflows 64 bits", path, e[i].name);
            numel *= d;
        }
        if (numel > UINT64_MAX / esz) return fl__err(FL_ECORRUPT, "'%s': tensor '%s': shape overflows 64 bits", path, e[i].name);
        if (e[i].end < e[i].begin)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s': data_offsets [%llu, %llu] are reversed", path, e[i].name,
                           (unsigned long long)e[i].begin, (unsigned long long)e[i].end);
        if (e[i].end > data_len)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s': data_offsets [%llu, %llu] lie beyond the end of the data buffer (%llu bytes)",
                           path, e[i].name, (unsigned long long)e[i].begin, (unsigned long long)e[i].end,
                           (unsigned long long)data_len);
        if (e[i].end - e[i].begin != numel * esz)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s': %s with %llu elements needs %llu bytes, but data_offsets [%llu, %llu] hold %llu",
                           path, e[i].name, st_dtype_name(e[i].dt), (unsigned long long)numel,
                           (unsigned long long)(numel * esz), (unsigned long long)e[i].begin,
                           (unsigned long long)e[i].end, (unsigned long long)(e[i].end - e[i].begin));
    }
    int *idx = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *idx);
    if (!idx) return fl__err(FL_ENOMEM, "'%s': out of memory", path);
    for (int i = 0; i < n; i++) idx[i] = i;
    sort_entries(e, idx, idx + n, n);
    uint64_t at = 0;
    int st = FL_OK;
    for (int k = 0; k < n && st == FL_OK; k++) {
        const st_entry *x = &e[idx[k]];
        if (x->begin < at)
            st = fl__err(FL_ECORRUPT, "'%s': tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and [%llu, %llu])",
                         path, e[idx[k - 1]].name, x->name, (unsigned long long)e[idx[k - 1]].begin,
                         (unsigned long long)e[idx[k - 1]].end, (unsigned long long)x->begin, (unsigned long long)x->end);
        else if (x->begin > at)
            st = fl__err(FL_ECORRUPT, "'%s': bytes [%llu, %llu) of the data buffer belong to no tensor", path,
                         (unsigned long long)at, (unsigned long long)x->begin);
        at = x->end;
    }
    free(idx);
    if (st == FL_OK && at != data_len)
        st = fl__err(FL_ECORRUPT, "'%s': the tensors end at byte %llu of the data buffer, but it has %llu bytes", path,
                     (unsigned long long)at, (unsigned long long)data_len);
    return st;
}

/* ---- reading ---------------------------------------------------------------------------- */

static int read_at(int fd, void *buf, size_t n, uint64_t off, const char *path)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (size_t)1 << 30 ? (size_t)1 << 30 : n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fl__err(FL_EIO, "cannot read '%s': %s", path, strerror(errno));
        if (r == 0) return fl__err(FL_ECORRUPT, "'%s': file ended early (truncated while reading?)", path);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return FL_OK;
}

void fl_io_free_tensors(char **names, fl_tensor **tensors, int n)
{
    for (int i = 0; i < n; i++) {
        if (names) free(names[i]);
        if (tensors) fl_tensor_free(tensors[i]);
    }
    free(names);
    free(tensors);
}

static void jparse_free(jparse *j)
{
    for (int i = 0; i < j->ne; i++) free(j->e[i].name);
    free(j->e);
    fl__strmap_free(&j->seen);
}

int fl_io_read_safetensors(const char *path, char ***names, fl_tensor ***tensors, int *n)
{
    if (!names || !tensors || !n) return fl__err(FL_EINVAL, "fl_io_read_safetensors: output pointer is NULL");
    *names = NULL;
    *tensors = NULL;
    *n = 0;
    if (!path) return fl__err(FL_EINVAL, "fl_io_read_safetensors: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fl__err(e == ENOENT ? FL_ENOTFOUND : FL_EIO, "cannot open '%s': %s", path, strerror(e));
    }
    jparse j;
    memset(&j, 0, sizeof j);
    char **nm = NULL;
    fl_tensor **ts = NULL;
    int st = FL_OK;
    struct stat sb;
    unsigned char hb[8];
    if (fstat(fd, &sb) != 0) {
        st = fl__err(FL_EIO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = fl__err(FL_EIO, "'%s' is not a regular file", path);
        goto out;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8) {
        st = fl__err(FL_ECORRUPT, "'%s': file is %llu bytes, too short for the 8-byte header size", path,
                     (unsigned long long)fsize);
        goto out;
    }
    FL_CHECK_GOTO(read_at(fd, hb, 8, 0, path), st, out);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | hb[k];
    if (hlen > ST_MAX_HEADER) {
        st = fl__err(FL_ECORRUPT, "'%s': header size %llu is larger than the limit of %llu bytes", path,
                     (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        goto out;
    }
    if (hlen > fsize - 8) {
        st = fl__err(FL_ECORRUPT, "'%s': header size %llu runs past the end of the file (%llu bytes)", path,
                     (unsigned long long)hlen, (unsigned long long)fsize);
        goto out;
    }
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = fl__err(FL_ENOMEM, "'%s': cannot allocate %llu bytes for the header", path, (unsigned long long)hlen);
        goto out;
    }
    st = read_at(fd, hdr, (size_t)hlen, 8, path);
    if (st == FL_OK) {
        j.s = hdr;
        j.n = (size_t)hlen;
        if (parse_header(&j) != FL_OK)
            st = fl__err(j.st, "'%s': bad safetensors header: %s", path, j.why);
    }
    free(hdr);
    j.s = NULL;
    if (st != FL_OK) goto out;
    uint64_t data_off = 8 + hlen, data_len = fsize - data_off;
    FL_CHECK_GOTO(validate(path, j.e, j.ne, data_len), st, out);
    if (j.ne > 0) {
        nm = calloc((size_t)j.ne, sizeof *nm);
        ts = calloc((size_t)j.ne, sizeof *ts);
        if (!nm || !ts) {
            st = fl__err(FL_ENOMEM, "'%s': out of memory", path);
            goto out;
        }
    }
    for (int i = 0; i < j.ne; i++) {
        st_entry *e = &j.e[i];
        ts[i] = fl_tensor_create(e->dt, e->ndim, e->shape);
        if (!ts[i]) {
            st = fl__err(fl_last_status() ? fl_last_status() : FL_ENOMEM, "'%s': tensor '%s': %s", path, e->name,
                         fl_last_error());
            goto out;
        }
        size_t nbytes = (size_t)(e->end - e->begin);
        FL_CHECK_GOTO(read_at(fd, fl_tensor_data(ts[i]), nbytes, data_off + e->begin, path), st, out);
        if (host_big_endian()) swap_elems(fl_tensor_data(ts[i]), nbytes, fl_dtype_size(e->dt));
        nm[i] = e->name; /* ownership moves to the result */
        e->name = NULL;
    }
    *names = nm;
    *tensors = ts;
    *n = j.ne;
    nm = NULL;
    ts = NULL;
out:
    if (nm || ts) fl_io_free_tensors(nm, ts, j.ne);
    jparse_free(&j);
    close(fd);
    return st;
}

/* ---- writing ---------------------------------------------------------------------------- */

int fl_io_write_safetensors(const char *path, const char *const *names, const fl_tensor *const *tensors, int n)
{
    if (!path) return fl__err(FL_EINVAL, "fl_io_write_safetensors: path is NULL");
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': bad tensor list (n = %d)", path, n);
    fl_strmap seen = {0};
    fl_buf b = {0};
    int st = FL_OK;
    char *swapbuf = NULL;
    static const char meta[] = "{\"__metadata__\":{\"format\":\"fleet\"}";
    fl__buf_put(&b, meta, sizeof meta - 1);
    uint64_t off = 0;
    for (int i = 0; i < n && st == FL_OK; i++) {
        const fl_tensor *t = tensors[i];
        const char *name = names[i];
        if (!name || !*name || !strcmp(name, "__metadata__")) {
            st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': tensor #%d has an empty or reserved name", path, i);
            break;
        }
        if (!t) {
            st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': tensor '%s' is NULL", path, name);
            break;
        }
        if (fl__strmap_get(&seen, name, NULL)) {
            st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': duplicate tensor name '%s'", path, name);
            break;
        }
        if (fl__strmap_put(&seen, name, i) != FL_OK) {
            st = fl__err(FL_ENOMEM, "fl_io_write_safetensors '%s': out of memory", path);
            break;
        }
        const char *dt = st_dtype_name(fl_tensor_dtype(t));
        if (!dt) {
            st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': tensor '%s' has an invalid dtype", path, name);
            break;
        }
        if (fl_tensor_is_rows(t)) {
            st = fl__err(FL_EUNSUPPORTED, "fl_io_write_safetensors '%s': tensor '%s' holds SelectedRows, which safetensors cannot store",
                         path, name);
            break;
        }
        fl__buf_put(&b, ",", 1);
        if (fl__json_quote(&b, name) != FL_OK) {
            st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': tensor name '%s' is not valid UTF-8", path, name);
            break;
        }
        uint64_t nbytes = (uint64_t)fl_tensor_nbytes(t);
        fl__buf_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", dt);
        for (int k = 0; k < fl_tensor_ndim(t); k++)
            fl__buf_printf(&b, "%s%lld", k ? "," : "", (long long)fl_tensor_shape(t)[k]);
        fl__buf_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + nbytes));
        off += nbytes;
    }
    fl__buf_put(&b, "}", 1);
    while (st == FL_OK && !b.failed && b.len % 8) fl__buf_put(&b, " ", 1);
    if (st == FL_OK && b.failed) st = fl__err(FL_ENOMEM, "fl_io_write_safetensors '%s': out of memory", path);
    if (st == FL_OK && (uint64_t)b.len > ST_MAX_HEADER)
        st = fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': header of %zu bytes exceeds the format's limit", path, b.len);
    fl__strmap_free(&seen);
    if (st != FL_OK) {
        fl__buf_free(&b);
        return st;
    }
    unsigned char hb[8];
    for (int k = 0; k < 8; k++) hb[k] = (unsigned char)((uint64_t)b.len >> (8 * k));
    fl__afile f;
    st = fl__afile_open(&f, path);
    if (st == FL_OK) st = fl__afile_write(&f, hb, 8);
    if (st == FL_OK) st = fl__afile_write(&f, b.p, b.len);
    for (int i = 0; i < n && st == FL_OK; i++) {
        size_t nbytes = fl_tensor_nbytes(tensors[i]);
        if (!host_big_endian()) {
            st = fl__afile_write(&f, fl_tensor_cdata(tensors[i]), nbytes);
            continue;
        }
        free(swapbuf);
        swapbuf = malloc(nbytes ? nbytes : 1);
        if (!swapbuf) {
            fl__afile_abort(&f);
            st = fl__err(FL_ENOMEM, "fl_io_write_safetensors '%s': out of memory", path);
            break;
        }
        memcpy(swapbuf, fl_tensor_cdata(tensors[i]), nbytes);
        swap_elems(swapbuf, nbytes, fl_dtype_size(fl_tensor_dtype(tensors[i])));
        st = fl__afile_write(&f, swapbuf, nbytes);
    }
    free(swapbuf);
    fl__buf_free(&b);
    if (st == FL_OK) st = fl__afile_commit(&f);
    return st;
}
