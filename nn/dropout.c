/* troupe — dropout as forward assignments (see dropout.h). */
#include "nn/dropout.h"

#include "nn/layers_impl.h"

#include <stdio.h>

troupe_status_t troupe_nn_dropout(troupe_nn_t *nn, troupe_tnode_t *x, double drop, uint64_t seed,
                                  troupe_tnode_t *step, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !step || !out)
        return TROUPE__NN_BAD(nn, "dropout: NULL argument");
    if (x->ndims < 1 || x->ndims > TROUPE__NN_MAX_LEAD + 1)
        return TROUPE__NN_BAD(nn, "dropout: x #%d has %d axes (expected 1 to %d)", x->id, x->ndims,
                              TROUPE__NN_MAX_LEAD + 1);
    if (!(drop >= 0 && drop < 1))
        return TROUPE__NN_BAD(nn, "dropout: drop probability %g is outside [0, 1)", drop);
    if (troupe_tnode_num_elems(step) != 1 ||
        (step->prec != TROUPE_PREC_UINT32 && step->prec != TROUPE_PREC_INT32))
        return TROUPE__NN_BAD(nn, "dropout: step #%d must be a uint32 or int32 scalar", step->id);
    char X[TROUPE__NN_MAX_LEAD + 2], spec[64];
    troupe__nn_lead(x->ndims, X);
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "dropout", x->ndims, x->dims, out));
    if (drop == 0) {
        snprintf(spec, sizeof spec, "%s=>%s", X, X);
        return troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY, x, spec);
    }
    troupe_tnode_t *seed_n, *key, *offs, *bits, *u, *keep, *mask, *p_c, *scale_c;
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node_prec(nn, "dropout_seed", TROUPE_PREC_UINT4X32, 0, NULL, &seed_n));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node_prec(nn, "dropout_key", TROUPE_PREC_UINT4X32, 0, NULL, &key));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node_prec(nn, "dropout_offset", TROUPE_PREC_UINT32, x->ndims, x->dims, &offs));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node_prec(nn, "dropout_bits", TROUPE_PREC_UINT4X32, x->ndims, x->dims, &bits));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "dropout_uniform", x->ndims, x->dims, &u));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "dropout_keep", x->ndims, x->dims, &keep));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "dropout_mask", x->ndims, x->dims, &mask));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, drop, &p_c));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 1.0 / (1.0 - drop), &scale_c));
    troupe_asgn_comp_t *comp = troupe_nn_comp(nn);
    troupe_asgn_t *f = NULL;
    /* key = threefry(seed, step); bits[i] = threefry(key, i) */
    troupe_nn_add(nn, troupe_asgn_fetch_constant_bits(comp, seed_n, (int64_t)seed, &f), &f);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, key, TROUPE_BINOP_THREEFRY4X32_CRYPTO, seed_n, step,
                  ",=>");
    troupe_nn_add(nn, troupe_asgn_fetch_range_over_offsets(comp, offs, &f), &f);
    snprintf(spec, sizeof spec, ",%s=>%s", X, X);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, bits, TROUPE_BINOP_THREEFRY4X32_CRYPTO, key, offs,
                  spec);
    /* u uniform in [0, 1); keep = drop < u; mask = keep / (1 - drop) */
    snprintf(spec, sizeof spec, "%s=>%s", X, X);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, u, TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, bits, spec);
    snprintf(spec, sizeof spec, ",%s=>%s", X, X);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, keep, TROUPE_BINOP_CMPLT, p_c, u, spec);
    snprintf(spec, sizeof spec, "%s,=>%s", X, X);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, mask, TROUPE_BINOP_MUL, keep, scale_c, spec);
    /* y = x mask */
    snprintf(spec, sizeof spec, "%s,%s=>%s", X, X, X);
    return troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_BINOP_MUL, x, mask, spec);
}
