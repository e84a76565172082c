/* troupe — multi-rank test program of the two-host cluster (tests/cluster/run.sh partition):
 * a network partition between the hosts is reported by the survivors, by rank, within the
 * deadline (transport/mpi/cluster.h "Deadlines"), and nothing hangs.
 *
 *   partition gate DIR    the link is cut while every rank waits for DIR/cut, then every rank
 *                         issues one allreduce (its fingerprints cannot cross)
 *   partition stream DIR  every rank runs 8 MiB allreduces back to back and prints "rank R:
 *                         streaming" after the third; the link is cut once every rank said so,
 *                         while they stream (in any phase of a collective)
 *
 * At start every rank learns which host each rank runs on (one allreduce of hostname hashes,
 * over the link while it is still up) and prints "rank R on HOST: connected"; in gate mode run.sh
 * then cuts the link once every rank said so, and creates DIR/cut. After the cut each rank must get
 * DEADLINE_EXCEEDED from troupe_event_sync, naming ranks of the other host as not answering,
 * and a rank of its own host only if that rank had failed before (stream mode: its engine then
 * answers no probe); in gate mode exactly the other host's ranks ("ranks 1, 3 did not answer"),
 * within TROUPE_TIMEOUT_S plus the liveness probe's 2 s plus 3 s of slack from the moment
 * DIR/cut appeared (in stream mode run.sh checks that bound from the cut).
 *
 * Each rank prints "rank R: reported after S s: <status>: <message>" (and FAIL lines) and
 * writes the same line, after its failure time (CLOCK_MONOTONIC ns), to DIR/report.R: the output of
 * the ranks across the cut reaches mpiexec only through the cut link, the file system is shared. It
 * then leaves the cluster (troupe_cluster_leave: no MPI_Finalize, which would wait for the peers),
 * waits for DIR/end (run.sh restores the link once every rank reported, then creates it: a rank
 * that exited first would have mpiexec kill its host's other ranks, maybe before they report) and
 * exits 3; 1 after a failed check or a setup failure. */
#define _GNU_SOURCE
#include "actors/troupe.h"
#include "base/clock.h"
#include "base/config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_NS_PER_S 1000000000LL
#define S_MAX_RANKS 64

static int s_rank, s_fails;

static void s_fail(const char *fmt, ...) TROUPE_PRINTF(1, 2);
static void s_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL rank %d: ", s_rank);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    s_fails++;
}

/* One allreduce (sum) of `count` elements of precision p at data, waited for `wait_ns`. */
static troupe_status_t s_allreduce(void *data, int64_t count, troupe_prec_t p, int64_t wait_ns)
{
    troupe_coll_tensor_t t = {
        .data = data, .count = count, .prec = p, .node_id = 1, .name = "partition"};
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_SUM, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_allreduce(&ar, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, wait_ns);
    troupe_event_release(&ev);
    return st;
}

/* behind mode, rank 1: the receive of a node from rank 0 (which never sends it), scheduled on a
 * CPU stream; *out_ev completes (fails) when the transport gives up on it. */
typedef struct s_recv {
    troupe_backend_t *b;
    troupe_stream_t *s;
    troupe_context_t *ctx, *remote, *out;
    troupe_tnode_t *g;
} s_recv_t;

static troupe_status_t s_recv_start(s_recv_t *x, int from, troupe_event_t **out_ev)
{
    troupe_device_t *d = NULL;
    troupe_context_t *c = NULL;
    const int64_t dims[1] = {2};
    const char *label[1] = {"g"};
    const double zero[2] = {0, 0};
    troupe_config_set_auto_host_transfers(false);
    TROUPE_RETURN_IF_ERROR(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &x->b));
    TROUPE_RETURN_IF_ERROR(troupe_get_device(x->b, 0, &d));
    TROUPE_RETURN_IF_ERROR(troupe_new_stream(d, &x->s));
    TROUPE_RETURN_IF_ERROR(troupe_context_new(x->s, &c));
    TROUPE_RETURN_IF_ERROR(
        troupe_tnode_new(label, 1, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &x->g));
    TROUPE_RETURN_IF_ERROR(troupe_tnode_set_values(x->g, zero, 2));
    troupe_status_t st = troupe_init_from_host(c, x->g, &x->ctx, NULL);
    troupe_context_release(&c);
    TROUPE_RETURN_IF_ERROR(st);
    TROUPE_RETURN_IF_ERROR(troupe_context_new_remote(from, &x->remote));
    return troupe_device_to_device(x->g, TROUPE_MERGE_NO, x->ctx, x->remote, NULL, &x->out, out_ev);
}

static void s_recv_free(s_recv_t *x)
{
    troupe_context_release(&x->out);
    troupe_context_release(&x->remote);
    troupe_context_release(&x->ctx);
    troupe_tnode_release(&x->g);
    troupe_stream_release(&x->s);
    troupe_backend_close(&x->b);
}

/* Waits (up to 120 s) until the file exists. */
static void s_wait_for(const char *path)
{
    int64_t give_up = troupe_now_ns() + 120 * S_NS_PER_S;
    while (access(path, F_OK) != 0 && troupe_now_ns() < give_up)
        usleep(10000);
    if (access(path, F_OK) != 0)
        s_fail("'%s' did not appear within 120 s", path);
}

/* FNV-1a of this rank's host name, never 0. */
static int64_t s_host_hash(char *name, size_t cap)
{
    if (gethostname(name, cap) != 0)
        snprintf(name, cap, "?");
    name[cap - 1] = '\0';
    uint64_t h = 1469598103934665603ULL;
    for (const char *c = name; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return (int64_t)(h >> 1 | 1);
}

/* Checks a failure report against the ranks of the other host (`other`, size entries); the
 * ranks it names go to named[]. A rank of this host named in stream mode is checked later
 * (s_check_local). */
static void s_check_report(troupe_status_t st, const char *msg, const bool *other, int size,
                           bool gate, double elapsed_s, double bound_s, bool *named)
{
    if (st != TROUPE_DEADLINE_EXCEEDED)
        s_fail("expected DEADLINE_EXCEEDED after the partition, got %s", troupe_status_str(st));
    if (gate && elapsed_s > bound_s)
        s_fail("the report took %.1f s, more than the deadline's %.1f s", elapsed_s, bound_s);
    /* "rank 3 did not answer" or "ranks 1, 3 did not answer": the list before " did not". */
    const char *end = strstr(msg, " did not answer");
    const char *start = end;
    while (start != NULL && start > msg && strncmp(start, "rank", 4) != 0)
        start--;
    if (end == NULL || start == NULL || strncmp(start, "rank", 4) != 0) {
        s_fail("the report names no ranks that did not answer: %s", msg);
        return;
    }
    const char *p = start + (start[4] == 's' ? 6 : 5);
    while (p < end) {
        char *next = NULL;
        long r = strtol(p, &next, 10);
        if (next == p || r < 0 || r >= size) {
            s_fail("cannot read the rank list of: %s", msg);
            return;
        }
        named[r] = true;
        p = next;
        while (p < end && (*p == ',' || *p == ' '))
            p++;
    }
    int nother = 0;
    for (int r = 0; r < size; r++) {
        nother += named[r] && other[r];
        if (gate && named[r] && !other[r])
            s_fail("rank %d is on this rank's host, yet the report names it: %s", r, msg);
        if (gate && other[r] && !named[r])
            s_fail("rank %d is across the partition, yet the report does not name it: %s", r, msg);
    }
    if (nother == 0)
        s_fail("the report names no rank across the partition: %s", msg);
}

/* behind mode: rank 0 waits in an allreduce that rank 1 never issues, rank 1 in a receive that
 * rank 0 never sends; each engine answers the other's liveness probe, so each must name the
 * other as alive but not at the collective, not as dead. */
static void s_check_behind(troupe_status_t st, const char *msg, double elapsed_s, double bound_s)
{
    char want[128];
    snprintf(want, sizeof want, "rank %d answered a liveness probe but did not reach", 1 - s_rank);
    if (st != TROUPE_DEADLINE_EXCEEDED)
        s_fail("expected DEADLINE_EXCEEDED, got %s: %s", troupe_status_str(st), msg);
    else if (strstr(msg, want) == NULL || strstr(msg, "did not answer") != NULL)
        s_fail("the report does not say '%s' (and nothing else): %s", want, msg);
    if (elapsed_s > bound_s)
        s_fail("the report took %.1f s, more than the deadline's %.1f s", elapsed_s, bound_s);
}

/* Stream mode, once every rank reported: a rank of this host may be named only if it had failed
 * before this rank's verdict (a failed rank's engine answers no more probes), by the failure
 * times in dir/report.R. */
static void s_check_local(const char *dir, const bool *named, const bool *other, int size,
                          int64_t my_fail_ns)
{
    for (int r = 0; r < size; r++) {
        if (!named[r] || other[r])
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/report.%d", dir, r);
        FILE *f = fopen(path, "r");
        long long fail_ns = 0;
        bool read = f != NULL && fscanf(f, "%lld", &fail_ns) == 1;
        if (f != NULL)
            fclose(f);
        if (!read)
            s_fail("rank %d of this host is named, and its report '%s' cannot be read", r, path);
        else if (fail_ns >= my_fail_ns)
            s_fail("rank %d of this host is named although it failed %.3f s after this rank", r,
                   (double)(fail_ns - my_fail_ns) / 1e9);
        else
            printf("rank %d: rank %d of this host is named: it failed %.3f s before (and so "
                   "answered no more probes)\n",
                   s_rank, r, (double)(my_fail_ns - fail_ns) / 1e9);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[1] : "";
    bool gate = strcmp(mode, "gate") == 0, stream = strcmp(mode, "stream") == 0;
    bool behind = strcmp(mode, "behind") == 0;
    if (!gate && !stream && !behind) {
        printf("usage: partition gate|stream|behind DIR\n");
        return 2;
    }
    char cut_file[4096], end_file[4096], report[4096], report_tmp[4096 + 8];
    snprintf(cut_file, sizeof cut_file, "%s/cut", argv[2]);
    snprintf(end_file, sizeof end_file, "%s/end", argv[2]);
    troupe_status_t st = troupe_cluster_init(&argc, &argv);
    if (st != TROUPE_OK) {
        printf("FAIL: troupe_cluster_init: %s: %s\n", troupe_status_str(st), troupe_last_error());
        return 1;
    }
    s_rank = troupe_cluster_rank();
    int size = troupe_cluster_size();
    if (size < 2 || size > S_MAX_RANKS || (behind && size != 2)) {
        s_fail("expected %s ranks, got %d", behind ? "2" : "2 to 64", size);
        return 1;
    }

    /* Where every rank runs: slot r holds rank r's host hash, the others 0, summed. */
    char host[256];
    int64_t hashes[S_MAX_RANKS] = {0};
    int64_t mine = s_host_hash(host, sizeof host);
    hashes[s_rank] = mine;
    st = s_allreduce(hashes, size, TROUPE_PREC_INT64, 60 * S_NS_PER_S);
    if (st != TROUPE_OK) {
        s_fail("the allreduce of host names before the partition: %s: %s", troupe_status_str(st),
               troupe_last_error());
        return 1;
    }
    bool other[S_MAX_RANKS] = {false};
    int nother = 0;
    for (int r = 0; r < size; r++) {
        other[r] = hashes[r] != mine;
        nother += other[r];
    }
    if (nother == 0)
        s_fail("every rank runs on host '%s': no partition can separate them", host);
    printf("rank %d on %s: connected\n", s_rank, host);
    fflush(stdout);

    const int64_t count = stream ? (2LL << 20) : 1024; /* floats: 8 MiB or 4 KiB */
    float *buf = calloc((size_t)count, sizeof *buf);
    if (buf == NULL) {
        s_fail("out of memory");
        return 1;
    }
    /* gate: the report is due within the bound from the moment DIR/cut appeared (the link was
     * cut before). stream: the cut's moment is run.sh's, which checks the bound. */
    double bound_s = (double)troupe_config_timeout_s() + 2.0 + 3.0;
    int64_t t0 = troupe_now_ns();
    int k = 0;
    s_recv_t recv = {0};
    if (behind && s_rank == 1) {
        troupe_event_t *ev = NULL;
        st = s_recv_start(&recv, 0, &ev);
        if (st == TROUPE_OK)
            st = troupe_event_sync(ev, 120 * S_NS_PER_S);
        troupe_event_release(&ev);
        if (st == TROUPE_OK)
            s_fail("a receive from rank 0, which never sends, completed");
    } else if (gate || behind) {
        if (gate)
            s_wait_for(cut_file);
        t0 = troupe_now_ns();
        st = s_allreduce(buf, count, TROUPE_PREC_SINGLE, 120 * S_NS_PER_S);
    } else {
        for (k = 0; k < 100000 && st == TROUPE_OK; k++) {
            if (k == 3) {
                printf("rank %d: streaming\n", s_rank);
                fflush(stdout);
            }
            t0 = troupe_now_ns();
            st = s_allreduce(buf, count, TROUPE_PREC_SINGLE, 120 * S_NS_PER_S);
        }
        k--;
    }
    int64_t fail_ns = troupe_now_ns();
    bool named[S_MAX_RANKS] = {false};
    char msg[1200];
    snprintf(msg, sizeof msg, "%s", st == TROUPE_OK ? "" : troupe_last_error());
    double elapsed_s = (double)(troupe_now_ns() - t0) / 1e9;
    if (behind)
        s_check_behind(st, msg, elapsed_s, bound_s);
    else if (st == TROUPE_OK)
        s_fail("the allreduce%s succeeded although the link is cut", stream ? "s" : "");
    else
        s_check_report(st, msg, other, size, gate, elapsed_s, bound_s, named);
    char line[1600];
    snprintf(line, sizeof line,
             "rank %d: reported after %.1f s (since the %s; %d allreduces before): %s: %s\n",
             s_rank, elapsed_s, stream ? "last allreduce began" : "cut file appeared", k,
             troupe_status_str(st), msg);
    fputs(line, stdout);
    fflush(stdout);
    snprintf(report, sizeof report, "%s/report.%d", argv[2], s_rank);
    snprintf(report_tmp, sizeof report_tmp, "%s.tmp", report);
    FILE *f = fopen(report_tmp, "w");
    bool written = f != NULL && fprintf(f, "%lld %s", (long long)fail_ns, line) > 0;
    if (f != NULL && fclose(f) != 0)
        written = false;
    if (!written || rename(report_tmp, report) != 0)
        s_fail("cannot write '%s'", report);
    troupe_status_t lst = troupe_cluster_leave(msg);
    if (lst != TROUPE_OK)
        s_fail("troupe_cluster_leave: %s: %s", troupe_status_str(lst), troupe_last_error());
    s_wait_for(end_file);
    if (stream)
        s_check_local(argv[2], named, other, size, fail_ns);
    s_recv_free(&recv);
    free(buf);
    return s_fails == 0 ? 3 : 1;
}
