/* troupe — the element-wise reductions the transport runs itself (ring buckets, see actor.c).
 * Compiled at -O3 whatever the build type (transport/CMakeLists.txt) so the loops vectorize:
 * they are memory-bound and, at -O2, GCC leaves them scalar. */
#include "transport/mpi/transport_impl.h"

#include <stdint.h>

#define S_LOOP(T)                                                                                  \
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
                d[i] += x[i];                                                                      \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

void troupe__reduce_into(troupe__red_type_t type, troupe_reduce_op_t op, void *restrict dst,
                         const void *restrict src, int64_t n)
{
    switch (type) {
    case TROUPE__RED_F32:
        S_LOOP(float);
        break;
    case TROUPE__RED_F64:
        S_LOOP(double);
        break;
    case TROUPE__RED_I32:
        S_LOOP(int32_t);
        break;
    case TROUPE__RED_I64:
        S_LOOP(int64_t);
        break;
    case TROUPE__RED_U32:
        S_LOOP(uint32_t);
        break;
    case TROUPE__RED_U64:
        S_LOOP(uint64_t);
        break;
    case TROUPE__RED_NONE:
        break;
    }
}
