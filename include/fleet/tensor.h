/*
 * fleet/tensor.h - dense tensors, one-level LoD and SelectedRows.
 *
 * A tensor owns one contiguous, 64-byte aligned buffer of `numel` elements of its dtype,
 * row-major.  Two optional annotations ride on a tensor:
 *  - LoD (level of detail) offsets, one level: for a slot of variable-length id lists the
 *    tensor has shape [total_ids, 1] and lod = {0, n0, n0+n1, ...} (nseq+1 entries), as
 *    Paddle's lod_level=1 variables.
 *  - SelectedRows: the tensor holds `nrows` rows of a larger [height, width] matrix; the
 *    row indices are in rows[] (duplicates allowed, they add up).  Sparse gradients of
 *    embedding tables use this form.
 *
 * What this is not: a strided view library.  Every tensor is contiguous and owns its data.
 * Tensors are not thread safe; different threads may use different tensors freely.
 */
#ifndef FLEET_TENSOR_H
#define FLEET_TENSOR_H

#include "fleet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_MAX_DIMS 8

typedef enum {
    FL_FLOAT32 = 0,
    FL_INT64 = 1,
    FL_FLOAT64 = 2,
    FL_INT32 = 3,
    FL_FLOAT16 = 4,  /* AMP: cast, fc / matmul operands (docs/engine.md) */
    FL_BFLOAT16 = 5, /* AMP: cast, fc / matmul operands (docs/engine.md) */
    FL_UINT8 = 6,    /* dropout's Mask (Paddle 2.x: uint8) */
    FL_DTYPE_COUNT
} fl_dtype;

typedef struct fl_tensor fl_tensor;

/* Bytes per element of `dt` (0 for an invalid dtype). */
FL_API size_t fl_dtype_size(fl_dtype dt);
/* "float32", "int64", ... ; "invalid" otherwise. */
FL_API const char *fl_dtype_name(fl_dtype dt);
/* Parses a dtype name; returns FL_EINVAL for unknown names. */
FL_API int fl_dtype_parse(const char *name, fl_dtype *out);

/* Creates a tensor of the given dtype and shape, zero-filled.  ndim may be 0 (scalar,
 * one element).  Returns NULL with fl_last_error() set on bad arguments or no memory.
 * The caller owns the result and frees it with fl_tensor_free(). */
FL_API fl_tensor *fl_tensor_create(fl_dtype dt, int ndim, const int64_t *shape);
/* Same, copying numel elements from `data`. */
FL_API fl_tensor *fl_tensor_from_data(fl_dtype dt, int ndim, const int64_t *shape, const void *data);
/* Frees the tensor (NULL is ignored). */
FL_API void fl_tensor_free(fl_tensor *t);

/* Changes shape (and dtype); the buffer is reallocated only when it must grow.  Contents
 * are unspecified after a resize that changes numel.  Clears LoD and rows. */
FL_API int fl_tensor_resize(fl_tensor *t, fl_dtype dt, int ndim, const int64_t *shape);
/* Deep copy of src into dst (shape, dtype, data, LoD, rows). */
FL_API int fl_tensor_copy(fl_tensor *dst, const fl_tensor *src);

FL_API fl_dtype fl_tensor_dtype(const fl_tensor *t);
FL_API int fl_tensor_ndim(const fl_tensor *t);
/* Dimension i (negative counts from the end); 0 if out of range. */
FL_API int64_t fl_tensor_dim(const fl_tensor *t, int i);
FL_API const int64_t *fl_tensor_shape(const fl_tensor *t);
FL_API int64_t fl_tensor_numel(const fl_tensor *t);
FL_API size_t fl_tensor_nbytes(const fl_tensor *t);
/* The data, writable.  Each call marks the tensor as written (caches derived from it, such
 * as an inference program's folded filters, are recomputed on the next run): write through
 * the pointer before the next run that reads the tensor, and call again to write after it.
 * fl_tensor_cdata is the read-only view and marks nothing. */
FL_API void *fl_tensor_data(fl_tensor *t);
FL_API const void *fl_tensor_cdata(const fl_tensor *t);
/* Typed views, writable as fl_tensor_data; NULL if the dtype differs. */
FL_API float *fl_tensor_f32(fl_tensor *t);
FL_API int64_t *fl_tensor_i64(fl_tensor *t);

/* LoD: sets one level of offsets (copied).  offsets[0] must be 0, non-decreasing, and
 * offsets[n-1] must equal dim 0.  n = number of sequences + 1. */
FL_API int fl_tensor_set_lod(fl_tensor *t, const int64_t *offsets, int64_t n);
/* Returns the LoD offsets and their count (NULL, 0 if none). */
FL_API const int64_t *fl_tensor_lod(const fl_tensor *t, int64_t *n);

/* SelectedRows: marks t as `nrows` rows (t's dim 0) of a [height, width] matrix with the
 * given row indices (copied).  Passing rows == NULL clears the SelectedRows form. */
FL_API int fl_tensor_set_rows(fl_tensor *t, const int64_t *rows, int64_t nrows, int64_t height);
/* Returns row indices (NULL if t is dense), their count and the full height. */
FL_API const int64_t *fl_tensor_rows(const fl_tensor *t, int64_t *nrows, int64_t *height);
FL_API int fl_tensor_is_rows(const fl_tensor *t);

/* Writes "float32[128, 32]" into buf. */
FL_API void fl_tensor_describe(const fl_tensor *t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
