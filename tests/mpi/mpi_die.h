/* Shared failure path of the multi-rank data-parallel tests (tests/mpi/test_dp_model.c and the
 * programs that include it, test_dp_loss_scale_ranks.c): each program is one translation unit
 * that includes this once, after its headers.
 *
 *  - s_die(fmt, ...): prints "rank r: FAIL: <message>" on stderr, leaves the cluster
 *    (troupe_cluster_leave, so mpiexec ends the job and reports it failed) and exits 1;
 *  - CHECK(expr): a troupe call must return TROUPE_OK, else s_die naming the file and line,
 *    the call, the status and the last error.
 */
#ifndef TROUPE_TESTS_MPI_MPI_DIE_H
#define TROUPE_TESTS_MPI_MPI_DIE_H

#include "base/status.h"
#include "transport/mpi/cluster.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif /* TROUPE_TESTS_MPI_MPI_DIE_H */
