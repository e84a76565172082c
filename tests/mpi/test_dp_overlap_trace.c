/* troupe — the overlap shown by the trace (docs/parallel.md, Overlap; base/trace.h), on two
 * ranks of one cpu stream each (the layout of the GPT bench), with the optimizer step fused
 * into each bucket's allreduce. The linear regression of tests/dp_test_model.h splits in two
 * segments at a bucket per gradient (bucket_bytes 1): dp_grad_s0 (the forward pass and the
 * weight's gradient) and dp_grad_s1 (the bias gradient's backward). TROUPE_TRACE is set by
 * CTest. With overlap on, AdamW, STEPS steps:
 *   - the update is fused (troupe_dp_fused_update) and the routine is in 2 segments;
 *   - in this rank's trace, per step, bucket 0's allreduce (a "collective" of phase
 *     dp.gradients: its span starts when the owner stream hands the bucket to the transport
 *     engine) starts after dp_grad_s0 ended (its last gradient is written) and no later than
 *     dp_grad_s1 starts, so before the backward pass of the earlier layer has finished, and
 *     the owner stream does not wait for it in between. Both orders are forced by
 *     construction (the hand-off and the two routines run on the owner stream's thread, in
 *     that order), so they hold on a loaded machine. Whether the engine also began the
 *     reduction before dp_grad_s1 ended depends on the scheduler: the test prints how often
 *     it did (its "fingerprints" phase), and asserts nothing about it;
 *   - the parameters equal those of overlap off (one routine, one fused allreduce) bit for
 *     bit on every rank, and rank 0's checkpoints of both runs (parameters and the AdamW state
 *     gathered per bucket from the ranks' shards) are byte-identical. */
#include "test_dp_model.c"

#include "base/trace.h"
#include "parallel/dp_impl.h"

#include <unistd.h>

#define STEPS 4
#define MAX_EV 64

/* One complete event of the trace file. */
typedef struct ev {
    int tid;
    double ts, end; /* microseconds */
    long long seq;
} ev_t;

static int s_by_ts(const void *a, const void *b)
{
    const ev_t *x = a, *y = b;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

static int s_by_seq(const void *a, const void *b)
{
    const ev_t *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* The events of `path` whose line holds every one of `want` (NULL-terminated), in *out. */
static int s_events(const char *path, const char *const *want, ev_t *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        s_die("cannot open the trace %s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        bool all = strstr(line, "\"ph\":\"X\"") != NULL;
        for (int k = 0; all && want[k] != NULL; k++)
            all = strstr(line, want[k]) != NULL;
        if (!all)
            continue;
        ev_t e = {0};
        double dur = 0;
        const char *t = strstr(line, "\"tid\":"), *ts = strstr(line, "\"ts\":"),
                   *du = strstr(line, "\"dur\":"), *sq = strstr(line, "\"seq\":");
        if (t == NULL || ts == NULL || du == NULL || sscanf(t + 6, "%d", &e.tid) != 1 ||
            sscanf(ts + 5, "%lf", &e.ts) != 1 || sscanf(du + 6, "%lf", &dur) != 1)
            s_die("unreadable trace event: %s", line);
        if (sq != NULL && sscanf(sq + 6, "%lld", &e.seq) != 1)
            s_die("unreadable seq: %s", line);
        e.end = e.ts + dur;
        if (n == cap)
            s_die("more than %d events match %s in %s", cap, want[0], path);
        out[n++] = e;
    }
    fclose(f);
    return n;
}

static void s_run(const data_t *d, troupe_dp_overlap_t mode, const char *ckpt, float *out)
{
    dpt_lr_t m;
    s_model(&m, d, troupe_cluster_size(), troupe_cluster_rank());
    troupe_dp_config_t cfg = {.backend = "cpu",
                              .streams = 1,
                              .optimizer = dpt_opt(TROUPE_OPT_ADAMW),
                              .overlap = mode,
                              .bucket_bytes = 1};
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&cfg, &m.model, &dp));
    size_t want = mode == TROUPE_DP_OVERLAP_ON ? 2 : 1;
    if (!troupe_dp_fused_update(dp) || dp->nseg != want)
        s_die("overlap %s: fused update %d, %zu segments; want fused and %zu",
              troupe_config_dp_overlap_name(mode), troupe_dp_fused_update(dp), dp->nseg, want);
    for (int s = 0; s < STEPS; s++)
        CHECK(troupe_dp_step(dp));
    CHECK(troupe_dp_sync(dp));
    if (mode == TROUPE_DP_OVERLAP_ON)
        CHECK(troupe_trace_flush()); /* this run's steps; the save's requests come after */
    CHECK(troupe_dp_save(dp, ckpt));
    CHECK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

/* The orders of the module comment, in this rank's trace file. */
static void s_check_trace(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s.%d.json", troupe_config_trace_prefix(), troupe_cluster_rank());
    static ev_t s0[MAX_EV], s1[MAX_EV], coll[MAX_EV], fp[MAX_EV], waits[MAX_EV];
    int n0 = s_events(
        path, (const char *[]){"\"cat\":\"routine\"", "\"name\":\"dp_grad_s0\"", NULL}, s0, MAX_EV);
    int n1 = s_events(
        path, (const char *[]){"\"cat\":\"routine\"", "\"name\":\"dp_grad_s1\"", NULL}, s1, MAX_EV);
    int nc = s_events(
        path, (const char *[]){"\"cat\":\"collective\"", "\"phase\":\"dp.gradients\"", NULL}, coll,
        MAX_EV);
    int nf = s_events(path, (const char *[]){"\"name\":\"fingerprints\"", NULL}, fp, MAX_EV);
    int nw = s_events(path, (const char *[]){"\"cat\":\"wait\"", NULL}, waits, MAX_EV);
    if (n0 != STEPS || n1 != STEPS || nc != 2 * STEPS)
        s_die("trace %s: %d dp_grad_s0, %d dp_grad_s1 and %d gradient allreduces; want %d, %d "
              "and %d (a bucket per segment per step)",
              path, n0, n1, nc, STEPS, STEPS, 2 * STEPS);
    qsort(s0, (size_t)n0, sizeof *s0, s_by_ts);
    qsort(s1, (size_t)n1, sizeof *s1, s_by_ts);
    qsort(coll, (size_t)nc, sizeof *coll, s_by_seq);
    int tid = s0[0].tid, engine_early = 0;
    for (int k = 0; k < STEPS; k++) {
        const ev_t *b0 = &coll[2 * k]; /* bucket 0 of step k: the requests go in order */
        if (s0[k].tid != tid || s1[k].tid != tid)
            s_die("step %d: the segments ran on threads %d and %d, not the owner stream's %d", k,
                  s0[k].tid, s1[k].tid, tid);
        if (!(b0->ts >= s0[k].end))
            s_die("step %d: bucket 0's allreduce (seq %lld) starts at %.3f us, before "
                  "dp_grad_s0 ends at %.3f",
                  k, b0->seq, b0->ts, s0[k].end);
        if (!(b0->ts <= s1[k].ts && b0->ts < s1[k].end))
            s_die("step %d: bucket 0's allreduce (seq %lld) starts at %.3f us, after the "
                  "backward pass of the earlier layer (dp_grad_s1, %.3f to %.3f) began",
                  k, b0->seq, b0->ts, s1[k].ts, s1[k].end);
        for (int w = 0; w < nw; w++)
            if (waits[w].tid == tid && waits[w].ts >= s0[k].end && waits[w].end <= s1[k].ts)
                s_die("step %d: the owner stream waited (%.3f to %.3f us) between dp_grad_s0 "
                      "and dp_grad_s1",
                      k, waits[w].ts, waits[w].end);
        for (int f = 0; f < nf; f++)
            if (fp[f].seq == b0->seq && fp[f].ts < s1[k].end)
                engine_early++;
    }
    printf("rank %d: bucket 0's allreduce handed over before dp_grad_s1 in %d of %d steps; the "
           "engine began it before dp_grad_s1 ended in %d (not asserted: the scheduler's)\n",
           troupe_cluster_rank(), STEPS, STEPS, engine_early);
}

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, 1);
    if (troupe_cluster_size() != 2)
        s_die("run on 2 ranks (got %d)", troupe_cluster_size());
    if (!troupe_trace_enabled())
        s_die("TROUPE_TRACE is not set");
    const char *ck_on = "dp-overlap-trace-on.ck", *ck_off = "dp-overlap-trace-off.ck";
    float on[NP], off[NP];
    s_run(d, TROUPE_DP_OVERLAP_ON, ck_on, on);
    s_check_trace();
    s_run(d, TROUPE_DP_OVERLAP_OFF, ck_off, off);
    for (int e = 0; e < NP; e++)
        if (memcmp(&on[e], &off[e], sizeof(float)) != 0)
            s_die("parameter %d: %.9g with overlap, %.9g without", e, (double)on[e],
                  (double)off[e]);
    s_same_on_every_rank(on, "overlap on");
    if (troupe_cluster_rank() == 0) {
        FILE *a = fopen(ck_on, "rb"), *b = fopen(ck_off, "rb");
        if (a == NULL || b == NULL)
            s_die("a checkpoint is missing");
        int ca = 0, cb = 0;
        long at = 0;
        do {
            ca = fgetc(a);
            cb = fgetc(b);
            at++;
        } while (ca == cb && ca != EOF);
        fclose(a);
        fclose(b);
        if (ca != cb)
            s_die("the checkpoints with and without overlap differ at byte %ld", at - 1);
        unlink(ck_on);
        unlink(ck_off);
    }
    free(d);
    int rank = troupe_cluster_rank();
    CHECK(troupe_cluster_finalize());
    printf("rank %d: PASS\n", rank);
    return 0;
}
