/* troupe — layers as forward assignments (see layers.h). */
#include "nn/layers.h"

#include "nn/layers_impl.h"

#include <stdio.h>
#include <string.h>

/* troupe__nn_lead's letters, each marked as a broadcast ("^A^B^C", ir/projection.h). buf holds
 * 2n + 1 chars. */
static void s_lead_marked(int n, char *buf)
{
    for (int a = 0; a < n; a++) {
        buf[2 * a] = '^';
        buf[2 * a + 1] = (char)('A' + a);
    }
    buf[2 * n] = '\0';
}

/* The linear layer in either weight layout: w (in, out) when !out_in, else (out, in). */
static troupe_status_t s_linear(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                troupe_tnode_t *b, bool out_in, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    const char *fn = out_in ? "linear_oi" : "linear";
    if (!x || !w || !out)
        return troupe_nn_add(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "%s: NULL argument", fn),
                             NULL);
    int lead = x->ndims - 1;
    int ain = out_in ? 1 : 0, aout = 1 - ain;
    if (lead < 0 || lead > TROUPE__NN_MAX_LEAD || w->ndims != 2 || x->dims[lead] != w->dims[ain] ||
        (b && (b->ndims != 1 || b->dims[0] != w->dims[aout])))
        return troupe_nn_add(nn,
                             troupe__error(TROUPE_INVALID_ARGUMENT,
                                           "%s: x #%d (%d axes, last %lld) does not match w "
                                           "#%d %s = (%lld, %lld)%s",
                                           fn, x->id, x->ndims,
                                           (long long)(x->ndims ? x->dims[x->ndims - 1] : 0),
                                           w->id, out_in ? "(out, in)" : "(in, out)",
                                           (long long)w->dims[0],
                                           (long long)(w->ndims > 1 ? w->dims[1] : 0),
                                           b ? " or its bias (out)" : ""),
                             NULL);
    int64_t dims[TROUPE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[lead] = w->dims[aout];
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, fn, x->ndims, dims, out));
    char L[TROUPE__NN_MAX_LEAD + 1], M[2 * TROUPE__NN_MAX_LEAD + 1], spec[64];
    troupe__nn_lead(lead, L);
    s_lead_marked(lead, M);
    if (b) {
        snprintf(spec, sizeof spec, "j=>%sj", M);
        TROUPE_RETURN_IF_ERROR(troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out,
                                            TROUPE_UNOP_IDENTITY, b, spec));
    }
    snprintf(spec, sizeof spec, out_in ? "%si,ji=>%sj" : "%si,ij=>%sj", L, L);
    troupe_tnode_t *xc = NULL, *wc = NULL; /* the factors in the compute precision */
    TROUPE_RETURN_IF_ERROR(troupe_nn_compute_copy(nn, x, &xc));
    TROUPE_RETURN_IF_ERROR(troupe_nn_compute_copy(nn, w, &wc));
    return troupe_nn_bin(nn, b == NULL, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_MUL, xc, wc, spec);
}

troupe_status_t troupe_nn_linear(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                 troupe_tnode_t *b, troupe_tnode_t **out)
{
    return s_linear(nn, x, w, b, false, out);
}

troupe_status_t troupe_nn_linear_oi(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                    troupe_tnode_t *b, troupe_tnode_t **out)
{
    return s_linear(nn, x, w, b, true, out);
}

troupe_status_t troupe_nn_relu(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !out)
        return troupe_nn_add(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "relu: NULL argument"),
                             NULL);
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "relu", x->ndims, x->dims, out));
    char T[TROUPE_MAX_DIMS + 1], spec[64];
    troupe__nn_lead(x->ndims, T);
    snprintf(spec, sizeof spec, "%s=>%s", T, T);
    return troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_RELU, x, spec);
}

troupe_status_t troupe_nn_softmax_xent(troupe_nn_t *nn, troupe_tnode_t *z, troupe_tnode_t *y,
                                       troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!z || !y || !out)
        return troupe_nn_add(
            nn, troupe__error(TROUPE_INVALID_ARGUMENT, "softmax_xent: NULL argument"), NULL);
    if (z->ndims != 2 || y->ndims != 2 || z->dims[0] != y->dims[0] || z->dims[1] != y->dims[1])
        return troupe_nn_add(nn,
                             troupe__error(TROUPE_INVALID_ARGUMENT,
                                           "softmax_xent: logits #%d and targets #%d must both "
                                           "be (rows, classes) of the same size",
                                           z->id, y->id),
                             NULL);
    const int64_t rows[1] = {z->dims[0]};
    troupe_tnode_t *mx, *d, *e, *s, *lse, *picked, *nll, *n;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "max", 1, rows, &mx));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "shifted", 2, z->dims, &d));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "exp", 2, z->dims, &e));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "sumexp", 1, rows, &s));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "lse", 1, rows, &lse));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "picked", 1, rows, &picked));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "nll", 1, rows, &nll));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "loss", 0, NULL, out));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, (double)z->dims[0], &n));
    TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, mx));
    troupe_nn_un(nn, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, z, "bc=>b");
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, d, TROUPE_BINOP_SUB, z, mx, "bc,b=>bc");
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, e, TROUPE_UNOP_EXP, d, "bc=>bc");
    troupe_nn_un(nn, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY, e, "bc=>b");
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, lse, TROUPE_UNOP_LOG, s, "b=>b");
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, picked, TROUPE_BINOP_MUL, y, d, "bc,bc=>b");
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, nll, TROUPE_BINOP_SUB, lse, picked, "b,b=>b");
    return troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_DIV, nll, n, "b,=>");
}
