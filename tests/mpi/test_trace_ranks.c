/* A traced 2-rank run (base/trace.h, TROUPE_TRACE from the environment): data-parallel steps of
 * the tests' linear regression on 2 streams per rank (routine runs, merge-buffer copies, the
 * gradient allreduce with its phases, steps), then four host-level allreduces in the phase
 * "test.sleepy", before the third of which rank 1 sleeps S_SLEEP_MS. trace.sh then checks the
 * files and that `troupe trace merge` names rank 1 as late at that collective. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_test_util.h"

#include "actors/troupe.h"
#include "base/clock.h"
#include "base/trace.h"
#include "parallel/dp.h"

#include <stdlib.h>
#include <string.h>

/* trace.sh wants rank 1 late by >= 200 ms: the rest is room for rank 0 to be held up too on a
 * loaded machine */
#define S_SLEEP_MS 1000

static void s_die(const char *what)
{
    printf("FAIL rank %d: %s: %s\n", s_rank, what, troupe_last_error());
    fflush(stdout);
    (void)troupe_cluster_leave(what);
    exit(1);
}

#define DPT_CHECK(expr)                                                                            \
    do {                                                                                           \
        if ((expr) != TROUPE_OK)                                                                   \
            s_die(#expr);                                                                          \
    } while (0)
#include "tests/dp_test_model.h"

#define NB 4
#define BS 8
#define DIN 3
#define DOUT 2

int main(int argc, char **argv)
{
    if (s_init(&argc, &argv) != TROUPE_OK)
        return 1;
    if (!troupe_trace_enabled() || s_size != 2) {
        printf("FAIL rank %d: expected TROUPE_TRACE set and 2 ranks (size %d)\n", s_rank, s_size);
        return 1;
    }
    double xv[NB * BS * DIN], yv[NB * BS * DOUT], wv[DIN * DOUT] = {0}, bv[DOUT] = {0};
    for (int i = 0; i < NB * BS * DIN; i++)
        xv[i] = (double)((i * 7) % 11) / 11.0 - 0.5;
    for (int i = 0; i < NB * BS * DOUT; i++)
        yv[i] = (double)((i * 5) % 13) / 13.0;
    dpt_lr_t m;
    dpt_lr_new(&m, NB, BS, DIN, DOUT, xv, yv, wv, bv);
    troupe_dp_config_t cfg = {.backend = "cpu", .streams = 2, .optimizer = dpt_opt(TROUPE_OPT_SGD)};
    troupe_dp_t *dp = NULL;
    DPT_CHECK(troupe_dp_new(&cfg, &m.model, &dp));
    for (int s = 0; s < 4; s++)
        DPT_CHECK(troupe_dp_step(dp));
    double loss = 0;
    DPT_CHECK(troupe_dp_last_loss(dp, &loss));
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);

    const char *old = troupe_trace_set_phase("test.sleepy");
    for (int k = 0; k < 4; k++) {
        double v = 1.0 + s_rank;
        troupe_coll_tensor_t t;
        memset(&t, 0, sizeof t);
        t.data = &v;
        t.count = 1;
        t.prec = TROUPE_PREC_DOUBLE;
        t.name = "sleepy";
        if (k == 2 && s_rank == 1)
            troupe_sleep_ns(S_SLEEP_MS * 1000000LL);
        if (s_allreduce(&t, 1, TROUPE_REDUCE_SUM, 0, NULL) != TROUPE_OK)
            s_die("allreduce");
        if (v != 3.0)
            s_fail("allreduce %d: %g, expected 3", k, v);
    }
    troupe_trace_set_phase(old);
    if (troupe_cluster_finalize() != TROUPE_OK) {
        printf("FAIL rank %d: finalize: %s\n", s_rank, troupe_last_error());
        return 1;
    }
    if (s_fails == 0)
        printf("rank %d: PASS\n", s_rank);
    return s_fails == 0 ? 0 : 1;
}
