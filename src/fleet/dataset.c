/*
 * dataset.c - datasets across the workers: the exchange behind global_shuffle and the
 * summed memory size, on the workers' communicator (fl__fleet_worker_ring).
 */
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "fleet_internal.h"

/* alltoallv by one broadcast per rank: root r broadcasts its send buffers back to back
 * (each padded to 8 bytes, carried as int64), everyone keeps its own part.  The n x n
 * size matrix goes first by allgather. */
static int alltoallv(void *ctx, const void *const *send, const size_t *send_len, void **recv, size_t *recv_len)
{
    fl_ring *c = ctx;
    const int n = fl__ring_size(c), me = fl__ring_rank(c);
    int64_t *mine = calloc((size_t)n, sizeof *mine), *all = calloc((size_t)n * (size_t)n, sizeof *all);
    int st = mine && all ? FL_OK : fl__err(FL_ENOMEM, "global shuffle: out of memory");
    for (int i = 0; st == FL_OK && i < n; i++) mine[i] = (int64_t)send_len[i];
    if (st == FL_OK) st = fl__ring_allgather(c, mine, all, (size_t)n, FL_INT64);
    for (int i = 0; i < n; i++) recv[i] = NULL, recv_len[i] = 0;
    for (int r = 0; st == FL_OK && r < n; r++) {
        size_t total = 0, off = 0;
        for (int j = 0; j < n; j++) total += ((size_t)all[r * n + j] + 7) & ~(size_t)7;
        for (int j = 0; j < me; j++) off += ((size_t)all[r * n + j] + 7) & ~(size_t)7;
        int64_t *buf = malloc(total ? total : 8);
        if (!buf) {
            st = fl__err(FL_ENOMEM, "global shuffle: out of memory for %zu bytes from worker %d", total, r);
            break;
        }
        if (r == me) {
            size_t at = 0;
            for (int j = 0; j < n; j++) {
                if (send_len[j]) memcpy((char *)buf + at, send[j], send_len[j]);
                size_t pad = ((send_len[j] + 7) & ~(size_t)7) - send_len[j];
                memset((char *)buf + at + send_len[j], 0, pad);
                at += send_len[j] + pad;
            }
        }
        st = fl__ring_broadcast(c, buf, total / 8, FL_INT64, r);
        size_t len = (size_t)all[r * n + me];
        if (st == FL_OK) {
            recv[r] = malloc(len ? len : 1);
            if (!recv[r]) st = fl__err(FL_ENOMEM, "global shuffle: out of memory");
            else if (len) memcpy(recv[r], (char *)buf + off, len);
            recv_len[r] = len;
        }
        free(buf);
    }
    if (st != FL_OK)
        for (int i = 0; i < n; i++) {
            free(recv[i]);
            recv[i] = NULL;
        }
    free(mine);
    free(all);
    return st;
}

int fleet_dataset_global_shuffle(fleet_t *f, fl_dataset *ds, uint64_t seed)
{
    if (!f || f->magic != FLEET_MAGIC)
        return fl__err_handle(f, "fleet_dataset_global_shuffle: fleet handle is NULL or invalid");
    if (!ds) return fl__err(FL_EINVAL, "fleet_dataset_global_shuffle: dataset is NULL");
    FL_CHECK(fl__fleet_worker_ring(f, "fleet_dataset_global_shuffle"));
    if (!f->ring || fl__ring_size(f->ring) <= 1) return fl_dataset_local_shuffle(ds, seed);
    fl_data_exchange ex = {fl__ring_rank(f->ring), fl__ring_size(f->ring), f->ring, alltoallv};
    return fl_dataset_global_shuffle(ds, &ex, seed);
}

int64_t fleet_dataset_memory_data_size(fleet_t *f, const fl_dataset *ds)
{
    if (!f || f->magic != FLEET_MAGIC || !ds) {
        fl__err(FL_EINVAL, "fleet_dataset_memory_data_size: fleet handle or dataset is NULL or invalid");
        return -1;
    }
    if (fl__fleet_worker_ring(f, "fleet_dataset_memory_data_size") != FL_OK) return -1;
    int64_t n = fl_dataset_get_memory_data_size(ds);
    if (n < 0) return -1;
    if (f->ring && fl__ring_allreduce(f->ring, &n, 1, FL_INT64, "sum") != FL_OK) return -1;
    return n;
}
