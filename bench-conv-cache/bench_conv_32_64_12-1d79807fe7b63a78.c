/* troupe compiler/cgen: routine bench_conv_32_64_12, c dialect. Generated code; do not edit.
 * Entry: void bench_conv_32_64_12_entry(void **args), args[k] = the k-th parameter's pointer (static index: pointer to int64_t).
 * Parameters (call order):
 *   0: const float *restrict n25_x -- node #25, single 128x32x12x12, read
 *   1: const float *restrict n27_w -- node #27, single 64x32x3x3, read
 *   2: const float *restrict n29_b -- node #29, single 64, read
 *   3: const float *restrict n33_r -- node #33, single 128x64x10x10, read
 *   4: float *n26_x_grad -- node #26, single 128x32x12x12, read, written
 *   5: float *n28_w_grad -- node #28, single 64x32x3x3, read, written
 *   6: float *n30_b_grad -- node #30, single 64, read, written
 *   7: float *n31_conv2d -- node #31, single 128x64x10x10, read, written
 *   8: float *n32_im2col -- node #32, single 128x32x3x3x10x10, read, written
 *   9: float *n34_loss -- node #34, single 1, read, written
 *   10: float *n36_conv2d_grad -- node #36, single 128x64x10x10, read, written
 *   11: float *n37_im2col_grad -- node #37, single 128x32x3x3x10x10, read, written
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

void bench_conv_32_64_12(const float *restrict n25_x, const float *restrict n27_w, const float *restrict n29_b, const float *restrict n33_r, float *n26_x_grad, float *n28_w_grad, float *n30_b_grad, float *n31_conv2d, float *n32_im2col, float *n34_loss, float *n36_conv2d_grad, float *n37_im2col_grad)
{
    /* Main logic. */
    /* conv3 32->64 12x12 */
    for (int64_t i0 = 0; i0 <= 127; ++i0) {
        for (int64_t i1 = 0; i1 <= 63; ++i1) {
            for (int64_t i2 = 0; i2 <= 9; ++i2) {
                for (int64_t i3 = 0; i3 <= 9; ++i3) {
                    n31_conv2d[6400*i0 + 100*i1 + 10*i2 + i3] = n29_b[i1];
                }
            }
        }
    }
    for (int64_t i4 = 0; i4 <= 127; ++i4) {
        for (int64_t i5 = 0; i5 <= 31; ++i5) {
            for (int64_t i6 = 0; i6 <= 2; ++i6) {
                for (int64_t i7 = 0; i7 <= 2; ++i7) {
                    for (int64_t i8 = 0; i8 <= 9; ++i8) {
                        for (int64_t i9 = 0; i9 <= 9; ++i9) {
                            n32_im2col[28800*i4 + 900*i5 + 300*i6 + 100*i7 + 10*i8 + i9] = n25_x[4608*i4 + 144*i5 + 12*i6 + 12*i8 + i7 + i9];
                        }
                    }
                }
            }
        }
    }
    for (int64_t i10 = 0; i10 < 128; ++i10) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 0, 64, 100, 288, 1.0f, &n27_w[0], 288, &n32_im2col[28800*i10], 100, 1.0f, &n31_conv2d[6400*i10], 100);
        } else {
            const float *g_a = &n27_w[0];
            const float *g_b = &n32_im2col[28800*i10];
            float *g_c = &n31_conv2d[6400*i10];
            for (int64_t g_i = 0; g_i < 64; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 288; g_k += 8) {
                    const float g_a0 = g_a[g_i * 288 + g_k + 0];
                    const float g_a1 = g_a[g_i * 288 + g_k + 1];
                    const float g_a2 = g_a[g_i * 288 + g_k + 2];
                    const float g_a3 = g_a[g_i * 288 + g_k + 3];
                    const float g_a4 = g_a[g_i * 288 + g_k + 4];
                    const float g_a5 = g_a[g_i * 288 + g_k + 5];
                    const float g_a6 = g_a[g_i * 288 + g_k + 6];
                    const float g_a7 = g_a[g_i * 288 + g_k + 7];
                    for (int64_t g_j = 0; g_j < 100; ++g_j) {
                        float g_v = g_c[g_i * 100 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 100 + g_j], g_v);
                        g_v = fmaf(g_a1, g_b[(g_k + 1) * 100 + g_j], g_v);
                        g_v = fmaf(g_a2, g_b[(g_k + 2) * 100 + g_j], g_v);
                        g_v = fmaf(g_a3, g_b[(g_k + 3) * 100 + g_j], g_v);
                        g_v = fmaf(g_a4, g_b[(g_k + 4) * 100 + g_j], g_v);
                        g_v = fmaf(g_a5, g_b[(g_k + 5) * 100 + g_j], g_v);
                        g_v = fmaf(g_a6, g_b[(g_k + 6) * 100 + g_j], g_v);
                        g_v = fmaf(g_a7, g_b[(g_k + 7) * 100 + g_j], g_v);
                        g_c[g_i * 100 + g_j] = g_v;
                    }
                }
                for (; g_k < 288; ++g_k) {
                    const float g_a0 = g_a[g_i * 288 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 100; ++g_j) {
                        float g_v = g_c[g_i * 100 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 100 + g_j], g_v);
                        g_c[g_i * 100 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 1; ++zi) n34_loss[zi] = 0;
    for (int64_t i17 = 0; i17 <= 127; ++i17) {
        for (int64_t i18 = 0; i18 <= 63; ++i18) {
            for (int64_t i19 = 0; i19 <= 9; ++i19) {
                for (int64_t i20 = 0; i20 <= 9; ++i20) {
                    n34_loss[0] = fmaf((n31_conv2d[6400*i17 + 100*i18 + 10*i19 + i20]), (n33_r[6400*i17 + 100*i18 + 10*i19 + i20]), (n34_loss[0]));
                }
            }
        }
    }
    /* end */
    /* backward: conv3 32->64 12x12 */
    for (int64_t i21 = 0; i21 <= 127; ++i21) {
        for (int64_t i22 = 0; i22 <= 63; ++i22) {
            for (int64_t i23 = 0; i23 <= 9; ++i23) {
                for (int64_t i24 = 0; i24 <= 9; ++i24) {
                    n36_conv2d_grad[6400*i21 + 100*i22 + 10*i23 + i24] = n33_r[6400*i21 + 100*i22 + 10*i23 + i24];
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 18432; ++zi) n28_w_grad[zi] = 0;
    for (int64_t i29 = 0; i29 < 128; ++i29) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 1, 64, 288, 100, 1.0f, &n36_conv2d_grad[6400*i29], 100, &n32_im2col[28800*i29], 100, 1.0f, &n28_w_grad[0], 288);
        } else {
            const float *g_a = &n36_conv2d_grad[6400*i29];
            const float *g_b = &n32_im2col[28800*i29];
            float *g_c = &n28_w_grad[0];
            for (int64_t g_i = 0; g_i < 64; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 100; g_k += 8) {
                    const float g_a0 = g_a[g_i * 100 + g_k + 0];
                    const float g_a1 = g_a[g_i * 100 + g_k + 1];
                    const float g_a2 = g_a[g_i * 100 + g_k + 2];
                    const float g_a3 = g_a[g_i * 100 + g_k + 3];
                    const float g_a4 = g_a[g_i * 100 + g_k + 4];
                    const float g_a5 = g_a[g_i * 100 + g_k + 5];
                    const float g_a6 = g_a[g_i * 100 + g_k + 6];
                    const float g_a7 = g_a[g_i * 100 + g_k + 7];
                    for (int64_t g_j = 0; g_j < 288; ++g_j) {
                        float g_v = g_c[g_i * 288 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 100 + g_k + 0], g_v);
                        g_v = fmaf(g_a1, g_b[g_j * 100 + g_k + 1], g_v);
                        g_v = fmaf(g_a2, g_b[g_j * 100 + g_k + 2], g_v);
                        g_v = fmaf(g_a3, g_b[g_j * 100 + g_k + 3], g_v);
                        g_v = fmaf(g_a4, g_b[g_j * 100 + g_k + 4], g_v);
                        g_v = fmaf(g_a5, g_b[g_j * 100 + g_k + 5], g_v);
                        g_v = fmaf(g_a6, g_b[g_j * 100 + g_k + 6], g_v);
                        g_v = fmaf(g_a7, g_b[g_j * 100 + g_k + 7], g_v);
                        g_c[g_i * 288 + g_j] = g_v;
                    }
                }
                for (; g_k < 100; ++g_k) {
                    const float g_a0 = g_a[g_i * 100 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 288; ++g_j) {
                        float g_v = g_c[g_i * 288 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 100 + g_k + 0], g_v);
                        g_c[g_i * 288 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t i32 = 0; i32 < 128; ++i32) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(1, 0, 288, 100, 64, 1.0f, &n27_w[0], 288, &n36_conv2d_grad[6400*i32], 100, 0.0f, &n37_im2col_grad[28800*i32], 100);
        } else {
            float *g_z = &n37_im2col_grad[28800*i32];
            for (int64_t zi = 0; zi < 28800; ++zi) g_z[zi] = 0;
            const float *g_a = &n27_w[0];
            const float *g_b = &n36_conv2d_grad[6400*i32];
            float *g_c = &n37_im2col_grad[28800*i32];
            for (int64_t g_i = 0; g_i < 288; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 64; g_k += 8) {
                    const float g_a0 = g_a[(g_k + 0) * 288 + g_i];
                    const float g_a1 = g_a[(g_k + 1) * 288 + g_i];
                    const float g_a2 = g_a[(g_k + 2) * 288 + g_i];
                    const float g_a3 = g_a[(g_k + 3) * 288 + g_i];
                    const float g_a4 = g_a[(g_k + 4) * 288 + g_i];
                    const float g_a5 = g_a[(g_k + 5) * 288 + g_i];
                    const float g_a6 = g_a[(g_k + 6) * 288 + g_i];
                    const float g_a7 = g_a[(g_k + 7) * 288 + g_i];
                    for (int64_t g_j = 0; g_j < 100; ++g_j) {
                        float g_v = g_c[g_i * 100 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 100 + g_j], g_v);
                        g_v = fmaf(g_a1, g_b[(g_k + 1) * 100 + g_j], g_v);
                        g_v = fmaf(g_a2, g_b[(g_k + 2) * 100 + g_j], g_v);
                        g_v = fmaf(g_a3, g_b[(g_k + 3) * 100 + g_j], g_v);
                        g_v = fmaf(g_a4, g_b[(g_k + 4) * 100 + g_j], g_v);
                        g_v = fmaf(g_a5, g_b[(g_k + 5) * 100 + g_j], g_v);
                        g_v = fmaf(g_a6, g_b[(g_k + 6) * 100 + g_j], g_v);
                        g_v = fmaf(g_a7, g_b[(g_k + 7) * 100 + g_j], g_v);
                        g_c[g_i * 100 + g_j] = g_v;
                    }
                }
                for (; g_k < 64; ++g_k) {
                    const float g_a0 = g_a[(g_k + 0) * 288 + g_i];
                    for (int64_t g_j = 0; g_j < 100; ++g_j) {
                        float g_v = g_c[g_i * 100 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 100 + g_j], g_v);
                        g_c[g_i * 100 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 589824; ++zi) n26_x_grad[zi] = 0;
    for (int64_t i39 = 0; i39 <= 127; ++i39) {
        for (int64_t i40 = 0; i40 <= 31; ++i40) {
            for (int64_t i41 = 0; i41 <= 2; ++i41) {
                for (int64_t i42 = 0; i42 <= 2; ++i42) {
                    for (int64_t i43 = 0; i43 <= 9; ++i43) {
                        for (int64_t i44 = 0; i44 <= 9; ++i44) {
                            n26_x_grad[4608*i39 + 144*i40 + 12*i41 + 12*i43 + i42 + i44] = ((n26_x_grad[4608*i39 + 144*i40 + 12*i41 + 12*i43 + i42 + i44]) + (n37_im2col_grad[28800*i39 + 900*i40 + 300*i41 + 100*i42 + 10*i43 + i44]));
                        }
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 64; ++zi) n30_b_grad[zi] = 0;
    for (int64_t i45 = 0; i45 <= 63; ++i45) {
        for (int64_t i46 = 0; i46 <= 127; ++i46) {
            for (int64_t i47 = 0; i47 <= 9; ++i47) {
                for (int64_t i48 = 0; i48 <= 9; ++i48) {
                    n30_b_grad[i45] = ((n30_b_grad[i45]) + (n36_conv2d_grad[6400*i46 + 100*i45 + 10*i47 + i48]));
                }
            }
        }
    }
    /* end */
}

void bench_conv_32_64_12_entry(void **args)
{
    bench_conv_32_64_12(
        (const float *)args[0],
        (const float *)args[1],
        (const float *)args[2],
        (const float *)args[3],
        (float *)args[4],
        (float *)args[5],
        (float *)args[6],
        (float *)args[7],
        (float *)args[8],
        (float *)args[9],
        (float *)args[10],
        (float *)args[11]);
}

void bench_conv_32_64_12_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d);
void bench_conv_32_64_12_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d)
{
    troupe_sgemm = s;
    troupe_dgemm = d;
}
