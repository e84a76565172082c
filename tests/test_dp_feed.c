/* The fed form of a data-parallel model (parallel/dp.h, troupe_dp_model_t.feed_comp) on the
 * Fashion-MNIST MLP (examples/fmnist/mlp.h) and the linear model of tests/dp_test_model.h:
 *   - the fed and the indexed form train to the same bits (parameters and loss), with SGD and
 *     AdamW, on 1 and 2 streams of the cpu backend: the feed is an exact copy;
 *   - through a driver with graph entries (the sync driver's entries plus fake graph entries
 *     that, like CUDA graphs, bake the captured arguments in and replay them), over steps that
 *     cycle through more minibatches than the policy keeps bindings: the fed gradient routine
 *     is captured once per stream and replayed on every later step, while the indexed one is a
 *     new binding every step and never replays (the problem of issue 16 and its fix); the
 *     replayed run still equals the plain indexed one bit for bit;
 *   - bad models refused by name, and the debug line naming the form at troupe_dp_new. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "runtime_test_util.h"
#define DPT_CHECK(expr) OK(expr)
#include "dp_test_model.h"
#include "examples/fmnist/mlp.h"

#include "actors/runtime_impl.h"
#include "base/log.h"
#include "devices/device.h"
#include "parallel/dp_impl.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp-feed", 60);
}

TestSuite(dp_feed, .init = s_setup);

/* Deterministic pseudo-random values in [-1, 1). */
static double s_rand(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* A small MLP 12-8-6-4 in either form: B rows per minibatch, nb minibatches, the same
 * parameters and data set for the same seed whatever the form. */
static fmnist_mlp_t *s_mlp(bool fed, int64_t B, int64_t nb, uint64_t seed)
{
    fmnist_mlp_config_t cfg = fmnist_mlp_config_default(B, nb);
    cfg.in = 12;
    cfg.hidden1 = 8;
    cfg.hidden2 = 6;
    cfg.out = 4;
    cfg.fed = fed;
    fmnist_mlp_t *m = NULL;
    OK(fmnist_mlp_new(&cfg, &m));
    cr_assert_eq(m->feed_comp != NULL, fed, "a feed comp exactly in the fed form");
    OK(fmnist_mlp_init_params(m, seed));
    size_t rows = (size_t)(B * nb);
    double *x = malloc(rows * (size_t)cfg.in * sizeof *x);
    uint8_t *labels = malloc(rows);
    cr_assert(x && labels);
    uint64_t st = seed * 31 + 7;
    for (size_t i = 0; i < rows * (size_t)cfg.in; i++)
        x[i] = s_rand(&st);
    for (size_t r = 0; r < rows; r++)
        labels[r] = (uint8_t)((s_rand(&st) + 1.0) * 2.0) % 4;
    OK(fmnist_mlp_set_train(m, x, labels));
    free(x);
    free(labels);
    return m;
}

/* The parameters' bytes in order (after troupe_dp_params_to_host), into out (malloc'd). */
static unsigned char *s_param_bytes(const fmnist_mlp_t *m, size_t *len)
{
    size_t n = 0;
    for (int i = 0; i < FMNIST_MLP_NPARAMS; i++)
        n += m->params[i]->size_bytes;
    unsigned char *out = malloc(n), *p = out;
    cr_assert_not_null(out);
    for (int i = 0; i < FMNIST_MLP_NPARAMS; i++) {
        void *h = NULL;
        OK(troupe_tnode_host_array(m->params[i], &h));
        memcpy(p, h, m->params[i]->size_bytes);
        p += m->params[i]->size_bytes;
    }
    *len = n;
    return out;
}

typedef struct s_result {
    unsigned char *params;
    size_t len;
    double loss;
} s_result_t;

/* Builds the driver for m, lets `before_steps` (may be NULL) see it, trains `steps` steps and
 * reads the parameters and the last loss back. */
static s_result_t s_train(fmnist_mlp_t *m, const char *backend, troupe_optimizer_kind_t kind,
                          int streams, int steps, void (*before_steps)(troupe_dp_t *dp))
{
    troupe_dp_model_t model;
    fmnist_mlp_dp_model(m, &model);
    troupe_dp_config_t cfg = {
        .backend = backend, .streams = streams, .optimizer = dpt_opt(kind), .local_only = true};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &model, &dp));
    if (m->x) { /* each replica feeds its own fixed nodes */
        cr_assert(!troupe_tnode_potentially_cross_stream(m->x), "x is one array per stream");
        cr_assert(!troupe_tnode_potentially_cross_stream(m->y), "y is one array per stream");
    }
    if (before_steps)
        before_steps(dp);
    for (int s = 0; s < steps; s++)
        OK(troupe_dp_step(dp));
    s_result_t r;
    OK(troupe_dp_last_loss(dp, &r.loss));
    OK(troupe_dp_params_to_host(dp));
    r.params = s_param_bytes(m, &r.len);
    troupe_dp_destroy(&dp);
    return r;
}

static void s_expect_same(const s_result_t *fed, const s_result_t *idx, const char *what)
{
    cr_assert_eq(fed->len, idx->len);
    size_t at = 0;
    while (at < fed->len && fed->params[at] == idx->params[at])
        at++;
    cr_assert_eq(at, fed->len, "%s: the parameters differ from byte %zu of %zu", what, at,
                 fed->len);
    cr_assert(memcmp(&fed->loss, &idx->loss, sizeof fed->loss) == 0,
              "%s: last loss %.17g (fed) vs %.17g (indexed)", what, fed->loss, idx->loss);
}

Test(dp_feed, the_fed_and_the_indexed_form_train_to_the_same_bits)
{
    enum { B = 4, NB = 6, STEPS = 7 }; /* steps wrap around the minibatches */
    const troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int k = 0; k < 2; k++) {
        for (int streams = 1; streams <= 2; streams++) {
            fmnist_mlp_t *fed = s_mlp(true, B, NB, 5), *idx = s_mlp(false, B, NB, 5);
            s_result_t a = s_train(fed, "cpu", kinds[k], streams, STEPS, NULL);
            s_result_t b = s_train(idx, "cpu", kinds[k], streams, STEPS, NULL);
            char what[64];
            snprintf(what, sizeof what, "%s, %d stream(s)", troupe_optimizer_name(kinds[k]),
                     streams);
            s_expect_same(&a, &b, what);
            cr_assert(a.loss > 0 && a.loss < 10, "%s: a sane loss (%g)", what, a.loss);
            free(a.params);
            free(b.params);
            fmnist_mlp_destroy(&fed);
            fmnist_mlp_destroy(&idx);
        }
    }
}

/* ---- a driver with graph entries -------------------------------------------------------------
 * The sync driver's vtable with fake graph entries: a capture copies the arguments and enqueues
 * nothing; a replay launches the code with the captured arguments, whatever the launch passes
 * (a replayed graph of the wrong binding would compute with the wrong buffers or index). The
 * driver of an opened sync backend is switched to it after troupe_dp_new (the sync backend runs
 * everything in the calling thread, so nothing is in flight) and keeps it until closed (the
 * policy releases its graphs at close). On a driver with graph entries of its own (cuda) the
 * same wrappers only count and pass through to its entries (switched after troupe_dp_new, whose
 * streams are then idle). Counters per code: plain launches, captures, replays of the gradient
 * and feed routines' codes. */

struct troupe_dgraph {
    troupe_dcode_t *code;
    size_t nargs;
    troupe_karg_t args[];
};

static const troupe_driver_vtable_t *s_base;
static troupe_driver_vtable_t s_graph_vt;
static troupe_dcode_t *s_grad_code, *s_feed_code;
static atomic_int s_grad_plain, s_grad_captures, s_grad_replays, s_feed_plain, s_feed_captures;
/* a driver's own graphs (cuda): which code each was captured from */
#define S_MAX_GRAPHS 64
static pthread_mutex_t s_graphs_mu = PTHREAD_MUTEX_INITIALIZER;
static troupe_dgraph_t *s_graphs[S_MAX_GRAPHS];
static troupe_dcode_t *s_graph_codes[S_MAX_GRAPHS];

/* The code graph g was captured from (a driver's own graph: looked up; NULL if unknown). */
static troupe_dcode_t *s_code_of(troupe_dgraph_t *g)
{
    if (!s_base->graph_capture)
        return g->code;
    troupe_dcode_t *code = NULL;
    pthread_mutex_lock(&s_graphs_mu);
    for (int i = 0; i < S_MAX_GRAPHS && !code; i++)
        code = s_graphs[i] == g ? s_graph_codes[i] : NULL;
    pthread_mutex_unlock(&s_graphs_mu);
    return code;
}

/* Notes (or, with code NULL, forgets) a driver's own graph g. */
static void s_note_graph(troupe_dgraph_t *g, troupe_dcode_t *code)
{
    pthread_mutex_lock(&s_graphs_mu);
    for (int i = 0; i < S_MAX_GRAPHS; i++)
        if (s_graphs[i] == (code ? NULL : g)) {
            s_graphs[i] = code ? g : NULL;
            s_graph_codes[i] = code;
            break;
        }
    pthread_mutex_unlock(&s_graphs_mu);
}

static troupe_status_t s_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                const troupe_karg_t *args, size_t nargs)
{
    atomic_fetch_add(code == s_grad_code ? &s_grad_plain : &s_feed_plain,
                     code == s_grad_code || code == s_feed_code);
    return s_base->launch(drv, q, code, args, nargs);
}

static troupe_status_t s_graph_capture(troupe_driver_t *drv, troupe_dqueue_t *q,
                                       troupe_dcode_t *code, const troupe_karg_t *args,
                                       size_t nargs, troupe_dgraph_t **out)
{
    atomic_fetch_add(code == s_grad_code ? &s_grad_captures : &s_feed_captures,
                     code == s_grad_code || code == s_feed_code);
    if (s_base->graph_capture) {
        troupe_status_t st = s_base->graph_capture(drv, q, code, args, nargs, out);
        if (st == TROUPE_OK)
            s_note_graph(*out, code);
        return st;
    }
    troupe_dgraph_t *g = malloc(sizeof *g + nargs * sizeof *args);
    cr_assert_not_null(g);
    g->code = code;
    g->nargs = nargs;
    memcpy(g->args, args, nargs * sizeof *args);
    *out = g;
    return TROUPE_OK;
}

static troupe_status_t s_graph_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dgraph_t *g,
                                      const troupe_karg_t *args, size_t nargs)
{
    troupe_dcode_t *code = s_code_of(g);
    troupe_status_t st = s_base->graph_launch
                             ? s_base->graph_launch(drv, q, g, args, nargs)
                             : s_base->launch(drv, q, g->code, g->args, g->nargs); /* baked */
    atomic_fetch_add(&s_grad_replays, st == TROUPE_OK && code == s_grad_code);
    return st;
}

static void s_graph_release(troupe_driver_t *drv, troupe_dgraph_t *g)
{
    if (s_base->graph_release) {
        s_note_graph(g, NULL);
        s_base->graph_release(drv, g);
        return;
    }
    free(g);
}

/* troupe_dp_new's hook: the driver gets graph entries, the counters watch dp's codes. */
static void s_give_graphs(troupe_dp_t *dp)
{
    troupe_driver_t *drv = troupe_dp_backend(dp)->drv;
    s_base = drv->vt;
    s_graph_vt = *s_base;
    s_graph_vt.launch = s_launch;
    s_graph_vt.graph_capture = s_graph_capture;
    s_graph_vt.graph_launch = s_graph_launch;
    s_graph_vt.graph_release = s_graph_release;
    drv->vt = &s_graph_vt;
    s_grad_code = dp->seg_code[0]->dcode; /* one segment: overlap is off with one rank */
    s_feed_code = dp->feed_code ? dp->feed_code->dcode : NULL;
    atomic_store(&s_grad_plain, 0);
    atomic_store(&s_grad_captures, 0);
    atomic_store(&s_grad_replays, 0);
    atomic_store(&s_feed_plain, 0);
    atomic_store(&s_feed_captures, 0);
}

Test(dp_feed, the_fed_gradient_routine_replays_one_graph_the_indexed_one_never_does)
{
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    /* more minibatches per stream than bindings a code keeps (with 2 streams each stream
     * takes every other one): cycling through them, the indexed form's binding is evicted
     * before it comes back */
    enum { B = 4, NB = 2 * (TROUPE_GRAPH_SLOTS + 4), STEPS = 3 * NB / 2 };
    for (int streams = 1; streams <= 2; streams++) {
        int steps_per_stream = STEPS; /* every stream runs its gradient routine every step */
        fmnist_mlp_t *fed = s_mlp(true, B, NB, 9), *idx = s_mlp(false, B, NB, 9);

        s_result_t a = s_train(fed, "sync", TROUPE_OPT_SGD, streams, STEPS, s_give_graphs);
        cr_assert_eq(atomic_load(&s_grad_captures), streams,
                     "%d stream(s): the fed gradient routine is captured once per stream (%d)",
                     streams, atomic_load(&s_grad_captures));
        cr_assert_eq(atomic_load(&s_grad_plain), streams * TROUPE_GRAPH_WARMUP_RUNS,
                     "%d stream(s): plain launches only while warming up (%d)", streams,
                     atomic_load(&s_grad_plain));
        cr_assert_eq(atomic_load(&s_grad_replays),
                     streams * (steps_per_stream - TROUPE_GRAPH_WARMUP_RUNS),
                     "%d stream(s): replayed on every later step (%d)", streams,
                     atomic_load(&s_grad_replays));
        cr_assert_eq(atomic_load(&s_feed_captures), 0,
                     "the feed, a new binding per minibatch, is never captured");
        cr_assert_eq(atomic_load(&s_feed_plain), streams * steps_per_stream,
                     "the feed runs plainly once per stream and step");

        s_result_t b = s_train(idx, "sync", TROUPE_OPT_SGD, streams, STEPS, s_give_graphs);
        cr_assert_eq(atomic_load(&s_grad_captures), 0,
                     "%d stream(s): the indexed gradient routine is never captured", streams);
        cr_assert_eq(atomic_load(&s_grad_replays), 0,
                     "%d stream(s): the indexed gradient routine never replays", streams);
        cr_assert_eq(atomic_load(&s_grad_plain), streams * steps_per_stream,
                     "%d stream(s): every indexed gradient launch is plain", streams);

        s_expect_same(
            &a, &b, streams == 1 ? "replayed vs plain, 1 stream" : "replayed vs plain, 2 streams");
        free(a.params);
        free(b.params);
        fmnist_mlp_destroy(&fed);
        fmnist_mlp_destroy(&idx);
    }
}

/* The same on a GPU: the fed gradient routine is captured as a CUDA graph once and replayed on
 * every later step (cuBLASLt's operand addresses baked in), the indexed one never; both train
 * alike to rounding (the GEMMs may take other cuBLASLt algorithms for other addresses). */
Test(dp_feed, on_cuda_the_fed_gradient_routine_replays_a_cuda_graph)
{
    char why[512];
    if (!rtu_cuda_present(why, sizeof why))
        cr_skip_test("%s", why);
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    enum { B = 8, NB = 2 * (TROUPE_GRAPH_SLOTS + 4), STEPS = 3 * NB / 2 };
    fmnist_mlp_t *fed = s_mlp(true, B, NB, 9), *idx = s_mlp(false, B, NB, 9);
    s_result_t a = s_train(fed, "cuda", TROUPE_OPT_SGD, 1, STEPS, s_give_graphs);
    cr_assert_eq(atomic_load(&s_grad_captures), 1, "captured once (%d)",
                 atomic_load(&s_grad_captures));
    cr_assert_eq(atomic_load(&s_grad_replays), STEPS - TROUPE_GRAPH_WARMUP_RUNS,
                 "replayed on every later step (%d)", atomic_load(&s_grad_replays));
    s_result_t b = s_train(idx, "cuda", TROUPE_OPT_SGD, 1, STEPS, s_give_graphs);
    cr_assert_eq(atomic_load(&s_grad_replays), 0, "the indexed form never replays");
    cr_assert_eq(atomic_load(&s_grad_plain), STEPS, "every indexed launch is plain");
    const float *pa = (const float *)a.params, *pb = (const float *)b.params;
    for (size_t i = 0; i < a.len / sizeof(float); i++)
        cr_assert(fabsf(pa[i] - pb[i]) <= 1e-4f * (1.0f + fabsf(pb[i])),
                  "parameter %zu: %.9g (fed, replayed) vs %.9g (indexed)", i, (double)pa[i],
                  (double)pb[i]);
    free(a.params);
    free(b.params);
    fmnist_mlp_destroy(&fed);
    fmnist_mlp_destroy(&idx);
}

/* ---- refusals ---------------------------------------------------------------------------------
 */

static void s_expect_invalid(const troupe_dp_model_t *m, const char *needle)
{
    troupe_dp_config_t cfg = {
        .backend = "sync", .streams = 1, .optimizer = dpt_opt(TROUPE_OPT_SGD), .local_only = true};
    troupe_dp_t *dp = (troupe_dp_t *)0x1;
    troupe_status_t st = troupe_dp_new(&cfg, m, &dp);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: got %s (%s)", needle, troupe_status_str(st),
                 troupe_last_error());
    cr_assert_null(dp);
    cr_assert(strstr(troupe_last_error(), needle), "want '%s' in: %s", needle, troupe_last_error());
}

Test(dp_feed, bad_fed_models_are_refused_by_name)
{
    fmnist_mlp_t *fed = s_mlp(true, 4, 6, 3), *idx = s_mlp(false, 4, 6, 3);
    troupe_dp_model_t good, mm;
    fmnist_mlp_dp_model(fed, &good);

    mm = good;
    mm.batch_index = "nope";
    s_expect_invalid(&mm, "batch_index 'nope' is not a static index of feed_comp (its static "
                          "indices: batch)");
    mm = good;
    mm.num_batches = 7;
    s_expect_invalid(&mm, "num_batches = 7 exceeds the range 6 of batch_index 'batch'");
    /* the indexed model's gradient comp with a feed */
    fmnist_mlp_dp_model(idx, &mm);
    mm.feed_comp = fed->feed_comp;
    s_expect_invalid(&mm, "grad_comp has the static index batch_index 'batch' although a "
                          "feed_comp is given");
    fmnist_mlp_dp_model(idx, &mm);
    mm.feed_comp = mm.grad_comp;
    s_expect_invalid(&mm, "feed_comp is grad_comp");

    /* a feed that also writes a parameter */
    troupe_asgn_comp_t *bad = NULL;
    troupe_asgn_t *t[2], *root = NULL;
    int32_t sym = -1;
    OK(troupe_asgn_comp_new(&bad));
    OK(troupe_asgn_comp_add_static_symbol(bad, FMNIST_BATCH_SYMBOL, 6, &sym));
    OK(troupe_asgn_fetch_slice(bad, fed->x, sym, fed->x_all, &t[0]));
    OK(troupe_asgn_fetch_constant(bad, fed->params[1], 0.0, &t[1]));
    OK(troupe_asgn_seq(bad, 2, t, &root));
    troupe_asgn_comp_set_root(bad, root);
    mm = good;
    mm.feed_comp = bad;
    s_expect_invalid(&mm, "feed_comp mentions the parameter ");
    cr_assert(strstr(troupe_last_error(), "_b1: a feed only writes the minibatch's nodes"), "%s",
              troupe_last_error());
    troupe_asgn_comp_destroy(&bad);

    /* a feed that writes nothing grad_comp reads */
    troupe_tnode_t *other = dpt_node("unread", 2, (int64_t[]){4, 12});
    OK(troupe_asgn_comp_new(&bad));
    OK(troupe_asgn_comp_add_static_symbol(bad, FMNIST_BATCH_SYMBOL, 6, &sym));
    OK(troupe_asgn_fetch_slice(bad, other, sym, fed->x_all, &t[0]));
    troupe_asgn_comp_set_root(bad, t[0]);
    mm = good;
    mm.feed_comp = bad;
    s_expect_invalid(&mm, "grad_comp reads none of the nodes feed_comp writes");
    troupe_asgn_comp_destroy(&bad);
    troupe_tnode_release(&other);
    fmnist_mlp_destroy(&fed);
    fmnist_mlp_destroy(&idx);

    /* fixed nodes that do not outlive the feed (virtual) */
    static double xv[3 * 2 * 3], yv[3 * 2 * 2], wv[3 * 2], bv[2];
    dpt_lr_t lr;
    dpt_lr_new_form(&lr, 3, 2, 3, 2, xv, yv, wv, bv, TROUPE_MM_VIRTUAL);
    s_expect_invalid(&lr.model, "_xb, which feed_comp writes and grad_comp reads, is not "
                                "materialized by the feed routine");
    dpt_lr_destroy(&lr);

    /* fixed nodes shared by the streams (each replica feeds its own minibatch): the link of
     * the second replica's feed refuses to write a node another stream writes */
    dpt_lr_new_form(&lr, 3, 2, 3, 2, xv, yv, wv, bv, TROUPE_MM_MATERIALIZED);
    OK(troupe_tnode_update_memory_sharing(lr.xb, TROUPE_SHARING_SHARED_CROSS_STREAMS, 990));
    troupe_dp_config_t two = {
        .backend = "sync", .streams = 2, .optimizer = dpt_opt(TROUPE_OPT_SGD), .local_only = true};
    troupe_dp_t *dp = NULL;
    troupe_status_t st = troupe_dp_new(&two, &lr.model, &dp);
    cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s: %s", troupe_status_str(st),
                 troupe_last_error());
    cr_assert_null(dp);
    cr_assert(strstr(troupe_last_error(), "dp_new: linking feed_comp: link dp_feed: node ") &&
                  strstr(troupe_last_error(), "_xb is shared across streams and written by stream "
                                              "sync:0:0; stream sync:0:1 cannot write it too"),
              "%s", troupe_last_error());
    dpt_lr_destroy(&lr);
}

/* The linear model of the data-parallel tests in its fed form trains like its indexed form. */
Test(dp_feed, the_linear_model_fed_equals_indexed)
{
    static double xv[4 * 3 * 3], yv[4 * 3 * 2], wv[3 * 2] = {0.1, -0.2, 0.3, 0.05, -0.1, 0.2},
                                                       bv[2] = {0.01, -0.02};
    uint64_t st = 11;
    for (size_t i = 0; i < sizeof xv / sizeof *xv; i++)
        xv[i] = s_rand(&st);
    for (size_t i = 0; i < sizeof yv / sizeof *yv; i++)
        yv[i] = s_rand(&st);
    float out[2][3 * 2 + 2];
    double loss[2];
    for (int f = 0; f < 2; f++) {
        dpt_lr_t m;
        dpt_lr_new_form(&m, 4, 3, 3, 2, xv, yv, wv, bv,
                        f ? TROUPE_MM_MATERIALIZED : (troupe_memory_mode_kind_t)0);
        troupe_dp_config_t cfg = {.backend = "cpu",
                                  .streams = 2,
                                  .optimizer = dpt_opt(TROUPE_OPT_ADAMW),
                                  .local_only = true};
        troupe_dp_t *dp = NULL;
        OK(troupe_dp_new(&cfg, &m.model, &dp));
        for (int s = 0; s < 5; s++)
            OK(troupe_dp_step(dp));
        OK(troupe_dp_last_loss(dp, &loss[f]));
        OK(troupe_dp_params_to_host(dp));
        dpt_lr_params(&m, out[f]);
        troupe_dp_destroy(&dp);
        dpt_lr_destroy(&m);
    }
    cr_assert(memcmp(out[0], out[1], sizeof out[0]) == 0, "W[0] %.9g (indexed) vs %.9g (fed)",
              (double)out[0][0], (double)out[1][0]);
    cr_assert(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0);
}

/* ---- the debug line ----------------------------------------------------------------------------
 */

Test(dp_feed, dp_new_says_which_form_and_whether_the_gradient_routine_replays)
{
    char path[] = "/tmp/troupe_test_dp_feed_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("debug:parallel"));
    fmnist_mlp_t *fed = s_mlp(true, 4, 6, 3), *idx = s_mlp(false, 4, 6, 3);
    s_result_t a = s_train(fed, "sync", TROUPE_OPT_SGD, 1, 1, NULL);
    s_result_t b = s_train(idx, "sync", TROUPE_OPT_SGD, 1, 1, NULL);
    free(a.params);
    free(b.params);
    fmnist_mlp_destroy(&fed);
    fmnist_mlp_destroy(&idx);
    OK(troupe_log_configure("warn"));
    OK(troupe_log_set_file(NULL));
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char log[1 << 16];
    size_t n = fread(log, 1, sizeof log - 1, f);
    log[n] = '\0';
    fclose(f);
    unlink(path);
    cr_assert(strstr(log, "dp: minibatches fed into fixed nodes by feed_comp (batch_index "
                          "'batch'); backend sync has no graph entries: every routine launches "
                          "plainly"),
              "log:\n%s", log);
    cr_assert(strstr(log, "dp: minibatches indexed in grad_comp (batch_index 'batch'); backend "
                          "sync has no graph entries"),
              "log:\n%s", log);
}
