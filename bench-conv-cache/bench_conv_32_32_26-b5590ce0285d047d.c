/* troupe compiler/cgen: routine bench_conv_32_32_26, c dialect. Generated code; do not edit.
 * Entry: void bench_conv_32_32_26_entry(void **args), args[k] = the k-th parameter's pointer (static index: pointer to int64_t).
 * Parameters (call order):
 *   0: const float *restrict n12_x -- node #12, single 128x32x26x26, read
 *   1: const float *restrict n14_w -- node #14, single 32x32x3x3, read
 *   2: const float *restrict n16_b -- node #16, single 32, read
 *   3: const float *restrict n20_r -- node #20, single 128x32x24x24, read
 *   4: float *n13_x_grad -- node #13, single 128x32x26x26, read, written
 *   5: float *n15_w_grad -- node #15, single 32x32x3x3, read, written
 *   6: float *n17_b_grad -- node #17, single 32, read, written
 *   7: float *n18_conv2d -- node #18, single 128x32x24x24, read, written
 *   8: float *n19_im2col -- node #19, single 128x32x3x3x24x24, read, written
 *   9: float *n21_loss -- node #21, single 1, read, written
 *   10: float *n23_conv2d_grad -- node #23, single 128x32x24x24, read, written
 *   11: float *n24_im2col_grad -- node #24, single 128x32x3x3x24x24, read, written
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

void bench_conv_32_32_26(const float *restrict n12_x, const float *restrict n14_w, const float *restrict n16_b, const float *restrict n20_r, float *n13_x_grad, float *n15_w_grad, float *n17_b_grad, float *n18_conv2d, float *n19_im2col, float *n21_loss, float *n23_conv2d_grad, float *n24_im2col_grad)
{
    /* Main logic. */
    /* conv2 32->32 26x26 */
    for (int64_t i0 = 0; i0 <= 127; ++i0) {
        for (int64_t i1 = 0; i1 <= 31; ++i1) {
            for (int64_t i2 = 0; i2 <= 23; ++i2) {
                for (int64_t i3 = 0; i3 <= 23; ++i3) {
                    n18_conv2d[18432*i0 + 576*i1 + 24*i2 + i3] = n16_b[i1];
                }
            }
        }
    }
    for (int64_t i4 = 0; i4 <= 127; ++i4) {
        for (int64_t i5 = 0; i5 <= 31; ++i5) {
            for (int64_t i6 = 0; i6 <= 2; ++i6) {
                for (int64_t i7 = 0; i7 <= 2; ++i7) {
                    for (int64_t i8 = 0; i8 <= 23; ++i8) {
                        for (int64_t i9 = 0; i9 <= 23; ++i9) {
                            n19_im2col[165888*i4 + 5184*i5 + 1728*i6 + 576*i7 + 24*i8 + i9] = n12_x[21632*i4 + 676*i5 + 26*i6 + 26*i8 + i7 + i9];
                        }
                    }
                }
            }
        }
    }
    for (int64_t i10 = 0; i10 < 128; ++i10) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 0, 32, 576, 288, 1.0f, &n14_w[0], 288, &n19_im2col[165888*i10], 576, 1.0f, &n18_conv2d[18432*i10], 576);
        } else {
            const float *g_a = &n14_w[0];
            const float *g_b = &n19_im2col[165888*i10];
            float *g_c = &n18_conv2d[18432*i10];
            for (int64_t g_i = 0; g_i < 32; ++g_i) {
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
                    for (int64_t g_j = 0; g_j < 576; ++g_j) {
                        float g_v = g_c[g_i * 576 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 576 + g_j], g_v);
                        g_v = fmaf(g_a1, g_b[(g_k + 1) * 576 + g_j], g_v);
                        g_v = fmaf(g_a2, g_b[(g_k + 2) * 576 + g_j], g_v);
                        g_v = fmaf(g_a3, g_b[(g_k + 3) * 576 + g_j], g_v);
                        g_v = fmaf(g_a4, g_b[(g_k + 4) * 576 + g_j], g_v);
                        g_v = fmaf(g_a5, g_b[(g_k + 5) * 576 + g_j], g_v);
                        g_v = fmaf(g_a6, g_b[(g_k + 6) * 576 + g_j], g_v);
                        g_v = fmaf(g_a7, g_b[(g_k + 7) * 576 + g_j], g_v);
                        g_c[g_i * 576 + g_j] = g_v;
                    }
                }
                for (; g_k < 288; ++g_k) {
                    const float g_a0 = g_a[g_i * 288 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 576; ++g_j) {
                        float g_v = g_c[g_i * 576 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 576 + g_j], g_v);
                        g_c[g_i * 576 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 1; ++zi) n21_loss[zi] = 0;
    for (int64_t i17 = 0; i17 <= 127; ++i17) {
        for (int64_t i18 = 0; i18 <= 31; ++i18) {
            for (int64_t i19 = 0; i19 <= 23; ++i19) {
                for (int64_t i20 = 0; i20 <= 23; ++i20) {
                    n21_loss[0] = fmaf((n18_conv2d[18432*i17 + 576*i18 + 24*i19 + i20]), (n20_r[18432*i17 + 576*i18 + 24*i19 + i20]), (n21_loss[0]));
                }
            }
        }
    }
    /* end */
    /* backward: conv2 32->32 26x26 */
    for (int64_t i21 = 0; i21 <= 127; ++i21) {
        for (int64_t i22 = 0; i22 <= 31; ++i22) {
            for (int64_t i23 = 0; i23 <= 23; ++i23) {
                for (int64_t i24 = 0; i24 <= 23; ++i24) {
                    n23_conv2d_grad[18432*i21 + 576*i22 + 24*i23 + i24] = n20_r[18432*i21 + 576*i22 + 24*i23 + i24];
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 9216; ++zi) n15_w_grad[zi] = 0;
    for (int64_t i29 = 0; i29 < 128; ++i29) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(0, 1, 32, 288, 576, 1.0f, &n23_conv2d_grad[18432*i29], 576, &n19_im2col[165888*i29], 576, 1.0f, &n15_w_grad[0], 288);
        } else {
            const float *g_a = &n23_conv2d_grad[18432*i29];
            const float *g_b = &n19_im2col[165888*i29];
            float *g_c = &n15_w_grad[0];
            for (int64_t g_i = 0; g_i < 32; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 576; g_k += 8) {
                    const float g_a0 = g_a[g_i * 576 + g_k + 0];
                    const float g_a1 = g_a[g_i * 576 + g_k + 1];
                    const float g_a2 = g_a[g_i * 576 + g_k + 2];
                    const float g_a3 = g_a[g_i * 576 + g_k + 3];
                    const float g_a4 = g_a[g_i * 576 + g_k + 4];
                    const float g_a5 = g_a[g_i * 576 + g_k + 5];
                    const float g_a6 = g_a[g_i * 576 + g_k + 6];
                    const float g_a7 = g_a[g_i * 576 + g_k + 7];
                    for (int64_t g_j = 0; g_j < 288; ++g_j) {
                        float g_v = g_c[g_i * 288 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 576 + g_k + 0], g_v);
                        g_v = fmaf(g_a1, g_b[g_j * 576 + g_k + 1], g_v);
                        g_v = fmaf(g_a2, g_b[g_j * 576 + g_k + 2], g_v);
                        g_v = fmaf(g_a3, g_b[g_j * 576 + g_k + 3], g_v);
                        g_v = fmaf(g_a4, g_b[g_j * 576 + g_k + 4], g_v);
                        g_v = fmaf(g_a5, g_b[g_j * 576 + g_k + 5], g_v);
                        g_v = fmaf(g_a6, g_b[g_j * 576 + g_k + 6], g_v);
                        g_v = fmaf(g_a7, g_b[g_j * 576 + g_k + 7], g_v);
                        g_c[g_i * 288 + g_j] = g_v;
                    }
                }
                for (; g_k < 576; ++g_k) {
                    const float g_a0 = g_a[g_i * 576 + g_k + 0];
                    for (int64_t g_j = 0; g_j < 288; ++g_j) {
                        float g_v = g_c[g_i * 288 + g_j];
                        g_v = fmaf(g_a0, g_b[g_j * 576 + g_k + 0], g_v);
                        g_c[g_i * 288 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t i32 = 0; i32 < 128; ++i32) { /* a call each */
        if (troupe_sgemm != 0) {
            troupe_sgemm(1, 0, 288, 576, 32, 1.0f, &n14_w[0], 288, &n23_conv2d_grad[18432*i32], 576, 0.0f, &n24_im2col_grad[165888*i32], 576);
        } else {
            float *g_z = &n24_im2col_grad[165888*i32];
            for (int64_t zi = 0; zi < 165888; ++zi) g_z[zi] = 0;
            const float *g_a = &n14_w[0];
            const float *g_b = &n23_conv2d_grad[18432*i32];
            float *g_c = &n24_im2col_grad[165888*i32];
            for (int64_t g_i = 0; g_i < 288; ++g_i) {
                int64_t g_k = 0;
                for (; g_k + 8 <= 32; g_k += 8) {
                    const float g_a0 = g_a[(g_k + 0) * 288 + g_i];
                    const float g_a1 = g_a[(g_k + 1) * 288 + g_i];
                    const float g_a2 = g_a[(g_k + 2) * 288 + g_i];
                    const float g_a3 = g_a[(g_k + 3) * 288 + g_i];
                    const float g_a4 = g_a[(g_k + 4) * 288 + g_i];
                    const float g_a5 = g_a[(g_k + 5) * 288 + g_i];
                    const float g_a6 = g_a[(g_k + 6) * 288 + g_i];
                    const float g_a7 = g_a[(g_k + 7) * 288 + g_i];
                    for (int64_t g_j = 0; g_j < 576; ++g_j) {
                        float g_v = g_c[g_i * 576 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 576 + g_j], g_v);
                        g_v = fmaf(g_a1, g_b[(g_k + 1) * 576 + g_j], g_v);
                        g_v = fmaf(g_a2, g_b[(g_k + 2) * 576 + g_j], g_v);
                        g_v = fmaf(g_a3, g_b[(g_k + 3) * 576 + g_j], g_v);
                        g_v = fmaf(g_a4, g_b[(g_k + 4) * 576 + g_j], g_v);
                        g_v = fmaf(g_a5, g_b[(g_k + 5) * 576 + g_j], g_v);
                        g_v = fmaf(g_a6, g_b[(g_k + 6) * 576 + g_j], g_v);
                        g_v = fmaf(g_a7, g_b[(g_k + 7) * 576 + g_j], g_v);
                        g_c[g_i * 576 + g_j] = g_v;
                    }
                }
                for (; g_k < 32; ++g_k) {
                    const float g_a0 = g_a[(g_k + 0) * 288 + g_i];
                    for (int64_t g_j = 0; g_j < 576; ++g_j) {
                        float g_v = g_c[g_i * 576 + g_j];
                        g_v = fmaf(g_a0, g_b[(g_k + 0) * 576 + g_j], g_v);
                        g_c[g_i * 576 + g_j] = g_v;
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 2768896; ++zi) n13_x_grad[zi] = 0;
    for (int64_t i39 = 0; i39 <= 127; ++i39) {
        for (int64_t i40 = 0; i40 <= 31; ++i40) {
            for (int64_t i41 = 0; i41 <= 2; ++i41) {
                for (int64_t i42 = 0; i42 <= 2; ++i42) {
                    for (int64_t i43 = 0; i43 <= 23; ++i43) {
                        for (int64_t i44 = 0; i44 <= 23; ++i44) {
                            n13_x_grad[21632*i39 + 676*i40 + 26*i41 + 26*i43 + i42 + i44] = ((n13_x_grad[21632*i39 + 676*i40 + 26*i41 + 26*i43 + i42 + i44]) + (n24_im2col_grad[165888*i39 + 5184*i40 + 1728*i41 + 576*i42 + 24*i43 + i44]));
                        }
                    }
                }
            }
        }
    }
    for (int64_t zi = 0; zi < 32; ++zi) n17_b_grad[zi] = 0;
    for (int64_t i45 = 0; i45 <= 31; ++i45) {
        for (int64_t i46 = 0; i46 <= 127; ++i46) {
            for (int64_t i47 = 0; i47 <= 23; ++i47) {
                for (int64_t i48 = 0; i48 <= 23; ++i48) {
                    n17_b_grad[i45] = ((n17_b_grad[i45]) + (n23_conv2d_grad[18432*i46 + 576*i45 + 24*i47 + i48]));
                }
            }
        }
    }
    /* end */
}

void bench_conv_32_32_26_entry(void **args)
{
    bench_conv_32_32_26(
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

void bench_conv_32_32_26_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d);
void bench_conv_32_32_26_gemm_hooks(troupe_sgemm_fn s, troupe_dgemm_fn d)
{
    troupe_sgemm = s;
    troupe_dgemm = d;
}
