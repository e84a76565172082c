/* troupe — causal multi-head self-attention as forward assignments (see attention.h). */
#include "nn/attention.h"

#include "nn/activation.h"
#include "nn/layers_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* y (B, T, out) = x (B, T, in) w [+ b] for either weight layout (bias first, then the product
 * added: troupe_nn_linear's two passes). */
static troupe_status_t s_project(troupe_nn_t *nn, const char *label, troupe_tnode_t *x,
                                 troupe_tnode_t *w, troupe_tnode_t *b, troupe_nn_layout_t layout,
                                 int64_t n_out, troupe_tnode_t **out)
{
    const int64_t dims[3] = {x->dims[0], x->dims[1], n_out};
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, label, 3, dims, out));
    if (b)
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY, b, "j=>^b^tj");
    const char *spec = layout == TROUPE_NN_IN_OUT ? "bti,ij=>btj" : "bti,ji=>btj";
    troupe_tnode_t *xc = NULL, *wc = NULL; /* the factors in the compute precision */
    TROUPE_RETURN_IF_ERROR(troupe_nn_compute_copy(nn, x, &xc));
    TROUPE_RETURN_IF_ERROR(troupe_nn_compute_copy(nn, w, &wc));
    return troupe_nn_bin(nn, b == NULL, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_MUL, xc, wc, spec);
}

/* Whether w is (in, out) in the layout and b is NULL or (out). */
static bool s_weight_ok(const troupe_tnode_t *w, const troupe_tnode_t *b, troupe_nn_layout_t layout,
                        int64_t in, int64_t n_out)
{
    int64_t r = layout == TROUPE_NN_IN_OUT ? in : n_out,
            c = layout == TROUPE_NN_IN_OUT ? n_out : in;
    return w->ndims == 2 && w->dims[0] == r && w->dims[1] == c &&
           (!b || (b->ndims == 1 && b->dims[0] == n_out));
}

/* The causal mask as two (T, T) nodes computed from the positions: scale (1/sqrt(hd) on and
 * below the diagonal, 0 above) and bias (0 on and below, -inf above). pos[t] = t (a range fetch),
 * future[t, s] = pos[t] < pos[s], then each a select between two constants. Computed rather
 * than fetched as T^2 constants: a constant fill lowers to one statement per cell, which the C
 * dialect packs into a static table but the CUDA dialect cannot (T = 1024: 2 M statements a
 * layer, beyond what NVRTC compiles); the values are the same, so are the bits. */
static troupe_status_t s_causal(troupe_nn_t *nn, int64_t T, int64_t hd, troupe_tnode_t **scale,
                                troupe_tnode_t **bias)
{
    const int64_t dims[2] = {T, T};
    troupe_tnode_t *pos, *future, *zero, *ninf, *c;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "causal_pos", 1, &T, &pos));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "causal_future", 2, dims, &future));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "causal_scale", 2, dims, scale));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "causal_bias", 2, dims, bias));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 0.0, &zero));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, -INFINITY, &ninf));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 1.0 / sqrt((double)hd), &c));
    troupe_asgn_t *f = NULL;
    troupe_nn_add(nn, troupe_asgn_fetch_range_over_offsets(troupe_nn_comp(nn), pos, &f), &f);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, future, TROUPE_BINOP_CMPLT, pos, pos, "t,s=>ts");
    troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, *scale, TROUPE_TERNOP_WHERE, future, zero, c,
                  "ts,,=>ts");
    return troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, *bias, TROUPE_TERNOP_WHERE, future, ninf,
                         zero, "ts,,=>ts");
}

troupe_status_t troupe_nn_attention(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w_qkv,
                                    troupe_tnode_t *b_qkv, troupe_tnode_t *w_proj,
                                    troupe_tnode_t *b_proj, int n_head, troupe_nn_layout_t layout,
                                    troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !w_qkv || !w_proj || !out)
        return TROUPE__NN_BAD(nn, "attention: NULL argument");
    if (layout != TROUPE_NN_IN_OUT && layout != TROUPE_NN_OUT_IN)
        return TROUPE__NN_BAD(nn, "attention: unknown weight layout %d", (int)layout);
    if (x->ndims != 3)
        return TROUPE__NN_BAD(nn, "attention: x #%d has %d axes (expected (B, T, C))", x->id,
                              x->ndims);
    const int64_t B = x->dims[0], T = x->dims[1], C = x->dims[2];
    if (n_head < 1 || C % n_head != 0)
        return TROUPE__NN_BAD(nn, "attention: C = %lld is not a multiple of n_head = %d",
                              (long long)C, n_head);
    const char *lay = layout == TROUPE_NN_IN_OUT ? "(in, out)" : "(out, in)";
    if (!s_weight_ok(w_qkv, b_qkv, layout, C, 3 * C))
        return TROUPE__NN_BAD(nn,
                              "attention: w_qkv #%d must be %s with in = C = %lld, out = 3C, and "
                              "b_qkv (3C)",
                              w_qkv->id, lay, (long long)C);
    if (!s_weight_ok(w_proj, b_proj, layout, C, C))
        return TROUPE__NN_BAD(nn, "attention: w_proj #%d must be (C, C) = (%lld, %lld), b_proj (C)",
                              w_proj->id, (long long)C, (long long)C);
    const int64_t NH = n_head, hd = C / n_head;
    const int64_t d_heads[4] = {B, NH, T, hd}, d_att[4] = {B, NH, T, T};
    troupe_tnode_t *qkv, *q, *k, *v, *preatt, *att, *prob, *yh, *y, *scale, *bias;
    /* qkv = x w_qkv + b_qkv (B, T, 3C) */
    TROUPE_RETURN_IF_ERROR(s_project(nn, "qkv", x, w_qkv, b_qkv, layout, 3 * C, &qkv));
    /* q, k, v (B, NH, T, hd): head h of each, read at columns (0, C, 2C) + h hd + d; they are
     * only factors of products, so the copies are in the compute precision (a cast when it is
     * not the model's) */
    const troupe_prec_t cp = troupe_nn_compute_prec(nn);
    TROUPE_RETURN_IF_ERROR(troupe_nn_node_prec(nn, "q", cp, 4, d_heads, &q));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node_prec(nn, "k", cp, 4, d_heads, &k));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node_prec(nn, "v", cp, 4, d_heads, &v));
    troupe_tnode_t *qkv_out[3] = {q, k, v};
    char spec[96];
    for (int i = 0; i < 3; i++) {
        snprintf(spec, sizeof spec, "bt(%lldh+d+%lld)=>bhtd", (long long)hd, (long long)(i * C));
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, qkv_out[i], TROUPE_UNOP_IDENTITY, qkv, spec);
    }
    /* preatt = q k^T (B, NH, T, T); att = preatt / sqrt(hd), -inf above the diagonal */
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "preatt", 4, d_att, &preatt));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "att", 4, d_att, &att));
    TROUPE_RETURN_IF_ERROR(s_causal(nn, T, hd, &scale, &bias));
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, preatt, TROUPE_BINOP_MUL, q, k, "bhtd,bhsd=>bhts");
    troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, att, TROUPE_TERNOP_FMA, preatt, scale, bias,
                  "bhts,ts,ts=>bhts");
    TROUPE_RETURN_IF_ERROR(troupe_nn_softmax(nn, att, &prob));
    /* yh = prob v (B, NH, T, hd), then the heads side by side: y (B, T, C) */
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "attn_heads", 4, d_heads, &yh));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "attn_concat", 3, x->dims, &y));
    troupe_tnode_t *prob_c = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_compute_copy(nn, prob, &prob_c));
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, yh, TROUPE_BINOP_MUL, prob_c, v, "bhts,bhsd=>bhtd");
    snprintf(spec, sizeof spec, "bhtd=>bt(%lldh+d)", (long long)hd);
    troupe_nn_un(nn, true, TROUPE_BINOP_ADD, y, TROUPE_UNOP_IDENTITY, yh, spec);
    /* out = y w_proj + b_proj */
    return s_project(nn, "attn_out", y, w_proj, b_proj, layout, C, out);
}
