/* troupe — the transport in one process (transport/mpi/cluster.h, collective.h): without a
 * launcher the cluster is rank 0 of 1 and never calls MPI_Init; every collective is exact
 * (sum/max/min are the identity, mean divides by 1, a broadcast from rank 0 leaves the data),
 * at the host and the device level; invalid arguments are named; fingerprints of differing
 * requests produce the messages the ranks report (compared here without MPI); the fusion-bucket
 * planner cuts flat and scattered requests as collective.h says, and its staging round-trips;
 * remote contexts accept no rank of a single-rank cluster. Multi-rank behaviour: tests/mpi/. */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include "actors/troupe.h"
#include "base/alloc.h"
#include "troupe_config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"
#include "transport/mpi/bucket_impl.h"
#include "transport/mpi/transport_impl.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A deadline for waits that must succeed: generous, since a loaded machine (or ASan) only makes
 * them slower, and a passing wait ends as soon as its event completes. */
#define LONG_WAIT (60000 * MS)

/* Asserts `expr` fails with `code` and a message containing `needle`. */
#define FAILS(expr, code, needle)                                                                  \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        cr_assert_eq(s__, (code), "%s -> %s (expected %s): %s", #expr, troupe_status_str(s__),     \
                     troupe_status_str(code), troupe_last_error());                                \
        cr_assert(strstr(troupe_last_error(), (needle)) != NULL,                                   \
                  "%s: message '%s' does not contain '%s'", #expr, troupe_last_error(), (needle)); \
    } while (0)

static void s_no_launcher(void)
{
    /* A test run under mpirun/srun must still see no launcher. */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("SLURM_PROCID");
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
}

TestSuite(transport, .init = s_no_launcher);

/* troupe_allreduce of host tensors t[0..n). */
static troupe_status_t s_allreduce(const troupe_coll_tensor_t *t, size_t n, troupe_reduce_op_t op,
                                   troupe_event_t **ev)
{
    troupe_allreduce_args_t a = {.op = op, .n = n, .tensors = t};
    return troupe_allreduce(&a, ev);
}

/* troupe_allreduce of ctx's arrays of tns[0..n). */
static troupe_status_t s_allreduce_nodes(troupe_context_t *ctx, size_t n,
                                         troupe_tnode_t *const *tns, troupe_reduce_op_t op,
                                         unsigned flags, troupe_event_t **ev)
{
    troupe_allreduce_args_t a = {.op = op, .flags = flags, .n = n, .ctx = ctx, .nodes = tns};
    return troupe_allreduce(&a, ev);
}

Test(transport, without_a_launcher_the_cluster_is_rank_0_of_1)
{
    cr_assert(!troupe_cluster_is_initialized());
    cr_assert_eq(troupe_cluster_rank(), 0);
    cr_assert_eq(troupe_cluster_size(), 1);
    OK(troupe_cluster_init(NULL, NULL));
    cr_assert(troupe_cluster_is_initialized());
    cr_assert(!troupe_cluster_is_distributed());
    cr_assert_eq(troupe_cluster_rank(), 0);
    cr_assert_eq(troupe_cluster_size(), 1);
    cr_assert_eq(troupe_cluster_local_rank(), 0);
    cr_assert_eq(troupe_cluster_local_size(), 1);
    cr_assert_eq(troupe_cluster_status(), TROUPE_OK);
    OK(troupe_cluster_init(NULL, NULL)); /* a second call does nothing */
#if TROUPE_HAVE_MPI
    int flag = 1;
    /* no MPI call was made: MPI_Initialized is allowed before MPI_Init */
    extern int MPI_Initialized(int *);
    cr_assert_eq(MPI_Initialized(&flag), 0);
    cr_assert_eq(flag, 0, "troupe_cluster_init called MPI_Init without a launcher");
    cr_assert(strstr(troupe_mpi_version(), "MPI") != NULL, "version '%s'", troupe_mpi_version());
#else
    cr_assert_str_eq(troupe_mpi_version(), "none");
#endif
    OK(troupe_cluster_finalize());
    cr_assert(!troupe_cluster_is_initialized());
    OK(troupe_cluster_finalize()); /* without init: OK */
}

static void s_fill(troupe_prec_t p, void *data, int64_t count)
{
    size_t es = troupe_prec_size_bytes(p);
    for (int64_t i = 0; i < count; i++)
        troupe_prec_store_double(p, (char *)data + (size_t)i * es, (double)(i % 13) * 0.75 - 4);
}

Test(transport, single_rank_collectives_are_exact)
{
    OK(troupe_cluster_init(NULL, NULL));
    const troupe_prec_t precs[] = {TROUPE_PREC_SINGLE,   TROUPE_PREC_DOUBLE, TROUPE_PREC_HALF,
                                   TROUPE_PREC_BFLOAT16, TROUPE_PREC_FP8,    TROUPE_PREC_INT32,
                                   TROUPE_PREC_INT64,    TROUPE_PREC_UINT32, TROUPE_PREC_UINT64};
    const int64_t count = 333;
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        troupe_prec_t p = precs[pi];
        size_t bytes = (size_t)count * troupe_prec_size_bytes(p);
        void *data = troupe_malloc(bytes), *orig = troupe_malloc(bytes);
        s_fill(p, data, count);
        memcpy(orig, data, bytes);
        for (int op = TROUPE_REDUCE_SUM; op <= TROUPE_REDUCE_MIN; op++) {
            troupe_coll_tensor_t t = {.data = data,
                                      .count = count,
                                      .prec = p,
                                      .node_id = 3,
                                      .ndims = 1,
                                      .dims = {count},
                                      .name = "t"};
            troupe_event_t *ev = NULL;
            OK(s_allreduce(&t, 1, (troupe_reduce_op_t)op, &ev));
            OK(troupe_event_sync(ev, LONG_WAIT));
            troupe_event_release(&ev);
            cr_assert(memcmp(data, orig, bytes) == 0, "%s %s changed the data on one rank",
                      troupe_prec_name(p), troupe_reduce_op_name((troupe_reduce_op_t)op));
        }
        troupe_coll_tensor_t t = {.data = data, .count = count, .prec = p};
        troupe_event_t *ev = NULL;
        OK(troupe_broadcast(&t, 1, 0, &ev));
        OK(troupe_event_sync(ev, LONG_WAIT));
        troupe_event_release(&ev);
        cr_assert(memcmp(data, orig, bytes) == 0);
        troupe_free(data);
        troupe_free(orig);
    }
    troupe_transport_stats_t st;
    troupe_transport_get_stats(&st);
    cr_assert_eq(st.collectives, 9 * 5);
    cr_assert_eq(st.completed, 9 * 5);
    cr_assert_eq(st.failures, 0);
    OK(troupe_cluster_finalize());
}

Test(transport, collectives_work_without_init_as_one_rank)
{
    float x[2] = {1.5f, -2};
    troupe_coll_tensor_t t = {.data = x, .count = 2, .prec = TROUPE_PREC_SINGLE};
    troupe_event_t *ev = NULL;
    OK(s_allreduce(&t, 1, TROUPE_REDUCE_MEAN, &ev));
    OK(troupe_event_sync(ev, LONG_WAIT));
    troupe_event_release(&ev);
    cr_assert(x[0] == 1.5f && x[1] == -2);
}

Test(transport, invalid_arguments_are_named)
{
    OK(troupe_cluster_init(NULL, NULL));
    float x[4] = {0};
    troupe_event_t *ev = NULL;
    troupe_coll_tensor_t good = {
        .data = x, .count = 4, .prec = TROUPE_PREC_SINGLE, .node_id = 5, .name = "good"};
    FAILS(troupe_allreduce(NULL, &ev), TROUPE_INVALID_ARGUMENT, "args is NULL");
    troupe_allreduce_args_t args = {.n = 1};
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "not neither");
    args.tensors = &good;
    args.ctx = (troupe_context_t *)(void *)x; /* never used: refused first */
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "not both");
    args.flags = TROUPE_COLL_DEFERRED;
    args.tensors = NULL;
    FAILS(troupe_allreduce(&args, NULL), TROUPE_INVALID_ARGUMENT, "out_ev is NULL");
    args = (troupe_allreduce_args_t){.n = 1, .tensors = &good, .flags = TROUPE_COLL_DEFERRED};
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "needs the device level");
    args.flags = 0x80u;
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "unknown flags 0x80");
    /* troupe_allreduce_args_t.after: both or neither of after and n_after, no NULL event, the
     * host level only (the device level follows its stream) */
    troupe_event_t *gate_ev = NULL;
    OK(troupe_event_new("gate", &gate_ev));
    troupe_event_t *after[2] = {gate_ev, NULL};
    args = (troupe_allreduce_args_t){.n = 1, .tensors = &good, .n_after = 2};
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "after is NULL but n_after is 2");
    args.after = after;
    args.n_after = 0;
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "after is given but n_after is 0");
    args.n_after = 2;
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "after[1] is NULL");
    args = (troupe_allreduce_args_t){.n = 1,
                                     .ctx = (troupe_context_t *)(void *)x, /* refused first */
                                     .nodes = (troupe_tnode_t *const *)(void *)x,
                                     .after = after,
                                     .n_after = 1};
    FAILS(troupe_allreduce(&args, &ev), TROUPE_INVALID_ARGUMENT, "after needs the host level");
    cr_assert(troupe_event_complete(gate_ev, TROUPE_OK, NULL));
    troupe_event_release(&gate_ev);
    FAILS(s_allreduce(&good, 0, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT, "n = 0");
    FAILS(s_allreduce(&good, 1, (troupe_reduce_op_t)7, &ev), TROUPE_INVALID_ARGUMENT, "op 7");
    FAILS(s_allreduce(&good, 1, TROUPE_REDUCE_SUM, NULL), TROUPE_INVALID_ARGUMENT, "out_ev");
    troupe_coll_tensor_t two[2] = {good, good};
    two[1].prec = TROUPE_PREC_UINT4X32;
    two[1].name = "rng";
    two[1].node_id = 9;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT,
          "tensor 1 (node 9 'rng'): precision uint4x32 cannot be reduced");
    two[1] = good;
    two[1].prec = TROUPE_PREC_BYTE;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_MAX, &ev), TROUPE_INVALID_ARGUMENT, "precision byte");
    two[1] = good;
    two[1].count = -1;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT,
          "tensor 1 (node 5 'good'): count -1 < 0");
    two[1] = good;
    two[1].data = NULL;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT, "data is NULL");
    two[1] = good;
    two[1].ndims = 2;
    two[1].dims[0] = 3;
    two[1].dims[1] = 2;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT,
          "dims hold 6 elements but count is 4");
    two[1] = good;
    two[1].ndims = TROUPE_MAX_DIMS + 1;
    FAILS(s_allreduce(two, 2, TROUPE_REDUCE_SUM, &ev), TROUPE_INVALID_ARGUMENT, "ndims 9");
    two[1] = good;
    two[1].prec = TROUPE_PREC_VOID;
    FAILS(troupe_broadcast(two, 2, 0, &ev), TROUPE_INVALID_ARGUMENT, "invalid precision");
    FAILS(troupe_broadcast(&good, 1, 1, &ev), TROUPE_INVALID_ARGUMENT,
          "root 1 outside the ranks 0..0");
    FAILS(troupe_broadcast(&good, 1, -1, &ev), TROUPE_INVALID_ARGUMENT, "root -1");
    cr_assert_null(ev);
    /* a broadcast moves any precision (as bytes) */
    two[1] = good;
    two[1].prec = TROUPE_PREC_UINT4X32;
    two[1].count = 1;
    OK(troupe_broadcast(two, 2, 0, &ev));
    OK(troupe_event_sync(ev, LONG_WAIT));
    troupe_event_release(&ev);
    FAILS(s_allreduce_nodes(NULL, 1, NULL, TROUPE_REDUCE_SUM, 0u, &ev), TROUPE_INVALID_ARGUMENT,
          "not neither");
    cr_assert_str_eq(troupe_reduce_op_name(TROUPE_REDUCE_MEAN), "mean");
    cr_assert_str_eq(troupe_reduce_op_name((troupe_reduce_op_t)9), "invalid");
    OK(troupe_cluster_finalize());
}

Test(transport, leaving_marks_the_cluster_failed_without_ending_the_process)
{
    OK(troupe_cluster_leave("not initialized: only logged"));
    cr_assert_eq(troupe_cluster_status(), TROUPE_OK);
    OK(troupe_cluster_init(NULL, NULL));
    OK(troupe_cluster_leave("the data set is corrupt"));
    cr_assert(!troupe_cluster_is_initialized());
    troupe_status_t st = troupe_cluster_status();
    cr_assert_eq(st, TROUPE_CANCELLED, "%s", troupe_status_str(st));
    cr_assert(strstr(troupe_last_error(), "the data set is corrupt"), "%s", troupe_last_error());
    OK(troupe_cluster_finalize()); /* after leaving: nothing to do */
}

Test(transport, coll_tensor_of_a_node)
{
    troupe_tnode_t *tn = NULL;
    const char *l[2] = {"layer1", "w"};
    OK(troupe_tnode_new(l, 2, TROUPE_PREC_HALF, 2, (int64_t[]){3, 5}, NULL, 0.0, &tn));
    int dummy;
    troupe_coll_tensor_t t = troupe_coll_tensor_of(tn, &dummy);
    cr_assert_eq(t.data, &dummy);
    cr_assert_eq(t.count, 15);
    cr_assert_eq(t.prec, TROUPE_PREC_HALF);
    cr_assert_eq(t.node_id, tn->id);
    cr_assert_eq(t.ndims, 2);
    cr_assert(t.dims[0] == 3 && t.dims[1] == 5);
    cr_assert_str_eq(t.name, "w");
    troupe_tnode_release(&tn);
}

/* Device level on one rank: the lend hands the arrays over and the transport completes at
 * once; the node keeps its values, and work scheduled after it sees them. */
Test(transport, single_rank_allreduce_nodes_keeps_values)
{
    OK(troupe_cluster_init(NULL, NULL));
    troupe_config_set_auto_host_transfers(false);
    const char *drivers[2] = {"sync", "cpu"};
    for (int di = 0; di < 2; di++) {
        troupe_backend_t *b = NULL;
        troupe_device_t *d = NULL;
        troupe_stream_t *s = NULL;
        troupe_context_t *ctx = NULL, *c = NULL;
        troupe_tnode_t *tn[2] = {NULL, NULL};
        OK(troupe_backend_open(drivers[di], TROUPE_FOR_PARALLEL_COPYING, &b));
        OK(troupe_get_device(b, 0, &d));
        OK(troupe_new_stream(d, &s));
        OK(troupe_context_new(s, &ctx));
        OK(troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, (int64_t[]){3}, NULL, 0, &tn[0]));
        OK(troupe_tnode_new(NULL, 0, TROUPE_PREC_INT32, 1, (int64_t[]){2}, NULL, 0, &tn[1]));
        OK(troupe_tnode_set_values(tn[0], (double[]){1.5, -2, 3}, 3));
        OK(troupe_tnode_set_values(tn[1], (double[]){7, -9}, 2));
        for (int k = 0; k < 2; k++) {
            OK(troupe_init_from_host(ctx, tn[k], &c, NULL));
            troupe_context_release(&ctx);
            ctx = c;
        }
        troupe_event_t *ev = NULL;
        OK(s_allreduce_nodes(ctx, 2, tn, TROUPE_REDUCE_MEAN, 0u, &ev));
        OK(troupe_event_sync(ev, LONG_WAIT));
        troupe_event_release(&ev);
        OK(troupe_broadcast_nodes(ctx, 1, tn, 0, NULL));
        FAILS(troupe_broadcast_nodes(ctx, 1, tn, 1, NULL), TROUPE_INVALID_ARGUMENT, "root 1");
        troupe_tnode_t *absent = NULL;
        OK(troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, (int64_t[]){1}, NULL, 0, &absent));
        cr_assert_neq(s_allreduce_nodes(ctx, 1, &absent, TROUPE_REDUCE_SUM, 0u, NULL), TROUPE_OK,
                      "a node that is not in the context");
        FAILS(s_allreduce_nodes(ctx, 1, NULL, TROUPE_REDUCE_SUM, 0u, NULL), TROUPE_INVALID_ARGUMENT,
              "no nodes");
        /* deferred: the stream goes on; it waits for the result where the caller says */
        OK(s_allreduce_nodes(ctx, 1, tn, TROUPE_REDUCE_SUM, TROUPE_COLL_DEFERRED | TROUPE_COLL_LAZY,
                             &ev));
        OK(troupe_will_wait_for(ctx, ev));
        troupe_event_release(&ev);
        for (int k = 0; k < 2; k++) {
            OK(troupe_to_host(ctx, tn[k], &ev));
            OK(troupe_event_sync(ev, LONG_WAIT));
            troupe_event_release(&ev);
        }
        double v0[3], v1[2];
        OK(troupe_tnode_get_values(tn[0], v0, 3));
        OK(troupe_tnode_get_values(tn[1], v1, 2));
        cr_assert(v0[0] == 1.5 && v0[1] == -2 && v0[2] == 3, "%s: %g %g %g", drivers[di], v0[0],
                  v0[1], v0[2]);
        cr_assert(v1[0] == 7 && v1[1] == -9);
        OK(troupe_stream_await(s, LONG_WAIT));
        troupe_tnode_release(&absent);
        troupe_context_release(&ctx);
        troupe_tnode_release(&tn[0]);
        troupe_tnode_release(&tn[1]);
        troupe_stream_release(&s);
        troupe_backend_close(&b);
    }
    OK(troupe_cluster_finalize());
}

/* p := p * 2 + sum (the fused update of the test below). */
static void s_double_and_add(const void *arg, int64_t n, const float *sum, float *const *side)
{
    (void)arg;
    for (int64_t e = 0; e < n; e++)
        side[0][e] = side[0][e] * 2.0f + sum[e];
}

Test(transport, single_rank_fused_update_runs_in_place)
{
    OK(troupe_cluster_init(NULL, NULL));
    troupe_config_set_auto_host_transfers(false);
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *c = NULL;
    troupe_tnode_t *g = NULL, *p = NULL;
    OK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &b));
    OK(troupe_get_device(b, 0, &d));
    OK(troupe_new_stream(d, &s));
    OK(troupe_context_new(s, &ctx));
    OK(troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, (int64_t[]){3}, NULL, 0, &g));
    OK(troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, (int64_t[]){3}, NULL, 0, &p));
    OK(troupe_tnode_set_values(g, (double[]){1, -2, 0.5}, 3));
    OK(troupe_tnode_set_values(p, (double[]){10, 20, 30}, 3));
    troupe_tnode_t *both[2] = {g, p};
    OK(troupe_init_from_host_packed(ctx, 2, both, &c));
    troupe_context_release(&ctx);
    ctx = c;
    troupe_coll_apply_t ap = {
        .fn = s_double_and_add, .id = 7, .n_side = 1, .side = (troupe_tnode_t *const[]){p}};
    troupe_allreduce_args_t a = {
        .op = TROUPE_REDUCE_SUM, .n = 1, .ctx = ctx, .nodes = (troupe_tnode_t *const[]){g}};
    a.apply = &ap;
    troupe_event_t *ev = NULL;
    OK(troupe_allreduce(&a, &ev)); /* one rank: the sum is g itself, applied here */
    OK(troupe_event_sync(ev, LONG_WAIT));
    troupe_event_release(&ev);
    OK(troupe_to_host(ctx, p, &ev));
    OK(troupe_event_sync(ev, LONG_WAIT));
    troupe_event_release(&ev);
    double v[3];
    OK(troupe_tnode_get_values(p, v, 3));
    cr_assert(v[0] == 21 && v[1] == 38 && v[2] == 60.5, "%g %g %g", v[0], v[1], v[2]);
    /* the rules: op sum only, the device level only */
    a.op = TROUPE_REDUCE_MAX;
    FAILS(troupe_allreduce(&a, &ev), TROUPE_INVALID_ARGUMENT, "needs op sum, not max");
    OK(troupe_stream_await(s, LONG_WAIT));
    troupe_context_release(&ctx);
    troupe_tnode_release(&g);
    troupe_tnode_release(&p);
    troupe_stream_release(&s);
    troupe_backend_close(&b);
    OK(troupe_cluster_finalize());
}

Test(transport, remote_contexts_need_another_rank)
{
    troupe_context_t *r = NULL;
    FAILS(troupe_context_new_remote(1, &r), TROUPE_FAILED_PRECONDITION, "troupe_cluster_init");
    OK(troupe_cluster_init(NULL, NULL));
    FAILS(troupe_context_new_remote(0, &r), TROUPE_INVALID_ARGUMENT, "rank 0");
    FAILS(troupe_context_new_remote(1, &r), TROUPE_INVALID_ARGUMENT, "rank 1");
    cr_assert_null(r);
    OK(troupe_cluster_finalize());
    FAILS(troupe_context_new_remote(1, &r), TROUPE_FAILED_PRECONDITION, "troupe_cluster_init");
}

/* ---- fingerprints (what the ranks compare; no MPI needed) -------------------------------- */

static troupe__req_t *s_req(troupe__req_kind_t kind, int n, const troupe_coll_tensor_t *t)
{
    troupe__req_t *r = troupe__req_new(kind, (size_t)n);
    cr_assert_not_null(r);
    for (int i = 0; i < n; i++)
        troupe__req_set_tensor(r, (size_t)i, &t[i]);
    r->seq = 3;
    return r;
}

static troupe_status_t s_compare(troupe__req_t *a, troupe__req_t *b)
{
    void *fa = troupe_malloc(troupe__fp_size(a->n)), *fb = troupe_malloc(troupe__fp_size(b->n));
    troupe__fp_encode(a, fa);
    troupe__fp_encode(b, fb);
    OK(troupe__fp_check_frame(fb, troupe__fp_size(b->n), 1));
    troupe_status_t st = troupe__fp_compare("allreduce #3", fa, 0, fb, 1);
    troupe_free(fa);
    troupe_free(fb);
    return st;
}

Test(transport, fingerprint_mismatches_name_ranks_tensor_and_field)
{
    troupe_coll_tensor_t t[2] = {
        {.count = 32,
         .prec = TROUPE_PREC_SINGLE,
         .node_id = 12,
         .ndims = 2,
         .dims = {4, 8},
         .name = "w1"},
        {.count = 2, .prec = TROUPE_PREC_DOUBLE, .node_id = 13, .name = "b1"},
    };
    troupe_coll_tensor_t u[2] = {t[0], t[1]};
    troupe__req_t *a = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    troupe__req_t *b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    OK(s_compare(a, b));
    troupe__req_free(&b);

    u[0].dims[0] = 5;
    u[0].count = 40;
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION,
          "allreduce #3: fingerprint mismatch: tensor 0 (node 12 'w1') dims [4;8] on rank 0 but "
          "[5;8] on rank 1");
    troupe__req_free(&b);

    u[0] = t[0];
    u[1].prec = TROUPE_PREC_SINGLE;
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION,
          "tensor 1 (node 13 'b1') precision double on rank 0 but single on rank 1");
    troupe__req_free(&b);

    u[1] = t[1];
    u[1].node_id = 14;
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION, "node id 13 on rank 0 but 14 on rank 1");
    troupe__req_free(&b);

    /* node id 0 and ndims 0: only the count is checked */
    u[1].node_id = 0;
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    OK(s_compare(a, b));
    troupe__req_free(&b);
    u[1].count = 3;
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, u);
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION, "count 2 on rank 0 but 3 on rank 1");
    troupe__req_free(&b);

    b = s_req(TROUPE__REQ_ALLREDUCE, 1, t);
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION,
          "number of tensors 2 on rank 0 but 1 on rank 1");
    troupe__req_free(&b);

    b = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    b->op = TROUPE_REDUCE_MAX;
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION, "op sum on rank 0 but max on rank 1");
    b->kind = TROUPE__REQ_BROADCAST;
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION,
          "kind allreduce on rank 0 but broadcast on rank 1");
    troupe__req_free(&b);

    b = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    b->bf16_wire = true;
    FAILS(s_compare(a, b), TROUPE_FAILED_PRECONDITION,
          "bfloat16 compression (TROUPE_COLL_BF16) on rank 1 but not on rank 0");
    troupe__req_free(&b);

    /* digests: equal for equal requests, different when a compared field differs */
    troupe__fp_digest_t da, db;
    troupe__fp_digest(a, &da);
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    b->bf16_wire = true;
    troupe__fp_digest(b, &db);
    cr_assert(!troupe__fp_digest_equal(&da, &db), "bfloat16 compression enters the digest");
    troupe__req_free(&b);
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    troupe__fp_digest(b, &db);
    cr_assert(troupe__fp_digest_equal(&da, &db));
    b->fp[1].dims[0] = 2;
    b->fp[1].ndims = 1;
    troupe__fp_digest(b, &db);
    cr_assert(!troupe__fp_digest_equal(&da, &db), "ndims/dims enter the digest");
    troupe__req_free(&b);
    b = s_req(TROUPE__REQ_ALLREDUCE, 2, t);
    b->seq = 4;
    troupe__fp_digest(b, &db);
    cr_assert(!troupe__fp_digest_equal(&da, &db), "a collective's sequence number enters it");
    troupe__req_free(&b);
    /* point-to-point: the two sides' kinds and channel numbers do not enter it */
    troupe__req_t *ps = s_req(TROUPE__REQ_SEND, 1, t), *pr = s_req(TROUPE__REQ_RECV, 1, t);
    pr->seq = 9;
    troupe__fp_digest(ps, &da);
    troupe__fp_digest(pr, &db);
    cr_assert(troupe__fp_digest_equal(&da, &db));
    troupe__req_free(&ps);
    troupe__req_free(&pr);

    /* framing */
    char junk[16] = {0};
    FAILS(troupe__fp_check_frame(junk, sizeof junk, 4), TROUPE_INVALID_ARGUMENT, "rank 4");
    void *fa = troupe_malloc(troupe__fp_size(a->n));
    troupe__fp_encode(a, fa);
    FAILS(troupe__fp_check_frame(fa, troupe__fp_size(a->n) - 1, 2), TROUPE_INVALID_ARGUMENT,
          "do not hold 2 tensors");
    troupe_free(fa);
    troupe__req_free(&a);
}

/* ---- fusion buckets (the planner every request goes through; no MPI needed) ------------- */

/* Segment k of plan p is tensor t from unit off, count units. */
static void s_seg_is(const troupe__bucket_plan_t *p, size_t k, size_t t, int64_t off, int64_t count)
{
    cr_assert_lt(k, p->nsegs);
    cr_assert(p->segs[k].t == t && p->segs[k].off == off && p->segs[k].count == count,
              "segment %zu: tensor %zu [%lld, +%lld), expected tensor %zu [%lld, +%lld)", k,
              p->segs[k].t, (long long)p->segs[k].off, (long long)p->segs[k].count, t,
              (long long)off, (long long)count);
}

/* Tensors back to back in request order form one span; the flat plan cuts it in order into
 * buckets of the fusion size, each in place, whatever the tensor boundaries. */
Test(transport, flat_requests_are_cut_in_order_into_in_place_buckets)
{
    static float span[60];
    troupe_coll_tensor_t t[3] = {
        {.data = span, .count = 10, .prec = TROUPE_PREC_SINGLE},
        {.data = span + 10, .count = 20, .prec = TROUPE_PREC_SINGLE},
        {.data = span + 30, .count = 30, .prec = TROUPE_PREC_SINGLE},
    };
    troupe__req_t *r = s_req(TROUPE__REQ_ALLREDUCE, 3, t);
    r->fusion_bytes = 25 * sizeof(float);
    const char *start = NULL;
    int64_t bytes = 0;
    troupe__cls_t cls = TROUPE__NCLS;
    cr_assert(troupe__bucket_flat(r, &start, &bytes, &cls));
    cr_assert(start == (const char *)span && bytes == (int64_t)sizeof span);
    cr_assert_eq(cls, TROUPE__CLS_F32);
    troupe__bucket_plan_t p = {0};
    OK(troupe__bucket_plan(&p, r, true, "allreduce #1"));
    cr_assert_eq(p.nbks, 3);
    const int64_t units[3] = {25, 25, 10};
    for (size_t b = 0; b < 3; b++) {
        cr_assert_eq(p.bks[b].units, units[b], "bucket %zu", b);
        cr_assert(p.bks[b].in_place, "bucket %zu is staged", b);
        cr_assert_eq(p.bks[b].slot, -1);
    }
    s_seg_is(&p, 0, 0, 0, 10);
    s_seg_is(&p, 1, 1, 0, 15);
    s_seg_is(&p, 2, 1, 15, 5);
    s_seg_is(&p, 3, 2, 0, 20);
    s_seg_is(&p, 4, 2, 20, 10);
    cr_assert_eq(troupe__seg_ptr(r, &p.segs[2]), (void *)(span + 25));
    troupe__bucket_plan_free(&p);
    /* a gap breaks the span */
    r->tensors[2].data = span + 31;
    cr_assert_not(troupe__bucket_flat(r, &start, &bytes, &cls));
    troupe__req_free(&r);
}

/* Otherwise the plan goes class by class: large tensors in buckets of their own (sliced when
 * larger than a bucket), small ones packed in order into shared buckets, staged when they do
 * not lie back to back; half precision is widened to single through the staging buffer. */
Test(transport, class_plans_share_buckets_and_stage_scattered_tensors)
{
    static float a[8], c[4];
    static double d[3];
    static uint16_t h[2];
    troupe_coll_tensor_t t[4] = {
        {.data = a, .count = 8, .prec = TROUPE_PREC_SINGLE},
        {.data = d, .count = 3, .prec = TROUPE_PREC_DOUBLE},
        {.data = c, .count = 4, .prec = TROUPE_PREC_SINGLE},
        {.data = h, .count = 2, .prec = TROUPE_PREC_HALF},
    };
    troupe__req_t *r = s_req(TROUPE__REQ_ALLREDUCE, 4, t);
    r->fusion_bytes = 6 * sizeof(float); /* a (8) is larger than a bucket: two slices */
    const char *start = NULL;
    int64_t bytes = 0;
    troupe__cls_t cls = TROUPE__NCLS;
    cr_assert_not(troupe__bucket_flat(r, &start, &bytes, &cls));
    troupe__bucket_plan_t p = {0};
    OK(troupe__bucket_plan(&p, r, false, "allreduce #2"));
    /* single: a's two slices, then c and h (widened) sharing one bucket; double: d */
    cr_assert_eq(p.nbks, 4);
    cr_assert(p.bks[0].cls == TROUPE__CLS_F32 && p.bks[0].units == 6 && p.bks[0].in_place);
    cr_assert(p.bks[1].cls == TROUPE__CLS_F32 && p.bks[1].units == 2 && p.bks[1].in_place);
    cr_assert(p.bks[2].cls == TROUPE__CLS_F32 && p.bks[2].units == 6 && !p.bks[2].in_place);
    cr_assert(p.bks[3].cls == TROUPE__CLS_F64 && p.bks[3].units == 3 && p.bks[3].in_place);
    s_seg_is(&p, 0, 0, 0, 6);
    s_seg_is(&p, 1, 0, 6, 2);
    s_seg_is(&p, 2, 2, 0, 4);
    s_seg_is(&p, 3, 3, 0, 2);
    s_seg_is(&p, 4, 1, 0, 3);
    /* staging round trip: c's values and h's half values come back, mean divided by 2 */
    for (int i = 0; i < 4; i++)
        c[i] = (float)(2 * i + 2);
    h[0] = troupe_single_to_half(3.0f);
    h[1] = troupe_single_to_half(-5.0f);
    float slot[6];
    cr_assert_eq(troupe__bucket_bytes(&p.bks[2]), sizeof slot);
    troupe__bucket_pack(r, &p, &p.bks[2], slot);
    cr_assert(slot[0] == 2.0f && slot[3] == 8.0f && slot[4] == 3.0f && slot[5] == -5.0f);
    r->op = TROUPE_REDUCE_MEAN;
    troupe__bucket_unpack(r, &p, &p.bks[2], slot, 2);
    cr_assert(c[0] == 1.0f && c[3] == 4.0f);
    cr_assert(troupe_half_to_single(h[0]) == 1.5f && troupe_half_to_single(h[1]) == -2.5f);
    troupe__bucket_plan_free(&p);
    troupe__req_free(&r);
}

/* The transport's bfloat16 conversions (TROUPE_COLL_BF16) give the bits of ir/prec's, ties
 * to even included, and its reduction rounds the single-precision result once. */
Test(transport, bf16_wire_conversions_match_ir_prec)
{
    enum { N = 4096 };
    static float in[N], back[N];
    static uint16_t packed[N];
    const float special[] = {0.0f,
                             -0.0f,
                             1.0f,
                             1.00390625f /* tie: even */,
                             1.01171875f /* tie: up */,
                             3.4e38f,
                             -3.4e38f,
                             1e-40f /* subnormal */,
                             INFINITY,
                             -INFINITY,
                             65504.0f,
                             1.0f / 3.0f};
    size_t ns = sizeof special / sizeof *special;
    uint32_t x = 12345u;
    for (int i = 0; i < N; i++) {
        if ((size_t)i < ns) {
            in[i] = special[i];
        } else {
            x = x * 1664525u + 1013904223u; /* any bits that are not NaN */
            uint32_t u = x;
            if ((u & 0x7f800000u) == 0x7f800000u)
                u &= 0xbfffffffu;
            memcpy(&in[i], &u, sizeof u);
        }
    }
    troupe__bf16_pack(packed, in, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(packed[i], troupe_single_to_bfloat16(in[i]),
                     "element %d (%a): 0x%04x, ir/prec gives 0x%04x", i, (double)in[i], packed[i],
                     troupe_single_to_bfloat16(in[i]));
    troupe__bf16_unpack(back, packed, N, 1);
    for (int i = 0; i < N; i++)
        cr_assert(memcmp(&back[i], &(float){troupe_bfloat16_to_single(packed[i])}, 4) == 0,
                  "element %d", i);
    float nan_in = NAN;
    uint16_t nan_out = 0;
    troupe__bf16_pack(&nan_out, &nan_in, 1);
    cr_assert(isnan(troupe_bfloat16_to_single(nan_out)), "NaN stays NaN");
    /* sum: 1 + (1 + 2^-7) = 2 + 2^-7 lies halfway between the bfloat16 values 2 and 2 + 2^-6:
     * it rounds to even, 2 */
    uint16_t d[3] = {troupe_single_to_bfloat16(1.0f), troupe_single_to_bfloat16(1.0078125f),
                     troupe_single_to_bfloat16(-3.0f)};
    uint16_t s[3] = {troupe_single_to_bfloat16(1.0078125f), troupe_single_to_bfloat16(1.0f),
                     troupe_single_to_bfloat16(2.0f)};
    troupe__reduce_into(TROUPE__RED_BF16, TROUPE_REDUCE_SUM, d, s, 3);
    cr_assert_eq(troupe_bfloat16_to_single(d[0]), 2.0f);
    cr_assert_eq(troupe_bfloat16_to_single(d[1]), 2.0f);
    cr_assert_eq(troupe_bfloat16_to_single(d[2]), -1.0f);
    troupe__reduce_into(TROUPE__RED_BF16, TROUPE_REDUCE_MIN, d, s, 3);
    cr_assert_eq(troupe_bfloat16_to_single(d[2]), -1.0f);
    troupe__reduce_into(TROUPE__RED_BF16, TROUPE_REDUCE_MAX, d, s, 3);
    cr_assert_eq(troupe_bfloat16_to_single(d[2]), 2.0f);
}
