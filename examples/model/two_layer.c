/* two_layer — the worked example of docs/models.md: a two-layer network with a layernorm,
 * written as a list of nn/ layers, its backward pass derived, trained data-parallel with
 * parallel/dp.h on every rank it is started with (mpiexec -n 2 ./two_layer).
 *
 * The task is synthetic and learnable: 16 inputs uniform in [-1, 1), the label is the
 * argmax of a fixed random linear map of them (a "teacher"), 4 classes. Exits 0 when the
 * loss of the last steps is below half the first step's, 1 otherwise or on an error. */
#include <troupe/troupe.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 16, H = 32, OUT = 4, B = 64, NB = 32, STEPS = 150 };

#define CHECK(call)                                                                                \
    do {                                                                                           \
        troupe_status_t st_ = (call);                                                              \
        if (st_ != TROUPE_OK) {                                                                    \
            fprintf(stderr, "two_layer: %s: %s\n", #call, troupe_last_error());                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Deterministic values in [-1, 1): every rank makes the same data and initial weights. */
static double s_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) * 0x1p-52 - 1.0;
}

static troupe_status_t s_hosted(troupe_tnode_t *tn, troupe_memory_type_t type)
{
    troupe_memory_mode_t m = {TROUPE_MM_HOSTED, type, TROUPE_SHARING_UNSET};
    return troupe_tnode_update_memory_mode(tn, m, 900);
}

/* Fills x_all with inputs and y_all with the one-hot labels of the teacher. */
static troupe_status_t s_data(troupe_tnode_t *x_all, troupe_tnode_t *y_all)
{
    double *x = malloc(sizeof(double) * NB * B * IN), *y = calloc(NB * B * OUT, sizeof(double));
    double teacher[IN * OUT];
    uint64_t s = 7;
    for (int i = 0; i < IN * OUT; i++)
        teacher[i] = s_rand(&s);
    for (int r = 0; x && y && r < NB * B; r++) {
        int best = 0;
        double bv = -INFINITY;
        for (int i = 0; i < IN; i++)
            x[r * IN + i] = s_rand(&s);
        for (int c = 0; c < OUT; c++) {
            double v = 0;
            for (int i = 0; i < IN; i++)
                v += x[r * IN + i] * teacher[i * OUT + c];
            if (v > bv) {
                bv = v;
                best = c;
            }
        }
        y[r * OUT + best] = 1.0;
    }
    troupe_status_t st = x && y ? TROUPE_OK : TROUPE_RESOURCE_EXHAUSTED;
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(x_all, x, NB * B * IN);
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(y_all, y, NB * B * OUT);
    free(x);
    free(y);
    return st;
}

int main(int argc, char **argv)
{
    CHECK(troupe_cluster_init(&argc, &argv));
    int rank = troupe_cluster_rank();

    /* ---- the model: a list of layers --------------------------------------------------- */
    troupe_asgn_comp_t *comp = NULL;
    troupe_nn_t *nn = NULL;
    troupe_tnode_t *w1, *b1, *g1, *be1, *w2, *b2, *x_all, *y_all, *x, *y;
    troupe_tnode_t *h, *n, *a, *z, *loss;
    int32_t batch = -1;
    CHECK(troupe_asgn_comp_new(&comp));
    CHECK(troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn));
    /* the data set: NB minibatches of B rows; the static index "batch" picks one per step */
    CHECK(troupe_asgn_comp_add_static_symbol(comp, "batch", NB, &batch));
    troupe_nn_node(nn, "x_all", 3, (int64_t[]){NB, B, IN}, &x_all);
    troupe_nn_node(nn, "y_all", 3, (int64_t[]){NB, B, OUT}, &y_all); /* one-hot labels */
    /* parameters: each gets a gradient node, labelled (name, "grad") */
    troupe_nn_param(nn, "w1", 2, (int64_t[]){IN, H}, &w1);
    troupe_nn_param(nn, "b1", 1, (int64_t[]){H}, &b1);
    troupe_nn_param(nn, "ln_w", 1, (int64_t[]){H}, &g1);
    troupe_nn_param(nn, "ln_b", 1, (int64_t[]){H}, &be1);
    troupe_nn_param(nn, "w2", 2, (int64_t[]){H, OUT}, &w2);
    troupe_nn_param(nn, "b2", 1, (int64_t[]){OUT}, &b2);

    troupe_nn_begin(nn, "the minibatch");
    troupe_nn_node(nn, "x", 2, (int64_t[]){B, IN}, &x);
    troupe_nn_node(nn, "y", 2, (int64_t[]){B, OUT}, &y);
    troupe_asgn_t *t = NULL;
    troupe_nn_add(nn, troupe_asgn_fetch_slice(comp, x, batch, x_all, &t), &t);
    troupe_nn_add(nn, troupe_asgn_fetch_slice(comp, y, batch, y_all, &t), &t);

    troupe_nn_begin(nn, "layer 1");
    troupe_nn_linear(nn, x, w1, b1, &h);           /* h = x w1 + b1       (B, H)   */
    troupe_nn_layernorm(nn, h, g1, be1, 1e-5, &n); /* n = layernorm(h)             */
    troupe_nn_relu(nn, n, &a);                     /* a = relu(n)                  */
    troupe_nn_begin(nn, "layer 2");
    troupe_nn_linear(nn, a, w2, b2, &z);           /* z = a w2 + b2       (B, OUT) */
    troupe_nn_begin(nn, "loss");
    troupe_nn_softmax_xent(nn, z, y, &loss);       /* mean cross-entropy (scalar)  */

    /* forward, then the derived backward: "w1 grad" = d loss / d w1, ... */
    CHECK(troupe_nn_finish(nn, loss));

    /* ---- what the host reads and writes ------------------------------------------------- */
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(nn, &params, &grads);
    uint64_t s = 1;
    for (size_t i = 0; i < np; i++) {
        CHECK(s_hosted(params[i], TROUPE_MEMTYPE_NONCONSTANT));
        size_t count = (size_t)troupe_tnode_num_elems(params[i]);
        double *v = malloc(count * sizeof *v);
        if (!v)
            return 1;
        bool is_ln_w = params[i] == g1, is_bias = params[i]->ndims == 1 && !is_ln_w;
        for (size_t k = 0; k < count; k++) /* uniform(-1/sqrt(fan_in), ..), ones, zeros */
            v[k] = is_ln_w   ? 1.0
                   : is_bias ? 0.0
                             : s_rand(&s) / sqrt((double)params[i]->dims[0]);
        troupe_status_t st = troupe_tnode_set_values(params[i], v, count);
        free(v);
        CHECK(st);
    }
    CHECK(s_hosted(loss, TROUPE_MEMTYPE_NONCONSTANT));
    CHECK(s_hosted(x_all, TROUPE_MEMTYPE_CONSTANT));
    CHECK(s_hosted(y_all, TROUPE_MEMTYPE_CONSTANT));
    CHECK(s_data(x_all, y_all));

    /* ---- training: every stream of every rank ------------------------------------------- */
    troupe_tnode_t *inputs[2] = {x_all, y_all};
    troupe_dp_model_t model = {.grad_comp = comp, .batch_index = "batch", .num_batches = NB,
                               .params = params, .grads = grads, .n_params = np,
                               .loss = loss, .inputs = inputs, .n_inputs = 2};
    troupe_optimizer_t opt = troupe_optimizer_default(TROUPE_OPT_ADAMW);
    opt.lr = 1e-2;
    troupe_dp_config_t dc = {.backend = NULL /* TROUPE_BACKEND, else cpu */, .streams = 1,
                             .optimizer = opt};
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&dc, &model, &dp));
    double first = NAN, last = 0;
    for (int step = 0; step < STEPS; step++) {
        CHECK(troupe_dp_step(dp));
        if (step == 0 || step >= STEPS - 10) {
            double l = NAN;
            CHECK(troupe_dp_sync(dp));
            CHECK(troupe_dp_last_loss(dp, &l));
            if (step == 0)
                first = l;
            else
                last += l / 10;
        }
    }
    CHECK(troupe_dp_sync(dp));
    if (rank == 0)
        printf("two_layer: %d rank(s), loss %.4f at step 1, %.4f over the last 10 steps\n",
               troupe_cluster_size(), first, last);
    troupe_dp_destroy(&dp);
    troupe_nn_destroy(&nn); /* the comp holds its own references */
    troupe_asgn_comp_destroy(&comp);
    CHECK(troupe_cluster_finalize());
    return isfinite(last) && last < 0.5 * first ? 0 : 1;
}
