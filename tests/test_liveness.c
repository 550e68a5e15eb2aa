/*
 * test_liveness.c - the one liveness clock (src/net/liveness.h): the stall threshold, the
 * stopped-self rule and its fresh window, clocks of another thread that are later than
 * ours, the per-request deadline that a stop of this process moves, and the heartbeat
 * thread.  The stops are real: a forked child is sent SIGSTOP and SIGCONT.
 */
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "testhelp.h"
#include "../src/net/net_internal.h"

#define MS 1000000ull
#define SEC 1000000000ull

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

TEST(stall_threshold_is_one_second_past_due)
{
    uint64_t due = 50 * SEC;
    CHECK(fl__live_stall(0, 100 * SEC) == 0); /* nothing was due */
    CHECK(fl__live_stall(due, due - MS) == 0);
    CHECK(fl__live_stall(due, due + 900 * MS) == 0);
    CHECK(fl__live_stall(due, due + FL__LIVE_STALL_NS) == 0);
    CHECK(fl__live_stall(due, due + 1500 * MS) == 1500 * MS);
    CHECK_EQ_INT(FL__LIVE_STALL_NS, SEC);
    CHECK(FL__LIVE_TIMEOUT_MS > 2 * FL__LIVE_HEARTBEAT_MS); /* a late heartbeat or two is no silence */
}

TEST(a_stall_gives_peers_a_fresh_window)
{
    fl__live_clock k;
    fl__live_clock_init(&k, FL_SUB_NET, "test", "its peers", 6000);
    uint64_t heard = 10 * SEC, now = 17 * SEC;
    CHECK(fl__live_quiet(&k, heard, now) == 7 * SEC);
    CHECK(fl__live_silent(&k, heard, now, 6000));
    CHECK(!fl__live_silent(&k, heard, now, 8000));
    CHECK(!fl__live_silent(&k, heard, now, -1)); /* off */
    CHECK(!fl__live_resumed_within(&k, now, 2 * SEC));
    /* this process did not run from 11 s to 16 s: the peer is counted from 16 s */
    CHECK(fl__live_check(&k, 11 * SEC, 16 * SEC) == 5 * SEC);
    CHECK(fl__live_since(&k, heard) == 16 * SEC);
    CHECK(fl__live_quiet(&k, heard, now) == 1 * SEC);
    CHECK(!fl__live_silent(&k, heard, now, 6000));
    CHECK(fl__live_resumed_within(&k, now, 2 * SEC));
    CHECK(!fl__live_resumed_within(&k, 19 * SEC, 2 * SEC));
    /* a peer heard from after that keeps its own time */
    CHECK(fl__live_quiet(&k, 16500 * MS, now) == 500 * MS);
    /* a check that was on time notes nothing */
    CHECK(fl__live_check(&k, 20 * SEC, 20100 * MS) == 0);
    CHECK(fl__live_since(&k, 0) == 16 * SEC);
}

/* Another thread's clock (the heartbeat thread's resumed_ns, an answer's time) can be later
 * than the now this thread read just before: silence 0, never ~584 years. */
TEST(a_later_stamp_of_another_thread_is_no_silence)
{
    fl__live_clock k;
    fl__live_clock_init(&k, FL_SUB_NET, "test", NULL, 1000);
    uint64_t now = 30 * SEC;
    CHECK(fl__live_quiet(&k, now + 3 * SEC, now) == 0);
    CHECK(!fl__live_silent(&k, now + 3 * SEC, now, 1000));
    atomic_store(&k.resumed_ns, now + 3 * SEC);
    CHECK(fl__live_quiet(&k, 0, now) == 0);
    CHECK(!fl__live_silent(&k, 0, now, 1000));
    CHECK(fl__live_resumed_within(&k, now, SEC));
}

TEST(a_stall_moves_the_deadline)
{
    uint64_t dl = 100 * SEC;
    CHECK(fl__live_deadline_after(&dl, 50 * SEC, 50500 * MS) == 0);
    CHECK(dl == 100 * SEC);
    CHECK(fl__live_deadline_after(&dl, 50 * SEC, 53 * SEC) == 3 * SEC);
    CHECK(dl == 103 * SEC);
    uint64_t never = UINT64_MAX;
    fl__live_deadline_after(&never, 50 * SEC, 53 * SEC);
    CHECK(never == UINT64_MAX); /* no wrap */
}

static void count_beat(void *arg, uint64_t now)
{
    (void)now;
    atomic_fetch_add((_Atomic int *)arg, 1);
}

TEST(heartbeat_thread_beats_and_stops_promptly)
{
    fl__live_clock k;
    fl__live_clock_init(&k, FL_SUB_NET, "test", NULL, 0);
    fl__live_hb h;
    _Atomic int beats = 0;
    CHECK_OK(fl__live_hb_start(&h, 0, &k, count_beat, &beats)); /* off */
    CHECK(!h.started);
    fl__live_hb_stop(&h);
    CHECK_OK(fl__live_hb_start(&h, 20, &k, count_beat, &beats));
    CHECK(h.started);
    sleep_s(0.3);
    uint64_t t0 = fl__now_ns();
    fl__live_hb_stop(&h);
    double stop_s = (double)(fl__now_ns() - t0) / 1e9;
    int n = atomic_load(&beats);
    fprintf(stderr, "  %d beats of 20 ms in 0.3 s; stopped in %.4f s\n", n, stop_s);
    CHECK(n >= 3 && n <= 16);
    CHECK(stop_s < 1.0); /* woken, not left to finish its period */
    CHECK(!h.started);
    CHECK(atomic_load(&k.resumed_ns) == 0); /* never late by a second here */
    fl__live_hb_stop(&h);                   /* twice: no-op */
}

/* A child waits 2 s for one byte on a watched connection (the watch applies only the
 * stopped-self rule); the parent stops it 0.2 s into the wait for 3 s and sends the byte
 * 0.3 s after SIGCONT (3.5 s after the start).  The watched wait sleeps in slices of 100
 * ms, so without the rule its deadline would have passed when it ran again: the stop must
 * have moved it.  The watch's clock and the clock of a heartbeat thread running beside it
 * both noted the stop.  The child writes "<status> <watch noted> <heartbeat noted>". */
TEST(a_stopped_process_does_not_time_out_its_peer)
{
    int sv[2], pfd[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    CHECK(pipe(pfd) == 0);
    pid_t pid = th_fork(30);
    if (pid == 0) {
        close(sv[0]), close(pfd[0]);
        struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        fl_net_conn *c;
        if (fl__net_conn_wrap(sv[1], (struct sockaddr *)&lo, &c) != FL_OK) _exit(3);
        fl__live_clock kw, kh;
        fl__live_clock_init(&kw, FL_SUB_NET, "test child (watch)", NULL, 0);
        fl__live_clock_init(&kh, FL_SUB_NET, "test child (heartbeat)", NULL, 0);
        fl__live_hb h;
        _Atomic int beats = 0;
        if (fl__live_hb_start(&h, 100, &kh, count_beat, &beats) != FL_OK) _exit(4);
        fl__net_conn_set_watch(c, fl__live_watch_self, &kw);
        if (write(pfd[1], "w", 1) != 1) _exit(5);
        char b;
        int r = fl_net_recv_all(c, &b, 1, fl_net_deadline(2000));
        fl__live_hb_stop(&h);
        char line[64];
        int n = snprintf(line, sizeof line, "%d %d %d\n", r, atomic_load(&kw.resumed_ns) != 0,
                         atomic_load(&kh.resumed_ns) != 0);
        if (write(pfd[1], line, (size_t)n) != n) _exit(6);
        fl_net_conn_free(c);
        _exit(0);
    }
    close(sv[1]), close(pfd[1]);
    char go;
    CHECK(read(pfd[0], &go, 1) == 1);
    double t0 = fl__now();
    sleep_s(0.2);
    kill(pid, SIGSTOP);
    sleep_s(3.0);
    kill(pid, SIGCONT);
    sleep_s(0.3);
    ssize_t sent = send(sv[0], "x", 1, MSG_NOSIGNAL); /* fails when the child already gave up */
    char line[64] = "";
    size_t got = 0;
    while (got + 1 < sizeof line && read(pfd[0], line + got, 1) == 1 && line[got] != '\n') got++;
    int ws;
    CHECK(waitpid(pid, &ws, 0) == pid);
    fprintf(stderr, "  stopped 3 s in a 2 s wait: the byte came %.2f s after the start (sent %zd); child: %s\n",
            fl__now() - t0, sent, line);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    int st = -100, watch_noted = 0, hb_noted = 0;
    CHECK(sscanf(line, "%d %d %d", &st, &watch_noted, &hb_noted) == 3);
    CHECK_EQ_INT(st, FL_OK);
    CHECK_EQ_INT(watch_noted, 1);
    CHECK_EQ_INT(hb_noted, 1);
    close(sv[0]), close(pfd[0]);
}

TEST_MAIN(T(stall_threshold_is_one_second_past_due), T(a_stall_gives_peers_a_fresh_window),
          T(a_later_stamp_of_another_thread_is_no_silence), T(a_stall_moves_the_deadline),
          T(heartbeat_thread_beats_and_stops_promptly), T(a_stopped_process_does_not_time_out_its_peer))
