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
 * The header is JSON read and written through src/base/json.c (cJSON).  The reader checks
 * the header's size before allocating it, then every field: types, dtypes, shapes and
 * offsets against the file size.  Any defect is FL_ECORRUPT naming the file and what is
 * wrong; nothing is returned then.
 */
#include <cjson/cJSON.h>
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
} st_dtypes[] = {{"F32", FL_FLOAT32}, {"I64", FL_INT64},     {"F64", FL_FLOAT64}, {"I32", FL_INT32},
                 {"F16", FL_FLOAT16}, {"BF16", FL_BFLOAT16}, {"U8", FL_UINT8}};
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

/* ---- header parser ---------------------------------------------------------------------- */

/* At most 14 values per tensor (its object, dtype, shape and 8 dimensions, two offsets):
 * 4M values allow some 300,000 tensors and bound cJSON's tree to about 256 MiB. */
#define ST_MAX_VALUES ((size_t)4 << 20)

typedef struct {
    const char *name; /* points into the cJSON tree */
    fl_dtype dt;
    int ndim;
    int64_t shape[FL_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

/* The members of e's description object v. */
static int parse_entry(const fl_json *j, const cJSON *v, st_entry *e)
{
    char key[300];
    snprintf(key, sizeof key, "%.200s", e->name);
    FL_CHECK(fl__json_obj(j, v, key));
    const cJSON *dt = NULL, *shape = NULL, *off = NULL;
    for (const cJSON *f = v->child; f; f = f->next) {
        const cJSON **slot = !strcmp(f->string, "dtype")          ? &dt
                             : !strcmp(f->string, "shape")        ? &shape
                             : !strcmp(f->string, "data_offsets") ? &off
                                                                  : NULL;
        if (!slot) return fl__json_fail(j, "tensor '%.200s': unexpected field '%.40s'", e->name, f->string);
        if (*slot) return fl__json_fail(j, "tensor '%.200s': duplicate field '%s'", e->name, f->string);
        *slot = f;
    }
    if (!dt || !shape || !off)
        return fl__json_fail(j, "tensor '%.200s': missing field '%s'", e->name,
                             !dt      ? "dtype"
                             : !shape ? "shape"
                                      : "data_offsets");
    const char *dts;
    snprintf(key, sizeof key, "%.200s.dtype", e->name);
    FL_CHECK(fl__json_str(j, dt, key, &dts));
    int k = 0;
    while (k < ST_NDTYPES && strcmp(st_dtypes[k].name, dts) != 0) k++;
    if (k == ST_NDTYPES)
        return fl__json_fail(
            j, "tensor '%.200s': unknown or unsupported dtype '%.40s' (expected F32, I64, F64, I32, F16 or BF16)", e->name,
            dts);
    e->dt = st_dtypes[k].dt;
    snprintf(key, sizeof key, "%.200s.shape", e->name);
    FL_CHECK(fl__json_arr(j, shape, key, FL_MAX_DIMS, &e->ndim));
    k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        snprintf(key, sizeof key, "%.200s.shape[%d]", e->name, k);
        FL_CHECK(fl__json_int(j, d, key, 0, INT64_MAX, &e->shape[k]));
    }
    int no;
    snprintf(key, sizeof key, "%.200s.data_offsets", e->name);
    FL_CHECK(fl__json_arr(j, off, key, 2, &no));
    if (no != 2) return fl__json_fail(j, "tensor '%.200s': data_offsets must have 2 entries, has %d", e->name, no);
    int64_t o[2];
    k = 0;
    for (const cJSON *d = off->child; d; d = d->next, k++) {
        snprintf(key, sizeof key, "%.200s.data_offsets[%d]", e->name, k);
        FL_CHECK(fl__json_int(j, d, key, 0, INT64_MAX, &o[k]));
    }
    e->begin = (uint64_t)o[0];
    e->end = (uint64_t)o[1];
    return FL_OK;
}

void fl__st_meta_free(fl__st_meta *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->vals[i]);
    }
    free(m->keys);
    free(m->vals);
    *m = (fl__st_meta){0, NULL, NULL};
}

const char *fl__st_meta_get(const fl__st_meta *m, const char *key)
{
    for (int i = 0; m && i < m->n; i++)
        if (!strcmp(m->keys[i], key)) return m->vals[i];
    return NULL;
}

/* Appends a copy of key: val; false when out of memory. */
static int meta_add(fl__st_meta *m, const char *key, const char *val)
{
    char **k = realloc(m->keys, (size_t)(m->n + 1) * sizeof *k);
    if (k) m->keys = k;
    char **v = k ? realloc(m->vals, (size_t)(m->n + 1) * sizeof *v) : NULL;
    if (v) m->vals = v;
    char *ks = v ? fl__strdup(key) : NULL, *vs = ks ? fl__strdup(val) : NULL;
    if (!vs) {
        free(ks);
        return 0;
    }
    m->keys[m->n] = ks;
    m->vals[m->n++] = vs;
    return 1;
}

/* An object of tensor descriptions and an optional "__metadata__" object of strings
 * (copied into *mo when it is not NULL).
 * On success *out (malloc'ed, *n entries, NULL when none) points into j's tree. */
static int parse_header(const fl_json *j, st_entry **out, int *n, fl__st_meta *mo)
{
    const cJSON *root = j->root;
    *out = NULL;
    *n = 0;
    if (!cJSON_IsObject(root)) return fl__json_fail(j, "the header must be a JSON object");
    int cap = 0, meta = 0, st = FL_OK;
    for (const cJSON *v = root->child; v; v = v->next) cap++;
    st_entry *e = calloc((size_t)(cap ? cap : 1), sizeof *e);
    fl_strmap seen = {0};
    if (!e) return fl__json_fail(j, "out of memory for %d tensor descriptions", cap);
    for (const cJSON *v = root->child; v && st == FL_OK; v = v->next) {
        if (!strcmp(v->string, "__metadata__")) {
            if (meta++) st = fl__json_fail(j, "duplicate key '__metadata__'");
            else st = fl__json_obj(j, v, "__metadata__");
            for (const cJSON *m = v->child; m && st == FL_OK; m = m->next) {
                const char *unused;
                char key[80];
                snprintf(key, sizeof key, "__metadata__.%.40s", m->string);
                st = fl__json_str(j, m, key, &unused);
                if (st == FL_OK && mo) st = meta_add(mo, m->string, unused) ? FL_OK : fl__json_fail(j, "out of memory");
            }
            continue;
        }
        if (fl__strmap_get(&seen, v->string, NULL)) st = fl__json_fail(j, "duplicate tensor name '%.200s'", v->string);
        else if (fl__strmap_put(&seen, v->string, *n) != FL_OK) st = fl__json_fail(j, "out of memory");
        if (st != FL_OK) break;
        e[*n].name = v->string;
        st = parse_entry(j, v, &e[(*n)++]);
    }
    fl__strmap_free(&seen);
    if (st != FL_OK) {
        free(e);
        *n = 0;
        return st;
    }
    *out = e;
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
        if (numel > UINT64_MAX / esz)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s': shape overflows 64 bits", path, e[i].name);
        if (e[i].end < e[i].begin)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s': data_offsets [%llu, %llu] are reversed", path, e[i].name,
                           (unsigned long long)e[i].begin, (unsigned long long)e[i].end);
        if (e[i].end > data_len)
            return fl__err(
                FL_ECORRUPT,
                "'%s': tensor '%s': data_offsets [%llu, %llu] lie beyond the end of the data buffer (%llu bytes)", path,
                e[i].name, (unsigned long long)e[i].begin, (unsigned long long)e[i].end, (unsigned long long)data_len);
        if (e[i].end - e[i].begin != numel * esz)
            return fl__err(
                FL_ECORRUPT,
                "'%s': tensor '%s': %s with %llu elements needs %llu bytes, but data_offsets [%llu, %llu] hold %llu", path,
                e[i].name, st_dtype_name(e[i].dt), (unsigned long long)numel, (unsigned long long)(numel * esz),
                (unsigned long long)e[i].begin, (unsigned long long)e[i].end, (unsigned long long)(e[i].end - e[i].begin));
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

int fl_io_read_safetensors(const char *path, char ***names, fl_tensor ***tensors, int *n)
{
    return fl__st_read(path, names, tensors, n, NULL);
}

int fl__st_read(const char *path, char ***names, fl_tensor ***tensors, int *n, fl__st_meta *meta)
{
    if (!names || !tensors || !n) return fl__err(FL_EINVAL, "fl_io_read_safetensors: output pointer is NULL");
    *names = NULL;
    *tensors = NULL;
    *n = 0;
    if (meta) *meta = (fl__st_meta){0, NULL, NULL};
    if (!path) return fl__err(FL_EINVAL, "fl_io_read_safetensors: path is NULL");
    fl__tmp_sweep_near(path); /* a save killed mid-write left its temporary file here */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fl__err(e == ENOENT ? FL_ENOTFOUND : FL_EIO, "cannot open '%s': %s", path, strerror(e));
    }
    fl_json j = {NULL, NULL, FL_ECORRUPT};
    st_entry *ents = NULL;
    int ne = 0;
    char **nm = NULL, *src = NULL;
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
    size_t srclen = strlen(path) + 32;
    if (st == FL_OK && !(src = malloc(srclen))) st = fl__err(FL_ENOMEM, "'%s': out of memory", path);
    if (st == FL_OK) {
        snprintf(src, srclen, "'%s': bad safetensors header", path);
        j.src = src;
        st = fl__json_parse(&j, hdr, (size_t)hlen, ST_MAX_HEADER, ST_MAX_VALUES);
        if (st == FL_OK) st = parse_header(&j, &ents, &ne, meta);
    }
    free(hdr);
    if (st != FL_OK) goto out;
    uint64_t data_off = 8 + hlen, data_len = fsize - data_off;
    FL_CHECK_GOTO(validate(path, ents, ne, data_len), st, out);
    if (ne > 0) {
        nm = calloc((size_t)ne, sizeof *nm);
        ts = calloc((size_t)ne, sizeof *ts);
        if (!nm || !ts) {
            st = fl__err(FL_ENOMEM, "'%s': out of memory", path);
            goto out;
        }
    }
    for (int i = 0; i < ne; i++) {
        st_entry *e = &ents[i];
        ts[i] = fl_tensor_create(e->dt, e->ndim, e->shape);
        if (!ts[i]) {
            st = fl__err(fl_last_status() ? fl_last_status() : FL_ENOMEM, "'%s': tensor '%s': %s", path, e->name,
                         fl_last_error());
            goto out;
        }
        size_t nbytes = (size_t)(e->end - e->begin);
        FL_CHECK_GOTO(read_at(fd, fl_tensor_data(ts[i]), nbytes, data_off + e->begin, path), st, out);
        if (host_big_endian()) swap_elems(fl_tensor_data(ts[i]), nbytes, fl_dtype_size(e->dt));
        if (!(nm[i] = fl__strdup(e->name))) {
            st = fl__err(FL_ENOMEM, "'%s': out of memory", path);
            goto out;
        }
    }
    *names = nm;
    *tensors = ts;
    *n = ne;
    nm = NULL;
    ts = NULL;
out:
    if (nm || ts) fl_io_free_tensors(nm, ts, ne);
    if (st != FL_OK) fl__st_meta_free(meta);
    free(ents);
    fl__json_free(&j);
    free(src);
    close(fd);
    return st;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* One tensor's description, fields in the usual order; false when out of memory. */
static int put_entry(cJSON *root, const fl__st_desc *t, const char *dt, uint64_t off, uint64_t nbytes)
{
    cJSON *o = cJSON_AddObjectToObject(root, t->name);
    cJSON *shape = o && cJSON_AddStringToObject(o, "dtype", dt) ? cJSON_AddArrayToObject(o, "shape") : NULL;
    int ok = shape != NULL;
    for (int k = 0; ok && k < t->ndim; k++) ok = cJSON_AddItemToArray(shape, fl__json_int_node(t->shape[k]));
    cJSON *offs = ok ? cJSON_AddArrayToObject(o, "data_offsets") : NULL;
    return offs && cJSON_AddItemToArray(offs, fl__json_int_node((int64_t)off)) &&
           cJSON_AddItemToArray(offs, fl__json_int_node((int64_t)(off + nbytes)));
}

int fl__st_header(const fl__st_desc *t, int n, const char *meta_key, const char *meta_val, fl_buf *out)
{
    return fl__st_header_meta(t, n, meta_key ? &meta_key : NULL, meta_key ? &meta_val : NULL, meta_key ? 1 : 0, out);
}

int fl__st_header_meta(const fl__st_desc *t, int n, const char *const *mkeys, const char *const *mvals, int nmeta,
                       fl_buf *out)
{
    fl_strmap seen = {0};
    cJSON *root = cJSON_CreateObject(), *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    int st = FL_OK, ok = meta && cJSON_AddStringToObject(meta, "format", "fleet");
    for (int i = 0; ok && i < nmeta; i++) ok = cJSON_AddStringToObject(meta, mkeys[i], mvals[i]) != NULL;
    uint64_t off = 0;
    for (int i = 0; i < n && ok && st == FL_OK; i++) {
        const char *name = t[i].name, *dt = st_dtype_name(t[i].dtype);
        uint64_t numel = 1;
        for (int k = 0; k < t[i].ndim; k++) numel *= (uint64_t)t[i].shape[k];
        if (!name || !*name || !strcmp(name, "__metadata__"))
            st = fl__err(FL_EINVAL, "tensor #%d has an empty or reserved name", i);
        else if (fl__utf8_check(name, strlen(name)) != strlen(name))
            st = fl__err(FL_EINVAL, "tensor name '%s' is not valid UTF-8", name);
        else if (fl__strmap_get(&seen, name, NULL)) st = fl__err(FL_EINVAL, "duplicate tensor name '%s'", name);
        else if (!dt) st = fl__err(FL_EINVAL, "tensor '%s' has an invalid dtype", name);
        else if (fl__strmap_put(&seen, name, i) != FL_OK) ok = 0;
        else ok = put_entry(root, &t[i], dt, off, numel * fl_dtype_size(t[i].dtype));
        off += numel * fl_dtype_size(t[i].dtype);
    }
    char *json = ok && st == FL_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    fl__strmap_free(&seen);
    if (st == FL_OK && !json) st = fl__err(FL_ENOMEM, "out of memory for a safetensors header");
    if (st != FL_OK) return st;
    /* padded with spaces to a multiple of 8, so that the data buffer is 8-byte aligned */
    uint64_t len = strlen(json), hlen = (len + 7) & ~(uint64_t)7;
    if (hlen > ST_MAX_HEADER)
        st = fl__err(FL_EINVAL, "a header of %llu bytes exceeds the format's limit", (unsigned long long)hlen);
    unsigned char hb[8];
    for (int k = 0; k < 8; k++) hb[k] = (unsigned char)(hlen >> (8 * k));
    if (st == FL_OK) {
        fl__buf_put(out, hb, 8);
        fl__buf_put(out, json, (size_t)len);
        for (uint64_t k = len; k < hlen; k++) fl__buf_put(out, " ", 1);
        if (out->failed) st = fl__err(FL_ENOMEM, "out of memory for a safetensors header");
    }
    cJSON_free(json);
    return st;
}

int fl_io_write_safetensors(const char *path, const char *const *names, const fl_tensor *const *tensors, int n)
{
    return fl__st_write(path, names, tensors, n, NULL, NULL, 0);
}

int fl__st_write(const char *path, const char *const *names, const fl_tensor *const *tensors, int n,
                 const char *const *mkeys, const char *const *mvals, int nmeta)
{
    if (!path) return fl__err(FL_EINVAL, "fl_io_write_safetensors: path is NULL");
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': bad tensor list (n = %d)", path, n);
    for (int i = 0; i < n; i++) {
        if (!tensors[i])
            return fl__err(FL_EINVAL, "fl_io_write_safetensors '%s': tensor '%s' is NULL", path, names[i] ? names[i] : "?");
        if (fl_tensor_is_rows(tensors[i]))
            return fl__err(FL_EUNSUPPORTED,
                           "fl_io_write_safetensors '%s': tensor '%s' holds SelectedRows, which safetensors cannot store",
                           path, names[i] ? names[i] : "?");
    }
    fl__st_desc *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!d) return fl__err(FL_ENOMEM, "fl_io_write_safetensors '%s': out of memory", path);
    for (int i = 0; i < n; i++)
        d[i] = (fl__st_desc){names[i], fl_tensor_dtype(tensors[i]), fl_tensor_ndim(tensors[i]),
                             fl_tensor_shape(tensors[i])};
    fl_buf b = {0};
    int st = fl__st_header_meta(d, n, mkeys, mvals, nmeta, &b);
    free(d);
    if (st != FL_OK) {
        fl__buf_free(&b);
        return fl__err(st, "fl_io_write_safetensors '%s': %s", path, fl_last_error());
    }
    char *swapbuf = NULL;
    fl__afile f;
    st = fl__afile_open(&f, path);
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
