/* troupe — 2-d convolution (PyTorch's torch.nn.functional.conv2d): forward assignments over
 * affine indices (ir/projection.h), the input and weight gradients derived by nn/grad.h.
 *
 * Layout NCHW as PyTorch: x (B, Cin, H, W), w (Cout, Cin, KH, KW), b (Cout) or NULL,
 * y (B, Cout, OH, OW) with OH = (H + 2 pad_h - dil_h (KH - 1) - 1) / stride_h + 1 (floor), the same
 * for OW; x or y channels last, (B, H, W, Cin) or (B, OH, OW, Cout), on request
 * (TROUPE_NN_CONV2D_X_NHWC, Y_NHWC below). The IR has no implicit padding: with padding, the layer
 * first writes a zero-filled copy of x with the padded shape (a fetch of 0, then x added into its
 * interior), so the input gradient is the padded copy's gradient read at the interior. The
 * product, "bi(sh+dk)(sw+dl),oikl=>bohw" plus the bias, is lowered so that it and both gradients
 * reach the GEMM library (the lowerings below): Winograd for a few samples, shifted products over
 * the input's rows (no im2col), or an im2col copy that carries the bias as a row of ones
 * (docs/trainer.md, "Convolution lowering").
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed; *out is owned by the nn.
 */
#ifndef TROUPE_NN_CONV_H
#define TROUPE_NN_CONV_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the product is lowered (docs/trainer.md, "Convolution lowering"). The others force one
 * where it fits (else INVALID_ARGUMENT naming the lowering and the shapes): IM2COL anywhere;
 * SHIFTED (KH*KW shifted matrix products) stride 1; WINOGRAD (F(2x2, 3x3), Lavin and Gray
 * 2015: 16 products of (Cout x Cin)(Cin x tiles), with a channels-last side (tiles x Cin)
 * (Cin x Cout), 2.25x fewer multiply-adds, results equal to the direct sum within float
 * rounding) a 3x3 kernel, stride 1, dilation 1 and an even output height and width; WINOGRAD4
 * (F(4x4, 3x3), the same paper: 36 products of (tiles x Cin)(Cin x Cout), 4x fewer
 * multiply-adds than the direct form, its transforms run channels last, behind transposing
 * copies on an NCHW side) the same with an output height and width divisible by 4. AUTO picks
 * WINOGRAD4 where it fits, the input has at least 8 channels and its 36 transformed input matrices
 * (36 * Cin * B * OH/4 * OW/4 values) take at most 2 MiB, else WINOGRAD under the same terms with
 * its 16 (16 * Cin * B * OH/2 * OW/2 values): so a micro-step of a few samples, which keeps its
 * passes in the core's caches (the convnet's conv2 at 4 samples: 0.66 MB in F(4x4), conv3's 10 x 10
 * output F(2x2)); else SHIFTED at stride 1 with at least 8 input channels and NCHW on both sides;
 * else IM2COL. IM2COL_FOLDED (anywhere, never picked by AUTO) is im2col with the batch folded into
 * the product's columns: the copy is (KH*KW*Cin [+1], B, OH, OW), so the layer and both its
 * gradients are one matrix product each for the whole batch instead of one per sample, plus a copy
 * that swaps y's first two axes; it is the form for a GPU, whose GEMM step (cuBLASLt) takes one
 * product, not a loop of them (examples/fmnist picks it on cuda). */
typedef enum troupe_nn_conv2d_lowering {
    TROUPE_NN_CONV2D_AUTO = 0,
    TROUPE_NN_CONV2D_IM2COL,
    TROUPE_NN_CONV2D_SHIFTED,
    TROUPE_NN_CONV2D_WINOGRAD,
    TROUPE_NN_CONV2D_IM2COL_FOLDED,
    TROUPE_NN_CONV2D_WINOGRAD4,
} troupe_nn_conv2d_lowering_t;

/* Channels-last layouts, bits of troupe_nn_conv2d_opts_t.layout (0: NCHW on both sides).
 * X_NHWC: the input is x (B, H, W, Cin); Y_NHWC: the output is y (B, OH, OW, Cout); w stays
 * (Cout, Cin, KH, KW). Layers that agree on channels last pass their activations without
 * transposing copies: the convnet keeps its activations channels last where conv2 runs
 * WINOGRAD4, whose transforms run channels last (examples/fmnist/cnn.c). IM2COL, WINOGRAD and
 * WINOGRAD4 take either layout on either side (WINOGRAD with a channels-last side runs the
 * channels-last form of F(4x4)'s code with F(2x2)'s matrices); SHIFTED and IM2COL_FOLDED take
 * NCHW only (else INVALID_ARGUMENT); with a channels-last side AUTO picks as with none, but
 * IM2COL where it would pick SHIFTED. */
#define TROUPE_NN_CONV2D_X_NHWC 1u
#define TROUPE_NN_CONV2D_Y_NHWC 2u

/* Per axis (h, w). stride and dilation >= 1, padding >= 0 (zeros on both sides). */
typedef struct troupe_nn_conv2d_opts {
    int64_t stride[2];
    int64_t padding[2];
    int64_t dilation[2];
    troupe_nn_conv2d_lowering_t lowering; /* 0: AUTO */
    unsigned layout;                      /* TROUPE_NN_CONV2D_X_NHWC | ..._Y_NHWC; 0: NCHW */
} troupe_nn_conv2d_opts_t;

/* The same stride, padding and dilation on both axes, NCHW, AUTO. */
#define TROUPE_NN_CONV2D_OPTS(s, p, d)                                                             \
    ((troupe_nn_conv2d_opts_t){{(s), (s)}, {(p), (p)}, {(d), (d)}, TROUPE_NN_CONV2D_AUTO, 0u})

/* y = conv2d(x, w) + b with the shapes above; opts NULL is stride 1, padding 0, dilation 1,
 * NCHW, AUTO. Returns the nn's sticky status: INVALID_ARGUMENT (naming "conv2d" and the shapes)
 * when x or w is not 4-d, their channels disagree, b is not (Cout), an option is out of range
 * (a layout bit other than X_NHWC and Y_NHWC, a lowering outside the enum), the dilated kernel
 * is larger than the padded input, or a forced lowering does not fit the shapes or the layout;
 * RESOURCE_EXHAUSTED. */
troupe_status_t troupe_nn_conv2d(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                 troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *opts,
                                 troupe_tnode_t **out);

/* The lowering troupe_nn_conv2d would take for an input of x_dims (4, in opts' layout), weight
 * w (Cout, Cin, KH, KW) and opts (NULL as above) in the nn's precision: opts' lowering, or
 * AUTO's pick. So a model can choose a layout for the layer before it (the convnet's conv1 writes
 * channels last only where conv2 takes WINOGRAD4). INVALID_ARGUMENT as troupe_nn_conv2d, without
 * touching the nn's status. */
troupe_status_t troupe_nn_conv2d_plan(troupe_nn_t *nn, const int64_t x_dims[4],
                                      const troupe_tnode_t *w, const troupe_nn_conv2d_opts_t *opts,
                                      troupe_nn_conv2d_lowering_t *out);

#ifdef __cplusplus
}
#endif
#endif
