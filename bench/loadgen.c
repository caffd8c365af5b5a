/* The latency benchmark's load generator for the gateway path (bench/loadgen.py drives it).
 *
 * It replays one request, encoded beforehand by the protocol's in-repo client, over N
 * connections: open loop (request i released at t0 + i / rate into a FIFO that idle
 * connections take from; latency = answer minus release) or closed loop (every connection
 * sends again as soon as its answer is in). One request in flight per connection, so answers
 * need no correlation: the generator only finds where each answer ends.
 *
 * Why C: on a 2-CPU machine the Python generator (trio plus the protocol's client) used as
 * much CPU per request as the gateway, so half of the gateway path's tail was the two
 * processes taking turns on the CPUs. This one costs a few microseconds per request and
 * releases requests at their due time (timerfd), not in the 1 ms ticks of Python's epoll.
 *
 * Framing of answers: kafka08 and cursus i32 BE size + body; iggy status u32 LE + length u32
 * LE + payload (status != 0 counts an error); tank msg_id u8 + length u32 LE + payload (msg_id
 * 3, the broker's ping, is not an answer); liftbridge HTTP/2 frames: the call ends with a
 * HEADERS frame carrying END_STREAM (the trailers) or an RST_STREAM on its stream; SETTINGS
 * and PING are acknowledged. Liftbridge requests carry stream id 1 in their frame headers;
 * the generator writes each call's own (1, 3, 5, ...).
 *
 * Frames file: u32 LE length + bytes, three times: the connection preamble (sent once after
 * connect, may be empty), the first request on a connection, every later request (they differ
 * for HTTP/2, whose first header block fills the HPACK table the later ones refer to).
 *
 * Usage: loadgen PROTO HOST PORT FRAMES OUT CONNS open RATE WARMUP COUNT GATEWAY_PID
 *        loadgen PROTO HOST PORT FRAMES OUT CONNS closed SECONDS GATEWAY_PID
 * Prints one JSON line; open mode writes COUNT latencies then COUNT release lags (float64
 * seconds, native order) to OUT. Exit code 1 on any error (a message on stderr). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum proto { KAFKA08, IGGY, TANK, CURSUS, LIFTBRIDGE };

typedef struct {
    int fd;
    unsigned char *buf;
    size_t len, cap;
    int busy;
    int64_t index;      /* request in flight (open loop), -1 for none */
    int64_t release_ns; /* when it was released into the queue */
    uint32_t stream_id; /* HTTP/2: the current call's stream */
    int calls;          /* requests sent on this connection */
} conn_t;

typedef struct {
    unsigned char *data;
    uint32_t len;
} blob_t;

static enum proto proto;
static blob_t preamble, first_req, next_req;
static unsigned char *scratch;
static long errors;

static void die(const char *what) {
    fprintf(stderr, "loadgen: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double own_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* utime + stime of a process, in seconds (0 when pid <= 0) */
static double proc_cpu_s(int pid) {
    if (pid <= 0) return 0.0;
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) die("open /proc/PID/stat");
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *p = strrchr(text, ')');
    if (!p) die("parse /proc/PID/stat");
    unsigned long utime = 0, stime = 0;
    /* after ") ": state(3) then fields 4..13, utime is field 14, stime 15 */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        die("parse /proc/PID/stat");
    return (double)(utime + stime) / sysconf(_SC_CLK_TCK);
}

/* (busy, steal, total) jiffies of all CPUs, as bench/latency.py's machine_jiffies */
static void machine_jiffies(unsigned long long out[3]) {
    unsigned long long f[10] = {0};
    FILE *fp = fopen("/proc/stat", "r");
    if (!fp) die("open /proc/stat");
    if (fscanf(fp, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2],
               &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9]) < 8)
        die("parse /proc/stat");
    fclose(fp);
    unsigned long long total = 0;
    for (int i = 0; i < 10; i++) total += f[i];
    out[0] = total - f[3] - f[4];
    out[1] = f[7];
    out[2] = total;
}

static blob_t read_blob(FILE *f) {
    blob_t b;
    unsigned char hdr[4];
    if (fread(hdr, 1, 4, f) != 4) die("frames file: short");
    b.len = hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    b.data = malloc(b.len ? b.len : 1);
    if (b.len && fread(b.data, 1, b.len, f) != b.len) die("frames file: short");
    return b;
}

static void write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            poll(&pfd, 1, 1000);
        } else {
            die("write");
        }
    }
}

static int connect_to(const char *host, const char *port) {
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) die("getaddrinfo");
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS) die("connect");
    struct pollfd pfd = {fd, POLLOUT, 0};
    if (poll(&pfd, 1, 10000) != 1) die("connect: timed out");
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        errno = err;
        die("connect");
    }
    freeaddrinfo(res);
    return fd;
}

/* Send the connection's next request (the HTTP/2 stream id written into every frame). */
static void send_request(conn_t *c) {
    blob_t *r = c->calls ? &next_req : &first_req;
    c->calls++;
    c->busy = 1;
    if (proto != LIFTBRIDGE) {
        write_all(c->fd, r->data, r->len);
        return;
    }
    c->stream_id = 2u * (uint32_t)c->calls - 1u;
    memcpy(scratch, r->data, r->len);
    for (uint32_t at = 0; at + 9 <= r->len;) {
        uint32_t flen = (uint32_t)scratch[at] << 16 | scratch[at + 1] << 8 | scratch[at + 2];
        scratch[at + 5] = (c->stream_id >> 24) & 0x7f;
        scratch[at + 6] = (c->stream_id >> 16) & 0xff;
        scratch[at + 7] = (c->stream_id >> 8) & 0xff;
        scratch[at + 8] = c->stream_id & 0xff;
        at += 9 + flen;
    }
    write_all(c->fd, scratch, r->len);
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

static uint32_t le32(const unsigned char *p) {
    return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* How many bytes of c->buf the next unit (an answer, a frame) takes, 0 if not all in yet;
 * *done is set when it ends the request in flight. */
static size_t next_unit(conn_t *c, int *done) {
    const unsigned char *p = c->buf;
    size_t n = c->len;
    *done = 0;
    switch (proto) {
    case KAFKA08:
    case CURSUS:
        if (n < 4 || n < 4 + (size_t)be32(p)) return 0;
        *done = 1;
        if (proto == CURSUS && be32(p) >= 5 && memcmp(p + 4, "ERROR", 5) == 0) errors++;
        return 4 + be32(p);
    case IGGY:
        if (n < 8 || n < 8 + (size_t)le32(p + 4)) return 0;
        *done = 1;
        if (le32(p)) errors++;
        return 8 + le32(p + 4);
    case TANK:
        if (n < 5 || n < 5 + (size_t)le32(p + 1)) return 0;
        *done = p[0] != 3;
        return 5 + le32(p + 1);
    case LIFTBRIDGE: {
        if (n < 9) return 0;
        size_t flen = (size_t)p[0] << 16 | p[1] << 8 | p[2];
        if (n < 9 + flen) return 0;
        unsigned type = p[3], flags = p[4];
        uint32_t sid = be32(p + 5) & 0x7fffffffu;
        if (type == 4 && !(flags & 1)) { /* SETTINGS: acknowledge */
            static const unsigned char ack[9] = {0, 0, 0, 4, 1, 0, 0, 0, 0};
            write_all(c->fd, ack, 9);
        } else if (type == 6 && !(flags & 1) && flen == 8) { /* PING: answer */
            unsigned char pong[17] = {0, 0, 8, 6, 1, 0, 0, 0, 0};
            memcpy(pong + 9, p + 9, 8);
            write_all(c->fd, pong, 17);
        } else if (type == 7) { /* GOAWAY */
            uint32_t code = flen >= 8 ? be32(p + 13) : 0;
            fprintf(stderr, "loadgen: the server sent GOAWAY, error code %u: %.*s\n", code,
                    flen > 8 ? (int)(flen - 8) : 0, (const char *)p + 17);
            exit(1);
        } else if (sid == c->stream_id && c->busy) {
            if (type == 3) { /* RST_STREAM */
                errors++;
                *done = 1;
            } else if (type == 1 && (flags & 1)) { /* trailers */
                *done = 1;
            }
        }
        return 9 + flen;
    }
    }
    return 0;
}

/* Read what the socket has; returns how many requests of this connection ended (0 or 1). */
static int on_readable(conn_t *c) {
    for (;;) {
        if (c->cap - c->len < 65536) {
            c->cap *= 2;
            c->buf = realloc(c->buf, c->cap);
        }
        ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (r > 0) {
            c->len += (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = 0;
            die("the server closed a connection");
        }
        if (errno == EAGAIN) break;
        if (errno != EINTR) die("read");
    }
    int ended = 0;
    for (;;) {
        int done;
        size_t used = next_unit(c, &done);
        if (!used) break;
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        if (done) {
            if (ended || !c->busy) {
                errno = 0;
                die("an answer came without a request in flight");
            }
            c->busy = 0;
            ended = 1;
        }
    }
    return ended;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: see bench/loadgen.c\n");
        return 2;
    }
    const char *names[] = {"kafka08", "iggy", "tank", "cursus", "liftbridge"};
    int found = 0;
    for (int i = 0; i < 5; i++)
        if (!strcmp(argv[1], names[i])) proto = (enum proto)i, found = 1;
    if (!found) {
        fprintf(stderr, "loadgen: unknown protocol %s\n", argv[1]);
        return 2;
    }
    FILE *ff = fopen(argv[4], "rb");
    if (!ff) die("open frames file");
    preamble = read_blob(ff);
    first_req = read_blob(ff);
    next_req = read_blob(ff);
    fclose(ff);
    scratch = malloc(first_req.len > next_req.len ? first_req.len : next_req.len);
    int nconns = atoi(argv[6]);
    int open_loop = !strcmp(argv[7], "open");
    double rate = 0, seconds = 0;
    int64_t warmup = 0, count = 0;
    int gw_pid;
    if (open_loop) {
        if (argc != 12) return 2;
        rate = atof(argv[8]);
        warmup = atoll(argv[9]);
        count = atoll(argv[10]);
        gw_pid = atoi(argv[11]);
    } else {
        if (argc != 10) return 2;
        seconds = atof(argv[8]);
        gw_pid = atoi(argv[9]);
    }

    int ep = epoll_create1(EPOLL_CLOEXEC);
    conn_t *conns = calloc((size_t)nconns, sizeof *conns);
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &conns[i];
        c->fd = connect_to(argv[2], argv[3]);
        c->cap = 1 << 17;
        c->buf = malloc(c->cap);
        c->index = -1;
        if (preamble.len) write_all(c->fd, preamble.data, preamble.len);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    struct epoll_event evs[64];

    if (!open_loop) {
        int64_t deadline, answered = 0;
        double cpu0 = proc_cpu_s(gw_pid), own0 = own_cpu_s();
        int64_t t0 = now_ns();
        deadline = t0 + (int64_t)(seconds * 1e9);
        for (int i = 0; i < nconns; i++) send_request(&conns[i]);
        int in_flight = nconns;
        while (in_flight) {
            int n = epoll_wait(ep, evs, 64, 10000);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) continue;
                errno = 0;
                die("no answer for 10 s");
            }
            for (int k = 0; k < n; k++) {
                conn_t *c = &conns[evs[k].data.u32];
                if (on_readable(c)) {
                    answered++;
                    if (now_ns() < deadline)
                        send_request(c);
                    else
                        in_flight--;
                }
            }
        }
        double wall = (now_ns() - t0) / 1e9;
        printf("{\"answered\": %lld, \"expected_records\": %lld, \"seconds\": %.6f, "
               "\"gateway_cpu_s\": %.4f, \"generator_cpu_s\": %.4f, \"errors\": %ld}\n",
               (long long)answered, (long long)answered, wall, proc_cpu_s(gw_pid) - cpu0, own_cpu_s() - own0, errors);
        return errors ? 1 : 0;
    }

    int64_t total = warmup + count;
    int64_t *queue = malloc(sizeof(int64_t) * (size_t)total); /* release times, FIFO */
    double *lat = calloc((size_t)count, sizeof(double));
    double *lag = calloc((size_t)count, sizeof(double));
    int64_t head = 0, released = 0, answered = 0, timed_start = 0, last_answer = 0;
    double cpu0 = 0, own0 = 0;
    unsigned long long j0[3] = {0}, j1[3];
    double period = 1e9 / rate;
    int64_t t0 = now_ns() + 5000000;
    if (warmup == 0) {
        cpu0 = proc_cpu_s(gw_pid);
        own0 = own_cpu_s();
        machine_jiffies(j0);
        timed_start = t0;
    }
    while (answered < total) {
        int64_t now = now_ns();
        while (released < total) {
            int64_t due = t0 + (int64_t)(released * period);
            if (due > now) break;
            if (released == warmup && warmup) {
                cpu0 = proc_cpu_s(gw_pid);
                own0 = own_cpu_s();
                machine_jiffies(j0);
                timed_start = due;
            }
            if (released >= warmup) lag[released - warmup] = (now - due) / 1e9;
            queue[released++] = now;
        }
        for (int i = 0; i < nconns && head < released; i++) {
            conn_t *c = &conns[i];
            if (c->busy) continue;
            c->index = head;
            c->release_ns = queue[head++];
            send_request(c);
        }
        if (released < total) {
            int64_t due = t0 + (int64_t)(released * period);
            struct itimerspec its = {{0, 0}, {due / 1000000000LL, due % 1000000000LL}};
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        }
        int n = epoll_wait(ep, evs, 64, 10000);
        if (n == 0) {
            errno = 0;
            die("no answer for 10 s");
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int k = 0; k < n; k++) {
            if (evs[k].data.u32 == UINT32_MAX) {
                uint64_t expirations;
                if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die("read timerfd");
                continue;
            }
            conn_t *c = &conns[evs[k].data.u32];
            if (on_readable(c)) {
                int64_t t = now_ns();
                if (c->index >= warmup) lat[c->index - warmup] = (t - c->release_ns) / 1e9;
                c->index = -1;
                answered++;
                last_answer = t;
            }
        }
    }
    machine_jiffies(j1);
    double gw_cpu = proc_cpu_s(gw_pid) - cpu0, own = own_cpu_s() - own0;
    FILE *out = fopen(argv[5], "wb");
    if (!out) die("open output");
    fwrite(lat, sizeof(double), (size_t)count, out);
    fwrite(lag, sizeof(double), (size_t)count, out);
    fclose(out);
    printf("{\"answered\": %lld, \"expected_records\": %lld, \"seconds\": %.6f, "
           "\"gateway_cpu_s\": %.4f, \"generator_cpu_s\": %.4f, \"busy_jiffies\": %llu, "
           "\"steal_jiffies\": %llu, \"total_jiffies\": %llu, \"errors\": %ld}\n",
           (long long)count, (long long)total, (last_answer - timed_start) / 1e9, gw_cpu, own, j1[0] - j0[0],
           j1[1] - j0[1], j1[2] - j0[2], errors);
    return errors ? 1 : 0;
}
