/* bench_conv — the fmnist convnet's convolutions (batch 128 by default), single precision, one
 * thread: troupe's conv2d (nn/conv.h) forward + derived backward on the cpu driver, against the
 * same arithmetic as im2col + GEMM with the GEMM libraries of bench/gemm_libs.h (per sample:
 * forward Y = W cols, weight gradient dW += dY cols^T, input gradient dcols = W^T dY), timed
 * GEMMs only and with the im2col / col2im copies. Not a test: it prints a table (best of
 * --reps runs, default 3) and asserts nothing.
 *
 * Usage: bench_conv [reps [lowering [only]]]: lowering auto (default), im2col, shifted,
 * winograd, winograd4 (F(4x4, 3x3)) or folded (IM2COL_FOLDED) forces troupe's lowering where it
 * fits (a conv it does not fit runs AUTO and says so); `only` names one conv (1, 2 or 3) and skips
 * the libraries' columns, and a fourth argument `fwd` times troupe's forward alone (its GFLOP/s
 * column then counts 3 passes). Generated code lands in $TROUPE_CACHE_DIR or ./bench-conv-cache,
 * where `grep -c troupe_sgemm` tells which nests became library calls. BENCH_CONV_BATCH=N sets the
 * batch (default 128), e.g. 4 for a micro-step's convolutions. BENCH_CONV_LAYOUT=nhwc gives
 * troupe's layer its input and output channels last (TROUPE_NN_CONV2D_X_NHWC | Y_NHWC, the
 * convnet's micro-step form; the shifted products do not take it and fail); the libraries'
 * columns stay the NCHW im2col arithmetic.
 */
#include "actors/troupe.h"
#include "base/clock.h"
#include "bench/gemm_libs.h"
#include "nn/conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct s_conv {
    const char *name;
    int cin, cout, h; /* square input h x h, 3x3 kernel, stride 1, no padding */
    int input_grad;   /* the first conv reads the data: no input gradient (as PyTorch) */
} s_conv_t;

static const s_conv_t s_convs[] = {
    {"conv1 1->32 28x28", 1, 32, 28, 0},
    {"conv2 32->32 26x26", 32, 32, 26, 1},
    {"conv3 32->64 12x12", 32, 64, 12, 1},
};

static int s_batch = 128; /* samples; BENCH_CONV_BATCH overrides */
static bool s_nhwc;       /* BENCH_CONV_LAYOUT=nhwc: x and y channels last (nn/conv.h) */

static double s_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) * 0x1p-52 - 1.0;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        if (s__ != TROUPE_OK) {                                                                    \
            fprintf(stderr, "%s: %s\n", #expr, troupe_last_error());                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void s_fill(troupe_tnode_t *tn, uint64_t seed)
{
    size_t n = (size_t)troupe_tnode_num_elems(tn);
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = s_rand(&seed);
    CHECK(troupe_tnode_set_values(tn, v, n));
    free(v);
}

/* troupe: seconds per forward + backward (best of reps). */
static double s_troupe(const s_conv_t *c, int reps, troupe_nn_conv2d_lowering_t low, bool fwd)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_nn_t *nn = NULL;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn));
    const int64_t xd[4] = {s_batch, s_nhwc ? c->h : c->cin, c->h, s_nhwc ? c->cin : c->h},
                  wd[4] = {c->cout, c->cin, 3, 3}, bd[1] = {c->cout};
    troupe_tnode_t *x, *w, *b, *y, *r, *loss;
    if (c->input_grad)
        CHECK(troupe_nn_param(nn, "x", 4, xd, &x));
    else
        CHECK(troupe_nn_node(nn, "x", 4, xd, &x));
    CHECK(troupe_nn_param(nn, "w", 4, wd, &w));
    CHECK(troupe_nn_param(nn, "b", 1, bd, &b));
    CHECK(troupe_nn_begin(nn, c->name));
    troupe_nn_conv2d_opts_t o = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    o.lowering = low;
    o.layout = s_nhwc ? TROUPE_NN_CONV2D_X_NHWC | TROUPE_NN_CONV2D_Y_NHWC : 0;
    if ((low == TROUPE_NN_CONV2D_WINOGRAD && (c->h - 2) % 2 != 0) ||
        (low == TROUPE_NN_CONV2D_WINOGRAD4 && (c->h - 2) % 4 != 0)) {
        fprintf(stderr, "%s: %s does not fit (output %d x %d), auto\n", c->name,
                low == TROUPE_NN_CONV2D_WINOGRAD ? "winograd" : "winograd4", c->h - 2, c->h - 2);
        o.lowering = TROUPE_NN_CONV2D_AUTO;
    }
    CHECK(troupe_nn_conv2d(nn, x, w, b, &o, &y));
    CHECK(troupe_nn_node(nn, "r", 4, y->dims, &r));
    CHECK(troupe_nn_node(nn, "loss", 0, NULL, &loss));
    CHECK(troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, loss, TROUPE_BINOP_MUL, y, r, "bchw,bchw=>"));
    if (fwd)
        CHECK(troupe_nn_forward_root(nn));
    else
        CHECK(troupe_nn_finish(nn, loss));
    troupe_tnode_t *in[4] = {x, w, b, r};
    troupe_backend_t *be = NULL;
    troupe_device_t *dev = NULL;
    troupe_stream_t *st = NULL;
    troupe_context_t *ctx = NULL;
    CHECK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &be));
    CHECK(troupe_get_device(be, 0, &dev));
    CHECK(troupe_new_stream(dev, &st));
    CHECK(troupe_context_new(st, &ctx));
    for (int i = 0; i < 4; i++) {
        s_fill(in[i], 7 + (uint64_t)i);
        troupe_context_t *n = NULL;
        CHECK(troupe_init_from_host(ctx, in[i], &n, NULL));
        troupe_context_release(&ctx);
        ctx = n;
    }
    troupe_code_t *code = NULL;
    troupe_routine_t *rt = NULL;
    char name[64];
    snprintf(name, sizeof name, "bench_conv_%d_%d_%d_%d%s%s", c->cin, c->cout, c->h,
             (int)o.lowering, s_nhwc ? "_nhwc" : "", fwd ? "_fwd" : "");
    CHECK(troupe_compile(be, comp, name, &code));
    CHECK(troupe_link(ctx, code, &rt));
    double best = 1e30;
    for (int k = 0; k < reps + 1; k++) {
        troupe_event_t *ev = NULL;
        int64_t t0 = troupe_now_ns();
        CHECK(troupe_routine_run(rt, &ev));
        CHECK(troupe_event_sync(ev, TROUPE_TIMEOUT_INFINITE));
        double s = (double)(troupe_now_ns() - t0) * 1e-9;
        troupe_event_release(&ev);
        if (k > 0 && s < best)
            best = s;
    }
    troupe_routine_release(&rt);
    troupe_code_release(&code);
    troupe_context_release(&ctx);
    troupe_stream_release(&st);
    troupe_backend_close(&be);
    troupe_nn_destroy(&nn);
    troupe_asgn_comp_destroy(&comp);
    return best;
}

/* im2col + GEMM with `lib`: seconds per forward + backward, GEMMs only (*gemm) and with the
 * copies (*total). A product the library cannot take (libxsmm 1.17 has no JIT kernel for a
 * transposed operand here) goes to OpenBLAS; *fallbacks counts them. */
static void s_im2col(const s_conv_t *c, const troupe_bench_gemm_lib_t *lib0, int reps, double *gemm,
                     double *total, int *fallbacks)
{
    const troupe_bench_gemm_lib_t *lib[3] = {lib0, lib0, lib0};
    *fallbacks = 0;
    const int H = c->h, OH = H - 2, P = OH * OH, K = c->cin * 9, Co = c->cout;
    float *x = malloc(sizeof(float) * (size_t)s_batch * c->cin * H * H);
    float *dx = calloc((size_t)s_batch * c->cin * H * H, sizeof(float));
    float *w = malloc(sizeof(float) * (size_t)Co * K), *dw = malloc(sizeof(float) * (size_t)Co * K);
    float *y = malloc(sizeof(float) * (size_t)s_batch * Co * P);
    float *dy = malloc(sizeof(float) * (size_t)s_batch * Co * P);
    float *cols = malloc(sizeof(float) * (size_t)K * P),
          *dcols = malloc(sizeof(float) * (size_t)K * P);
    uint64_t seed = 3;
    for (size_t i = 0; i < (size_t)s_batch * c->cin * H * H; i++)
        x[i] = (float)s_rand(&seed);
    for (size_t i = 0; i < (size_t)Co * K; i++)
        w[i] = (float)s_rand(&seed);
    for (size_t i = 0; i < (size_t)s_batch * Co * P; i++)
        dy[i] = (float)s_rand(&seed);
    /* forward: Y[Co x P] = W[Co x K] cols[K x P]; weight: dW[Co x K] += dY[Co x P] cols^T;
     * input: dcols[K x P] = W^T dY */
    troupe_bench_gemm_t g[3] = {
        {false, false, Co, P, K, w, cols, y, K, P, P, 0.0f},
        {false, true, Co, K, P, dy, cols, dw, P, P, K, 1.0f},
        {true, false, K, P, Co, w, dy, dcols, K, P, P, 0.0f},
    };
    void *plan[3] = {NULL, NULL, NULL};
    *gemm = *total = 1e30;
    for (int i = 0; i < 3; i++)
        if (lib[i]->prepare(&g[i], &plan[i]) != NULL) {
            lib[i] = &troupe_bench_gemm_openblas;
            (*fallbacks)++;
            if (lib[i]->prepare(&g[i], &plan[i]) != NULL) {
                fprintf(stderr, "no library takes product %d\n", i);
                exit(1);
            }
        }
    for (int k = 0; k < reps + 1; k++) {
        int64_t tg = 0, t0 = troupe_now_ns();
        memset(dw, 0, sizeof(float) * (size_t)Co * K);
        for (int b = 0; b < s_batch; b++) {
            const float *xb = x + (size_t)b * c->cin * H * H;
            for (int i = 0; i < c->cin; i++) /* im2col: row (i, kh, kw), column (oh, ow) */
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++)
                        for (int oh = 0; oh < OH; oh++)
                            memcpy(cols + ((size_t)(i * 9 + kh * 3 + kw) * P + oh * OH),
                                   xb + ((size_t)i * H + oh + kh) * H + kw, sizeof(float) * OH);
            int64_t t1 = troupe_now_ns();
            g[0].c = y + (size_t)b * Co * P;
            g[1].a = g[2].b = dy + (size_t)b * Co * P;
            lib[0]->run(&g[0], plan[0]);
            lib[1]->run(&g[1], plan[1]);
            if (c->input_grad)
                lib[2]->run(&g[2], plan[2]);
            tg += troupe_now_ns() - t1;
            if (c->input_grad) { /* col2im */
                float *dxb = dx + (size_t)b * c->cin * H * H;
                memset(dxb, 0, sizeof(float) * (size_t)c->cin * H * H);
                for (int i = 0; i < c->cin; i++)
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++)
                            for (int oh = 0; oh < OH; oh++) {
                                const float *src =
                                    dcols + (size_t)(i * 9 + kh * 3 + kw) * P + oh * OH;
                                float *dst = dxb + ((size_t)i * H + oh + kh) * H + kw;
                                for (int ow = 0; ow < OH; ow++)
                                    dst[ow] += src[ow];
                            }
            }
        }
        double s = (double)(troupe_now_ns() - t0) * 1e-9;
        if (k > 0) {
            if (s < *total)
                *total = s;
            if ((double)tg * 1e-9 < *gemm)
                *gemm = (double)tg * 1e-9;
        }
    }
    for (int i = 0; i < 3; i++)
        lib[i]->release(plan[i]);
    free(x), free(dx), free(w), free(dw), free(y), free(dy), free(cols), free(dcols);
}

int main(int argc, char **argv)
{
    const char *bv = getenv("BENCH_CONV_BATCH");
    if (bv != NULL && *bv != '\0') {
        char *end = NULL;
        long n = strtol(bv, &end, 10);
        if (*end != '\0' || n < 1 || n > 4096) {
            fprintf(stderr, "bench_conv: BENCH_CONV_BATCH='%s' is not a batch in [1, 4096]\n", bv);
            return 2;
        }
        s_batch = (int)n;
    }
    const char *lv = getenv("BENCH_CONV_LAYOUT");
    if (lv != NULL && *lv != '\0') {
        if (strcmp(lv, "nhwc") != 0 && strcmp(lv, "nchw") != 0) {
            fprintf(stderr, "bench_conv: BENCH_CONV_LAYOUT='%s' is neither nchw nor nhwc\n", lv);
            return 2;
        }
        s_nhwc = strcmp(lv, "nhwc") == 0;
    }
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1)
        reps = 1;
    static const char *const lows[6] = {"auto",     "im2col", "shifted",
                                        "winograd", "folded", "winograd4"};
    troupe_nn_conv2d_lowering_t low = TROUPE_NN_CONV2D_AUTO;
    for (int i = 0; argc > 2 && i < 6; i++)
        if (strcmp(argv[2], lows[i]) == 0)
            low = (troupe_nn_conv2d_lowering_t)i;
    int only = argc > 3 ? atoi(argv[3]) : 0;
    bool fwd = argc > 4 && strcmp(argv[4], "fwd") == 0;
    const char *cache = getenv("TROUPE_CACHE_DIR");
    CHECK(troupe_config_set_cache_dir(cache ? cache : "bench-conv-cache"));
    const troupe_bench_gemm_lib_t *libs[2] = {&troupe_bench_gemm_openblas, NULL};
#if BENCH_HAVE_LIBXSMM
    libs[1] = &troupe_bench_gemm_libxsmm;
#endif
    for (int l = 0; l < 2; l++)
        if (libs[l])
            libs[l]->identify();
    printf("batch %d, single precision, one thread; seconds per forward + backward (best of %d); "
           "troupe lowering %s, layout %s\n",
           s_batch, reps, lows[low], s_nhwc ? "nhwc" : "nchw");
    printf("%-20s %9s %8s %10s %10s %10s %10s %8s\n", "conv", "GFLOP", "troupe", "oblas_gemm",
           "oblas_all", "xsmm_gemm", "xsmm_all", "all/troupe");
    for (size_t i = 0; i < sizeof s_convs / sizeof s_convs[0]; i++) {
        const s_conv_t *c = &s_convs[i];
        if (only && (size_t)only != i + 1)
            continue;
        double flop = 2.0 * s_batch * c->cout * (c->h - 2) * (c->h - 2) * c->cin * 9 *
                      (c->input_grad ? 3 : 2);
        double t = s_troupe(c, reps, low, fwd), g[2] = {0.0 / 0.0, 0.0 / 0.0},
               a[2] = {0.0 / 0.0, 0.0 / 0.0};
        int fb[2] = {0, 0};
        for (int l = 0; l < 2; l++)
            if (libs[l] && !only)
                s_im2col(c, libs[l], reps, &g[l], &a[l], &fb[l]);
        double best = a[0] < a[1] || a[1] != a[1] ? a[0] : a[1];
        printf("%-20s %9.3f %8.4f %10.4f %10.4f %10.4f %10.4f %8.3f  troupe %.1f GFLOP/s, "
               "best GEMMs %.1f GFLOP/s%s\n",
               c->name, flop * 1e-9, t, g[0], a[0], g[1], a[1], best / t, flop * 1e-9 / t,
               flop * 1e-9 / (g[0] < g[1] || g[1] != g[1] ? g[0] : g[1]),
               fb[1] ? " (xsmm: transposed products on OpenBLAS)" : "");
        fflush(stdout);
    }
    return 0;
}
