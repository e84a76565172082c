/* troupe — normalisation layers as forward assignments (see norm.h). */
#include "nn/norm.h"

#include "nn/layers_impl.h"

#include <stdio.h>
#include <string.h>

troupe_status_t troupe_nn_layernorm(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                    troupe_tnode_t *b, double eps, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !w || !b || !out)
        return TROUPE__NN_BAD(nn, "layernorm: NULL argument");
    int lead = x->ndims - 1;
    if (lead < 0 || lead > TROUPE__NN_MAX_LEAD)
        return TROUPE__NN_BAD(nn, "layernorm: x #%d has %d axes (expected 1 to %d)", x->id,
                              x->ndims, TROUPE__NN_MAX_LEAD + 1);
    int64_t C = x->dims[lead];
    if (w->ndims != 1 || w->dims[0] != C || b->ndims != 1 || b->dims[0] != C)
        return TROUPE__NN_BAD(nn,
                              "layernorm: weight #%d and bias #%d must be vectors of x #%d's "
                              "last axis (%lld)",
                              w->id, b->id, x->id, (long long)C);
    if (!(eps > 0))
        return TROUPE__NN_BAD(nn, "layernorm: eps %g must be positive", eps);
    troupe_tnode_t *mean, *xc, *var, *ve, *rstd, *xhat, *inv_c, *eps_c;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_mean", lead, x->dims, &mean));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_centred", x->ndims, x->dims, &xc));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_var", lead, x->dims, &var));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_var_eps", lead, x->dims, &ve));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_rstd", lead, x->dims, &rstd));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "ln_xhat", x->ndims, x->dims, &xhat));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "layernorm", x->ndims, x->dims, out));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 1.0 / (double)C, &inv_c));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, eps, &eps_c));
    char A[TROUPE__NN_MAX_LEAD + 1], s[5][64];
    troupe__nn_lead(lead, A);
    snprintf(s[0], sizeof s[0], "%sc,=>%s", A, A);       /* row sum times a scalar */
    snprintf(s[1], sizeof s[1], "%sc,%s=>%sc", A, A, A); /* row-wise broadcast */
    snprintf(s[2], sizeof s[2], "%sc,%sc=>%s", A, A, A); /* row dot product */
    snprintf(s[3], sizeof s[3], "%s,,=>%s", A, A);       /* per row, two scalars */
    snprintf(s[4], sizeof s[4], "%sc,c,c=>%sc", A, A);   /* per column w, b */
    /* mean = sum_c x / C */
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, mean, TROUPE_BINOP_MUL, x, inv_c, s[0]);
    /* xc = x - mean; var = sum_c xc^2 (divided by C below) */
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, xc, TROUPE_BINOP_SUB, x, mean, s[1]);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, var, TROUPE_BINOP_MUL, xc, xc, s[2]);
    /* rstd = 1 / sqrt(var / C + eps) */
    troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, ve, TROUPE_TERNOP_FMA, var, inv_c, eps_c, s[3]);
    snprintf(s[3], sizeof s[3], "%s=>%s", A, A);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, rstd, TROUPE_UNOP_RECIP_SQRT, ve, s[3]);
    /* y = xc * rstd * w + b */
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, xhat, TROUPE_BINOP_MUL, xc, rstd, s[1]);
    return troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_TERNOP_FMA, xhat, w, b, s[4]);
}
