/*
 * liveness.c - the one liveness clock (see liveness.h): the stopped-self rule, the silence
 * window, the per-request deadline and the heartbeat thread shared by the collectives, the
 * parameter server and the rendezvous.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "liveness.h"

void fl__live_clock_init(fl__live_clock *k, int sub, const char *who, const char *peers, int window_ms)
{
    atomic_store(&k->resumed_ns, 0);
    k->sub = sub;
    k->window_ms = window_ms;
    snprintf(k->who, sizeof k->who, "%s", who ? who : "this process");
    snprintf(k->peers, sizeof k->peers, "%s", peers ? peers : "its peers");
}

uint64_t fl__live_stall(uint64_t due_ns, uint64_t now)
{
    return due_ns && now > due_ns + FL__LIVE_STALL_NS ? now - due_ns : 0;
}

uint64_t fl__live_note(fl__live_clock *k, uint64_t now, uint64_t stall_ns)
{
    if (!stall_ns) return 0;
    atomic_store(&k->resumed_ns, now);
    if (k->window_ms > 0)
        FL_WARN(k->sub,
                "%s: this process did not run for %.1f s (stopped or starved); %s get a fresh %d ms to be heard from",
                k->who, (double)stall_ns / 1e9, k->peers, k->window_ms);
    else
        FL_WARN(k->sub, "%s: this process did not run for %.1f s (stopped or starved); its deadlines move by as much",
                k->who, (double)stall_ns / 1e9);
    return stall_ns;
}

uint64_t fl__live_check(fl__live_clock *k, uint64_t due_ns, uint64_t now)
{
    return fl__live_note(k, now, fl__live_stall(due_ns, now));
}

uint64_t fl__live_since(const fl__live_clock *k, uint64_t heard_ns)
{
    uint64_t r = atomic_load(&((fl__live_clock *)k)->resumed_ns);
    return r > heard_ns ? r : heard_ns;
}

uint64_t fl__live_quiet(const fl__live_clock *k, uint64_t heard_ns, uint64_t now)
{
    return fl__ns_since(now, fl__live_since(k, heard_ns));
}

int fl__live_silent(const fl__live_clock *k, uint64_t heard_ns, uint64_t now, int window_ms)
{
    return window_ms > 0 && fl__live_quiet(k, heard_ns, now) > (uint64_t)window_ms * 1000000ull;
}

int fl__live_resumed_within(const fl__live_clock *k, uint64_t now, uint64_t ns)
{
    uint64_t r = atomic_load(&((fl__live_clock *)k)->resumed_ns);
    return r && fl__ns_since(now, r) < ns;
}

uint64_t fl__live_deadline_after(uint64_t *deadline_ns, uint64_t due_ns, uint64_t now)
{
    uint64_t stall = fl__live_stall(due_ns, now);
    if (stall && *deadline_ns < UINT64_MAX - stall) *deadline_ns += stall;
    return stall;
}

/* ---- the heartbeat thread ------------------------------------------------------------------------- */

static void *hb_main(void *arg)
{
    fl__live_hb *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + h->period_ns;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        uint64_t due = fl__now_ns() + h->period_ns;
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        if (h->quit) break;
        pthread_mutex_unlock(&h->mu);
        uint64_t now = fl__now_ns();
        fl__live_check(h->clock, due, now);
        h->beat(h->arg, now);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int fl__live_hb_start(fl__live_hb *h, int period_ms, fl__live_clock *clock, fl__live_beat_fn beat, void *arg)
{
    memset(h, 0, sizeof *h);
    if (period_ms <= 0) return FL_OK;
    h->period_ns = (uint64_t)period_ms * 1000000ull;
    h->clock = clock;
    h->beat = beat;
    h->arg = arg;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->th, NULL, hb_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        return fl__err(FL_EIO, "%s: cannot start the heartbeat thread", clock->who);
    }
    h->started = 1;
    return FL_OK;
}

void fl__live_hb_stop(fl__live_hb *h)
{
    if (!h->started) return;
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    h->started = 0;
}

int fl__live_watch_self(void *clock, fl_net_conn *c, uint64_t idle_ns, uint64_t stalled_ns)
{
    (void)c, (void)idle_ns;
    fl__live_note(clock, fl__now_ns(), stalled_ns);
    return FL_OK;
}
