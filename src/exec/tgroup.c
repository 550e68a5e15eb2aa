/*
 * tgroup.c - the trainer threads of one pass as a group that ops can meet in.
 *
 * fl_exe_train_from_dataset starts one group per pass: every trainer thread enters it
 * before its first batch and leaves it after its last (or on its first error).  An op
 * kernel that must act once per worker step rather than once per thread (half-async's
 * ps_recv: one flush and one pull for all the threads' gradients, Paddle's
 * HalfAsyncCommunicator barrier) calls fl__tgroup_meet: the call returns in every thread
 * once all the threads still in the pass have arrived and the last one to arrive has run
 * `leader` for them.  A thread that leaves the pass completes a meeting the others are
 * waiting in, so a thread that runs out of data or fails never strands the rest.
 *
 * A kernel run outside a pass (fl_exe_run from the caller's own loop) has no group:
 * fl__tgroup_meet then runs `leader` at once in the calling thread.
 *
 * Waiting: the waiters sleep until the meeting completes; it completes when the slowest
 * thread arrives or leaves, and each of those threads is inside calls with their own
 * deadlines (the parameter-server client's), so the wait is bounded by them.
 */
#include <stdio.h>

#include "exec_internal.h"

static _Thread_local fl__tgroup *cur;

void fl__tgroup_init(fl__tgroup *g, int threads)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->active = threads;
    g->arrived = 0;
    g->gen = 0;
    g->st = FL_OK;
    g->leader = NULL;
    g->arg = NULL;
}

void fl__tgroup_destroy(fl__tgroup *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

void fl__tgroup_enter(fl__tgroup *g) { cur = g; }

/* Runs the pending meeting's leader and wakes its waiters (mu held). */
static void complete(fl__tgroup *g)
{
    g->st = g->leader(g->arg);
    if (g->st != FL_OK) snprintf(g->msg, sizeof g->msg, "%s", fl_last_error());
    g->arrived = 0;
    g->leader = NULL;
    g->arg = NULL;
    g->gen++;
    pthread_cond_broadcast(&g->cv);
}

void fl__tgroup_leave(fl__tgroup *g)
{
    if (cur == g) cur = NULL;
    pthread_mutex_lock(&g->mu);
    g->active--;
    if (g->arrived > 0 && g->arrived >= g->active) complete(g);
    pthread_mutex_unlock(&g->mu);
}

int fl__tgroup_meet(int (*leader)(void *arg), void *arg)
{
    fl__tgroup *g = cur;
    if (!g) return leader(arg);
    pthread_mutex_lock(&g->mu);
    if (g->arrived == 0) {
        /* the first to arrive names the work; it waits here, so `arg` outlives the meeting */
        g->leader = leader;
        g->arg = arg;
    }
    g->arrived++;
    const uint64_t gen = g->gen;
    if (g->arrived >= g->active) complete(g);
    else
        while (g->gen == gen) pthread_cond_wait(&g->cv, &g->mu);
    int st = g->st;
    if (st != FL_OK) fl__err(st, "%s", g->msg);
    pthread_mutex_unlock(&g->mu);
    return st;
}
