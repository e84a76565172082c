/* troupe — activations as forward assignments (see activation.h). */
#include "nn/activation.h"

#include "nn/layers_impl.h"

#include <stdio.h>

/* sqrt(2 / pi) and the cubic coefficient of GPT-2's GELU. */
#define S_GELU_SCALE 0.79788456080286535588
#define S_GELU_CUBIC 0.044715

troupe_status_t troupe_nn_gelu(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !out)
        return TROUPE__NN_BAD(nn, "gelu: NULL argument");
    if (x->ndims < 1 || x->ndims > TROUPE__NN_MAX_LEAD + 1)
        return TROUPE__NN_BAD(nn, "gelu: x #%d has %d axes (expected 1 to %d)", x->id, x->ndims,
                              TROUPE__NN_MAX_LEAD + 1);
    troupe_tnode_t *x2, *poly, *arg, *th, *half_1p, *k_cubic, *k_lin, *half;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu_x2", x->ndims, x->dims, &x2));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu_poly", x->ndims, x->dims, &poly));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu_arg", x->ndims, x->dims, &arg));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu_tanh", x->ndims, x->dims, &th));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu_cdf", x->ndims, x->dims, &half_1p));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "gelu", x->ndims, x->dims, out));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, S_GELU_SCALE * S_GELU_CUBIC, &k_cubic));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, S_GELU_SCALE, &k_lin));
    TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, 0.5, &half));
    char X[TROUPE__NN_MAX_LEAD + 2], pw[64], un[64], sc[64];
    troupe__nn_lead(x->ndims, X);
    snprintf(pw, sizeof pw, "%s,%s=>%s", X, X, X);
    snprintf(un, sizeof un, "%s=>%s", X, X);
    snprintf(sc, sizeof sc, "%s,,=>%s", X, X);
    /* arg = sqrt(2/pi) (x + 0.044715 x^3) = (sqrt(2/pi) 0.044715 x^2 + sqrt(2/pi)) x */
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, x2, TROUPE_BINOP_MUL, x, x, pw);
    troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, poly, TROUPE_TERNOP_FMA, x2, k_cubic, k_lin, sc);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, arg, TROUPE_BINOP_MUL, poly, x, pw);
    /* y = 0.5 (1 + tanh(arg)) x */
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, th, TROUPE_UNOP_TANH_APPROX, arg, un);
    troupe_nn_ter(nn, true, TROUPE_BINOP_ARG2, half_1p, TROUPE_TERNOP_FMA, th, half, half, sc);
    return troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_BINOP_MUL, half_1p, x, pw);
}

troupe_status_t troupe_nn_softmax(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !out)
        return TROUPE__NN_BAD(nn, "softmax: NULL argument");
    int lead = x->ndims - 1;
    if (lead < 0 || lead > TROUPE__NN_MAX_LEAD)
        return TROUPE__NN_BAD(nn, "softmax: x #%d has %d axes (expected 1 to %d)", x->id, x->ndims,
                              TROUPE__NN_MAX_LEAD + 1);
    troupe_tnode_t *mx, *d, *e, *s;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "softmax_max", lead, x->dims, &mx));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "softmax_shifted", x->ndims, x->dims, &d));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "softmax_exp", x->ndims, x->dims, &e));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "softmax_sum", lead, x->dims, &s));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "softmax", x->ndims, x->dims, out));
    TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, mx));
    char A[TROUPE__NN_MAX_LEAD + 1], red[64], bc[64], pw[64];
    troupe__nn_lead(lead, A);
    snprintf(red, sizeof red, "%sc=>%s", A, A);
    snprintf(bc, sizeof bc, "%sc,%s=>%sc", A, A, A);
    snprintf(pw, sizeof pw, "%sc=>%sc", A, A);
    troupe_nn_un(nn, true, TROUPE_BINOP_MAX, mx, TROUPE_UNOP_IDENTITY, x, red);
    troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, d, TROUPE_BINOP_SUB, x, mx, bc);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, e, TROUPE_UNOP_EXP, d, pw);
    troupe_nn_un(nn, true, TROUPE_BINOP_ADD, s, TROUPE_UNOP_IDENTITY, e, red);
    return troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_BINOP_DIV, e, s, bc);
}
