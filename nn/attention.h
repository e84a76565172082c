/* troupe — causal multi-head self-attention as GPT-2, as forward assignments (nn/nn.h); its
 * gradient is derived (nn/grad.h).
 *
 * The per-head products are einsum contractions over (b, h, t, t2, d) that compiler/gemm.h's
 * matcher can take: scores "bhtd,bhsd=>bhts" (Q K^T, K transposed) and values
 * "bhts,bhsd=>bhtd" (P V), batched over b and h. The causal mask is a pair of constant
 * (T, T) nodes fetched into the comp: att = fma(scores, scale_mask, bias_mask) with
 * scale_mask[t, s] = 1/sqrt(hd) and bias_mask[t, s] = 0 for s <= t, 0 and -inf above the
 * diagonal; the softmax then gives the future exactly 0 and its gradient there is 0.
 *
 * Thread safety: as nn/nn.h. Ownership: inputs are borrowed; results are owned by the nn.
 */
#ifndef TROUPE_NN_ATTENTION_H
#define TROUPE_NN_ATTENTION_H

#include "troupe/nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a projection's weight is stored. */
typedef enum troupe_nn_layout {
    TROUPE_NN_IN_OUT = 0, /* w (in, out): y = x w, troupe_nn_linear's and HF GPT-2's Conv1D */
    TROUPE_NN_OUT_IN,     /* w (out, in): y = x w^T, llm.c's and PyTorch nn.Linear's */
} troupe_nn_layout_t;

/* Causal self-attention with n_head heads of size hd = C / n_head:
 *   x (B, T, C);  w_qkv (C, 3C) [IN_OUT] or (3C, C) [OUT_IN], b_qkv (3C) or NULL: the fused
 *   projection to q, k, v (in that order along 3C, head h at columns h*hd .. h*hd+hd-1 of each);
 *   w_proj (C, C), b_proj (C) or NULL: the output projection; y (B, T, C).
 *   att[b,h,t,s] = softmax_s(q[b,h,t,:] . k[b,h,s,:] / sqrt(hd), s <= t),
 *   y = (sum_s att[b,h,t,s] v[b,h,s,:], heads concatenated) w_proj + b_proj.
 * Intermediate nodes: qkv (B,T,3C), q, k, v (B,NH,T,hd), att scores and probabilities
 * (B,NH,T,T), per-head outputs (B,NH,T,hd) and the concatenation (B,T,C). INVALID_ARGUMENT
 * when C is not a multiple of n_head or a weight's dims do not match the layout. */
troupe_status_t troupe_nn_attention(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w_qkv,
                                    troupe_tnode_t *b_qkv, troupe_tnode_t *w_proj,
                                    troupe_tnode_t *b_proj, int n_head, troupe_nn_layout_t layout,
                                    troupe_tnode_t **out);

#ifdef __cplusplus
}
#endif
#endif
