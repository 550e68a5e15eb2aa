/*
 * fuzz_ps_frame.c - libFuzzer harness for the PS frame decoder (fl__ps_frame_decode), the
 * code every byte from the network goes through after the handshake.  Not built by the
 * Makefile (its name does not match tests/test_*.c).  Build and run by hand:
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz_ps_frame.c src/ps/frame.c src/net/sock.c src/net/auth.c \
 *       src/base/{env,error,log,strmap,util}.c -lcrypto -lm -pthread \
 *       -o /tmp/fuzz_ps_frame
 *   /tmp/fuzz_ps_frame -max_total_time=60 [corpus_dir]
 *
 * tests/test_ps_server.c (case fuzz_frame_decoder_briefly) does this for a few seconds when
 * clang with libFuzzer is installed, and skips with a message otherwise.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ps/ps_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the decoder wants an 8-aligned buffer (the server's receive buffers are) */
    uint8_t *buf = aligned_alloc(64, (size + 64) & ~(size_t)63);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    fl__ps_msg m;
    if (fl__ps_frame_decode(buf, size, &m) == FL_OK) {
        /* touch everything the decoder said is there, so ASan checks the bounds */
        volatile uint64_t sink = 0;
        if (m.ids)
            for (uint64_t i = 0; i < m.n; i++) sink += m.ids[i];
        uint64_t nvals = m.h.type == FL__PS_PUSH_SPARSE || m.h.type == FL__PS_PULL_SPARSE || m.h.type == FL__PS_SCAN_SPARSE
                             ? m.n * m.dim
                             : m.n;
        if (m.vals)
            for (uint64_t i = 0; i < nvals; i++) sink += (uint64_t)(m.vals[i] != 0);
        if (m.shows)
            for (uint64_t i = 0; i < m.n; i++) sink += (uint64_t)(m.shows[i] != 0) + (uint64_t)(m.clicks[i] != 0);
        for (uint32_t i = 0; m.str && i < m.str_len; i++) sink += (uint8_t)m.str[i];
        for (uint32_t i = 0; m.tables_wire && i < m.ntables; i++) sink += m.tables_wire[FL__PS_HELLO_TABLE * i];
        (void)sink;
    }
    free(buf);
    return 0;
}
