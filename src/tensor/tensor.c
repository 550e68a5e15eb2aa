/* tensor.c - dense tensors with optional LoD and SelectedRows annotations. */
#include <stdio.h>
#include <string.h>

#include "tensor_internal.h"

static const size_t dtype_sizes[FL_DTYPE_COUNT] = {4, 8, 8, 4, 2, 2, 1};
static const char *const dtype_names[FL_DTYPE_COUNT] = {"float32", "int64",    "float64", "int32",
                                                        "float16", "bfloat16", "uint8"};

/* The last write version handed out: one counter for every tensor of the process. */
static uint64_t version_clock;

void fl__tensor_bump(fl_tensor *t)
{
    if (t) __atomic_store_n(&t->version, __atomic_add_fetch(&version_clock, 1, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
}

size_t fl_dtype_size(fl_dtype dt) { return (unsigned)dt < FL_DTYPE_COUNT ? dtype_sizes[dt] : 0; }
const char *fl_dtype_name(fl_dtype dt) { return (unsigned)dt < FL_DTYPE_COUNT ? dtype_names[dt] : "invalid"; }

int fl_dtype_parse(const char *name, fl_dtype *out)
{
    if (!name || !out) return fl__err(FL_EINVAL, "fl_dtype_parse: name or out is NULL");
    for (int i = 0; i < FL_DTYPE_COUNT; i++)
        if (name && !strcmp(name, dtype_names[i])) {
            *out = (fl_dtype)i;
            return FL_OK;
        }
    return fl__err(FL_EINVAL, "unknown dtype '%s' (expected float32, int64, float64, int32, float16 or bfloat16)",
                   name ? name : "(null)");
}

static int check_shape(fl_dtype dt, int ndim, const int64_t *shape, int64_t *numel)
{
    if (!fl_dtype_size(dt)) return fl__err(FL_EINVAL, "tensor: invalid dtype %d", (int)dt);
    if (ndim < 0 || ndim > FL_MAX_DIMS)
        return fl__err(FL_EINVAL, "tensor: rank %d out of range [0, %d]", ndim, FL_MAX_DIMS);
    if (ndim > 0 && !shape) return fl__err(FL_EINVAL, "tensor: shape is NULL for rank %d", ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fl__err(FL_EINVAL, "tensor: dimension %d is negative (%lld)", i, (long long)shape[i]);
        if (shape[i] && n > INT64_MAX / 16 / shape[i])
            return fl__err(FL_EINVAL, "tensor: shape overflows 64-bit element count");
        n *= shape[i];
    }
    *numel = n;
    return FL_OK;
}

int fl__tensor_reshape_raw(fl_tensor *t, fl_dtype dt, int ndim, const int64_t *shape)
{
    int64_t numel = 0;
    FL_CHECK(check_shape(dt, ndim, shape, &numel));
    size_t bytes = (size_t)numel * fl_dtype_size(dt);
    if (bytes > t->cap || !t->data) {
        size_t nc = bytes < 64 ? 64 : bytes;
        if (t->data && nc < t->cap + t->cap / 2) nc = t->cap + t->cap / 2;
        void *nd = fl__alloc_aligned(nc);
        if (!nd) return fl__err(FL_ENOMEM, "tensor: cannot allocate %zu bytes", nc);
        memset(nd, 0, nc);
        fl__free_aligned(t->data);
        t->data = nd;
        t->cap = nc;
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->layout = FL_LAYOUT_PLAIN;
    fl__tensor_bump(t);
    return FL_OK;
}

fl_tensor *fl_tensor_create(fl_dtype dt, int ndim, const int64_t *shape)
{
    fl_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        fl__err(FL_ENOMEM, "tensor: out of memory");
        return NULL;
    }
    t->magic = FL_TENSOR_MAGIC;
    if (fl__tensor_reshape_raw(t, dt, ndim, shape) != FL_OK) {
        free(t);
        return NULL;
    }
    memset(t->data, 0, t->cap);
    return t;
}

fl_tensor *fl_tensor_from_data(fl_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    fl_tensor *t = fl_tensor_create(dt, ndim, shape);
    if (t && data) memcpy(t->data, data, fl_tensor_nbytes(t));
    fl__tensor_bump(t);
    return t;
}

void fl_tensor_free(fl_tensor *t)
{
    if (!t) return;
    fl__free_aligned(t->data);
    free(t->lod);
    free(t->rows);
    t->magic = 0;
    free(t);
}

int fl_tensor_resize(fl_tensor *t, fl_dtype dt, int ndim, const int64_t *shape)
{
    if (!t) return fl__err(FL_EINVAL, "fl_tensor_resize: tensor is NULL");
    FL_CHECK(fl__tensor_reshape_raw(t, dt, ndim, shape));
    t->lod_n = 0;
    t->is_rows = 0;
    return FL_OK;
}

int fl_tensor_copy(fl_tensor *dst, const fl_tensor *src)
{
    if (!dst || !src) return fl__err(FL_EINVAL, "fl_tensor_copy: NULL tensor");
    if (dst == src) return FL_OK;
    FL_CHECK(fl__tensor_reshape_raw(dst, src->dtype, src->ndim, src->shape));
    memcpy(dst->data, src->data, fl_tensor_nbytes(src));
    dst->layout = src->layout;
    FL_CHECK(fl__tensor_share_lod(dst, src));
    if (src->is_rows) FL_CHECK(fl_tensor_set_rows(dst, src->rows, src->shape[0], src->height));
    else dst->is_rows = 0;
    fl__tensor_bump(dst);
    return FL_OK;
}

fl_dtype fl_tensor_dtype(const fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_dtype: tensor is NULL");
        return FL_FLOAT32;
    }
    return t->dtype;
}
int fl_tensor_ndim(const fl_tensor *t) { return t ? t->ndim : fl__err(FL_EINVAL, "fl_tensor_ndim: tensor is NULL"); }
int64_t fl_tensor_dim(const fl_tensor *t, int i)
{
    if (!t) return fl__err(FL_EINVAL, "fl_tensor_dim: tensor is NULL");
    if (i < 0) i += t->ndim;
    return (i >= 0 && i < t->ndim) ? t->shape[i] : 0;
}
const int64_t *fl_tensor_shape(const fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_shape: tensor is NULL");
        return NULL;
    }
    return t->shape;
}
int64_t fl_tensor_numel(const fl_tensor *t) { return t ? t->numel : fl__err(FL_EINVAL, "fl_tensor_numel: tensor is NULL"); }
size_t fl_tensor_nbytes(const fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_nbytes: tensor is NULL");
        return 0;
    }
    return (size_t)t->numel * fl_dtype_size(t->dtype);
}
void *fl_tensor_data(fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_data: tensor is NULL");
        return NULL;
    }
    if (fl__tensor_to_plain(t) != FL_OK) return NULL;
    fl__tensor_bump(t); /* the caller may write through the pointer */
    return t->data;
}
const void *fl_tensor_cdata(const fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_cdata: tensor is NULL");
        return NULL;
    }
    /* logically const: the values stay, their order becomes the plain one */
    if (fl__tensor_to_plain((fl_tensor *)t) != FL_OK) return NULL;
    return t->data;
}
float *fl_tensor_f32(fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_f32: tensor is NULL");
        return NULL;
    }
    if (fl__tensor_to_plain(t) != FL_OK) return NULL;
    fl__tensor_bump(t);
    return t->dtype == FL_FLOAT32 ? t->data : NULL;
}
int64_t *fl_tensor_i64(fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_i64: tensor is NULL");
        return NULL;
    }
    fl__tensor_bump(t);
    return t->dtype == FL_INT64 ? t->data : NULL;
}

int fl_tensor_set_lod(fl_tensor *t, const int64_t *off, int64_t n)
{
    if (!t) return fl__err(FL_EINVAL, "fl_tensor_set_lod: tensor is NULL");
    if (!off || n == 0) {
        t->lod_n = 0;
        fl__tensor_bump(t);
        return FL_OK;
    }
    if (n < 1 || off[0] != 0) return fl__err(FL_EINVAL, "LoD offsets must start at 0");
    for (int64_t i = 1; i < n; i++)
        if (off[i] < off[i - 1])
            return fl__err(FL_EINVAL, "LoD offsets must be non-decreasing (offset %lld: %lld < %lld)", (long long)i,
                           (long long)off[i], (long long)off[i - 1]);
    int64_t d0 = t->ndim > 0 ? t->shape[0] : 1;
    if (off[n - 1] != d0)
        return fl__err(FL_EINVAL, "LoD last offset %lld does not match dimension 0 (%lld)", (long long)off[n - 1],
                       (long long)d0);
    if (n > t->lod_cap) {
        int64_t *nl = realloc(t->lod, (size_t)n * sizeof *nl);
        if (!nl) return fl__err(FL_ENOMEM, "LoD: out of memory");
        t->lod = nl;
        t->lod_cap = n;
    }
    memcpy(t->lod, off, (size_t)n * sizeof *off);
    t->lod_n = n;
    fl__tensor_bump(t);
    return FL_OK;
}

const int64_t *fl_tensor_lod(const fl_tensor *t, int64_t *n)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_lod: tensor is NULL");
        return NULL;
    }
    if (n) *n = t->lod_n;
    return t->lod_n ? t->lod : NULL;
}

int fl__tensor_share_lod(fl_tensor *dst, const fl_tensor *src)
{
    if (!src->lod_n) {
        dst->lod_n = 0;
        return FL_OK;
    }
    if (src->lod_n > dst->lod_cap) {
        int64_t *nl = realloc(dst->lod, (size_t)src->lod_n * sizeof *nl);
        if (!nl) return fl__err(FL_ENOMEM, "LoD: out of memory");
        dst->lod = nl;
        dst->lod_cap = src->lod_n;
    }
    memcpy(dst->lod, src->lod, (size_t)src->lod_n * sizeof *src->lod);
    dst->lod_n = src->lod_n;
    return FL_OK;
}

int fl_tensor_set_rows(fl_tensor *t, const int64_t *rows, int64_t nrows, int64_t height)
{
    if (!t) return fl__err(FL_EINVAL, "fl_tensor_set_rows: tensor is NULL");
    if (!rows) {
        t->is_rows = 0;
        fl__tensor_bump(t);
        return FL_OK;
    }
    if (t->ndim < 1 || t->shape[0] != nrows)
        return fl__err(FL_EINVAL, "SelectedRows: %lld rows given for a tensor with dimension 0 = %lld", (long long)nrows,
                       (long long)(t->ndim ? t->shape[0] : 0));
    if (nrows > t->rows_cap || !t->rows) {
        int64_t *nr = realloc(t->rows, (size_t)(nrows ? nrows : 1) * sizeof *nr);
        if (!nr) return fl__err(FL_ENOMEM, "SelectedRows: out of memory");
        t->rows = nr;
        t->rows_cap = nrows;
    }
    for (int64_t i = 0; i < nrows; i++) {
        if (rows[i] < 0 || rows[i] >= height)
            return fl__err(FL_EINVAL, "SelectedRows: row %lld out of range [0, %lld)", (long long)rows[i],
                           (long long)height);
    }
    if (nrows) memmove(t->rows, rows, (size_t)nrows * sizeof *rows);
    t->is_rows = 1;
    t->height = height;
    fl__tensor_bump(t);
    return FL_OK;
}

const int64_t *fl_tensor_rows(const fl_tensor *t, int64_t *nrows, int64_t *height)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_rows: tensor is NULL");
        return NULL;
    }
    if (!t->is_rows) {
        if (nrows) *nrows = 0;
        if (height) *height = 0;
        return NULL;
    }
    if (nrows) *nrows = t->shape[0];
    if (height) *height = t->height;
    return t->rows;
}

int fl_tensor_is_rows(const fl_tensor *t)
{
    if (!t) {
        fl__err(FL_EINVAL, "fl_tensor_is_rows: tensor is NULL");
        return 0;
    }
    return t->is_rows;
}

void fl_tensor_describe(const fl_tensor *t, char *buf, size_t cap)
{
    if (!t || !buf || !cap) return;
    size_t n = (size_t)snprintf(buf, cap, "%s[", fl_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}
