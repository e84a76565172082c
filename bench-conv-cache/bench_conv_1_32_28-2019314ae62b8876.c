/* troupe compiler/cgen: routine bench_conv_1_32_28, c dialect. Generated code; do not edit.
 * Entry: void bench_conv_1_32_28_entry(void **args), args[k] = the k-th parameter's pointer (static index: pointer to int64_t).
 * Parameters (call order):
 *   0: const float *restrict n1_x -- node #1, single 128x1x28x28, read
 *   1: const float *restrict n2_w -- node #2, single 32x1x3x3, read
 *   2: const float *restrict n4_b -- node #4, single 32, read
 *   3: const float *restrict n8_r -- node #8, single 128x32x26x26, read
 *   4: float *n11_conv2d_grad -- node #11, single 128x32x26x26, read, written
 *   5: float *n3_w_grad -- node #3, single 32x1x3x3, read, written
 *   6: float *n5_b_grad -- node #5, single 32, read, written
 *   7: float *n6_conv2d -- node #6, single 128x32x26x26, read, written
 *   8: float *n7_im2col -- node #7, single 128x1x3x3x26x26, read, written
 *   9: float *n9_loss -- node #9, single 1, read, written
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__GNUC__)
#define TROUPE_FN static inline __attribute__((unused))
#else
#define TROUPE_FN static inline
#endif
#define TROUPE_INF_F ((float)INFINITY)
#define TROUPE_NAN_F ((float)NAN)
#define TROUPE_INF_D ((double)INFINITY)
#define TROUPE_NAN_D ((double)NAN)
/* No contraction of a*b+c into fma, and wrapping signed integer arithmetic: results must
 * match the interpreter bit for bit (compiler/interp.h). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "wrapv")
#endif
/* prelude: gemm */
typedef void (*troupe_sgemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *,
                                int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*troupe_dgemm_fn)(int, int, int64_t, int64_t, int64_t, double, const double *,
                                int64_t, const double *, int64_t, double, double *, int64_t);
#if defined(__GNUC__)
#define TROUPE_GEMM_HOOK static __attribute__((unused))
#else
#define TROUPE_GEMM_HOOK static
#endif
TROUPE_GEMM_HOOK troupe_sgemm_fn troupe_sgemm;
TROUPE_GEMM_HOOK troupe_dgemm_fn troupe_dgemm;

void bench_conv_1_32_28(const float *restrict n1_x, const float *restrict n2_w, const float *restrict n4_b, const float *restrict n8_r, float *n11_conv2d_grad, float *n3_w_grad, float *n5_b_grad, float *n6_conv2d, float *n7_im2col, float *n9_loss)
{
    /* Main logic. */
    /* conv1 1->32 28x28 */
    for (int64_t i0 = 0; i0 <= 127; ++i0) {
        for (int64_t i1 = 0; i1 <= 31; ++i1) {
            for (int64_t i2 = 0; i2 <= 25; ++i2) {
                for (int64_t i3 = 0; i3 <= 25; ++i3) {
                    n6_conv2d[21632*i0 + 676*i1 + 26*i2 + i3] = n4_b[i1];
                }
            }
        }
    }
    for (int64_t i4 = 0; i4 <= 127; ++i4) {
        for (int64_t i5 = 0; i5 <= 0; ++i5) {
            for (int64_t i6 = 0; i6 <= 2; ++i6) {
                for (int64_t i7 = 0; i7 <= 2; ++i7) {
                    for (int64_t i8 = 0; i8 <= 25; ++i8) {
                        for (int64_t i9 = 0; i9 <= 25; ++i9) {
                            n7_im2col[6084*i4 + 6084*i5 + 2028*i6 + 676*i7 + 26*i8 + i9] = n1_x[784*i4 + 784*i5 + 28*i6 + 28*i8 + i7 + i9];
                        }
                    }
                }
            }
        }
    }
    for (int64_t i10 = 0; i10 < 128; ++i10) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 0, 32, 676, 9, 1.0f, &n2_w[0], 9, &n7_im2col[6084*i10], 676, 1.0f, &n6_conv2d[21632*i10], 676);
        } else {
            const float *g_a = &n2_w[0];
            const float *g_b = &n7_im2col[6084*i10];
            float *g_c = &n6_conv2d[21632*i10];
            for (int64_t g_i = 0; g_i < 32; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 9; g_k += 8) {
                    const float g_a0 = g_a[g_i * 9 + g_k + 0];
                    const float g_a1 = g_a[g_i * 9 + g_k + 1];
                    const float g_a2 = g_a[g_i * 9 + g_k + 2];
                    const float g_a3 = g_a[g_i * 9 + g_k + 3];
                    const float g_a4 = g_a[g_i * 9 + g_k + 4];
                    const float g_a5 = g_a[g_i * 9 + g_k + 5];
                    const float g_a6 = g_a[g_i * 9 + g_k + 6];
                    const float g_a7 = g_a[g_i * 9 + g_k + 7];
                    for (int64_t g_j = 0; g_j < 676; ++g_j) {
                        float g_v = g_c[g_i * 676 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 676 + g_j], g_v);
                        g_v = fmaf(g_a1, g_b[(g_k + 1) * 676 + g_j], g_v);
                        g_v = fmaf(g_a2, g_b[(g_k + 2) * 676 + g_j], g_v);
                        g_v = fmaf(g_a3, g_b[(g_k + 3) * 676 + g_j], g_v);
                        g_v = fmaf(g_a4, g_b[(g_k + 4) * 676 + g_j], g_v);
                        g_v = fmaf(g_a5, g_b[(g_k + 5) * 676 + g_j], g_v);
                        g_v = fmaf(g_a6, g_b[(g_k + 6) * 676 + g_j], g_v);
                        g_v = fmaf(g_a7, g_b[(g_k + 7) * 676 + g_j], g_v);
                        g_c[g_i * 676 + g_j] = g_v;
                    }
                }
                for (; g_k < 9; ++g_k) {
                    const float g_a0 = g_a[g_i * 9 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 676; ++g_j) {
                        float g_v = g_c[g_i * 676 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 676 + g_j], g_v);
                        g_c[g_i * 676 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 1; ++zi) n9_loss[zi] = 0;
    for (int64_t i17 = 0; i17 <= 127; ++i17) {
        for (int64_t i18 = 0; i18 <= 31; ++i18) {
            for (int64_t i19 = 0; i19 <= 25; ++i19) {
                for (int64_t i20 = 0; i20 <= 25; ++i20) {
                    n9_loss[0] = fmaf((n6_conv2d[21632*i17 + 676*i18 + 26*i19 + i20]), (n8_r[21632*i17 + 676*i18 + 26*i19 + i20]), (n9_loss[0]));
                }
            }
        }
    }
    /* end */
    /* backward: conv1 1->32 28x28 */
    for (int64_t i21 = 0; i21 <= 127; ++i21) {
        for (int64_t i22 = 0; i22 <= 31; ++i22) {
            for (int64_t i23 = 0; i23 <= 25; ++i23) {
                for (int64_t i24 = 0; i24 <= 25; ++i24) {
                    n11_conv2d_grad[21632*i21 + 676*i22 + 26*i23 + i24] = n8_r[21632*i21 + 676*i22 + 26*i23 + i24];
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 288; ++zi) n3_w_grad[zi] = 0;
    for (int64_t i29 = 0; i29 < 128; ++i29) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 1, 32, 9, 676, 1.0f, &n11_conv2d_grad[21632*i29], 676, &n7_im2col[6084*i29], 676, 1.0f, &n3_w_grad[0], 9);
        } else {
            const float *g_a = &n11_conv2d_grad[21632*i29];
            const float *g_b = &n7_im2col[6084*i29];
            float *g_c = &n3_w_grad[0];
            for (int64_t g_i = 0; g_i < 32; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 676; g_k += 8) {
                    const float g_a0 = g_a[g_i * 676 + g_k + 0];
                    const float g_a1 = g_a[g_i * 676 + g_k + 1];
                    const float g_a2 = g_a[g_i * 676 + g_k + 2];
                    const float g_a3 = g_a[g_i * 676 + g_k + 3];
                    const float g_a4 = g_a[g_i * 676 + g_k + 4];
                    const float g_a5 = g_a[g_i * 676 + g_k + 5];
                    const float g_a6 = g_a[g_i * 676 + g_k + 6];
                    const float g_a7 = g_a[g_i * 676 + g_k + 7];
                    for (int64_t g_j = 0; g_j < 9; ++g_j) {
                        float g_v = g_c[g_i * 9 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 676 + g_k + 0], g_v);
                        g_v = fmaf(g_a1, g_b[g_j * 676 + g_k + 1], g_v);
                        g_v = fmaf(g_a2, g_b[g_j * 676 + g_k + 2], g_v);
                        g_v = fmaf(g_a3, g_b[g_j * 676 + g_k + 3], g_v);
                        g_v = fmaf(g_a4, g_b[g_j * 676 + g_k + 4], g_v);
                        g_v = fmaf(g_a5, g_b[g_j * 676 + g_k + 5], g_v);
                        g_v = fmaf(g_a6, g_b[g_j * 676 + g_k + 6], g_v);
                        g_v = fmaf(g_a7, g_b[g_j * 676 + g_k + 7], g_v);
                        g_c[g_i * 9 + g_j] = g_v;
                    }
                }
                for (; g_k < 676; ++g_k) {
                    const float g_a0 = g_a[g_i * 676 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 9; ++g_j) {
                        float g_v = g_c[g_i * 9 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 676 + g_k + 0], g_v);
                        g_c[g_i * 9 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 32; ++zi) n5_b_grad[zi] = 0;
    for (int64_t i32 = 0; i32 <= 31; ++i32) {
        for (int64_t i33 = 0; i33 <= 127; ++i33) {
            for (int64_t i34 = 0; i34 <= 25; ++i34) {
                for (int64_t i35 = 0; i35 <= 25; ++i35) {
                    n5_b_grad[i32] = ((n5_b_grad[i32]) + (n11_conv2d_grad[21632*i33 + 676*i32 + 26*i34 + i35]));
                }
            }
        }
    }
    /* end */
}

void bench_conv_1_32_28_entry(void **args)
{
    bench_conv_1_32_28(
        (const float *)args[0],
        (const float *)args[1],
        (const float *)args[2],
        (const float *)args[3],
        (float *)args[4],
        (float *)args[5],
        (float *)args[6],
        (float *)args[7],
        (float *)args[8],
        (float *)args[9]);
}

void bench_conv_1_32_28_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d);
void bench_conv_1_32_28_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d)
{
    troupe_sgemm = s;
    troupe_dgemm = d;
}
