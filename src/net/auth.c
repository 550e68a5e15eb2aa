/*
 * auth.c - the job secret (environment, file, hex) and the mutual HMAC-SHA256
 * challenge-response every connection starts with.  The wire format is documented in
 * include/fleet/net.h.  Messages name the peer but never contain the secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net_internal.h"

#define AUTH_MAGIC 0x31414c46u /* "FLA1" */
#define AUTH_VERSION 1
#define HELLO_LEN FL__NET_HELLO_LEN
#define MAC_LEN 32
#define HELLO_C_LEN FL__NET_HELLO_C_LEN
#define FINISH_LEN FL__NET_FINISH_LEN
_Static_assert(HELLO_C_LEN == HELLO_LEN + MAC_LEN && FINISH_LEN == 4 + MAC_LEN, "handshake message sizes");
#define FLAG_NO_SECRET 1u

enum { FIN_OK = 0, FIN_BAD_PROOF = 1, FIN_BAD_SERVICE = 2 };

/* ---- the secret ------------------------------------------------------------------------------ */

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int fl_net_secret_from_hex(const char *hex, const char *what, fl_net_secret *out)
{
    if (!hex || !out) return fl__err(FL_EINVAL, "fl_net_secret_from_hex: hex or out is NULL");
    if (!what) what = "the job secret";
    memset(out, 0, sizeof *out);
    size_t n = strlen(hex);
    while (n && (hex[n - 1] == '\n' || hex[n - 1] == '\r' || hex[n - 1] == ' ' || hex[n - 1] == '\t')) n--;
    while (n && (*hex == ' ' || *hex == '\t' || *hex == '\n' || *hex == '\r')) hex++, n--;
    if (n % 2 || n / 2 < FL_NET_SECRET_MIN || n / 2 > FL_NET_SECRET_MAX)
        return fl__err(FL_EINVAL,
                       "%s is invalid: it has %zu characters, expected an even number of hex digits "
                       "between %d and %d (%d to %d bytes)",
                       what, n, 2 * FL_NET_SECRET_MIN, 2 * FL_NET_SECRET_MAX, FL_NET_SECRET_MIN, FL_NET_SECRET_MAX);
    for (size_t i = 0; i < n; i += 2) {
        int hi = hexval((unsigned char)hex[i]), lo = hexval((unsigned char)hex[i + 1]);
        if (hi < 0 || lo < 0) {
            fl_net_secret_clear(out);
            return fl__err(FL_EINVAL, "%s is invalid: character %zu is not a hex digit", what, hi < 0 ? i + 1 : i + 2);
        }
        out->bytes[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    out->len = n / 2;
    return FL_OK;
}

int fl_net_secret_from_file(const char *path, fl_net_secret *out)
{
    if (!path || !out) return fl__err(FL_EINVAL, "fl_net_secret_from_file: path or out is NULL");
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fl__err(FL_EIO, "cannot open job secret file '%s': %s", path, strerror(errno));
    struct stat sb;
    int st = FL_OK;
    char buf[2 * FL_NET_SECRET_MAX + 64];
    if (fstat(fd, &sb) != 0) {
        st = fl__err(FL_EIO, "cannot stat job secret file '%s': %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = fl__err(FL_EINVAL, "job secret file '%s' is not a regular file", path);
    } else if (sb.st_mode & 077) {
        st = fl__err(FL_EINVAL,
                     "job secret file '%s' has mode %04o: it must not be accessible by group or others "
                     "(run: chmod 600 '%s')",
                     path, (unsigned)(sb.st_mode & 07777), path);
    } else if (sb.st_uid != geteuid()) {
        st = fl__err(FL_EINVAL, "job secret file '%s' is owned by uid %u, not by this user (uid %u)", path,
                     (unsigned)sb.st_uid, (unsigned)geteuid());
    } else if ((size_t)sb.st_size >= sizeof buf) {
        st = fl__err(FL_EINVAL, "job secret file '%s' is too large (%lld bytes; at most %zu)", path, (long long)sb.st_size,
                     sizeof buf - 1);
    } else {
        size_t got = 0;
        for (;;) {
            ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                st = fl__err(FL_EIO, "cannot read job secret file '%s': %s", path, strerror(errno));
                break;
            }
            if (r == 0 || got + (size_t)r >= sizeof buf - 1) {
                got += (size_t)r;
                break;
            }
            got += (size_t)r;
        }
        buf[got] = 0;
        if (st == FL_OK) {
            char what[FL_NET_ADDR_MAX + 64];
            snprintf(what, sizeof what, "job secret file '%s'", path);
            st = fl_net_secret_from_hex(buf, what, out);
        }
        OPENSSL_cleanse(buf, sizeof buf);
    }
    close(fd);
    return st;
}

int fl_net_secret_from_env(fl_net_secret *out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_secret_from_env: out is NULL");
    memset(out, 0, sizeof *out);
    const char *hex = NULL, *file = NULL;
    FL_CHECK(fl__env_str("FLEET_JOB_SECRET", NULL, &hex));
    FL_CHECK(fl__env_str("FLEET_JOB_SECRET_FILE", NULL, &file));
    if (hex && file) return fl__err(FL_EINVAL, "both FLEET_JOB_SECRET and FLEET_JOB_SECRET_FILE are set; set only one");
    if (hex) return fl_net_secret_from_hex(hex, "environment variable FLEET_JOB_SECRET", out);
    if (file) return fl_net_secret_from_file(file, out);
    return fl__err(FL_ENOTFOUND,
                   "no job secret: set FLEET_JOB_SECRET (hex) or FLEET_JOB_SECRET_FILE (a file of mode 0600 holding "
                   "the hex secret); fleetrun sets one for its processes, and a launch script that starts them "
                   "itself (TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINER_ID, ...) adds this line "
                   "before it starts any: export FLEET_JOB_SECRET=$(openssl rand -hex 32)");
}

int fl_net_secret_generate(fl_net_secret *out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_net_secret_generate: out is NULL");
    memset(out, 0, sizeof *out);
    if (RAND_bytes(out->bytes, 32) != 1) return fl__err(FL_EIO, "RAND_bytes failed to make a job secret");
    out->len = 32;
    return FL_OK;
}

int fl_net_secret_to_hex(const fl_net_secret *s, char *out, size_t cap)
{
    if (!s || !out) return fl__err(FL_EINVAL, "fl_net_secret_to_hex: s or out is NULL");
    if (cap < 2 * s->len + 1) return fl__err(FL_EINVAL, "secret to hex: buffer too small");
    static const char dig[] = "0123456789abcdef";
    for (size_t i = 0; i < s->len; i++) {
        out[2 * i] = dig[s->bytes[i] >> 4];
        out[2 * i + 1] = dig[s->bytes[i] & 15];
    }
    out[2 * s->len] = 0;
    return FL_OK;
}

void fl_net_secret_clear(fl_net_secret *s)
{
    if (s) OPENSSL_cleanse(s, sizeof *s);
}

/* ---- the handshake ----------------------------------------------------------------------------- */

int fl__net_auth_check(const fl_net_auth *auth, const char *what)
{
    if (!auth) return fl__err(FL_EINVAL, "%s: auth is NULL", what);
    if (auth->secret_len > FL_NET_SECRET_MAX)
        return fl__err(FL_EINVAL, "%s: secret of %zu bytes is longer than %d", what, auth->secret_len, FL_NET_SECRET_MAX);
    if (auth->secret_len && !auth->secret) return fl__err(FL_EINVAL, "%s: secret is NULL but secret_len is set", what);
    if ((!auth->secret || !auth->secret_len) && !auth->insecure_local)
        return fl__err(FL_EINVAL,
                       "%s: no job secret given; set FLEET_JOB_SECRET or FLEET_JOB_SECRET_FILE, or "
                       "pass insecure_local to run unauthenticated on loopback only",
                       what);
    return FL_OK;
}

static void hello_encode(uint8_t *b, const fl_net_auth *a, const uint8_t nonce[32])
{
    int nosecret = !a->secret || !a->secret_len;
    fl__put_u32(b, AUTH_MAGIC);
    fl__put_u16(b + 4, AUTH_VERSION);
    fl__put_u16(b + 6, nosecret ? FLAG_NO_SECRET : 0);
    fl__put_u32(b + 8, a->service);
    fl__put_u32(b + 12, a->role);
    fl__put_u32(b + 16, (uint32_t)a->rank);
    memcpy(b + 20, nonce, 32);
}

/* HMAC-SHA256(secret, tag || a || b). */
static int mac(const fl_net_auth *a, const char *tag, const uint8_t *p1, size_t n1, const uint8_t *p2, size_t n2,
               uint8_t out[MAC_LEN])
{
    uint8_t msg[32 + HELLO_LEN + HELLO_C_LEN];
    size_t tl = strlen(tag);
    if (tl + n1 + n2 > sizeof msg) return fl__err(FL_EINVAL, "handshake transcript too long");
    memcpy(msg, tag, tl);
    memcpy(msg + tl, p1, n1);
    memcpy(msg + tl + n1, p2, n2);
    static const uint8_t empty = 0;
    const uint8_t *key = a->secret && a->secret_len ? a->secret : &empty;
    unsigned int ol = 0;
    if (!HMAC(EVP_sha256(), key, (int)(a->secret && a->secret_len ? a->secret_len : 0), msg, tl + n1 + n2, out, &ol) ||
        ol != MAC_LEN)
        return fl__err(FL_EIO, "HMAC-SHA256 failed");
    return FL_OK;
}

/* Reads a fixed-size handshake message, turning stream errors into handshake messages. */
static int hs_recv(fl_net_conn *c, void *buf, size_t n, uint64_t dl, const char *what)
{
    int st = fl_net_recv_all(c, buf, n, dl);
    if (st == FL_OK) return FL_OK;
    if (st == FL_ETIMEDOUT)
        return fl__err(FL_ETIMEDOUT,
                       "handshake with %s timed out waiting for its %s (the peer is silent: not a "
                       "Fleet process, or stalled)",
                       c->label, what);
    if (st == FL_EREMOTE || st == FL_ECORRUPT)
        return fl__err(FL_EREMOTE,
                       "handshake with %s failed: the peer closed the connection before sending its %s "
                       "(it may have refused our credentials or service)",
                       c->label, what);
    return st;
}

static int hello_check(fl_net_conn *c, const uint8_t *b, const fl_net_auth *a)
{
    if (fl__get_u32(b) != AUTH_MAGIC)
        return fl__err(FL_EPROTO, "handshake with %s failed: the peer is not a Fleet endpoint (bad magic)", c->label);
    if (fl__get_u16(b + 4) != AUTH_VERSION)
        return fl__err(FL_EPROTO, "handshake with %s failed: peer speaks protocol version %u, this process %u", c->label,
                       fl__get_u16(b + 4), AUTH_VERSION);
    c->peer_service = fl__get_u32(b + 8);
    c->peer_role = fl__get_u32(b + 12);
    c->peer_rank = (int32_t)fl__get_u32(b + 16);
    (void)a;
    return FL_OK;
}

static const char *secret_hint(const fl_net_auth *a, const uint8_t *peer_hello)
{
    int me = !a->secret || !a->secret_len, peer = (fl__get_u16(peer_hello + 6) & FLAG_NO_SECRET) != 0;
    if (me && !peer) return " (this process runs without a secret, the peer with one)";
    if (!me && peer) return " (the peer runs without a secret)";
    return "";
}

int fl__net_hs_greeting(const fl_net_auth *a, uint8_t hs[FL__NET_HELLO_LEN])
{
    uint8_t nonce[32];
    if (RAND_bytes(nonce, sizeof nonce) != 1) return fl__err(FL_EIO, "RAND_bytes failed");
    hello_encode(hs, a, nonce);
    return FL_OK;
}

int fl__net_hs_check_proof(fl_net_conn *c, const fl_net_auth *a, const uint8_t *hs, const uint8_t *hc, uint8_t *fin,
                           int *send_fin)
{
    uint8_t want[MAC_LEN];
    memset(fin, 0, FINISH_LEN);
    *send_fin = 0;
    FL_CHECK(hello_check(c, hc, a));
    *send_fin = 1;
    if (c->peer_service != a->service) {
        fl__put_u32(fin, FIN_BAD_SERVICE);
        return fl__err(FL_EPROTO,
                       "handshake with %s failed: the peer asked for service %u but this endpoint "
                       "serves %u",
                       c->label, c->peer_service, a->service);
    }
    FL_CHECK(mac(a, "fleet-auth-v1|c|", hs, HELLO_LEN, hc, HELLO_LEN, want));
    if (CRYPTO_memcmp(want, hc + HELLO_LEN, MAC_LEN) != 0) {
        fl__put_u32(fin, FIN_BAD_PROOF);
        return fl__err(FL_EPROTO, "authentication failed: peer %s does not know the job secret%s", c->label,
                       secret_hint(a, hc));
    }
    fl__put_u32(fin, FIN_OK);
    FL_CHECK(mac(a, "fleet-auth-v1|s|", hs, HELLO_LEN, hc, HELLO_C_LEN, fin + 4));
    return FL_OK;
}

int fl__net_handshake_connect(fl_net_conn *c, const fl_net_auth *a, uint64_t dl)
{
    uint8_t hs[HELLO_LEN], hc[HELLO_C_LEN], fin[FINISH_LEN], nonce[32], want[MAC_LEN];
    FL_CHECK(hs_recv(c, hs, sizeof hs, dl, "greeting"));
    FL_CHECK(hello_check(c, hs, a));
    if (c->peer_service != a->service)
        return fl__err(FL_EPROTO, "handshake with %s failed: the peer serves service %u, expected %u", c->label,
                       c->peer_service, a->service);
    if (RAND_bytes(nonce, sizeof nonce) != 1) return fl__err(FL_EIO, "RAND_bytes failed");
    hello_encode(hc, a, nonce);
    FL_CHECK(mac(a, "fleet-auth-v1|c|", hs, sizeof hs, hc, HELLO_LEN, hc + HELLO_LEN));
    FL_CHECK(fl_net_send_all(c, hc, sizeof hc, dl));
    FL_CHECK(hs_recv(c, fin, sizeof fin, dl, "answer to our proof"));
    uint32_t status = fl__get_u32(fin);
    if (status == FIN_BAD_PROOF)
        return fl__err(FL_EPROTO,
                       "authentication failed: peer %s does not know the job secret (it rejected our "
                       "proof)%s",
                       c->label, secret_hint(a, hs));
    if (status == FIN_BAD_SERVICE)
        return fl__err(FL_EPROTO, "handshake with %s failed: the peer refused service %u", c->label, a->service);
    if (status != FIN_OK) return fl__err(FL_EPROTO, "handshake with %s failed: unknown status %u", c->label, status);
    FL_CHECK(mac(a, "fleet-auth-v1|s|", hs, sizeof hs, hc, sizeof hc, want));
    if (CRYPTO_memcmp(want, fin + 4, MAC_LEN) != 0)
        return fl__err(FL_EPROTO, "authentication failed: peer %s does not know the job secret%s", c->label,
                       secret_hint(a, hs));
    FL_DEBUG(FL_SUB_NET, "connected to %s (rank %d, service %u)", c->label, c->peer_rank, c->peer_service);
    return FL_OK;
}
