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
 * passed meanwhile is not blamed on the server (the rules and the thread are those of
 * src/net/liveness.h).
 */
#include <stdio.h>

#include "../net/net_internal.h"
#include "ps_internal.h"

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

/* One beat: (re)connects, collects the answers that came, sends the heartbeats that are due. */
static void beat(void *arg, uint64_t now)
{
    fl_ps_client *c = arg;
    int64_t connect_ms = c->o.heartbeat_ms < 1000 ? c->o.heartbeat_ms : 1000;
    (void)now;
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
        fl__ps_hdr_encode(h, FL__PS_HEARTBEAT, 0, ++c->hb_seq, 0);
        if (fl_net_send_all(sv->hb, h, sizeof h, fl_net_deadline(100)) != FL_OK) {
            FL_DEBUG(FL_SUB_PS, "heartbeat to %s: %s", sv->label, fl_last_error());
            hb_drop(sv);
            continue;
        }
        sv->hb_id = c->hb_seq;
    }
}

int fl__ps_client_hb_start(fl_ps_client *c)
{
    uint64_t now = fl__now_ns();
    for (int i = 0; i < c->ns; i++) atomic_store(&c->srv[i].alive_ns, now);
    return fl__live_hb_start(&c->hb, c->o.heartbeat_ms, &c->live, beat, c);
}

void fl__ps_client_hb_stop(fl_ps_client *c)
{
    if (!c->hb.started) return;
    fl__live_hb_stop(&c->hb);
    for (int i = 0; i < c->ns; i++) hb_drop(&c->srv[i]);
}

/* ---- the requests' side ------------------------------------------------------------------------- */

int fl__ps_client_watch(void *arg, fl_net_conn *nc, uint64_t idle_ns, uint64_t stalled_ns)
{
    fl__ps_csrv *sv = arg;
    fl_ps_client *c = sv->client;
    (void)nc;
    uint64_t now = fl__now_ns();
    fl__live_note(&c->live, now, stalled_ns);
    if (c->o.heartbeat_ms <= 0 || c->o.server_timeout_ms <= 0) return FL_OK;
    /* the latest sign of life of sv: its answers, or the progress of this wait */
    uint64_t a = atomic_load(&sv->alive_ns), last = now - idle_ns > a ? now - idle_ns : a;
    if (!fl__live_silent(&c->live, last, now, c->o.server_timeout_ms)) return FL_OK;
    uint64_t quiet = fl__live_quiet(&c->live, last, now);
    sv->gone = 1;
    return fl__err(FL_EREMOTE,
                   "%s has answered nothing, not even a heartbeat, for %.1f s: it is stopped, hung or cut "
                   "off (FLEET_PS_SERVER_TIMEOUT_MS is %d)",
                   sv->label, (double)quiet / 1e9, c->o.server_timeout_ms);
}

int fl__ps_client_timeout_error(fl_ps_client *c, int server, const char *what)
{
    fl__ps_csrv *sv = &c->srv[server];
    uint64_t now = fl__now_ns();
    char low[512];
    snprintf(low, sizeof low, "%s", fl_last_error());
    if (fl__live_resumed_within(&c->live, now, 2 * FL__LIVE_STALL_NS))
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
