/* troupe — `troupe trace merge [-o OUT] [--all] FILE|PREFIX...` (base/trace.h writes the
 * inputs: one Chrome trace-event file per rank, PREFIX.<rank>.json).
 *
 * Merge. Every input is read with a JSON parser (libjansson), checked (an object with a
 * "traceEvents" array and "otherData" naming the rank and its clock offset; complete events
 * with numeric ts and dur, integer pid and tid, a name), and its events are shifted by the
 * rank's clock offset to rank 0 (measured at troupe_cluster_init) and written, one input at a
 * time, into OUT (default PREFIX.merged.json), which Perfetto and chrome://tracing open as one
 * timeline with a process per rank. A PREFIX argument stands for PREFIX.0.json,
 * PREFIX.1.json, ... (as many as exist); an input that is itself a merged file (a shell glob
 * PREFIX* picks up an earlier OUT) is skipped with a note.
 *
 * Straggler report (stdout). A rank arrives at a collective when it hands the collective to
 * its transport (its "collective" event begins: the stream or host thread reached it); the
 * collective waits for the last rank. Per collective (sequence number): the rank that arrived
 * last and how long the earliest rank waited for it ("late by"); per rank: how often it was
 * last, and the mean, 99th percentile (nearest rank) and largest of its lateness (arrival minus
 * the earliest arrival); per step phase (the phase the issuing thread named, e.g.
 * dp.gradients, dp.loss; base/trace.h troupe_trace_set_phase): the collectives, the rank most
 * often last, and the mean, p99 and largest "late by". Collectives some rank never reached
 * (it stalled or failed, or its file ended first) are listed.
 *
 * Exit status: 0 merged, 1 an input is missing or malformed (one line naming the file and the
 * problem) or OUT cannot be written, 2 usage.
 */
#define _GNU_SOURCE
#include "tools/troupe/cmd_impl.h"

#include "base/alloc.h"
#include "base/file_impl.h"
#include "base/trace.h"
#include "base/vec.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if TROUPE_CLI_HAVE_JANSSON
#include <jansson.h>
#endif

#define S_TOP_COLLECTIVES 20 /* per-collective lines printed without --all */
#define S_NAME_MAX 48
/* Largest trace file merged: a rank writes at most TROUPE_TRACE_MAX_EVENTS_PER_THREAD events per
 * thread, about 200 bytes each; the JSON tree takes several times the file in memory. */
#define S_MAX_TRACE_BYTES (UINT64_C(2) << 30)

static void s_usage(FILE *f)
{
    fprintf(f, "usage: troupe trace merge [-o OUT] [--all] FILE|PREFIX...\n"
               "  merges the per-rank trace files that TROUPE_TRACE=PREFIX wrote\n"
               "  (PREFIX.<rank>.json) into one timeline OUT (default PREFIX.merged.json,\n"
               "  for Perfetto or chrome://tracing), aligning the ranks' clocks, and prints\n"
               "  the straggler report; --all lists every collective, not the %d latest.\n",
               S_TOP_COLLECTIVES);
}

#if TROUPE_CLI_HAVE_JANSSON

/* One rank's arrival at one collective. */
typedef struct s_arrival {
    uint64_t seq;
    int rank;
    double ts_us; /* on rank 0's clock */
    int phase;    /* index in s_m.phases, -1 none */
    bool failed;
    bool complete;  /* every rank reached this collective */
    double late_us; /* then: ts_us minus the earliest rank's */
    char name[S_NAME_MAX];
} s_arrival_t;

typedef struct s_input {
    char *path;
    int rank, size;
    double offset_us, rtt_us;
    bool same_clock; /* rank 0's very clock: the offset is exact */
    int64_t dropped;
} s_input_t;

static struct {
    s_input_t *in;
    size_t nin, in_cap;
    s_arrival_t *arr;
    size_t narr, arr_cap;
    char **phases;
    size_t nphases, phases_cap;
    int nranks; /* highest rank seen + 1 */
    int size;   /* the cluster size the files state */
} s_m;

/* ---- input -------------------------------------------------------------------------------- */

static int s_bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int s_bad(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "troupe trace merge: %s: ", path);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static int s_oom(void)
{
    fprintf(stderr, "troupe trace merge: out of memory\n");
    return 1;
}

static int s_phase_index(const char *phase)
{
    if (phase == NULL || phase[0] == '\0')
        return -1;
    for (size_t i = 0; i < s_m.nphases; i++)
        if (strcmp(s_m.phases[i], phase) == 0)
            return (int)i;
    char *copy = troupe_strdup(phase);
    if (copy == NULL || !TROUPE__VEC_PUSH(s_m.phases, s_m.nphases, s_m.phases_cap, copy)) {
        troupe_free(copy);
        return -2;
    }
    return (int)s_m.nphases - 1;
}

/* A number member of `obj` (integer or real); false when absent or not a number. */
static bool s_num(json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

/* Checks event i of `path` and shifts its time; records a collective's arrival. */
static int s_event(const s_input_t *in, size_t i, json_t *ev)
{
    if (!json_is_object(ev))
        return s_bad(in->path, "traceEvents[%zu] is not an object", i);
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    if (ph == NULL)
        return s_bad(in->path, "traceEvents[%zu] has no \"ph\" string", i);
    double ts = 0, dur = 0;
    bool has_ts = json_object_get(ev, "ts") != NULL;
    if (has_ts && !s_num(ev, "ts", &ts))
        return s_bad(in->path, "traceEvents[%zu]: \"ts\" is not a finite number", i);
    if (strcmp(ph, "X") == 0) {
        if (!has_ts)
            return s_bad(in->path, "traceEvents[%zu]: complete event without \"ts\"", i);
        if (!s_num(ev, "dur", &dur) || dur < 0)
            return s_bad(in->path, "traceEvents[%zu]: complete event without a \"dur\" >= 0", i);
        if (!json_is_integer(json_object_get(ev, "pid")) ||
            !json_is_integer(json_object_get(ev, "tid")))
            return s_bad(in->path, "traceEvents[%zu]: \"pid\" or \"tid\" is not an integer", i);
        if (!json_is_string(json_object_get(ev, "name")))
            return s_bad(in->path, "traceEvents[%zu]: complete event without a \"name\"", i);
    }
    if (has_ts && json_object_set_new(ev, "ts", json_real(ts - in->offset_us)) != 0)
        return s_oom();
    const char *cat = json_string_value(json_object_get(ev, "cat"));
    if (strcmp(ph, "X") != 0 || cat == NULL || strcmp(cat, "collective") != 0)
        return 0;
    json_t *args = json_object_get(ev, "args");
    json_t *seq = json_object_get(args, "seq");
    if (!json_is_integer(seq) || json_integer_value(seq) < 1)
        return s_bad(in->path, "traceEvents[%zu]: collective without an integer args.seq >= 1",
                     i);
    s_arrival_t a = {.seq = (uint64_t)json_integer_value(seq),
                     .rank = in->rank,
                     .ts_us = ts - in->offset_us};
    a.phase = s_phase_index(json_string_value(json_object_get(args, "phase")));
    if (a.phase == -2)
        return s_oom();
    const char *status = json_string_value(json_object_get(args, "status"));
    a.failed = status != NULL && strcmp(status, "OK") != 0;
    snprintf(a.name, sizeof a.name, "%s", json_string_value(json_object_get(ev, "name")));
    if (!TROUPE__VEC_PUSH(s_m.arr, s_m.narr, s_m.arr_cap, a))
        return s_oom();
    return 0;
}

/* Reads `path`'s header into *in; *skip for a merged file. */
static int s_header(json_t *root, s_input_t *in, bool *skip)
{
    *skip = false;
    if (!json_is_object(root))
        return s_bad(in->path, "the top level is not an object with \"traceEvents\"");
    json_t *meta = json_object_get(root, "otherData");
    if (json_is_true(json_object_get(meta, "troupe_merged"))) {
        *skip = true;
        return 0;
    }
    if (!json_is_array(json_object_get(root, "traceEvents")))
        return s_bad(in->path, "no \"traceEvents\" array");
    if (!json_is_object(meta))
        return s_bad(in->path, "no \"otherData\" object (not written by TROUPE_TRACE?)");
    json_t *rank = json_object_get(meta, "rank");
    if (!json_is_integer(rank) || json_integer_value(rank) < 0 ||
        json_integer_value(rank) > (1 << 24))
        return s_bad(in->path, "otherData.rank is missing or not a rank number");
    in->rank = (int)json_integer_value(rank);
    if (!s_num(meta, "clock_offset_us", &in->offset_us))
        return s_bad(in->path, "otherData.clock_offset_us is missing or not a number");
    if (!s_num(meta, "clock_rtt_us", &in->rtt_us))
        in->rtt_us = 0;
    in->same_clock = json_is_true(json_object_get(meta, "clock_same_as_rank0"));
    json_t *size = json_object_get(meta, "size");
    in->size = json_is_integer(size) ? (int)json_integer_value(size) : 0;
    json_t *dropped = json_object_get(meta, "dropped_events");
    in->dropped = json_is_integer(dropped) ? json_integer_value(dropped) : 0;
    return 0;
}

/* Reads, checks, shifts and writes input k's events to `out` (*first: no comma yet). */
static int s_merge_one(size_t k, FILE *out, bool *first, bool *skipped)
{
    s_input_t *in = &s_m.in[k];
    json_error_t err;
    int fd = -1;
    struct stat sb;
    if (troupe__file_open_regular(in->path, "a trace (PREFIX.<rank>.json)", S_MAX_TRACE_BYTES, 0,
                                  &fd, &sb) != TROUPE_OK) {
        fprintf(stderr, "troupe trace merge: %s\n", troupe_last_error());
        return 1;
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &err);
    close(fd);
    if (root == NULL) {
        if (err.line < 0)
            return s_bad(in->path, "%s", err.text);
        return s_bad(in->path, "not valid JSON: line %d, column %d: %s", err.line, err.column,
                     err.text);
    }
    int rc = s_header(root, in, skipped);
    if (rc != 0 || *skipped)
        goto free_root;
    for (size_t e = 0; e < k; e++) { /* the inputs before this one (skipped: rank -1) */
        if (s_m.in[e].rank == in->rank) {
            rc = s_bad(in->path, "rank %d again (also in %s)", in->rank, s_m.in[e].path);
            goto free_root;
        }
    }
    json_t *events = json_object_get(root, "traceEvents");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        rc = s_event(in, i, ev);
        if (rc != 0)
            goto free_root;
        if (!*first)
            fputs(",\n", out);
        *first = false;
        if (json_dumpf(ev, out, JSON_COMPACT | JSON_REAL_PRECISION(16)) != 0) {
            rc = 1;
            goto free_root;
        }
    }
    if (in->rank + 1 > s_m.nranks)
        s_m.nranks = in->rank + 1;
    if (in->size > s_m.size)
        s_m.size = in->size;
free_root:
    json_decref(root);
    return rc;
}

/* ---- the straggler report ----------------------------------------------------------------- */

static int s_by_seq_rank(const void *a, const void *b)
{
    const s_arrival_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int s_by_rank_seq(const void *a, const void *b)
{
    const s_arrival_t *x = a, *y = b;
    if (x->rank != y->rank)
        return (x->rank > y->rank) - (x->rank < y->rank);
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int s_by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean, 99th percentile (nearest rank) and largest of v[0..n) (sorted here). */
static void s_stats(double *v, size_t n, double *mean, double *p99, double *max)
{
    *mean = *p99 = *max = 0;
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, s_by_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    *mean = sum / (double)n;
    size_t k = (size_t)ceil(0.99 * (double)n);
    *p99 = v[k > 0 ? k - 1 : 0];
    *max = v[n - 1];
}

/* One collective reached by every rank: who came last, and when. */
typedef struct s_coll {
    uint64_t seq;
    int last;
    double late_by_us;
    int phase;
    bool failed;
    char name[S_NAME_MAX];
} s_coll_t;

static int s_by_late(const void *a, const void *b)
{
    const s_coll_t *x = a, *y = b;
    if (x->late_by_us != y->late_by_us)
        return x->late_by_us < y->late_by_us ? 1 : -1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const char *s_phase_name(int phase)
{
    return phase >= 0 ? s_m.phases[phase] : "(none)";
}

static void s_print_colls(const s_coll_t *c, size_t n, bool all)
{
    s_coll_t *order = troupe_calloc(n ? n : 1, sizeof *order);
    if (order == NULL)
        return;
    memcpy(order, c, n * sizeof *c);
    size_t shown = n;
    if (!all && n > S_TOP_COLLECTIVES) {
        qsort(order, n, sizeof *order, s_by_late);
        shown = S_TOP_COLLECTIVES;
    }
    printf("\nper collective: the rank that arrived last, and how long the earliest rank waited "
           "for it\n");
    printf("  %-24s %-16s %5s %14s\n", "collective", "phase", "last", "late by (us)");
    for (size_t i = 0; i < shown; i++)
        printf("  %-24s %-16s %5d %14.1f%s\n", order[i].name, s_phase_name(order[i].phase),
               order[i].last, order[i].late_by_us, order[i].failed ? "  (failed)" : "");
    if (shown < n)
        printf("  (the %zu latest of %zu collectives; --all lists every one)\n", shown, n);
    troupe_free(order);
}

/* Per rank, from the arrivals at complete collectives (s_m.arr is re-sorted by rank). */
static int s_print_ranks(const s_coll_t *c, size_t ncoll)
{
    double *v = troupe_calloc(s_m.narr ? s_m.narr : 1, sizeof *v);
    size_t *last = troupe_calloc((size_t)s_m.nranks, sizeof *last);
    if (v == NULL || last == NULL) {
        troupe_free(v);
        troupe_free(last);
        return s_oom();
    }
    for (size_t i = 0; i < ncoll; i++)
        last[c[i].last]++;
    qsort(s_m.arr, s_m.narr, sizeof *s_m.arr, s_by_rank_seq);
    printf("\nper rank: lateness = its arrival minus the earliest rank's, at each collective\n");
    printf("  %-5s %11s %8s %12s %12s %12s\n", "rank", "collectives", "last in", "mean (us)",
           "p99 (us)", "max (us)");
    for (size_t i = 0, j; i < s_m.narr; i = j) {
        size_t n = 0;
        for (j = i; j < s_m.narr && s_m.arr[j].rank == s_m.arr[i].rank; j++)
            if (s_m.arr[j].complete)
                v[n++] = s_m.arr[j].late_us;
        double mean, p99, max;
        s_stats(v, n, &mean, &p99, &max);
        printf("  %-5d %11zu %8zu %12.1f %12.1f %12.1f\n", s_m.arr[i].rank, n,
               last[s_m.arr[i].rank], mean, p99, max);
    }
    troupe_free(v);
    troupe_free(last);
    return 0;
}

static void s_print_phases(const s_coll_t *c, size_t ncoll)
{
    printf("\nper step phase: how late the last rank was\n");
    printf("  %-16s %11s %-22s %12s %12s %12s\n", "phase", "collectives", "most often last",
           "mean (us)", "p99 (us)", "max (us)");
    double *v = troupe_calloc(ncoll ? ncoll : 1, sizeof *v);
    int *count = troupe_calloc((size_t)s_m.nranks, sizeof *count);
    for (int p = -1; v != NULL && count != NULL && p < (int)s_m.nphases; p++) {
        size_t n = 0;
        memset(count, 0, (size_t)s_m.nranks * sizeof *count);
        for (size_t i = 0; i < ncoll; i++) {
            if (c[i].phase != p)
                continue;
            v[n++] = c[i].late_by_us;
            count[c[i].last]++;
        }
        if (n == 0)
            continue;
        int most = 0;
        for (int r = 1; r < s_m.nranks; r++)
            most = count[r] > count[most] ? r : most;
        char who[64];
        snprintf(who, sizeof who, "rank %d (%d of %zu)", most, count[most], n);
        double mean, p99, max;
        s_stats(v, n, &mean, &p99, &max);
        printf("  %-16s %11zu %-22s %12.1f %12.1f %12.1f\n", s_phase_name(p), n, who, mean, p99,
               max);
    }
    troupe_free(v);
    troupe_free(count);
}

static int s_report(bool all)
{
    printf("straggler report: %d rank(s)", s_m.nranks);
    int shown = 0;
    for (size_t k = 0; k < s_m.nin; k++) {
        if (s_m.in[k].rank == 0)
            continue;
        printf("%s rank %d %+.3f us", shown++ ? "," : "; clock offsets to rank 0:",
               s_m.in[k].rank, s_m.in[k].offset_us);
        if (s_m.in[k].same_clock)
            printf(" (same clock)");
        else
            printf(" (+-%.3f)", s_m.in[k].rtt_us / 2);
    }
    printf("\n");
    bool *have = troupe_calloc((size_t)s_m.nranks, sizeof *have);
    if (have == NULL)
        return s_oom();
    for (size_t k = 0; k < s_m.nin; k++)
        have[s_m.in[k].rank] = true;
    int total = s_m.size > s_m.nranks ? s_m.size : s_m.nranks;
    for (int r = 0; r < total; r++)
        if (r >= s_m.nranks || !have[r])
            printf("note: no file for rank %d of %d: its lateness is not known\n", r, total);
    for (size_t k = 0; k < s_m.nin; k++)
        if (s_m.in[k].dropped > 0)
            printf("note: %s dropped %" PRId64 " events (a thread's buffer was full)\n",
                   s_m.in[k].path, s_m.in[k].dropped);
    troupe_free(have);
    if (s_m.nranks < 2) {
        printf("one rank: no collective waited for another rank\n");
        return 0;
    }
    qsort(s_m.arr, s_m.narr, sizeof *s_m.arr, s_by_seq_rank);
    s_coll_t *coll = troupe_calloc(s_m.narr ? s_m.narr : 1, sizeof *coll);
    if (coll == NULL)
        return s_oom();
    size_t ncoll = 0, partial = 0;
    for (size_t i = 0, j; i < s_m.narr; i = j) {
        for (j = i; j < s_m.narr && s_m.arr[j].seq == s_m.arr[i].seq; j++) {
        }
        if ((int)(j - i) < s_m.nranks) {
            if (partial++ < 10) {
                printf("%s%s (seq %" PRIu64 "): reached by rank(s)",
                       partial == 1 ? "\nnot reached by every rank:\n  " : "  ", s_m.arr[i].name,
                       s_m.arr[i].seq);
                for (size_t k = i; k < j; k++)
                    printf(" %d", s_m.arr[k].rank);
                printf(" only; the others never reached it, or their trace ended first\n");
            }
            continue;
        }
        double first = s_m.arr[i].ts_us;
        size_t last = i;
        bool failed = false;
        for (size_t k = i; k < j; k++) {
            first = s_m.arr[k].ts_us < first ? s_m.arr[k].ts_us : first;
            last = s_m.arr[k].ts_us > s_m.arr[last].ts_us ? k : last;
            failed = failed || s_m.arr[k].failed;
        }
        for (size_t k = i; k < j; k++) {
            s_m.arr[k].complete = true;
            s_m.arr[k].late_us = s_m.arr[k].ts_us - first;
        }
        coll[ncoll] = (s_coll_t){.seq = s_m.arr[i].seq,
                                 .last = s_m.arr[last].rank,
                                 .late_by_us = s_m.arr[last].ts_us - first,
                                 .phase = s_m.arr[last].phase,
                                 .failed = failed};
        memcpy(coll[ncoll++].name, s_m.arr[last].name, S_NAME_MAX);
    }
    if (partial > 10)
        printf("  (%zu more)\n", partial - 10);
    int rc = 0;
    if (ncoll == 0) {
        printf("no collective was reached by every rank\n");
    } else {
        s_print_colls(coll, ncoll, all);
        rc = s_print_ranks(coll, ncoll);
        s_print_phases(coll, ncoll);
    }
    troupe_free(coll);
    return rc;
}

/* ---- the command -------------------------------------------------------------------------- */

static bool s_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Adds `arg` (a file, or a PREFIX standing for PREFIX.<rank>.json) to the inputs. */
static int s_add_input(const char *arg)
{
    struct stat sb;
    if (stat(arg, &sb) == 0 && !S_ISREG(sb.st_mode))
        return s_bad(arg, "%s, not a regular file: expected a trace (PREFIX.<rank>.json)",
                     S_ISDIR(sb.st_mode)    ? "a directory"
                     : S_ISCHR(sb.st_mode)  ? "a character device"
                     : S_ISBLK(sb.st_mode)  ? "a block device"
                     : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                            : "a special file");
    if (s_is_file(arg)) {
        s_input_t in = {.path = troupe_strdup(arg)};
        if (in.path == NULL || !TROUPE__VEC_PUSH(s_m.in, s_m.nin, s_m.in_cap, in))
            return s_oom();
        return 0;
    }
    int found = 0;
    for (int r = 0;; r++) {
        char *p = troupe_strdup_printf("%s.%d.json", arg, r);
        if (p == NULL)
            return s_oom();
        if (!s_is_file(p)) {
            troupe_free(p);
            break;
        }
        s_input_t in = {.path = p};
        if (!TROUPE__VEC_PUSH(s_m.in, s_m.nin, s_m.in_cap, in)) {
            troupe_free(p);
            return s_oom();
        }
        found++;
    }
    if (found == 0)
        return s_bad(arg, "no such file (nor %s.0.json)", arg);
    return 0;
}

/* OUT when -o is not given: the first input's PREFIX (without ".<rank>.json") + .merged.json. */
static char *s_default_out(const char *first)
{
    size_t n = strlen(first);
    if (n > 5 && strcmp(first + n - 5, ".json") == 0) {
        n -= 5;
        size_t d = n;
        while (d > 0 && first[d - 1] >= '0' && first[d - 1] <= '9')
            d--;
        if (d < n && d > 0 && first[d - 1] == '.')
            n = d - 1;
    }
    return troupe_strdup_printf("%.*s.merged.json", (int)n, first);
}

static int s_merge(const char *out_path, bool all)
{
    char *tmp = troupe_strdup_printf("%s.tmp.%ld", out_path, (long)getpid());
    if (tmp == NULL)
        return s_oom();
    FILE *out = fopen(tmp, "w");
    if (out == NULL) {
        int rc = s_bad(out_path, "cannot create %s: %s", tmp, strerror(errno));
        troupe_free(tmp);
        return rc;
    }
    int rc = 0;
    bool first = true;
    size_t merged = 0;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", out);
    for (size_t k = 0; k < s_m.nin && rc == 0; k++) {
        if (strcmp(s_m.in[k].path, out_path) == 0) {
            fprintf(stderr, "troupe trace merge: %s: the output itself: skipped\n",
                    s_m.in[k].path);
            s_m.in[k].rank = -1;
            continue;
        }
        bool skipped = false;
        rc = s_merge_one(k, out, &first, &skipped);
        if (skipped) {
            fprintf(stderr, "troupe trace merge: %s: a merged file, not a rank's: skipped\n",
                    s_m.in[k].path);
            s_m.in[k].rank = -1;
        } else if (rc == 0) {
            merged++;
        }
    }
    /* drop the skipped inputs from the report */
    size_t w = 0;
    for (size_t k = 0; k < s_m.nin; k++) {
        if (s_m.in[k].rank >= 0)
            s_m.in[w++] = s_m.in[k];
        else
            troupe_free(s_m.in[k].path);
    }
    s_m.nin = w;
    if (rc == 0 && merged == 0)
        rc = s_bad(out_path, "no rank's trace file among the inputs");
    if (rc == 0) {
        fprintf(out, "\n],\n\"otherData\":{\"troupe_merged\":true,\"ranks\":%zu,\"clock_offsets_us\":{",
                merged);
        for (size_t k = 0; k < s_m.nin; k++)
            fprintf(out, "%s\"%d\":%.3f", k ? "," : "", s_m.in[k].rank, s_m.in[k].offset_us);
        fputs("}}}\n", out);
    }
    bool bad = ferror(out) != 0;
    if (fclose(out) != 0)
        bad = true;
    if (rc == 0 && (bad || rename(tmp, out_path) != 0))
        rc = s_bad(out_path, "cannot write: %s", strerror(errno));
    if (rc != 0)
        remove(tmp);
    troupe_free(tmp);
    if (rc == 0) {
        fprintf(stderr, "troupe trace merge: %zu rank(s) merged into %s\n", merged, out_path);
        rc = s_report(all);
    }
    return rc;
}

static void s_free_all(void)
{
    for (size_t k = 0; k < s_m.nin; k++)
        troupe_free(s_m.in[k].path);
    for (size_t k = 0; k < s_m.nphases; k++)
        troupe_free(s_m.phases[k]);
    troupe_free(s_m.in);
    troupe_free(s_m.arr);
    troupe_free(s_m.phases);
    memset(&s_m, 0, sizeof s_m);
}

static int s_cmd_merge(int argc, char **argv)
{
    const char *out = NULL;
    bool all = false;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "troupe trace merge: %s needs a file name\n", argv[i]);
                return 2;
            }
            out = argv[++i];
        } else if (strcmp(argv[i], "--all") == 0) {
            all = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            s_usage(stdout);
            s_free_all();
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "troupe trace merge: unknown option '%s'\n", argv[i]);
            s_usage(stderr);
            s_free_all();
            return 2;
        } else {
            rc = s_add_input(argv[i]);
        }
    }
    if (rc == 0 && s_m.nin == 0) {
        fprintf(stderr, "troupe trace merge: no input files\n");
        s_usage(stderr);
        s_free_all();
        return 2;
    }
    char *def = NULL;
    if (rc == 0 && out == NULL) {
        def = s_default_out(s_m.in[0].path);
        if (def == NULL)
            rc = s_oom();
        out = def;
    }
    if (rc == 0)
        rc = s_merge(out, all);
    troupe_free(def);
    s_free_all();
    return rc;
}

#else /* !TROUPE_CLI_HAVE_JANSSON */

static int s_cmd_merge(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "troupe trace merge: this troupe was built without libjansson (Debian: "
                    "libjansson-dev; deploy/setup.sh installs it), which it reads traces with\n");
    return 1;
}

#endif

int troupe__cmd_trace(int argc, char **argv)
{
    argc--; /* argv[1] is "trace" (cmd_impl.h): from here argv[0] is */
    argv++;
    if (argc >= 2 && strcmp(argv[1], "merge") == 0)
        return s_cmd_merge(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        s_usage(stdout);
        return 0;
    }
    if (argc >= 2)
        fprintf(stderr, "troupe trace: unknown subcommand '%s'\n", argv[1]);
    s_usage(stderr);
    return 2;
}
