/* troupe — embedding lookup and cross-entropy against integer targets (see embedding.h). */
#include "nn/embedding.h"

#include "ir/assign.h"
#include "nn/layers_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool s_integer(troupe_prec_t p)
{
    return p == TROUPE_PREC_BYTE || p == TROUPE_PREC_UINT16 || p == TROUPE_PREC_INT32 ||
           p == TROUPE_PREC_UINT32 || p == TROUPE_PREC_INT64 || p == TROUPE_PREC_UINT64;
}

/* lhs =accum op(a[, b]) over spec with gather node g (the "@1[...]" of spec). */
static troupe_status_t s_gather(troupe_nn_t *nn, bool init, troupe_binop_t accum,
                                troupe_tnode_t *lhs, troupe_asgn_rhs_kind_t kind, int op,
                                troupe_tnode_t *a, troupe_tnode_t *b, troupe_tnode_t *g,
                                const char *spec)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    troupe_asgn_buffer_t rhs[3] = {troupe_asgn_node(a), troupe_asgn_node(b), troupe_asgn_node(b)};
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_accum_gather(troupe_nn_comp(nn), init, accum, lhs, kind, op,
                                                  rhs, 1, &g, spec, &t);
    return troupe_nn_add(nn, st, &t);
}

troupe_status_t troupe_nn_embedding(troupe_nn_t *nn, troupe_tnode_t *ids, troupe_tnode_t *table,
                                    troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!ids || !table || !out)
        return TROUPE__NN_BAD(nn, "embedding: NULL argument");
    if (!s_integer(ids->prec) || ids->ndims < 1 || ids->ndims > 3)
        return TROUPE__NN_BAD(nn,
                              "embedding: ids #%d must be an integer tensor of 1 to 3 axes "
                              "(it is %s with %d)",
                              ids->id, troupe_prec_name(ids->prec), ids->ndims);
    if (table->ndims != 2)
        return TROUPE__NN_BAD(nn, "embedding: table #%d must be (V, C); it has %d axes",
                              table->id, table->ndims);
    int64_t dims[TROUPE_MAX_DIMS];
    memcpy(dims, ids->dims, sizeof(int64_t) * (size_t)ids->ndims);
    dims[ids->ndims] = table->dims[1];
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "embedding", ids->ndims + 1, dims, out));
    char L[TROUPE__NN_MAX_LEAD + 1], spec[64];
    troupe__nn_lead(ids->ndims, L);
    snprintf(spec, sizeof spec, "@1[%s]c=>%sc", L, L);
    return s_gather(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_ASGN_RHS_UNOP, TROUPE_UNOP_IDENTITY,
                    table, NULL, ids, spec);
}

troupe_status_t troupe_nn_softmax_xent_targets(troupe_nn_t *nn, troupe_tnode_t *z,
                                               troupe_tnode_t *targets, int64_t n_valid,
                                               troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!z || !targets || !out)
        return TROUPE__NN_BAD(nn, "softmax_xent_targets: NULL argument");
    int lead = z->ndims - 1;
    bool same = lead >= 1 && lead <= 3 && targets->ndims == lead && s_integer(targets->prec);
    for (int a = 0; same && a < lead; a++)
        same = targets->dims[a] == z->dims[a];
    if (!same)
        return TROUPE__NN_BAD(nn,
                              "softmax_xent_targets: logits #%d must be (..., V) with 1 to 3 "
                              "leading axes and targets #%d (...) of an integer precision with "
                              "the same leading dims",
                              z->id, targets->id);
    int64_t vp = z->dims[lead];
    if (n_valid < 0 || n_valid > vp)
        return TROUPE__NN_BAD(nn, "softmax_xent_targets: n_valid %lld outside 0..%lld",
                              (long long)n_valid, (long long)vp);
    if (n_valid == 0)
        n_valid = vp;
    int64_t rows = 1;
    for (int a = 0; a < lead; a++)
        rows *= z->dims[a];
    char L[TROUPE__NN_MAX_LEAD + 1], sp[6][48];
    troupe__nn_lead(lead, L);
    snprintf(sp[0], sizeof sp[0], "%sc=>%s", L, L);             /* reduce over the vocabulary */
    snprintf(sp[1], sizeof sp[1], "%sc,%s=>%sc", L, L, L);      /* shift by the row max */
    snprintf(sp[2], sizeof sp[2], "%sc=>%sc", L, L);            /* pointwise */
    snprintf(sp[3], sizeof sp[3], "%s=>%s", L, L);              /* pointwise on rows */
    snprintf(sp[4], sizeof sp[4], "%s@1[%s]=>%s", L, L, L);     /* the target's logit */
    snprintf(sp[5], sizeof sp[5], "%s,%s=>%s", L, L, L);        /* rows, two operands */
    troupe_tnode_t *zv = z;
    if (n_valid < vp) {
        /* the padded logits get -inf: probability 0, gradient 0 (a mask added), computed from
         * the positions: mask[c] = c < n_valid ? 0 : -inf. Not fetched as Vp constants: a
         * constant fill lowers to one statement per cell, which the CUDA dialect cannot pack
         * into a table (GPT-2: 50,304 statements). Offsets are exact in single precision up
         * to 2^24; a larger vocabulary keeps the constant fill. */
        troupe_tnode_t *mask = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "vocab_mask", 1, &vp, &mask));
        TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "valid_logits", z->ndims, z->dims, &zv));
        troupe_asgn_t *t = NULL;
        if (vp <= (INT64_C(1) << 24)) {
            troupe_tnode_t *pos, *valid, *nv, *zero, *ninf;
            TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "vocab_pos", 1, &vp, &pos));
            TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "vocab_valid", 1, &vp, &valid));
            TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, (double)n_valid, &nv));
            TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 0.0, &zero));
            TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, -INFINITY, &ninf));
            troupe_nn_add(nn, troupe_asgn_fetch_range_over_offsets(troupe_nn_comp(nn), pos, &t),
                          &t);
            troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, valid, TROUPE_BINOP_CMPLT, pos, nv, "c,=>c");
            troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, mask, TROUPE_TERNOP_WHERE, valid, zero, ninf,
                          "c,,=>c");
        } else {
            double *v = calloc((size_t)vp, sizeof *v);
            if (!v)
                return troupe_nn_add(
                    nn, troupe__error(TROUPE_RESOURCE_EXHAUSTED, "nn: out of memory"), NULL);
            for (int64_t c = n_valid; c < vp; c++)
                v[c] = -INFINITY;
            troupe_status_t st =
                troupe_asgn_fetch_constant_fill(troupe_nn_comp(nn), mask, v, (size_t)vp, &t);
            free(v);
            troupe_nn_add(nn, st, &t);
        }
        char spec[48];
        snprintf(spec, sizeof spec, "%sc,c=>%sc", L, L);
        troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, zv, TROUPE_BINOP_ADD, z, mask, spec);
    }
    troupe_tnode_t *mx, *d, *e, *s, *lse, *picked, *nll, *n;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "max", lead, z->dims, &mx));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "shifted", z->ndims, z->dims, &d));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "exp", z->ndims, z->dims, &e));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "sumexp", lead, z->dims, &s));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "lse", lead, z->dims, &lse));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "picked", lead, z->dims, &picked));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "nll", lead, z->dims, &nll));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "loss", 0, NULL, out));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, (double)rows, &n));
    TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, mx));
    troupe_nn_un(nn, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, zv, sp[0]);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, d, TROUPE_BINOP_SUB, zv, mx, sp[1]);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, e, TROUPE_UNOP_EXP, d, sp[2]);
    troupe_nn_un(nn, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY, e, sp[0]);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, lse, TROUPE_UNOP_LOG, s, sp[3]);
    s_gather(nn, true, TROUPE_BINOP_ARG2, picked, TROUPE_ASGN_RHS_UNOP, TROUPE_UNOP_IDENTITY, d,
             NULL, targets, sp[4]);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, nll, TROUPE_BINOP_SUB, lse, picked, sp[5]);
    char mean[32];
    snprintf(mean, sizeof mean, "%s,=>", L);
    return troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_DIV, nll, n, mean);
}
