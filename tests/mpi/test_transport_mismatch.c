/* troupe — multi-rank test: ranks that issue different collectives fail with a fingerprint
 * mismatch naming both ranks and the differing field, never a hang or wrong numbers
 * (transport/mpi/collective.h "Fingerprints"). Run by CTest under `mpiexec -n 2` with
 * TROUPE_TIMEOUT_S=20: a hang would turn into DEADLINE_EXCEEDED, which fails the checks.
 *
 * argv[1] picks the difference (default "dims"):
 *   dims   rank 0 reduces node 12 'w1' with dims [4], rank 1 with dims [5]
 *   prec   single on rank 0, double on rank 1
 *   kind   allreduce on rank 0, broadcast on rank 1
 *   fusion TROUPE_FUSION_BYTES 64 MiB on rank 0, 1 MiB on rank 1 (different bucket plans)
 * Every rank must get FAILED_PRECONDITION with a message naming rank 0, rank 1 and the field;
 * then the cluster is failed: troupe_cluster_status and a later collective report the same
 * status at once, and troupe_cluster_finalize returns it. Exit 0 only if all that holds. */
#include "actors/event.h"
#include "base/config.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include "mpi_test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_expect_in(const char *msg, const char *needle)
{
    if (strstr(msg, needle) == NULL)
        s_fail("message does not name '%s': %s", needle, msg);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "dims";
    troupe_status_t st = s_init(&argc, &argv);
    if (st != TROUPE_OK)
        return 1;
    float f[5] = {1, 2, 3, 4, 5};
    double d[4] = {1, 2, 3, 4};
    troupe_coll_tensor_t t = {.data = f,
                              .count = 4,
                              .prec = TROUPE_PREC_SINGLE,
                              .node_id = 12,
                              .ndims = 1,
                              .dims = {4},
                              .name = "w1"};
    const char *field = "dims";
    bool bcast = false;
    if (strcmp(mode, "dims") == 0) {
        if (s_rank == 1) {
            t.count = 5;
            t.dims[0] = 5;
        }
    } else if (strcmp(mode, "prec") == 0) {
        field = "precision single on rank 0 but double on rank 1";
        if (s_rank == 1) {
            t.data = d;
            t.prec = TROUPE_PREC_DOUBLE;
        }
    } else if (strcmp(mode, "kind") == 0) {
        field = "kind allreduce on rank 0 but broadcast on rank 1";
        bcast = s_rank == 1;
    } else if (strcmp(mode, "fusion") == 0) {
        field = "TROUPE_FUSION_BYTES) 67108864 on rank 0 but 1048576 on rank 1";
        if (troupe_config_set_fusion_bytes(s_rank == 1 ? 1u << 20 : 64u << 20) != TROUPE_OK)
            s_fail("setting the fusion size: %s", troupe_last_error());
    } else {
        printf("FAIL: unknown mode '%s' (dims, prec, kind, fusion)\n", mode);
        return 2;
    }
    troupe_event_t *ev = NULL;
    st = bcast ? troupe_broadcast(&t, 1, 0, &ev) : s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev);
    if (st != TROUPE_OK) {
        s_fail("issuing the collective: %s: %s", troupe_status_str(st), troupe_last_error());
    } else {
        st = troupe_event_sync(ev, 60LL * 1000 * 1000 * 1000);
        const char *msg = troupe_last_error();
        printf("rank %d: %s: %s\n", s_rank, troupe_status_str(st), msg);
        if (st != TROUPE_FAILED_PRECONDITION)
            s_fail("expected FAILED_PRECONDITION, got %s: %s", troupe_status_str(st), msg);
        s_expect_in(msg, "rank 0");
        s_expect_in(msg, "rank 1");
        s_expect_in(msg, field);
        s_expect_in(msg, "fingerprint mismatch");
        if (strcmp(mode, "dims") == 0) {
            s_expect_in(msg, "node 12 'w1'");
            s_expect_in(msg, "[4] on rank 0 but [5] on rank 1");
        }
        if (f[0] != 1 || d[0] != 1)
            s_fail("the data changed although the collective failed");
    }
    troupe_event_release(&ev);
    if (troupe_cluster_status() != TROUPE_FAILED_PRECONDITION)
        s_fail("troupe_cluster_status() = %s, expected FAILED_PRECONDITION",
               troupe_status_str(troupe_cluster_status()));
    st = s_allreduce_start(&t, 1, TROUPE_REDUCE_SUM, &ev);
    if (st != TROUPE_FAILED_PRECONDITION)
        s_fail("a collective after the failure returned %s, expected FAILED_PRECONDITION at once",
               troupe_status_str(st));
    troupe_event_release(&ev);
    st = troupe_cluster_finalize();
    if (st != TROUPE_FAILED_PRECONDITION)
        s_fail("troupe_cluster_finalize() = %s, expected FAILED_PRECONDITION",
               troupe_status_str(st));
    if (s_fails == 0)
        printf("PASS rank %d: %s mismatch reported on both ranks\n", s_rank, mode);
    return s_fails == 0 ? 0 : 1;
}
