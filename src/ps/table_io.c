/*
 * table_io.c - the pieces of checkpoint I/O shared by dense and sparse shards: a
 * safetensors header (src/io's writer) written ahead of data that is then streamed into an
 * atomic file (so a large sparse shard is never copied into memory first), and a checked
 * tensor lookup for loading.  Files are standard safetensors (8-byte header length, JSON
 * header padded to a multiple of 8 with spaces, packed little-endian data), readable by
 * NumPy and PyTorch.
 */
#include <stdio.h>
#include <string.h>

#include "ps_internal.h"

int fl__ps_st_write_header(fl__afile *f, const fl__ps_st_tensor *t, int n, const char *table)
{
    fl__st_desc d[16];
    if (n > 16) return fl__err(FL_EINVAL, "table '%s': %d tensors in a checkpoint file, at most 16", table, n);
    for (int i = 0; i < n; i++) d[i] = (fl__st_desc){t[i].name, t[i].dtype, t[i].ndim, t[i].shape};
    fl_buf b = {0};
    int st = fl__st_header(d, n, "fleet_ps_table", table, &b);
    if (st != FL_OK) st = fl__err(st, "table '%s': checkpoint header: %s", table, fl_last_error());
    else st = fl__afile_write(f, b.p, b.len);
    fl__buf_free(&b);
    return st;
}

int fl__ps_st_find(char **names, fl_tensor **tensors, int n, const char *path, const char *name, fl_dtype dt, int ndim,
                   const int64_t *shape, fl_tensor **out)
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
            return fl__err(FL_ECORRUPT, "'%s': tensor '%s' has shape [%s], expected [%s] (-1 = any)", path, name, got,
                           want);
        }
        *out = t;
        return FL_OK;
    }
    return fl__err(FL_ECORRUPT, "'%s': tensor '%s' is missing", path, name);
}
