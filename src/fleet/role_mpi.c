/*
 * role_mpi.c - the role of a process started by mpirun (docs/clusters.md, "MPI").  Built in
 * when the Makefile finds Open MPI (FL_HAVE_MPI); otherwise fleet_role_mpi is refused with
 * FL_EUNSUPPORTED.
 *
 * MPI carries only the start: the ranks learn each other's endpoints with one MPI_Allgather,
 * and training then runs over Fleet's own transport.  Each rank binds a listener on port 0 of
 * its address to pick a free port and publishes "host:port", the address being, by the first
 * rule that applies:
 *   1. FLEET_MPI_HOST (an address or name of this node that the other nodes reach);
 *   2. 127.0.0.1 when every rank runs on this host (gethostname() equal on all ranks);
 *   3. the first non-loopback address that gethostname() resolves to.
 * The listener is closed before the endpoints are published, and the collective communicator
 * or the server binds that port again: a listener kept open while the others start would
 * accept connections that nobody serves, whereas a closed port is refused and retried.
 * Another process could take the port in between (unlikely: the kernel hands out free ports
 * in turn); the bind then fails naming the endpoint.
 *
 * Collective mode: every rank is a worker, worker index = rank.  Parameter-server mode is
 * Paddle 1.x's MPISymetricRoleMaker: one server and one worker per node, even ranks are the
 * servers and odd ranks the workers, server index = worker index = rank / 2; the number of
 * ranks must be even.
 *
 * MPI's lifetime.  If MPI is not initialised yet, fleet_role_mpi calls MPI_Init_thread asking
 * for MPI_THREAD_SERIALIZED (Fleet calls MPI from one thread at a time: the one making the
 * role and the one freeing it, and with the "mpi" collective backend the communication
 * thread, which the ring keeps from overlapping the other collectives).  MPI is then finalised when
 * the last role made here is freed (fleet_free), or at process exit if one is never freed;
 * it cannot start again afterwards, so a later fleet_role_mpi in the same process is
 * FL_ESTATE.  A program that initialised MPI itself keeps it: Fleet never finalises it.
 * A process that exits with a non-zero status while Fleet's MPI is live does not call
 * MPI_Finalize (see at_exit): mpirun then ends the job and reports the status, where
 * MPI_Finalize would wait for a stopped or hung rank for ever.
 * These few variables mirror MPI's own process-wide state, so they are the only globals.
 *
 * Deadlines: MPI's calls have none.  mpirun ends the whole job when a rank dies, so no rank
 * waits for ever; a failure on one rank is agreed on (MPI_Allreduce) before the allgather,
 * so the others fail with it instead of waiting.
 */
#include <stdio.h>
#include <string.h>

#include "role_internal.h"

#ifndef FL_HAVE_MPI

int fleet_role_mpi(int is_collective, fleet_role **out)
{
    (void)is_collective;
    if (out) *out = NULL;
    return fl__err(FL_EUNSUPPORTED, "fleet_role_mpi: built without MPI (install libopenmpi-dev and rebuild)");
}

void fl__role_mpi_release(fleet_role *r) { r->mpi_ref = 0; }

#else

#include <arpa/inet.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#define EP_MAX (FL_NET_HOST_MAX + 8)

static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static int mpi_ours;  /* 1: Fleet called MPI_Init_thread, and finalises */
static int mpi_refs;  /* live roles made by fleet_role_mpi */
static pid_t mpi_pid; /* the process that initialised: a forked child never finalises */

static void finalize_locked(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (mpi_ours && getpid() == mpi_pid && !fin) {
        FL_DEBUG(FL_SUB_FLEET, "MPI_Finalize");
        MPI_Finalize();
    }
    mpi_ours = 0;
}

/* At exit (on_exit: the status is known).  A process that fails leaves the MPI job at once,
 * without MPI_Finalize: MPI_Finalize waits for every rank, and a rank that is stopped or hung
 * (the very failure this process may be reporting) would hold it, and the job, for ever.
 * mpirun sees a rank exit non-zero without finalising, ends every other rank and reports
 * this one's status.  (Not MPI_Abort: when several ranks abort at once, Open MPI 4.1's
 * mpirun was seen to hang with every rank already gone, 2 runs in 5 of test_coll_mpi.) */
static void at_exit(int status, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mpi_mu);
    if (status != 0 && mpi_ours && getpid() == mpi_pid) {
        FL_DEBUG(FL_SUB_FLEET, "exit status %d: leaving the MPI job without MPI_Finalize", status);
        mpi_ours = 0;
    }
    finalize_locked();
    pthread_mutex_unlock(&mpi_mu);
}

static int acquire(fleet_role *r)
{
    static int registered;
    int init = 0, fin = 0, st = FL_OK;
    pthread_mutex_lock(&mpi_mu);
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) {
        st = fl__err(FL_ESTATE, "fleet_role_mpi: MPI was already finalized in this process (by fleet_free of an earlier "
                                "MPI role, or by the program), and MPI cannot start twice: keep one fleet for the "
                                "program's lifetime");
    } else if (!init) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
            st = fl__err(FL_EIO, "fleet_role_mpi: MPI_Init_thread failed (was the program started by Open MPI's mpirun?)");
        } else {
            mpi_ours = 1;
            mpi_pid = getpid();
            if (!registered) registered = on_exit(at_exit, NULL) == 0;
            if (provided < MPI_THREAD_SERIALIZED)
                FL_WARN(FL_SUB_FLEET,
                        "MPI provides thread level %d only: free the fleet from the thread that made the role", provided);
        }
    }
    if (st == FL_OK) {
        mpi_refs++;
        r->mpi_ref = 1;
    }
    pthread_mutex_unlock(&mpi_mu);
    return st;
}

void fl__role_mpi_release(fleet_role *r)
{
    pthread_mutex_lock(&mpi_mu);
    r->mpi_ref = 0;
    if (--mpi_refs == 0) finalize_locked();
    pthread_mutex_unlock(&mpi_mu);
}

/* The first non-loopback address of name, numeric. */
static int resolve_host(const char *name, char *out, size_t cap)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0)
        return fl__err(FL_EIO, "fleet_role_mpi: cannot resolve this host's name '%s': %s: set FLEET_MPI_HOST", name,
                       gai_strerror(rc));
    int st = FL_ENOTFOUND;
    for (struct addrinfo *a = res; a && st != FL_OK; a = a->ai_next) {
        int loop = a->ai_family == AF_INET
                       ? (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127
                       : a->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
        if (!loop && getnameinfo(a->ai_addr, a->ai_addrlen, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) == 0) st = FL_OK;
    }
    freeaddrinfo(res);
    if (st != FL_OK)
        return fl__err(FL_ENOTFOUND,
                       "fleet_role_mpi: this host's name '%s' resolves only to loopback addresses while the ranks "
                       "run on several hosts: set FLEET_MPI_HOST to an address of this node that the others reach",
                       name);
    return FL_OK;
}

/* This rank's listener, on the address chosen by the rules at the top of this file. */
static int bind_own(MPI_Comm comm, int size, fl_net_listener **l)
{
    char hn[FL_NET_HOST_MAX] = "", addr[FL_NET_HOST_MAX];
    const char *want;
    if (gethostname(hn, sizeof hn - 1) != 0) snprintf(hn, sizeof hn, "localhost");
    char *all = calloc((size_t)size, sizeof hn);
    if (!all) return fl__err(FL_ENOMEM, "fleet_role_mpi: out of memory");
    int mrc = MPI_Allgather(hn, (int)sizeof hn, MPI_CHAR, all, (int)sizeof hn, MPI_CHAR, comm), one_host = 1;
    for (int i = 1; mrc == MPI_SUCCESS && i < size; i++) one_host &= !strcmp(all, all + (size_t)i * sizeof hn);
    free(all);
    if (mrc != MPI_SUCCESS) return fl__err(FL_EIO, "fleet_role_mpi: MPI_Allgather of the host names failed (code %d)", mrc);
    FL_CHECK(fl__env_str("FLEET_MPI_HOST", NULL, &want));
    if (!want && !one_host) FL_CHECK(resolve_host(hn, addr, sizeof addr));
    const char *host = want ? want : one_host ? "127.0.0.1" : addr;
    int st = fl_net_listen(host, 0, l);
    if (st != FL_OK && want) return fl__err(st, "fleet_role_mpi: FLEET_MPI_HOST='%s': %s", want, fl_last_error());
    return st;
}

static int even_is_server(int task, void *arg)
{
    (void)arg;
    return task % 2 == 0;
}

static int make_role(fleet_role *r, MPI_Comm comm, int rank, int size)
{
    fl_net_listener *l = NULL;
    char mine[EP_MAX] = "", *all = NULL, **eps = NULL;
    int st = bind_own(comm, size, &l);
    if (st == FL_OK) snprintf(mine, sizeof mine, "%s", fl_net_listener_endpoint(l));
    fl_net_listener_free(l); /* before publishing: see the top of this file */
    /* every rank learns whether all got this far, and which failed first */
    int failed = st == FL_OK ? size : rank, first = size;
    if (MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        st = st != FL_OK ? st : fl__err(FL_EIO, "fleet_role_mpi: MPI_Allreduce failed");
    else if (st == FL_OK && first < size)
        st = fl__err(FL_EREMOTE, "fleet_role_mpi: rank %d failed to bind its listener (see its log)", first);
    if (st == FL_OK && !(all = calloc((size_t)size, EP_MAX))) st = fl__err(FL_ENOMEM, "fleet_role_mpi: out of memory");
    if (st == FL_OK && MPI_Allgather(mine, EP_MAX, MPI_CHAR, all, EP_MAX, MPI_CHAR, comm) != MPI_SUCCESS)
        st = fl__err(FL_EIO, "fleet_role_mpi: MPI_Allgather of the endpoints failed");
    if (st == FL_OK && !(eps = calloc((size_t)size, sizeof *eps))) st = fl__err(FL_ENOMEM, "fleet_role_mpi: out of memory");
    for (int i = 0; st == FL_OK && i < size; i++) eps[i] = all + (size_t)i * EP_MAX;
    if (st == FL_OK) st = fl__role_from_tasks(r, eps, size, rank, even_is_server, NULL);
    if (st == FL_OK)
        FL_INFO(FL_SUB_FLEET, "MPI rank %d of %d listens on %s: %s %d", rank, size, mine,
                r->kind == FLEET_ROLE_SERVER ? "server" : "worker",
                r->kind == FLEET_ROLE_SERVER ? r->server_index : r->worker_index);
    free(eps);
    free(all);
    return st;
}

/* The launcher's process count must be MPI_COMM_WORLD's: else another MPI's launcher started
 * this Open MPI program and every process is a world of its own. */
static int check_launcher(int size)
{
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v;
        int64_t n;
        FL_CHECK(fl__env_str(names[i], NULL, &v));
        if (!v) continue;
        FL_CHECK(fl__env_int(names[i], 1, 1, INT32_MAX, &n));
        if (n != size)
            return fl__err(FL_EINVAL,
                           "fleet_role_mpi: MPI_COMM_WORLD has %d rank%s but the launcher started %s=%lld processes: "
                           "start the program with the mpirun of the MPI it was built with (Open MPI)",
                           size, size == 1 ? "" : "s", names[i], (long long)n);
    }
    return FL_OK;
}

int fleet_role_mpi(int is_collective, fleet_role **out)
{
    if (!out) return fl__err(FL_EINVAL, "fleet_role_mpi: out is NULL");
    *out = NULL;
    fleet_role *r = fl__role_alloc(is_collective);
    if (!r) return FL_ENOMEM;
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0, size = 1;
    int st = acquire(r);
    /* a private communicator whose errors come back as codes instead of aborting the job */
    if (st == FL_OK && MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS)
        st = fl__err(FL_EIO, "fleet_role_mpi: MPI_Comm_dup failed");
    if (st == FL_OK) {
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        st = check_launcher(size);
    }
    if (st == FL_OK && !is_collective && size > 1 && size % 2)
        st = fl__err(FL_EINVAL,
                     "fleet_role_mpi: parameter-server mode (MPISymetricRoleMaker) needs an even number of ranks, "
                     "one server and one worker per node (even ranks serve), but mpirun started %d",
                     size);
    if (st == FL_OK && size > 1) st = make_role(r, comm, rank, size);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    if (st != FL_OK) {
        fleet_role_free(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

#endif
