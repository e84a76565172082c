/* fmnist convnet (examples/fmnist/mlp.h, FMNIST_MODEL_CNN) on one context: the derived
 * backward pass against central finite differences of the loss on a tiny double-precision
 * instance (12x12 images, 2-2-3 channels), the chunked evaluation against a one-chunk one,
 * and a conv that does not fit its input refused at build time naming the layer and the
 * shapes. Run on the "sync" and "cpu" drivers, and "cuda" when a device is present. */
#include "examples/fmnist/mlp.h"

#include "actors/troupe.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_NS (60LL * 1000000000LL)

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-cnn", 60);
}

TestSuite(cnn, .init = s_setup);

static double s_rand(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* side x side images (12: 10, 8, pool 4, 2, pool 1), channels 2-2-3, fc 4, 3 classes. */
static fmnist_mlp_config_t s_tiny_cfg(int64_t side, int64_t B, int64_t nb)
{
    fmnist_mlp_config_t cfg = fmnist_cnn_config_default(B, nb);
    cfg.side = side;
    cfg.in = side * side;
    cfg.conv[0] = 2;
    cfg.conv[1] = 2;
    cfg.conv[2] = 3;
    cfg.hidden1 = 4;
    cfg.out = 3;
    cfg.prec = TROUPE_PREC_DOUBLE;
    return cfg;
}

static fmnist_mlp_t *s_tiny_low(int64_t B, int64_t nb, uint64_t seed, int64_t c1,
                                troupe_nn_conv2d_lowering_t low)
{
    fmnist_mlp_config_t cfg = s_tiny_cfg(12, B, nb);
    cfg.conv[0] = c1;
    cfg.conv_lowering = low;
    fmnist_mlp_t *m = NULL;
    OK(fmnist_mlp_new(&cfg, &m));
    OK(fmnist_mlp_init_params(m, seed));
    size_t rows = (size_t)(B * nb);
    double *x = malloc(rows * (size_t)cfg.in * sizeof *x);
    uint8_t *labels = malloc(rows);
    uint64_t st = seed * 977 + 1;
    for (size_t i = 0; i < rows * (size_t)cfg.in; i++)
        x[i] = s_rand(&st); /* centred, so every ReLU sees both signs */
    for (size_t r = 0; r < rows; r++)
        labels[r] = (uint8_t)((s_rand(&st) + 1.0) * 1.5) % 3;
    OK(fmnist_mlp_set_train(m, x, labels));
    free(x);
    free(labels);
    return m;
}

static fmnist_mlp_t *s_tiny(int64_t B, int64_t nb, uint64_t seed)
{
    return s_tiny_low(B, nb, seed, 2, TROUPE_NN_CONV2D_AUTO);
}

static void s_run(troupe_routine_t *r)
{
    troupe_event_t *ev = NULL;
    OK(troupe_routine_run(r, &ev));
    OK(troupe_event_sync(ev, TIMEOUT_NS));
    troupe_event_release(&ev);
}

static double s_loss(troupe_routine_t *grad, fmnist_mlp_t *m)
{
    s_run(grad);
    double l = 0;
    OK(troupe_tnode_get_values(m->loss, &l, 1));
    return l;
}

static bool s_has_label(const troupe_asgn_comp_t *comp, const char *label)
{
    for (size_t i = 0; i < comp->nnodes; i++)
        for (size_t l = 0; l < comp->nodes[i]->label_count; l++)
            if (strcmp(comp->nodes[i]->label[l], label) == 0)
                return true;
    return false;
}

/* A convnet's gradient routine compiled and linked on driver drv, its gradients hosted so that
 * the test can read them. */
typedef struct s_grad_env {
    rtu_env_t rt;
    troupe_code_t *code;
    troupe_routine_t *grad;
} s_grad_env_t;

static void s_grad_open(s_grad_env_t *e, fmnist_mlp_t *m, const char *drv)
{
    for (int i = 0; i < m->nparams; i++)
        rtu_set_hosted(m->grads[i], 999);
    rtu_env_open(&e->rt, drv, 1);
    for (int i = 0; i < m->nparams; i++)
        rtu_init(&e->rt.ctx[0], m->params[i]);
    e->code = NULL;
    e->grad = NULL;
    OK(troupe_compile(e->rt.b, m->grad_comp, "fmnist_test_cnn_grad", &e->code));
    OK(troupe_link(e->rt.ctx[0], e->code, &e->grad));
    OK(troupe_routine_set_index(e->grad, FMNIST_BATCH_SYMBOL, 1));
}

static void s_grad_close(s_grad_env_t *e)
{
    troupe_routine_release(&e->grad);
    troupe_code_release(&e->code);
    rtu_env_close(&e->rt);
}

/* Every parameter's gradient against central differences, through each of `drivers`, on the
 * tiny convnet with c1 channels after conv1 (its parameter count `total`). */
static void s_check_backward(const char *const *drivers, int64_t c1, size_t want_total)
{
    for (const char *const *drv = drivers; *drv; drv++) {
        fmnist_mlp_t *m = s_tiny_low(2, 2, 11, c1, TROUPE_NN_CONV2D_AUTO);
        cr_assert_eq(m->nparams, FMNIST_CNN_NPARAMS);
        /* with 8 channels conv2 (8 x 8 out, 2 samples) takes Winograd F(4x4), and conv1 hands it
         * a1 channels last: no transposing copy between them */
        cr_assert_eq(s_has_label(m->grad_comp, "conv2d_wino_v"), c1 >= 8, "%s: conv2's lowering",
                     *drv);
        cr_assert(!s_has_label(m->grad_comp, "conv2d_wino_xc"), "%s: a copy of a1", *drv);
        s_grad_env_t e;
        s_grad_open(&e, m, *drv);
        troupe_routine_t *grad = e.grad;
        double l0 = s_loss(grad, m);
        cr_assert(isfinite(l0) && l0 > 0, "%s: loss %g", *drv, l0);
        const double eps = 1e-6;
        size_t checked = 0, total = 0;
        for (int p = 0; p < m->nparams; p++) {
            troupe_tnode_t *pn = m->params[p];
            size_t n = (size_t)troupe_tnode_num_elems(pn);
            total += n;
            double *g = malloc(n * sizeof *g), *v = malloc(n * sizeof *v);
            OK(troupe_tnode_get_values(m->grads[p], g, n));
            OK(troupe_tnode_get_values(pn, v, n));
            double gmax = 0;
            for (size_t k = 0; k < n; k++)
                gmax = fmax(gmax, fabs(g[k]));
            cr_assert_gt(gmax, 1e-4, "%s: the loss depends on %s", *drv,
                         fmnist_mlp_param_label(m, p));
            for (size_t k = 0; k < n; k++) {
                double keep = v[k];
                v[k] = keep + eps;
                OK(troupe_tnode_set_values(pn, v, n));
                double lp = s_loss(grad, m);
                v[k] = keep - eps;
                OK(troupe_tnode_set_values(pn, v, n));
                double lm = s_loss(grad, m);
                v[k] = keep;
                double fd = (lp - lm) / (2 * eps);
                cr_assert(fabs(fd - g[k]) <= 1e-6 + 1e-4 * fabs(fd),
                          "%s: d loss / d %s[%zu]: backward %.10g, finite difference %.10g", *drv,
                          fmnist_mlp_param_label(m, p), k, g[k], fd);
                checked++;
            }
            OK(troupe_tnode_set_values(pn, v, n));
            free(g);
            free(v);
        }
        cr_assert_eq(total, want_total);
        cr_assert_eq(checked, total);
        s_grad_close(&e);
        fmnist_mlp_destroy(&m);
    }
}

Test(cnn, backward_matches_finite_differences)
{
    /* conv 2*1*9+2, 2*2*9+2, 3*2*9+3; fc1 3*1*1*4+4; fc2 4*3+3 */
    s_check_backward(rtu_drivers(), 2, 20 + 38 + 57 + 16 + 15);
}

/* The micro-step form: conv1 writes channels last for conv2's Winograd F(4x4) (nn/conv.h). One
 * driver, at -O1: gcc -O3 takes 70 s over this routine (most of it walking aliases), -O1 5 s;
 * nn_conv's drivers test runs F(4x4)'s channels-last input through each driver at the default
 * flags. (Criterion runs each test in a process of its own: the flags stay here.) */
Test(cnn, backward_matches_finite_differences_channels_last)
{
    static const char *const cpu[] = {"cpu", NULL};
    OK(troupe_config_set_cc_flags("-O1 -march=native -fno-math-errno -shared -fPIC"));
    /* conv 8*1*9+8, 2*8*9+2, 3*2*9+3; fc1 16; fc2 15 */
    s_check_backward(cpu, 8, 80 + 146 + 57 + 16 + 15);
}

/* The loss and every gradient, concatenated into g (n values), of one run of the tiny convnet
 * with 8 channels after conv1 and the convolutions lowered by `low`, on the cpu driver. */
static double s_loss_grads(troupe_nn_conv2d_lowering_t low, double *g, size_t n)
{
    fmnist_mlp_t *m = s_tiny_low(2, 2, 11, 8, low);
    s_grad_env_t e;
    s_grad_open(&e, m, "cpu");
    double l = s_loss(e.grad, m);
    size_t at = 0;
    for (int p = 0; p < m->nparams; p++) {
        size_t k = (size_t)troupe_tnode_num_elems(m->grads[p]);
        cr_assert_leq(at + k, n);
        OK(troupe_tnode_get_values(m->grads[p], g + at, k));
        at += k;
    }
    cr_assert_eq(at, n);
    s_grad_close(&e);
    fmnist_mlp_destroy(&m);
    return l;
}

/* The channels-last form computes the same model: its loss and gradients equal those of the
 * NCHW form (every convolution forced to im2col) within double rounding. */
Test(cnn, channels_last_equals_channels_first)
{
    OK(troupe_config_set_cc_flags("-O1 -march=native -fno-math-errno -shared -fPIC"));
    enum { N = 80 + 146 + 57 + 16 + 15 };
    static double gl[N], gf[N];
    double ll = s_loss_grads(TROUPE_NN_CONV2D_AUTO, gl, N);
    double lf = s_loss_grads(TROUPE_NN_CONV2D_IM2COL, gf, N);
    cr_assert(fabs(ll - lf) <= 1e-12 * fabs(lf), "loss %.17g, NCHW %.17g", ll, lf);
    for (int k = 0; k < N; k++)
        cr_assert(fabs(gl[k] - gf[k]) <= 1e-10 * (1 + fabs(gf[k])),
                  "gradient [%d] %.17g, NCHW %.17g", k, gl[k], gf[k]);
}

/* The evaluation in chunks of 2 images (3 runs, the last padded) gives the logits and the
 * accuracy of the same images taken in one run. */
Test(cnn, chunked_evaluation_matches_one_chunk)
{
    FOR_EACH_DRIVER(drv)
    {
        enum { N = 5, K = 3, PIX = 144 };
        fmnist_mlp_t *m = s_tiny(2, 1, 21);
        rtu_env_t rt;
        rtu_env_open(&rt, *drv, 1);
        for (int i = 0; i < m->nparams; i++)
            rtu_init(&rt.ctx[0], m->params[i]);
        fmnist_mlp_eval_t *one = NULL, *chunked = NULL;
        OK(fmnist_mlp_eval_new(m, N, &one));
        m->cfg.eval_chunk = 2;
        OK(fmnist_mlp_eval_new(m, N, &chunked));
        cr_assert_eq(one->nchunks, 1);
        cr_assert_eq(chunked->nchunks, 3);
        cr_assert_eq(chunked->chunk, 2);
        double x[3 * 2 * PIX] = {0};
        uint64_t st = 7;
        for (int i = 0; i < N * PIX; i++)
            x[i] = 0.5 * (s_rand(&st) + 1.0);
        OK(troupe_tnode_set_values(one->x, x, N * PIX));
        OK(troupe_tnode_set_values(chunked->x, x, 3 * 2 * PIX));
        troupe_code_t *c1 = NULL, *c2 = NULL;
        troupe_routine_t *r1 = NULL, *r2 = NULL;
        OK(troupe_compile(rt.b, one->comp, "fmnist_test_cnn_eval1", &c1));
        OK(troupe_link(rt.ctx[0], c1, &r1));
        OK(troupe_compile(rt.b, chunked->comp, "fmnist_test_cnn_evalk", &c2));
        OK(troupe_link(rt.ctx[0], c2, &r2));
        s_run(r1);
        double want[N * K];
        OK(troupe_tnode_get_values(one->logits, want, N * K));
        uint8_t labels[N];
        for (int i = 0; i < N; i++) {
            int best = 0;
            for (int k = 1; k < K; k++)
                if (want[i * K + k] > want[i * K + best])
                    best = k;
            labels[i] = (uint8_t)(i == 1 || i == 4 ? (best + 1) % K : best); /* 3 of 5 right */
        }
        double acc1 = 0, acck = 0;
        OK(fmnist_mlp_eval_accuracy(one, labels, &acc1));
        cr_assert(fabs(acc1 - 0.6) < 1e-12, "%s: one chunk: accuracy %g", *drv, acc1);
        cr_assert_eq(fmnist_mlp_eval_accuracy(chunked, labels, &acck), TROUPE_FAILED_PRECONDITION);
        OK(fmnist_mlp_eval_run(chunked, r2, labels, &acck));
        cr_assert(fabs(acck - 0.6) < 1e-12, "%s: chunks: accuracy %g", *drv, acck);
        /* the last run was chunk 2: image 4 in row 0 */
        double got[2 * K];
        OK(troupe_tnode_get_values(chunked->logits, got, 2 * K));
        for (int k = 0; k < K; k++)
            cr_assert(fabs(got[k] - want[4 * K + k]) < 1e-12,
                      "%s: logit [4,%d] %.17g, one run %.17g", *drv, k, got[k], want[4 * K + k]);
        troupe_routine_release(&r1);
        troupe_routine_release(&r2);
        troupe_code_release(&c1);
        troupe_code_release(&c2);
        fmnist_mlp_eval_destroy(&one);
        fmnist_mlp_eval_destroy(&chunked);
        rtu_env_close(&rt);
        fmnist_mlp_destroy(&m);
    }
}

/* 8x8 images: conv1 6, conv2 4, pool1 2, then conv3's 3x3 kernel does not fit. */
Test(cnn, a_conv_that_does_not_fit_is_refused_naming_the_layer)
{
    fmnist_mlp_config_t cfg = s_tiny_cfg(8, 2, 1);
    fmnist_mlp_t *m = NULL;
    cr_assert_eq(fmnist_mlp_new(&cfg, &m), TROUPE_INVALID_ARGUMENT);
    cr_assert_null(m);
    const char *e = troupe_last_error();
    cr_assert(strstr(e, "cnn layer conv3: input (2, 2, 2, 2), weight (3, 2, 3, 3)") != NULL, "%s",
              e);
    cr_assert(strstr(e, "kernel") != NULL, "%s", e);
    /* 10x10: conv3 gives 1x1, which pool2's 2x2 window does not fit */
    cfg = s_tiny_cfg(10, 2, 1);
    cr_assert_eq(fmnist_mlp_new(&cfg, &m), TROUPE_INVALID_ARGUMENT);
    e = troupe_last_error();
    cr_assert(strstr(e, "cnn layer pool2: input (2, 3, 1, 1)") != NULL, "%s", e);
}
