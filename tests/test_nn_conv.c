/* Tests of nn/conv.h and nn/pool.h: forward values against direct C loops, derived gradients
 * against central finite differences in double precision through the reference interpreter
 * (the fmnist convnet's conv configurations, stride, padding, dilation, max and average
 * pooling), the max pool's tie rule, the shape refusals, and the same forward and gradients
 * through the "sync" and "cpu" drivers against the interpreter within float rounding. */
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/pool.h"

#include "compiler/interp.h"
#include "compiler/lower.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-nn-conv", 60);
}

TestSuite(nn_conv, .init = s_setup);

/* ---- a model: one layer under test, loss = sum(y * r) ---------------------------------------- */

typedef struct c_model {
    troupe_asgn_comp_t *comp;
    troupe_nn_t *nn;
    troupe_tnode_t *x, *w, *b, *y, *r, *loss;
    troupe_ll_proc_t *proc;
    troupe_interp_buffer_t *bufs;
    size_t nbufs;
    uint64_t rng;
} c_model_t;

static double c_rnd(c_model_t *m)
{
    m->rng = m->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(m->rng >> 11) * 0x1p-52 - 1.0; /* [-1, 1) */
}

static void c_init(c_model_t *m, troupe_prec_t prec, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->rng = seed;
    OK(troupe_asgn_comp_new(&m->comp));
    OK(troupe_nn_new(m->comp, prec, &m->nn));
}

/* Sets the loss sum(y * r) with r a fixed input, and derives the gradients. */
static void c_finish(c_model_t *m)
{
    OK(troupe_nn_node(m->nn, "r", 4, m->y->dims, &m->r));
    OK(troupe_nn_node(m->nn, "loss", 0, NULL, &m->loss));
    OK(troupe_nn_begin(m->nn, "loss"));
    OK(troupe_nn_bin(m->nn, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_MUL, m->y, m->r,
                     "bchw,bchw=>"));
    OK(troupe_nn_finish(m->nn, m->loss));
}

static void *c_data(c_model_t *m, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < m->nbufs; i++)
        if (m->bufs[i].tn == tn)
            return m->bufs[i].data;
    cr_assert_fail("no buffer for #%d", tn->id);
    return NULL;
}

static troupe_tnode_t *c_grad(c_model_t *m, const troupe_tnode_t *p)
{
    troupe_tnode_t *const *ps, *const *gs;
    size_t n = troupe_nn_params(m->nn, &ps, &gs);
    for (size_t i = 0; i < n; i++)
        if (ps[i] == p)
            return gs[i];
    cr_assert_fail("not a parameter");
    return NULL;
}

/* Lowers, gives every node a buffer, fills the parameters and r with values in [-1, 1). */
static void c_build(c_model_t *m)
{
    OK(troupe_asgn_lower(m->comp, "nn_conv_test", &m->proc));
    m->nbufs = m->comp->nnodes;
    m->bufs = calloc(m->nbufs, sizeof *m->bufs);
    for (size_t i = 0; i < m->nbufs; i++) {
        m->bufs[i].tn = m->comp->nodes[i];
        m->bufs[i].data = calloc(1, m->comp->nodes[i]->size_bytes);
    }
    troupe_tnode_t *fill[4] = {m->x, m->w, m->b, m->r};
    for (int f = 0; f < 4; f++) {
        if (!fill[f])
            continue;
        int64_t n = troupe_tnode_num_elems(fill[f]);
        if (fill[f]->prec == TROUPE_PREC_DOUBLE)
            for (int64_t k = 0; k < n; k++)
                ((double *)c_data(m, fill[f]))[k] = c_rnd(m);
        else
            for (int64_t k = 0; k < n; k++)
                ((float *)c_data(m, fill[f]))[k] = (float)c_rnd(m);
    }
}

static double c_run(c_model_t *m)
{
    troupe_interp_args_t args = {m->bufs, m->nbufs, NULL, 0, NULL};
    OK(troupe_interp_run(m->proc, &args));
    return m->loss->prec == TROUPE_PREC_DOUBLE ? ((double *)c_data(m, m->loss))[0]
                                               : ((float *)c_data(m, m->loss))[0];
}

static void c_free(c_model_t *m)
{
    troupe_ll_proc_destroy(&m->proc);
    for (size_t i = 0; i < m->nbufs; i++)
        free(m->bufs[i].data);
    free(m->bufs);
    troupe_nn_destroy(&m->nn);
    troupe_asgn_comp_destroy(&m->comp);
}

/* Each parameter's derived gradient against central differences (relative error <= 1e-6),
 * at most `most` cells per parameter (spread over the whole array). */
static void c_check_grads(c_model_t *m, int64_t most)
{
    troupe_tnode_t *ps[3] = {m->x, m->w, m->b};
    for (int p = 0; p < 3; p++) {
        if (!ps[p])
            continue;
        int64_t n = troupe_tnode_num_elems(ps[p]);
        c_run(m);
        double *g = malloc((size_t)n * sizeof *g);
        memcpy(g, c_data(m, c_grad(m, ps[p])), (size_t)n * sizeof *g);
        double *v = c_data(m, ps[p]);
        int64_t step = n > most ? n / most : 1;
        for (int64_t k = (step > 1 ? (int64_t)(m->rng % (uint64_t)step) : 0); k < n; k += step) {
            const double h = 1e-6;
            double v0 = v[k];
            v[k] = v0 + h;
            double lp = c_run(m);
            v[k] = v0 - h;
            double lm = c_run(m);
            v[k] = v0;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[k]) / fmax(1.0, fabs(fd));
            cr_assert_leq(err, 1e-6, "d loss / d %s[%lld]: derived %.12g, finite difference %.12g",
                          ps[p]->label[0], (long long)k, g[k], fd);
        }
        free(g);
    }
}

/* ---- conv2d -----------------------------------------------------------------------------------
 */

/* Direct convolution in C (PyTorch's definition), double. */
static void c_conv_ref(const double *x, const double *w, const double *b, int64_t B, int64_t Ci,
                       int64_t H, int64_t W, int64_t Co, int64_t KH, int64_t KW,
                       const troupe_nn_conv2d_opts_t *o, int64_t OH, int64_t OW, double *y)
{
    for (int64_t n = 0; n < B; n++)
        for (int64_t co = 0; co < Co; co++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = b ? b[co] : 0.0;
                    for (int64_t ci = 0; ci < Ci; ci++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ih =
                                    oh * o->stride[0] - o->padding[0] + kh * o->dilation[0];
                                int64_t iw =
                                    ow * o->stride[1] - o->padding[1] + kw * o->dilation[1];
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                acc += x[((n * Ci + ci) * H + ih) * W + iw] *
                                       w[((co * Ci + ci) * KH + kh) * KW + kw];
                            }
                    y[((n * Co + co) * OH + oh) * OW + ow] = acc;
                }
}

/* Builds x (B, Ci, H, W) (X_NHWC: (B, H, W, Ci)), w (Co, Ci, K, K), b (Co) as parameters and
 * y = conv2d. */
static void c_conv_model(c_model_t *m, troupe_prec_t prec, uint64_t seed, int64_t B, int64_t Ci,
                         int64_t H, int64_t W, int64_t Co, int64_t K,
                         const troupe_nn_conv2d_opts_t *o, bool bias)
{
    c_init(m, prec, seed);
    const bool xcl = o && (o->layout & TROUPE_NN_CONV2D_X_NHWC);
    const int64_t xd[4] = {B, xcl ? H : Ci, xcl ? W : H, xcl ? Ci : W}, wd[4] = {Co, Ci, K, K},
                  bd[1] = {Co};
    OK(troupe_nn_param(m->nn, "x", 4, xd, &m->x));
    OK(troupe_nn_param(m->nn, "w", 4, wd, &m->w));
    if (bias)
        OK(troupe_nn_param(m->nn, "b", 1, bd, &m->b));
    OK(troupe_nn_begin(m->nn, "conv"));
    OK(troupe_nn_conv2d(m->nn, m->x, m->w, m->b, o, &m->y));
    OK(troupe_nn_end(m->nn));
    c_finish(m);
}

static void c_conv_run(uint64_t seed, int64_t B, int64_t Ci, int64_t H, int64_t W, int64_t Co,
                       int64_t K, troupe_nn_conv2d_opts_t o, int64_t most, bool bias)
{
    c_model_t m;
    c_conv_model(&m, TROUPE_PREC_DOUBLE, seed, B, Ci, H, W, Co, K, &o, bias);
    int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (K - 1) - 1) / o.stride[0] + 1;
    int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (K - 1) - 1) / o.stride[1] + 1;
    const bool xcl = o.layout & TROUPE_NN_CONV2D_X_NHWC, ycl = o.layout & TROUPE_NN_CONV2D_Y_NHWC;
    cr_assert_eq(m.y->dims[ycl ? 1 : 2], OH);
    cr_assert_eq(m.y->dims[ycl ? 2 : 3], OW);
    cr_assert_eq(m.y->dims[ycl ? 3 : 1], Co);
    c_build(&m);
    c_run(&m);
    int64_t ny = troupe_tnode_num_elems(m.y), nx = troupe_tnode_num_elems(m.x);
    double *want = malloc((size_t)ny * sizeof *want), *xr = malloc((size_t)nx * sizeof *xr);
    const double *xv = c_data(&m, m.x);
    for (int64_t n = 0; n < B; n++) /* the reference reads x NCHW */
        for (int64_t c = 0; c < Ci; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    xr[((n * Ci + c) * H + h) * W + w] =
                        xv[xcl ? ((n * H + h) * W + w) * Ci + c : ((n * Ci + c) * H + h) * W + w];
    c_conv_ref(xr, c_data(&m, m.w), bias ? c_data(&m, m.b) : NULL, B, Ci, H, W, Co, K, K, &o, OH,
               OW, want);
    const double *got = c_data(&m, m.y);
    for (int64_t n = 0; n < B; n++)
        for (int64_t c = 0; c < Co; c++)
            for (int64_t h = 0; h < OH; h++)
                for (int64_t w = 0; w < OW; w++) {
                    int64_t i = ((n * Co + c) * OH + h) * OW + w;
                    int64_t g = ycl ? ((n * OH + h) * OW + w) * Co + c : i;
                    cr_assert(fabs(got[g] - want[i]) <= 1e-12 * (1 + fabs(want[i])),
                              "y[%lld] = %.17g, direct convolution %.17g", (long long)g, got[g],
                              want[i]);
                }
    free(want);
    free(xr);
    c_check_grads(&m, most);
    c_free(&m);
}

static void c_conv_case(uint64_t seed, int64_t B, int64_t Ci, int64_t H, int64_t W, int64_t Co,
                        int64_t K, troupe_nn_conv2d_opts_t o, int64_t most)
{
    c_conv_run(seed, B, Ci, H, W, Co, K, o, most, true);
}

/* Without a bias, on both lowerings (im2col with stride 2, the shifted products with 8
 * input channels). */
Test(nn_conv, without_bias)
{
    c_conv_run(11, 2, 2, 7, 6, 3, 3, TROUPE_NN_CONV2D_OPTS(2, 1, 1), 1 << 20, false);
    c_conv_run(12, 1, 8, 5, 6, 3, 3, TROUPE_NN_CONV2D_OPTS(1, 1, 1), 16, false);
}

Test(nn_conv, fmnist_first_conv_1_to_32_3x3)
{
    c_conv_case(1, 2, 1, 5, 4, 32, 3, TROUPE_NN_CONV2D_OPTS(1, 0, 1), 64);
}

Test(nn_conv, fmnist_second_conv_32_to_32_3x3)
{
    c_conv_case(2, 1, 32, 4, 3, 32, 3, TROUPE_NN_CONV2D_OPTS(1, 0, 1), 16);
}

Test(nn_conv, stride_2)
{
    c_conv_case(3, 2, 2, 7, 6, 3, 3, TROUPE_NN_CONV2D_OPTS(2, 0, 1), 1 << 20);
}

Test(nn_conv, padding_1)
{
    c_conv_case(4, 2, 2, 4, 5, 3, 3, TROUPE_NN_CONV2D_OPTS(1, 1, 1), 1 << 20);
}

Test(nn_conv, dilation_2)
{
    c_conv_case(5, 2, 2, 7, 6, 3, 3, TROUPE_NN_CONV2D_OPTS(1, 0, 2), 1 << 20);
}

Test(nn_conv, per_axis_stride_padding_dilation)
{
    troupe_nn_conv2d_opts_t o = {{2, 1}, {1, 2}, {1, 2}, TROUPE_NN_CONV2D_AUTO, 0u};
    c_conv_case(6, 1, 2, 6, 5, 2, 3, o, 1 << 20);
}

/* Stride 1 with at least 8 input channels takes the shifted products (nn/conv.h): padding and
 * dilation, the same per axis and not, on that path too. */
Test(nn_conv, shifted_products_padding_and_dilation)
{
    c_conv_case(8, 1, 8, 5, 6, 3, 3, TROUPE_NN_CONV2D_OPTS(1, 1, 1), 16);
    c_conv_case(9, 2, 8, 7, 6, 2, 3, TROUPE_NN_CONV2D_OPTS(1, 0, 2), 16);
    troupe_nn_conv2d_opts_t o = {{1, 1}, {1, 2}, {2, 1}, TROUPE_NN_CONV2D_AUTO, 0u};
    c_conv_case(10, 1, 8, 6, 5, 2, 3, o, 16);
}

/* Winograd F(2x2, 3x3) (nn/conv.h): the forward equals the direct definition in double and
 * both derived gradients the central differences, with and without a bias and padding, on an
 * even output with one tile row (2 x 2) and several (4 x 6). */
Test(nn_conv, winograd_equals_the_direct_convolution)
{
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = TROUPE_NN_CONV2D_WINOGRAD;
    c_conv_case(11, 2, 3, 6, 8, 4, 3, o, 24);
    c_conv_run(12, 1, 2, 4, 4, 3, 3, o, 24, false);
    o.padding[0] = o.padding[1] = 1;
    c_conv_case(13, 2, 2, 4, 6, 3, 3, o, 24);
}

/* Winograd F(4x4, 3x3) (nn/conv.h, channels last inside): the forward equals the direct
 * definition in double and both derived gradients the central differences, with and without a
 * bias and padding, on outputs of one tile (4 x 4) and several (4 x 8, 8 x 4 padded). */
Test(nn_conv, winograd4_equals_the_direct_convolution)
{
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = TROUPE_NN_CONV2D_WINOGRAD4;
    c_conv_case(18, 2, 3, 6, 10, 4, 3, o, 24);
    c_conv_run(19, 1, 2, 6, 6, 3, 3, o, 24, false);
    o.padding[0] = o.padding[1] = 1;
    c_conv_case(20, 2, 2, 8, 4, 3, 3, o, 24);
}

/* The largest error of a single-precision forward against the direct definition in double on
 * the same (float) values, relative to the largest |y|: conv2's channels (32 -> 32) on an
 * 8 x 8 output, under `low`. */
static double c_single_error(troupe_nn_conv2d_lowering_t low)
{
    c_model_t m;
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = low;
    const int64_t B = 2, Ci = 32, H = 10, Co = 32;
    c_conv_model(&m, TROUPE_PREC_SINGLE, 21, B, Ci, H, H, Co, 3, &o, true);
    c_build(&m);
    c_run(&m);
    const troupe_tnode_t *in[3] = {m.x, m.w, m.b};
    double *d[3];
    for (int k = 0; k < 3; k++) {
        int64_t n = troupe_tnode_num_elems(in[k]);
        d[k] = malloc((size_t)n * sizeof *d[k]);
        for (int64_t i = 0; i < n; i++)
            d[k][i] = ((const float *)c_data(&m, in[k]))[i];
    }
    int64_t ny = troupe_tnode_num_elems(m.y);
    double *want = malloc((size_t)ny * sizeof *want), most = 0, err = 0;
    c_conv_ref(d[0], d[1], d[2], B, Ci, H, H, Co, 3, 3, &o, H - 2, H - 2, want);
    const float *got = c_data(&m, m.y);
    for (int64_t i = 0; i < ny; i++) {
        most = fmax(most, fabs(want[i]));
        err = fmax(err, fabs(got[i] - want[i]));
    }
    for (int k = 0; k < 3; k++)
        free(d[k]);
    free(want);
    c_free(&m);
    return err / most;
}

/* In single precision the Winograd forms stay within float rounding of the direct sum on
 * 288-term sums, relative to the largest |y|: the shifted products and F(2x2) under 1e-6
 * (measured 4.7e-7 and 3.1e-7), F(4x4), whose transforms weigh terms up to 8 times and round
 * 1/6, 1/12 and 1/24, under 1e-5 (measured 3.4e-6: the accuracy its 4x fewer multiply-adds
 * cost). */
Test(nn_conv, winograd_single_precision_error)
{
    static const struct {
        troupe_nn_conv2d_lowering_t low;
        double bound;
    } cases[] = {{TROUPE_NN_CONV2D_SHIFTED, 1e-6},
                 {TROUPE_NN_CONV2D_WINOGRAD, 1e-6},
                 {TROUPE_NN_CONV2D_WINOGRAD4, 1e-5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double e = c_single_error(cases[i].low);
        cr_log_info("lowering %d: largest error %.3g of the largest |y|", (int)cases[i].low, e);
        cr_assert(e < cases[i].bound, "lowering %d: error %.3g of the largest |y|",
                  (int)cases[i].low, e);
    }
}

/* im2col with the batch folded into the columns (nn/conv.h: one product for the whole batch,
 * the GPU's form): the forward equals the direct definition in double and both derived
 * gradients the central differences, with and without a bias, with stride, padding and
 * dilation, and on the convnet's second shape. */
Test(nn_conv, im2col_folded_equals_the_direct_convolution)
{
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = TROUPE_NN_CONV2D_IM2COL_FOLDED;
    c_conv_case(14, 2, 3, 6, 8, 4, 3, o, 24);
    c_conv_run(15, 2, 2, 5, 4, 3, 3, o, 24, false);
    c_conv_case(16, 2, 32, 4, 3, 32, 3, o, 16);
    troupe_nn_conv2d_opts_t p = {{2, 1}, {1, 2}, {1, 2}, TROUPE_NN_CONV2D_IM2COL_FOLDED, 0u};
    c_conv_case(17, 2, 2, 6, 5, 2, 3, p, 1 << 20);
}

/* Whether the model's comp mentions a node with this label. */
/* The nodes labelled `label`, gradients (labelled label, "grad") included. */
static int c_count_label(const c_model_t *m, const char *label)
{
    int n = 0;
    for (size_t i = 0; i < m->comp->nnodes; i++)
        for (size_t l = 0; l < m->comp->nodes[i]->label_count; l++)
            n += strcmp(m->comp->nodes[i]->label[l], label) == 0;
    return n;
}

static bool c_has_label(const c_model_t *m, const char *label)
{
    return c_count_label(m, label) > 0;
}

/* AUTO (nn/conv.h): Winograd F(4x4) (its channels-last copy conv2d_wino_xc) for conv2's shape
 * at 4 samples in single and 2 in double (0.66 MB of transformed tiles) and at 8 (1.3 MB), the
 * shifted products at 16 (2.7 MB), F(2x2) for conv3's 10 x 10 output, im2col with 2 input
 * channels. Built only, not run. */
Test(nn_conv, auto_lowering_follows_the_winograd_budget)
{
    static const struct {
        troupe_prec_t prec;
        int64_t b, ci, h;
        const char *want, *not ;
    } cases[] = {
        {TROUPE_PREC_SINGLE, 4, 32, 26, "conv2d_wino_xc", "conv2d_rows"},
        {TROUPE_PREC_DOUBLE, 2, 32, 26, "conv2d_wino_xc", "conv2d_rows"},
        {TROUPE_PREC_SINGLE, 8, 32, 26, "conv2d_wino_xc", "conv2d_rows"},
        {TROUPE_PREC_SINGLE, 16, 32, 26, "conv2d_rows", "conv2d_wino_v"},
        {TROUPE_PREC_SINGLE, 4, 32, 12, "conv2d_wino_v", "conv2d_wino_xc"},
        {TROUPE_PREC_SINGLE, 4, 2, 26, "im2col", "conv2d_wino_v"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c_model_t m;
        troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
        c_conv_model(&m, cases[i].prec, 5, cases[i].b, cases[i].ci, cases[i].h, cases[i].h, 32, 3,
                     &o, true);
        cr_assert(c_has_label(&m, cases[i].want), "case %zu: no node %s", i, cases[i].want);
        cr_assert(!c_has_label(&m, cases[i].not ), "case %zu: a node %s", i, cases[i].not );
        c_free(&m);
    }
}

/* Channels last (TROUPE_NN_CONV2D_X_NHWC, Y_NHWC) on the three lowerings that take it, each side
 * and both, with a bias and without, with padding and stride: the forward against the direct
 * definition, both gradients against central differences; AUTO's pick with a channels-last side;
 * the other lowerings refuse it. */
Test(nn_conv, channels_last_layouts)
{
    static const unsigned layouts[3] = {TROUPE_NN_CONV2D_X_NHWC, TROUPE_NN_CONV2D_Y_NHWC,
                                        TROUPE_NN_CONV2D_X_NHWC | TROUPE_NN_CONV2D_Y_NHWC};
    for (int l = 0; l < 3; l++) {
        troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
        o.layout = layouts[l];
        o.lowering = TROUPE_NN_CONV2D_WINOGRAD4; /* outputs 4 x 8, then 4 x 4 padded */
        c_conv_run(40 + (uint64_t)l, 2, 3, 6, 10, 4, 3, o, 24, l != 1);
        o.padding[0] = o.padding[1] = 1;
        c_conv_run(50 + (uint64_t)l, 1, 2, 4, 4, 3, 3, o, 24, l == 1);
        o.lowering = TROUPE_NN_CONV2D_WINOGRAD; /* 6 x 4 padded, then 4 x 2 */
        c_conv_run(80 + (uint64_t)l, 2, 3, 6, 4, 2, 3, o, 24, l != 2);
        o.padding[0] = o.padding[1] = 0;
        c_conv_run(90 + (uint64_t)l, 1, 2, 6, 4, 3, 3, o, 24, true);
        o = (troupe_nn_conv2d_opts_t)TROUPE_NN_CONV2D_OPTS(2, 1, 1);
        o.layout = layouts[l];
        o.lowering = TROUPE_NN_CONV2D_IM2COL;
        c_conv_run(60 + (uint64_t)l, 2, 2, 7, 6, 3, 3, o, 24, l != 0);
        o = (troupe_nn_conv2d_opts_t)TROUPE_NN_CONV2D_OPTS(1, 0, 2);
        o.layout = layouts[l];
        o.lowering = TROUPE_NN_CONV2D_IM2COL;
        c_conv_run(70 + (uint64_t)l, 1, 3, 7, 6, 2, 2, o, 24, true);
    }
    /* AUTO: as NCHW, but im2col for the shifted products */
    static const struct {
        int64_t b, ci, h;
        troupe_nn_conv2d_lowering_t nchw, cl;
    } picks[] = {
        {4, 32, 26, TROUPE_NN_CONV2D_WINOGRAD4, TROUPE_NN_CONV2D_WINOGRAD4},
        {16, 32, 26, TROUPE_NN_CONV2D_SHIFTED, TROUPE_NN_CONV2D_IM2COL},
        {4, 32, 12, TROUPE_NN_CONV2D_WINOGRAD, TROUPE_NN_CONV2D_WINOGRAD},
        {4, 1, 28, TROUPE_NN_CONV2D_IM2COL, TROUPE_NN_CONV2D_IM2COL},
    };
    c_model_t m;
    c_init(&m, TROUPE_PREC_SINGLE, 3);
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
        troupe_tnode_t *w = NULL;
        OK(troupe_nn_param(m.nn, "w", 4, (int64_t[]){32, picks[i].ci, 3, 3}, &w));
        troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
        troupe_nn_conv2d_lowering_t got = TROUPE_NN_CONV2D_AUTO;
        OK(troupe_nn_conv2d_plan(m.nn, (int64_t[]){picks[i].b, picks[i].ci, picks[i].h, picks[i].h},
                                 w, &o, &got));
        cr_assert_eq(got, picks[i].nchw, "case %zu NCHW: lowering %d", i, (int)got);
        o.layout = TROUPE_NN_CONV2D_X_NHWC;
        OK(troupe_nn_conv2d_plan(m.nn, (int64_t[]){picks[i].b, picks[i].h, picks[i].h, picks[i].ci},
                                 w, &o, &got));
        cr_assert_eq(got, picks[i].cl, "case %zu X_NHWC: lowering %d", i, (int)got);
        o.layout = TROUPE_NN_CONV2D_Y_NHWC;
        OK(troupe_nn_conv2d_plan(m.nn, (int64_t[]){picks[i].b, picks[i].ci, picks[i].h, picks[i].h},
                                 w, &o, &got));
        cr_assert_eq(got, picks[i].cl, "case %zu Y_NHWC: lowering %d", i, (int)got);
    }
    /* refusals, without touching the nn's status: a channels-last side on the NCHW-only
     * lowerings, an unknown layout bit, channels that disagree in the channels-last reading */
    troupe_tnode_t *w = NULL;
    OK(troupe_nn_param(m.nn, "w", 4, (int64_t[]){8, 8, 3, 3}, &w));
    const troupe_nn_conv2d_lowering_t nchw_only[2] = {TROUPE_NN_CONV2D_SHIFTED,
                                                      TROUPE_NN_CONV2D_IM2COL_FOLDED};
    const char *const names[2] = {"the shifted lowering", "the im2col_folded lowering"};
    for (int i = 0; i < 2; i++) {
        troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
        o.lowering = nchw_only[i];
        o.layout = i == 1 ? TROUPE_NN_CONV2D_Y_NHWC : TROUPE_NN_CONV2D_X_NHWC;
        troupe_nn_conv2d_lowering_t got;
        cr_assert_eq(troupe_nn_conv2d_plan(m.nn, (int64_t[]){2, 8, 8, 8}, w, &o, &got),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert(strstr(troupe_last_error(), names[i]) &&
                      strstr(troupe_last_error(), "takes NCHW tensors only"),
                  "%s", troupe_last_error());
    }
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    troupe_nn_conv2d_lowering_t got;
    o.layout = 4;
    cr_assert_eq(troupe_nn_conv2d_plan(m.nn, (int64_t[]){2, 8, 8, 8}, w, &o, &got),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "layout 0x4"), "%s", troupe_last_error());
    o.layout = TROUPE_NN_CONV2D_X_NHWC;
    cr_assert_eq(troupe_nn_conv2d_plan(m.nn, (int64_t[]){2, 8, 8, 3}, w, &o, &got),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "B, H, W, Cin") && strstr(troupe_last_error(), "Cin 3"),
              "%s", troupe_last_error());
    OK(troupe_nn_status(m.nn));
    c_free(&m);
}

Test(nn_conv, refuses_shapes_that_do_not_fit)
{
    c_model_t m;
    c_init(&m, TROUPE_PREC_DOUBLE, 7);
    const int64_t xd[4] = {1, 2, 4, 4}, wd[4] = {3, 2, 5, 5}, w2d[4] = {3, 1, 3, 3};
    troupe_tnode_t *x, *w, *w2, *y = NULL;
    OK(troupe_nn_node(m.nn, "x", 4, xd, &x));
    OK(troupe_nn_param(m.nn, "w", 4, wd, &w));
    OK(troupe_nn_param(m.nn, "w2", 4, w2d, &w2));
    cr_assert_eq(troupe_nn_conv2d(m.nn, x, w, NULL, NULL, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "conv2d: the kernel") &&
                  strstr(troupe_last_error(), "spans 5"),
              "%s", troupe_last_error());
    /* sticky: the nn keeps the first error; a fresh nn for the channel mismatch */
    troupe_nn_destroy(&m.nn);
    OK(troupe_nn_new(m.comp, TROUPE_PREC_DOUBLE, &m.nn));
    OK(troupe_nn_node(m.nn, "x", 4, xd, &x));
    OK(troupe_nn_param(m.nn, "w2", 4, w2d, &w2));
    cr_assert_eq(troupe_nn_conv2d(m.nn, x, w2, NULL, NULL, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "Cin 2") && strstr(troupe_last_error(), "Cin 1"), "%s",
              troupe_last_error());
    /* padding makes the 5x5 kernel fit */
    troupe_nn_destroy(&m.nn);
    OK(troupe_nn_new(m.comp, TROUPE_PREC_DOUBLE, &m.nn));
    OK(troupe_nn_node(m.nn, "x", 4, xd, &x));
    OK(troupe_nn_param(m.nn, "w", 4, wd, &w));
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 1, 1);
    OK(troupe_nn_conv2d(m.nn, x, w, NULL, &o, &y));
    cr_assert_eq(y->dims[2], 2);
    /* a forced lowering that does not fit (either Winograd with a 5x5 kernel, shifted at stride 2),
     * and one out of range, each on a fresh nn */
    const struct {
        troupe_nn_conv2d_lowering_t low;
        int64_t stride;
        const char *want;
    } bad[] = {{TROUPE_NN_CONV2D_WINOGRAD, 1, "the winograd lowering does not fit"},
               {TROUPE_NN_CONV2D_WINOGRAD4, 1, "the winograd4 lowering does not fit"},
               {TROUPE_NN_CONV2D_SHIFTED, 2, "the shifted lowering does not fit"},
               {(troupe_nn_conv2d_lowering_t)6, 1, "lowering 6 is none of"},
               {(troupe_nn_conv2d_lowering_t)-1, 1, "lowering -1 is none of"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        troupe_nn_destroy(&m.nn);
        OK(troupe_nn_new(m.comp, TROUPE_PREC_DOUBLE, &m.nn));
        OK(troupe_nn_node(m.nn, "x", 4, xd, &x));
        OK(troupe_nn_param(m.nn, "w", 4, wd, &w));
        o = TROUPE_NN_CONV2D_OPTS(bad[i].stride, 1, 1);
        o.lowering = bad[i].low;
        cr_assert_eq(troupe_nn_conv2d(m.nn, x, w, NULL, &o, &y), TROUPE_INVALID_ARGUMENT);
        cr_assert(strstr(troupe_last_error(), bad[i].want), "%s", troupe_last_error());
    }
    /* F(4x4) with a 3x3 kernel where the output's sides do not divide by 4 (6 x 6), and where
     * only one does (4 x 6); F(2x2) takes both */
    const int64_t sides[2][2] = {{8, 8}, {6, 8}}, w3d[4] = {3, 2, 3, 3};
    for (int i = 0; i < 2; i++) {
        for (int f = 0; f < 2; f++) {
            troupe_nn_destroy(&m.nn);
            OK(troupe_nn_new(m.comp, TROUPE_PREC_DOUBLE, &m.nn));
            OK(troupe_nn_node(m.nn, "x", 4, (int64_t[]){1, 2, sides[i][0], sides[i][1]}, &x));
            OK(troupe_nn_param(m.nn, "w", 4, w3d, &w));
            o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
            o.lowering = f ? TROUPE_NN_CONV2D_WINOGRAD : TROUPE_NN_CONV2D_WINOGRAD4;
            troupe_status_t st = troupe_nn_conv2d(m.nn, x, w, NULL, &o, &y);
            if (f) {
                OK(st);
                continue;
            }
            cr_assert_eq(st, TROUPE_INVALID_ARGUMENT);
            cr_assert(strstr(troupe_last_error(), "the winograd4 lowering does not fit") &&
                          strstr(troupe_last_error(), i ? "output 4 x 6" : "output 6 x 6"),
                      "%s", troupe_last_error());
        }
    }
    c_free(&m);
}

/* ---- pooling ----------------------------------------------------------------------------------
 */

static void c_pool_model(c_model_t *m, bool max, uint64_t seed, const int64_t xd[4],
                         troupe_nn_pool2d_opts_t o)
{
    c_init(m, TROUPE_PREC_DOUBLE, seed);
    OK(troupe_nn_param(m->nn, "x", 4, xd, &m->x));
    OK(troupe_nn_begin(m->nn, "pool"));
    if (max)
        OK(troupe_nn_maxpool2d(m->nn, m->x, &o, &m->y));
    else
        OK(troupe_nn_avgpool2d(m->nn, m->x, &o, &m->y));
    OK(troupe_nn_end(m->nn));
    c_finish(m);
    c_build(m);
}

/* A pool over x (2, 3, 5, 6), or (2, 5, 6, 3) channels last (cl), against direct loops. */
static void c_pool_case_layout(bool max, uint64_t seed, int64_t k, int64_t s, bool cl)
{
    const int64_t xd[4] = {2, 3, 5, 6}, xdl[4] = {2, 5, 6, 3};
    c_model_t m;
    troupe_nn_pool2d_opts_t o = TROUPE_NN_POOL2D_OPTS(k, s);
    o.layout = cl ? TROUPE_NN_POOL2D_NHWC : 0;
    c_pool_model(&m, max, seed, cl ? xdl : xd, o);
    int64_t st = s ? s : k, OH = (5 - k) / st + 1, OW = (6 - k) / st + 1;
    cr_assert_eq(m.y->dims[cl ? 1 : 2], OH);
    cr_assert_eq(m.y->dims[cl ? 2 : 3], OW);
    cr_assert_eq(m.y->dims[cl ? 3 : 1], 3);
    c_run(&m);
    const double *x = c_data(&m, m.x), *y = c_data(&m, m.y);
    for (int64_t n = 0; n < 6; n++) /* (sample, channel) */
        for (int64_t h = 0; h < OH; h++)
            for (int64_t w = 0; w < OW; w++) {
                double acc = max ? -INFINITY : 0.0;
                for (int64_t i = 0; i < k; i++)
                    for (int64_t j = 0; j < k; j++) {
                        int64_t hh = h * st + i, ww = w * st + j;
                        double v = x[cl ? ((n / 3 * 5 + hh) * 6 + ww) * 3 + n % 3
                                        : (n * 5 + hh) * 6 + ww];
                        acc = max ? fmax(acc, v) : acc + v;
                    }
                if (!max)
                    acc /= (double)(k * k);
                double got =
                    y[cl ? ((n / 3 * OH + h) * OW + w) * 3 + n % 3 : (n * OH + h) * OW + w];
                cr_assert(fabs(got - acc) <= 1e-15, "y[%lld,%lld,%lld] %.17g, direct %.17g",
                          (long long)n, (long long)h, (long long)w, got, acc);
            }
    c_check_grads(&m, 1 << 20);
    c_free(&m);
}

static void c_pool_case(bool max, uint64_t seed, int64_t k, int64_t s)
{
    c_pool_case_layout(max, seed, k, s, false);
}

/* TROUPE_NN_POOL2D_NHWC: the same windows over (B, H, W, C); an unknown layout is refused. */
Test(nn_conv, pools_channels_last)
{
    c_pool_case_layout(true, 16, 2, 0, true);
    c_pool_case_layout(true, 17, 3, 2, true);
    c_pool_case_layout(false, 18, 3, 1, true);
    c_model_t m;
    c_init(&m, TROUPE_PREC_DOUBLE, 19);
    troupe_tnode_t *x = NULL, *y = NULL;
    OK(troupe_nn_node(m.nn, "x", 4, (int64_t[]){2, 4, 4, 3}, &x));
    troupe_nn_pool2d_opts_t o = TROUPE_NN_POOL2D_OPTS(2, 2);
    o.layout = 2;
    cr_assert_eq(troupe_nn_maxpool2d(m.nn, x, &o, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "maxpool2d: layout 0x2"), "%s", troupe_last_error());
    c_free(&m);
}

Test(nn_conv, maxpool_2x2_stride_2)
{
    c_pool_case(true, 11, 2, 0);
}

Test(nn_conv, maxpool_3x3_overlapping_stride_2)
{
    c_pool_case(true, 12, 3, 2);
}

Test(nn_conv, avgpool_2x2_stride_2)
{
    c_pool_case(false, 13, 2, 0);
}

Test(nn_conv, avgpool_3x3_stride_1)
{
    c_pool_case(false, 14, 3, 1);
}

/* Ties split evenly between the window's maxima (nn/grad.h's rule, not PyTorch's
 * max_pool2d, which gives all to one arg-max). */
Test(nn_conv, maxpool_ties_split_the_gradient_evenly)
{
    const int64_t xd[4] = {1, 1, 2, 6};
    c_model_t m;
    c_pool_model(&m, true, 15, xd, TROUPE_NN_POOL2D_OPTS(2, 2));
    double *x = c_data(&m, m.x);
    /* windows: all four equal | two maxima of four | one maximum */
    const double v[12] = {0.5, 0.5, 1.0, -2.0, 0.1, 0.2, 0.5, 0.5, -3.0, 1.0, 0.3, 0.25};
    memcpy(x, v, sizeof v);
    c_run(&m);
    const double *r = c_data(&m, m.r), *g = c_data(&m, c_grad(&m, m.x));
    const double want[12] = {r[0] / 4, r[0] / 4, r[1] / 2, 0,        0,    0,
                             r[0] / 4, r[0] / 4, 0,        r[1] / 2, r[2], 0};
    for (int i = 0; i < 12; i++)
        cr_assert(fabs(g[i] - want[i]) <= 1e-15, "dx[%d] = %.17g, want %.17g", i, g[i], want[i]);
    c_free(&m);
}

Test(nn_conv, pool_refuses_a_window_larger_than_its_input)
{
    c_model_t m;
    c_init(&m, TROUPE_PREC_DOUBLE, 16);
    const int64_t xd[4] = {1, 1, 2, 6};
    troupe_tnode_t *x, *y = NULL;
    OK(troupe_nn_node(m.nn, "x", 4, xd, &x));
    troupe_nn_pool2d_opts_t o = TROUPE_NN_POOL2D_OPTS(3, 0);
    cr_assert_eq(troupe_nn_maxpool2d(m.nn, x, &o, &y), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "maxpool2d") && strstr(troupe_last_error(), "H 2"), "%s",
              troupe_last_error());
    c_free(&m);
}

/* ---- the drivers ------------------------------------------------------------------------------
 */

/* conv2d (padding 1) -> relu -> maxpool 2 in single precision: forward and the three
 * gradients on each driver against the interpreter, within float rounding; in AUTO's lowerings
 * (nn/conv.h) 3 input channels (im2col), 16 on a 6 x 6 output (Winograd F(2x2)) and on an 8 x 8
 * one (F(4x4)), then 16 channels in the shifted products, and the first two shapes in im2col
 * folded (the cuda trainer's form: one product per layer for the whole batch). So every
 * lowering runs through the optimizer, the GEMM matcher and the generated code, not only the
 * interpreter's plain lowering. The ReLU's backward
 * over (2,4,6,6) is the shape GCC 12.2 at -O3 -march=native miscompiled when the generated
 * relu gate was a `c ? x[i] : 0` select (ir/ops.c now emits a call). */
Test(nn_conv, drivers_match_the_interpreter)
{
    /* the later shapes' products are large enough for the GEMM library */
    static const int64_t cins[3] = {3, 16, 16}, couts[3] = {4, 8, 8}, sides[3] = {6, 6, 8};
    /* F(4x4) reads its input channels last, as the convnet's conv2 does; im2col writes its
     * output so, as conv1 does; F(2x2) reads and writes them so, as conv3 does (the pool then
     * reads (H, W, C) as if (C, H, W): the same graph on both sides) */
    static const struct {
        int shape;
        troupe_nn_conv2d_lowering_t low;
        unsigned layout;
    } runs[] = {{0, TROUPE_NN_CONV2D_AUTO, 0},
                {1, TROUPE_NN_CONV2D_AUTO, 0},
                {2, TROUPE_NN_CONV2D_AUTO, TROUPE_NN_CONV2D_X_NHWC},
                {1, TROUPE_NN_CONV2D_SHIFTED, 0},
                {0, TROUPE_NN_CONV2D_IM2COL_FOLDED, 0},
                {1, TROUPE_NN_CONV2D_IM2COL_FOLDED, 0},
                {1, TROUPE_NN_CONV2D_IM2COL, TROUPE_NN_CONV2D_Y_NHWC},
                {2, TROUPE_NN_CONV2D_WINOGRAD, TROUPE_NN_CONV2D_X_NHWC | TROUPE_NN_CONV2D_Y_NHWC}};
    FOR_EACH_DRIVER(drv)
    {
        for (int cl = 0; cl < (int)(sizeof runs / sizeof runs[0]); cl++) {
            const int ci = runs[cl].shape;
            c_model_t m;
            c_init(&m, TROUPE_PREC_SINGLE, 21);
            const bool xcl = runs[cl].layout & TROUPE_NN_CONV2D_X_NHWC;
            const int64_t xd[4] = {2, xcl ? sides[ci] : cins[ci], sides[ci],
                                   xcl ? cins[ci] : sides[ci]},
                          wd[4] = {couts[ci], cins[ci], 3, 3}, bd[1] = {couts[ci]};
            troupe_tnode_t *c = NULL, *a = NULL;
            OK(troupe_nn_param(m.nn, "x", 4, xd, &m.x));
            OK(troupe_nn_param(m.nn, "w", 4, wd, &m.w));
            OK(troupe_nn_param(m.nn, "b", 1, bd, &m.b));
            troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 1, 1);
            o.lowering = runs[cl].low;
            o.layout = runs[cl].layout;
            troupe_nn_pool2d_opts_t po = TROUPE_NN_POOL2D_OPTS(2, 0);
            OK(troupe_nn_begin(m.nn, "conv"));
            OK(troupe_nn_conv2d(m.nn, m.x, m.w, m.b, &o, &c));
            OK(troupe_nn_relu(m.nn, c, &a));
            OK(troupe_nn_maxpool2d(m.nn, a, &po, &m.y));
            OK(troupe_nn_end(m.nn));
            c_finish(&m);
            if (cl == 1 || cl == 2) /* AUTO took the Winograd form meant, F(4x4) without a copy */
                cr_assert(c_count_label(&m, "conv2d_wino_v") == 2 * (cl == 2 ? 36 : 16) &&
                              !c_has_label(&m, "conv2d_wino_xc"),
                          "shape %d: not Winograd F(%dx%d): %d V nodes", ci, 2 * cl, 2 * cl,
                          c_count_label(&m, "conv2d_wino_v"));
            if (runs[cl].low == TROUPE_NN_CONV2D_SHIFTED)
                cr_assert(c_has_label(&m, "conv2d_rows"), "shape %d: not shifted", ci);
            c_build(&m);
            c_run(&m);
            troupe_tnode_t *out[5] = {c, m.y, c_grad(&m, m.x), c_grad(&m, m.w), c_grad(&m, m.b)};
            troupe_tnode_t *in[4] = {m.x, m.w, m.b, m.r};
            for (int i = 0; i < 5; i++)
                rtu_set_hosted(out[i], 999);
            for (int i = 0; i < 4; i++) {
                int64_t n = troupe_tnode_num_elems(in[i]);
                double *v = malloc((size_t)n * sizeof *v);
                const float *f = c_data(&m, in[i]);
                for (int64_t k = 0; k < n; k++)
                    v[k] = f[k];
                rtu_set(in[i], v);
                free(v);
            }
            rtu_env_t e;
            rtu_env_open(&e, *drv, 1);
            for (int i = 0; i < 4; i++)
                rtu_init(&e.ctx[0], in[i]);
            troupe_code_t *code = NULL;
            troupe_routine_t *r = NULL;
            OK(troupe_compile(e.b, m.comp, "nn_conv_drivers", &code));
            OK(troupe_link(e.ctx[0], code, &r));
            troupe_event_t *ev = NULL;
            OK(troupe_routine_run(r, &ev));
            OK(troupe_event_sync(ev, 60000 * MS));
            troupe_event_release(&ev);
            for (int i = 0; i < 5; i++) {
                int64_t n = troupe_tnode_num_elems(out[i]);
                double *got = malloc((size_t)n * sizeof *got);
                OK(troupe_tnode_get_values(out[i], got, (size_t)n));
                const float *want = c_data(&m, out[i]);
                double scale = 0;
                bool nonzero = false;
                for (int64_t k = 0; k < n; k++) {
                    scale = fmax(scale, fabs(want[k]));
                    nonzero |= want[k] != 0;
                }
                cr_assert(nonzero, "%s: %s is all zeros", *drv, out[i]->label[0]);
                for (int64_t k = 0; k < n; k++)
                    cr_assert(fabs(got[k] - want[k]) <= 1e-5 * scale,
                              "%s, %lld channels in, lowering %d: %s[%lld] = %.9g, "
                              "interpreter %.9g",
                              *drv, (long long)cins[ci], (int)o.lowering,
                              out[i]->label[out[i]->label_count - 1],
                              (long long)k, got[k], (double)want[k]);
                free(got);
            }
            troupe_routine_release(&r);
            troupe_code_release(&code);
            rtu_env_close(&e);
            c_free(&m);
        }
    }
}

/* ---- PyTorch reference (bench/peers/conv_reference.py writes tests/data/nn_conv_ref.bin) ---- */

static void c_read(FILE *f, size_t count, double *v)
{
    uint32_t n = 0;
    cr_assert_eq(fread(&n, sizeof n, 1, f), 1, "nn_conv_ref.bin is truncated");
    cr_assert_eq(n, count, "nn_conv_ref.bin: an array of %u values where %zu are expected", n,
                 count);
    cr_assert_eq(fread(v, sizeof *v, count, f), count, "nn_conv_ref.bin is truncated");
}

/* The stored array against ours: |a - b| <= 1e-12 * (1 + |b|). */
static void c_expect_ref(FILE *f, const char *what, const char *name, const double *got,
                         size_t count)
{
    double *want = malloc(count * sizeof *want);
    c_read(f, count, want);
    for (size_t k = 0; k < count; k++)
        cr_expect(fabs(got[k] - want[k]) <= 1e-12 * (1 + fabs(want[k])),
                  "%s: %s[%zu] = %.17g, PyTorch %.17g", name, what, k, got[k], want[k]);
    free(want);
}

/* conv2d (stride 2, padding 1, dilation 2 and the convnet's shapes, small), max pool and average
 * pool: forward values and every gradient equal PyTorch's within 1e-12 (double precision). */
Test(nn_conv, layers_match_pytorch)
{
    static const char *const names[] = {"job1",      "job2",     "stride2", "pad1",
                                        "dilation2", "maxpool2", "avgpool3"};
    FILE *f = fopen(TROUPE_TEST_DATA_DIR "/nn_conv_ref.bin", "rb");
    cr_assert_not_null(f, "tests/data/nn_conv_ref.bin (bench/peers/conv_reference.py writes it)");
    char magic[8];
    uint32_t ncases = 0;
    cr_assert_eq(fread(magic, 1, 8, f), 8);
    cr_assert(memcmp(magic, "troupecv", 8) == 0);
    cr_assert_eq(fread(&ncases, sizeof ncases, 1, f), 1);
    cr_assert_eq(ncases, 7);
    for (uint32_t c = 0; c < ncases; c++) {
        uint32_t kind = 0;
        int32_t s[9];
        cr_assert_eq(fread(&kind, sizeof kind, 1, f), 1);
        cr_assert_eq(fread(s, sizeof s[0], 9, f), 9);
        c_model_t m;
        c_init(&m, TROUPE_PREC_DOUBLE, 3);
        const int64_t xd[4] = {s[0], s[1], s[2], s[3]};
        OK(troupe_nn_param(m.nn, "x", 4, xd, &m.x));
        OK(troupe_nn_begin(m.nn, names[c]));
        if (kind == 0) {
            const int64_t wd[4] = {s[4], s[1], s[5], s[5]}, bd[1] = {s[4]};
            OK(troupe_nn_param(m.nn, "w", 4, wd, &m.w));
            OK(troupe_nn_param(m.nn, "b", 1, bd, &m.b));
            troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(s[6], s[7], s[8]);
            OK(troupe_nn_conv2d(m.nn, m.x, m.w, m.b, &o, &m.y));
        } else {
            troupe_nn_pool2d_opts_t o = TROUPE_NN_POOL2D_OPTS(s[5], s[6]);
            if (kind == 1)
                OK(troupe_nn_maxpool2d(m.nn, m.x, &o, &m.y));
            else
                OK(troupe_nn_avgpool2d(m.nn, m.x, &o, &m.y));
        }
        c_finish(&m);
        c_build(&m);
        troupe_tnode_t *in[4] = {m.x, m.w, m.b, m.r};
        for (int i = 0; i < 4; i++)
            if (in[i])
                c_read(f, (size_t)troupe_tnode_num_elems(in[i]), c_data(&m, in[i]));
        c_run(&m);
        c_expect_ref(f, "y", names[c], c_data(&m, m.y), (size_t)troupe_tnode_num_elems(m.y));
        troupe_tnode_t *gp[3] = {m.x, m.w, m.b};
        const char *gn[3] = {"x_grad", "w_grad", "b_grad"};
        for (int i = 0; i < 3; i++)
            if (gp[i])
                c_expect_ref(f, gn[i], names[c], c_data(&m, c_grad(&m, gp[i])),
                             (size_t)troupe_tnode_num_elems(gp[i]));
        c_free(&m);
    }
    fclose(f);
}
