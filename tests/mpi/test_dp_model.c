/* troupe — shared part of the multi-rank data-parallel tests (test_dp_equivalence.c,
 * test_dp_repro.c include this file): a linear regression y = x W + b with a mean-squared-error
 * loss and hand-written gradients (ir/assign), over a synthetic data set of NB global batches of
 * GB rows, laid out in `split` parts per global batch (part q of global batch j is minibatch
 * j*split + q: rows [q*GB/split, (q+1)*GB/split)). Any failure prints a message, leaves the
 * cluster (troupe_cluster_leave) and exits 1, so mpiexec ends the job and reports it failed. */
#include "actors/troupe.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include "base/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 3
#define O 2
#define NB 3
#define MAX_GB 64
#define NP (D * O + O)

static void s_die(const char *fmt, ...) TROUPE_PRINTF(1, 2);
static void s_die(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: FAIL: %s\n", troupe_cluster_rank(), msg);
    fflush(stderr);
    troupe_status_t st = troupe_cluster_leave(msg);
    (void)st; /* failing already: its message repeats msg */
    exit(1);
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        if (s__ != TROUPE_OK)                                                                      \
            s_die("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #expr, troupe_status_str(s__),        \
                  troupe_last_error());                                                            \
    } while (0)

typedef struct data {
    int gb; /* rows of a global batch */
    float x[NB][MAX_GB][D];
    float y[NB][MAX_GB][O];
} data_t;

static float s_unif(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((double)(*s >> 8) / (double)(1u << 24) * 2.0 - 1.0);
}

/* The same data on every rank (a fixed seed). */
static void s_make_data(data_t *d, int gb)
{
    if (gb > MAX_GB)
        s_die("global batch %d exceeds %d rows", gb, MAX_GB);
    d->gb = gb;
    uint32_t seed = 777;
    const float wt[D][O] = {{0.5f, -1.0f}, {2.0f, 0.25f}, {-0.75f, 1.5f}};
    for (int j = 0; j < NB; j++)
        for (int r = 0; r < gb; r++) {
            for (int i = 0; i < D; i++)
                d->x[j][r][i] = s_unif(&seed);
            for (int o = 0; o < O; o++) {
                float v = 0.3f * (float)o + 0.1f * s_unif(&seed);
                for (int i = 0; i < D; i++)
                    v += d->x[j][r][i] * wt[i][o];
                d->y[j][r][o] = v;
            }
        }
}

typedef struct lr {
    troupe_tnode_t *X, *Y, *W, *b, *gW, *gb, *loss;
    troupe_asgn_comp_t *comp;
    troupe_tnode_t *params[2], *grads[2], *inputs[2];
    troupe_dp_model_t model;
} lr_t;

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    CHECK(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0.0, &tn));
    return tn;
}

/* init_as_rank: the initial parameters are those of that rank (they differ per rank). */
static void s_model(lr_t *m, const data_t *d, int split, int init_as_rank)
{
    memset(m, 0, sizeof *m);
    if (d->gb % split != 0)
        s_die("a global batch of %d rows does not split %d ways", d->gb, split);
    int64_t nb = (int64_t)NB * split, bs = d->gb / split;
    m->X = s_node("X", 3, (int64_t[]){nb, bs, D});
    m->Y = s_node("Y", 3, (int64_t[]){nb, bs, O});
    m->W = s_node("W", 2, (int64_t[]){D, O});
    m->b = s_node("b", 1, (int64_t[]){O});
    m->gW = s_node("W_grad", 2, (int64_t[]){D, O});
    m->gb = s_node("b_grad", 1, (int64_t[]){O});
    m->loss = s_node("loss", 0, NULL);
    static double xv[NB * MAX_GB * D], yv[NB * MAX_GB * O];
    for (int j = 0; j < NB; j++)
        for (int r = 0; r < d->gb; r++) {
            for (int i = 0; i < D; i++)
                xv[(j * d->gb + r) * D + i] = d->x[j][r][i];
            for (int o = 0; o < O; o++)
                yv[(j * d->gb + r) * O + o] = d->y[j][r][o];
        }
    double wv[D * O], bv[O];
    for (int i = 0; i < D * O; i++)
        wv[i] = 0.05 * (i + 1) * (i % 2 ? -1 : 1) + 0.5 * init_as_rank;
    for (int o = 0; o < O; o++)
        bv[o] = 0.01 * o - 0.25 * init_as_rank;
    CHECK(troupe_tnode_set_values(m->X, xv, (size_t)(NB * d->gb * D)));
    CHECK(troupe_tnode_set_values(m->Y, yv, (size_t)(NB * d->gb * O)));
    CHECK(troupe_tnode_set_values(m->W, wv, D * O));
    CHECK(troupe_tnode_set_values(m->b, bv, O));

    troupe_tnode_t *xb = s_node("xb", 2, (int64_t[]){bs, D});
    troupe_tnode_t *yb = s_node("yb", 2, (int64_t[]){bs, O});
    troupe_tnode_t *pred = s_node("pred", 2, (int64_t[]){bs, O});
    troupe_tnode_t *diff = s_node("diff", 2, (int64_t[]){bs, O});
    troupe_tnode_t *gp = s_node("gpred", 2, (int64_t[]){bs, O});
    troupe_tnode_t *l2 = s_node("sq", 2, (int64_t[]){bs, O});
    troupe_tnode_t *c2 = s_node("two_over_n", 0, NULL);
    troupe_tnode_t *cinv = s_node("one_over_n", 0, NULL);
    troupe_asgn_comp_t *c = NULL;
    CHECK(troupe_asgn_comp_new(&c));
    int32_t sym = -1;
    CHECK(troupe_asgn_comp_add_static_symbol(c, "batch", nb, &sym));
    troupe_asgn_t *t[12];
    int n = 0;
    CHECK(troupe_asgn_fetch_slice(c, xb, sym, m->X, &t[n++]));
    CHECK(troupe_asgn_fetch_slice(c, yb, sym, m->Y, &t[n++]));
    CHECK(troupe_asgn_fetch_constant(c, c2, 2.0 / (double)(bs * O), &t[n++]));
    CHECK(troupe_asgn_fetch_constant(c, cinv, 1.0 / (double)(bs * O), &t[n++]));
    CHECK(troupe_asgn_comp_add_embedded(c, c2));
    CHECK(troupe_asgn_comp_add_embedded(c, cinv));
    CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, pred, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(xb), troupe_asgn_node(m->W), "bi,io=>bo",
                                  &t[n++]));
    CHECK(troupe_asgn_accum_unop(c, false, TROUPE_BINOP_ADD, pred, TROUPE_UNOP_IDENTITY,
                                 troupe_asgn_node(m->b), "o=>bo", &t[n++]));
    CHECK(troupe_asgn_pointwise_binop(c, diff, TROUPE_BINOP_SUB, troupe_asgn_node(pred),
                                      troupe_asgn_node(yb), &t[n++]));
    CHECK(troupe_asgn_accum_binop(c, false, TROUPE_BINOP_ARG2, gp, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(diff), troupe_asgn_node(c2), "bo,=>bo",
                                  &t[n++]));
    CHECK(troupe_asgn_accum_binop(c, false, TROUPE_BINOP_ARG2, l2, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(diff), troupe_asgn_node(cinv), "bo,=>bo",
                                  &t[n++]));
    CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, m->loss, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(diff), troupe_asgn_node(l2), "bo,bo=>",
                                  &t[n++]));
    CHECK(troupe_asgn_accum_binop(c, true, TROUPE_BINOP_ADD, m->gW, TROUPE_BINOP_MUL,
                                  troupe_asgn_node(xb), troupe_asgn_node(gp), "bi,bo=>io",
                                  &t[n++]));
    CHECK(troupe_asgn_accum_unop(c, true, TROUPE_BINOP_ADD, m->gb, TROUPE_UNOP_IDENTITY,
                                 troupe_asgn_node(gp), "bo=>o", &t[n++]));
    troupe_asgn_t *root = NULL;
    CHECK(troupe_asgn_seq(c, (size_t)n, t, &root));
    troupe_asgn_comp_set_root(c, root);
    m->comp = c;
    troupe_tnode_t **tmp[] = {&xb, &yb, &pred, &diff, &gp, &l2, &c2, &cinv};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        troupe_tnode_release(tmp[i]);

    m->params[0] = m->W;
    m->params[1] = m->b;
    m->grads[0] = m->gW;
    m->grads[1] = m->gb;
    m->inputs[0] = m->X;
    m->inputs[1] = m->Y;
    m->model.grad_comp = m->comp;
    m->model.batch_index = "batch";
    m->model.num_batches = nb;
    m->model.params = m->params;
    m->model.grads = m->grads;
    m->model.n_params = 2;
    m->model.loss = m->loss;
    m->model.inputs = m->inputs;
    m->model.n_inputs = 2;
}

static void s_model_done(lr_t *m)
{
    troupe_asgn_comp_destroy(&m->comp);
    troupe_tnode_t **all[] = {&m->X, &m->Y, &m->W, &m->b, &m->gW, &m->gb, &m->loss};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        troupe_tnode_release(all[i]);
}

static troupe_optimizer_t s_opt(troupe_optimizer_kind_t kind)
{
    troupe_optimizer_t o = troupe_optimizer_default(kind);
    if (kind == TROUPE_OPT_SGD) {
        o.lr = 0.05;
        o.weight_decay = 0.01;
    } else {
        o.lr = 0.01;
        o.weight_decay = 0.05;
    }
    return o;
}

/* Trains `steps` steps; W then b into out, the last loss into *loss. The initial parameters
 * are this rank's own (different on every rank: a distributed troupe_dp_new must broadcast
 * rank 0's), or rank 0's for a local_only run (the reference). */
static void s_train(const data_t *d, int split, int streams, bool local_only,
                    troupe_optimizer_kind_t kind, int steps, float *out, double *loss)
{
    lr_t m;
    s_model(&m, d, split, local_only ? 0 : troupe_cluster_rank());
    troupe_dp_config_t cfg = {"cpu", streams, s_opt(kind), local_only};
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&cfg, &m.model, &dp));
    for (int s = 0; s < steps; s++)
        CHECK(troupe_dp_step(dp));
    CHECK(troupe_dp_sync(dp));
    CHECK(troupe_dp_last_loss(dp, loss));
    CHECK(troupe_dp_params_to_host(dp));
    void *h = NULL;
    CHECK(troupe_tnode_host_array(m.W, &h));
    memcpy(out, h, D * O * sizeof(float));
    CHECK(troupe_tnode_host_array(m.b, &h));
    memcpy(out + D * O, h, O * sizeof(float));
    troupe_dp_destroy(&dp);
    s_model_done(&m);
}

/* Every rank's `p` must equal rank 0's bit for bit. */
static void s_same_on_every_rank(const float *p, const char *what)
{
    float root[NP];
    memcpy(root, p, sizeof root);
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = root;
    t.count = NP;
    t.prec = TROUPE_PREC_SINGLE;
    t.name = "params";
    troupe_event_t *ev = NULL;
    CHECK(troupe_broadcast(&t, 1, 0, &ev));
    CHECK(troupe_event_sync(ev, troupe_config_timeout_ns()));
    troupe_event_release(&ev);
    for (int e = 0; e < NP; e++)
        if (memcmp(&root[e], &p[e], sizeof(float)) != 0)
            s_die("%s: parameter %d is %.9g here but %.9g on rank 0", what, e, (double)p[e],
                  (double)root[e]);
}

/* (unused by some of the including programs) */
__attribute__((unused)) static void s_close(const float *got, const float *want, double rel,
                                            const char *what)
{
    for (int e = 0; e < NP; e++) {
        double tol = rel * fmax(1.0, fabs((double)want[e]));
        if (!(fabs((double)got[e] - (double)want[e]) <= tol))
            s_die("%s: parameter %d: got %.9g want %.9g (tolerance %g)", what, e, (double)got[e],
                  (double)want[e], tol);
    }
}

static void s_init(int *argc, char ***argv)
{
    CHECK(troupe_cluster_init(argc, argv));
    CHECK(troupe_config_set_timeout_s(60));
    if (troupe_cluster_size() < 2)
        fprintf(stderr, "note: running on %d rank(s); the test is meant for mpiexec -n 2\n",
                troupe_cluster_size());
}
