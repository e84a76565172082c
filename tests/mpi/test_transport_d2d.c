/* troupe — multi-rank test of device_to_device across ranks (docs/architecture.md §5, §8;
 * actors/lend.h remote contexts) through the transport's remote `move`:
 *   - COPY: rank 1 sends its g = [3 4] (cpu context) into rank 0's merge buffer; rank 0 runs
 *     the routine `g =+ g.merge` on its own g = [1 2] and gets [4 6];
 *   - NO: rank 1 sends g again, straight into rank 0's array of g: [3 4];
 *   - lanes: rank 0 schedules a receive and then a host-level allreduce, while rank 1 does the
 *     allreduce first and sends afterwards; neither waits behind the other;
 *   - the reverse direction (rank 0 sends h to rank 1) and a fingerprint mismatch of a move
 *     (rank 1 sends node h while rank 0 expects g) failing on both ranks with
 *     FAILED_PRECONDITION naming both ranks.
 * Prints one FAIL line per failed check; exits 0 only if every check passed on this rank. */
#include "actors/troupe.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include "mpi_test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SYNC_NS (60LL * 1000 * 1000 * 1000)

static troupe_status_t s_sync(troupe_event_t **ev)
{
    troupe_status_t st = troupe_event_sync(*ev, SYNC_NS);
    troupe_event_release(ev);
    return st;
}

/* ctx's values of the 2-element node tn, through to_host and its event. */
static troupe_status_t s_get(troupe_context_t *ctx, troupe_tnode_t *tn, double out[2])
{
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_to_host(ctx, tn, &ev));
    TROUPE_RETURN_IF_ERROR(s_sync(&ev));
    return troupe_tnode_get_values(tn, out, 2);
}

static void s_expect2(const char *what, const double got[2], double a, double b)
{
    if (got[0] != a || got[1] != b)
        s_fail("%s: got [%g %g], expected [%g %g]", what, got[0], got[1], a, b);
}

/* lhs =+ rhs.merge over "i=>i" (tests/test_merge.c) */
static troupe_status_t s_consumer(troupe_backend_t *b, troupe_tnode_t *g, troupe_code_t **out)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    troupe_status_t st = troupe_asgn_comp_new(&comp);
    if (st == TROUPE_OK)
        st = troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, g, TROUPE_UNOP_IDENTITY,
                                    troupe_asgn_merge(g), "i=>i", &t);
    if (st == TROUPE_OK) {
        troupe_asgn_comp_set_root(comp, t);
        st = troupe_compile(b, comp, "merge_g", out);
    }
    troupe_asgn_comp_destroy(&comp);
    return st;
}

int main(int argc, char **argv)
{
    troupe_status_t st = s_init(&argc, &argv);
    if (st != TROUPE_OK)
        return 1;
    int peer = 1 - s_rank;
    troupe_config_set_auto_host_transfers(false);
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *remote = NULL, *tagged = NULL;
    troupe_tnode_t *g = NULL, *h = NULL;
    troupe_code_t *code = NULL;
    troupe_routine_t *r = NULL;
    troupe_event_t *ev = NULL, *ev2 = NULL;
    double got[2];

    CHECK_OK(troupe_backend_open("cpu", TROUPE_FOR_PARALLEL_COPYING, &b));
    CHECK_OK(troupe_get_device(b, 0, &d));
    CHECK_OK(troupe_new_stream(d, &s));
    CHECK_OK(troupe_context_new(s, &ctx));
    const int64_t dims[1] = {2};
    const char *lg[1] = {"g"}, *lh[1] = {"h"};
    CHECK_OK(troupe_tnode_new(lg, 1, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &g));
    CHECK_OK(troupe_tnode_new(lh, 1, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &h));
    double init_g[2] = {s_rank == 0 ? 1 : 3, s_rank == 0 ? 2 : 4};
    double init_h[2] = {s_rank == 0 ? 7 : -1, s_rank == 0 ? 8 : -1};
    CHECK_OK(troupe_tnode_set_values(g, init_g, 2));
    CHECK_OK(troupe_tnode_set_values(h, init_h, 2));
    troupe_context_t *c = NULL;
    CHECK_OK(troupe_init_from_host(ctx, g, &c, NULL));
    troupe_context_release(&ctx);
    ctx = c;
    CHECK_OK(troupe_init_from_host(ctx, h, &c, NULL));
    troupe_context_release(&ctx);
    ctx = c;
    CHECK_OK(troupe_context_new_remote(peer, &remote));
    if (!troupe_context_is_remote(remote) || troupe_context_remote_rank(remote) != peer)
        s_fail("remote context of rank %d: is_remote %d, rank %d", peer,
               troupe_context_is_remote(remote), troupe_context_remote_rank(remote));

    /* COPY into rank 0's merge buffer, consumed by g =+ g.merge. */
    if (s_rank == 1) {
        CHECK_OK(troupe_device_to_device(g, TROUPE_MERGE_COPY, remote, ctx, NULL, NULL, &ev));
        CHECK_OK(s_sync(&ev));
    } else {
        CHECK_OK(s_consumer(b, g, &code));
        CHECK_OK(troupe_device_to_device(g, TROUPE_MERGE_COPY, ctx, remote, NULL, &tagged, &ev));
        if (troupe_context_merge_buffer_node(tagged) != g)
            s_fail("COPY from rank 1: the child context is not tagged with g");
        CHECK_OK(troupe_link(tagged, code, &r));
        CHECK_OK(troupe_routine_run(r, &ev2));
        CHECK_OK(s_sync(&ev2));
        CHECK_OK(s_sync(&ev));
        CHECK_OK(s_get(ctx, g, got));
        s_expect2("COPY from rank 1 then g =+ g.merge", got, 4, 6);
    }

    /* NO into rank 0's array of g, with the lanes crossing a host-level allreduce. */
    float x[3] = {1, 2, 3};
    troupe_coll_tensor_t t = {
        .data = x, .count = 3, .prec = TROUPE_PREC_SINGLE, .node_id = 99, .name = "x"};
    if (s_rank == 1) {
        CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev2));
        CHECK_OK(s_sync(&ev2));
        CHECK_OK(troupe_device_to_device(g, TROUPE_MERGE_NO, remote, ctx, NULL, NULL, &ev));
        CHECK_OK(s_sync(&ev));
    } else {
        CHECK_OK(troupe_device_to_device(g, TROUPE_MERGE_NO, ctx, remote, NULL, NULL, &ev));
        CHECK_OK(s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev2));
        CHECK_OK(s_sync(&ev2));
        CHECK_OK(s_sync(&ev));
        CHECK_OK(s_get(ctx, g, got));
        s_expect2("NO from rank 1", got, 3, 4);
    }
    if (x[0] != 2 || x[1] != 4 || x[2] != 6)
        s_fail("allreduce crossing a move: got %g %g %g", x[0], x[1], x[2]);

    /* The reverse direction: rank 0's h = [7 8] into rank 1's h = [-1 -1]. */
    if (s_rank == 0) {
        CHECK_OK(troupe_device_to_device(h, TROUPE_MERGE_NO, remote, ctx, NULL, NULL, &ev));
        CHECK_OK(s_sync(&ev));
    } else {
        CHECK_OK(troupe_device_to_device(h, TROUPE_MERGE_NO, ctx, remote, NULL, NULL, &ev));
        CHECK_OK(s_sync(&ev));
        CHECK_OK(s_get(ctx, h, got));
        s_expect2("NO from rank 0", got, 7, 8);
    }

    /* A mismatched move: rank 1 sends h, rank 0 receives g: both fail naming both ranks. */
    if (s_rank == 1)
        CHECK_OK(troupe_device_to_device(h, TROUPE_MERGE_NO, remote, ctx, NULL, NULL, &ev));
    else
        CHECK_OK(troupe_device_to_device(g, TROUPE_MERGE_NO, ctx, remote, NULL, NULL, &ev));
    st = troupe_event_sync(ev, SYNC_NS);
    troupe_event_release(&ev);
    {
        const char *msg = troupe_last_error();
        printf("rank %d: mismatched move: %s: %s\n", s_rank, troupe_status_str(st), msg);
        if (st != TROUPE_FAILED_PRECONDITION || strstr(msg, "rank 0") == NULL ||
            strstr(msg, "rank 1") == NULL || strstr(msg, "node id") == NULL)
            s_fail("mismatched move: expected FAILED_PRECONDITION naming rank 0, rank 1 and the "
                   "node id; got %s: %s",
                   troupe_status_str(st), msg);
    }
    if (troupe_cluster_status() != TROUPE_FAILED_PRECONDITION)
        s_fail("cluster status after the mismatch: %s", troupe_status_str(troupe_cluster_status()));
out:
    troupe_event_release(&ev);
    troupe_event_release(&ev2);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_context_release(&tagged);
    troupe_context_release(&remote);
    troupe_context_release(&ctx);
    if (s != NULL) {
        troupe_status_t ast = troupe_stream_await(s, SYNC_NS);
        (void)ast; /* failed by the mismatched move: expected */
    }
    troupe_stream_release(&s);
    troupe_tnode_release(&g);
    troupe_tnode_release(&h);
    troupe_backend_close(&b);
    st = troupe_cluster_finalize();
    if (st != TROUPE_FAILED_PRECONDITION)
        s_fail("troupe_cluster_finalize() = %s (expected the mismatch's FAILED_PRECONDITION)",
               troupe_status_str(st));
    if (s_fails == 0)
        printf("PASS rank %d: cross-rank device_to_device (COPY, NO, both directions, "
               "mismatch)\n",
               s_rank);
    return s_fails == 0 ? 0 : 1;
}
