/* troupe — the data-parallel driver (parallel/dp.h), in one process: a linear regression
 * y = x W + b with a mean-squared-error loss and hand-written gradients (ir/assign), trained
 * with SGD (momentum, weight decay) and AdamW, against a plain C reference of the same
 * optimizers on the same batches; N streams on 1/N batches against 1 stream on full batches;
 * bitwise reproducibility; checkpoints (round trip, corruption, atomicity); invalid configs.
 * Runs on "sync" and "cpu". */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "actors/troupe.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"
#include "runtime_test_util.h"

#define DPT_CHECK(expr) OK(expr)
#include "dp_breakdown.h"
#include "dp_test_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp", 60);
}

TestSuite(dp, .init = s_setup);

/* ---- the data set: full batches of FB rows, NB of them --------------------------------------- */

#define D 3  /* features */
#define O 2  /* outputs */
#define FB 8 /* rows of a full batch */
#define NB 4 /* full batches */

typedef struct data {
    float x[NB][FB][D];
    float y[NB][FB][O];
} data_t;

static uint32_t s_lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float s_unif(uint32_t *s)
{
    return (float)((double)s_lcg(s) / (double)(1u << 24) * 2.0 - 1.0);
}

static void s_make_data(data_t *d)
{
    uint32_t seed = 12345;
    const float wt[D][O] = {{0.5f, -1.0f}, {2.0f, 0.25f}, {-0.75f, 1.5f}};
    const float bt[O] = {0.3f, -0.2f};
    for (int j = 0; j < NB; j++)
        for (int r = 0; r < FB; r++) {
            for (int i = 0; i < D; i++)
                d->x[j][r][i] = s_unif(&seed);
            for (int o = 0; o < O; o++) {
                float v = bt[o] + 0.1f * s_unif(&seed);
                for (int i = 0; i < D; i++)
                    v += d->x[j][r][i] * wt[i][o];
                d->y[j][r][o] = v;
            }
        }
}

static const float s_w0[D][O] = {{0.1f, -0.2f}, {0.05f, 0.3f}, {-0.1f, 0.0f}};
static const float s_b0[O] = {0.01f, -0.02f};

/* ---- the model ------------------------------------------------------------------------------- */

/* The model (tests/dp_test_model.h) over `split` batches per full batch: batch j*split + h
 * holds rows [h*FB/split, (h+1)*FB/split) of full batch j. `din` != D gives a model of another
 * shape (for the wrong-shape checkpoint). */
static void s_model(dpt_lr_t *m, const data_t *d, int split, int din)
{
    int64_t nb = (int64_t)NB * split, bs = FB / split;
    double *xv = troupe_calloc((size_t)(nb * bs * din), sizeof *xv);
    double yv[NB * FB * O], wv[128 * O], bv[O]; /* din <= 128 */
    for (int j = 0; j < NB; j++)
        for (int r = 0; r < FB; r++) {
            for (int i = 0; i < din; i++)
                xv[(j * FB + r) * din + i] = i < D ? d->x[j][r][i] : 0.5;
            for (int o = 0; o < O; o++)
                yv[(j * FB + r) * O + o] = d->y[j][r][o];
        }
    for (int i = 0; i < din; i++)
        for (int o = 0; o < O; o++)
            wv[i * O + o] = i < D ? s_w0[i][o] : 0.0;
    for (int o = 0; o < O; o++)
        bv[o] = s_b0[o];
    dpt_lr_new(m, nb, bs, din, O, xv, yv, wv, bv);
    troupe_free(xv);
}

#define NP (D * O + O)

/* ---- the C reference --------------------------------------------------------------------------
 */

typedef struct ref {
    float w[NP]; /* W (row-major) then b */
    float m[NP], v[NP];
    float last_loss;
} ref_t;

static void s_ref_init(ref_t *r)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < D; i++)
        for (int o = 0; o < O; o++)
            r->w[i * O + o] = s_w0[i][o];
    for (int o = 0; o < O; o++)
        r->w[D * O + o] = s_b0[o];
}

/* One step on full batch j at step index t (1-based). */
static void s_ref_step(ref_t *r, const data_t *d, int j, int t, const troupe_optimizer_t *opt)
{
    float g[NP] = {0};
    float loss = 0;
    for (int row = 0; row < FB; row++)
        for (int o = 0; o < O; o++) {
            float p = r->w[D * O + o];
            for (int i = 0; i < D; i++)
                p += d->x[j][row][i] * r->w[i * O + o];
            float diff = p - d->y[j][row][o];
            float gp = diff * (float)(2.0 / (FB * O));
            loss += diff * diff * (float)(1.0 / (FB * O));
            for (int i = 0; i < D; i++)
                g[i * O + o] += d->x[j][row][i] * gp;
            g[D * O + o] += gp;
        }
    r->last_loss = loss;
    for (int e = 0; e < NP; e++) {
        float p = r->w[e];
        if (opt->kind == TROUPE_OPT_SGD) {
            float gg = g[e] + (float)opt->weight_decay * p;
            r->m[e] = (float)opt->momentum * r->m[e] + gg;
            r->w[e] = p - (float)opt->lr * (opt->momentum != 0.0 ? r->m[e] : gg);
        } else {
            p -= (float)(opt->lr * opt->weight_decay) * p;
            r->m[e] = (float)opt->beta1 * r->m[e] + (float)(1 - opt->beta1) * g[e];
            r->v[e] = (float)opt->beta2 * r->v[e] + (float)(1 - opt->beta2) * g[e] * g[e];
            float mh = r->m[e] / (float)(1 - pow(opt->beta1, t));
            float vh = r->v[e] / (float)(1 - pow(opt->beta2, t));
            r->w[e] = p - (float)opt->lr * mh / (sqrtf(vh) + (float)opt->eps);
        }
    }
}

static void s_close(const float *got, const float *want, int n, double rel, const char *what)
{
    for (int e = 0; e < n; e++) {
        double tol = rel * fmax(1.0, fabs((double)want[e]));
        cr_assert(fabs((double)got[e] - (double)want[e]) <= tol,
                  "%s: element %d: got %.9g want %.9g (tolerance %g)", what, e, (double)got[e],
                  (double)want[e], tol);
    }
}

/* Trains `steps` steps with `streams` streams on batches split `streams` ways; params out. */
static void s_train(const char *backend, int streams, troupe_optimizer_kind_t kind, int steps,
                    float *out, double *out_loss)
{
    data_t d;
    s_make_data(&d);
    dpt_lr_t m;
    s_model(&m, &d, streams, D);
    troupe_dp_config_t cfg = {
        .backend = backend, .streams = streams, .optimizer = dpt_opt(kind), .local_only = false};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    cr_assert_eq(troupe_dp_num_streams(dp), streams);
    for (int s = 0; s < steps; s++)
        OK(troupe_dp_step(dp));
    cr_assert_eq(troupe_dp_steps_done(dp), steps);
    OK(troupe_dp_sync(dp));
    if (out_loss)
        OK(troupe_dp_last_loss(dp, out_loss));
    OK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    cr_assert_null(dp);
    dpt_lr_destroy(&m);
}

#define K 6

static void s_against_reference(const char *backend, troupe_optimizer_kind_t kind)
{
    data_t d;
    s_make_data(&d);
    troupe_optimizer_t opt = dpt_opt(kind);
    ref_t r;
    s_ref_init(&r);
    for (int s = 0; s < K; s++)
        s_ref_step(&r, &d, s % NB, s + 1, &opt);
    float got[NP];
    double loss = 0;
    s_train(backend, 1, kind, K, got, &loss);
    char what[64];
    snprintf(what, sizeof what, "%s %s", backend, troupe_optimizer_name(kind));
    s_close(got, r.w, NP, 1e-5, what);
    cr_assert(fabs(loss - r.last_loss) <= 1e-5 * fmax(1.0, fabs(r.last_loss)),
              "%s: last loss %.9g, reference %.9g", what, loss, (double)r.last_loss);
    /* the parameters moved: the test is not vacuous */
    cr_assert(fabsf(got[0] - s_w0[0][0]) > 1e-3f);
}

Test(dp, sgd_matches_the_c_reference)
{
    s_against_reference("sync", TROUPE_OPT_SGD);
    s_against_reference("cpu", TROUPE_OPT_SGD);
}

Test(dp, adamw_matches_the_c_reference)
{
    s_against_reference("sync", TROUPE_OPT_ADAMW);
    s_against_reference("cpu", TROUPE_OPT_ADAMW);
}

/* The exchange a run picks (parallel/dp.h, CUDA-aware MPI): one rank exchanges nothing; host
 * memory is lent in place; device memory is staged through host memory unless MPI is
 * CUDA-aware and the backend can lend its arrays (then handed over as it is); the cuda
 * backend, which cannot lend, stages even with CUDA-aware MPI. */
Test(dp, the_exchange_follows_memory_and_cuda_aware_mpi)
{
    cr_assert_eq(troupe__dp_choose_exchange(1, true, false, true), TROUPE__DP_EXCHANGE_NONE);
    cr_assert_eq(troupe__dp_choose_exchange(2, false, true, false), TROUPE__DP_EXCHANGE_INPLACE);
    cr_assert_eq(troupe__dp_choose_exchange(2, false, true, true), TROUPE__DP_EXCHANGE_INPLACE);
    cr_assert_eq(troupe__dp_choose_exchange(2, true, true, false), TROUPE__DP_EXCHANGE_STAGED);
    cr_assert_eq(troupe__dp_choose_exchange(2, true, true, true), TROUPE__DP_EXCHANGE_DIRECT);
    cr_assert_eq(troupe__dp_choose_exchange(2, true, false, true), TROUPE__DP_EXCHANGE_STAGED);
    cr_assert_eq(troupe__dp_choose_exchange(2, true, false, false), TROUPE__DP_EXCHANGE_STAGED);
    cr_assert_str_eq(troupe__dp_exchange_name(TROUPE__DP_EXCHANGE_DIRECT), "direct");
    cr_assert_str_eq(troupe__dp_exchange_name(TROUPE__DP_EXCHANGE_STAGED), "staged");
}

/* At debug:parallel each of the first steps logs its breakdown (parallel/dp.h, Step
 * breakdown) once, with sane fields; one rank exchanges nothing, and its two streams merge and
 * update in one pass (update=streams). */
Test(dp, debug_log_breaks_each_step_down)
{
    char path[] = "/tmp/troupe-dp-breakdown-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:parallel"));
    float out[NP];
    s_train("cpu", 2, TROUPE_OPT_SGD, 4, out, NULL);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    dpb_line_t l[16];
    int n = dpb_read(path, l, 16);
    unlink(path);
    cr_assert_eq(n, 4, "%d breakdown lines for 4 steps", n);
    for (int i = 0; i < n; i++) {
        const char *bad = dpb_insane(&l[i]);
        cr_assert_null(bad, "step %lld: %s", l[i].step, bad);
        cr_assert_str_eq(l[i].exchange_kind, "none");
        /* one rank of two streams on cpu: merge and update as one pass across the streams */
        cr_assert_str_eq(l[i].update, "streams");
        cr_assert_eq(l[i].merge, 0.0, "step %lld: merge_us %.1f with no merge routine",
                     l[i].step, l[i].merge);
        cr_assert_gt(l[i].optimizer, 0.0, "step %lld: the pass took no time", l[i].step);
        cr_assert_eq(l[i].buckets, 0);
        cr_assert_eq(l[i].exchange, 0.0);
        cr_assert_gt(l[i].compute, 0.0, "step %lld: no compute time", l[i].step);
    }
    bool seen[4] = {false};
    for (int i = 0; i < n; i++)
        if (l[i].step >= 0 && l[i].step < 4)
            seen[l[i].step] = true;
    cr_assert(seen[0] && seen[1] && seen[2] && seen[3], "steps 0-3 each logged once");
}

Test(dp, two_streams_on_half_batches_equal_one_stream_on_full_batches)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        float one[NP], two[NP], two_sync[NP], four[NP];
        double l1 = 0, l2 = 0;
        s_train("cpu", 1, kinds[q], K, one, &l1);
        s_train("cpu", 2, kinds[q], K, two, &l2);
        s_train("sync", 2, kinds[q], K, two_sync, NULL);
        s_train("cpu", 4, kinds[q], K, four, NULL);
        const char *name = troupe_optimizer_name(kinds[q]);
        s_close(two, one, NP, 1e-5, name);
        s_close(two_sync, one, NP, 1e-5, name);
        s_close(four, one, NP, 1e-5, name);
        cr_assert(fabs(l1 - l2) <= 1e-5 * fmax(1.0, fabs(l1)), "%s: loss %g vs %g", name, l1, l2);
    }
}

/* Trains as s_train with `streams` replicas laid out over devices 0..ndev-1 of a backend with
 * two devices (TROUPE_CPU_DEVICES=2), on batches split `streams` ways; checks where each replica
 * runs (consecutive replicas on one device). */
static void s_train_devices(const char *backend, int ndev, int streams,
                            troupe_optimizer_kind_t kind, float *out)
{
    OK(troupe_config_set_cpu_devices(2));
    data_t d;
    s_make_data(&d);
    dpt_lr_t m;
    s_model(&m, &d, streams, D);
    int devs[2] = {0, 1};
    troupe_dp_config_t cfg = {.backend = backend,
                              .streams = streams,
                              .optimizer = dpt_opt(kind),
                              .devices = devs,
                              .n_devices = ndev};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    int per = (streams + ndev - 1) / ndev;
    for (int k = 0; k < streams; k++)
        cr_assert_eq(troupe_dp_replica_device(dp, k), k / per, "%s: replica %d on device %d",
                     backend, k, troupe_dp_replica_device(dp, k));
    /* device_bytes: the used memory of each device the replicas run on, each counted once */
    int64_t want = 0;
    for (int o = 0; o < ndev; o++) {
        troupe_device_t *dv = NULL;
        int64_t used = 0;
        OK(troupe_get_device(troupe_dp_backend(dp), o, &dv));
        OK(troupe_get_used_memory(dv, &used));
        want += used;
    }
    cr_assert(want > 0 && troupe_dp_device_bytes(dp) == want, "%s: device_bytes %lld, want %lld",
              backend, (long long)troupe_dp_device_bytes(dp), (long long)want);
    cr_assert_gt(want, troupe_dp_optimizer_state_bytes(dp), "the state is a part of it");
    cr_assert_eq(troupe_dp_device_bytes(NULL), 0);
    for (int s = 0; s < K; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
    OK(troupe_config_set_cpu_devices(1));
}

/* The devices dimension (parallel/dp.h): the merge tree pairs replicas in the same order
 * whatever device they run on, and a copy between devices moves the same bytes, so
 * 2 devices x 1 stream equals 1 device x 2 streams bit for bit (and 2 x 2 equals 1 x 4); both
 * equal 1 device x 1 stream on the doubled (full) batch to float rounding (the sum of two
 * half-batch means against one full-batch mean). */
Test(dp, devices_times_streams_layouts_give_the_same_parameters)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        float one[NP], s2[NP], d2[NP], d2_sync[NP], s4[NP], d2s2[NP];
        s_train_devices("cpu", 1, 1, kinds[q], one);
        s_train_devices("cpu", 1, 2, kinds[q], s2);
        s_train_devices("cpu", 2, 2, kinds[q], d2);
        s_train_devices("sync", 2, 2, kinds[q], d2_sync);
        s_train_devices("cpu", 1, 4, kinds[q], s4);
        s_train_devices("cpu", 2, 4, kinds[q], d2s2);
        cr_assert(memcmp(d2, s2, sizeof d2) == 0,
                  "%s: 2 devices x 1 stream differ from 1 device x 2 streams", name);
        cr_assert(memcmp(d2_sync, s2, sizeof d2) == 0,
                  "%s: sync 2 devices x 1 stream differ from cpu 1 device x 2 streams", name);
        cr_assert(memcmp(d2s2, s4, sizeof s4) == 0,
                  "%s: 2 devices x 2 streams differ from 1 device x 4 streams", name);
        s_close(d2, one, NP, 1e-5, name);
        s_close(d2s2, one, NP, 1e-5, name);
        cr_assert(fabsf(d2[0] - s_w0[0][0]) > 1e-3f, "%s: the parameters did not move", name);
    }
}

Test(dp, identical_runs_are_bitwise_identical)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        float a[NP], b[NP];
        s_train("cpu", 2, kinds[q], K, a, NULL);
        s_train("cpu", 2, kinds[q], K, b, NULL);
        cr_assert(memcmp(a, b, sizeof a) == 0, "%s: two runs differ",
                  troupe_optimizer_name(kinds[q]));
    }
}

/* The same on a GPU (issue 16: "1 stream on the global batch vs 2 streams ... give the same
 * parameters to within float rounding, SGD and AdamW; two identical runs are bitwise
 * identical"): the cuda backend against the C reference, 2 streams against 1 on the doubled
 * batch, and two identical runs bit for bit. Without a device it skips with the reason. */
Test(dp, on_a_gpu_layouts_agree_and_runs_repeat_bitwise)
{
    char why[512];
    if (!rtu_cuda_present(why, sizeof why))
        cr_skip_test("%s", why);
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        s_against_reference("cuda", kinds[q]);
        float one[NP], two[NP], again[NP];
        s_train("cuda", 1, kinds[q], K, one, NULL);
        s_train("cuda", 2, kinds[q], K, two, NULL);
        s_train("cuda", 2, kinds[q], K, again, NULL);
        s_close(two, one, NP, 1e-5, name);
        cr_assert(memcmp(two, again, sizeof two) == 0, "cuda %s: two identical runs differ", name);
    }
}

/* ---- checkpoints ---------------------------------------------------------------------------- */

typedef struct run {
    data_t d;
    dpt_lr_t m;
    troupe_dp_t *dp;
} run_t;

static void s_run_new(run_t *r, const char *backend, int streams, troupe_optimizer_kind_t kind,
                      int din)
{
    s_make_data(&r->d);
    s_model(&r->m, &r->d, streams, din);
    troupe_dp_config_t cfg = {
        .backend = backend, .streams = streams, .optimizer = dpt_opt(kind), .local_only = false};
    OK(troupe_dp_new(&cfg, &r->m.model, &r->dp));
}

static void s_run_steps(run_t *r, int n)
{
    for (int s = 0; s < n; s++)
        OK(troupe_dp_step(r->dp));
}

static void s_run_params(run_t *r, float *out)
{
    OK(troupe_dp_params_to_host(r->dp));
    dpt_lr_params(&r->m, out);
}

static void s_run_done(run_t *r)
{
    troupe_dp_destroy(&r->dp);
    dpt_lr_destroy(&r->m);
}

static char *s_tmp_path(const char *name)
{
    char *p =
        troupe_strdup_printf("%s/dp-ckpt-%ld-%s", TROUPE_TEST_BUILD_DIR, (long)getpid(), name);
    cr_assert_not_null(p);
    return p;
}

static unsigned char *s_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void s_spit(const char *path, const unsigned char *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void s_round_trip(troupe_optimizer_kind_t kind, int streams)
{
    char *path = s_tmp_path(troupe_optimizer_name(kind));
    run_t a, b;
    float pa[NP], pb[NP];
    s_run_new(&a, "cpu", streams, kind, D);
    s_run_steps(&a, 3);
    OK(troupe_dp_save(a.dp, path));
    cr_assert(access(path, F_OK) == 0);
    s_run_steps(&a, 3);
    s_run_params(&a, pa);
    s_run_done(&a);

    s_run_new(&b, "cpu", streams, kind, D);
    OK(troupe_dp_load(b.dp, path));
    cr_assert_eq(troupe_dp_steps_done(b.dp), 3);
    s_run_steps(&b, 3);
    s_run_params(&b, pb);
    s_run_done(&b);
    cr_assert(memcmp(pa, pb, sizeof pa) == 0,
              "%s: a resumed run differs from an uninterrupted one (W[0] %.9g vs %.9g)",
              troupe_optimizer_name(kind), (double)pa[0], (double)pb[0]);
    unlink(path);
    troupe_free(path);
}

Test(dp, checkpoint_round_trip_resumes_exactly)
{
    s_round_trip(TROUPE_OPT_ADAMW, 2);
    s_round_trip(TROUPE_OPT_SGD, 1);
}

/* Loading `path` must fail with INVALID_ARGUMENT naming the path and `needle`, and change
 * nothing: the parameters, the step count, and (through one more step) the optimizer state. */
static void s_expect_bad(run_t *r, const char *path, const char *needle)
{
    float before[NP], after[NP];
    s_run_params(r, before);
    int64_t steps = troupe_dp_steps_done(r->dp);
    troupe_status_t st = troupe_dp_load(r->dp, path);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: %s (%s)", needle, troupe_status_str(st),
                 troupe_last_error());
    const char *msg = troupe_last_error();
    cr_assert(strstr(msg, path) && strstr(msg, needle), "want '%s' and the path in: %s", needle,
              msg);
    cr_assert_eq(troupe_dp_steps_done(r->dp), steps);
    s_run_params(r, after);
    cr_assert(memcmp(before, after, sizeof before) == 0, "%s: parameters changed", needle);
}

Test(dp, corrupt_checkpoints_are_refused_and_change_nothing)
{
    char *good = s_tmp_path("good"), *bad = s_tmp_path("bad"), *shape = s_tmp_path("shape");
    run_t r, ref, other;
    s_run_new(&r, "sync", 1, TROUPE_OPT_ADAMW, D);
    s_run_new(&ref, "sync", 1, TROUPE_OPT_ADAMW, D);
    s_run_steps(&r, 2);
    s_run_steps(&ref, 2);
    OK(troupe_dp_save(r.dp, good));
    size_t n = 0;
    unsigned char *img = s_slurp(good, &n);
    cr_assert_gt(n, 64u);

    s_spit(bad, img, n - 7); /* truncated */
    s_expect_bad(&r, bad, "truncated");
    s_spit(bad, img, 20); /* truncated inside the header */
    s_expect_bad(&r, bad, "truncated");
    img[n - 20] ^= 0x10; /* a flipped bit in the data */
    s_spit(bad, img, n);
    s_expect_bad(&r, bad, "CRC mismatch");
    img[n - 20] ^= 0x10;
    img[0] = 'X'; /* wrong magic */
    s_spit(bad, img, n);
    s_expect_bad(&r, bad, "bad magic");
    img[0] = 'T';
    unsigned char version = img[8];
    img[8] = 7; /* a future version */
    s_spit(bad, img, n);
    s_expect_bad(&r, bad, "version");
    img[8] = version;
    s_spit(bad, img, n); /* intact again: loads */
    free(img);

    /* a valid checkpoint of a model whose W has another shape */
    s_run_new(&other, "sync", 1, TROUPE_OPT_ADAMW, D + 1);
    s_run_steps(&other, 1);
    OK(troupe_dp_save(other.dp, shape));
    s_run_done(&other);
    s_expect_bad(&r, shape, "dims 4x2 in the file but 3x2");
    /* a checkpoint of the other optimizer */
    s_run_new(&other, "sync", 1, TROUPE_OPT_SGD, D);
    OK(troupe_dp_save(other.dp, shape));
    s_run_done(&other);
    s_expect_bad(&r, shape, "optimizer sgd in the file but adamw");

    /* no file */
    char *missing = s_tmp_path("missing");
    cr_assert_eq(troupe_dp_load(r.dp, missing), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), missing));
    /* save into a directory that does not exist */
    cr_assert_eq(troupe_dp_save(r.dp, "/nonexistent-dir/ck"), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "/nonexistent-dir/ck"));

    /* the optimizer state was not touched either: one more step matches the reference run */
    s_run_steps(&r, 1);
    s_run_steps(&ref, 1);
    float pr[NP], pf[NP];
    s_run_params(&r, pr);
    s_run_params(&ref, pf);
    cr_assert(memcmp(pr, pf, sizeof pr) == 0, "failed loads changed the optimizer state");
    /* the restored intact file loads */
    OK(troupe_dp_load(r.dp, bad));
    cr_assert_eq(troupe_dp_steps_done(r.dp), 2);
    s_run_done(&r);
    s_run_done(&ref);
    unlink(good);
    unlink(bad);
    unlink(shape);
    troupe_free(good);
    troupe_free(bad);
    troupe_free(shape);
    troupe_free(missing);
}

Test(dp, save_is_atomic_and_leaves_no_temporary)
{
    char *path = s_tmp_path("atomic");
    run_t r;
    s_run_new(&r, "sync", 1, TROUPE_OPT_SGD, D);
    s_spit(path, (const unsigned char *)"old", 3);
    OK(troupe_dp_save(r.dp, path));
    char *tmp = troupe_strdup_printf("%s.tmp.%ld", path, (long)getpid());
    cr_assert(access(tmp, F_OK) != 0, "the temporary file is left behind");
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    cr_assert(n > 8 && memcmp(img, "TROUPECK", 8) == 0);
    free(img);
    s_run_done(&r);
    unlink(path);
    troupe_free(tmp);
    troupe_free(path);
}

/* A pid that no process has: a child that ran and was reaped. */
static long s_dead_pid(void)
{
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(0);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    return (long)pid;
}

Test(dp, save_removes_the_temporaries_of_dead_processes_only)
{
    char *path = s_tmp_path("stale");
    char *dead = troupe_strdup_printf("%s.tmp.%ld", path, s_dead_pid());
    char *alive = troupe_strdup_printf("%s.tmp.%ld", path, (long)getppid());
    char *other = troupe_strdup_printf("%s.tmp.notapid", path);
    s_spit(dead, (const unsigned char *)"half", 4);
    s_spit(alive, (const unsigned char *)"busy", 4);
    s_spit(other, (const unsigned char *)"mine", 4);
    run_t r;
    s_run_new(&r, "sync", 1, TROUPE_OPT_SGD, D);
    OK(troupe_dp_save(r.dp, path));
    cr_assert(access(dead, F_OK) != 0, "the dead process's temporary is left behind");
    cr_assert(access(alive, F_OK) == 0, "a running process's temporary was removed");
    cr_assert(access(other, F_OK) == 0, "a file that is not a temporary was removed");
    s_run_done(&r);
    unlink(alive);
    unlink(other);
    unlink(path);
    troupe_free(dead);
    troupe_free(alive);
    troupe_free(other);
    troupe_free(path);
}

/* Rewrites a version 3 image with an empty note (img[n]) as version `to` (2: without the run
 * record; 1: without the note length either), with its own CRC. */
static void s_downgrade(unsigned char *img, size_t *n, int to)
{
    cr_assert(img[8] == to + 1, "downgrading a version %d file to %d", img[8], to);
    cr_assert(img[32] == 0 && img[33] == 0 && img[34] == 0 && img[35] == 0, "empty note");
    size_t at = to == 2 ? 36 : 32, cut = to == 2 ? 4 + 72 : 4;
    if (to == 2)
        cr_assert_eq(img[36], 72, "run record of 72 bytes");
    img[8] = (unsigned char)to;
    memmove(img + at, img + at + cut, *n - at - cut);
    *n -= cut;
    uint32_t crc = (uint32_t)crc32(0L, img, (uInt)(*n - 4));
    for (int i = 0; i < 4; i++)
        img[*n - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
}

Test(dp, checkpoint_note_round_trips_and_version_1_files_still_load)
{
    char *path = s_tmp_path("note"), *v1 = s_tmp_path("v1");
    run_t a, b;
    s_run_new(&a, "sync", 1, TROUPE_OPT_SGD, D);
    cr_assert_null(troupe_dp_checkpoint_note(a.dp));
    OK(troupe_dp_set_checkpoint_note(a.dp, "batch=8 rows=64"));
    cr_assert_str_eq(troupe_dp_checkpoint_note(a.dp), "batch=8 rows=64");
    s_run_steps(&a, 2);
    OK(troupe_dp_save(a.dp, path));
    s_run_new(&b, "sync", 1, TROUPE_OPT_SGD, D);
    OK(troupe_dp_load(b.dp, path));
    cr_assert_str_eq(troupe_dp_checkpoint_note(b.dp), "batch=8 rows=64");
    cr_assert_eq(troupe_dp_steps_done(b.dp), 2);
    /* too long: refused, the note is kept */
    char *big = troupe_malloc(TROUPE_DP_NOTE_MAX + 2);
    memset(big, 'x', TROUPE_DP_NOTE_MAX + 1);
    big[TROUPE_DP_NOTE_MAX + 1] = '\0';
    cr_assert_eq(troupe_dp_set_checkpoint_note(b.dp, big), TROUPE_INVALID_ARGUMENT);
    cr_assert_str_eq(troupe_dp_checkpoint_note(b.dp), "batch=8 rows=64");
    troupe_free(big);

    /* The same file in format versions 2 (no run record) and 1 (no note length either). A
     * load clears the note. */
    OK(troupe_dp_set_checkpoint_note(a.dp, NULL));
    OK(troupe_dp_save(a.dp, path));
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    s_downgrade(img, &n, 2);
    s_spit(v1, img, n);
    troupe_dp_checkpoint_info_t info;
    OK(troupe_dp_checkpoint_read(v1, &info));
    cr_assert(info.version == 2 && info.steps == 2 && info.ranks == 0 && info.lr == 0.0);
    OK(troupe_dp_load(b.dp, v1));
    cr_assert_null(troupe_dp_checkpoint_note(b.dp));
    cr_assert_eq(troupe_dp_steps_done(b.dp), 2);
    s_downgrade(img, &n, 1);
    s_spit(v1, img, n);
    free(img);
    OK(troupe_dp_load(b.dp, v1));
    cr_assert_null(troupe_dp_checkpoint_note(b.dp));
    cr_assert_eq(troupe_dp_steps_done(b.dp), 2);
    s_run_done(&a);
    s_run_done(&b);
    unlink(path);
    unlink(v1);
    troupe_free(path);
    troupe_free(v1);
}

/* The run record (layout, learning rate, plan, data position) round-trips; the model-free
 * reader sees what the file holds; a checkpoint of 2 streams resumes on 1 stream (the global
 * batch unchanged: the model splits each full batch over the streams) to within rounding of a
 * 1-stream run, and on 2 streams bitwise. */
Test(dp, checkpoint_records_the_run_and_resumes_on_another_layout)
{
    char *path = s_tmp_path("layout");
    const troupe_dp_plan_t plan = {
        .global_batch = FB, .steps_per_epoch = NB, .data_seed = 7, .schedule_steps = 12};
    const double lr = 0.0375;
    run_t a, b, c;
    float pa[NP], pb[NP], pc[NP];
    s_run_new(&a, "cpu", 2, TROUPE_OPT_SGD, D);
    OK(troupe_dp_set_plan(a.dp, &plan));
    OK(troupe_dp_set_lr(a.dp, lr));
    s_run_steps(&a, 5);
    OK(troupe_dp_save(a.dp, path));
    s_run_params(&a, pa);

    troupe_dp_checkpoint_info_t info, again;
    OK(troupe_dp_checkpoint_read(path, &info));
    cr_assert_eq(info.version, 3);
    cr_assert_eq(info.steps, 5);
    cr_assert_eq(info.optimizer, TROUPE_OPT_SGD);
    cr_assert_eq(info.nstate, 1);
    cr_assert_eq(info.n_params, 2);
    cr_assert_eq(info.ranks, 1);
    cr_assert_eq(info.streams, 2);
    cr_assert_eq(info.replicas, 2);
    cr_assert_eq(info.lr, lr);
    cr_assert(memcmp(&info.plan, &plan, sizeof plan) == 0, "the plan differs");
    cr_assert_eq(info.epoch, 1, "step 5 of 4-step epochs is in epoch 1");
    cr_assert_eq(info.sample_in_epoch, 8, "its first sample is (5 %% 4) * 8");
    cr_assert_eq(info.param_bytes, sizeof pa);
    cr_assert_eq(info.params_crc32, (uint32_t)crc32(0L, (const Bytef *)pa, sizeof pa));
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    OK(troupe_dp_checkpoint_parse(img, n, "mem", &again));
    cr_assert(again.steps == info.steps && again.params_crc32 == info.params_crc32 &&
              again.streams == 2 && again.sample_in_epoch == 8);
    free(img);

    /* on one stream: the same global batch per step, summed in another order */
    s_run_new(&b, "cpu", 1, TROUPE_OPT_SGD, D);
    OK(troupe_dp_load(b.dp, path));
    cr_assert_eq(troupe_dp_steps_done(b.dp), 5);
    troupe_dp_plan_t got = troupe_dp_plan(b.dp);
    cr_assert(memcmp(&got, &plan, sizeof plan) == 0, "the plan was not restored");
    s_run_steps(&b, 3);
    s_run_params(&b, pb);
    s_run_new(&c, "cpu", 1, TROUPE_OPT_SGD, D);
    OK(troupe_dp_set_lr(c.dp, lr));
    s_run_steps(&c, 8);
    s_run_params(&c, pc);
    s_close(pb, pc, NP, 1e-5, "resumed on 1 stream (the learning rate restored)");
    cr_assert(fabsf(pb[0] - pa[0]) > 1e-4f, "the resumed run trained");
    s_run_done(&b);
    s_run_done(&c);

    /* on two streams, against the first run going on: bitwise */
    s_run_new(&b, "cpu", 2, TROUPE_OPT_SGD, D);
    OK(troupe_dp_load(b.dp, path));
    s_run_steps(&b, 3);
    s_run_steps(&a, 3);
    s_run_params(&b, pb);
    s_run_params(&a, pa);
    cr_assert(memcmp(pa, pb, sizeof pa) == 0, "resumed on the same layout: not bitwise equal");
    s_run_done(&a);
    s_run_done(&b);

    /* a bad plan is refused */
    s_run_new(&a, "sync", 1, TROUPE_OPT_SGD, D);
    troupe_dp_plan_t bad = {.global_batch = 8, .steps_per_epoch = 0};
    cr_assert_eq(troupe_dp_set_plan(a.dp, &bad), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "steps_per_epoch"));
    bad.steps_per_epoch = 1;
    bad.schedule_steps = -1;
    cr_assert_eq(troupe_dp_set_plan(a.dp, &bad), TROUPE_INVALID_ARGUMENT);
    s_run_done(&a);
    unlink(path);
    troupe_free(path);
}

/* The reader refuses every proper prefix of a checkpoint and every single flipped bit (the
 * CRC or a structural check catches it), naming the file, and never reads out of bounds. */
Test(dp, every_truncation_and_flipped_bit_is_refused)
{
    char *path = s_tmp_path("flips");
    run_t r;
    s_run_new(&r, "sync", 1, TROUPE_OPT_ADAMW, D);
    OK(troupe_dp_set_checkpoint_note(r.dp, "n"));
    s_run_steps(&r, 1);
    OK(troupe_dp_save(r.dp, path));
    s_run_done(&r);
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    troupe_dp_checkpoint_info_t info;
    OK(troupe_dp_checkpoint_parse(img, n, "whole", &info));
    cr_assert_str_eq(info.note, "n");
    for (size_t len = 0; len < n; len++) {
        unsigned char *cut = malloc(len ? len : 1); /* exactly len bytes: ASan sees overreads */
        memcpy(cut, img, len);
        troupe_status_t st = troupe_dp_checkpoint_parse(cut, len, "cut", &info);
        free(cut);
        cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "a prefix of %zu of %zu bytes was accepted", len,
                     n);
        cr_assert(strstr(troupe_last_error(), "checkpoint 'cut'"), "%s", troupe_last_error());
    }
    for (size_t i = 0; i < n; i++) {
        img[i] ^= (unsigned char)(1u << (i % 8));
        troupe_status_t st = troupe_dp_checkpoint_parse(img, n, "flip", &info);
        img[i] ^= (unsigned char)(1u << (i % 8));
        cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "a flipped bit in byte %zu was accepted", i);
    }
    cr_assert_eq(troupe_dp_checkpoint_read("/nonexistent-dir/ck", &info), TROUPE_NOT_FOUND);
    free(img);
    unlink(path);
    troupe_free(path);
}

/* A cut file says so with its length and the length it needed ("truncated: N bytes,
 * expected M"): M is exact for a cut in the CRC or the last parameter's data, else a lower
 * bound, never more than the whole file. A parameter larger than the cut file is still a
 * truncation (it read as "invalid dims or state precision (corrupt file)"). */
Test(dp, truncated_checkpoint_names_its_length_and_the_expected_one)
{
    char *path = s_tmp_path("cut");
    run_t r;
    s_run_new(&r, "sync", 1, TROUPE_OPT_ADAMW, 120); /* W: 240 elements, more than a header */
    s_run_steps(&r, 1);
    OK(troupe_dp_save(r.dp, path));
    s_run_done(&r);
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    troupe_dp_checkpoint_info_t info;
    size_t exact = 0;
    for (size_t len = 8; len < n; len++) {
        cr_assert_eq(troupe_dp_checkpoint_parse(img, len, "cut", &info), TROUPE_INVALID_ARGUMENT);
        const char *msg = troupe_last_error();
        char want[64];
        snprintf(want, sizeof want, "truncated: %zu bytes, expected ", len);
        const char *at = strstr(msg, want);
        cr_assert(at, "prefix %zu of %zu: %s", len, n, msg);
        at += strlen(want);
        bool lower = strncmp(at, "at least ", 9) == 0;
        unsigned long long m = strtoull(lower ? at + 9 : at, NULL, 10);
        cr_assert(m > len && m <= n, "prefix %zu of %zu: expected %llu: %s", len, n, m, msg);
        if (!lower) {
            cr_assert_eq(m, n, "prefix %zu: an exact length must be the file's: %s", len, msg);
            exact++;
        }
        if (len >= n - 5)
            cr_assert(!lower, "a cut in the CRC or the last data is exact: %s", msg);
    }
    cr_assert_geq(exact, 5u);
    free(img);
    unlink(path);
    troupe_free(path);
}

/* A checkpoint path that is a device, a FIFO or a directory is refused by its kind (a FIFO is
 * not waited on). */
Test(dp, checkpoint_that_is_not_a_regular_file_is_refused)
{
    char *fifo = s_tmp_path("fifo");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    troupe_dp_checkpoint_info_t info;
    const char *paths[] = {"/dev/zero", fifo, "/tmp"};
    const char *kinds[] = {"a character device", "a FIFO", "a directory"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(troupe_dp_checkpoint_read(paths[i], &info), TROUPE_INVALID_ARGUMENT, "%s",
                     paths[i]);
        char want[600];
        snprintf(want, sizeof want, "%s: %s, not a regular file: expected a troupe checkpoint",
                 paths[i], kinds[i]);
        cr_assert(strstr(troupe_last_error(), want), "%s", troupe_last_error());
    }
    unlink(fifo);
    troupe_free(fifo);
}

/* A label from the file with control bytes (an ESC sequence) is quoted escaped: none of its
 * bytes reach the terminal raw. */
Test(dp, checkpoint_label_control_bytes_are_escaped)
{
    char *path = s_tmp_path("label");
    run_t r;
    s_run_new(&r, "sync", 1, TROUPE_OPT_ADAMW, D);
    s_run_steps(&r, 1);
    OK(troupe_dp_save(r.dp, path));
    size_t n = 0;
    unsigned char *img = s_slurp(path, &n);
    static const unsigned char w_entry[] = {1, 0, 0, 0, 'W'}; /* u32 length 1, "W" */
    unsigned char *at = NULL;
    for (size_t i = 0; !at && i + sizeof w_entry < n; i++)
        if (memcmp(img + i, w_entry, sizeof w_entry) == 0)
            at = img + i;
    cr_assert_not_null(at, "W's label entry not found");
    at[4] = 0x1b; /* ESC */
    uint32_t crc = (uint32_t)crc32(0L, img, (uInt)(n - 4)); /* re-sealed */
    for (int i = 0; i < 4; i++)
        img[n - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
    s_spit(path, img, n);
    cr_assert_eq(troupe_dp_load(r.dp, path), TROUPE_INVALID_ARGUMENT);
    const char *msg = troupe_last_error();
    cr_assert(strstr(msg, "labelled '\\x1b' in the file but 'W'"), "%s", msg);
    for (const char *c = msg; *c; c++)
        cr_assert((unsigned char)*c >= 0x20 && (unsigned char)*c != 0x7f,
                  "a raw control byte 0x%02x in: %s", (unsigned char)*c, msg);
    s_run_done(&r);
    free(img);
    unlink(path);
    troupe_free(path);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void s_expect_invalid(const troupe_dp_config_t *cfg, const troupe_dp_model_t *m,
                             troupe_status_t want, const char *needle)
{
    troupe_dp_t *dp = (troupe_dp_t *)0x1;
    troupe_status_t st = troupe_dp_new(cfg, m, &dp);
    cr_assert_eq(st, want, "%s: got %s (%s)", needle, troupe_status_str(st), troupe_last_error());
    cr_assert_null(dp);
    cr_assert(strstr(troupe_last_error(), needle), "want '%s' in: %s", needle, troupe_last_error());
}

Test(dp, invalid_configs_are_named)
{
    data_t d;
    s_make_data(&d);
    dpt_lr_t m;
    s_model(&m, &d, 1, D);
    troupe_dp_config_t good = {
        .backend = "sync", .streams = 1, .optimizer = dpt_opt(TROUPE_OPT_ADAMW)};
    troupe_dp_config_t cfg;
    troupe_dp_model_t mm;

    s_expect_invalid(NULL, &m.model, TROUPE_INVALID_ARGUMENT, "NULL config");
    s_expect_invalid(&good, NULL, TROUPE_INVALID_ARGUMENT, "NULL model");
    mm = m.model;
    mm.n_params = 0;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "n_params is 0");
    mm = m.model;
    mm.batch_index = "nope";
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "batch_index 'nope'");
    mm = m.model;
    mm.num_batches = 0;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "num_batches");
    mm = m.model;
    mm.num_batches = NB + 1;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "exceeds the range");
    troupe_tnode_t *swapped[2] = {m.gb, m.gW};
    mm = m.model;
    mm.grads = swapped;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "has dims 2 but params[0]");
    troupe_tnode_t *dbl = NULL;
    const char *l[1] = {"W_grad64"};
    OK(troupe_tnode_new(l, 1, TROUPE_PREC_DOUBLE, 2, (int64_t[]){D, O}, NULL, 0.0, &dbl));
    troupe_tnode_t *prec_grads[2] = {dbl, m.gb};
    mm = m.model;
    mm.grads = prec_grads;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "precision double");
    troupe_tnode_release(&dbl);
    troupe_tnode_t *dup[2] = {m.W, m.W};
    mm = m.model;
    mm.params = dup;
    s_expect_invalid(&good, &mm, TROUPE_INVALID_ARGUMENT, "share a node");

    cfg = good;
    cfg.optimizer.lr = 0;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "learning rate lr = 0");
    cfg = good;
    cfg.optimizer.beta1 = 1.0;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "beta1 = 1");
    cfg = good;
    cfg.optimizer.beta2 = -0.5;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "beta2 = -0.5");
    cfg = good;
    cfg.optimizer.eps = 0;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "eps = 0");
    cfg = good;
    cfg.optimizer.weight_decay = -1;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "weight_decay = -1");
    cfg = good;
    cfg.optimizer = troupe_optimizer_default(TROUPE_OPT_SGD);
    cfg.optimizer.momentum = 1.0;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "momentum = 1");
    cfg = good;
    cfg.optimizer.kind = (troupe_optimizer_kind_t)7;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "optimizer kind 7");
    cfg = good;
    cfg.backend = "abacus";
    s_expect_invalid(&cfg, &m.model, TROUPE_NOT_FOUND, "abacus");
    /* the devices a config names (the sync backend has one device: ordinal 0) */
    int devs[2] = {0, 0};
    cfg = good;
    cfg.n_devices = 1;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "n_devices = 1 with devices NULL");
    cfg.devices = devs;
    cfg.n_devices = -1;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "n_devices = -1");
    cfg.n_devices = TROUPE_DP_MAX_DEVICES + 1;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT, "expected 0 to");
    cfg.n_devices = 2;
    s_expect_invalid(&cfg, &m.model, TROUPE_INVALID_ARGUMENT,
                     "device 0 is listed twice (devices[0] and devices[1])");
    devs[1] = 3;
    s_expect_invalid(&cfg, &m.model, TROUPE_NOT_FOUND,
                     "devices[1] = 3: backend sync has no device 3 (it has 1)");

    troupe_optimizer_kind_t k;
    OK(troupe_optimizer_parse("adamw", &k));
    cr_assert_eq(k, TROUPE_OPT_ADAMW);
    OK(troupe_optimizer_parse("sgd", &k));
    cr_assert_eq(k, TROUPE_OPT_SGD);
    cr_assert_eq(troupe_optimizer_parse("lion", &k), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "lion") && strstr(troupe_last_error(), "sgd, adamw"));

    /* set_lr and the loss before any step */
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&good, &m.model, &dp));
    cr_assert_eq(troupe_dp_set_lr(dp, 0.0), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_dp_set_lr(dp, -1.0), TROUPE_INVALID_ARGUMENT);
    OK(troupe_dp_set_lr(dp, 0.5));
    double loss;
    cr_assert_eq(troupe_dp_last_loss(dp, &loss), TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "no step"));
    cr_assert_not_null(troupe_dp_owner_context(dp));
    cr_assert_not_null(troupe_dp_backend(dp));
    troupe_dp_destroy(&dp);
    troupe_dp_destroy(&dp); /* NULL-safe */
    dpt_lr_destroy(&m);
}

Test(dp, set_lr_changes_later_steps)
{
    /* SGD without momentum or decay: after one step at lr and one at lr/2, the reference with
     * the same schedule matches. */
    data_t d;
    s_make_data(&d);
    dpt_lr_t m;
    s_model(&m, &d, 1, D);
    troupe_optimizer_t opt = dpt_opt(TROUPE_OPT_SGD);
    opt.momentum = 0;
    troupe_dp_config_t cfg = {.backend = "sync", .streams = 1, .optimizer = opt};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_set_lr(dp, opt.lr / 2));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_params_to_host(dp));
    float got[NP];
    dpt_lr_params(&m, got);
    ref_t r;
    s_ref_init(&r);
    s_ref_step(&r, &d, 0, 1, &opt);
    opt.lr /= 2;
    s_ref_step(&r, &d, 1, 2, &opt);
    s_close(got, r.w, NP, 1e-5, "set_lr");
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

Test(dp, params_from_host_uploads_to_every_stream)
{
    /* Two streams train two steps, then the parameters are reset on the host: both replicas
     * must train from the new values (SGD without momentum keeps no state, so the reference
     * simply starts from them on the next full batches). */
    data_t d;
    s_make_data(&d);
    dpt_lr_t m;
    s_model(&m, &d, 2, D);
    troupe_optimizer_t opt = dpt_opt(TROUPE_OPT_SGD);
    opt.momentum = 0;
    troupe_dp_config_t cfg = {.backend = "cpu", .streams = 2, .optimizer = opt};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_sync(dp));
    double wv[D * O], bv[O] = {0.5, -0.5};
    ref_t r;
    s_ref_init(&r);
    for (int i = 0; i < D * O; i++) {
        wv[i] = 0.125 * i;
        r.w[i] = (float)wv[i];
    }
    r.w[D * O] = 0.5f;
    r.w[D * O + 1] = -0.5f;
    OK(troupe_tnode_set_values(m.W, wv, D * O));
    OK(troupe_tnode_set_values(m.b, bv, O));
    OK(troupe_dp_params_from_host(dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_step(dp));
    OK(troupe_dp_params_to_host(dp));
    float got[NP];
    dpt_lr_params(&m, got);
    s_ref_step(&r, &d, 2, 3, &opt);
    s_ref_step(&r, &d, 3, 4, &opt);
    s_close(got, r.w, NP, 1e-5, "params_from_host");
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}
