/* troupe — each gradient bucket's allreduce overlapping the rest of the backward pass
 * (parallel/dp.h, Overlap) on two ranks of the cpu backend, 2 streams per rank. The linear
 * regression of tests/dp_test_model.h splits in two segments: everything up to the weight
 * gradient's last write, then the bias gradient's (the node `gpred` crosses them and is
 * materialized). For SGD and AdamW, STEPS steps:
 *   - overlap on (troupe_dp_config_t.overlap = ON, which auto would not choose on a 2-core
 *     machine with 2 ranks) gives the same parameters and last loss as overlap off bit for bit
 *     (two ranks add a + b whatever the request; the merges keep their order), in place and
 *     staged through host memory, the same on every rank;
 *   - dp_new logs "overlap on (2 segments" at debug:parallel, and each step a breakdown line
 *     with exchange=in-place, buckets=2 (a request per segment) and sane fields
 *     (tests/dp_breakdown.h: the phases add up to the wall time, compute_overlap_us within
 *     the compute);
 *   - overlap off logs one bucket;
 *   - the fed form (troupe_dp_model_t.feed_comp: the feed runs before segment 0, the
 *     segments bind no batch index) with overlap on, staged, gives the same bits too. */
#include "test_dp_model.c"

#include "../dp_breakdown.h"

#include <unistd.h>

#define STREAMS 2
#define STEPS 5

/* Trains with overlap `mode` (staged through host memory when `staged`), logging at
 * debug:parallel into a file whose breakdown lines go to l (their count to *nl) and whose
 * text is searched for `want` (the decision line). */
static void s_run(const data_t *d, troupe_dp_overlap_t mode, bool staged,
                  troupe_optimizer_kind_t kind, float *out, double *loss, dpb_line_t *l, int *nl,
                  const char *want)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/troupe-dp-overlap-%d-%d.log", (int)getpid(),
             troupe_cluster_rank());
    unlink(path);
    CHECK(troupe_log_set_file(path));
    CHECK(troupe_log_configure("debug:parallel"));
    s_overlap = mode;
    s_stage = staged;
    s_train(d, STREAMS * troupe_cluster_size(), STREAMS, false, kind, STEPS, out, loss);
    s_overlap = TROUPE_DP_OVERLAP_AUTO;
    s_stage = false;
    CHECK(troupe_log_configure("warn"));
    CHECK(troupe_log_set_file(NULL));
    *nl = dpb_read(path, l, 16);
    FILE *f = fopen(path, "r");
    char line[2048];
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, want) != NULL;
    if (f != NULL)
        fclose(f);
    unlink(path);
    if (!found)
        s_die("no log line says '%s'", want);
}

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, STREAMS);
    int R = troupe_cluster_size(), rank = troupe_cluster_rank();
    if (R != 2)
        s_die("run on 2 ranks (got %d)", R);
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float off[NP], on[NP], on_staged[NP];
        double off_loss = 0, on_loss = 0, staged_loss = 0;
        dpb_line_t l[16];
        int n = 0;
        s_run(d, TROUPE_DP_OVERLAP_OFF, false, kinds[q], off, &off_loss, l, &n,
              "overlap off (1 segments");
        if (n != STEPS)
            s_die("%s: overlap off: %d breakdown lines for %d steps", name, n, STEPS);
        for (int i = 0; i < n; i++)
            if (l[i].buckets != 1 || l[i].cover != 0 || strcmp(l[i].update, "streams") != 0 ||
                !(l[i].optimizer > 0))
                s_die("%s: overlap off: step %lld: buckets=%d compute_overlap_us=%.1f update=%s "
                      "optimizer_us=%.1f, want 1, 0, streams (one in-place allreduce between the "
                      "passes across the streams) and > 0 (the pass after it)",
                      name, l[i].step, l[i].buckets, l[i].cover, l[i].update, l[i].optimizer);
        s_run(d, TROUPE_DP_OVERLAP_ON, false, kinds[q], on, &on_loss, l, &n,
              "overlap on (2 segments, 1 nodes materialized");
        if (n != STEPS)
            s_die("%s: %d breakdown lines for %d steps", name, n, STEPS);
        double cover = 0, reduce = 0;
        for (int i = 0; i < n; i++) {
            const char *bad = dpb_insane(&l[i]);
            if (bad != NULL)
                s_die("%s: step %lld: %s", name, l[i].step, bad);
            if (strcmp(l[i].exchange_kind, "in-place") != 0 || l[i].buckets != 2 ||
                strcmp(l[i].update, "fused") != 0)
                s_die("%s: step %lld: exchange=%s buckets=%d update=%s, want in-place, 2 and "
                      "fused (one allreduce per segment, each updating its parameters)",
                      name, l[i].step, l[i].exchange_kind, l[i].buckets, l[i].update);
            reduce += l[i].reduce; /* one step's can clamp to 0 when its stamps run late */
            cover += l[i].cover;
        }
        if (!(reduce > 0))
            s_die("%s: reduce_us sums to %.1f over %d steps, want > 0", name, reduce, n);
        dpb_line_t ls[16];
        int ns = 0;
        s_run(d, TROUPE_DP_OVERLAP_ON, true, kinds[q], on_staged, &staged_loss, ls, &ns,
              "overlap on (2 segments");
        for (int i = 0; i < ns; i++) {
            const char *bad = dpb_insane(&ls[i]);
            if (bad != NULL || strcmp(ls[i].exchange_kind, "staged") != 0 || ls[i].buckets != 2)
                s_die("%s: staged: step %lld: %s, exchange=%s buckets=%d", name, ls[i].step,
                      bad != NULL ? bad : "sane", ls[i].exchange_kind, ls[i].buckets);
        }
        float on_fed[NP];
        double fed_loss = 0;
        s_fixed = TROUPE_MM_MATERIALIZED;
        s_run(d, TROUPE_DP_OVERLAP_ON, true, kinds[q], on_fed, &fed_loss, ls, &ns,
              "overlap on (2 segments");
        s_fixed = 0;
        if (ns != STEPS || ls[0].buckets != 2)
            s_die("%s: fed: %d breakdown lines, buckets=%d: want %d and 2", name, ns,
                  ns > 0 ? ls[0].buckets : -1, STEPS);
        for (int e = 0; e < NP; e++)
            if (memcmp(&on_fed[e], &off[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g fed with overlap (staged) but %.9g indexed "
                      "without",
                      name, e, (double)on_fed[e], (double)off[e]);
        if (fed_loss != off_loss)
            s_die("%s: last loss %.9g fed with overlap but %.9g without", name, fed_loss,
                  off_loss);
        s_same_on_every_rank(on, name);
        for (int e = 0; e < NP; e++) {
            if (memcmp(&on[e], &off[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g with overlap but %.9g without", name, e,
                      (double)on[e], (double)off[e]);
            if (memcmp(&on_staged[e], &off[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g with overlap staged but %.9g without", name, e,
                      (double)on_staged[e], (double)off[e]);
        }
        if (on_loss != off_loss || staged_loss != off_loss)
            s_die("%s: last loss %.9g with overlap (%.9g staged) but %.9g without", name, on_loss,
                  staged_loss, off_loss);
        fprintf(stderr,
                "rank %d: %s: %d ranks x %d streams, 2 segments: bitwise the unsplit run's (in "
                "place, staged, and fed); compute_overlap_us summed over %d steps: %.1f\n",
                rank, name, R, STREAMS, n, cover);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
