/*
 * table_io.c - the pieces of checkpoint I/O shared by dense and sparse shards: a
 * safetensors header written ahead of data that is then streamed into an atomic file (so a
 * large sparse shard is never copied into memory first), and a checked tensor lookup for
 * loading.  Files are standard safetensors (8-byte header length, JSON header padded to a
 * multiple of 8 with spaces, packed little-endian data), readable by NumPy and PyTorch.
 */
#include <stdio.h>
#include <string.h>

#include "ps_internal.h"

static const char *st_name(fl_dtype dt)
{
    switch (dt) {
    case FL_FLOAT32: return "F32";
    case FL_INT64: return "I64";
    case FL_INT32: return "I32";
    case FL_FLOAT64: return "F64";
    default: return NULL;
    }
}

int fl__ps_st_write_header(fl__afile *f, const fl__ps_st_tensor *t, int n, const char *table)
{
    fl_buf b = {0};
    fl__buf_printf(&b, "{\"__metadata__\":{\"format\":\"fleet\",\"fleet_ps_table\":");
    int st = fl__json_quote(&b, table);
    fl__buf_printf(&b, "}");
    uint64_t off = 0;
    for (int i = 0; i < n && st == FL_OK; i++) {
        const char *dt = st_name(t[i].dtype);
        if (!dt) {
            st = fl__err(FL_EINVAL, "table '%s': tensor '%s' has an unsupported dtype", table, t[i].name);
            break;
        }
        uint64_t numel = 1;
        for (int k = 0; k < t[i].ndim; k++) numel *= (uint64_t)t[i].shape[k];
        uint64_t bytes = numel * fl_dtype_size(t[i].dtype);
        fl__buf_printf(&b, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, dt);
        for (int k = 0; k < t[i].ndim; k++) fl__buf_printf(&b, "%s%lld", k ? "," : "", (long long)t[i].shape[k]);
        fl__buf_printf(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    fl__buf_put(&b, "}", 1);
    while (!b.failed && b.len % 8) fl__buf_put(&b, " ", 1);
    if (st == FL_OK && b.failed) st = fl__err(FL_ENOMEM, "table '%s': out of memory for a checkpoint header", table);
    if (st == FL_OK) {
        uint64_t hl = b.len;
        st = fl__afile_write(f, &hl, 8);
        if (st == FL_OK) st = fl__afile_write(f, b.p, b.len);
    }
    fl__buf_free(&b);
    return st;
}

int fl__ps_st_find(char **names, fl_tensor **tensors, int n, const char *path, const char *name, fl_dtype dt,
                   int ndim, const int64_t *shape, fl_tensor **out)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], name)) continue;
        fl_tensor *t = tensors[i];
        if (fl_tensor_dtype(t) != dt)
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s' is %s, expected %s", path, name,
                           fl_dtype_name(fl_tensor_dtype(t)), fl_dtype_name(dt));
        int ok = fl_tensor_ndim(t) == ndim;
        for (int k = 0; ok && k < ndim; k++)
            if (shape[k] >= 0 && fl_tensor_shape(t)[k] != shape[k]) ok = 0;
        if (!ok) {
            char want[64] = "", got[64] = "";
            for (int k = 0; k < ndim; k++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? "x" : "", (long long)shape[k]);
            for (int k = 0; k < fl_tensor_ndim(t); k++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? "x" : "",
                         (long long)fl_tensor_shape(t)[k]);
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s' has shape [%s], expected [%s] (-1 = any)", path, name, got, want);
        }
        *out = t;
        return FL_OK;
    }
    return fl__err(FL_ECORRUPT, "'%s': tensor '%s' is missing", path, name);
}
