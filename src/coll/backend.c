/*
 * backend.c - the registry of collective backends and the choice of one per communicator,
 * made once in fl_coll_create: the backend named by fl_coll_opts.backend or
 * FLEET_COLL_BACKEND, or else the first row of the registry that every rank can use and
 * that accepts in its setup.  With the rows below that is: shared memory when every rank can
 * attach it and disable_shm is not set, else TCP; MPI only when named.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "backend.h"

/* The registry.  To add a backend, write its file (see the recipe at the top of
 * backend.h) and add one row here.  The order matters for the automatic choice only: it
 * takes the first row available on every rank whose setup accepts; "tcp" is available
 * everywhere and always accepts, so a row placed after it runs only when named.  At most
 * 32 rows (the setup message carries one bit per row). */
static const fl__coll_backend *const backends[] = {
    &fl__coll_backend_shm, /* one host: a shared-memory segment */
    &fl__coll_backend_tcp, /* anywhere: the TCP connections */
    &fl__coll_backend_mpi, /* under mpirun, only when named: MPI's collectives */
};
#define NBACKENDS ((int)(sizeof backends / sizeof backends[0]))
_Static_assert(NBACKENDS >= 1 && NBACKENDS <= 32, "one bit per backend in the setup message");

/* "shm, tcp, mpi" */
static void list_names(char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < NBACKENDS && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", backends[i]->name);
}

int fl__coll_backend_pick(const fl_coll *c, const fl_coll_opts *o, const fl__coll_backend **named, uint32_t *usable,
                          uint64_t *request_hash)
{
    const char *name = o->backend, *src = "fl_coll_opts.backend";
    if (!name || !*name) {
        FL_CHECK(fl__env_str("FLEET_COLL_BACKEND", "auto", &name));
        src = "FLEET_COLL_BACKEND";
    }
    *named = NULL;
    if (strcasecmp(name, "auto")) {
        for (int i = 0; i < NBACKENDS && !*named; i++)
            if (!strcasecmp(name, backends[i]->name)) *named = backends[i];
        if (!*named) {
            char list[256];
            list_names(list, sizeof list);
            return fl__err(FL_EINVAL,
                           "fl_coll_create: unknown collective backend '%s' in %s (registered backends: "
                           "%s; or auto)",
                           name, src, list);
        }
        int st = (*named)->available ? (*named)->available(c, o) : FL_OK;
        if (st)
            return fl__err(st, "fl_coll_create: the '%s' collective backend (from %s) cannot be used: %s", (*named)->name,
                           src, fl_last_error());
    }
    const char *canon = *named ? (*named)->name : "auto";
    *request_hash = fl__hash_bytes(canon, strlen(canon));
    *usable = 0;
    for (int i = 0; i < NBACKENDS; i++) {
        const fl__coll_backend *b = backends[i];
        if (!b->available || b->available(c, o) == FL_OK) {
            *usable |= 1u << i;
        } else {
            if (!*named && c->size > 1)
                FL_INFO(FL_SUB_COLL, "rank %d: collective backend '%s' not used: %s", c->rank, b->name, fl_last_error());
            fl_clear_error();
        }
    }
    return FL_OK;
}

int fl__coll_backend_setup(fl_coll *c, const fl__coll_backend *named, uint32_t usable_all, uint64_t deadline_ns)
{
    for (int i = 0; i < NBACKENDS; i++) {
        const fl__coll_backend *b = backends[i];
        if (named ? b != named : !((usable_all >> i) & 1u)) continue;
        int used = 1;
        if (b->setup) FL_CHECK(b->setup(c, named != NULL, deadline_ns, &used));
        if (used) {
            c->backend = b;
            return FL_OK;
        }
        if (named)
            return fl__err(FL_EPROTO,
                           "fl_coll_create: the '%s' collective backend declined to set up although "
                           "it was named",
                           b->name);
    }
    return fl__err(FL_EINVAL, "fl_coll_create: no collective backend is usable on every rank");
}

const char *fl_coll_backend_name(const fl_coll *c)
{
    if (!c || c->magic != FL_COLL_MAGIC) {
        fl__err_handle(c, "fl_coll_backend_name: communicator is NULL or invalid");
        return NULL;
    }
    return c->backend ? c->backend->name : "self";
}

int fl_coll_uses_shm(const fl_coll *c)
{
    if (!c || c->magic != FL_COLL_MAGIC) {
        fl__err_handle(c, "fl_coll_uses_shm: communicator is NULL or invalid");
        return 0;
    }
    return c->size > 1 && c->backend == &fl__coll_backend_shm;
}
