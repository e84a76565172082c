/* troupe — the cable between the two "hosts" of the cluster tests (tests/cluster/netns.sh): a
 * two-port link emulator with netem's delay, loss and partition, run inside a third network
 * namespace between the hosts' veth pairs.
 *
 *   wire PORT_A PORT_B [--delay-ms D] [--jitter-ms J] [--loss-pct P] [--seed S] [--limit N]
 *
 * Every Ethernet frame that arrives on one port leaves by the other after D ms plus a uniform
 * 0..J ms (order kept: a frame never overtakes the one before it), unless it is dropped: with
 * probability P % each, when N frames already wait in its direction (tail drop, as netem's
 * limit), or while the link is cut. SIGUSR1 cuts the link both ways (a partition: frames are
 * dropped silently, no error reaches either side); SIGUSR2 restores it; SIGTERM or SIGINT end
 * the wire, which then prints per direction the frames forwarded and dropped.
 *
 * Why not `tc qdisc ... netem`: the kernels this runs on in CI are built without it
 * (CONFIG_NET_SCH_NETEM unset: "Specified qdisc kind is unknown"). Frames are read and
 * written with their virtio-net header (PACKET_VNET_HDR), so a veth's segmentation and
 * checksum offloads pass through untouched: like netem, the wire sees, delays and drops a
 * TCP segment train (up to 64 KiB) as one frame.
 *
 * Output: "wire: up" on stdout once both ports are open (netns.sh waits for it); errors on
 * stderr. Exit status: 0 after SIGTERM/SIGINT, 1 on a setup failure, 2 on a bad option.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define S_FRAME_MAX (256 * 1024) /* a GSO frame of up to 64 KiB, its headers, and room */

typedef struct s_frame {
    struct s_frame *next;
    int64_t release_ns;
    size_t len;
    unsigned char data[];
} s_frame_t;

/* One direction: frames that arrived on `in`, waiting to leave by `out`. */
typedef struct s_dir {
    const char *name;
    int in, out;
    s_frame_t *head, *tail;
    size_t queued;
    int64_t last_release_ns;
    uint64_t forwarded, lost, cut, overflow, errors;
} s_dir_t;

static volatile sig_atomic_t s_cut_flag, s_heal_flag, s_stop_flag;

static void s_on_signal(int sig)
{
    if (sig == SIGUSR1)
        s_cut_flag = 1;
    else if (sig == SIGUSR2)
        s_heal_flag = 1;
    else
        s_stop_flag = 1;
}

static int64_t s_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* xorshift64*: the loss draws and jitter, reproducible for a given --seed. */
static uint64_t s_rng = 0x9e3779b97f4a7c15ULL;
static double s_uniform(void)
{
    s_rng ^= s_rng >> 12;
    s_rng ^= s_rng << 25;
    s_rng ^= s_rng >> 27;
    return (double)((s_rng * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
}

/* A packet socket bound to `port` that reads every frame arriving there (promiscuous, with its
 * virtio-net header, not the ones this process sends), or -1 with the reason on stderr. */
static int s_open_port(const char *port)
{
    unsigned idx = if_nametoindex(port);
    if (idx == 0) {
        fprintf(stderr, "wire: no interface '%s': %s\n", port, strerror(errno));
        return -1;
    }
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) {
        fprintf(stderr, "wire: socket(AF_PACKET) for '%s': %s\n", port, strerror(errno));
        return -1;
    }
    int one = 1;
    struct packet_mreq mr = {.mr_ifindex = (int)idx, .mr_type = PACKET_MR_PROMISC};
    struct sockaddr_ll sll = {
        .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)idx};
    const char *what = NULL;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0)
        what = "PACKET_VNET_HDR";
    else if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0)
        what = "PACKET_MR_PROMISC";
    else if (bind(fd, (struct sockaddr *)&sll, sizeof sll) != 0)
        what = "bind";
    if (what != NULL) {
        fprintf(stderr, "wire: %s on '%s': %s\n", what, port, strerror(errno));
        close(fd);
        return -1;
    }
    /* Older kernels lack it; the PACKET_OUTGOING check in s_receive covers them. */
    (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    return fd;
}

typedef struct s_link {
    int64_t delay_ns, jitter_ns;
    double loss;
    size_t limit;
    bool cut;
} s_link_t;

/* Reads the frames waiting on d->in and queues (or drops) each. */
static void s_receive(s_dir_t *d, const s_link_t *l, unsigned char *buf)
{
    for (int k = 0; k < 256; k++) {
        struct sockaddr_ll from;
        socklen_t flen = sizeof from;
        ssize_t n = recvfrom(d->in, buf, S_FRAME_MAX, MSG_TRUNC, (struct sockaddr *)&from, &flen);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && d->errors++ == 0)
                fprintf(stderr, "wire: %s: recvfrom: %s\n", d->name, strerror(errno));
            return;
        }
        if (from.sll_pkttype == PACKET_OUTGOING)
            continue;
        if ((size_t)n > S_FRAME_MAX) {
            if (d->errors++ == 0)
                fprintf(stderr, "wire: %s: a %zd-byte frame is larger than %d\n", d->name, n,
                        S_FRAME_MAX);
            continue;
        }
        if (l->cut) {
            d->cut++;
            continue;
        }
        if (l->loss > 0 && s_uniform() * 100.0 < l->loss) {
            d->lost++;
            continue;
        }
        if (d->queued >= l->limit) {
            d->overflow++;
            continue;
        }
        s_frame_t *f = malloc(sizeof *f + (size_t)n);
        if (f == NULL) {
            d->overflow++;
            continue;
        }
        int64_t at = s_now_ns() + l->delay_ns +
                     (l->jitter_ns > 0 ? (int64_t)(s_uniform() * (double)l->jitter_ns) : 0);
        if (at < d->last_release_ns)
            at = d->last_release_ns;
        d->last_release_ns = at;
        f->next = NULL;
        f->release_ns = at;
        f->len = (size_t)n;
        memcpy(f->data, buf, (size_t)n);
        if (d->tail != NULL)
            d->tail->next = f;
        else
            d->head = f;
        d->tail = f;
        d->queued++;
    }
}

/* Sends the frames of d whose time has come; returns when the next one is due (INT64_MAX when
 * none waits). A full socket buffer keeps the frame for a retry 1 ms later. */
static int64_t s_release(s_dir_t *d, int64_t now)
{
    while (d->head != NULL && d->head->release_ns <= now) {
        s_frame_t *f = d->head;
        if (send(d->out, f->data, f->len, 0) < 0) {
            if (errno == ENOBUFS || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return now + 1000000;
            if (d->errors++ == 0)
                fprintf(stderr, "wire: %s: send of %zu bytes: %s\n", d->name, f->len,
                        strerror(errno));
        } else {
            d->forwarded++;
        }
        d->head = f->next;
        if (d->head == NULL)
            d->tail = NULL;
        d->queued--;
        free(f);
    }
    return d->head != NULL ? d->head->release_ns : INT64_MAX;
}

static bool s_number(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end = NULL;
    double x = v != NULL ? strtod(v, &end) : 0;
    if (v == NULL || end == v || *end != '\0' || !(x >= lo && x <= hi)) {
        fprintf(stderr, "wire: option %s: expected a number in %g..%g, got '%s'\n", opt, lo, hi,
                v != NULL ? v : "(nothing)");
        return false;
    }
    *out = x;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argv[1][0] == '-' || argv[2][0] == '-') {
        fprintf(stderr, "usage: wire PORT_A PORT_B [--delay-ms D] [--jitter-ms J] [--loss-pct P]"
                        " [--seed S] [--limit N]\n");
        return 2;
    }
    s_link_t l = {.limit = 1000};
    static const struct {
        const char *name;
        double lo, hi;
    } opts[] = {{"--delay-ms", 0, 60000},
                {"--jitter-ms", 0, 60000},
                {"--loss-pct", 0, 100},
                {"--seed", 1, 1e15},
                {"--limit", 1, 1e6}};
    for (int i = 3; i < argc; i += 2) {
        size_t k = 0;
        while (k < sizeof opts / sizeof *opts && strcmp(argv[i], opts[k].name) != 0)
            k++;
        double x = 0;
        if (k == sizeof opts / sizeof *opts) {
            fprintf(stderr, "wire: unknown option '%s'\n", argv[i]);
            return 2;
        }
        if (!s_number(argv[i], i + 1 < argc ? argv[i + 1] : NULL, opts[k].lo, opts[k].hi, &x))
            return 2;
        if (k == 0)
            l.delay_ns = (int64_t)(x * 1e6);
        else if (k == 1)
            l.jitter_ns = (int64_t)(x * 1e6);
        else if (k == 2)
            l.loss = x;
        else if (k == 3)
            s_rng = (uint64_t)x * 0x9e3779b97f4a7c15ULL;
        else
            l.limit = (size_t)x;
    }

    sigset_t block, none;
    sigemptyset(&block);
    sigemptyset(&none);
    int sigs[] = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa = {.sa_handler = s_on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
        sigaddset(&block, sigs[i]);
    }
    sigprocmask(SIG_BLOCK, &block, NULL); /* delivered only inside ppoll: no lost wake-up */

    int a = s_open_port(argv[1]);
    int b = a >= 0 ? s_open_port(argv[2]) : -1;
    unsigned char *buf = malloc(S_FRAME_MAX);
    if (a < 0 || b < 0 || buf == NULL) {
        if (buf == NULL)
            fprintf(stderr, "wire: out of memory\n");
        return 1;
    }
    char ab[128], ba[128];
    snprintf(ab, sizeof ab, "%s->%s", argv[1], argv[2]);
    snprintf(ba, sizeof ba, "%s->%s", argv[2], argv[1]);
    s_dir_t dirs[2] = {{.name = ab, .in = a, .out = b}, {.name = ba, .in = b, .out = a}};
    printf("wire: up (%s <-> %s, delay %.1f ms + 0..%.1f ms, loss %g %%, limit %zu)\n", argv[1],
           argv[2], (double)l.delay_ns / 1e6, (double)l.jitter_ns / 1e6, l.loss, l.limit);
    fflush(stdout);

    while (!s_stop_flag) {
        if (s_cut_flag) {
            s_cut_flag = 0;
            l.cut = true;
            printf("wire: cut\n");
            fflush(stdout);
        }
        if (s_heal_flag) {
            s_heal_flag = 0;
            l.cut = false;
            printf("wire: restored\n");
            fflush(stdout);
        }
        int64_t now = s_now_ns();
        int64_t next = INT64_MAX;
        for (int i = 0; i < 2; i++) {
            int64_t t = s_release(&dirs[i], now);
            if (t < next)
                next = t;
        }
        struct timespec wait = {.tv_sec = 1};
        if (next != INT64_MAX) {
            int64_t dt = next - s_now_ns();
            if (dt < 0)
                dt = 0;
            wait.tv_sec = dt / 1000000000;
            wait.tv_nsec = dt % 1000000000;
        }
        struct pollfd pf[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        int n = ppoll(pf, 2, &wait, &none);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "wire: ppoll: %s\n", strerror(errno));
            break;
        }
        for (int i = 0; i < 2 && n > 0; i++)
            if (pf[i].revents & POLLIN)
                s_receive(&dirs[i], &l, buf);
    }
    for (int i = 0; i < 2; i++)
        printf("wire: %s: %llu forwarded, %llu lost, %llu cut, %llu over the limit, %llu errors\n",
               dirs[i].name, (unsigned long long)dirs[i].forwarded,
               (unsigned long long)dirs[i].lost, (unsigned long long)dirs[i].cut,
               (unsigned long long)dirs[i].overflow, (unsigned long long)dirs[i].errors);
    fflush(stdout);
    free(buf);
    close(a);
    close(b);
    return 0;
}
