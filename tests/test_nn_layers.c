/* Tests of the GPT-2 block layers of nn/ (norm.h, activation.h, attention.h, dropout.h,
 * init.h): each layer's forward values against an independent double-precision C reference
 * and its derived gradient against central finite differences, both through the reference
 * interpreter; the dropout stream, reproducibility and gradient mask; the initialisers'
 * stream and statistics; one composed GPT-2 block compiled and run on the "sync" and "cpu"
 * drivers with its gradients compared to the interpreter's. */
#define _POSIX_C_SOURCE 200809L
#include "base/log.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "ir/ops.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/norm.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_NS (60LL * 1000000000LL)

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-nn-layers", 60);
}

TestSuite(nn_layers, .init = s_setup);

/* ---- a model run by the interpreter --------------------------------------------------------- */

typedef struct m_model {
    troupe_asgn_comp_t *comp;
    troupe_nn_t *nn;
    troupe_tnode_t *loss, *r; /* r: the weights of m_finish's loss */
    troupe_ll_proc_t *proc;
    troupe_interp_buffer_t *bufs;
    size_t nbufs;
    uint64_t rng;
} m_model_t;

static double m_rnd(uint64_t *state, double lo, double hi)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(*state >> 11) * 0x1p-53;
}

static void m_init(m_model_t *m, troupe_prec_t prec, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->rng = seed;
    OK(troupe_asgn_comp_new(&m->comp));
    OK(troupe_nn_new(m->comp, prec, &m->nn));
}

static troupe_tnode_t *m_param(m_model_t *m, const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *p = NULL;
    OK(troupe_nn_param(m->nn, label, ndims, dims, &p));
    return p;
}

static troupe_tnode_t *m_node(m_model_t *m, const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *p = NULL;
    OK(troupe_nn_node(m->nn, label, ndims, dims, &p));
    return p;
}

/* loss = sum(y * r), r a random weight node: every cell of y matters. Then the backward. */
static void m_finish(m_model_t *m, troupe_tnode_t *y)
{
    troupe_tnode_t *r = m->r = m_node(m, "r", y->ndims, y->dims);
    OK(troupe_nn_node(m->nn, "loss", 0, NULL, &m->loss));
    char term[16] = {0}, spec[40];
    for (int a = 0; a < y->ndims; a++)
        term[a] = (char)('p' + a);
    snprintf(spec, sizeof spec, "%s,%s=>", term, term);
    OK(troupe_nn_bin(m->nn, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_MUL, y, r, spec));
    OK(troupe_nn_finish(m->nn, m->loss));
}

static void *m_data(m_model_t *m, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < m->nbufs; i++)
        if (m->bufs[i].tn == tn)
            return m->bufs[i].data;
    cr_assert_fail("no buffer for #%d", tn->id);
    return NULL;
}

static double m_get(m_model_t *m, const troupe_tnode_t *tn, int64_t i)
{
    void *d = m_data(m, tn);
    return tn->prec == TROUPE_PREC_DOUBLE ? ((double *)d)[i] : (double)((float *)d)[i];
}

static void m_set(m_model_t *m, const troupe_tnode_t *tn, int64_t i, double v)
{
    void *d = m_data(m, tn);
    if (tn->prec == TROUPE_PREC_DOUBLE)
        ((double *)d)[i] = v;
    else
        ((float *)d)[i] = (float)v;
}

/* Lowers; gives every node a buffer; fills the float nodes with uniform values in [lo, hi)
 * (the ones the pass writes are overwritten when it runs). */
static void m_build(m_model_t *m, double lo, double hi)
{
    OK(troupe_asgn_lower(m->comp, "nn_layers_test", &m->proc));
    m->nbufs = m->comp->nnodes;
    m->bufs = calloc(m->nbufs, sizeof *m->bufs);
    for (size_t i = 0; i < m->nbufs; i++) {
        troupe_tnode_t *tn = m->comp->nodes[i];
        m->bufs[i].tn = tn;
        m->bufs[i].data = calloc(1, tn->size_bytes);
        if (tn->prec == TROUPE_PREC_DOUBLE || tn->prec == TROUPE_PREC_SINGLE)
            for (int64_t k = 0; k < troupe_tnode_num_elems(tn); k++)
                m_set(m, tn, k, m_rnd(&m->rng, lo, hi));
    }
}

static double m_run(m_model_t *m)
{
    troupe_interp_args_t args = {m->bufs, m->nbufs, NULL, 0, NULL};
    OK(troupe_interp_run(m->proc, &args));
    return m_get(m, m->loss, 0);
}

static void m_free(m_model_t *m)
{
    troupe_ll_proc_destroy(&m->proc);
    for (size_t i = 0; i < m->nbufs; i++)
        free(m->bufs[i].data);
    free(m->bufs);
    troupe_nn_destroy(&m->nn);
    troupe_asgn_comp_destroy(&m->comp);
}

/* Every parameter's derived gradient against central differences (double precision):
 * |fd - g| / max(1, |fd|, |g|) <= tol. Returns how many cells were checked. */
static int m_check_grads(m_model_t *m, double tol)
{
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(m->nn, &params, &grads);
    int checked = 0;
    for (size_t p = 0; p < np; p++) {
        int64_t n = troupe_tnode_num_elems(params[p]);
        m_run(m);
        double *g = malloc((size_t)n * sizeof *g);
        double gmax = 0;
        for (int64_t k = 0; k < n; k++) {
            g[k] = m_get(m, grads[p], k);
            gmax = fmax(gmax, fabs(g[k]));
        }
        cr_assert_gt(gmax, 1e-6, "the loss depends on %s", params[p]->label[0]);
        for (int64_t k = 0; k < n; k++) {
            const double h = 1e-6;
            double v0 = m_get(m, params[p], k);
            m_set(m, params[p], k, v0 + h);
            double lp = m_run(m);
            m_set(m, params[p], k, v0 - h);
            double lm = m_run(m);
            m_set(m, params[p], k, v0);
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[k]) / fmax(1.0, fmax(fabs(fd), fabs(g[k])));
            cr_expect_leq(err, tol, "%s[%lld]: derived %.12g, finite difference %.12g",
                          params[p]->label[0], (long long)k, g[k], fd);
            checked++;
        }
        free(g);
    }
    return checked;
}

/* ---- the linear layer, (out, in) weights --------------------------------------------------- */

Test(nn_layers, linear_out_in_forward_and_gradient)
{
    enum { B = 2, T = 3, IN = 4, OUT = 5 };
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 7);
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){B, T, IN});
    troupe_tnode_t *w = m_param(&m, "w", 2, (int64_t[]){OUT, IN});
    troupe_tnode_t *b = m_param(&m, "b", 1, (int64_t[]){OUT});
    troupe_tnode_t *y = NULL;
    OK(troupe_nn_linear_oi(m.nn, x, w, b, &y));
    cr_assert_eq(y->dims[2], OUT);
    m_finish(&m, y);
    m_build(&m, -1.0, 1.0);
    m_run(&m);
    for (int r = 0; r < B * T; r++) /* y = x w^T + b, w read as (out, in) */
        for (int j = 0; j < OUT; j++) {
            double want = m_get(&m, b, j);
            for (int i = 0; i < IN; i++)
                want += m_get(&m, x, r * IN + i) * m_get(&m, w, j * IN + i);
            cr_expect(fabs(m_get(&m, y, r * OUT + j) - want) < 1e-12, "y[%d,%d] %.17g, want %.17g",
                      r, j, m_get(&m, y, r * OUT + j), want);
        }
    cr_assert_eq(m_check_grads(&m, 1e-6), B * T * IN + OUT * IN + OUT);
    m_free(&m);
}

Test(nn_layers, linear_out_in_refuses_the_in_out_shape)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 7);
    troupe_tnode_t *x = m_param(&m, "x", 2, (int64_t[]){2, 4});
    troupe_tnode_t *w = m_param(&m, "w", 2, (int64_t[]){4, 5}); /* (in, out): wrong here */
    troupe_tnode_t *y = NULL;
    cr_assert_eq(troupe_nn_linear_oi(m.nn, x, w, NULL, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "(out, in)"), "%s", troupe_last_error());
    m_free(&m);
}

/* ---- layer normalisation -------------------------------------------------------------------- */

Test(nn_layers, layernorm_forward_and_gradient)
{
    enum { B = 2, T = 3, C = 4 };
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 1);
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){B, T, C});
    troupe_tnode_t *w = m_param(&m, "w", 1, (int64_t[]){C});
    troupe_tnode_t *b = m_param(&m, "b", 1, (int64_t[]){C});
    troupe_tnode_t *y = NULL;
    OK(troupe_nn_layernorm(m.nn, x, w, b, 1e-5, &y));
    m_finish(&m, y);
    m_build(&m, -1.0, 1.0);
    m_run(&m);
    for (int r = 0; r < B * T; r++) { /* llm.c's layernorm_forward, in double */
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += m_get(&m, x, r * C + c);
        mean /= C;
        for (int c = 0; c < C; c++)
            var += pow(m_get(&m, x, r * C + c) - mean, 2);
        var /= C;
        double rstd = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) {
            double want =
                (m_get(&m, x, r * C + c) - mean) * rstd * m_get(&m, w, c) + m_get(&m, b, c);
            cr_expect(fabs(m_get(&m, y, r * C + c) - want) < 1e-12, "y[%d,%d] %.17g, want %.17g", r,
                      c, m_get(&m, y, r * C + c), want);
        }
    }
    cr_assert_eq(m_check_grads(&m, 1e-6), B * T * C + 2 * C);
    m_free(&m);
}

/* ---- GELU and softmax ----------------------------------------------------------------------- */

static double s_gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

Test(nn_layers, gelu_forward_and_gradient)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 2);
    troupe_tnode_t *x = m_param(&m, "x", 2, (int64_t[]){3, 4});
    troupe_tnode_t *y = NULL;
    OK(troupe_nn_gelu(m.nn, x, &y));
    m_finish(&m, y);
    m_build(&m, -3.0, 3.0);
    const double fixed[12] = {-3.0, -1.5, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 1.5, 2.0, 3.0};
    for (int i = 0; i < 12; i++)
        m_set(&m, x, i, fixed[i]);
    m_run(&m);
    for (int i = 0; i < 12; i++)
        cr_expect(fabs(m_get(&m, y, i) - s_gelu_ref(fixed[i])) < 1e-14,
                  "gelu(%g) = %.17g, want %.17g", fixed[i], m_get(&m, y, i), s_gelu_ref(fixed[i]));
    /* known values of the tanh approximation */
    cr_expect(fabs(m_get(&m, y, 8) - 0.8411919906082768) < 1e-15, "gelu(1) %.17g", m_get(&m, y, 8));
    cr_expect(fabs(m_get(&m, y, 2) + 0.15880800939172324) < 1e-15, "gelu(-1) %.17g",
              m_get(&m, y, 2));
    cr_assert_eq(m_check_grads(&m, 1e-6), 12);
    m_free(&m);
}

Test(nn_layers, softmax_forward_and_gradient)
{
    enum { R = 6, N = 5 };
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 3);
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){2, 3, N});
    troupe_tnode_t *y = NULL;
    OK(troupe_nn_softmax(m.nn, x, &y));
    m_finish(&m, y);
    m_build(&m, -2.0, 2.0);
    m_set(&m, x, 0, 700.0); /* exp(700) alone is near overflow: the max shift keeps it finite */
    m_run(&m);
    for (int r = 0; r < R; r++) {
        double mx = -INFINITY, sum = 0, total = 0;
        for (int c = 0; c < N; c++)
            mx = fmax(mx, m_get(&m, x, r * N + c));
        for (int c = 0; c < N; c++)
            sum += exp(m_get(&m, x, r * N + c) - mx);
        for (int c = 0; c < N; c++) {
            double want = exp(m_get(&m, x, r * N + c) - mx) / sum;
            cr_expect(fabs(m_get(&m, y, r * N + c) - want) < 1e-15,
                      "softmax[%d,%d] %.17g, want %.17g", r, c, m_get(&m, y, r * N + c), want);
            total += m_get(&m, y, r * N + c);
        }
        cr_expect(fabs(total - 1.0) < 1e-14);
    }
    m_set(&m, x, 0, 0.5);
    cr_assert_eq(m_check_grads(&m, 1e-6), R * N);
    m_free(&m);
}

/* ---- attention ---------------------------------------------------------------------------- */

/* GPT-2 causal self-attention in double (llm.c's CPU loops), weights (in, out). */
static void s_attention_ref(int B, int T, int C, int NH, const double *x, const double *wqkv,
                            const double *bqkv, const double *wp, const double *bp, double *out)
{
    int hd = C / NH;
    double *qkv = calloc((size_t)(B * T * 3 * C), sizeof *qkv);
    double *y = calloc((size_t)(B * T * C), sizeof *y);
    double *att = calloc((size_t)T, sizeof *att);
    for (int bt = 0; bt < B * T; bt++)
        for (int j = 0; j < 3 * C; j++) {
            double acc = bqkv[j];
            for (int i = 0; i < C; i++)
                acc += x[bt * C + i] * wqkv[i * 3 * C + j];
            qkv[bt * 3 * C + j] = acc;
        }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    const double *k = qkv + (b * T + s) * 3 * C + C + h * hd;
                    double dot = 0;
                    for (int d = 0; d < hd; d++)
                        dot += q[d] * k[d];
                    att[s] = dot / sqrt((double)hd);
                    mx = fmax(mx, att[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += (att[s] = exp(att[s] - mx));
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += att[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + h * hd + d];
                    y[(b * T + t) * C + h * hd + d] = acc;
                }
            }
    for (int bt = 0; bt < B * T; bt++)
        for (int o = 0; o < C; o++) {
            double acc = bp[o];
            for (int c = 0; c < C; c++)
                acc += y[bt * C + c] * wp[c * C + o];
            out[bt * C + o] = acc;
        }
    free(qkv);
    free(y);
    free(att);
}

/* Host copy of a double node's values. */
static double *m_copy(m_model_t *m, const troupe_tnode_t *tn)
{
    size_t n = (size_t)troupe_tnode_num_elems(tn);
    double *v = malloc(n * sizeof *v);
    memcpy(v, m_data(m, tn), n * sizeof *v);
    return v;
}

/* (rows, cols) -> (cols, rows) */
static double *s_transpose(const double *a, int rows, int cols)
{
    double *t = malloc((size_t)(rows * cols) * sizeof *t);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            t[c * rows + r] = a[r * cols + c];
    return t;
}

static void s_attention_case(troupe_nn_layout_t layout)
{
    enum { B = 2, T = 3, C = 4, NH = 2 };
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, layout == TROUPE_NN_IN_OUT ? 4 : 5);
    bool io = layout == TROUPE_NN_IN_OUT;
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){B, T, C});
    troupe_tnode_t *wqkv =
        m_param(&m, "w_qkv", 2, io ? (int64_t[]){C, 3 * C} : (int64_t[]){3 * C, C});
    troupe_tnode_t *bqkv = m_param(&m, "b_qkv", 1, (int64_t[]){3 * C});
    troupe_tnode_t *wp = m_param(&m, "w_proj", 2, (int64_t[]){C, C});
    troupe_tnode_t *bp = m_param(&m, "b_proj", 1, (int64_t[]){C});
    troupe_tnode_t *y = NULL;
    OK(troupe_nn_attention(m.nn, x, wqkv, bqkv, wp, bp, NH, layout, &y));
    m_finish(&m, y);
    m_build(&m, -1.0, 1.0);
    m_run(&m);
    double *xv = m_copy(&m, x), *wq = m_copy(&m, wqkv), *bq = m_copy(&m, bqkv);
    double *wpv = m_copy(&m, wp), *bpv = m_copy(&m, bp), want[B * T * C];
    double *wq_io = io ? wq : s_transpose(wq, 3 * C, C);
    double *wp_io = io ? wpv : s_transpose(wpv, C, C);
    s_attention_ref(B, T, C, NH, xv, wq_io, bq, wp_io, bpv, want);
    for (int i = 0; i < B * T * C; i++)
        cr_expect(fabs(m_get(&m, y, i) - want[i]) < 1e-12, "y[%d] %.17g, want %.17g", i,
                  m_get(&m, y, i), want[i]);
    if (!io)
        free(wq_io), free(wp_io);
    free(xv), free(wq), free(bq), free(wpv), free(bpv);
    cr_assert_eq(m_check_grads(&m, 1e-6), B * T * C + 12 * C + 3 * C + C * C + C);
    m_free(&m);
}

Test(nn_layers, attention_in_out_forward_and_gradient)
{
    s_attention_case(TROUPE_NN_IN_OUT);
}

Test(nn_layers, attention_out_in_forward_and_gradient)
{
    s_attention_case(TROUPE_NN_OUT_IN);
}

Test(nn_layers, attention_refuses_mismatched_shapes)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 6);
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){2, 3, 4});
    troupe_tnode_t *w = m_param(&m, "w_qkv", 2, (int64_t[]){4, 12});
    troupe_tnode_t *wp = m_param(&m, "w_proj", 2, (int64_t[]){4, 4});
    troupe_tnode_t *y = NULL;
    cr_assert_eq(troupe_nn_attention(m.nn, x, w, NULL, wp, NULL, 3, TROUPE_NN_IN_OUT, &y),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "n_head") != NULL, "%s", troupe_last_error());
    cr_assert_eq(troupe_nn_status(m.nn), TROUPE_INVALID_ARGUMENT, "the error sticks");
    m_free(&m);
    m_init(&m, TROUPE_PREC_DOUBLE, 6);
    x = m_param(&m, "x", 3, (int64_t[]){2, 3, 4});
    w = m_param(&m, "w_qkv", 2, (int64_t[]){4, 12});
    wp = m_param(&m, "w_proj", 2, (int64_t[]){4, 4});
    cr_assert_eq(troupe_nn_attention(m.nn, x, w, NULL, wp, NULL, 2, TROUPE_NN_OUT_IN, &y),
                 TROUPE_INVALID_ARGUMENT, "a (C, 3C) weight is not (out, in)");
    cr_assert(strstr(troupe_last_error(), "(out, in)") != NULL, "%s", troupe_last_error());
    m_free(&m);
}

/* ---- dropout -------------------------------------------------------------------------------- */

/* The documented stream: keep cell i iff drop < uniform1(double, bits). */
static bool s_dropout_keeps_prec(troupe_prec_t prec, uint64_t seed, uint32_t step, uint32_t i,
                                 double drop)
{
    troupe_uint4x32_t sk = {{(uint32_t)seed, (uint32_t)(seed >> 32), 0, 0}}, sc, ic;
    cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &step, &sc), TROUPE_OK);
    cr_assert_eq(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &i, &ic), TROUPE_OK);
    troupe_uint4x32_t key = troupe_threefry4x32_crypto(sk, sc);
    double u = 0;
    float uf = 0;
    cr_assert_eq(
        troupe_uint4x32_to_prec_uniform1(prec, troupe_threefry4x32_crypto(key, ic),
                                         prec == TROUPE_PREC_DOUBLE ? (void *)&u : (void *)&uf),
        TROUPE_OK);
    return prec == TROUPE_PREC_DOUBLE ? drop < u : (float)drop < uf;
}

static bool s_dropout_keeps(uint64_t seed, uint32_t step, uint32_t i, double drop)
{
    return s_dropout_keeps_prec(TROUPE_PREC_DOUBLE, seed, step, i, drop);
}

Test(nn_layers, dropout_mask_stream_reproducibility_and_gradient)
{
    enum { R = 64, N = 64 };
    const double drop = 0.25, scale = 1.0 / 0.75;
    const uint64_t seed = 0x123456789abcdefULL;
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 7);
    troupe_tnode_t *x = m_param(&m, "x", 2, (int64_t[]){R, N});
    troupe_tnode_t *step = NULL, *y = NULL;
    OK(troupe_nn_node_prec(m.nn, "step", TROUPE_PREC_UINT32, 0, NULL, &step));
    OK(troupe_nn_dropout(m.nn, x, drop, seed, step, &y));
    m_finish(&m, y);
    troupe_tnode_t *const *params, *const *grads;
    cr_assert_eq(troupe_nn_params(m.nn, &params, &grads), 1);
    m_build(&m, 0.5, 1.5); /* x never 0: a zero in y means a dropped cell */
    uint32_t *stepv = m_data(&m, step);
    double *y0 = malloc(R * N * sizeof *y0);
    int differ = 0, kept = 0;
    for (uint32_t s = 0; s < 3; s++) {
        *stepv = s;
        m_run(&m);
        for (int i = 0; i < R * N; i++) {
            double xv = m_get(&m, x, i), yv = m_get(&m, y, i), g = m_get(&m, grads[0], i);
            bool keep = s_dropout_keeps(seed, s, (uint32_t)i, drop);
            cr_assert_eq(yv != 0, keep, "step %u cell %d: the mask follows the documented stream",
                         s, i);
            cr_assert(yv == (keep ? xv * scale : 0.0), "step %u cell %d: y %g, x %g", s, i, yv, xv);
            if (!keep)
                cr_assert_eq(g, 0.0, "step %u cell %d: no gradient through a dropped cell", s, i);
            else
                cr_assert(g != 0.0, "step %u cell %d: gradient through a kept cell", s, i);
            if (s == 0) {
                y0[i] = yv;
                kept += keep;
            } else if (s == 1)
                differ += (yv != 0) != (y0[i] != 0);
        }
    }
    /* kept fraction 0.75 with sd sqrt(0.75 0.25 / 4096) ~ 0.007: a 5-sigma band */
    cr_expect(fabs(kept / (double)(R * N) - 0.75) < 0.035, "kept fraction %g", kept / 4096.0);
    cr_expect_gt(differ, R * N / 5, "steps 0 and 1 give other masks (%d cells differ)", differ);
    *stepv = 0;
    m_run(&m);
    for (int i = 0; i < R * N; i++)
        cr_assert_eq(m_get(&m, y, i), y0[i], "same seed and step, same output (cell %d)", i);
    free(y0);
    m_free(&m);
}

Test(nn_layers, dropout_gradient_matches_finite_differences)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 8);
    troupe_tnode_t *x = m_param(&m, "x", 3, (int64_t[]){2, 3, 4});
    troupe_tnode_t *step = NULL, *y = NULL, *z = NULL;
    OK(troupe_nn_node_prec(m.nn, "step", TROUPE_PREC_INT32, 0, NULL, &step));
    OK(troupe_nn_gelu(m.nn, x, &z));
    OK(troupe_nn_dropout(m.nn, z, 0.5, 42, step, &y));
    m_finish(&m, y);
    m_build(&m, -1.0, 1.0);
    *(int32_t *)m_data(&m, step) = 3;
    cr_assert_eq(m_check_grads(&m, 1e-6), 24);
    m_free(&m);
}

Test(nn_layers, dropout_refuses_bad_arguments)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 9);
    troupe_tnode_t *x = m_param(&m, "x", 1, (int64_t[]){4});
    troupe_tnode_t *fstep = m_node(&m, "step", 0, NULL), *y = NULL;
    cr_assert_eq(troupe_nn_dropout(m.nn, x, 0.5, 1, fstep, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "uint32 or int32") != NULL, "%s", troupe_last_error());
    m_free(&m);
    m_init(&m, TROUPE_PREC_DOUBLE, 9);
    x = m_param(&m, "x", 1, (int64_t[]){4});
    troupe_tnode_t *step = NULL;
    OK(troupe_nn_node_prec(m.nn, "step", TROUPE_PREC_UINT32, 0, NULL, &step));
    cr_assert_eq(troupe_nn_dropout(m.nn, x, 1.0, 1, step, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "outside [0, 1)") != NULL, "%s", troupe_last_error());
    m_free(&m);
}

/* ---- troupe_nn_materialize ------------------------------------------------------------------ */

Test(nn_layers, materialize_marks_the_node_and_keeps_the_first_error)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 9);
    troupe_tnode_t *y = m_node(&m, "y", 1, (int64_t[]){4});
    OK(troupe_nn_materialize(m.nn, y, 77));
    troupe_memory_mode_t mode;
    int32_t prov = 0;
    cr_assert(troupe_tnode_get_memory_mode(y, &mode, &prov));
    cr_assert_eq(mode.kind, TROUPE_MM_MATERIALIZED);
    cr_assert_eq(prov, 77);
    /* a node already Virtual: the conflict becomes the nn's error */
    troupe_tnode_t *v = m_node(&m, "v", 1, (int64_t[]){4});
    const troupe_memory_mode_t virt = {TROUPE_MM_VIRTUAL, 0, 0};
    OK(troupe_tnode_update_memory_mode(v, virt, 78));
    troupe_status_t st = troupe_nn_materialize(m.nn, v, 79);
    cr_assert_neq(st, TROUPE_OK);
    cr_assert_eq(troupe_nn_status(m.nn), st);
    cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s", troupe_status_str(st));
    cr_assert(strstr(troupe_last_error(),
                     "_v: memory mode Virtual/78 cannot become Materialized/79") != NULL,
              "%s", troupe_last_error());
    char first[512];
    snprintf(first, sizeof first, "%s", troupe_last_error());
    /* a NULL node after that failure returns it and keeps its message */
    cr_assert_eq(troupe_nn_materialize(m.nn, NULL, 80), st);
    cr_assert_str_eq(troupe_last_error(), first);
    m_free(&m);
    /* a NULL node on a healthy nn is the nn's error, named */
    m_init(&m, TROUPE_PREC_DOUBLE, 9);
    cr_assert_eq(troupe_nn_materialize(m.nn, NULL, 80), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "troupe_nn_materialize: NULL node") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_nn_status(m.nn), TROUPE_INVALID_ARGUMENT);
    m_free(&m);
}

/* ---- initialisers ---------------------------------------------------------------------------- */

Test(nn_layers, initialisers_follow_the_documented_stream)
{
    enum { N = 20000 };
    double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    const uint64_t seed = 0xfeedbeef12ULL;
    /* uniform: draw i, the top 53 bits of v1:v0 */
    OK(troupe_nn_init_uniform(a, N, -2.0, 3.0, seed));
    double sum = 0;
    for (int i = 0; i < N; i++) {
        troupe_uint4x32_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32), 0x696e6974u, 0}};
        troupe_uint4x32_t ctr = {{(uint32_t)i, 0, 0, 0}};
        troupe_uint4x32_t r = troupe_threefry4x32_crypto(key, ctr);
        double u = (double)((((uint64_t)r.v[1] << 32) | r.v[0]) >> 11) * 0x1p-53;
        if (i < 8)
            cr_assert_eq(a[i], -2.0 + 5.0 * u, "uniform[%d] %.17g", i, a[i]);
        cr_assert(a[i] >= -2.0 && a[i] < 3.0);
        sum += a[i];
    }
    cr_expect(fabs(sum / N - 0.5) < 0.05, "uniform mean %g", sum / N);
    OK(troupe_nn_init_uniform(b, N, -2.0, 3.0, seed));
    cr_assert(memcmp(a, b, N * sizeof *a) == 0, "same seed, same values");
    OK(troupe_nn_init_uniform(b, N, -2.0, 3.0, seed + 1));
    cr_assert(memcmp(a, b, N * sizeof *a) != 0, "another seed, other values");
    /* normal: Box-Muller on draw 0 gives cells 0 and 1 */
    OK(troupe_nn_init_normal(a, N, 1.0, 2.0, seed));
    {
        troupe_uint4x32_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32), 0x696e6974u, 0}};
        troupe_uint4x32_t r = troupe_threefry4x32_crypto(key, (troupe_uint4x32_t){{0, 0, 0, 0}});
        double u0 = (double)((((uint64_t)r.v[1] << 32) | r.v[0]) >> 11) * 0x1p-53;
        double u1 = (double)((((uint64_t)r.v[3] << 32) | r.v[2]) >> 11) * 0x1p-53;
        double rad = sqrt(-2.0 * log(1.0 - u0)), ang = 2.0 * 3.14159265358979323846 * u1;
        cr_assert(fabs(a[0] - (1.0 + 2.0 * rad * cos(ang))) < 1e-15, "normal[0] %.17g", a[0]);
        cr_assert(fabs(a[1] - (1.0 + 2.0 * rad * sin(ang))) < 1e-15, "normal[1] %.17g", a[1]);
    }
    double m1 = 0, m2 = 0;
    for (int i = 0; i < N; i++)
        m1 += a[i], m2 += a[i] * a[i];
    m1 /= N;
    double sd = sqrt(m2 / N - m1 * m1);
    cr_expect(fabs(m1 - 1.0) < 0.05, "normal mean %g", m1);
    cr_expect(fabs(sd - 2.0) < 0.05, "normal std %g", sd);
    /* kaiming: std = gain / sqrt(fan_in) */
    OK(troupe_nn_init_kaiming(a, N, 50, sqrt(2.0), seed));
    m2 = 0;
    for (int i = 0; i < N; i++)
        m2 += a[i] * a[i];
    cr_expect(fabs(sqrt(m2 / N) - 0.2) < 0.005, "kaiming std %g, want 0.2", sqrt(m2 / N));
    cr_assert_eq(troupe_nn_init_normal(a, N, 0.0, -1.0, seed), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_nn_init_kaiming(a, N, 0, 1.0, seed), TROUPE_INVALID_ARGUMENT);
    free(a);
    free(b);
}

/* ---- one composed GPT-2 block ---------------------------------------------------------------- */

enum { K_B = 2, K_T = 3, K_C = 4, K_NH = 2 };

/* Closes the open layer and opens `name`. */
static void s_layer(troupe_nn_t *nn, const char *name)
{
    troupe_nn_end(nn);
    troupe_nn_begin(nn, name);
}

/* ln1 -> attention -> residual -> ln2 -> linear -> gelu -> linear -> residual -> softmax
 * cross-entropy of the rows against one-hot targets, as layers of m's nn. */
static void s_block(m_model_t *m, troupe_tnode_t **x_out, troupe_tnode_t **tgt_out)
{
    const int64_t B = K_B, T = K_T, C = K_C;
    troupe_nn_t *nn = m->nn;
    troupe_tnode_t *x = m_node(m, "x", 3, (int64_t[]){B, T, C});
    troupe_tnode_t *tgt = m_node(m, "targets", 2, (int64_t[]){B * T, C});
    troupe_tnode_t *ln1w = m_param(m, "ln1_w", 1, (int64_t[]){C});
    troupe_tnode_t *ln1b = m_param(m, "ln1_b", 1, (int64_t[]){C});
    troupe_tnode_t *wqkv = m_param(m, "w_qkv", 2, (int64_t[]){C, 3 * C});
    troupe_tnode_t *bqkv = m_param(m, "b_qkv", 1, (int64_t[]){3 * C});
    troupe_tnode_t *wp = m_param(m, "w_proj", 2, (int64_t[]){C, C});
    troupe_tnode_t *bp = m_param(m, "b_proj", 1, (int64_t[]){C});
    troupe_tnode_t *ln2w = m_param(m, "ln2_w", 1, (int64_t[]){C});
    troupe_tnode_t *ln2b = m_param(m, "ln2_b", 1, (int64_t[]){C});
    troupe_tnode_t *wfc = m_param(m, "w_fc", 2, (int64_t[]){C, 4 * C});
    troupe_tnode_t *bfc = m_param(m, "b_fc", 1, (int64_t[]){4 * C});
    troupe_tnode_t *wfp = m_param(m, "w_fcproj", 2, (int64_t[]){4 * C, C});
    troupe_tnode_t *bfp = m_param(m, "b_fcproj", 1, (int64_t[]){C});
    troupe_tnode_t *l1, *a, *r1, *l2, *h, *g, *f, *r2, *flat;
    r1 = m_node(m, "residual1", 3, x->dims);
    r2 = m_node(m, "residual2", 3, x->dims);
    flat = m_node(m, "rows", 2, tgt->dims);
    s_layer(nn, "ln1");
    troupe_nn_layernorm(nn, x, ln1w, ln1b, 1e-5, &l1);
    s_layer(nn, "attention");
    troupe_nn_attention(nn, l1, wqkv, bqkv, wp, bp, K_NH, TROUPE_NN_IN_OUT, &a);
    s_layer(nn, "residual1");
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, r1, TROUPE_BINOP_ADD, x, a, "btc,btc=>btc");
    s_layer(nn, "ln2");
    troupe_nn_layernorm(nn, r1, ln2w, ln2b, 1e-5, &l2);
    s_layer(nn, "mlp");
    troupe_nn_linear(nn, l2, wfc, bfc, &h);
    troupe_nn_gelu(nn, h, &g);
    troupe_nn_linear(nn, g, wfp, bfp, &f);
    s_layer(nn, "residual2");
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, r2, TROUPE_BINOP_ADD, r1, f, "btc,btc=>btc");
    s_layer(nn, "loss");
    troupe_nn_un(nn, true, TROUPE_BINOP_ADD, flat, TROUPE_UNOP_IDENTITY, r2, "btc=>(3b+t)c");
    troupe_nn_softmax_xent(nn, flat, tgt, &m->loss);
    OK(troupe_nn_finish(nn, m->loss));
    *x_out = x;
    *tgt_out = tgt;
}

static void s_one_hot(m_model_t *m, troupe_tnode_t *tgt)
{
    for (int r = 0; r < K_B * K_T; r++)
        for (int c = 0; c < K_C; c++)
            m_set(m, tgt, r * K_C + c, c == (r * 7 + 3) % K_C ? 1.0 : 0.0);
}

Test(nn_layers, block_gradient_matches_finite_differences)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 11);
    troupe_tnode_t *x, *tgt;
    s_block(&m, &x, &tgt);
    m_build(&m, -1.0, 1.0);
    s_one_hot(&m, tgt);
    cr_assert_eq(m_check_grads(&m, 1e-6), 2 * 4 + 48 + 12 + 16 + 4 + 2 * 4 + 64 + 16 + 64 + 4);
    m_free(&m);
}

Test(nn_layers, block_on_the_drivers_matches_the_interpreter, .timeout = 240)
{
    m_model_t m;
    m_init(&m, TROUPE_PREC_SINGLE, 12);
    troupe_tnode_t *x, *tgt;
    s_block(&m, &x, &tgt);
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(m.nn, &params, &grads);
    m_build(&m, -1.0, 1.0);
    s_one_hot(&m, tgt);
    double want_loss = m_run(&m);
    /* the same inputs as host values, for the drivers */
    troupe_tnode_t *inputs[16];
    size_t ni = 0;
    inputs[ni++] = x;
    inputs[ni++] = tgt;
    for (size_t p = 0; p < np; p++)
        inputs[ni++] = params[p];
    for (size_t i = 0; i < ni; i++) {
        size_t n = (size_t)troupe_tnode_num_elems(inputs[i]);
        double *v = malloc(n * sizeof *v);
        for (size_t k = 0; k < n; k++)
            v[k] = m_get(&m, inputs[i], (int64_t)k);
        rtu_set(inputs[i], v);
        free(v);
    }
    for (size_t p = 0; p < np; p++)
        rtu_set_hosted(grads[p], 999);
    rtu_set_hosted(m.loss, 999);
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        for (size_t i = 0; i < ni; i++)
            rtu_init(&e.ctx[0], inputs[i]);
        troupe_code_t *code = NULL;
        troupe_routine_t *r = NULL;
        OK(troupe_compile(e.b, m.comp, "nn_layers_block", &code));
        OK(troupe_link(e.ctx[0], code, &r));
        troupe_event_t *ev = NULL;
        OK(troupe_routine_run(r, &ev));
        OK(troupe_event_sync(ev, TIMEOUT_NS));
        troupe_event_release(&ev);
        double loss = 0;
        OK(troupe_tnode_get_values(m.loss, &loss, 1));
        cr_expect(fabs(loss - want_loss) <= 1e-5 * fabs(want_loss),
                  "%s: loss %.9g, interpreter %.9g", *drv, loss, want_loss);
        for (size_t p = 0; p < np; p++) {
            size_t n = (size_t)troupe_tnode_num_elems(grads[p]);
            double *got = malloc(n * sizeof *got), gmax = 0, dmax = 0;
            OK(troupe_tnode_get_values(grads[p], got, n));
            for (size_t k = 0; k < n; k++)
                gmax = fmax(gmax, fabs(m_get(&m, grads[p], (int64_t)k)));
            for (size_t k = 0; k < n; k++)
                dmax = fmax(dmax, fabs(got[k] - m_get(&m, grads[p], (int64_t)k)));
            cr_assert_gt(gmax, 1e-4, "%s: the loss depends on %s", *drv, params[p]->label[0]);
            cr_expect_leq(dmax, 1e-5 * gmax,
                          "%s: %s's gradient differs from the interpreter's by %g (max |g| %g)",
                          *drv, params[p]->label[0], dmax, gmax);
            if (getenv("NN_LAYERS_PRINT"))
                fprintf(stderr, "%s %s: max |diff| %.3g, max |g| %.3g\n", *drv, params[p]->label[0],
                        dmax, gmax);
            free(got);
        }
        troupe_routine_release(&r);
        troupe_code_release(&code);
        rtu_env_close(&e);
    }
    m_free(&m);
}

/* Whether a line of the file at `path` holds all of a, b and c. */
static bool s_log_has(const char *path, const char *a, const char *b, const char *c)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, a) && strstr(line, b) && strstr(line, c);
    if (f)
        fclose(f);
    return found;
}

/* Which contractions of attention's forward and backward the GEMM matcher (compiler/gemm.h)
 * hands to the library, from cgen's debug:ir log (one line per contraction it takes): the
 * per-head products Q K^T and P V and their four gradient products, batched over (b, h), each
 * call overwriting its block (the zeroing before the batch loop dropped: beta = 0); the
 * projections and their weight gradients over (b, t) merged. */
Test(nn_layers, gemm_matcher_takes_the_attention_products, .timeout = 240)
{
    char path[256];
    snprintf(path, sizeof path, "%s/nn-layers-gemm-%d.txt", TROUPE_TEST_BUILD_DIR, (int)getpid());
    unlink(path);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:ir"));
    const int64_t B = 2, T = 64, C = 64;
    m_model_t m;
    m_init(&m, TROUPE_PREC_SINGLE, 13);
    troupe_tnode_t *x = m_node(&m, "x", 3, (int64_t[]){B, T, C}), *y = NULL;
    troupe_tnode_t *wqkv = m_param(&m, "w_qkv", 2, (int64_t[]){C, 3 * C});
    troupe_tnode_t *wp = m_param(&m, "w_proj", 2, (int64_t[]){C, C});
    OK(troupe_nn_attention(m.nn, x, wqkv, NULL, wp, NULL, 4, TROUPE_NN_IN_OUT, &y));
    m_finish(&m, y);
    rtu_env_t e;
    rtu_env_open(&e, "cpu", 1);
    troupe_code_t *code = NULL;
    OK(troupe_compile(e.b, m.comp, "nn_attention_gemm", &code));
    troupe_code_release(&code);
    rtu_env_close(&e);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    const char *lib = "calls the GEMM library";
    /* q, k and v are copies of qkv, inlined: the products read qkv through its strides */
    cr_expect(s_log_has(path, "_preatt = ", "_qkv x n", "_qkv^T (m=64 n=64 k=16) calls"), "Q K^T");
    cr_expect(s_log_has(path, "_attn_heads = ", "_softmax x n", "_qkv (m=64 n=16 k=64) calls"),
              "P V");
    cr_expect(s_log_has(path, "_softmax_grad = ", "_qkv^T", lib), "dP = dY V^T");
    cr_expect(s_log_has(path, "_v_grad = ", "_softmax^T x ", lib), "dV = P^T dY");
    cr_expect(s_log_has(path, "_q_grad = ", "_preatt_grad x ", lib), "dQ = dS K");
    cr_expect(s_log_has(path, "_k_grad = ", "_preatt_grad^T x ", lib), "dK = dS^T Q");
    /* the projections over (b, t) as one dimension (compiler/gemm.h, merged loops): B*T rows,
     * and the weight gradients' reductions over B*T */
    cr_expect(s_log_has(path, "_qkv = ", "_w_qkv (m=128 n=192 k=64)", lib), "x W_qkv");
    cr_expect(s_log_has(path, "_w_qkv_grad ", "(m=64 n=192 k=128)", lib), "dW_qkv = x^T dY");
    cr_expect(s_log_has(path, "_w_proj_grad ", "(m=64 n=64 k=128)", lib), "dW_proj");
    cr_expect(s_log_has(path, "_attn_concat_grad = ", "_w_proj^T", lib), "dY W_proj^T");
    unlink(path);
    m_free(&m);
}

/* ---- PyTorch reference (bench/peers/nn_reference.py writes tests/data/nn_block.bin) ------- */

/* The next array of the reference file: `count` float64 values into v. */
static void s_read_array(FILE *f, size_t count, double *v)
{
    uint32_t n = 0;
    cr_assert_eq(fread(&n, sizeof n, 1, f), 1, "nn_block.bin is truncated");
    cr_assert_eq(n, count, "nn_block.bin: an array of %u values where %zu are expected", n, count);
    cr_assert_eq(fread(v, sizeof *v, count, f), count, "nn_block.bin is truncated");
}

Test(nn_layers, block_matches_pytorch)
{
    FILE *f = fopen(TROUPE_TEST_DATA_DIR "/nn_block.bin", "rb");
    cr_assert_not_null(f, "tests/data/nn_block.bin (bench/peers/nn_reference.py writes it)");
    char magic[8];
    uint32_t narrays = 0;
    cr_assert_eq(fread(magic, 1, 8, f), 8);
    cr_assert(memcmp(magic, "troupenn", 8) == 0);
    cr_assert_eq(fread(&narrays, sizeof narrays, 1, f), 1);
    m_model_t m;
    m_init(&m, TROUPE_PREC_DOUBLE, 14);
    troupe_tnode_t *x, *tgt;
    s_block(&m, &x, &tgt);
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(m.nn, &params, &grads);
    cr_assert_eq(narrays, 2 + 2 * np + 1);
    m_build(&m, -1.0, 1.0);
    s_read_array(f, (size_t)troupe_tnode_num_elems(x), m_data(&m, x));
    s_read_array(f, (size_t)troupe_tnode_num_elems(tgt), m_data(&m, tgt));
    for (size_t p = 0; p < np; p++)
        s_read_array(f, (size_t)troupe_tnode_num_elems(params[p]), m_data(&m, params[p]));
    double want_loss = 0, want[64];
    s_read_array(f, 1, &want_loss);
    double loss = m_run(&m);
    cr_expect(fabs(loss - want_loss) < 1e-12 * fabs(want_loss), "loss %.17g, PyTorch %.17g", loss,
              want_loss);
    for (size_t p = 0; p < np; p++) {
        size_t n = (size_t)troupe_tnode_num_elems(grads[p]);
        cr_assert_leq(n, 64);
        s_read_array(f, n, want);
        for (size_t k = 0; k < n; k++)
            cr_expect(fabs(m_get(&m, grads[p], (int64_t)k) - want[k]) < 1e-12,
                      "%s[%zu]: %.17g, PyTorch %.17g", params[p]->label[0], k,
                      m_get(&m, grads[p], (int64_t)k), want[k]);
    }
    fclose(f);
    m_free(&m);
}

/* Dropout compiled for the drivers (single precision): the generated Threefry stream gives
 * the documented mask, like the interpreter's. */
Test(nn_layers, dropout_on_the_drivers_follows_the_stream, .timeout = 240)
{
    enum { R = 8, N = 16 };
    const double drop = 0.3;
    m_model_t m;
    m_init(&m, TROUPE_PREC_SINGLE, 15);
    troupe_tnode_t *x = m_node(&m, "x", 2, (int64_t[]){R, N});
    troupe_tnode_t *w = m_param(&m, "w", 1, (int64_t[]){N}), *step = NULL, *xw, *y = NULL;
    xw = m_node(&m, "xw", 2, x->dims);
    OK(troupe_nn_node_prec(m.nn, "step", TROUPE_PREC_UINT32, 0, NULL, &step));
    OK(troupe_nn_bin(m.nn, true, TROUPE_BINOP_ARG2, xw, TROUPE_BINOP_MUL, x, w, "rn,n=>rn"));
    OK(troupe_nn_dropout(m.nn, xw, drop, 99, step, &y));
    m_finish(&m, y);
    double xv[R * N], wv[N], stepv = 5, yv[R * N], rv[R * N];
    for (int i = 0; i < R * N; i++)
        xv[i] = 1.0 + (i % 7), rv[i] = 1.0;
    rtu_set(m.r, rv);
    for (int i = 0; i < N; i++)
        wv[i] = 0.5;
    rtu_set(x, xv);
    rtu_set(w, wv);
    rtu_set(step, &stepv);
    rtu_set_hosted(y, 999);
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        rtu_init(&e.ctx[0], x);
        rtu_init(&e.ctx[0], w);
        rtu_init(&e.ctx[0], step);
        rtu_init(&e.ctx[0], m.r);
        troupe_code_t *code = NULL;
        troupe_routine_t *r = NULL;
        OK(troupe_compile(e.b, m.comp, "nn_layers_dropout", &code));
        OK(troupe_link(e.ctx[0], code, &r));
        troupe_event_t *ev = NULL;
        OK(troupe_routine_run(r, &ev));
        OK(troupe_event_sync(ev, TIMEOUT_NS));
        troupe_event_release(&ev);
        OK(troupe_tnode_get_values(y, yv, R * N));
        int kept = 0;
        for (int i = 0; i < R * N; i++) {
            bool keep = s_dropout_keeps_prec(TROUPE_PREC_SINGLE, 99, 5, (uint32_t)i, drop);
            float want = keep ? (float)(xv[i] * 0.5) * (float)(1.0 / (1.0 - drop)) : 0.0f;
            cr_expect_eq((float)yv[i], want, "%s: y[%d] %g, want %g", *drv, i, yv[i], want);
            kept += keep;
        }
        cr_expect(kept > 0 && kept < R * N);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        rtu_env_close(&e);
    }
    m_free(&m);
}
