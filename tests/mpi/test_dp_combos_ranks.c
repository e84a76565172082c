/* troupe — the data-parallel strategies in combination across ranks (parallel/dp.h;
 * docs/parallel.md, The code, by strategy), on the test model of tests/mpi/test_dp_model.c:
 *   - every combination of exchange (in place, staged through host memory), overlap segments
 *     (off, on) and update (routine, fused into the allreduce, passes across the streams),
 *     with 1 and 2 streams per rank, grad_accum 1 and 2, SGD and AdamW: a valid one equals the
 *     plain one of its layout (in place, no overlap, the routine) bit for bit (overlap with the
 *     fused update: one fused request per bucket), its parameters
 *     are the same bits on every rank, and each layout's plain run equals one replica on the
 *     global batch (local_only) within relative 1e-5 (another order of the sums); one that
 *     cannot run is refused on every rank with INVALID_ARGUMENT naming its conflict;
 *   - the optimizer state: whole on every rank with the routine; with the fused update or the
 *     passes across the streams (several ranks), sharded (ZeRO-1): each rank holds exactly its
 *     shard's bytes (troupe_coll_shard_range over the gradients end to end), and the checkpoint
 *     of 2 streams per rank with the passes equals the plain one's byte for byte;
 *   - grad_clip on R ranks equals grad_clip on one replica within rounding, the same bits on
 *     every rank, and differs from the unclipped run.
 * The reduction goes through shared memory where the transport offers it (ranks on one node,
 * TROUPE_COLL_SHM on: the default), else through MPI; the PASS line says which. The 1-rank
 * table and clipping against a host reference are tests/test_dp_combos.c. */
#include "test_dp_model.c"

#define STEPS 3

typedef struct combo {
    bool stage;
    troupe_dp_overlap_t overlap;
    troupe_dp_update_t update;
} combo_t;

/* The conflict troupe_dp_new must name for c on `streams` streams per rank, in the order the
 * strategy checks (parallel/dp_strategy.c), or NULL when c can run. */
static const char *s_conflict(const combo_t *c, int streams)
{
    bool on = c->overlap == TROUPE_DP_OVERLAP_ON;
    if (c->update == TROUPE_DP_UPDATE_FUSED)
        return c->stage ? "the exchange is not in place" : NULL; /* a request per bucket */
    if (c->update == TROUPE_DP_UPDATE_STREAMS)
        return streams == 1  ? "one stream on every rank"
               : c->stage    ? "the exchange goes through other memory"
               : on          ? "overlap"
                             : NULL;
    return NULL;
}

static void s_describe(const combo_t *c, troupe_optimizer_kind_t kind, int streams, int accum,
                       char *buf, size_t cap)
{
    snprintf(buf, cap, "%s, %d x %d, grad_accum %d, exchange %s, overlap %s, update %s",
             troupe_optimizer_name(kind), troupe_cluster_size(), streams, accum,
             c->stage ? "staged" : "in-place", troupe_config_dp_overlap_name(c->overlap),
             troupe_dp_update_name(c->update));
}

/* troupe_dp_new must fail with INVALID_ARGUMENT naming `want`. */
static void s_refused(const data_t *d, const combo_t *c, troupe_optimizer_kind_t kind,
                      int streams, int accum, double clip, const char *want, const char *what)
{
    dpt_lr_t m;
    s_model(&m, d, streams * accum * troupe_cluster_size(), troupe_cluster_rank());
    troupe_dp_config_t cfg = {.backend = s_backend,
                              .streams = streams,
                              .optimizer = dpt_opt(kind),
                              .stage_through_host = c->stage,
                              .overlap = c->overlap,
                              .bucket_bytes = 1, /* a segment per gradient's last use */
                              .grad_accum = accum,
                              .update = c->update,
                              .grad_clip = clip};
    troupe_dp_t *dp = NULL;
    troupe_status_t st = troupe_dp_new(&cfg, &m.model, &dp);
    if (st != TROUPE_INVALID_ARGUMENT || strstr(troupe_last_error(), want) == NULL)
        s_die("%s: expected INVALID_ARGUMENT naming '%s', got %s: %s", what, want,
              troupe_status_str(st), troupe_last_error());
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

static void s_loss_close(double got, double want, const char *what)
{
    if (!(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want))))
        s_die("%s: last loss %.9g, the reference's %.9g", what, got, want);
}

/* The state bytes the last run must hold: its shard's (fused, or the passes on several ranks)
 * or `whole` (the routine). Without overlap: with it each segment's request cuts its own span
 * (dp_zero.c), which this check does not model. */
static void s_state_bytes(const combo_t *c, int64_t whole, const char *what)
{
    if (c->overlap == TROUPE_DP_OVERLAP_ON)
        return;
    int64_t want = whole;
    if (c->update != TROUPE_DP_UPDATE_ROUTINE && troupe_cluster_size() > 1) {
        int64_t lo = 0, hi = 0;
        troupe_coll_shard_range(NP, troupe_cluster_rank(), troupe_cluster_size(), &lo, &hi);
        want = whole / NP * (hi - lo);
    }
    if (s_last_state_bytes != want)
        s_die("%s: %lld bytes of optimizer state on rank %d, expected %lld (whole: %lld)", what,
              (long long)s_last_state_bytes, troupe_cluster_rank(), (long long)want,
              (long long)whole);
}

/* Rank 0 compares the checkpoints at paths a and b byte for byte. */
static void s_same_file(const char *a, const char *b, const char *what)
{
    if (troupe_cluster_rank() != 0)
        return;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    if (fa == NULL || fb == NULL)
        s_die("%s: cannot open the checkpoints %s and %s", what, a, b);
    long at = 0;
    for (;; at++) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y)
            s_die("%s: the checkpoint differs from the plain one's at byte %ld", what, at);
        if (x == EOF)
            break;
    }
    fclose(fa);
    fclose(fb);
    if (at == 0)
        s_die("%s: empty checkpoints", what);
}

static void s_set(const combo_t *c)
{
    s_stage = c->stage;
    s_overlap = c->overlap;
    s_update = c->update;
}

/* The table for one optimizer: returns how many combinations ran and were refused. */
static void s_table(const data_t *d, troupe_optimizer_kind_t kind, int *ran, int *refused)
{
    int R = troupe_cluster_size();
    float ref[NP];
    double ref_loss = 0;
    combo_t plain = {false, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_ROUTINE};
    s_set(&plain);
    s_accum = 0;
    s_train(d, 1, 1, true, kind, STEPS, ref, &ref_loss);
    for (int streams = 1; streams <= 2; streams++)
        for (int accum = 1; accum <= 2; accum++) {
            char what[192];
            float want[NP], got[NP];
            double wl = 0, gl = 0;
            s_accum = accum;
            s_set(&plain);
            s_describe(&plain, kind, streams, accum, what, sizeof what);
            bool ck = streams == 2 && accum == 1; /* the checkpoints compared */
            s_ck_path = ck ? "dp-combos-plain.ck" : NULL;
            s_train(d, streams * accum * R, streams, false, kind, STEPS, want, &wl);
            s_ck_path = NULL;
            int64_t whole = s_last_state_bytes;
            s_state_bytes(&plain, whole, what);
            s_same_on_every_rank(want, what);
            s_close(want, ref, 1e-5, what);
            s_loss_close(wl, ref_loss, what);
            (*ran)++;
            for (int e = 0; e < 2 * 2 * 3; e++) {
                combo_t c = {e / 6 != 0, (e / 3) % 2 ? TROUPE_DP_OVERLAP_ON : TROUPE_DP_OVERLAP_OFF,
                             (troupe_dp_update_t)(TROUPE_DP_UPDATE_ROUTINE + e % 3)};
                if (e == 0)
                    continue; /* the plain one */
                s_describe(&c, kind, streams, accum, what, sizeof what);
                const char *conflict = s_conflict(&c, streams);
                if (conflict != NULL) {
                    s_refused(d, &c, kind, streams, accum, 0.0, conflict, what);
                    (*refused)++;
                    continue;
                }
                s_set(&c);
                bool ck_this = ck && c.update == TROUPE_DP_UPDATE_STREAMS;
                s_ck_path = ck_this ? "dp-combos-streams.ck" : NULL;
                s_train(d, streams * accum * R, streams, false, kind, STEPS, got, &gl);
                s_ck_path = NULL;
                s_state_bytes(&c, whole, what);
                if (ck_this)
                    s_same_file("dp-combos-streams.ck", "dp-combos-plain.ck", what);
                if (s_last_fused != (c.update == TROUPE_DP_UPDATE_FUSED) ||
                    s_last_fused_streams != (c.update == TROUPE_DP_UPDATE_STREAMS))
                    s_die("%s: troupe_dp_fused_update says %d, troupe_dp_fused_streams %d", what,
                          s_last_fused, s_last_fused_streams);
                s_same_on_every_rank(got, what);
                for (int k = 0; k < NP; k++)
                    if (memcmp(&got[k], &want[k], sizeof(float)) != 0)
                        s_die("%s: parameter %d is %.9g, the plain combination's %.9g", what, k,
                              (double)got[k], (double)want[k]);
                if (memcmp(&gl, &wl, sizeof gl) != 0)
                    s_die("%s: last loss %.17g, the plain combination's %.17g", what, gl, wl);
                (*ran)++;
            }
        }
    s_accum = 0;
    if (troupe_cluster_rank() == 0) {
        remove("dp-combos-plain.ck");
        remove("dp-combos-streams.ck");
    }
}

/* grad_clip on R ranks against one replica with grad_clip, and against no clipping. */
static void s_clip(const data_t *d, troupe_optimizer_kind_t kind)
{
    int R = troupe_cluster_size();
    combo_t autoc = {false, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_AUTO};
    s_set(&autoc);
    float ref[NP], got[NP], off[NP];
    double ref_loss = 0, gl = 0, ol = 0;
    s_grad_clip = 0.05;
    s_train(d, 1, 1, true, kind, STEPS, ref, &ref_loss);
    for (int streams = 1; streams <= 2; streams++) {
        char what[160];
        snprintf(what, sizeof what, "%s, %d x %d, grad_clip %g", troupe_optimizer_name(kind), R,
                 streams, s_grad_clip);
        s_grad_clip = 0.05;
        s_train(d, streams * R, streams, false, kind, STEPS, got, &gl);
        if (s_last_fused || s_last_fused_streams)
            s_die("%s: the update is fused (%d) or in passes (%d): clipping needs the routine",
                  what, s_last_fused, s_last_fused_streams);
        s_same_on_every_rank(got, what);
        s_close(got, ref, 1e-5, what);
        s_loss_close(gl, ref_loss, what);
        s_grad_clip = 0.0;
        s_train(d, streams * R, streams, false, kind, STEPS, off, &ol);
        double moved = 0.0;
        for (int e = 0; e < NP; e++)
            moved = fmax(moved, fabs((double)got[e] - (double)off[e]));
        if (!(moved > 1e-4))
            s_die("%s: the clipped run equals the unclipped one (%g): the test clips nothing",
                  what, moved);
        combo_t fused = {false, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_FUSED};
        s_refused(d, &fused, kind, streams, 1, 0.05, "grad_clip", what);
    }
    s_grad_clip = 0.0;
}

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, 4); /* global batches of 2 x 2 streams x 2 micro-steps */
    int ran = 0, refused = 0;
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        s_table(d, kinds[q], &ran, &refused);
        s_clip(d, kinds[q]);
    }
    free(d);
    int rank = troupe_cluster_rank();
    bool shm = troupe_config_coll_shm();
    CHECK(troupe_cluster_finalize());
    fprintf(stderr,
            "PASS rank %d: %d combinations equal their plain one, %d refused naming the "
            "conflict (reduction through %s); grad_clip across ranks equals one replica\n",
            rank, ran, refused, shm ? "shared memory where the ranks share a node" : "MPI");
    return 0;
}
