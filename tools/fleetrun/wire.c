/* wire.c - the rendezvous messages: framing, JSON fields, node descriptions, rank order. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleetrun.h"

void fr_auth(fl_net_auth *a, uint32_t role)
{
    *a = (fl_net_auth){
        .secret = J.secret.bytes, .secret_len = J.secret.len, .service = FR_NET_SERVICE, .role = role, .rank = -1};
}

const char *fr_msg_name(int type)
{
    static const char *const names[FR_MSG_COUNT] = {"?",       "JOIN", "LAYOUT",       "HEARTBEAT", "FAILED", "STATUS",
                                                    "RESTART", "STOP", "WORKERS_DONE", "END",       "ERROR"};
    return type > 0 && type < FR_MSG_COUNT ? names[type] : "unknown";
}

int fr_msg_send(fl_net_conn *c, int type, const fl_buf *body)
{
    if (body && body->failed) return fl__err(FL_ENOMEM, "out of memory building a %s message", fr_msg_name(type));
    return fl_net_send_frame(c, (uint16_t)type, 0, body ? body->p : NULL, body ? body->len : 0, fl_net_deadline(FR_IO_MS));
}

int fr_msg_recv(fl_net_conn *c, int *type, fl_json *j)
{
    uint64_t dl = fl_net_deadline(FR_IO_MS);
    fl_net_frame h;
    *j = (fl_json){.src = fl_net_conn_label(c), .bad = FL_EPROTO};
    FL_CHECK(fl_net_recv_frame_header(c, FR_MSG_MAX, &h, dl));
    *type = h.type;
    if (h.type < 1 || h.type >= FR_MSG_COUNT)
        return fl__err(FL_EPROTO, "%s sent a message of unknown type %u", fl_net_conn_label(c), h.type);
    if (!h.len) return FL_OK;
    char *body = malloc(h.len);
    if (!body) return fl__err(FL_ENOMEM, "out of memory for a %llu-byte message", (unsigned long long)h.len);
    int st = fl_net_recv_all(c, body, h.len, dl);
    if (st == FL_OK) st = fl__json_parse(j, body, h.len, FR_MSG_MAX, 4 * MAX_TOTAL + 8 * MAX_NODES + 64);
    free(body);
    if (st == FL_OK && fl__json_obj(j, j->root, "message") != FL_OK) st = FL_EPROTO;
    return st;
}

int fr_get_int(const fl_json *j, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int *out)
{
    int64_t v;
    FL_CHECK(fl__json_int(j, fl__json_find(obj, key), key, lo, hi, &v));
    *out = (int)v;
    return FL_OK;
}

int fr_get_str(const fl_json *j, const cJSON *obj, const char *key, size_t max, const char **out)
{
    FL_CHECK(fl__json_str(j, fl__json_find(obj, key), key, out));
    if (strlen(*out) > max) return fl__json_fail(j, "key '%s' is longer than %zu characters", key, max);
    return FL_OK;
}

int fr_get_bool(const fl_json *j, const cJSON *obj, const char *key, int *out)
{
    return fl__json_bool(j, fl__json_find(obj, key), key, out);
}

int fr_get_node(const fl_json *j, const cJSON *obj, fr_node *n)
{
    static const char *const key[2] = {"w", "s"};
    const char *ip, *id;
    struct in_addr a;
    memset(n, 0, sizeof *n);
    FL_CHECK(fl__json_obj(j, obj, "node"));
    FL_CHECK(fr_get_str(j, obj, "ip", INET_ADDRSTRLEN - 1, &ip));
    FL_CHECK(fr_get_str(j, obj, "id", FR_ID_MAX - 1, &id));
    if (inet_pton(AF_INET, ip, &a) != 1) return fl__json_fail(j, "'%s' is not an IPv4 address", ip);
    snprintf(n->ip, sizeof n->ip, "%s", ip);
    snprintf(n->id, sizeof n->id, "%s", id);
    for (int r = WORKER; r <= SERVER; r++) {
        const cJSON *arr = fl__json_find(obj, key[r]), *v;
        FL_CHECK(fl__json_arr(j, arr, key[r], MAX_LOCAL, &n->cnt[r]));
        if (n->cnt[r] && !(n->port[r] = calloc((size_t)n->cnt[r], sizeof(int)))) {
            fr_node_free(n);
            return fl__err(FL_ENOMEM, "out of memory");
        }
        int k = 0;
        cJSON_ArrayForEach(v, arr)
        {
            int64_t port;
            int st = fl__json_int(j, v, key[r], 1, 65535, &port);
            if (st != FL_OK) {
                fr_node_free(n);
                return st;
            }
            n->port[r][k++] = (int)port;
        }
    }
    return FL_OK;
}

void fr_put_node(fl_buf *b, const fr_node *n)
{
    fl__buf_printf(b, "\"ip\":\"%s\",\"id\":", n->ip);
    fl__json_quote(b, n->id);
    for (int r = WORKER; r <= SERVER; r++) {
        fl__buf_printf(b, ",\"%s\":[", r == WORKER ? "w" : "s");
        for (int k = 0; k < n->cnt[r]; k++) fl__buf_printf(b, "%s%d", k ? "," : "", n->port[r][k]);
        fl__buf_printf(b, "]");
    }
}

void fr_node_free(fr_node *n)
{
    free(n->port[0]), free(n->port[1]);
    n->port[0] = n->port[1] = NULL;
    n->cnt[0] = n->cnt[1] = 0;
}

int fr_node_cmp(const fr_node *a, const fr_node *b)
{
    struct in_addr x, y;
    inet_pton(AF_INET, a->ip, &x), inet_pton(AF_INET, b->ip, &y);
    uint32_t u = ntohl(x.s_addr), v = ntohl(y.s_addr);
    return u != v ? (u < v ? -1 : 1) : strcmp(a->id, b->id);
}
