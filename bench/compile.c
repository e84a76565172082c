/* troupe — bench_compile: the time troupe_compile takes for the Fashion-MNIST trainer's
 * routines (examples/fmnist, parallel/dp.h) when the generated code is already in the compile
 * cache, i.e. the work done before the cache is consulted: lowering, the optimiser
 * (compiler/optimize.h: tracing, definition units, mode inference, virtualisation,
 * simplification, loop fusion, finishing), C generation, the cache key, and dlopen of the
 * cached object.
 *
 * The peer is the same compile with the optimiser's reference implementation
 * (troupe__opt_set_reference, compiler/optimize_impl.h): the cell maps and node search the
 * tracing step used before it kept dense cell arrays and a direct node table. Both must give
 * byte-identical code (tests/test_compile_equiv.c checks it; here their outputs are compared
 * too, see check=), so the ratio is what the faster data structures buy. `cc`'s own time is no
 * peer: after the first run it never runs (cache hits), which is the case this measures.
 *
 * One run builds the trainer's routines afresh (the optimiser refines the nodes' memory modes,
 * so a second compile of the same nodes would start from other modes) in the order
 * troupe_dp_new compiles them: dp_grad, dp_merge_0..5 (two streams), dp_sgd (momentum 0.9),
 * then fmnist_eval (10000 test images). Sizes are the trainer's defaults on two streams:
 * 64 rows per replica, 936 minibatches. Runs of the two sides alternate (side order swapped
 * each round) so the load of a shared machine falls on both.
 *
 * Output (bench/bench_util.h), one line per routine and one for all of them, times in
 * microseconds, medians over the runs:
 *   bench=compile case=<routine> bytes=<source bytes> troupe_us=<compile> peer=reference
 *     peer_us=<compile with the reference optimiser> ratio=<troupe_us/peer_us>
 *     optimize_us=<its part> trace_us= units_us= infer_us= virtualize_us= simplify_us=
 *     fuse_us= finish_us= peer_trace_us= lower_us=<one lowering> cgen_us=<one C generation>
 *     hash_us=<FNV-1a over the source> min_us= max_us= runs= check=ok|DIFFERENT
 * compile = troupe_compile on the sync backend (lowering, optimiser, C generation, cache key,
 * dlopen). lower_us, cgen_us and hash_us are timed on the side (once per run, new side only).
 * check compares the optimized procedures' text and the generated C of both sides (first run):
 * equal texts print ok. Each run is a fresh child process (fork), so node ids, and hence the
 * generated code and its cache key, are the same in every run, as in the trainer's restarts.
 *
 * Thread safety: single-threaded. Ownership: everything is freed before exit.
 */
#include "bench/bench_util.h"

#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "compiler/cgen.h"
#include "compiler/lower.h"
#include "compiler/optimize_impl.h"
#include "devices/device.h"
#include "devices/host/cc_cache_impl.h"
#include "devices/host/host_impl.h"
#include "examples/fmnist/mlp.h"
#include "ir/text.h"
#include "parallel/dp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_PER_REPLICA 64
#define S_NUM_BATCHES 936
#define S_EVAL_N 10000
#define S_MAX_ROUTINES 10
#define S_PHASES 8

typedef struct s_sample {
    double compile_us, lower_us, cgen_us, hash_us;
    double phase_us[S_PHASES]; /* trace units infer virtualize simplify fuse finish total */
    size_t source_bytes;
} s_sample_t;

typedef struct s_side {
    bool reference;
    int runs;
    s_sample_t *samples; /* [max_runs][S_MAX_ROUTINES] */
    char *text[S_MAX_ROUTINES];  /* the first run's outputs, ids made relative */
} s_side_t;

typedef struct s_routines {
    fmnist_mlp_t *mlp;
    fmnist_mlp_eval_t *eval;
    troupe_dp_t *dp; /* only the fields troupe__dp_optimizer_comp reads */
    troupe_asgn_comp_t *comps[S_MAX_ROUTINES];
    const char *names[S_MAX_ROUTINES];
    size_t n;
} s_routines_t;

/* The routines in troupe_dp_new's order, then the evaluation. */
#define S_NROUTINES 9
static const char *const s_names[S_NROUTINES] = {
    "dp_grad",    "dp_merge_0", "dp_merge_1", "dp_merge_2", "dp_merge_3",
    "dp_merge_4", "dp_merge_5", "dp_sgd",     "fmnist_eval"};

static const char *const s_phase_names[S_PHASES] = {"trace", "units", "infer", "virtualize",
                                                    "simplify", "fuse", "finish", "optimize"};

static void s_routines_free(s_routines_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->comps[i] != r->mlp->grad_comp && (!r->eval || r->comps[i] != r->eval->comp))
            troupe_asgn_comp_destroy(&r->comps[i]);
    if (r->dp) {
        for (size_t i = 0; i < r->dp->ntemps; i++)
            troupe_tnode_release(&r->dp->temps[i]);
        for (size_t i = 0; i < r->dp->n_params * (size_t)r->dp->nstate; i++)
            troupe_tnode_release(&r->dp->state[i]);
        troupe_tnode_release(&r->dp->hyper);
        troupe_free(r->dp->temps);
        troupe_free(r->dp->state);
        troupe_free(r->dp);
    }
    fmnist_mlp_eval_destroy(&r->eval);
    fmnist_mlp_destroy(&r->mlp);
    memset(r, 0, sizeof *r);
}

/* A node as parallel/dp.c's s_new_hosted makes it (its values are not needed to compile). */
static troupe_status_t s_hosted(const char *label, troupe_prec_t prec, int ndims,
                                const int64_t *dims, troupe_tnode_t **out)
{
    const char *l[1] = {label};
    return troupe_tnode_new(l, 1, prec, ndims, dims, NULL, 0.0, out);
}

/* The trainer's routines in troupe_dp_new's order (parallel/dp.c), on fresh nodes. */
static troupe_status_t s_routines_build(s_routines_t *r)
{
    memset(r, 0, sizeof *r);
    fmnist_mlp_config_t mc = fmnist_mlp_config_default(S_PER_REPLICA, S_NUM_BATCHES);
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_new(&mc, &r->mlp));
    r->comps[r->n] = r->mlp->grad_comp;
    r->names[r->n++] = s_names[0];
    for (int i = 0; i < FMNIST_MLP_NPARAMS; i++) {
        troupe_tnode_t *g = r->mlp->grads[i];
        char spec[2 * TROUPE_MAX_DIMS + 4], axes[TROUPE_MAX_DIMS + 1];
        for (int a = 0; a < g->ndims; a++)
            axes[a] = (char)('a' + a);
        axes[g->ndims] = '\0';
        snprintf(spec, sizeof spec, "%s=>%s", axes, axes);
        troupe_asgn_t *t = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&r->comps[r->n]));
        r->names[r->n] = s_names[1 + i];
        troupe_asgn_comp_t *comp = r->comps[r->n++];
        TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, g,
                                                      TROUPE_UNOP_IDENTITY, troupe_asgn_merge(g),
                                                      spec, &t));
        troupe_asgn_comp_set_root(comp, t);
    }
    r->dp = troupe_calloc(1, sizeof *r->dp);
    if (!r->dp)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "bench_compile: out of memory");
    r->dp->opt.kind = TROUPE_OPT_SGD;
    r->dp->opt.lr = 0.05;
    r->dp->opt.momentum = 0.9;
    r->dp->n_params = FMNIST_MLP_NPARAMS;
    r->dp->params = r->mlp->params;
    r->dp->grads = r->mlp->grads;
    r->dp->nstate = troupe__dp_nstate(&r->dp->opt);
    r->dp->state = troupe_calloc(FMNIST_MLP_NPARAMS * (size_t)r->dp->nstate + 1,
                                 sizeof *r->dp->state);
    if (!r->dp->state)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "bench_compile: out of memory");
    for (size_t i = 0; i < FMNIST_MLP_NPARAMS * (size_t)r->dp->nstate; i++) {
        troupe_tnode_t *p = r->mlp->params[i / (size_t)r->dp->nstate];
        TROUPE_RETURN_IF_ERROR(s_hosted("opt_m", troupe__dp_state_prec(p->prec), p->ndims, p->dims,
                                        &r->dp->state[i]));
    }
    int64_t hdim = TROUPE__DP_HYPER_COUNT;
    TROUPE_RETURN_IF_ERROR(s_hosted("dp_hyper", TROUPE_PREC_DOUBLE, 1, &hdim, &r->dp->hyper));
    TROUPE_RETURN_IF_ERROR(troupe__dp_optimizer_comp(r->dp, &r->comps[r->n]));
    r->names[r->n++] = s_names[7];
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_eval_new(r->mlp, S_EVAL_N, &r->eval));
    r->comps[r->n] = r->eval->comp;
    r->names[r->n++] = s_names[8];
    return TROUPE_OK;
}

static double s_us(int64_t ns)
{
    return (double)ns / 1000.0;
}

/* One run of one side in this (child) process: build, compile every routine, record into
 * side (samples of run side->runs, and the outputs when record_text). */
static int s_child_run(troupe_backend_t *b, s_side_t *side, bool record_text)
{
    s_routines_t r;
    troupe_status_t st = s_routines_build(&r);
    if (st != TROUPE_OK) {
        s_routines_free(&r);
        return troupe_bench_fail_status("bench_compile", "building the routines", st);
    }
    bool prev = troupe__opt_set_reference(side->reference);
    int rc = 0;
    for (size_t i = 0; i < r.n && rc == 0; i++) {
        s_sample_t *smp = &side->samples[(size_t)side->runs * S_MAX_ROUTINES + i];
        memset(smp, 0, sizeof *smp);
        if (!side->reference) {
            troupe_ll_proc_t *lp = NULL;
            int64_t t0 = troupe_now_ns();
            st = troupe_asgn_lower(r.comps[i], r.names[i], &lp);
            smp->lower_us = s_us(troupe_now_ns() - t0);
            troupe_ll_proc_destroy(&lp);
            if (st != TROUPE_OK) {
                rc = troupe_bench_fail_status("bench_compile", r.names[i], st);
                break;
            }
        }
        troupe_code_t *code = NULL;
        int64_t t0 = troupe_now_ns();
        st = troupe_compile(b, r.comps[i], r.names[i], &code);
        smp->compile_us = s_us(troupe_now_ns() - t0);
        if (st != TROUPE_OK) {
            rc = troupe_bench_fail_status("bench_compile", r.names[i], st);
            break;
        }
        troupe__opt_times_t ot;
        troupe__opt_last_times(&ot);
        int64_t ph[S_PHASES] = {ot.trace_ns,    ot.units_ns, ot.infer_ns,  ot.virtualize_ns,
                                ot.simplify_ns, ot.fuse_ns,  ot.finish_ns, ot.total_ns};
        for (int k = 0; k < S_PHASES; k++)
            smp->phase_us[k] = s_us(ph[k]);
        troupe_cgen_result_t *gen = NULL;
        /* the sync driver's C, as troupe_compile generated it (devices/host/host_impl.h) */
        const troupe_driver_vtable_t *vt = NULL;
        troupe_cgen_options_t copts;
        troupe__hdrv_cgen_options(troupe_driver_lookup("sync", &vt) == TROUPE_OK ? vt : NULL,
                                  &copts);
        t0 = troupe_now_ns();
        st = troupe_cgen_emit_with(troupe_code_proc(code), TROUPE_CGEN_C, &copts, &gen);
        smp->cgen_us = s_us(troupe_now_ns() - t0);
        if (st == TROUPE_OK) {
            smp->source_bytes = strlen(gen->source);
            t0 = troupe_now_ns();
            volatile uint64_t h = troupe__fnv1a64(TROUPE__FNV64_INIT, gen->source,
                                                  smp->source_bytes);
            (void)h;
            smp->hash_us = s_us(troupe_now_ns() - t0);
            if (record_text) {
                char *ptext = NULL;
                if (troupe_text_print_proc(troupe_code_proc(code), &ptext) == TROUPE_OK) {
                    size_t len = strlen(ptext) + smp->source_bytes + 2;
                    side->text[i] = malloc(len);
                    if (side->text[i])
                        snprintf(side->text[i], len, "%s\n%s", ptext, gen->source);
                }
                troupe_free(ptext);
            }
        }
        troupe_cgen_result_destroy(&gen);
        troupe_code_release(&code);
        if (st != TROUPE_OK)
            rc = troupe_bench_fail_status("bench_compile", r.names[i], st);
    }
    troupe__opt_set_reference(prev);
    s_routines_free(&r);
    return rc;
}

static bool s_write_all(int fd, const void *p, size_t n)
{
    for (const char *c = p; n > 0;) {
        ssize_t w = write(fd, c, n);
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool s_read_all(int fd, void *p, size_t n)
{
    for (char *c = p; n > 0;) {
        ssize_t r = read(fd, c, n);
        if (r <= 0)
            return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

/* One run in a fresh child process, so every run creates its nodes with the same ids (the
 * parent creates none) and the generated code, which names nodes by id, hits the compile
 * cache as the trainer's does from its second start on. The child sends its samples (and
 * the outputs when record_text) back through a pipe. */
static int s_run(s_side_t *side, bool record_text)
{
    int fds[2];
    if (pipe(fds) != 0)
        return troupe_bench_fail_status("bench_compile", "pipe", TROUPE_INTERNAL);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return troupe_bench_fail_status("bench_compile", "fork", TROUPE_INTERNAL);
    }
    s_sample_t *row = &side->samples[(size_t)side->runs * S_MAX_ROUTINES];
    if (pid == 0) {
        close(fds[0]);
        troupe_backend_t *b = NULL;
        troupe_status_t st = troupe_backend_open("sync", TROUPE_ONLY_DEVICES_PARALLEL, &b);
        int rc = st == TROUPE_OK ? s_child_run(b, side, record_text)
                                 : troupe_bench_fail_status("bench_compile", "sync backend", st);
        troupe_backend_close(&b);
        bool ok = rc == 0 && s_write_all(fds[1], row, S_MAX_ROUTINES * sizeof *row);
        for (size_t i = 0; ok && record_text && i < S_MAX_ROUTINES; i++) {
            uint64_t len = side->text[i] ? strlen(side->text[i]) : 0;
            ok = s_write_all(fds[1], &len, sizeof len) && s_write_all(fds[1], side->text[i], len);
        }
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    bool ok = s_read_all(fds[0], row, S_MAX_ROUTINES * sizeof *row);
    for (size_t i = 0; ok && record_text && i < S_MAX_ROUTINES; i++) {
        uint64_t len = 0;
        ok = s_read_all(fds[0], &len, sizeof len) && (side->text[i] = malloc(len + 1)) != NULL &&
             s_read_all(fds[0], side->text[i], len);
        if (ok)
            side->text[i][len] = '\0';
    }
    close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !ok) {
        fprintf(stderr, "bench_compile: a run's child process failed\n");
        return 1;
    }
    side->runs++;
    return 0;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of field f (offset in s_sample_t) of routine i over the side's runs (i ==
 * S_MAX_ROUTINES: the sum over the routines). */
static double s_median(const s_side_t *side, size_t n_routines, size_t i, size_t off,
                       double *min_out, double *max_out)
{
    double v[TROUPE_BENCH_MAX_RUNS];
    for (int k = 0; k < side->runs; k++) {
        double x = 0;
        for (size_t j = 0; j < n_routines; j++)
            if (i == S_MAX_ROUTINES || j == i)
                x += *(const double *)(const void *)((const char *)&side->samples
                                                         [(size_t)k * S_MAX_ROUTINES + j] +
                                                     off);
        v[k] = x;
    }
    qsort(v, (size_t)side->runs, sizeof v[0], s_cmp_double);
    if (min_out)
        *min_out = v[0];
    if (max_out)
        *max_out = v[side->runs - 1];
    return side->runs % 2 ? v[side->runs / 2] : (v[side->runs / 2 - 1] + v[side->runs / 2]) / 2;
}

#define S_OFF(f) offsetof(s_sample_t, f)

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    opts.min_runs = 7;
    opts.max_runs = 15;
    int pr = troupe_bench_parse_args(
        argc, argv,
        "troupe_compile of the fmnist trainer's routines (cache hits): the optimiser's fast "
        "tracing against its reference implementation.",
        &opts);
    if (pr != 0)
        return pr > 0 ? 0 : 2;
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);

    int runs = opts.min_runs < 3 ? 3 : opts.min_runs;
    s_side_t sides[2] = {{.reference = false}, {.reference = true}};
    int rc = 0;
    for (int s = 0; s < 2 && rc == 0; s++) {
        sides[s].samples = calloc((size_t)runs * S_MAX_ROUTINES, sizeof *sides[s].samples);
        if (!sides[s].samples)
            rc = troupe_bench_fail_status("bench_compile", "allocating samples",
                                          TROUPE_RESOURCE_EXHAUSTED);
    }
    /* warm-up (fills the compile cache, records both sides' outputs), then alternate */
    for (int s = 0; s < 2 && rc == 0; s++) {
        for (int w = 0; w < opts.warmup && rc == 0; w++) {
            rc = s_run(&sides[s], w == 0);
            sides[s].runs = 0;
        }
        if (opts.warmup == 0 && rc == 0) {
            rc = s_run(&sides[s], true);
            sides[s].runs = 0;
        }
    }
    for (int k = 0; k < runs && rc == 0; k++)
        for (int s = 0; s < 2 && rc == 0; s++)
            rc = s_run(&sides[k % 2 ? 1 - s : s], false);
    if (rc == 0) {
        size_t nr = S_NROUTINES;
        const char *const *rn = s_names;
        for (size_t i = 0; rc == 0 && i <= nr; i++) {
            size_t ri = i == nr ? S_MAX_ROUTINES : i;
            double mn = 0, mx = 0;
            double t = s_median(&sides[0], nr, ri, S_OFF(compile_us), &mn, &mx);
            double p = s_median(&sides[1], nr, ri, S_OFF(compile_us), NULL, NULL);
            char extra[1024];
            int n = 0;
            for (int k = S_PHASES - 1; k >= 0; k--)
                n += snprintf(extra + n, sizeof extra - (size_t)n, "%s_us=%.0f ", s_phase_names[k],
                              s_median(&sides[0], nr, ri, S_OFF(phase_us) + (size_t)k * sizeof(double),
                                       NULL, NULL));
            bool same = true;
            for (size_t j = 0; j < nr; j++)
                if (ri == S_MAX_ROUTINES || j == ri)
                    same = same && sides[0].text[j] && sides[1].text[j] &&
                           strcmp(sides[0].text[j], sides[1].text[j]) == 0;
            if (!same)
                rc = 1;
            snprintf(extra + n, sizeof extra - (size_t)n,
                     "peer_trace_us=%.0f peer_optimize_us=%.0f lower_us=%.0f cgen_us=%.0f "
                     "hash_us=%.0f min_us=%.0f max_us=%.0f runs=%d check=%s",
                     s_median(&sides[1], nr, ri, S_OFF(phase_us), NULL, NULL),
                     s_median(&sides[1], nr, ri, S_OFF(phase_us) + 7 * sizeof(double), NULL, NULL),
                     s_median(&sides[0], nr, ri, S_OFF(lower_us), NULL, NULL),
                     s_median(&sides[0], nr, ri, S_OFF(cgen_us), NULL, NULL),
                     s_median(&sides[0], nr, ri, S_OFF(hash_us), NULL, NULL), mn, mx,
                     sides[0].runs, same ? "ok" : "DIFFERENT");
            size_t bytes = 0;
            for (size_t j = 0; j < nr; j++)
                if (ri == S_MAX_ROUTINES || j == ri)
                    bytes += sides[0].samples[j].source_bytes;
            troupe_bench_print_case("compile", i == nr ? "all" : rn[i], (int64_t)bytes, t,
                                    "reference", p, "%s", extra);
        }
        if (rc == 1)
            fprintf(stderr, "bench_compile: the reference optimiser produced different code\n");
    }
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < S_MAX_ROUTINES; i++)
            free(sides[s].text[i]);
        free(sides[s].samples);
    }
    return rc;
}
