/* troupe — ranks that disagree (parallel/dp.h, Ranks that disagree), 2 ranks. The mode (argv[1])
 * makes rank 1 differ from rank 0 in one setting:
 *   optimizer  AdamW instead of SGD          lr        another learning rate
 *   shape      a model with another shape    setting   another value of a program setting
 *   count      one program setting more      agree     troupe_dp_agree, another value
 *   form       the fed form (a feed_comp: parallel/dp.h) instead of the indexed one
 *   precision  troupe_dp_config_t.precision bf16 instead of fp32
 *   fusedenv   TROUPE_DP_FUSED_UPDATE=off (troupe_config_set_dp_fused_update, as the
 *              environment sets it) instead of auto: a knob read per process that decides the
 *              update's form
 * Each must make troupe_dp_new (troupe_dp_agree) fail on BOTH ranks, at once (well within
 * TROUPE_TIMEOUT_S), with FAILED_PRECONDITION and the same message naming the setting and each
 * rank's value; the ranks then finalize normally (the cluster is not broken by it).
 *   streams    rank 0 runs 2 streams, rank 1 runs 1 (allowed): T = 3 replicas, and after several
 *              steps the parameters and the last loss equal, bit for bit, those of one process
 *              running 3 streams on the same minibatches (local_only): the same sums in the
 *              same order ((g0 + g1) + g2), the same 1/3 scale; and, to rounding, one replica
 *              on the whole global batch.
 *   fed        both ranks in the fed form: the parameters and the last loss equal, bit for bit,
 *              those of both ranks in the indexed form (the feed is an exact copy). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "test_dp_model.c"

#include <time.h>

static double s_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* dp_new (or dp_agree) must fail on this rank with FAILED_PRECONDITION and a message holding
 * every needle; the message must be the same on both ranks. */
static void s_expect_refusal(troupe_status_t st, const char *const *needles, double t0)
{
    double took = s_now() - t0;
    if (st != TROUPE_FAILED_PRECONDITION)
        s_die("expected FAILED_PRECONDITION, got %s: %s", troupe_status_str(st),
              troupe_last_error());
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    for (const char *const *n = needles; *n; n++)
        if (!strstr(msg, *n))
            s_die("the message lacks '%s': %s", *n, msg);
    if (took > 10.0)
        s_die("the refusal took %.1f s (TROUPE_TIMEOUT_S is %lld s)", took,
              (long long)troupe_config_timeout_s());
    /* the same message on both ranks: compare a hash */
    uint64_t h = 1469598103934665603ULL, hmax = 0;
    for (const char *p = msg; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    hmax = h;
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = &hmax;
    t.count = 1;
    t.prec = TROUPE_PREC_UINT64;
    t.name = "message hash";
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_MAX, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    CHECK(troupe_allreduce(&ar, &ev));
    CHECK(troupe_event_sync(ev, troupe_config_timeout_ns()));
    troupe_event_release(&ev);
    if (hmax != h)
        s_die("the ranks' messages differ; this rank's: %s", msg);
    fprintf(stderr, "rank %d: refused in %.2f s: %s\n", troupe_cluster_rank(), took, msg);
}

static void s_streams(const data_t *d)
{
    int rank = troupe_cluster_rank();
    float het[NP], loc[NP], one[NP];
    double het_loss = 0, loc_loss = 0, one_loss = 0;
    /* 3 replicas: minibatches of a third of the global batch */
    s_train(d, 3, rank == 0 ? 2 : 1, false, TROUPE_OPT_SGD, 5, het, &het_loss);
    s_train(d, 3, 3, true, TROUPE_OPT_SGD, 5, loc, &loc_loss);
    s_train(d, 1, 1, true, TROUPE_OPT_SGD, 5, one, &one_loss);
    s_same_on_every_rank(het, "2 + 1 streams");
    for (int e = 0; e < NP; e++)
        if (memcmp(&het[e], &loc[e], sizeof(float)) != 0)
            s_die("2 + 1 streams: parameter %d is %.9g but 3 streams in one process give %.9g", e,
                  (double)het[e], (double)loc[e]);
    if (memcmp(&het_loss, &loc_loss, sizeof het_loss) != 0)
        s_die("2 + 1 streams: last loss %.17g but 3 streams in one process give %.17g", het_loss,
              loc_loss);
    s_close(het, one, 1e-5, "2 + 1 streams against 1 replica on the global batch");
    fprintf(stderr,
            "rank %d: 2 + 1 streams equal 3 streams in one process bit for bit (W[0] %.9g, loss "
            "%.9g) and 1 replica to rounding (W[0] %.9g)\n",
            rank, (double)het[0], het_loss, (double)one[0]);
}

static void s_fed(const data_t *d)
{
    float fed[NP], idx[NP];
    double fed_loss = 0, idx_loss = 0;
    s_fixed = TROUPE_MM_MATERIALIZED;
    s_train(d, 2, 1, false, TROUPE_OPT_ADAMW, 5, fed, &fed_loss);
    s_fixed = (troupe_memory_mode_kind_t)0;
    s_train(d, 2, 1, false, TROUPE_OPT_ADAMW, 5, idx, &idx_loss);
    s_same_on_every_rank(fed, "the fed form");
    for (int e = 0; e < NP; e++)
        if (memcmp(&fed[e], &idx[e], sizeof(float)) != 0)
            s_die("fed form: parameter %d is %.9g but the indexed form gives %.9g", e,
                  (double)fed[e], (double)idx[e]);
    if (memcmp(&fed_loss, &idx_loss, sizeof fed_loss) != 0)
        s_die("fed form: last loss %.17g but the indexed form gives %.17g", fed_loss, idx_loss);
    fprintf(stderr, "rank %d: the fed form equals the indexed one bit for bit (W[0] %.9g)\n",
            troupe_cluster_rank(), (double)fed[0]);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "optimizer";
    (void)s_init; /* test_dp_model.c's: it would set another deadline and data set */
    CHECK(troupe_cluster_init(&argc, &argv));
    if (troupe_cluster_size() != 2)
        s_die("run with mpiexec -n 2 (got %d ranks)", troupe_cluster_size());
    int rank = troupe_cluster_rank();
    data_t *d = calloc(1, sizeof *d);
    if (!d)
        s_die("out of memory");
    s_make_data(d, 6);
    if (strcmp(mode, "streams") == 0 || strcmp(mode, "fed") == 0) {
        if (mode[0] == 's')
            s_streams(d);
        else
            s_fed(d);
        free(d);
        CHECK(troupe_cluster_finalize());
        return 0;
    }
    troupe_dp_setting_t settings[2] = {{"epochs", "3"}, {"seed", "42"}};
    size_t nsettings = 2;
    troupe_optimizer_t opt = dpt_opt(TROUPE_OPT_SGD);
    int split = 2, din = D;
    const char *needles[5] = {NULL};
    troupe_dp_precision_t precision = TROUPE_DP_PRECISION_FP32;
    if (strcmp(mode, "optimizer") == 0) {
        if (rank == 1)
            opt = dpt_opt(TROUPE_OPT_ADAMW);
        needles[0] = "dp_new: the ranks disagree on the run's settings: optimizer: 'sgd' on rank "
                     "0, 'adamw' on rank 1";
    } else if (strcmp(mode, "lr") == 0) {
        if (rank == 1)
            opt.lr = 0.125;
        needles[0] = "optimizer.lr: '0.05' on rank 0, '0.125' on rank 1";
    } else if (strcmp(mode, "shape") == 0) {
        if (rank == 1)
            din = D - 1;
        needles[0] = "parameters: '2: W single 3x2, b single 2' on rank 0, '2: W single 2x2, b "
                     "single 2' on rank 1";
        needles[1] = "inputs: '2: X single 6x3x3, Y single 6x3x2' on rank 0";
    } else if (strcmp(mode, "setting") == 0) {
        if (rank == 1)
            settings[0].value = "4";
        needles[0] = "epochs: '3' on rank 0, '4' on rank 1";
    } else if (strcmp(mode, "count") == 0) {
        if (rank == 1)
            nsettings = 1;
        needles[0] = "settings: the names of the program's settings: 'epochs seed' on rank 0, "
                     "'epochs' on rank 1. Every rank";
    } else if (strcmp(mode, "form") == 0) {
        if (rank == 1)
            s_fixed = TROUPE_MM_MATERIALIZED;
        needles[0] = "minibatch form: 'indexed by 'batch'' on rank 0, 'fed by 'batch'' on rank 1";
    } else if (strcmp(mode, "precision") == 0) {
        if (rank == 1)
            precision = TROUPE_DP_PRECISION_BF16;
        needles[0] = "precision: 'fp32' on rank 0, 'bf16' on rank 1";
    } else if (strcmp(mode, "fusedenv") == 0) {
        if (rank == 1)
            troupe_config_set_dp_fused_update(false);
        needles[0] = "TROUPE_DP_FUSED_UPDATE: 'auto' on rank 0, 'off' on rank 1";
    } else if (strcmp(mode, "agree") == 0) {
        if (rank == 1)
            settings[1].value = "7";
        needles[0] =
            "dp_agree: the ranks disagree on the run's settings: seed: '42' on rank 0, '7' on "
            "rank 1";
        double t0 = s_now();
        s_expect_refusal(troupe_dp_agree(settings, nsettings), needles, t0);
        free(d);
        CHECK(troupe_cluster_finalize());
        return 0;
    } else {
        s_die("unknown mode '%s'", mode);
    }
    needles[needles[1] ? 2 : 1] = "Every rank must run with the same settings";
    dpt_lr_t m;
    if (din == D) {
        s_model(&m, d, split, 0);
    } else { /* another shape: din - 1 features */
        static double xv[NB * 6 * D], yv[NB * 6 * O], wv[D * O], bv[O];
        dpt_lr_new(&m, NB * split, 6 / split, din, O, xv, yv, wv, bv);
    }
    troupe_dp_config_t cfg = {.backend = "sync",
                              .streams = 1,
                              .optimizer = opt,
                              .settings = settings,
                              .n_settings = nsettings,
                              .precision = precision};
    troupe_dp_t *dp = NULL;
    double t0 = s_now();
    troupe_status_t st = troupe_dp_new(&cfg, &m.model, &dp);
    if (dp)
        s_die("troupe_dp_new succeeded although rank 1 differs (%s)", mode);
    s_expect_refusal(st, needles, t0);
    dpt_lr_destroy(&m);
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
