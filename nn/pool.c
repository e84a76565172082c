/* troupe — 2-d max and average pooling as forward assignments (see pool.h). */
#include "nn/pool.h"

#include <stdio.h>

static troupe_status_t s_pool(troupe_nn_t *nn, const char *what, troupe_tnode_t *x,
                              const troupe_nn_pool2d_opts_t *o, troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !o || !out)
        return troupe_nn_add(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "%s: NULL argument", what),
                             NULL);
    int64_t k[2] = {o->kernel[0], o->kernel[1]};
    int64_t s[2] = {o->stride[0] ? o->stride[0] : k[0], o->stride[1] ? o->stride[1] : k[1]};
    if (o->layout != 0 && o->layout != TROUPE_NN_POOL2D_NHWC)
        return troupe_nn_add(nn,
                             troupe__error(TROUPE_INVALID_ARGUMENT,
                                           "%s: layout %#x is neither 0 (NCHW) nor NHWC (1)", what,
                                           o->layout),
                             NULL);
    const bool cl = o->layout == TROUPE_NN_POOL2D_NHWC;
    const int ah = cl ? 1 : 2; /* the first spatial axis */
    if (x->ndims != 4 || k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || k[0] > x->dims[ah] ||
        k[1] > x->dims[ah + 1])
        return troupe_nn_add(
            nn,
            troupe__error(TROUPE_INVALID_ARGUMENT,
                          "%s: input #%d (%d axes, %s expected: H %lld, W %lld) and window %lld x "
                          "%lld, stride %lld x %lld (window and stride >= 1, the window within "
                          "the input)",
                          what, x->id, x->ndims, cl ? "B, H, W, C" : "B, C, H, W",
                          (long long)(x->ndims == 4 ? x->dims[ah] : 0),
                          (long long)(x->ndims == 4 ? x->dims[ah + 1] : 0), (long long)k[0],
                          (long long)k[1], (long long)s[0], (long long)s[1]),
            NULL);
    bool max = what[0] == 'm';
    troupe_tnode_t *win = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, max ? "window" : "window_mean", 2, k, &win));
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_add(nn,
                      troupe_asgn_fetch_constant(troupe_nn_comp(nn), win,
                                                 max ? 0.0 : 1.0 / (double)(k[0] * k[1]), &t),
                      &t));
    TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, win));
    int64_t dims[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
    dims[ah] = (x->dims[ah] - k[0]) / s[0] + 1;
    dims[ah + 1] = (x->dims[ah + 1] - k[1]) / s[1] + 1;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, what, 4, dims, out));
    char spec[96], hs[24] = "", ws[24] = "";
    if (s[0] != 1)
        snprintf(hs, sizeof hs, "%lld", (long long)s[0]);
    if (s[1] != 1)
        snprintf(ws, sizeof ws, "%lld", (long long)s[1]);
    snprintf(spec, sizeof spec, cl ? "b(%sh+k)(%sw+l)c,kl=>bhwc" : "bc(%sh+k)(%sw+l),kl=>bchw",
             hs, ws);
    return troupe_nn_bin(nn, true, max ? TROUPE_BINOP_MAX : TROUPE_BINOP_ADD, *out,
                         max ? TROUPE_BINOP_ARG1 : TROUPE_BINOP_MUL, x, win, spec);
}

troupe_status_t troupe_nn_maxpool2d(troupe_nn_t *nn, troupe_tnode_t *x,
                                    const troupe_nn_pool2d_opts_t *opts, troupe_tnode_t **out)
{
    return s_pool(nn, "maxpool2d", x, opts, out);
}

troupe_status_t troupe_nn_avgpool2d(troupe_nn_t *nn, troupe_tnode_t *x,
                                    const troupe_nn_pool2d_opts_t *opts, troupe_tnode_t **out)
{
    return s_pool(nn, "avgpool2d", x, opts, out);
}
