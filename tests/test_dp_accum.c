/* troupe — gradient accumulation in the data-parallel driver (parallel/dp.h,
 * troupe_dp_config_t.grad_accum; docs/parallel.md, Accumulation), in one process: K micro-steps
 * of batch B equal one step of batch K*B within float rounding (parameters and the reported
 * loss, SGD and AdamW, 1 and 2 streams, with the gradient routine in overlap segments too); a
 * run is bitwise the same run to run; a negative or too large K is refused naming grad_accum.
 * The 2-rank case is tests/mpi/test_dp_accum.c. */
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

TestSuite(dp_accum, .init = s_setup);

#define D 3  /* features */
#define O 2  /* outputs */
#define FB 8 /* rows of a full batch */
#define NB 3 /* full batches */
#define NP (D * O + O)
#define STEPS 4

/* The model over NB full batches of FB rows, each cut in `split` minibatches
 * (dp_test_model.h, dpt_lr_synthetic). */
static void s_model(dpt_lr_t *m, int split)
{
    dpt_lr_synthetic(m, 4242u, NB, FB, split);
}

typedef struct run {
    const char *backend;
    int streams, accum;
    troupe_optimizer_kind_t kind;
    troupe_dp_overlap_t overlap;
} run_t;

/* Trains STEPS steps; W then b into out, the last loss into *loss. Each step covers one full
 * batch: its FB rows are cut among streams * accum minibatches. */
static void s_train(const run_t *r, float *out, double *loss)
{
    dpt_lr_t m;
    s_model(&m, r->streams * r->accum);
    troupe_dp_config_t cfg = {.backend = r->backend,
                              .streams = r->streams,
                              .optimizer = dpt_opt(r->kind),
                              .overlap = r->overlap,
                              .bucket_bytes = 1, /* a segment per gradient's last use */
                              .grad_accum = r->accum};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    for (int s = 0; s < STEPS; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_last_loss(dp, loss));
    OK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

static void s_close(const float *got, const float *want, double gl, double wl, const char *what)
{
    for (int e = 0; e < NP; e++) {
        double tol = 1e-5 * fmax(1.0, fabs((double)want[e]));
        cr_assert(fabs((double)got[e] - (double)want[e]) <= tol,
                  "%s: parameter %d: got %.9g, one step on the larger batch %.9g", what, e,
                  (double)got[e], (double)want[e]);
    }
    cr_assert(fabs(gl - wl) <= 1e-5 * fmax(1.0, fabs(wl)),
              "%s: last loss %.9g, one step on the larger batch %.9g", what, gl, wl);
}

/* K micro-steps of batch FB / (streams * K) against one step of batch FB / streams. */
static void s_equals_larger_batch(run_t r)
{
    float want[NP], got[NP];
    double wl = 0, gl = 0;
    run_t big = r;
    big.accum = 1;
    s_train(&big, want, &wl);
    s_train(&r, got, &gl);
    char what[96];
    snprintf(what, sizeof what, "%s, %d streams, %s, grad_accum %d", r.backend, r.streams,
             troupe_optimizer_name(r.kind), r.accum);
    s_close(got, want, gl, wl, what);
    /* not vacuous: the micro-steps' run moved away from the start, and equals no run that
     * took a single micro-step per step (the first minibatch of each step alone) */
    float start[NP], half[NP];
    double hl = 0;
    dpt_lr_t m;
    s_model(&m, 1);
    dpt_lr_params(&m, start);
    dpt_lr_destroy(&m);
    cr_assert(fabsf(got[0] - start[0]) > 1e-3f, "%s: the parameters did not move", what);
    dpt_lr_t m1; /* the same minibatch size, one of them per replica and step */
    s_model(&m1, r.streams * r.accum);
    troupe_dp_config_t cfg = {.backend = r.backend, .streams = r.streams,
                              .optimizer = dpt_opt(r.kind)};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m1.model, &dp));
    for (int s = 0; s < STEPS; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_last_loss(dp, &hl));
    OK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m1, half);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m1);
    bool differs = false;
    for (int e = 0; e < NP; e++)
        differs = differs || fabs((double)half[e] - (double)want[e]) > 1e-4;
    cr_assert(differs, "%s: training on one micro-batch per step gives the same parameters: "
                       "the test cannot tell the micro-steps apart",
              what);
}

Test(dp_accum, micro_steps_equal_one_larger_batch)
{
    s_equals_larger_batch((run_t){"sync", 1, 2, TROUPE_OPT_SGD, TROUPE_DP_OVERLAP_OFF});
    s_equals_larger_batch((run_t){"cpu", 1, 4, TROUPE_OPT_ADAMW, TROUPE_DP_OVERLAP_OFF});
    /* two streams: the merge of the streams' sums (cpu: the passes across the streams) */
    s_equals_larger_batch((run_t){"cpu", 2, 2, TROUPE_OPT_ADAMW, TROUPE_DP_OVERLAP_OFF});
    s_equals_larger_batch((run_t){"sync", 2, 2, TROUPE_OPT_SGD, TROUPE_DP_OVERLAP_OFF});
}

/* With the gradient routine in segments (overlap on), each segment's gradients take their
 * sums after that segment: the same bits as unsplit. */
Test(dp_accum, overlap_segments_fold_alike)
{
    run_t a = {"sync", 2, 2, TROUPE_OPT_SGD, TROUPE_DP_OVERLAP_OFF};
    run_t b = a;
    b.overlap = TROUPE_DP_OVERLAP_ON;
    float pa[NP], pb[NP];
    double la = 0, lb = 0;
    s_train(&a, pa, &la);
    s_train(&b, pb, &lb);
    cr_assert(memcmp(pa, pb, sizeof pa) == 0, "overlap on: W[0] %.9g, off %.9g", (double)pb[0],
              (double)pa[0]);
    cr_assert(memcmp(&la, &lb, sizeof la) == 0, "overlap on: loss %.17g, off %.17g", lb, la);
}

Test(dp_accum, a_run_is_bitwise_the_same_run_to_run)
{
    run_t r = {"cpu", 2, 3, TROUPE_OPT_ADAMW, TROUPE_DP_OVERLAP_OFF};
    float a[NP], b[NP];
    double la = 0, lb = 0;
    s_train(&r, a, &la);
    s_train(&r, b, &lb);
    cr_assert(memcmp(a, b, sizeof a) == 0, "two runs: W[0] %.9g vs %.9g", (double)a[0],
              (double)b[0]);
    cr_assert(memcmp(&la, &lb, sizeof la) == 0, "two runs: loss %.17g vs %.17g", la, lb);
}

Test(dp_accum, a_bad_count_is_refused_naming_grad_accum)
{
    dpt_lr_t m;
    s_model(&m, 1);
    int bad[] = {-1, TROUPE_DP_MAX_GRAD_ACCUM + 1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        troupe_dp_config_t cfg = {
            .backend = "sync", .streams = 1, .optimizer = dpt_opt(TROUPE_OPT_SGD),
            .grad_accum = bad[i]};
        troupe_dp_t *dp = NULL;
        cr_assert_eq(troupe_dp_new(&cfg, &m.model, &dp), TROUPE_INVALID_ARGUMENT);
        cr_assert_null(dp);
        cr_assert(strstr(troupe_last_error(), "grad_accum") != NULL, "message: %s",
                  troupe_last_error());
    }
    dpt_lr_destroy(&m);
}
