/*
 * fr_child - a program for tests/test_fleetrun.c to start under fleetrun.  Its arguments
 * are steps run in order; a step is ACTION[:ARG], or COND=ACTION[:ARG] to run it only in
 * some processes.  COND is w* (every worker), s* (every server), wN (worker/trainer N),
 * sN (server N).  The process's tag is wN (PADDLE_TRAINER_ID) or sN (its index in
 * PADDLE_PSERVERS_IP_PORT_LIST when TRAINING_ROLE=PSERVER).
 *
 *   env:DIR        write DIR/TAG.env: pid=, ppid=, pgid=, then the whole environment
 *   await:DIR:N    wait (at most 30 s, else exit 8) until DIR holds N *.env files
 *   say:TEXT       print "TAG: TEXT" on stdout (flushed)
 *   logerr:TEXT    print TEXT as the library's error record would ("[fleet E worker:0 pid N
 *                  fleet fr_child.c:1] TEXT", src/base/log.c), on stderr
 *   lines:N        print N lines "TAG: filler K" on stdout
 *   sleep:SECS     sleep
 *   exit:K         exit with status K
 *   fail_first:K   exit with status K in the first run of the job (PADDLE_RESTART_COUNT unset
 *                  or 0); nothing in a restarted run
 *   sig:NAME       die by signal NAME (SEGV, ABRT, KILL, ... or a number), no core file
 *   ignterm        ignore SIGTERM (inherited by a grandchild started later)
 *   grandchild:DIR fork a grandchild that writes DIR/TAG.gpid (pid=, pgid=) and sleeps;
 *                  the step ends when that file exists
 *   bind           bind a TCP socket to the port of PADDLE_CURRENT_ENDPOINT (exit 9 if taken)
 *   hang           sleep for ever
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char tag[32];

static void make_tag(void)
{
    const char *role = getenv("TRAINING_ROLE");
    if (role && !strcmp(role, "PSERVER")) {
        const char *list = getenv("PADDLE_PSERVERS_IP_PORT_LIST"), *me = getenv("PADDLE_CURRENT_ENDPOINT");
        int idx = 0;
        size_t ml = me ? strlen(me) : 0;
        for (const char *s = list; s && *s; idx++) {
            size_t l = strcspn(s, ",");
            if (me && l == ml && !strncmp(s, me, l)) break;
            s += l + (s[l] == ',');
        }
        snprintf(tag, sizeof tag, "s%d", idx);
    } else {
        const char *id = getenv("PADDLE_TRAINER_ID");
        snprintf(tag, sizeof tag, "w%s", id ? id : "0");
    }
}

static int matches(const char *cond, size_t n)
{
    if (n == 2 && cond[1] == '*') return cond[0] == tag[0];
    return strlen(tag) == n && !strncmp(cond, tag, n);
}

/* Writes DIR/TAG.EXT atomically (temporary name, then rename). */
static void write_file(const char *dir, const char *ext, int with_env)
{
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.%s.tmp", dir, tag, ext);
    snprintf(path, sizeof path, "%s/%s.%s", dir, tag, ext);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        exit(7);
    }
    fprintf(f, "pid=%d\nppid=%d\npgid=%d\n", (int)getpid(), (int)getppid(), (int)getpgrp());
    for (char **e = environ; with_env && *e; e++) fprintf(f, "%s\n", *e);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        exit(7);
    }
}

static int count_env_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        n += e->d_name[0] != '.' && l > 4 && !strcmp(e->d_name + l - 4, ".env");
    }
    if (d) closedir(d);
    return n;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int signum(const char *name)
{
    static const struct {
        const char *n;
        int s;
    } t[] = {{"SEGV", SIGSEGV}, {"ABRT", SIGABRT}, {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"BUS", SIGBUS}, {"FPE", SIGFPE}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(name, t[i].n)) return t[i].s;
    return atoi(name);
}

static void do_bind(void)
{
    const char *ep = getenv("PADDLE_CURRENT_ENDPOINT");
    const char *c = ep ? strrchr(ep, ':') : NULL;
    char ip[64];
    if (!c || (size_t)(c - ep) >= sizeof ip) {
        fprintf(stderr, "%s: bad PADDLE_CURRENT_ENDPOINT '%s'\n", tag, ep ? ep : "(unset)");
        exit(9);
    }
    memcpy(ip, ep, (size_t)(c - ep));
    ip[c - ep] = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(c + 1))};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1 || fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, 1) != 0) {
        fprintf(stderr, "%s: cannot bind %s: %s\n", tag, ep, strerror(errno));
        exit(9);
    }
    close(fd);
}

int main(int argc, char **argv)
{
    make_tag();
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *eq = strchr(a, '='), *colon = strchr(a, ':');
        if (eq && (!colon || eq < colon)) {
            if (!matches(a, (size_t)(eq - a))) continue;
            a = eq + 1;
            colon = strchr(a, ':');
        }
        const char *arg = colon ? colon + 1 : "";
        size_t an = colon ? (size_t)(colon - a) : strlen(a);
#define IS(name) (an == strlen(name) && !strncmp(a, name, an))
        if (IS("env")) {
            write_file(arg, "env", 1);
        } else if (IS("await")) {
            char dir[4096];
            const char *c2 = strrchr(arg, ':');
            if (!c2) return 6;
            snprintf(dir, sizeof dir, "%.*s", (int)(c2 - arg), arg);
            int want = atoi(c2 + 1);
            for (int t = 0; count_env_files(dir) < want; t++) {
                if (t > 3000) return 8;
                sleep_s(0.01);
            }
        } else if (IS("say")) {
            printf("%s: %s\n", tag, arg);
            fflush(stdout);
        } else if (IS("logerr")) {
            fflush(stdout);
            fprintf(stderr, "[fleet E worker:%s pid %d fleet fr_child.c:1] %s\n", tag + 1, (int)getpid(), arg);
        } else if (IS("lines")) {
            for (int k = 0, n = atoi(arg); k < n; k++) printf("%s: filler %d\n", tag, k);
            fflush(stdout);
        } else if (IS("sleep")) {
            sleep_s(atof(arg));
        } else if (IS("exit")) {
            fflush(stdout);
            return atoi(arg);
        } else if (IS("fail_first")) {
            const char *rc = getenv("PADDLE_RESTART_COUNT");
            if (!rc || !strcmp(rc, "0")) {
                fflush(stdout);
                return atoi(arg);
            }
        } else if (IS("sig")) {
            int s = signum(arg);
            struct rlimit rl = {0, 0};
            setrlimit(RLIMIT_CORE, &rl);
            fflush(stdout);
            signal(s, SIG_DFL);
            raise(s);
            return 99;
        } else if (IS("ignterm")) {
            signal(SIGTERM, SIG_IGN);
        } else if (IS("grandchild")) {
            pid_t pid = fork();
            if (pid == 0) {
                write_file(arg, "gpid", 0);
                for (;;) pause();
            }
            if (pid < 0) return 5;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.gpid", arg, tag);
            for (int t = 0; access(path, F_OK) != 0; t++) { /* continue once it is recorded */
                if (t > 3000) return 5;
                sleep_s(0.01);
            }
        } else if (IS("bind")) {
            do_bind();
        } else if (IS("hang")) {
            for (;;) pause();
        } else {
            fprintf(stderr, "fr_child: unknown step '%s'\n", argv[i]);
            return 4;
        }
    }
    return 0;
}
