/* troupe — parameter initialisers from a Threefry4x32 stream (see init.h). */
#include "nn/init.h"

#include "ir/ops.h"

#include <math.h>

#define S_TAG 0x696e6974u /* "init" */
#define S_TWO_PI 6.28318530717958647692

/* The two doubles in [0, 1) of draw j. */
static troupe_status_t s_draw(uint64_t seed, uint64_t j, double u[2])
{
    troupe_uint4x32_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32), S_TAG, 0}};
    troupe_uint4x32_t ctr = {{(uint32_t)j, (uint32_t)(j >> 32), 0, 0}};
    return troupe_uint4x32_to_prec_uniform(TROUPE_PREC_DOUBLE, troupe_threefry4x32_crypto(key, ctr),
                                           u, NULL);
}

troupe_status_t troupe_nn_init_uniform(double *out, size_t count, double lo, double hi,
                                       uint64_t seed)
{
    if (!out && count > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_init_uniform: NULL out");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nn_init_uniform: bounds [%g, %g) are not finite and ordered",
                             lo, hi);
    for (size_t i = 0; i < count; i++) {
        double u[2];
        TROUPE_RETURN_IF_ERROR(s_draw(seed, i, u));
        out[i] = lo + (hi - lo) * u[0];
    }
    return TROUPE_OK;
}

troupe_status_t troupe_nn_init_normal(double *out, size_t count, double mean, double std,
                                      uint64_t seed)
{
    if (!out && count > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_nn_init_normal: NULL out");
    if (!isfinite(mean) || !isfinite(std) || std < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nn_init_normal: mean %g, std %g (std must be finite and >= 0)",
                             mean, std);
    for (size_t j = 0; 2 * j < count; j++) {
        double u[2];
        TROUPE_RETURN_IF_ERROR(s_draw(seed, j, u));
        double rad = sqrt(-2.0 * log(1.0 - u[0])); /* 1 - u in (0, 1] */
        out[2 * j] = mean + std * rad * cos(S_TWO_PI * u[1]);
        if (2 * j + 1 < count)
            out[2 * j + 1] = mean + std * rad * sin(S_TWO_PI * u[1]);
    }
    return TROUPE_OK;
}

troupe_status_t troupe_nn_init_kaiming(double *out, size_t count, int64_t fan_in, double gain,
                                       uint64_t seed)
{
    if (fan_in < 1 || !isfinite(gain) || gain < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_nn_init_kaiming: fan_in %lld must be >= 1 and gain %g >= 0",
                             (long long)fan_in, gain);
    return troupe_nn_init_normal(out, count, 0.0, gain / sqrt((double)fan_in), seed);
}
