/* troupe — the optimiser's fast tracing (dense cell arrays, direct node table) gives exactly
 * what its reference implementation gives (troupe__opt_set_reference, compiler/optimize_impl.h):
 * the optimized procedure's text, its generated C and CUDA sources and the memory modes and
 * provenances of its nodes, byte for byte, for the Fashion-MNIST trainer's routines as
 * troupe_dp_new builds them (examples/fmnist, parallel/dp.h) and for the IR test programs
 * (tests/data/text_corpus, tests/data/golden) under several option sets.
 *
 * Each side runs in a child process of its own (fork), so both create their nodes with the same
 * ids and start from the same memory modes; the parent compares what they print. */
#include "base/alloc.h"
#include "base/strbuf.h"
#include "compiler/cgen.h"
#include "compiler/lower.h"
#include "compiler/optimize_impl.h"
#include "ir/text.h"
#include "mlp.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OK(x) cr_assert_eq((x), TROUPE_OK, "%s: %s", #x, troupe_last_error())

/* ---- running one side in a child ------------------------------------------------------------ */

typedef troupe_status_t (*s_produce_fn)(troupe__strbuf_t *out);

/* What `fn` prints in a fresh child with the reference tracing on or off; "ERROR: ..." when
 * it fails. Caller frees. */
static char *s_side(s_produce_fn fn, bool reference)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        troupe__opt_set_reference(reference);
        troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
        troupe_status_t st = fn(&sb);
        if (st != TROUPE_OK) {
            troupe__strbuf_reset(&sb);
            troupe__strbuf_printf(&sb, "ERROR: %s: %s", troupe_status_str(st),
                                  troupe_last_error());
        }
        const char *s = troupe__strbuf_cstr(&sb);
        size_t n = strlen(s);
        while (n > 0) {
            ssize_t w = write(fds[1], s, n);
            if (w <= 0)
                _exit(1);
            s += w;
            n -= (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (n + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        ssize_t r = read(fds[0], buf + n, cap - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child (reference=%d) failed",
              (int)reference);
    return buf;
}

/* Both sides print the same, and something that is no error; `what` names the case. */
static void s_assert_same(s_produce_fn fn, const char *what)
{
    char *fast = s_side(fn, false), *ref = s_side(fn, true);
    cr_assert(strncmp(ref, "ERROR", 5) != 0, "%s: %s", what, ref);
    cr_assert_gt(strlen(ref), 100, "%s: too little output: %s", what, ref);
    if (strcmp(fast, ref) != 0) {
        size_t k = 0;
        while (fast[k] == ref[k])
            k++;
        size_t from = k > 200 ? k - 200 : 0;
        cr_assert_fail("%s: the fast tracing differs from the reference at byte %zu:\n"
                       "fast: ...%.400s\nreference: ...%.400s",
                       what, k, fast + from, ref + from);
    }
    free(fast);
    free(ref);
}

/* Appends the procedure's text, its C and CUDA sources and its nodes' headers (memory mode
 * and provenance). */
static troupe_status_t s_print_proc(troupe__strbuf_t *out, const troupe_ll_proc_t *proc)
{
    char *text = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_text_print_proc(proc, &text));
    troupe__strbuf_printf(out, "==== %s\n%s\n", proc->name, text);
    troupe_free(text);
    for (int d = 0; d < 2; d++) {
        troupe_cgen_result_t *gen = NULL;
        TROUPE_RETURN_IF_ERROR(
            troupe_cgen_emit(proc, d == 0 ? TROUPE_CGEN_C : TROUPE_CGEN_CUDA, &gen));
        troupe__strbuf_puts(out, gen->source);
        troupe_cgen_result_destroy(&gen);
    }
    for (size_t i = 0; i < proc->nnodes; i++) {
        char line[256];
        troupe_tnode_header(proc->nodes[i], line, sizeof line);
        const troupe_ll_traced_t *tr = troupe_optimize_traced(proc, proc->nodes[i]);
        troupe__strbuf_printf(out, "%s visits=%lld rbw=%d\n", line,
                              tr ? (long long)tr->max_visits : -1L,
                              tr ? (int)tr->read_before_write : -1);
    }
    return TROUPE_OK;
}

/* ---- the trainer's routines ------------------------------------------------------------------ */

static troupe_status_t s_trainer(troupe__strbuf_t *out, troupe_optimizer_kind_t kind)
{
    /* two streams (merge routines), 32 rows each, 6 minibatches */
    fmnist_mlp_config_t mc = fmnist_mlp_config_default(32, 6);
    fmnist_mlp_t *mlp = NULL;
    fmnist_mlp_eval_t *eval = NULL;
    troupe_dp_t *dp = NULL;
    troupe_code_t *eval_code = NULL;
    TROUPE_RETURN_IF_ERROR(fmnist_mlp_new(&mc, &mlp));
    troupe_status_t st = fmnist_mlp_init_params(mlp, 7);
    troupe_dp_model_t model;
    fmnist_mlp_dp_model(mlp, &model);
    troupe_dp_config_t dc = {
        .backend = "sync",
        .streams = 2,
        .optimizer = troupe_optimizer_default(kind),
        .overlap = TROUPE_DP_OVERLAP_OFF}; /* the golden text holds one gradient routine */
    if (st == TROUPE_OK)
        st = troupe_dp_new(&dc, &model, &dp);
    if (st == TROUPE_OK)
        st = fmnist_mlp_eval_new(mlp, 100, &eval);
    if (st == TROUPE_OK)
        st = troupe_compile(troupe_dp_backend(dp), eval->comp, "fmnist_eval", &eval_code);
    for (size_t g = 0; st == TROUPE_OK && g < dp->nseg; g++)
        st = s_print_proc(out, troupe_code_proc(dp->seg_code[g]));
    for (size_t i = 0; st == TROUPE_OK && i < dp->n_params; i++)
        st = s_print_proc(out, troupe_code_proc(dp->merge_code[i]));
    for (int j = 0; st == TROUPE_OK && j < TROUPE__DP_HYPER_STAGES; j++)
        st = s_print_proc(out, troupe_code_proc(dp->hyper_copy_code[j]));
    if (st == TROUPE_OK)
        st = s_print_proc(out, troupe_code_proc(dp->opt_code));
    if (st == TROUPE_OK)
        st = s_print_proc(out, troupe_code_proc(eval_code));
    troupe_code_release(&eval_code);
    troupe_dp_destroy(&dp);
    fmnist_mlp_eval_destroy(&eval);
    fmnist_mlp_destroy(&mlp);
    return st;
}

static troupe_status_t s_trainer_sgd(troupe__strbuf_t *out)
{
    return s_trainer(out, TROUPE_OPT_SGD);
}

static troupe_status_t s_trainer_adamw(troupe__strbuf_t *out)
{
    return s_trainer(out, TROUPE_OPT_ADAMW);
}

Test(optimize_equiv, trainer_routines_sgd, .timeout = 240)
{
    s_assert_same(s_trainer_sgd, "fmnist with sgd (dp_grad, dp_merge_*, dp_hyper_stage*, dp_sgd, "
                                 "fmnist_eval)");
}

Test(optimize_equiv, trainer_routines_adamw, .timeout = 240)
{
    s_assert_same(s_trainer_adamw, "fmnist with adamw");
}

/* ---- the IR test programs ------------------------------------------------------------------- */

static const char *const s_programs[] = {
    "text_corpus/valid_all_forms.sexp",     "text_corpus/valid_comments_whitespace.sexp",
    "text_corpus/valid_comp_fetches.sexp",  "text_corpus/valid_comp_matmul.sexp",
    "text_corpus/valid_matmul.sexp",        "golden/lower_matmul.sexp",
    "golden/lower_rowsum.sexp",             "golden/lower_softmax_xent_forward.sexp",
};

static char *s_read(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", TROUPE_TEST_DATA_DIR, rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

/* Option set k: the defaults; sampling forced (max_trace_steps 0); accumulations not counted
 * as visits (inline_complex_computations); no virtualisation. */
static void s_opts(int k, troupe_optimize_opts_t *o)
{
    troupe_optimize_opts_default(o);
    if (k == 1)
        o->max_trace_steps = 0;
    if (k == 2)
        o->inline_complex_computations = true;
    if (k == 3)
        o->virtualize = false;
}

/* Every program (a proc, or a comp lowered first) optimised under option set k, in one process
 * per program so node ids from the text do not collide. Programs the optimiser rejects print
 * the error, which must then agree too. */
static troupe_status_t s_programs_with(troupe__strbuf_t *out, int k)
{
    for (size_t p = 0; p < sizeof s_programs / sizeof s_programs[0]; p++) {
        fflush(NULL);
        int fds[2];
        if (pipe(fds) != 0)
            return troupe__error(TROUPE_INTERNAL, "pipe");
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            troupe__strbuf_t sb = TROUPE__STRBUF_INIT;
            char *text = s_read(s_programs[p]);
            troupe_ll_proc_t *proc = NULL;
            troupe_asgn_comp_t *comp = NULL;
            troupe_status_t st = text ? TROUPE_OK : TROUPE_NOT_FOUND;
            if (st == TROUPE_OK && strstr(text, "(comp") != NULL) {
                st = troupe_text_parse_comp(text, &comp);
                if (st == TROUPE_OK)
                    st = troupe_asgn_lower(comp, "prog", &proc);
            } else if (st == TROUPE_OK) {
                st = troupe_text_parse_proc(text, &proc);
            }
            troupe_optimize_opts_t o;
            s_opts(k, &o);
            if (st == TROUPE_OK)
                st = troupe_ll_optimize(proc, &o);
            if (st == TROUPE_OK)
                st = s_print_proc(&sb, proc);
            else
                troupe__strbuf_printf(&sb, "%s: %s: %s\n", s_programs[p], troupe_status_str(st),
                                      troupe_last_error());
            const char *s = troupe__strbuf_cstr(&sb);
            bool ok = write(fds[1], s, strlen(s)) == (ssize_t)strlen(s);
            _exit(ok && text ? 0 : 1);
        }
        close(fds[1]);
        char buf[4096];
        ssize_t r;
        while ((r = read(fds[0], buf, sizeof buf)) > 0)
            troupe__strbuf_putn(out, buf, (size_t)r);
        close(fds[0]);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return troupe__error(TROUPE_INTERNAL, "program %s: its process failed", s_programs[p]);
    }
    return TROUPE_OK;
}

static troupe_status_t s_programs_0(troupe__strbuf_t *out)
{
    return s_programs_with(out, 0);
}
static troupe_status_t s_programs_1(troupe__strbuf_t *out)
{
    return s_programs_with(out, 1);
}
static troupe_status_t s_programs_2(troupe__strbuf_t *out)
{
    return s_programs_with(out, 2);
}
static troupe_status_t s_programs_3(troupe__strbuf_t *out)
{
    return s_programs_with(out, 3);
}

Test(optimize_equiv, ir_programs_default_options)
{
    s_assert_same(s_programs_0, "IR programs, default options");
}

Test(optimize_equiv, ir_programs_sampled)
{
    s_assert_same(s_programs_1, "IR programs, max_trace_steps 0 (sampled walk)");
}

Test(optimize_equiv, ir_programs_inline_complex)
{
    s_assert_same(s_programs_2, "IR programs, inline_complex_computations");
}

Test(optimize_equiv, ir_programs_no_virtualize)
{
    s_assert_same(s_programs_3, "IR programs, virtualize off");
}

/* The comparison can fail: a side that optimises differently is caught. The fast side does
 * not virtualise, which keeps the softmax's intermediates materialized. */
static troupe_status_t s_skewed(troupe__strbuf_t *out)
{
    bool reference = troupe__opt_set_reference(false);
    troupe__opt_set_reference(reference);
    char *text = s_read("golden/lower_softmax_xent_forward.sexp");
    if (!text)
        return troupe__error(TROUPE_NOT_FOUND, "golden/lower_softmax_xent_forward.sexp");
    troupe_ll_proc_t *proc = NULL;
    troupe_status_t st = troupe_text_parse_proc(text, &proc);
    free(text);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.virtualize = reference;
    if (st == TROUPE_OK)
        st = troupe_ll_optimize(proc, &o);
    if (st == TROUPE_OK)
        st = s_print_proc(out, proc);
    troupe_ll_proc_destroy(&proc);
    return st;
}

Test(optimize_equiv, a_difference_is_seen)
{
    char *fast = s_side(s_skewed, false), *ref = s_side(s_skewed, true);
    cr_assert(strncmp(ref, "ERROR", 5) != 0, "%s", ref);
    cr_assert_str_neq(fast, ref, "the skewed side should differ");
    free(fast);
    free(ref);
}
