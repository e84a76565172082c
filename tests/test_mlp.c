/* fmnist MLP (examples/fmnist/mlp.h) on one context: the backward pass against central finite
 * differences of the loss on a tiny double-precision instance, gradients overwritten (not
 * accumulated) by every run, one SGD step lowering the loss, the initialisation's ranges, and
 * the evaluation forward pass against a host reference. Run on the "sync" and "cpu" drivers,
 * and "cuda" when a device is present. */
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
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-mlp", 60);
}

TestSuite(mlp, .init = s_setup);

/* Deterministic pseudo-random values in [-1, 1). */
static double s_rand(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* A tiny instance: 7-6-5-4, B rows, nb minibatches, random inputs and labels. */
static fmnist_mlp_t *s_tiny_as(troupe_prec_t prec, int64_t B, int64_t nb, uint64_t seed,
                               bool hand)
{
    fmnist_mlp_config_t cfg = fmnist_mlp_config_default(B, nb);
    cfg.hand_grad = hand;
    cfg.in = 7;
    cfg.hidden1 = 6;
    cfg.hidden2 = 5;
    cfg.out = 4;
    cfg.prec = prec;
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
        labels[r] = (uint8_t)((s_rand(&st) + 1.0) * 2.0) % 4;
    OK(fmnist_mlp_set_train(m, x, labels));
    free(x);
    free(labels);
    return m;
}

static fmnist_mlp_t *s_tiny(troupe_prec_t prec, int64_t B, int64_t nb, uint64_t seed)
{
    return s_tiny_as(prec, B, nb, seed, false);
}

typedef struct env {
    rtu_env_t rt; /* one stream; its context holds the params */
    troupe_code_t *grad_code;
    troupe_routine_t *grad;
} env_t;

static void s_env(env_t *e, const char *driver, fmnist_mlp_t *m)
{
    memset(e, 0, sizeof *e);
    rtu_env_open(&e->rt, driver, 1);
    for (int i = 0; i < FMNIST_MLP_NPARAMS; i++)
        rtu_init(&e->rt.ctx[0], m->params[i]);
    OK(troupe_compile(e->rt.b, m->grad_comp, "fmnist_test_grad", &e->grad_code));
    OK(troupe_link(e->rt.ctx[0], e->grad_code, &e->grad));
}

static void s_env_done(env_t *e)
{
    troupe_routine_release(&e->grad);
    troupe_code_release(&e->grad_code);
    rtu_env_close(&e->rt);
}

static void s_run(troupe_routine_t *r)
{
    troupe_event_t *ev = NULL;
    OK(troupe_routine_run(r, &ev));
    OK(troupe_event_sync(ev, TIMEOUT_NS));
    troupe_event_release(&ev);
}

static double s_loss(env_t *e, fmnist_mlp_t *m)
{
    s_run(e->grad);
    double l = 0;
    OK(troupe_tnode_get_values(m->loss, &l, 1));
    return l;
}

Test(mlp, backward_matches_finite_differences)
{
    FOR_EACH_DRIVER(drv)
    {
        fmnist_mlp_t *m = s_tiny(TROUPE_PREC_DOUBLE, 5, 3, 11);
        for (int i = 0; i < FMNIST_MLP_NPARAMS; i++)
            rtu_set_hosted(m->grads[i], 999); /* so the test can read them */
        env_t e;
        s_env(&e, *drv, m);
        OK(troupe_routine_set_index(e.grad, FMNIST_BATCH_SYMBOL, 1));
        double l0 = s_loss(&e, m);
        cr_assert(isfinite(l0) && l0 > 0, "%s: loss %g", *drv, l0);
        const double eps = 1e-6;
        int checked = 0;
        for (int p = 0; p < FMNIST_MLP_NPARAMS; p++) {
            troupe_tnode_t *pn = m->params[p];
            size_t n = (size_t)troupe_tnode_num_elems(pn);
            double *g = malloc(n * sizeof *g), *v = malloc(n * sizeof *v);
            OK(troupe_tnode_get_values(m->grads[p], g, n));
            OK(troupe_tnode_get_values(pn, v, n));
            double gmax = 0;
            for (size_t k = 0; k < n; k++)
                gmax = fmax(gmax, fabs(g[k]));
            cr_assert_gt(gmax, 1e-3, "%s: the loss depends on %s", *drv, fmnist_mlp_param_name(p));
            for (size_t k = 0; k < n; k++) {
                double keep = v[k];
                v[k] = keep + eps;
                OK(troupe_tnode_set_values(pn, v, n));
                double lp = s_loss(&e, m);
                v[k] = keep - eps;
                OK(troupe_tnode_set_values(pn, v, n));
                double lm = s_loss(&e, m);
                v[k] = keep;
                double fd = (lp - lm) / (2 * eps);
                cr_assert(fabs(fd - g[k]) <= 1e-6 + 1e-4 * fabs(fd),
                          "%s: d loss / d %s[%zu]: backward %.10g, finite difference %.10g", *drv,
                          fmnist_mlp_param_name(p), k, g[k], fd);
                checked++;
            }
            OK(troupe_tnode_set_values(pn, v, n));
            free(g);
            free(v);
        }
        cr_assert_eq(checked, 7 * 6 + 6 + 6 * 5 + 5 + 5 * 4 + 4);
        s_env_done(&e);
        fmnist_mlp_destroy(&m);
    }
}

/* The gradient derived from the forward pass (nn/grad.h) against the hand-written backward it
 * replaced: the forward passes are the same assignments, so the loss is bit for bit the same;
 * the backward passes round differently (the derived one goes through log-sum-exp's chain
 * rule: (1/B)/s * e - y/B instead of (e/s - y)/B), so the gradients agree within float
 * rounding. */
Test(mlp, derived_gradient_matches_the_hand_written_one)
{
    FOR_EACH_DRIVER(drv)
    {
        fmnist_mlp_t *md = s_tiny_as(TROUPE_PREC_SINGLE, 6, 2, 21, false);
        fmnist_mlp_t *mh = s_tiny_as(TROUPE_PREC_SINGLE, 6, 2, 21, true);
        for (int i = 0; i < FMNIST_MLP_NPARAMS; i++) {
            rtu_set_hosted(md->grads[i], 999);
            rtu_set_hosted(mh->grads[i], 999);
        }
        env_t ed, eh;
        s_env(&ed, *drv, md);
        s_env(&eh, *drv, mh);
        OK(troupe_routine_set_index(ed.grad, FMNIST_BATCH_SYMBOL, 1));
        OK(troupe_routine_set_index(eh.grad, FMNIST_BATCH_SYMBOL, 1));
        double ld = s_loss(&ed, md), lh = s_loss(&eh, mh);
        cr_assert_eq(ld, lh, "%s: loss %.9g (derived) vs %.9g (hand-written)", *drv, ld, lh);
        double worst = 0;
        for (int p = 0; p < FMNIST_MLP_NPARAMS; p++) {
            size_t n = (size_t)troupe_tnode_num_elems(md->params[p]);
            double *gd = malloc(n * sizeof *gd), *gh = malloc(n * sizeof *gh);
            OK(troupe_tnode_get_values(md->grads[p], gd, n));
            OK(troupe_tnode_get_values(mh->grads[p], gh, n));
            double gmax = 0;
            for (size_t k = 0; k < n; k++)
                gmax = fmax(gmax, fabs(gh[k]));
            cr_assert_gt(gmax, 0);
            for (size_t k = 0; k < n; k++) {
                double rel = fabs(gd[k] - gh[k]) / gmax;
                worst = fmax(worst, rel);
                cr_assert_leq(rel, 1e-5, "%s: %s_grad[%zu]: derived %.9g, hand-written %.9g",
                              *drv, fmnist_mlp_param_name(p), k, gd[k], gh[k]);
            }
            free(gd);
            free(gh);
        }
        cr_log_info("%s: derived vs hand-written gradients: largest difference %.3g of the "
                    "largest gradient", *drv, worst);
        s_env_done(&ed);
        s_env_done(&eh);
        fmnist_mlp_destroy(&md);
        fmnist_mlp_destroy(&mh);
    }
}

Test(mlp, gradients_are_overwritten_not_accumulated)
{
    FOR_EACH_DRIVER(drv)
    {
        fmnist_mlp_t *m = s_tiny(TROUPE_PREC_SINGLE, 4, 2, 5);
        rtu_set_hosted(m->grads[0], 999);
        rtu_set_hosted(m->grads[5], 999);
        env_t e;
        s_env(&e, *drv, m);
        double a[7 * 6], b[7 * 6], c3[4], d3[4];
        s_run(e.grad);
        OK(troupe_tnode_get_values(m->grads[0], a, 42));
        OK(troupe_tnode_get_values(m->grads[5], c3, 4));
        s_run(e.grad);
        OK(troupe_tnode_get_values(m->grads[0], b, 42));
        OK(troupe_tnode_get_values(m->grads[5], d3, 4));
        bool nonzero = false;
        for (int i = 0; i < 42; i++) {
            cr_assert_eq(a[i], b[i], "%s: w1_grad[%d] %g then %g", *drv, i, a[i], b[i]);
            nonzero |= a[i] != 0;
        }
        for (int i = 0; i < 4; i++)
            cr_assert_eq(c3[i], d3[i], "%s: b3_grad[%d]", *drv, i);
        cr_assert(nonzero);
        /* the output bias gradient of the mean loss sums to 0 over the classes */
        cr_assert(fabs(c3[0] + c3[1] + c3[2] + c3[3]) < 1e-6);
        s_env_done(&e);
        fmnist_mlp_destroy(&m);
    }
}

Test(mlp, one_sgd_step_lowers_the_loss)
{
    FOR_EACH_DRIVER(drv)
    {
        fmnist_mlp_t *m = s_tiny(TROUPE_PREC_SINGLE, 16, 2, 3);
        env_t e;
        s_env(&e, *drv, m);
        troupe_asgn_comp_t *sgd = NULL;
        troupe_code_t *code = NULL;
        troupe_routine_t *step = NULL;
        OK(fmnist_mlp_sgd_comp(m, 0.1, &sgd));
        OK(troupe_compile(e.rt.b, sgd, "fmnist_test_sgd", &code));
        OK(troupe_link(troupe_routine_context(e.grad), code, &step));
        double w_before = 0, w_after = 0;
        OK(troupe_tnode_get_value(m->params[0], (int64_t[]){0, 0}, &w_before));
        double l0 = s_loss(&e, m);
        s_run(step);
        double l1 = s_loss(&e, m);
        cr_assert_lt(l1, l0, "%s: loss %g after one step, %g before", *drv, l1, l0);
        /* and keeps going down over a few more */
        for (int i = 0; i < 5; i++)
            s_run(step), (void)s_loss(&e, m);
        double l6 = s_loss(&e, m);
        cr_assert_lt(l6, l1, "%s: loss %g after six steps, %g after one", *drv, l6, l1);
        OK(troupe_tnode_get_value(m->params[0], (int64_t[]){0, 0}, &w_after));
        cr_assert_neq(w_before, w_after, "the step updated w1");
        troupe_routine_release(&step);
        troupe_code_release(&code);
        troupe_asgn_comp_destroy(&sgd);
        s_env_done(&e);
        fmnist_mlp_destroy(&m);
    }
}

Test(mlp, initialisation_is_seeded_he_and_xavier)
{
    fmnist_mlp_config_t cfg = fmnist_mlp_config_default(2, 1);
    fmnist_mlp_t *a = NULL, *b = NULL;
    OK(fmnist_mlp_new(&cfg, &a));
    OK(fmnist_mlp_new(&cfg, &b));
    OK(fmnist_mlp_init_params(a, 1234));
    OK(fmnist_mlp_init_params(b, 1234));
    const double limit[3] = {sqrt(6.0 / 784), sqrt(6.0 / 256), sqrt(6.0 / (128 + 10))};
    for (int l = 0; l < 3; l++) {
        troupe_tnode_t *w = a->params[2 * l];
        size_t n = (size_t)troupe_tnode_num_elems(w);
        double *va = malloc(n * sizeof *va), *vb = malloc(n * sizeof *vb);
        OK(troupe_tnode_get_values(w, va, n));
        OK(troupe_tnode_get_values(b->params[2 * l], vb, n));
        double sum = 0, sq = 0, mx = 0;
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(va[i], vb[i], "same seed, same value");
            sum += va[i];
            sq += va[i] * va[i];
            mx = fmax(mx, fabs(va[i]));
        }
        cr_assert_leq(mx, limit[l], "%s within U(-a, a)", fmnist_mlp_param_name(2 * l));
        cr_assert_gt(mx, 0.9 * limit[l], "%s fills its range", fmnist_mlp_param_name(2 * l));
        double var = sq / (double)n, want = limit[l] * limit[l] / 3;
        cr_assert(fabs(var - want) < 0.1 * want, "%s variance %g, want %g",
                  fmnist_mlp_param_name(2 * l), var, want);
        cr_assert(fabs(sum / (double)n) < 0.05 * limit[l], "%s mean %g",
                  fmnist_mlp_param_name(2 * l), sum / (double)n);
        size_t nb = (size_t)troupe_tnode_num_elems(a->params[2 * l + 1]);
        double bias[256];
        OK(troupe_tnode_get_values(a->params[2 * l + 1], bias, nb));
        for (size_t i = 0; i < nb; i++)
            cr_assert_eq(bias[i], 0.0);
        free(va);
        free(vb);
    }
    OK(fmnist_mlp_init_params(b, 1235));
    double x = 0, y = 0;
    OK(troupe_tnode_get_value(a->params[0], (int64_t[]){3, 5}, &x));
    OK(troupe_tnode_get_value(b->params[0], (int64_t[]){3, 5}, &y));
    cr_assert_neq(x, y, "another seed, other values");
    fmnist_mlp_destroy(&a);
    fmnist_mlp_destroy(&b);
}

/* Host reference of the forward pass in double. */
static void s_reference_logits(fmnist_mlp_t *m, const double *x, int64_t n, double *out)
{
    const fmnist_mlp_config_t *c = &m->cfg;
    const int64_t sz[4] = {c->in, c->hidden1, c->hidden2, c->out};
    double *w[6];
    for (int i = 0; i < 6; i++) {
        size_t k = (size_t)troupe_tnode_num_elems(m->params[i]);
        w[i] = malloc(k * sizeof(double));
        OK(troupe_tnode_get_values(m->params[i], w[i], k));
    }
    double in[16], h[16];
    for (int64_t r = 0; r < n; r++) {
        memcpy(in, x + r * c->in, (size_t)c->in * sizeof(double));
        for (int l = 0; l < 3; l++) {
            for (int64_t j = 0; j < sz[l + 1]; j++) {
                double acc = w[2 * l + 1][j];
                for (int64_t i = 0; i < sz[l]; i++)
                    acc += in[i] * w[2 * l][i * sz[l + 1] + j];
                h[j] = l < 2 ? fmax(acc, 0.0) : acc;
            }
            memcpy(in, h, (size_t)sz[l + 1] * sizeof(double));
        }
        memcpy(out + r * c->out, in, (size_t)c->out * sizeof(double));
    }
    for (int i = 0; i < 6; i++)
        free(w[i]);
}

Test(mlp, evaluation_forward_matches_host_reference)
{
    FOR_EACH_DRIVER(drv)
    {
        fmnist_mlp_t *m = s_tiny(TROUPE_PREC_DOUBLE, 4, 1, 21);
        env_t e;
        s_env(&e, *drv, m);
        enum { N = 9 };
        fmnist_mlp_eval_t *ev = NULL;
        OK(fmnist_mlp_eval_new(m, N, &ev));
        double x[N * 7];
        uint64_t st = 99;
        for (int i = 0; i < N * 7; i++)
            x[i] = 0.5 * (s_rand(&st) + 1.0);
        OK(troupe_tnode_set_values(ev->x, x, N * 7));
        troupe_code_t *code = NULL;
        troupe_routine_t *r = NULL;
        OK(troupe_compile(e.rt.b, ev->comp, "fmnist_test_eval", &code));
        OK(troupe_link(e.rt.ctx[0], code, &r));
        s_run(r);
        double got[N * 4], want[N * 4];
        OK(troupe_tnode_get_values(ev->logits, got, N * 4));
        s_reference_logits(m, x, N, want);
        uint8_t labels[N];
        for (int i = 0; i < N; i++) {
            int best = 0;
            for (int k = 0; k < 4; k++) {
                cr_assert(fabs(got[i * 4 + k] - want[i * 4 + k]) < 1e-12,
                          "%s: logit [%d,%d] %.17g, reference %.17g", *drv, i, k, got[i * 4 + k],
                          want[i * 4 + k]);
                if (want[i * 4 + k] > want[i * 4 + best])
                    best = k;
            }
            labels[i] = (uint8_t)(i < 6 ? best : (best + 1) % 4); /* 6 of 9 right */
        }
        double acc = 0;
        OK(fmnist_mlp_eval_accuracy(ev, labels, &acc));
        cr_assert(fabs(acc - 6.0 / 9.0) < 1e-12, "accuracy %g", acc);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        fmnist_mlp_eval_destroy(&ev);
        s_env_done(&e);
        fmnist_mlp_destroy(&m);
    }
}
