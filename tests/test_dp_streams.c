/* troupe — the update fused across a rank's streams (parallel/dp.h, Fused update across
 * streams; parallel/dp_local.c): one rank of several cpu streams merges its replicas'
 * gradients, runs the optimizer step and gives every replica the new parameters in one pass
 * divided among the streams. The tests train the linear model of tests/dp_test_model.h, with
 * a weight matrix of 301 x 37 (11,137 elements: several of the pass's blocks, chunk bounds
 * inside rows and off cache lines) and a bias of 37, and check:
 *   - the pass gives the bits of the separate merge routines, optimizer routine and copies
 *     (TROUPE_DP_FUSED_UPDATE=off) for SGD and AdamW with and without momentum and weight
 *     decay, on 2 to 5 streams (the tree merge's order for odd counts too), and those of the
 *     sync backend, which never takes it; the parameters trained (they moved), and agree
 *     with one stream on the whole minibatch within float rounding;
 *   - a model smaller than one chunk per stream (8 parameters over 4 streams);
 *   - the chooser's rules;
 *   - a stream whose gradient routine fails before the pass fails the step, named, and the
 *     other streams do not wait for it (the driver is destroyed without hanging);
 *   - a stream stuck before the pass (an injected stall) fails the step after TROUPE_TIMEOUT_S
 *     with DEADLINE_EXCEEDED naming it.
 */
#define _DEFAULT_SOURCE /* usleep */
#include "actors/troupe.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "runtime_test_util.h"

#define DPT_CHECK(expr) OK(expr)
#include "dp_test_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp-streams", 60);
}

TestSuite(dp_streams, .init = s_setup);

#define FB 60 /* rows of a full minibatch: split 1 to 6 ways */
#define NBF 2 /* full minibatches */
#define DOUT 37
#define STEPS 5
#define MAXP (301 * DOUT + DOUT)

static uint32_t s_lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static double s_unif(uint32_t *s)
{
    return (double)s_lcg(s) / (double)(1u << 24) - 0.5;
}

typedef struct run {
    float p[MAXP];
    double loss;
    bool fused_streams;
    int np;
} run_t;

/* Trains `steps` steps of the model with `din` inputs on `streams` streams (each on 1/streams of
 * every full minibatch) with TROUPE_DP_FUSED_UPDATE `fused`; the parameters, last loss and what
 * troupe_dp_fused_streams said into *r. */
static void s_train_steps(const char *backend, int streams, int64_t din,
                          const troupe_optimizer_t *opt, bool fused, int steps, run_t *r)
{
    int64_t nb = (int64_t)NBF * streams, bs = FB / streams;
    size_t nx = (size_t)(NBF * FB * din), ny = (size_t)(NBF * FB * DOUT);
    double *xv = troupe_calloc(nx, sizeof *xv), *yv = troupe_calloc(ny, sizeof *yv);
    double *wv = troupe_calloc((size_t)(din * DOUT), sizeof *wv), bv[DOUT];
    cr_assert(xv && yv && wv);
    uint32_t seed = 7;
    for (size_t i = 0; i < nx; i++)
        xv[i] = s_unif(&seed);
    for (size_t i = 0; i < ny; i++)
        yv[i] = s_unif(&seed);
    for (int64_t i = 0; i < din * DOUT; i++)
        wv[i] = 0.1 * s_unif(&seed);
    for (int o = 0; o < DOUT; o++)
        bv[o] = 0.01 * o;
    dpt_lr_t m;
    dpt_lr_new(&m, nb, bs, din, DOUT, xv, yv, wv, bv);
    troupe_free(xv);
    troupe_free(yv);
    troupe_free(wv);
    troupe_config_set_dp_fused_update(fused);
    troupe_dp_config_t cfg = {.backend = backend, .streams = streams, .optimizer = *opt};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    r->fused_streams = troupe_dp_fused_streams(dp);
    for (int s = 0; s < steps; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_sync(dp));
    r->loss = 0.0;
    if (steps > 0)
        OK(troupe_dp_last_loss(dp, &r->loss));
    OK(troupe_dp_params_to_host(dp));
    r->np = (int)(din * DOUT + DOUT);
    dpt_lr_params(&m, r->p);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
    troupe_config_set_dp_fused_update(true);
}

static void s_train(const char *backend, int streams, int64_t din, const troupe_optimizer_t *opt,
                    bool fused, run_t *r)
{
    s_train_steps(backend, streams, din, opt, fused, STEPS, r);
}

static void s_same_bits(const run_t *a, const run_t *b, const char *what)
{
    cr_assert_eq(a->np, b->np);
    for (int e = 0; e < a->np; e++)
        cr_assert(memcmp(&a->p[e], &b->p[e], sizeof(float)) == 0,
                  "%s: parameter %d is %.9g against %.9g", what, e, (double)a->p[e],
                  (double)b->p[e]);
    cr_assert(memcmp(&a->loss, &b->loss, sizeof(double)) == 0, "%s: loss %.17g against %.17g",
              what, a->loss, b->loss);
}

static troupe_optimizer_t s_opts[4];
static const char *s_names[4] = {"sgd momentum+decay", "sgd plain", "adamw decay", "adamw"};

static void s_make_opts(void)
{
    s_opts[0] = dpt_opt(TROUPE_OPT_SGD);
    s_opts[1] = dpt_opt(TROUPE_OPT_SGD);
    s_opts[1].momentum = 0.0; /* no state array */
    s_opts[1].weight_decay = 0.0;
    s_opts[2] = dpt_opt(TROUPE_OPT_ADAMW);
    s_opts[3] = dpt_opt(TROUPE_OPT_ADAMW);
    s_opts[3].weight_decay = 0.0;
}

Test(dp_streams, one_pass_gives_the_bits_of_the_separate_merge_optimizer_and_copies,
     .timeout = 280)
{
    s_make_opts();
    static run_t start, one, on, off, sync;
    s_train_steps("cpu", 1, 301, &s_opts[0], true, 0, &start);
    for (int q = 0; q < 4; q++) {
        s_train("cpu", 1, 301, &s_opts[q], true, &one);
        cr_assert(!one.fused_streams, "%s: one stream took the pass", s_names[q]);
        for (int e = 0; e < one.np; e++) /* it trains: every parameter moved */
            cr_assert(one.p[e] != start.p[e], "%s: parameter %d did not move", s_names[q], e);
        for (int n = 2; n <= 5; n++) {
            char what[96];
            snprintf(what, sizeof what, "%s, %d streams", s_names[q], n);
            s_train("cpu", n, 301, &s_opts[q], true, &on);
            s_train("cpu", n, 301, &s_opts[q], false, &off);
            cr_assert(on.fused_streams, "%s: the pass was not taken", what);
            cr_assert(!off.fused_streams, "%s: TROUPE_DP_FUSED_UPDATE=off took the pass", what);
            s_same_bits(&on, &off, what);
            /* the layout only changes the sums' rounding */
            cr_assert(isfinite(on.loss), "%s: loss %g", what, on.loss);
            for (int e = 0; e < on.np; e++) {
                double tol = 1e-5 * fmax(1.0, fabs((double)one.p[e]));
                cr_assert(fabs((double)on.p[e] - (double)one.p[e]) <= tol,
                          "%s: parameter %d is %.9g, one stream %.9g", what, e,
                          (double)on.p[e], (double)one.p[e]);
            }
        }
        s_train("sync", 2, 301, &s_opts[q], true, &sync);
        cr_assert(!sync.fused_streams, "%s: sync's inline streams took the pass", s_names[q]);
        s_train("cpu", 2, 301, &s_opts[q], true, &on);
        s_same_bits(&on, &sync, s_names[q]);
    }
}

/* 8 parameters over 4 streams: most chunks are empty or a few elements of one array. */
Test(dp_streams, a_model_smaller_than_a_chunk_per_stream_trains_alike)
{
    s_make_opts();
    static run_t on, off;
    for (int q = 0; q < 4; q += 2) {
        s_train("cpu", 4, 3, &s_opts[q], true, &on);
        s_train("cpu", 4, 3, &s_opts[q], false, &off);
        cr_assert(on.fused_streams);
        cr_assert_eq(on.np, 3 * DOUT + DOUT);
        s_same_bits(&on, &off, s_names[q]);
    }
}

Test(dp_streams, the_chooser_takes_the_pass_only_where_it_applies)
{
    static const struct {
        bool on;
        int streams;
        troupe__dp_exchange_t x;
        bool threads;
        size_t nseg;
        bool single, per_stream, want;
        const char *why;
    } rows[] = {
        {true, 2, TROUPE__DP_EXCHANGE_NONE, true, 1, true, true, true, "one rank"},
        {true, 2, TROUPE__DP_EXCHANGE_INPLACE, true, 1, true, true, true, "in-place allreduce"},
        {false, 2, TROUPE__DP_EXCHANGE_NONE, true, 1, true, true, false, "=off"},
        {true, 1, TROUPE__DP_EXCHANGE_NONE, true, 1, true, true, false, "one stream"},
        {true, 1, TROUPE__DP_EXCHANGE_INPLACE, true, 1, true, true, false, "one stream"},
        {true, 2, TROUPE__DP_EXCHANGE_STAGED, true, 1, true, true, false, "other memory"},
        {true, 2, TROUPE__DP_EXCHANGE_DIRECT, true, 1, true, true, false, "other memory"},
        {true, 2, TROUPE__DP_EXCHANGE_NONE, false, 1, true, true, false, "not threads"},
        {true, 2, TROUPE__DP_EXCHANGE_NONE, true, 3, true, true, false, "overlap"},
        {true, 2, TROUPE__DP_EXCHANGE_NONE, true, 1, false, true, false, "single precision"},
        {true, 2, TROUPE__DP_EXCHANGE_NONE, true, 1, true, false, false, "shared across"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char why[128];
        bool got = troupe__dp_choose_local(rows[i].on, rows[i].streams, rows[i].x,
                                           rows[i].threads, rows[i].nseg, rows[i].single,
                                           rows[i].per_stream, why, sizeof why);
        cr_assert_eq(got, rows[i].want, "row %zu: %d (%s)", i, got, why);
        cr_assert(strstr(why, rows[i].why) != NULL, "row %zu: reason '%s' lacks '%s'", i, why,
                  rows[i].why);
    }
}

/* The 301 x 37 model split over 3 streams, for the failure tests (inputs i % 7 / 10, the rest
 * zero: the values do not matter there). */
static void s_model_of_3(dpt_lr_t *m)
{
    s_make_opts();
    int64_t din = 301, nb = 3 * NBF, bs = FB / 3;
    size_t nx = (size_t)(NBF * FB * din), ny = (size_t)(NBF * FB * DOUT);
    double *xv = troupe_calloc(nx, sizeof *xv), *yv = troupe_calloc(ny, sizeof *yv);
    double *wv = troupe_calloc((size_t)(din * DOUT), sizeof *wv), bv[DOUT] = {0};
    cr_assert(xv && yv && wv);
    for (size_t i = 0; i < nx; i++)
        xv[i] = (double)(i % 7) * 0.1;
    dpt_lr_new(m, nb, bs, din, DOUT, xv, yv, wv, bv);
    troupe_free(xv);
    troupe_free(yv);
    troupe_free(wv);
}

/* With TROUPE_FAULT `fault`: the model of 3 streams, its driver (which takes the pass), and one
 * step done (the gradient routine's runs 1-3). */
static troupe_dp_t *s_start_with_fault(dpt_lr_t *m, const char *fault)
{
    s_model_of_3(m);
    OK(troupe_config_set_fault(fault));
    troupe_dp_config_t cfg = {.backend = "cpu", .streams = 3, .optimizer = s_opts[0]};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m->model, &dp));
    cr_assert(troupe_dp_fused_streams(dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_sync(dp));
    return dp;
}

/* A stream stuck in its gradient routine (kernel:routine=dp_grad:nth=5:ms=2500, a run of step
 * 1) with TROUPE_TIMEOUT_S at 1 s: the others wait that long at the pass, then the step fails
 * on every stream with DEADLINE_EXCEEDED naming the stream that did not arrive; the stuck one,
 * arriving later, does not start the pass; later steps are refused and the driver goes away. */
Test(dp_streams, a_stream_stuck_before_the_pass_fails_the_step_after_the_timeout, .timeout = 60)
{
    dpt_lr_t m;
    troupe_dp_t *dp = s_start_with_fault(&m, "kernel:routine=dp_grad:nth=5:ms=2500");
    int64_t timeout_s = troupe_config_timeout_s();
    OK(troupe_config_set_timeout_s(1));
    OK(troupe_dp_step(dp)); /* run 5 stalls 2.5 s */
    usleep(3500 * 1000);    /* every stream has given up or arrived late by now */
    troupe_status_t st = troupe_dp_sync(dp);
    const char *msg = troupe_last_error();
    cr_assert_eq(st, TROUPE_DEADLINE_EXCEEDED, "%s: %s", troupe_status_str(st), msg);
    cr_assert(strstr(msg, "waited 1 s (TROUPE_TIMEOUT_S) for stream(s) cpu:0:") != NULL &&
                  strstr(msg, "to reach the step's update") != NULL,
              "%s", msg);
    cr_assert_neq(troupe_dp_step(dp), TROUPE_OK, "a step after the failure was accepted");
    troupe_dp_destroy(&dp);
    OK(troupe_config_set_timeout_s(timeout_s));
    dpt_lr_destroy(&m);
    OK(troupe_config_set_fault(NULL));
}

/* The gradient routine of one stream fails in step 1 (kernel:routine=dp_grad:nth=4 with 3
 * streams: the first run of step 1): the others reach the pass and must not wait for it; the
 * step fails with the routine's error, later steps are refused, and the driver goes away. */
Test(dp_streams, a_stream_failing_before_the_pass_fails_the_step_without_a_hang)
{
    dpt_lr_t m;
    troupe_dp_t *dp = s_start_with_fault(&m, "kernel:routine=dp_grad:nth=4");
    troupe_status_t st = troupe_dp_step(dp); /* run 4 fails */
    if (st == TROUPE_OK)
        st = troupe_dp_sync(dp);
    cr_assert_eq(st, TROUPE_DEVICE_ERROR, "%s: %s", troupe_status_str(st), troupe_last_error());
    cr_assert(strstr(troupe_last_error(), "routine dp_grad: run 4 failed by TROUPE_FAULT") != NULL,
              "%s", troupe_last_error());
    cr_assert_neq(troupe_dp_step(dp), TROUPE_OK, "a step after the failure was accepted");
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
    OK(troupe_config_set_fault(NULL));
}
