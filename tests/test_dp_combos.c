/* troupe — the data-parallel strategies in combination, in one process (parallel/dp.h;
 * docs/parallel.md, The code, by strategy), and global-norm gradient clipping
 * (troupe_dp_config_t.grad_clip):
 *   - every valid combination of overlap segments (off, on), update (routine, streams) and
 *     accumulation (K = 1, 2) on 1 and 2 streams, SGD and AdamW, against the plain one (overlap
 *     off, the routine) of its layout bit for bit, and every layout's plain run against one
 *     stream without accumulation within relative 1e-5 (the sums' order differs);
 *   - the combinations that cannot run refused, each with a message naming its conflict;
 *   - clipping: one SGD step against a host reference built from the unclipped run's step
 *     (its gradient, its norm, PyTorch's factor), a C larger than any norm a no-op bit for bit,
 *     a bad C refused naming grad_clip.
 * The 2-rank table (exchange in place, staged; the fused update) is tests/mpi/test_dp_combos_ranks.c. */
#include "actors/troupe.h"
#include "parallel/dp.h"

#include "base/alloc.h"
#include "runtime_test_util.h"

#define DPT_CHECK(expr) OK(expr)
#include "dp_test_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp", 60);
}

TestSuite(dp_combos, .init = s_setup);

#define D 3  /* features */
#define O 2  /* outputs */
#define FB 8 /* rows of a full batch */
#define NB 3 /* full batches */
#define NP (D * O + O)
#define STEPS 3

/* The model over NB full batches of FB rows, each cut in `split` minibatches
 * (dp_test_model.h, dpt_lr_synthetic). */
static void s_model(dpt_lr_t *m, int split)
{
    dpt_lr_synthetic(m, 9001u, NB, FB, split);
}

typedef struct combo {
    int streams, accum;
    troupe_optimizer_t opt;
    troupe_dp_overlap_t overlap;
    troupe_dp_update_t update;
    double clip;
} combo_t;

/* Trains `steps` steps on the cpu backend (each step one full batch, cut among streams *
 * accum minibatches); W then b into out, the last loss into *loss, whether the update ran as
 * passes across the streams into *streams_update. Returns troupe_dp_new's status. */
static troupe_status_t s_train(const combo_t *c, int steps, float *out, double *loss,
                               bool *streams_update)
{
    dpt_lr_t m;
    s_model(&m, c->streams * c->accum);
    troupe_dp_config_t cfg = {.backend = "cpu",
                              .streams = c->streams,
                              .optimizer = c->opt,
                              .overlap = c->overlap,
                              .bucket_bytes = 1, /* a segment per gradient's last use */
                              .grad_accum = c->accum,
                              .update = c->update,
                              .grad_clip = c->clip};
    troupe_dp_t *dp = NULL;
    troupe_status_t st = troupe_dp_new(&cfg, &m.model, &dp);
    if (st == TROUPE_OK) {
        *streams_update = troupe_dp_fused_streams(dp);
        cr_assert(!troupe_dp_fused_update(dp), "one rank: nothing to fuse into");
        for (int s = 0; s < steps; s++)
            OK(troupe_dp_step(dp));
        OK(troupe_dp_last_loss(dp, loss));
        OK(troupe_dp_params_to_host(dp));
        dpt_lr_params(&m, out);
        troupe_dp_destroy(&dp);
    }
    cr_assert(st == TROUPE_OK || dp == NULL);
    dpt_lr_destroy(&m);
    return st;
}

static void s_describe(const combo_t *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s, %d stream%s, grad_accum %d, overlap %s, update %s, grad_clip %g",
             troupe_optimizer_name(c->opt.kind), c->streams, c->streams == 1 ? "" : "s",
             c->accum, troupe_config_dp_overlap_name(c->overlap), troupe_dp_update_name(c->update),
             c->clip);
}

static void s_close(const float *got, const float *want, double gl, double wl, double rel,
                    const char *what)
{
    for (int e = 0; e < NP; e++) {
        double tol = rel * fmax(1.0, fabs((double)want[e]));
        cr_assert(fabs((double)got[e] - (double)want[e]) <= tol,
                  "%s: parameter %d: got %.9g, the reference %.9g", what, e, (double)got[e],
                  (double)want[e]);
    }
    cr_assert(fabs(gl - wl) <= rel * fmax(1.0, fabs(wl)), "%s: last loss %.9g, the reference %.9g",
              what, gl, wl);
}

static void s_bitwise(const float *got, const float *want, double gl, double wl, const char *what)
{
    for (int e = 0; e < NP; e++)
        cr_assert(memcmp(&got[e], &want[e], sizeof(float)) == 0,
                  "%s: parameter %d is %.9g, the plain combination's %.9g", what, e,
                  (double)got[e], (double)want[e]);
    cr_assert(memcmp(&gl, &wl, sizeof gl) == 0, "%s: last loss %.17g, the plain one's %.17g",
              what, gl, wl);
}

Test(dp_combos, every_valid_combination_equals_the_plain_one, .timeout = 600)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        float ref[NP];
        double ref_loss = 0;
        for (int streams = 1; streams <= 2; streams++)
            for (int accum = 1; accum <= 2; accum++) {
                combo_t plain = {streams, accum, dpt_opt(kinds[q]), TROUPE_DP_OVERLAP_OFF,
                                 TROUPE_DP_UPDATE_ROUTINE, 0.0};
                float want[NP], got[NP];
                double wl = 0, gl = 0;
                bool su = true;
                char what[160];
                s_describe(&plain, what, sizeof what);
                OK(s_train(&plain, STEPS, want, &wl, &su));
                cr_assert(!su, "%s: the routine was asked for", what);
                if (streams == 1 && accum == 1) {
                    memcpy(ref, want, sizeof ref);
                    ref_loss = wl;
                } else { /* another order of the sums */
                    s_close(want, ref, wl, ref_loss, 1e-5, what);
                }
                combo_t v[3] = {plain, plain, plain};
                v[0].overlap = TROUPE_DP_OVERLAP_ON;
                v[1].update = TROUPE_DP_UPDATE_AUTO; /* cpu: the passes with 2 streams */
                v[2].update = TROUPE_DP_UPDATE_STREAMS;
                for (int k = 0; k < (streams > 1 ? 3 : 2); k++) {
                    s_describe(&v[k], what, sizeof what);
                    OK(s_train(&v[k], STEPS, got, &gl, &su));
                    cr_assert_eq(su, k > 0 && streams > 1, "%s: update streams is %d", what, su);
                    s_bitwise(got, want, gl, wl, what);
                }
            }
    }
}

/* A combination that cannot run is refused with INVALID_ARGUMENT naming its conflict. */
Test(dp_combos, invalid_combinations_are_refused_naming_the_conflict)
{
    const troupe_optimizer_t sgd = dpt_opt(TROUPE_OPT_SGD);
    static const char *const want[] = {"one rank", "one stream", "overlap", "grad_clip",
                                       "grad_clip", "none of auto"};
    combo_t c[] = {
        {1, 1, sgd, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_FUSED, 0.0},
        {1, 1, sgd, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_STREAMS, 0.0},
        {2, 2, sgd, TROUPE_DP_OVERLAP_ON, TROUPE_DP_UPDATE_STREAMS, 0.0},
        {2, 1, sgd, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_STREAMS, 1.0},
        {1, 1, sgd, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_FUSED, 1.0},
        {1, 1, sgd, TROUPE_DP_OVERLAP_OFF, (troupe_dp_update_t)17, 0.0},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char what[160];
        s_describe(&c[i], what, sizeof what);
        float p[NP];
        double l = 0;
        bool su = false;
        troupe_status_t st = s_train(&c[i], 1, p, &l, &su);
        cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: %s", what, troupe_status_str(st));
        cr_assert(strstr(troupe_last_error(), want[i]) != NULL, "%s: the message does not name "
                  "'%s': %s", what, want[i], troupe_last_error());
    }
}

/* One SGD step (no momentum, no decay) against the host: the unclipped step gives the
 * averaged gradient g = (p0 - p1) / lr, then the clipped step must give
 * p0 - lr * min(1, C / (||g|| + 1e-6)) * g (PyTorch's clip_grad_norm_). */
Test(dp_combos, clipping_matches_a_host_reference)
{
    troupe_optimizer_t o = dpt_opt(TROUPE_OPT_SGD);
    o.momentum = 0.0;
    o.weight_decay = 0.0;
    for (int streams = 1; streams <= 2; streams++) {
        combo_t c = {streams, streams, o, TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_AUTO, 0.0};
        float p0[NP], p1[NP], got[NP];
        double l = 0;
        bool su = false;
        dpt_lr_t m;
        s_model(&m, 1);
        dpt_lr_params(&m, p0);
        dpt_lr_destroy(&m);
        OK(s_train(&c, 1, p1, &l, &su));
        double g[NP], sq = 0.0;
        for (int e = 0; e < NP; e++) {
            g[e] = ((double)p0[e] - (double)p1[e]) / o.lr;
            sq += g[e] * g[e];
        }
        double norm = sqrt(sq);
        cr_assert(norm > 1e-2, "the gradient's norm %g is too small to test with", norm);
        c.clip = 0.5 * norm;
        OK(s_train(&c, 1, got, &l, &su));
        cr_assert(!su, "grad_clip with update auto runs the routine");
        double f = fmin(1.0, c.clip / (norm + 1e-6)), moved = 0.0;
        for (int e = 0; e < NP; e++) {
            double want = (double)p0[e] - o.lr * f * g[e];
            cr_assert(fabs((double)got[e] - want) <= 1e-6 * fmax(fabs(want), 1e-2),
                      "%d streams, grad_clip %g (norm %g, factor %g): parameter %d is %.9g, the "
                      "host's %.9g",
                      streams, c.clip, norm, f, e, (double)got[e], want);
            moved = fmax(moved, fabs((double)got[e] - (double)p1[e]));
        }
        cr_assert(moved > 1e-4, "the clipped step equals the unclipped one (%g)", moved);
    }
}

/* A C above any norm gives the factor 1 exactly: the same bits as no clipping. */
Test(dp_combos, a_large_clip_is_a_no_op_bit_for_bit)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        combo_t c = {1 + q, 1, dpt_opt(kinds[q]), TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_AUTO,
                     0.0};
        float off[NP], on[NP];
        double loff = 0, lon = 0;
        bool su = false;
        OK(s_train(&c, STEPS, off, &loff, &su));
        c.clip = 1e30;
        OK(s_train(&c, STEPS, on, &lon, &su));
        char what[160];
        s_describe(&c, what, sizeof what);
        s_bitwise(on, off, lon, loff, what);
    }
}

Test(dp_combos, a_bad_clip_is_refused_naming_grad_clip)
{
    double bad[] = {-1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        combo_t c = {1, 1, dpt_opt(TROUPE_OPT_SGD), TROUPE_DP_OVERLAP_OFF, TROUPE_DP_UPDATE_AUTO,
                     bad[i]};
        float p[NP];
        double l = 0;
        bool su = false;
        cr_assert_eq(s_train(&c, 1, p, &l, &su), TROUPE_INVALID_ARGUMENT, "grad_clip %g", bad[i]);
        cr_assert(strstr(troupe_last_error(), "grad_clip") != NULL, "message: %s",
                  troupe_last_error());
    }
}
