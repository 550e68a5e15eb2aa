/*
 * client_hb.c - how a worker tells a slow server from a gone one.  The heartbeat thread
 * sends a small request to every server each heartbeat_ms on a connection of its own and
 * collects the answers without ever blocking on one server (a stopped server keeps one
 * heartbeat unanswered and nothing more); each answer stamps the server's alive_ns.  The
 * servers answer heartbeats in their loop thread, so a busy server still answers.
 *
 * Requests wait on their connection with a watch (fl__net_conn_set_watch): a server that
 * has answered nothing - no byte of the reply, no heartbeat, no connect - for
 * server_timeout_ms is stopped, hung or cut off, and the request fails at once naming it;
 * one that answers heartbeats is only slow and gets the request's whole deadline.  When
 * this process itself did not run for a while (SIGSTOP, a debugger, a starved machine),
 * every server gets a fresh window from the moment it runs again, and a deadline that
 * passed meanwhile is not blamed on the server.
 */
#include <stdio.h>
#include <time.h>

#include "../net/net_internal.h"
#include "ps_internal.h"

#define STALL_NS 2000000000ull /* a heartbeat period overrun by this much: this process was stopped */

static void note_resumed(fl_ps_client *c, uint64_t now, uint64_t stalled_ns)
{
    atomic_store(&c->resumed_ns, now);
    FL_WARN(FL_SUB_PS,
            "worker %d: this process did not run for %.1f s (stopped or starved); the servers get a fresh "
            "%d ms to answer",
            c->o.worker_rank, (double)stalled_ns / 1e9, c->o.server_timeout_ms);
}

static void hb_drop(fl__ps_csrv *sv)
{
    fl_net_conn_free(sv->hb);
    sv->hb = NULL;
    sv->hb_id = 0;
    sv->hb_got = 0;
}

/* Takes the answer to sv's outstanding heartbeat if it has come. */
static void hb_collect(fl__ps_csrv *sv, uint64_t now)
{
    while (sv->hb_id && sv->hb_got < sizeof sv->hb_rx) {
        size_t k;
        if (fl_net_try_recv(sv->hb, sv->hb_rx + sv->hb_got, sizeof sv->hb_rx - sv->hb_got, &k) != FL_OK) {
            FL_DEBUG(FL_SUB_PS, "heartbeat to %s: %s", sv->label, fl_last_error());
            hb_drop(sv);
            return;
        }
        if (!k) return;
        sv->hb_got += k;
    }
    if (!sv->hb_id) return;
    fl__ps_hdr h;
    /* an error answer means the server is ending: its requests say why */
    if (fl__ps_hdr_decode(sv->hb_rx, FL__PS_MSG_MAX + 8, &h) != FL_OK || (h.flags & FL__PS_F_ERROR) || h.len ||
        h.req_id != sv->hb_id || !(h.flags & FL__PS_F_REPLY)) {
        FL_DEBUG(FL_SUB_PS, "heartbeat to %s: unexpected answer; reconnecting", sv->label);
        hb_drop(sv);
        return;
    }
    atomic_store(&sv->alive_ns, now);
    sv->hb_id = 0;
    sv->hb_got = 0;
}

static void *heartbeat_main(void *arg)
{
    fl_ps_client *c = arg;
    uint64_t id = 0, period = (uint64_t)c->o.heartbeat_ms * 1000000ull;
    int64_t connect_ms = c->o.heartbeat_ms < 1000 ? c->o.heartbeat_ms : 1000;
    pthread_mutex_lock(&c->hb_mu);
    while (!c->hb_quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + period;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        uint64_t slept = fl__now_ns();
        pthread_cond_timedwait(&c->hb_cv, &c->hb_mu, &ts);
        if (c->hb_quit) break;
        pthread_mutex_unlock(&c->hb_mu);
        uint64_t now = fl__now_ns();
        if (now - slept > period + STALL_NS) note_resumed(c, now, now - slept - period);
        for (int i = 0; i < c->ns; i++) {
            fl__ps_csrv *sv = &c->srv[i];
            if (!sv->hb) {
                if (fl_net_connect(sv->host, sv->port, &c->auth, fl_net_deadline(connect_ms), &sv->hb) != FL_OK) {
                    FL_DEBUG(FL_SUB_PS, "heartbeat to %s: %s", sv->label, fl_last_error());
                    sv->hb = NULL;
                    continue;
                }
                fl_net_conn_set_label(sv->hb, sv->label);
                atomic_store(&sv->alive_ns, fl__now_ns()); /* it ran the handshake */
            }
            hb_collect(sv, fl__now_ns());
            if (!sv->hb || sv->hb_id) continue; /* the last one is still unanswered: wait for it */
            uint8_t h[FL__PS_HDR];
            fl__ps_hdr_encode(h, FL__PS_HEARTBEAT, 0, ++id, 0);
            if (fl_net_send_all(sv->hb, h, sizeof h, fl_net_deadline(100)) != FL_OK) {
                FL_DEBUG(FL_SUB_PS, "heartbeat to %s: %s", sv->label, fl_last_error());
                hb_drop(sv);
                continue;
            }
            sv->hb_id = id;
        }
        pthread_mutex_lock(&c->hb_mu);
    }
    pthread_mutex_unlock(&c->hb_mu);
    return NULL;
}

int fl__ps_client_hb_start(fl_ps_client *c)
{
    uint64_t now = fl__now_ns();
    for (int i = 0; i < c->ns; i++) atomic_store(&c->srv[i].alive_ns, now);
    if (c->o.heartbeat_ms <= 0) return FL_OK;
    if (pthread_create(&c->hb_thread, NULL, heartbeat_main, c) != 0)
        return fl__err(FL_EIO, "worker %d: cannot start the heartbeat thread", c->o.worker_rank);
    c->hb_started = 1;
    return FL_OK;
}

void fl__ps_client_hb_stop(fl_ps_client *c)
{
    if (!c->hb_started) return;
    pthread_mutex_lock(&c->hb_mu);
    c->hb_quit = 1;
    pthread_cond_signal(&c->hb_cv);
    pthread_mutex_unlock(&c->hb_mu);
    pthread_join(c->hb_thread, NULL);
    c->hb_started = 0;
    for (int i = 0; i < c->ns; i++) hb_drop(&c->srv[i]);
}

/* ---- the requests' side ------------------------------------------------------------------------- */

/* The latest sign of life of sv: its answers, the progress of this wait, this process's
 * own return from a stop. */
static uint64_t last_sign(fl_ps_client *c, fl__ps_csrv *sv, uint64_t since)
{
    uint64_t a = atomic_load(&sv->alive_ns), r = atomic_load(&c->resumed_ns);
    if (a > since) since = a;
    return r > since ? r : since;
}

int fl__ps_client_watch(void *arg, fl_net_conn *nc, uint64_t idle_ns, uint64_t stalled_ns)
{
    fl__ps_csrv *sv = arg;
    fl_ps_client *c = sv->client;
    (void)nc;
    uint64_t now = fl__now_ns();
    if (stalled_ns) note_resumed(c, now, stalled_ns);
    if (c->o.heartbeat_ms <= 0 || c->o.server_timeout_ms <= 0) return FL_OK;
    uint64_t last = last_sign(c, sv, now - idle_ns);
    /* alive_ns and resumed_ns are the heartbeat thread's clock: they may be after now */
    uint64_t quiet = fl__ns_since(now, last);
    if (quiet <= (uint64_t)c->o.server_timeout_ms * 1000000ull) return FL_OK;
    sv->gone = 1;
    return fl__err(FL_EREMOTE,
                   "%s has answered nothing, not even a heartbeat, for %.1f s: it is stopped, hung or cut "
                   "off (FLEET_PS_SERVER_TIMEOUT_MS is %d)",
                   sv->label, (double)quiet / 1e9, c->o.server_timeout_ms);
}

int fl__ps_client_timeout_error(fl_ps_client *c, int server, const char *what)
{
    fl__ps_csrv *sv = &c->srv[server];
    uint64_t now = fl__now_ns(), r = atomic_load(&c->resumed_ns);
    char low[512];
    snprintf(low, sizeof low, "%s", fl_last_error());
    if (r && fl__ns_since(now, r) < 2000000000ull)
        return fl__err(FL_ETIMEDOUT,
                       "the deadline of %s to %s passed while this worker (%d) itself was stopped or "
                       "starved: %s",
                       what, sv->label, c->o.worker_rank, low);
    if (c->o.heartbeat_ms > 0 &&
        fl__ns_since(now, atomic_load(&sv->alive_ns)) < 3ull * (uint64_t)c->o.heartbeat_ms * 1000000ull)
        return fl__err(FL_ETIMEDOUT,
                       "%s did not answer %s within its deadline, though it answers heartbeats (slow or "
                       "overloaded): %s",
                       sv->label, what, low);
    return fl__err(FL_ETIMEDOUT, "%s", low);
}
