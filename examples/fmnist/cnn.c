/* fmnist — the convnet's layers and initialisation (see mlp.h, cnn_impl.h). */
#include "cnn_impl.h"

#include "nn/conv.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/pool.h"
#include "troupe/ir/memory_mode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROV 3301 /* provenance of the memory mode set here */

static const char *const k_names[FMNIST_CNN_NPARAMS] = {"conv1_w", "conv1_b", "conv2_w", "conv2_b",
                                                        "conv3_w", "conv3_b", "fc1_w",   "fc1_b",
                                                        "fc2_w",   "fc2_b"};

const char *fmnist__cnn_param_name(int i)
{
    return i >= 0 && i < FMNIST_CNN_NPARAMS ? k_names[i] : "invalid";
}

/* The side of the last pool's output: side -> -2 -> -2 -> /2 -> -2 -> /2 (at least 1). */
static int64_t s_final_side(const fmnist_mlp_config_t *c)
{
    int64_t s = ((c->side - 4) / 2 - 2) / 2;
    return s > 0 ? s : 1;
}

int fmnist__cnn_param_dims(const fmnist_mlp_config_t *c, int i, int64_t *dims)
{
    const int64_t cin[3] = {1, c->conv[0], c->conv[1]};
    if (i < 6) {
        int l = i / 2;
        if (i % 2)
            return dims[0] = c->conv[l], 1;
        dims[0] = c->conv[l];
        dims[1] = cin[l];
        dims[2] = dims[3] = 3;
        return 4;
    }
    int64_t s5 = s_final_side(c);
    switch (i) {
    case 6: /* fc1_w: reads the pool's (c3, s5, s5) cells of each row */
        dims[0] = c->conv[2];
        dims[1] = dims[2] = s5;
        dims[3] = c->hidden1;
        return 4;
    case 7:
        return dims[0] = c->hidden1, 1;
    case 8:
        dims[0] = c->hidden1;
        dims[1] = c->out;
        return 2;
    default:
        return dims[0] = c->out, 1;
    }
}

/* "(B, C, H, W)" of tn. */
static const char *s_shape(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int a = 0; a < tn->ndims && n < cap; a++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", a ? ", " : "", (long long)tn->dims[a]);
    if (n < cap)
        snprintf(buf + n, cap - n, ")");
    return buf;
}

/* The nn's status; a failure gets the layer's name and its input's (and weight's) shape put
 * in front of its message. */
static troupe_status_t s_layer(troupe_nn_t *nn, const char *layer, const troupe_tnode_t *x,
                               const troupe_tnode_t *w)
{
    troupe_status_t st = troupe_nn_status(nn);
    if (st == TROUPE_OK)
        return TROUPE_OK;
    char why[700], xs[96], ws[96] = "";
    snprintf(why, sizeof why, "%s", troupe_last_error());
    if (w) {
        char wd[80];
        snprintf(ws, sizeof ws, ", weight %s", s_shape(w, wd, sizeof wd));
    }
    return troupe_error_set(st, "cnn layer %s: input %s%s: %s", layer, s_shape(x, xs, sizeof xs),
                            ws, why);
}

troupe_status_t fmnist__cnn_forward(troupe_nn_t *nn, const fmnist_mlp_t *m, troupe_tnode_t *x,
                                    troupe_tnode_t **logits)
{
    troupe_tnode_t *const *w = m->params;
    troupe_tnode_t *z1, *a1, *z2, *a2, *p1, *z3, *a3, *p2, *h, *ah;
    troupe_nn_conv2d_opts_t co = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    co.lowering = m->cfg.conv_lowering;
    troupe_nn_pool2d_opts_t pool = TROUPE_NN_POOL2D_OPTS(2, 2);
    /* Where conv2 takes Winograd F(4x4), whose transforms run channels last, the activations
     * stay channels last, (B, H, W, C), from conv1's output to pool2's: no transposing copies
     * around the Winograd layers and their gradients (nn/conv.h, TROUPE_NN_CONV2D_X_NHWC);
     * pool2's output, 25 cells a channel, is copied back to (B, C, H, W) for fc1. */
    troupe_nn_conv2d_opts_t co1 = co, co2 = co;
    co1.layout = TROUPE_NN_CONV2D_Y_NHWC;
    co2.layout = TROUPE_NN_CONV2D_X_NHWC | TROUPE_NN_CONV2D_Y_NHWC;
    troupe_nn_conv2d_lowering_t l1 = TROUPE_NN_CONV2D_AUTO, l2 = TROUPE_NN_CONV2D_AUTO;
    bool cl = troupe_nn_status(nn) == TROUPE_OK && x->ndims == 4 && w[0]->ndims == 4;
    if (cl) {
        const int64_t a1_nhwc[4] = {x->dims[0], x->dims[2] - w[0]->dims[2] + 1,
                                    x->dims[3] - w[0]->dims[3] + 1, w[0]->dims[0]};
        if (troupe_nn_conv2d_plan(nn, x->dims, w[0], &co1, &l1) != TROUPE_OK ||
            troupe_nn_conv2d_plan(nn, a1_nhwc, w[2], &co2, &l2) != TROUPE_OK) {
            cl = false; /* troupe_nn_conv2d reports the shapes that do not fit, NCHW */
            troupe_clear_error();
        }
        cl = cl && l2 == TROUPE_NN_CONV2D_WINOGRAD4;
    }
    if (!cl)
        co1 = co2 = co;
    pool.layout = cl ? TROUPE_NN_POOL2D_NHWC : 0;
    troupe_nn_begin(nn, "conv1: relu(conv3x3(x) + b), 1 channel in");
    troupe_nn_conv2d(nn, x, w[0], w[1], &co1, &z1);
    TROUPE_RETURN_IF_ERROR(s_layer(nn, "conv1", x, w[0]));
    troupe_nn_relu(nn, z1, &a1);
    troupe_nn_begin(nn, "conv2: relu(conv3x3(a1) + b)");
    troupe_nn_conv2d(nn, a1, w[2], w[3], &co2, &z2);
    TROUPE_RETURN_IF_ERROR(s_layer(nn, "conv2", a1, w[2]));
    troupe_nn_relu(nn, z2, &a2);
    troupe_nn_begin(nn, "pool1: maxpool 2x2, stride 2");
    troupe_nn_maxpool2d(nn, a2, &pool, &p1);
    TROUPE_RETURN_IF_ERROR(s_layer(nn, "pool1", a2, NULL));
    troupe_nn_begin(nn, "conv3: relu(conv3x3(p1) + b)");
    troupe_nn_conv2d(nn, p1, w[4], w[5], &co2, &z3);
    TROUPE_RETURN_IF_ERROR(s_layer(nn, "conv3", p1, w[4]));
    troupe_nn_relu(nn, z3, &a3);
    troupe_nn_begin(nn, "pool2: maxpool 2x2, stride 2");
    troupe_nn_maxpool2d(nn, a3, &pool, &p2);
    TROUPE_RETURN_IF_ERROR(s_layer(nn, "pool2", a3, NULL));
    if (cl) {
        troupe_tnode_t *pc = NULL;
        troupe_nn_begin(nn, "pool2_nchw: (B, H, W, C) -> (B, C, H, W)");
        troupe_nn_node(nn, "pool2_nchw", 4,
                       (int64_t[]){p2->dims[0], p2->dims[3], p2->dims[1], p2->dims[2]}, &pc);
        troupe_nn_materialize(nn, pc, S_PROV); /* both keep a failed node's first error */
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, pc, TROUPE_UNOP_IDENTITY, p2, "bhwc=>bchw");
        TROUPE_RETURN_IF_ERROR(s_layer(nn, "pool2_nchw", p2, NULL));
        p2 = pc;
    }
    /* fc1 reads p2 (rows, c, h, w) as rows of c*h*w values: no flatten copy */
    troupe_nn_begin(nn, "fc1: relu(p2 fc1_w + b), p2 read as (rows, c*h*w)");
    if (p2->dims[1] != w[6]->dims[0] || p2->dims[2] != w[6]->dims[1] ||
        p2->dims[3] != w[6]->dims[2]) {
        char ps[96], ws[96];
        return troupe_nn_add(
            nn,
            troupe_error_set(TROUPE_INVALID_ARGUMENT,
                             "cnn layer fc1: input %s does not fit weight %s (c, h, w, out)",
                             s_shape(p2, ps, sizeof ps), s_shape(w[6], ws, sizeof ws)),
            NULL);
    }
    troupe_nn_node(nn, "fc1", 2, (int64_t[]){x->dims[0], w[6]->dims[3]}, &h);
    troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, h, TROUPE_UNOP_IDENTITY, w[7], "j=>^bj");
    troupe_nn_bin(nn, false, TROUPE_BINOP_ADD, h, TROUPE_BINOP_MUL, p2, w[6], "bchw,chwj=>bj");
    troupe_nn_relu(nn, h, &ah);
    troupe_nn_begin(nn, "fc2: logits = a fc2_w + b");
    troupe_nn_linear(nn, ah, w[8], w[9], logits);
    return troupe_nn_end(nn);
}

troupe_status_t fmnist__cnn_init_params(fmnist_mlp_t *m, uint64_t seed)
{
    size_t maxn = 0;
    for (int i = 0; i < FMNIST_CNN_NPARAMS; i++)
        if ((size_t)troupe_tnode_num_elems(m->params[i]) > maxn)
            maxn = (size_t)troupe_tnode_num_elems(m->params[i]);
    double *v = calloc(maxn, sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "fmnist_mlp_init_params: out of memory");
    troupe_status_t st = TROUPE_OK;
    for (int i = 0; i < FMNIST_CNN_NPARAMS && st == TROUPE_OK; i++) {
        troupe_tnode_t *p = m->params[i];
        size_t n = (size_t)troupe_tnode_num_elems(p);
        if (i % 2 == 0) {
            /* fan_in: a conv's Cin*KH*KW, a linear layer's rows (fc1: c*h*w) */
            int64_t fan_in = (int64_t)n / p->dims[i < 6 ? 0 : p->ndims - 1];
            double gain = i == 8 ? 1.0 : sqrt(2.0);
            /* one stream per tensor: (seed, index), apart from the MLP's keys */
            uint64_t key = seed * 0x9e3779b97f4a7c15ULL + 0x636e6e00ULL + (uint64_t)i;
            st = troupe_nn_init_kaiming(v, n, fan_in, gain, key);
        } else {
            memset(v, 0, n * sizeof *v);
        }
        if (st == TROUPE_OK)
            st = troupe_tnode_set_values(p, v, n);
    }
    free(v);
    return st;
}
