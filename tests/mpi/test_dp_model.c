/* troupe — shared part of the multi-rank data-parallel tests (test_dp_equivalence.c,
 * test_dp_repro.c include this file): the linear regression of tests/dp_test_model.h (also
 * used by tests/test_dp.c) over a synthetic data set of NB global batches of GB rows, laid out
 * in `split` parts per global batch (part q of global batch j is minibatch j*split + q: rows
 * [q*GB/split, (q+1)*GB/split)). Any failure prints a message, leaves the cluster
 * (troupe_cluster_leave) and exits 1, so mpiexec ends the job and reports it failed. */
#include "actors/troupe.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef D /* an including program may widen the model (test_dp_pipeline.c) */
#define D 3
#endif
#define O 2
#define NB 3
#define MAX_GB 64
#define NP (D * O + O)

#include "mpi_die.h"

#define DPT_CHECK(expr) CHECK(expr)
#include "tests/dp_test_model.h"

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

/* The form s_model builds: 0 the indexed form, TROUPE_MM_MATERIALIZED the fed form
 * (dpt_lr_new_form). */
static troupe_memory_mode_kind_t s_fixed;

/* init_as_rank: the initial parameters are those of that rank (they differ per rank). */
static void s_model(dpt_lr_t *m, const data_t *d, int split, int init_as_rank)
{
    if (d->gb % split != 0)
        s_die("a global batch of %d rows does not split %d ways", d->gb, split);
    int64_t nb = (int64_t)NB * split, bs = d->gb / split;
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
    dpt_lr_new_form(m, nb, bs, D, O, xv, yv, wv, bv, s_fixed);
}

/* true: s_train compresses the cross-rank gradients to bfloat16 (compress_bf16). */
static bool s_compress;
/* true: s_train stages the cross-rank allreduce through host memory (stage_through_host). */
static bool s_stage;
/* true: some other rank stages while this one would not (the ranks' exchanges differ): every
 * rank stages (parallel/dp.c, s_agree_exchange) */
static bool s_stage_elsewhere;
/* s_train's backend ("cpu" unless an including program says otherwise: test_dp_gpu.c). */
static const char *s_backend = "cpu";
/* s_train's troupe_dp_config_t.overlap (parallel/dp.h, Overlap; AUTO: TROUPE_DP_OVERLAP). */
static troupe_dp_overlap_t s_overlap;
/* s_train's troupe_dp_config_t.grad_accum (0: one micro-step per step). */
static int s_accum;
/* s_train's troupe_dp_config_t.update and .grad_clip (0: AUTO, no clipping). */
static troupe_dp_update_t s_update;
static double s_grad_clip;
/* s_ndevices > 0: s_train replicates on these device ordinals (troupe_dp_config_t.devices). */
static int s_devices[4];
static int s_ndevices;

/* Non-NULL: s_train's optimizer settings instead of dpt_opt(kind). */
static const troupe_optimizer_t *s_opt;
/* What troupe_dp_fused_update and troupe_dp_fused_streams said in s_train's last run. */
static bool s_last_fused, s_last_fused_streams;
/* troupe_dp_optimizer_state_bytes in s_train's last run. */
static int64_t s_last_state_bytes;
/* Non-NULL: s_train saves a checkpoint there after its steps (troupe_dp_save). */
static const char *s_ck_path;

/* Trains `steps` steps; W then b into out, the last loss into *loss. The initial parameters
 * are this rank's own (different on every rank: a distributed troupe_dp_new must broadcast
 * rank 0's), or rank 0's for a local_only run (the reference). */
__attribute__((unused)) static void s_train(const data_t *d, int split, int streams, bool local_only,
                    troupe_optimizer_kind_t kind, int steps, float *out, double *loss)
{
    dpt_lr_t m;
    s_model(&m, d, split, local_only ? 0 : troupe_cluster_rank());
    troupe_dp_config_t cfg = {.backend = s_backend,
                              .streams = streams,
                              .optimizer = s_opt != NULL ? *s_opt : dpt_opt(kind),
                              .local_only = local_only,
                              .compress_bf16 = s_compress,
                              .devices = s_ndevices > 0 ? s_devices : NULL,
                              .n_devices = s_ndevices,
                              .stage_through_host = s_stage,
                              .overlap = s_overlap,
                              .bucket_bytes = 1, /* a segment per gradient's last use */
                              .grad_accum = s_accum,
                              .update = s_update,
                              .grad_clip = s_grad_clip};
    troupe_dp_t *dp = NULL;
    CHECK(troupe_dp_new(&cfg, &m.model, &dp));
    s_last_fused = troupe_dp_fused_update(dp);
    s_last_fused_streams = troupe_dp_fused_streams(dp);
    s_last_state_bytes = troupe_dp_optimizer_state_bytes(dp);
    /* CUDA-aware MPI forced on makes a host backend standing for device memory lend it as
     * it is (parallel/dp.h): then nothing is staged */
    bool want_staged = (s_stage || s_stage_elsewhere) && !local_only && troupe_cluster_size() > 1 &&
                       troupe_config_cuda_aware() != TROUPE_CUDA_AWARE_ON;
    if (troupe_dp_staged(dp) != want_staged)
        s_die("stage_through_host is %d, TROUPE_CUDA_AWARE %s, but troupe_dp_staged says %d",
              s_stage, troupe_config_cuda_aware_name(troupe_config_cuda_aware()),
              troupe_dp_staged(dp));
    for (int s = 0; s < steps; s++)
        CHECK(troupe_dp_step(dp));
    CHECK(troupe_dp_sync(dp));
    CHECK(troupe_dp_last_loss(dp, loss));
    if (s_ck_path != NULL)
        CHECK(troupe_dp_save(dp, s_ck_path));
    CHECK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
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

/* Joins the cluster and makes the data set: global batches of 2 rows per stream of every rank
 * (`streams` streams per rank). The caller frees the data. */
static data_t *s_init(int *argc, char ***argv, int streams)
{
    CHECK(troupe_cluster_init(argc, argv));
    CHECK(troupe_config_set_timeout_s(60));
    if (troupe_cluster_size() < 2)
        fprintf(stderr, "note: running on %d rank(s); the test is meant for mpiexec -n 2\n",
                troupe_cluster_size());
    data_t *d = calloc(1, sizeof *d);
    if (!d)
        s_die("out of memory");
    s_make_data(d, 2 * streams * troupe_cluster_size());
    return d;
}
