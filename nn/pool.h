/* troupe — 2-d max and average pooling (PyTorch's max_pool2d and avg_pool2d without padding,
 * dilation or ceil_mode): forward assignments over affine indices, gradients derived by
 * nn/grad.h.
 *
 * x (B, C, H, W) -> y (B, C, OH, OW), OH = (H - KH) / stride_h + 1 (floor), the same for OW;
 * channels last, (B, H, W, C) -> (B, OH, OW, C), with TROUPE_NN_POOL2D_NHWC.
 * A window's offsets need a plain occurrence in the einsum (ir/projection.h), so each pool
 * reads a constant (KH, KW) node beside x: zeros for max ("bc(sh+k)(sw+l),kl=>bchw" with
 * arg1 under a max accumulation), 1/(KH KW) for the average (a product under an add).
 * Padding is not supported: the convnet's pools need none, and a max pool's padding would
 * need a -inf border that an additive copy cannot write.
 *
 * Ties in a max pool: the gradient of a window's maximum is split evenly between the cells
 * equal to it (nn/grad.h's max-accumulation gate, PyTorch's amax rule). PyTorch's
 * max_pool2d instead gives the whole gradient to one arg-max (the first in scan order), so
 * the two differ where a window holds equal maxima (e.g. ReLU zeros); sums over a window
 * agree.
 *
 * Thread safety: as nn/nn.h. Ownership: x is borrowed; *out and the constant are owned by
 * the nn.
 */
#ifndef TROUPE_NN_POOL_H
#define TROUPE_NN_POOL_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* troupe_nn_pool2d_opts_t.layout: channels last, x (B, H, W, C) and y (B, OH, OW, C), as
 * nn/conv.h's TROUPE_NN_CONV2D_X_NHWC; 0: NCHW. */
#define TROUPE_NN_POOL2D_NHWC 1u

/* Window (h, w) >= 1 and stride (h, w): 0 means the window (PyTorch's default). */
typedef struct troupe_nn_pool2d_opts {
    int64_t kernel[2];
    int64_t stride[2];
    unsigned layout; /* TROUPE_NN_POOL2D_NHWC or 0 (NCHW) */
} troupe_nn_pool2d_opts_t;

/* Square window k with stride s (0: k), NCHW. */
#define TROUPE_NN_POOL2D_OPTS(k, s) ((troupe_nn_pool2d_opts_t){{(k), (k)}, {(s), (s)}, 0u})

/* y[b,c,h,w] = max over the window of x. INVALID_ARGUMENT (naming the pool and the shapes)
 * when x is not 4-d, opts is NULL or out of range (a layout other than 0 and NHWC), or the
 * window is larger than x. */
troupe_status_t troupe_nn_maxpool2d(troupe_nn_t *nn, troupe_tnode_t *x,
                                    const troupe_nn_pool2d_opts_t *opts, troupe_tnode_t **out);

/* y[b,c,h,w] = mean over the window of x. Errors as troupe_nn_maxpool2d. */
troupe_status_t troupe_nn_avgpool2d(troupe_nn_t *nn, troupe_tnode_t *x,
                                    const troupe_nn_pool2d_opts_t *opts, troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
