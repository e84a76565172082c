/* troupe — the pipelined exchange through host memory (parallel/dp.h, stage_through_host) on
 * several buckets, its per-step breakdown, and the CUDA-aware decision, on two ranks of the cpu
 * backend (which stands for device memory when staging is forced). A wider model (D = 300
 * inputs: a 2400-byte weight gradient, an 8-byte bias gradient) and TROUPE_FUSION_BYTES at its
 * floor (1024) cut the gradients into two buckets, each reduced by its own collective that
 * starts once its copies to host memory are done. Checks, for SGD and AdamW, 2 streams per rank:
 *   - the staged run's parameters and last loss equal the lent (in-place) run's bit for bit,
 *     and are the same on every rank;
 *   - at debug:parallel each step logs a breakdown line with exchange=staged, buckets=2 and
 *     sane fields (tests/dp_breakdown.h), the exchange's copies and reductions included;
 *   - TROUPE_CUDA_AWARE=on (troupe_config_set_cuda_aware) with staging forced takes the direct
 *     path (nothing staged: the lent path on host memory) with the same bits;
 *   - ranks that choose different exchanges (rank 1 staging in two buckets, rank 0 lending in
 *     place in one request, as a cuda rank beside a cpu rank would) all stage, say so at info
 *     level, and give the lent run's bits (without the agreement the requests differ in
 *     number and the ranks fail at the collective). */
#define D 300
#include "test_dp_model.c"

#include "../dp_breakdown.h"

#include <unistd.h>

#define STREAMS 2
#define STEPS 4

int main(int argc, char **argv)
{
    data_t *d = s_init(&argc, &argv, STREAMS);
    CHECK(troupe_config_set_fusion_bytes(1024));
    int R = troupe_cluster_size(), rank = troupe_cluster_rank();
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    for (int q = 0; q < 2; q++) {
        const char *name = troupe_optimizer_name(kinds[q]);
        static float lent[NP], staged[NP], direct[NP];
        double lent_loss = 0, staged_loss = 0, direct_loss = 0;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, lent, &lent_loss);

        char path[64];
        snprintf(path, sizeof path, "/tmp/troupe-dp-pipeline-%d-%d.log", (int)getpid(), rank);
        unlink(path);
        CHECK(troupe_log_set_file(path));
        CHECK(troupe_log_configure("debug:parallel"));
        s_stage = true;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, staged, &staged_loss);
        CHECK(troupe_log_configure("warn"));
        CHECK(troupe_log_set_file(NULL));
        dpb_line_t l[16];
        int n = dpb_read(path, l, 16);
        unlink(path);
        if (n != STEPS)
            s_die("%s: %d breakdown lines for %d steps", name, n, STEPS);
        /* each phase is a difference of stamps that subscribers take when they run; on a
         * loaded machine one step's subscriber can run late and clamp a phase to 0, so the
         * copies and reductions are asserted present over the steps, not in each one */
        double sx = 0, sd = 0, sr = 0, sh = 0;
        for (int i = 0; i < n; i++) {
            const char *bad = dpb_insane(&l[i]);
            if (bad != NULL)
                s_die("%s: step %lld: %s", name, l[i].step, bad);
            if (R > 1 && (strcmp(l[i].exchange_kind, "staged") != 0 || l[i].buckets != 2 ||
                          strcmp(l[i].update, "routine") != 0))
                s_die("%s: step %lld: exchange=%s buckets=%d update=%s, want staged, 2 and "
                      "routine",
                      name, l[i].step, l[i].exchange_kind, l[i].buckets, l[i].update);
            sx += l[i].exchange;
            sd += l[i].d2h;
            sr += l[i].reduce;
            sh += l[i].h2d;
        }
        if (R > 1 && !(sx > 0 && sd > 0 && sr > 0 && sh > 0))
            s_die("%s: over %d steps: exchange %.1f us, d2h %.1f, reduce %.1f, h2d %.1f: want "
                  "each > 0",
                  name, n, sx, sd, sr, sh);

        troupe_config_set_cuda_aware(TROUPE_CUDA_AWARE_ON);
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, direct, &direct_loss);
        troupe_config_set_cuda_aware(TROUPE_CUDA_AWARE_AUTO);
        s_stage = false;

        static float mixed[NP];
        double mixed_loss = 0;
        CHECK(troupe_log_set_file(path));
        CHECK(troupe_log_configure("info:parallel"));
        s_stage = rank == 1; /* rank 0 would lend in place */
        s_stage_elsewhere = R > 1 && rank != 1;
        s_train(d, STREAMS * R, STREAMS, false, kinds[q], STEPS, mixed, &mixed_loss);
        s_stage = s_stage_elsewhere = false;
        CHECK(troupe_log_configure("warn"));
        CHECK(troupe_log_set_file(NULL));
        FILE *f = fopen(path, "r");
        char line[2048];
        bool said = false;
        while (f != NULL && !said && fgets(line, sizeof line, f) != NULL)
            said = strstr(line, "the ranks chose different exchanges (in-place on some, staged "
                                "on others") != NULL &&
                   strstr(line, "every rank stages through host memory") != NULL;
        if (f != NULL)
            fclose(f);
        unlink(path);
        if (R > 1 && !said)
            s_die("%s: no info line says the ranks' exchanges differ and every rank stages",
                  name);
        for (int e = 0; e < NP; e++)
            if (memcmp(&mixed[e], &lent[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g with one rank staging but %.9g lent", name, e,
                      (double)mixed[e], (double)lent[e]);
        if (mixed_loss != lent_loss)
            s_die("%s: last loss %.9g with one rank staging but %.9g lent", name, mixed_loss,
                  lent_loss);

        s_same_on_every_rank(staged, name);
        for (int e = 0; e < NP; e++) {
            if (memcmp(&staged[e], &lent[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g staged in buckets but %.9g lent", name, e,
                      (double)staged[e], (double)lent[e]);
            if (memcmp(&direct[e], &lent[e], sizeof(float)) != 0)
                s_die("%s: parameter %d is %.9g direct but %.9g lent", name, e,
                      (double)direct[e], (double)lent[e]);
        }
        if (staged_loss != lent_loss || direct_loss != lent_loss)
            s_die("%s: last loss %.9g staged, %.9g direct, %.9g lent", name, staged_loss,
                  direct_loss, lent_loss);
        fprintf(stderr,
                "rank %d: %s: %d ranks x %d streams, 2 buckets pipelined through host memory: "
                "bitwise the lent run's; step %lld: wall %.1f us, exchange %.1f us (d2h %.1f, "
                "reduce %.1f, h2d %.1f, overlap %.1f)\n",
                rank, name, R, STREAMS, l[n - 1].step, l[n - 1].wall, l[n - 1].exchange,
                l[n - 1].d2h, l[n - 1].reduce, l[n - 1].h2d, l[n - 1].overlap);
    }
    free(d);
    CHECK(troupe_cluster_finalize());
    return 0;
}
