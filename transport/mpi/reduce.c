/* troupe — the element-wise reductions the transport runs itself (ring.c, bucket.c's staging,
 * shm_allreduce.c, engine.c's in-place means). Compiled at -O3 whatever the build type
 * (transport/CMakeLists.txt) so the loops vectorize: they are memory-bound and, at -O2, GCC leaves
 * them scalar. */
#include "transport/mpi/transport_impl.h"

#include <stdint.h>
#include <string.h>

/* bfloat16 <-> single by bits (bfloat16 is the top half of a single): round to nearest even,
 * NaN kept quiet; the same bits as ir/prec's troupe_single_to_bfloat16 (test_transport). */
static inline uint16_t s_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float s_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void s_reduce_bf16(troupe_reduce_op_t op, uint16_t *restrict d, const uint16_t *restrict x,
                          int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float a = s_from_bf16(d[i]), b = s_from_bf16(x[i]);
        float r = op == TROUPE_REDUCE_MAX   ? (b > a ? b : a)
                  : op == TROUPE_REDUCE_MIN ? (b < a ? b : a)
                                            : a + b;
        d[i] = s_to_bf16(r);
    }
}

void troupe__bf16_pack(uint16_t *restrict dst, const float *restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = s_to_bf16(src[i]);
}

void troupe__bf16_unpack(float *restrict dst, const uint16_t *restrict src, int64_t n, int divisor)
{
    if (divisor == 1) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = s_from_bf16(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) /* as the transport's mean: the quotient rounded once */
        dst[i] = (float)((double)s_from_bf16(src[i]) / (double)divisor);
}

/* T: the element type; U: the type the sum is computed in (unsigned for integers: wraps
 * modulo 2^n like MPI_SUM in practice, where a signed overflow would be undefined). */
#define S_LOOP(T, U)                                                                               \
    do {                                                                                           \
        T *restrict d = dst;                                                                       \
        const T *restrict x = src;                                                                 \
        switch (op) {                                                                              \
        case TROUPE_REDUCE_MAX:                                                                    \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i] = x[i] > d[i] ? x[i] : d[i];                                                  \
            break;                                                                                 \
        case TROUPE_REDUCE_MIN:                                                                    \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i] = x[i] < d[i] ? x[i] : d[i];                                                  \
            break;                                                                                 \
        default: /* sum, mean */                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i] = (T)((U)d[i] + (U)x[i]);                                                     \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* The cases of a switch over the types reduced natively: M(T, U) for each, T the element type,
 * U the type sums are computed in (unsigned for integers: wrap-around, no overflow UB). */
#define S_NATIVE_CASES(M)                                                                          \
    case TROUPE__RED_F32:                                                                          \
        M(float, float);                                                                           \
        break;                                                                                     \
    case TROUPE__RED_F64:                                                                          \
        M(double, double);                                                                         \
        break;                                                                                     \
    case TROUPE__RED_I32:                                                                          \
        M(int32_t, uint32_t);                                                                      \
        break;                                                                                     \
    case TROUPE__RED_I64:                                                                          \
        M(int64_t, uint64_t);                                                                      \
        break;                                                                                     \
    case TROUPE__RED_U32:                                                                          \
        M(uint32_t, uint32_t);                                                                     \
        break;                                                                                     \
    case TROUPE__RED_U64:                                                                          \
        M(uint64_t, uint64_t);                                                                     \
        break;

void troupe__reduce_into(troupe__red_type_t type, troupe_reduce_op_t op, void *restrict dst,
                         const void *restrict src, int64_t n)
{
    switch (type) {
        S_NATIVE_CASES(S_LOOP)
    case TROUPE__RED_BF16:
        s_reduce_bf16(op, dst, src, n);
        break;
    case TROUPE__RED_NONE:
        break;
    }
}

#define S_DIV(T, EXPR)                                                                             \
    do {                                                                                           \
        T *d = x;                                                                                  \
        for (int64_t i = 0; i < n; i++)                                                            \
            d[i] = (EXPR);                                                                         \
    } while (0)

void troupe__divide_by(troupe__red_type_t type, void *x, int64_t n, int64_t divisor)
{
    switch (type) {
    case TROUPE__RED_F32: /* the quotient rounded once, as the staged paths' mean */
        S_DIV(float, (float)((double)d[i] / (double)divisor));
        break;
    case TROUPE__RED_F64:
        S_DIV(double, d[i] / (double)divisor);
        break;
    case TROUPE__RED_I32:
        S_DIV(int32_t, (int32_t)(d[i] / divisor));
        break;
    case TROUPE__RED_I64:
        S_DIV(int64_t, d[i] / divisor);
        break;
    case TROUPE__RED_U32:
        S_DIV(uint32_t, (uint32_t)(d[i] / (uint32_t)divisor));
        break;
    case TROUPE__RED_U64:
        S_DIV(uint64_t, d[i] / (uint64_t)divisor);
        break;
    case TROUPE__RED_BF16:
    case TROUPE__RED_NONE:
        break;
    }
}

/* T: the element type; U: the type sums are computed in (as S_LOOP). */
#define S_PAIR(T, U)                                                                               \
    do {                                                                                           \
        T *restrict x = a;                                                                         \
        T *restrict y = b;                                                                         \
        switch (op) {                                                                              \
        case TROUPE_REDUCE_MAX:                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T s = y[i] > x[i] ? y[i] : x[i];                                                   \
                x[i] = s;                                                                          \
                y[i] = s;                                                                          \
            }                                                                                      \
            break;                                                                                 \
        case TROUPE_REDUCE_MIN:                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T s = y[i] < x[i] ? y[i] : x[i];                                                   \
                x[i] = s;                                                                          \
                y[i] = s;                                                                          \
            }                                                                                      \
            break;                                                                                 \
        default: /* sum (a mean divides afterwards) */                                             \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T s = (T)((U)x[i] + (U)y[i]);                                                      \
                x[i] = s;                                                                          \
                y[i] = s;                                                                          \
            }                                                                                      \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

void troupe__reduce_pair(troupe__red_type_t type, troupe_reduce_op_t op, void *restrict a,
                         void *restrict b, int64_t n)
{
    switch (type) {
        S_NATIVE_CASES(S_PAIR)
    case TROUPE__RED_BF16:
    case TROUPE__RED_NONE:
        break;
    }
}
