/* troupe — helpers shared by the layer files of nn/ (not installed).
 *
 * Thread safety: as nn/nn.h. Ownership: nothing is allocated.
 */
#ifndef TROUPE_NN_LAYERS_IMPL_H
#define TROUPE_NN_LAYERS_IMPL_H

#include "base/status.h"
#include "nn/nn.h"

/* Most leading axes ("...") a layer passes through. */
#define TROUPE__NN_MAX_LEAD 4

/* Records an INVALID_ARGUMENT with the formatted message as the nn's sticky error. */
#define TROUPE__NN_BAD(nn, ...)                                                                    \
    troupe_nn_add((nn), troupe__error(TROUPE_INVALID_ARGUMENT, __VA_ARGS__), NULL)

/* Iterator letters of n leading axes: "ABCD"[0..n). buf holds n + 1 chars. */
static inline void troupe__nn_lead(int n, char *buf)
{
    for (int a = 0; a < n; a++)
        buf[a] = (char)('A' + a);
    buf[n] = '\0';
}

#endif
