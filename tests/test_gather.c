/* Data-dependent gather (ir/projection.h "@N[...]", troupe_asgn_accum_gather): the embedding
 * lookup and the picked log-probability on every driver (sync, cpu, cuda when a device is
 * present) against hand-computed values, the scatter-add gradient with duplicate indices
 * (bitwise the sequential sum, run to run and driver to driver), out-of-range indices (the
 * event fails naming the node and the value; generated code and the interpreter write nothing),
 * the text forms and their parse errors, the CUDA dialect through NVRTC (skipped without NVRTC)
 * and on the host emulator (tests/cuda_emu.h: a bad index fills the error words and no kernel
 * writes), and, on a GPU only, the cuda driver's event failure and its graph replays. */
#define _POSIX_C_SOURCE 200809L
#include "ir_test_util.h"
#include "runtime_test_util.h"

#include "compiler/optimize.h"
#include "devices/device.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/driver_impl.h" /* the queue's gather error words */
#endif

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

enum { B = 2, T = 3, V = 5, C = 4 };

/* tokens (B,T) int32, wte (V,C) single, out (B,T,C) single: out = wte[tokens[b,t], c]. */
static troupe_asgn_comp_t *s_embed_comp(troupe_tnode_t *out, troupe_tnode_t *wte,
                                        troupe_tnode_t *tokens)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    troupe_asgn_buffer_t rhs[1] = {troupe_asgn_node(wte)};
    OK(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_ASGN_RHS_UNOP,
                                TROUPE_UNOP_IDENTITY, rhs, 1, &tokens, "@1[bt]c=>btc", &t));
    troupe_asgn_comp_set_root(comp, t);
    return comp;
}

/* g_wte (V,C) = sum over (b,t) with tokens[b,t] = v of g_out[b,t,c]. */
static troupe_asgn_comp_t *s_scatter_comp(troupe_tnode_t *g_wte, troupe_tnode_t *g_out,
                                          troupe_tnode_t *tokens)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    troupe_asgn_buffer_t rhs[1] = {troupe_asgn_node(g_out)};
    OK(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ADD, g_wte, TROUPE_ASGN_RHS_UNOP,
                                TROUPE_UNOP_IDENTITY, rhs, 1, &tokens, "btc=>@1[bt]c", &t));
    troupe_asgn_comp_set_root(comp, t);
    return comp;
}

static const double k_tokens[B * T] = {3, 0, 3, 4, 3, 1};

static void s_wte_values(double *w)
{
    for (int i = 0; i < V * C; i++)
        w[i] = 0.25 * i - 1.5;
}

/* Compiles comp on env e, links it with `inputs` uploaded, runs it; returns the event status. */
static troupe_status_t s_run(rtu_env_t *e, troupe_asgn_comp_t *comp, const char *name,
                             troupe_tnode_t *const *inputs, int ninputs, troupe_context_t **ctx_out)
{
    troupe_code_t *code = NULL;
    OK(troupe_compile(e->b, comp, name, &code));
    troupe_context_t *ctx = e->ctx[0];
    troupe_context_retain(ctx);
    for (int i = 0; i < ninputs; i++)
        rtu_init(&ctx, inputs[i]);
    troupe_routine_t *r = NULL;
    OK(troupe_link(ctx, code, &r));
    troupe_event_t *ev = NULL;
    /* inline (sync) streams run the routine inside the call */
    troupe_status_t st = troupe_routine_run(r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, 20000 * MS);
    troupe_event_release(&ev);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    *ctx_out = ctx;
    return st;
}

Test(gather, embedding_forward_on_every_driver)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *tokens = rtu_node("tokens", TROUPE_PREC_INT32, 2, (int64_t[]){B, T});
        troupe_tnode_t *wte = rtu_node("wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
        troupe_tnode_t *out = rtu_node("out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
        double w[V * C];
        s_wte_values(w);
        rtu_set(tokens, k_tokens);
        rtu_set(wte, w);
        rtu_set_hosted(out, 411);
        troupe_asgn_comp_t *comp = s_embed_comp(out, wte, tokens);
        troupe_context_t *ctx = NULL;
        troupe_tnode_t *in[2] = {tokens, wte};
        OK(s_run(&e, comp, "embed", in, 2, &ctx));
        troupe_asgn_comp_destroy(&comp);
        double got[B * T * C];
        OK(troupe_tnode_get_values(out, got, B * T * C)); /* fetched by the hosted hook */
        for (int bt = 0; bt < B * T; bt++)
            for (int c = 0; c < C; c++)
                cr_assert_eq(got[bt * C + c], (double)(float)w[(int)k_tokens[bt] * C + c],
                             "%s: out[%d,%d,%d] = %g", *drv, bt / T, bt % T, c,
                             (double)got[bt * C + c]);
        troupe_context_release(&ctx);
        troupe_tnode_release(&out);
        troupe_tnode_release(&wte);
        troupe_tnode_release(&tokens);
        rtu_env_close(&e);
    }
}

Test(gather, picked_logprob_on_every_driver)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *logp = rtu_node("logp", TROUPE_PREC_SINGLE, 2, (int64_t[]){3, V});
        troupe_tnode_t *target = rtu_node("target", TROUPE_PREC_UINT16, 1, (int64_t[]){3});
        troupe_tnode_t *picked = rtu_node("picked", TROUPE_PREC_SINGLE, 1, (int64_t[]){3});
        double lp[3 * V];
        for (int i = 0; i < 3 * V; i++)
            lp[i] = -0.5 * i;
        rtu_set(logp, lp);
        rtu_set(target, (double[]){4, 0, 2});
        rtu_set_hosted(picked, 411);
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *t = NULL;
        OK(troupe_asgn_comp_new(&comp));
        troupe_asgn_buffer_t rhs[1] = {troupe_asgn_node(logp)};
        OK(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, picked, TROUPE_ASGN_RHS_UNOP,
                                    TROUPE_UNOP_IDENTITY, rhs, 1, &target, "b@1[b]=>b", &t));
        troupe_asgn_comp_set_root(comp, t);
        troupe_context_t *ctx = NULL;
        troupe_tnode_t *in[2] = {logp, target};
        OK(s_run(&e, comp, "picked", in, 2, &ctx));
        troupe_asgn_comp_destroy(&comp);
        double got[3];
        OK(troupe_tnode_get_values(picked, got, 3));
        cr_assert_eq(got[0], -2.0, "%s: %g", *drv, got[0]); /* logp[0,4] = -0.5*4 */
        cr_assert_eq(got[1], -2.5, "%s: %g", *drv, got[1]); /* logp[1,0] = -0.5*5 */
        cr_assert_eq(got[2], -6.0, "%s: %g", *drv, got[2]); /* logp[2,2] = -0.5*12 */
        troupe_context_release(&ctx);
        troupe_tnode_release(&picked);
        troupe_tnode_release(&target);
        troupe_tnode_release(&logp);
        rtu_env_close(&e);
    }
}

Test(gather, scatter_add_duplicates_is_the_sequential_sum_everywhere)
{
    /* Values whose float sum depends on the order: 1e8 + 1 + (-1e8) ... */
    double g[B * T * C];
    for (int i = 0; i < B * T * C; i++)
        g[i] = (i % 3 == 0) ? 1e8 : (i % 3 == 1) ? 1.0 + 0.125 * i : -1e8 + 3.0 * i;
    float want[V * C];
    memset(want, 0, sizeof want);
    for (int bt = 0; bt < B * T; bt++) /* the product space's order: b, t, then c */
        for (int c = 0; c < C; c++)
            want[(int)k_tokens[bt] * C + c] += (float)g[bt * C + c];
    float first[V * C];
    bool have_first = false;
    FOR_EACH_DRIVER(drv)
    {
        for (int run = 0; run < 2; run++) {
            rtu_env_t e;
            rtu_env_open(&e, *drv, 1);
            troupe_tnode_t *tokens = rtu_node("tokens", TROUPE_PREC_INT64, 2, (int64_t[]){B, T});
            troupe_tnode_t *g_out = rtu_node("g_out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
            troupe_tnode_t *g_wte = rtu_node("g_wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
            rtu_set(tokens, k_tokens);
            rtu_set(g_out, g);
            rtu_set_hosted(g_wte, 411);
            troupe_asgn_comp_t *comp = s_scatter_comp(g_wte, g_out, tokens);
            troupe_context_t *ctx = NULL;
            troupe_tnode_t *in[2] = {tokens, g_out};
            OK(s_run(&e, comp, "scatter", in, 2, &ctx));
            troupe_asgn_comp_destroy(&comp);
            double gd[V * C];
            OK(troupe_tnode_get_values(g_wte, gd, V * C));
            float got[V * C];
            for (int i = 0; i < V * C; i++)
                got[i] = (float)gd[i];
            cr_assert(memcmp(got, want, sizeof got) == 0, "%s run %d: not the sequential sum",
                      *drv, run);
            if (have_first)
                cr_assert(memcmp(got, first, sizeof got) == 0, "%s run %d differs", *drv, run);
            memcpy(first, got, sizeof got);
            have_first = true;
            troupe_context_release(&ctx);
            troupe_tnode_release(&g_wte);
            troupe_tnode_release(&g_out);
            troupe_tnode_release(&tokens);
            rtu_env_close(&e);
        }
    }
    /* the rows no token names stay 0 */
    for (int c = 0; c < C; c++)
        cr_assert_eq(first[2 * C + c], 0.0f);
}

Test(gather, out_of_range_fails_the_event_naming_node_and_value)
{
    const double bad[2][B * T] = {{3, 0, 3, 4, 70000, 1}, {3, 0, -1, 4, 3, 1}};
    const char *want[2] = {"70000", "= -1 "};
    FOR_EACH_DRIVER(drv)
    {
        for (int k = 0; k < 2; k++) {
            rtu_env_t e;
            rtu_env_open(&e, *drv, 1);
            troupe_tnode_t *tokens = rtu_node("tokens", TROUPE_PREC_INT32, 2, (int64_t[]){B, T});
            troupe_tnode_t *wte = rtu_node("wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
            troupe_tnode_t *out = rtu_node("out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
            double w[V * C];
            s_wte_values(w);
            rtu_set(tokens, bad[k]);
            rtu_set(wte, w);
            rtu_set_hosted(out, 411);
            troupe_asgn_comp_t *comp = s_embed_comp(out, wte, tokens);
            troupe_context_t *ctx = NULL;
            troupe_tnode_t *in[2] = {tokens, wte};
            troupe_status_t st = s_run(&e, comp, "embed_bad", in, 2, &ctx);
            troupe_asgn_comp_destroy(&comp);
            cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: %s", *drv, troupe_status_str(st));
            const char *msg = troupe_last_error();
            cr_assert(strstr(msg, "tokens") && strstr(msg, want[k]) && strstr(msg, "wte") &&
                          strstr(msg, "0..4"),
                      "%s: message '%s'", *drv, msg);
            troupe_context_release(&ctx);
            troupe_tnode_release(&out);
            troupe_tnode_release(&wte);
            troupe_tnode_release(&tokens);
            rtu_env_close(&e);
        }
    }
}

/* The lowered, optimized scatter-add procedure of fresh nodes with fixed ids. */
static troupe_ll_proc_t *s_scatter_proc(troupe_tnode_t **tokens, troupe_tnode_t **g_out,
                                        troupe_tnode_t **g_wte, troupe_prec_t tok_prec)
{
    *tokens = irt_node(0, "tokens", tok_prec, 2, (int64_t[]){B, T});
    *g_out = irt_node(0, "g_out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
    *g_wte = irt_node(0, "g_wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
    troupe_asgn_comp_t *comp = s_scatter_comp(*g_wte, *g_out, *tokens);
    troupe_ll_proc_t *proc = NULL;
    OK(troupe_asgn_lower(comp, "scatter", &proc));
    troupe_asgn_comp_destroy(&comp);
    OK(troupe_ll_optimize(proc, NULL));
    return proc;
}

Test(gather, generated_c_and_interpreter_write_nothing_on_a_bad_index)
{
    troupe_tnode_t *tokens, *g_out, *g_wte;
    troupe_ll_proc_t *proc = s_scatter_proc(&tokens, &g_out, &g_wte, TROUPE_PREC_DOUBLE);
    irt_binds_t b;
    memset(&b, 0, sizeof b);
    double *tok = irt_binds_ensure(&b, tokens);
    float *go = irt_binds_ensure(&b, g_out);
    float *gw = irt_binds_ensure(&b, g_wte);
    for (int i = 0; i < B * T; i++)
        tok[i] = k_tokens[i];
    tok[5] = 2.5; /* a fractional index in a double node */
    for (int i = 0; i < B * T * C; i++)
        go[i] = (float)i;
    for (int i = 0; i < V * C; i++)
        gw[i] = 7.0f + (float)i; /* sentinel */
    float before[V * C];
    memcpy(before, gw, sizeof before);

    troupe_interp_buffer_t bufs[3] = {{tokens, tok}, {g_out, go}, {g_wte, gw}};
    troupe_interp_args_t args = {bufs, 3, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(proc, &args), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[1,2] = 2.5"), "%s", troupe_last_error());
    cr_assert(memcmp(gw, before, sizeof before) == 0, "the interpreter wrote g_wte");

    irt_lib_t lib;
    irt_lib_open(proc, NULL, &lib);
    cr_assert_eq(lib.res->ngathers, 1);
    void *slots[IRT_MAX_BINDS + 1];
    for (size_t k = 0; k < lib.res->nparams; k++)
        slots[k] = irt_binds_get(&b, lib.res->params[k].tn);
    int64_t err[TROUPE_CGEN_GATHER_ERR_WORDS] = {0};
    slots[lib.res->nparams] = err;
    lib.entry(slots);
    cr_assert_eq(err[0], 1);
    cr_assert(memcmp(gw, before, sizeof before) == 0, "the generated code wrote g_wte");
    cr_assert_eq(troupe_cgen_gather_failure(lib.res, err), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[1,2] = 2.5") &&
                  strstr(troupe_last_error(), "g_wte's axis 0"),
              "%s", troupe_last_error());

    /* fixed: the generated code and the interpreter agree bit for bit */
    tok[5] = 1;
    memset(err, 0, sizeof err);
    lib.entry(slots);
    cr_assert_eq(err[0], 0);
    float c_out[V * C];
    memcpy(c_out, gw, sizeof c_out);
    memcpy(gw, before, sizeof before);
    OK(troupe_interp_run(proc, &args));
    cr_assert(memcmp(c_out, gw, sizeof c_out) == 0, "C and the interpreter differ");
    irt_lib_close(&lib);
    irt_binds_free(&b);
    troupe_ll_proc_destroy(&proc);
    troupe_tnode_release(&tokens);
    troupe_tnode_release(&g_out);
    troupe_tnode_release(&g_wte);
}

Test(gather, text_round_trips)
{
    troupe_tnode_t *tokens = irt_node(0, "tokens", TROUPE_PREC_INT32, 2, (int64_t[]){B, T});
    troupe_tnode_t *wte = irt_node(0, "wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
    troupe_tnode_t *out = irt_node(0, "out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
    troupe_asgn_comp_t *comp = s_embed_comp(out, wte, tokens);
    char *text = irt_roundtrip_comp(comp, true);
    cr_assert(strstr(text, "\"@1[bt]c=>btc\" (gather "), "%s", text);
    troupe_free(text);
    troupe_ll_proc_t *proc = NULL;
    OK(troupe_asgn_lower(comp, "embed", &proc));
    text = irt_roundtrip_proc(proc, true);
    cr_assert(strstr(text, "(bind_index "), "%s", text);
    troupe_free(text);
    troupe_ll_proc_destroy(&proc);
    troupe_asgn_comp_destroy(&comp);
    troupe_tnode_release(&out);
    troupe_tnode_release(&wte);
    troupe_tnode_release(&tokens);
}

Test(gather, bad_specs_are_refused_with_clear_messages)
{
    troupe_tnode_t *tokens = irt_node(0, "tokens", TROUPE_PREC_INT32, 2, (int64_t[]){B, T});
    troupe_tnode_t *ftok = irt_node(0, "halftok", TROUPE_PREC_HALF, 2, (int64_t[]){B, T});
    troupe_tnode_t *wte = irt_node(0, "wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){V, C});
    troupe_tnode_t *out = irt_node(0, "out", TROUPE_PREC_SINGLE, 3, (int64_t[]){B, T, C});
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    troupe_asgn_buffer_t rhs[1] = {troupe_asgn_node(wte)};
    cr_assert_eq(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_ASGN_RHS_UNOP,
                                          TROUPE_UNOP_IDENTITY, rhs, 1, &tokens, "@3[bt]c=>btc",
                                          &t),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "gather index @3 but the assignment has 1 gather node"),
              "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_ASGN_RHS_UNOP,
                                          TROUPE_UNOP_IDENTITY, rhs, 1, &tokens, "@1[b]c=>btc", &t),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "gather node @1 (node") &&
                  strstr(troupe_last_error(), "has 2 axes but its term '[b]' has 1"),
              "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_UNOP_IDENTITY,
                                        rhs[0], "@1[bt]c=>btc", &t),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "has 0 gather nodes"), "%s", troupe_last_error());
    cr_assert_eq(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, out, TROUPE_ASGN_RHS_UNOP,
                                          TROUPE_UNOP_IDENTITY, rhs, 1, &ftok, "@1[bt]c=>btc", &t),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "halftok") && strstr(troupe_last_error(), "half"), "%s",
              troupe_last_error());
    /* the text form's parse errors carry the same message */
    troupe_asgn_comp_t *good = s_embed_comp(out, wte, tokens);
    char *src = NULL;
    OK(troupe_text_print_comp(good, &src));
    char *at = strstr(src, "\"@1[bt]");
    cr_assert_not_null(at, "%s", src);
    at[2] = '2';
    troupe_asgn_comp_t *q = NULL;
    cr_assert_neq(troupe_text_parse_comp(src, &q), TROUPE_OK);
    troupe_free(src);
    troupe_asgn_comp_destroy(&good);
    cr_assert(strstr(troupe_last_error(), "@2 but the assignment has 1 gather node"), "%s",
              troupe_last_error());
    troupe_asgn_comp_destroy(&comp);
    troupe_tnode_release(&out);
    troupe_tnode_release(&wte);
    troupe_tnode_release(&ftok);
    troupe_tnode_release(&tokens);
}

/* tokens (R) int32, wte (VW, CW), emb (R, CW) = wte[tokens[r], c], w (CW, DW), y = emb . w:
 * an embedding then a product the CUDA dialect runs as a GEMM step. n[]: tokens, wte, emb, w,
 * y. */
enum { R = 32, VW = 50, CW = 48, DW = 40 };
static troupe_ll_proc_t *s_embed_mm_proc(troupe_tnode_t *n[5])
{
    n[0] = irt_node(0, "tokens", TROUPE_PREC_INT32, 1, (int64_t[]){R});
    n[1] = irt_node(0, "wte", TROUPE_PREC_SINGLE, 2, (int64_t[]){VW, CW});
    n[2] = irt_node(0, "emb", TROUPE_PREC_SINGLE, 2, (int64_t[]){R, CW});
    n[3] = irt_node(0, "w", TROUPE_PREC_SINGLE, 2, (int64_t[]){CW, DW});
    n[4] = irt_node(0, "y", TROUPE_PREC_SINGLE, 2, (int64_t[]){R, DW});
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t1 = NULL, *t2 = NULL, *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    troupe_asgn_buffer_t rhs[1] = {troupe_asgn_node(n[1])};
    OK(troupe_asgn_accum_gather(comp, true, TROUPE_BINOP_ARG2, n[2], TROUPE_ASGN_RHS_UNOP,
                                TROUPE_UNOP_IDENTITY, rhs, 1, &n[0], "@1[r]c=>rc", &t1));
    OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, n[4], TROUPE_BINOP_MUL,
                               troupe_asgn_node(n[2]), troupe_asgn_node(n[3]), "rc,cd=>rd", &t2));
    OK(troupe_asgn_seq2(comp, t1, t2, &t));
    troupe_asgn_comp_set_root(comp, t);
    troupe_ll_proc_t *proc = NULL;
    OK(troupe_asgn_lower(comp, "embed_mm", &proc));
    troupe_asgn_comp_destroy(&comp);
    troupe_optimize_opts_t o;
    troupe_optimize_opts_default(&o);
    o.local_max_bytes = 0; /* as routines for the cuda driver: emb stays a parameter */
    OK(troupe_ll_optimize(proc, &o));
    return proc;
}

/* Inputs of s_embed_mm_proc: tokens in range, wte and w small exact values, emb and y sentinels. */
static void s_embed_mm_fill(troupe_tnode_t *n[5], irt_binds_t *b)
{
    int32_t *tok = irt_binds_ensure(b, n[0]);
    float *wte = irt_binds_ensure(b, n[1]), *emb = irt_binds_ensure(b, n[2]);
    float *w = irt_binds_ensure(b, n[3]), *y = irt_binds_ensure(b, n[4]);
    for (int r = 0; r < R; r++)
        tok[r] = (7 * r + 3) % VW;
    for (int i = 0; i < VW * CW; i++)
        wte[i] = (float)(i % 13) * 0.25f - 1.0f;
    for (int i = 0; i < CW * DW; i++)
        w[i] = (float)(i % 7) * 0.5f - 1.5f;
    for (int i = 0; i < R * CW; i++)
        emb[i] = 1234.5f;
    for (int i = 0; i < R * DW; i++)
        y[i] = -777.0f;
}

static void s_free_nodes(troupe_tnode_t **n, int count)
{
    for (int i = 0; i < count; i++)
        troupe_tnode_release(&n[i]);
}

/* The CUDA dialect of a routine with a gather: its first step is the one-thread index check, a
 * GEMM step follows, and with indices in range the kernels (run on the host, tests/cuda_emu.h,
 * the GEMM step through its kernels) give bit for bit what the compiled C and the interpreter
 * give; so does the scatter-add (its fixed order under a reversed small grid). */
Test(gather, cuda_kernels_on_the_emulator_match_c)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler for the CUDA emulation (tests/cuda_emu.h)");
    troupe_tnode_t *n[5];
    troupe_ll_proc_t *proc = s_embed_mm_proc(n);
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    cr_assert_eq(res->ngathers, 1);
    cr_assert(res->nsteps >= 2 && res->steps[0].kind == TROUPE_CGEN_STEP_KERNEL &&
                  res->kernels[res->steps[0].first_kernel].one_thread,
              "the first step is not the one-thread index check");
    bool gemm = false;
    for (size_t s = 1; s < res->nsteps; s++)
        gemm = gemm || res->steps[s].kind == TROUPE_CGEN_STEP_GEMM;
    cr_assert(gemm, "no GEMM step in %s", res->name);
    troupe_cgen_result_destroy(&res);
    irt_binds_t b;
    memset(&b, 0, sizeof b);
    s_embed_mm_fill(n, &b);
    irt_lib_t lib;
    irt_lib_open(proc, NULL, &lib);
    irt_run_and_compare(proc, &lib, &b); /* C vs interpreter, then emulated CUDA vs C */
    irt_lib_close(&lib);
    irt_binds_free(&b);
    troupe_ll_proc_destroy(&proc);
    s_free_nodes(n, 5);

    troupe_tnode_t *tokens, *g_out, *g_wte;
    proc = s_scatter_proc(&tokens, &g_out, &g_wte, TROUPE_PREC_INT32);
    /* the scatter runs its channels in parallel (one thread per c, each taking (b,t) in the
     * nest's order), not on one thread: GPT-2 124M's wte gradient took 272 ms of a 593 ms
     * step on an H200 as one thread */
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    bool mapped = false;
    for (size_t k = 1; k < res->nkernels; k++) /* kernel 0 checks the indices */
        mapped = mapped || (!res->kernels[k].one_thread && res->kernels[k].extent[0] == C);
    cr_assert(mapped, "no kernel of the scatter runs its %d channels in parallel:\n%s", C,
              res->source);
    troupe_cgen_result_destroy(&res);
    memset(&b, 0, sizeof b);
    int32_t *tok = irt_binds_ensure(&b, tokens);
    float *go = irt_binds_ensure(&b, g_out);
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)k_tokens[i];
    for (int i = 0; i < B * T * C; i++) /* sums that depend on the order */
        go[i] = (i % 3 == 0) ? 1e8f : (i % 3 == 1) ? 1.0f + 0.125f * i : -1e8f + 3.0f * i;
    irt_lib_open(proc, NULL, &lib);
    irt_run_and_compare(proc, &lib, &b);
    irt_lib_close(&lib);
    irt_binds_free(&b);
    troupe_ll_proc_destroy(&proc);
    troupe_tnode_release(&tokens);
    troupe_tnode_release(&g_out);
    troupe_tnode_release(&g_wte);
}

/* An index out of range, on the host-emulated CUDA kernels: the check fills the error words
 * (gather 1, the value, the cell) and no kernel writes, the GEMM step's kernels included (the
 * cuda driver runs those, not cuBLASLt, for such a routine); the words give the message the
 * cuda driver fails the event with. */
Test(gather, cuda_kernels_on_the_emulator_write_nothing_on_a_bad_index)
{
    if (!troupe_emu_available())
        cr_skip_test("no C++ compiler for the CUDA emulation (tests/cuda_emu.h)");
    troupe_tnode_t *n[5];
    troupe_ll_proc_t *proc = s_embed_mm_proc(n);
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    troupe_emu_t e;
    troupe_emu_open(res, &e);
    const int32_t bad[2] = {VW, -3};
    for (int shape = 0; shape < 2; shape++) {
        irt_binds_t b;
        memset(&b, 0, sizeof b);
        s_embed_mm_fill(n, &b);
        int32_t *tok = irt_binds_get(&b, n[0]);
        tok[29] = bad[shape];
        float emb0[R * CW], y0[R * DW];
        memcpy(emb0, irt_binds_get(&b, n[2]), sizeof emb0);
        memcpy(y0, irt_binds_get(&b, n[4]), sizeof y0);
        void *ptrs[8], *args[9];
        int64_t err[TROUPE_CGEN_GATHER_ERR_WORDS] = {0}, *errp = err;
        cr_assert_leq(res->nparams, 8);
        for (size_t k = 0; k < res->nparams; k++) {
            ptrs[k] = irt_binds_get(&b, res->params[k].tn);
            cr_assert_not_null(ptrs[k]);
            args[k] = &ptrs[k];
        }
        args[res->nparams] = &errp;
        troupe_emu_run(&e, args, (troupe_emu_shape_t)shape, -1);
        cr_assert_eq(err[0], 1, "shape %d: error words not set", shape);
        cr_assert_eq(err[2], 29, "the cell");
        cr_assert(memcmp(emb0, irt_binds_get(&b, n[2]), sizeof emb0) == 0, "emb was written");
        cr_assert(memcmp(y0, irt_binds_get(&b, n[4]), sizeof y0) == 0, "y was written");
        cr_assert_eq(troupe_cgen_gather_failure(res, err), TROUPE_INVALID_ARGUMENT);
        char want[64];
        snprintf(want, sizeof want, "tokens[29] = %d", bad[shape]);
        cr_assert(strstr(troupe_last_error(), want) && strstr(troupe_last_error(), "0..49"), "%s",
                  troupe_last_error());
        irt_binds_free(&b);
    }
    troupe_emu_close(&e);
    troupe_cgen_result_destroy(&res);
    troupe_ll_proc_destroy(&proc);
    s_free_nodes(n, 5);
}

Test(gather, cuda_dialect_compiles_under_nvrtc)
{
    troupe_tnode_t *tokens, *g_out, *g_wte;
    troupe_ll_proc_t *proc = s_scatter_proc(&tokens, &g_out, &g_wte, TROUPE_PREC_INT32);
    troupe_cgen_result_t *res = NULL;
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    cr_assert_eq(res->ngathers, 1);
    cr_assert_not_null(strstr(res->source, "int64_t *troupe_err"));
    troupe_cgen_result_destroy(&res);
    bool ran = irt_nvrtc_check(proc);
    troupe_ll_proc_destroy(&proc);
    troupe_tnode_release(&tokens);
    troupe_tnode_release(&g_out);
    troupe_tnode_release(&g_wte);
    /* The embedding then a GEMM step: PTX with every kernel, the index check's among them
     * (irt_nvrtc_check), and the cubin the cuda driver loads (sm_90, through nvJitLink). */
    troupe_tnode_t *n[5];
    proc = s_embed_mm_proc(n);
    ran = irt_nvrtc_check(proc) && ran;
#if TROUPE_HAVE_CUDA
    OK(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res));
    void *img = NULL;
    size_t size = 0;
    OK(troupe_nvrtc_compile_image(res->source, res->name, "sm_90", false, &img, &size, NULL));
    cr_assert_gt(size, 0);
    troupe_free(img);
    troupe_cgen_result_destroy(&res);
#endif
    troupe_ll_proc_destroy(&proc);
    s_free_nodes(n, 5);
    if (!ran)
        cr_skip_test("NVRTC unavailable");
}

#if TROUPE_HAVE_CUDA
/* Records an event on q and queries it until it is done; its status. */
static troupe_status_t s_cuda_sync(troupe_driver_t *drv, troupe_dqueue_t *q)
{
    troupe_devent_t *ev = NULL;
    OK(troupe_driver_event_record(drv, q, &ev));
    bool done = false;
    troupe_status_t st = TROUPE_OK;
    while (!done && st == TROUPE_OK)
        st = troupe_driver_event_query(drv, ev, &done);
    troupe_driver_event_release(drv, ev);
    return st;
}
#endif

/* On a GPU, the embedding + GEMM routine through the cuda driver and its graph policy: runs in
 * range give what the compiled C gives (plain, captured, replayed); a replay zeroes the error
 * words (set behind its back); an index out of range fails the event with INVALID_ARGUMENT
 * naming the index node, cell and value, emb and y keep what they held, the queue refuses the
 * next launch, and a queue that waits for it on the device fails its events too. Skipped, with
 * the reason, without a device. */
Test(gather, on_a_cuda_device_a_bad_index_fails_the_event_and_writes_nothing)
{
#if !TROUPE_HAVE_CUDA
    cr_skip_test("the cuda driver is not built (TROUPE_WITH_CUDA)");
#else
    char why[512];
    if (!rtu_cuda_present(why, sizeof why))
        cr_skip_test("%s", why);
    troupe_tnode_t *n[5];
    troupe_ll_proc_t *proc = s_embed_mm_proc(n);
    irt_binds_t host, ref;
    memset(&host, 0, sizeof host);
    s_embed_mm_fill(n, &host);
    irt_lib_t lib;
    irt_lib_open(proc, NULL, &lib);
    irt_binds_copy(&ref, &host, irt_is_param_node, lib.res);
    irt_call(&lib, &ref); /* the values the good runs must give */

    const troupe_driver_vtable_t *vt = NULL;
    troupe_driver_t *drv = NULL;
    OK(troupe_driver_lookup("cuda", &vt));
    OK(troupe_driver_open(vt, &drv));
    troupe_dcode_t *code = NULL;
    OK(troupe_driver_compile(drv, proc, &code));
    troupe_dqueue_t *q = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q));
    const troupe_cgen_result_t *gen = lib.res; /* the same parameters, in the same order */
    troupe_karg_t args[8];
    cr_assert_leq(gen->nparams, 8);
    for (size_t k = 0; k < gen->nparams; k++) {
        const troupe_tnode_t *tn = gen->params[k].tn;
        troupe_buffer_loc_t loc = {(int32_t)k + 1, 0, (int64_t)tn->size_bytes};
        OK(troupe_driver_alloc_pool(drv, 0, loc.pool_id, loc.size_bytes, true));
        OK(troupe_driver_h2d(drv, q, loc, irt_binds_get(&host, tn), loc.size_bytes));
        args[k] = (troupe_karg_t){TROUPE_KARG_BUFFER, 0, loc, 0};
    }
    ptrdiff_t pt = troupe_cgen_find_node_param(gen, n[0]),
              pe = troupe_cgen_find_node_param(gen, n[2]),
              py = troupe_cgen_find_node_param(gen, n[4]);
    cr_assert(pt >= 0 && pe >= 0 && py >= 0);
    float emb[R * CW], y[R * DW];
    /* first the tiles (bit for bit the C dialect), plain and replayed from a graph */
    setenv("TROUPE_CUDA_GATHER_GEMM", "tiles", 1);
    OK(troupe_config_reload());
    troupe_driver_set_graphs(TROUPE_GRAPHS_AUTO);
    troupe_driver_graph_stats_reset();
    for (int run = 0; run < TROUPE_GRAPH_WARMUP_RUNS + 3; run++) {
        if (run == TROUPE_GRAPH_WARMUP_RUNS + 2) /* a replay must zero these itself */
            cr_assert_eq(
                cudaMemsetAsync(q->gerr_dev, 0x7f, TROUPE_CGEN_GATHER_ERR_WORDS * 8, q->stream),
                cudaSuccess);
        OK(troupe_driver_launch(drv, q, code, args, gen->nparams));
        OK(s_cuda_sync(drv, q));
        OK(troupe_driver_d2h(drv, q, emb, args[pe].buf, (int64_t)sizeof emb));
        OK(troupe_driver_d2h(drv, q, y, args[py].buf, (int64_t)sizeof y));
        cr_assert(memcmp(emb, irt_binds_get(&ref, n[2]), sizeof emb) == 0, "run %d: emb", run);
        cr_assert(memcmp(y, irt_binds_get(&ref, n[4]), sizeof y) == 0, "run %d: y", run);
    }
    troupe_graph_stats_t gs;
    troupe_driver_graph_stats(&gs);
    cr_assert_eq(gs.capture_failures, 0, "the capture failed (TROUPE_LOG=debug:devices says why)");
    cr_assert_eq(gs.replays, 3); /* the captured run and two more */

    /* Out of range, replayed from the graph: sentinels in emb and y stay. */
    int32_t *tok = irt_binds_get(&host, n[0]);
    tok[29] = VW;
    OK(troupe_driver_h2d(drv, q, args[pt].buf, tok, args[pt].buf.size_bytes));
    float *emb0 = irt_binds_get(&host, n[2]), *y0 = irt_binds_get(&host, n[4]);
    OK(troupe_driver_h2d(drv, q, args[pe].buf, emb0, args[pe].buf.size_bytes));
    OK(troupe_driver_h2d(drv, q, args[py].buf, y0, args[py].buf.size_bytes));
    OK(troupe_driver_launch(drv, q, code, args, gen->nparams));
    cr_assert_eq(s_cuda_sync(drv, q), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[29] = 50") &&
                  strstr(troupe_last_error(), "0..49"),
              "%s", troupe_last_error());
    OK(troupe_driver_d2h(drv, q, emb, args[pe].buf, (int64_t)sizeof emb));
    OK(troupe_driver_d2h(drv, q, y, args[py].buf, (int64_t)sizeof y));
    cr_assert(memcmp(emb, emb0, sizeof emb) == 0, "emb was written");
    cr_assert(memcmp(y, y0, sizeof y) == 0, "y was written (a GEMM ran after the check)");
    troupe_driver_graph_stats(&gs);
    cr_assert_eq(gs.replays, 4, "the failing run was not a replay");
    /* the queue keeps the failure: its next launch is refused with it */
    cr_assert_eq(troupe_driver_launch(drv, q, code, args, gen->nparams), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[29] = 50"), "%s", troupe_last_error());
    /* a queue ordered after it on the device (event_wait) inherits it */
    troupe_dqueue_t *q2 = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q2));
    OK(s_cuda_sync(drv, q2));
    troupe_devent_t *ev = NULL;
    OK(troupe_driver_event_record(drv, q, &ev));
    OK(troupe_driver_event_wait(drv, q2, ev));
    troupe_driver_event_release(drv, ev);
    cr_assert_eq(s_cuda_sync(drv, q2), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[29] = 50"), "%s", troupe_last_error());
    troupe_driver_queue_destroy(drv, q2);

    /* The default, checked: each launch waits for the index check, then runs the product on
     * cuBLASLt (y within its rounding of the tiles'), never from a graph (a replay could not
     * wait: the routine stays plain, and no capture fails); after a bad index nothing is
     * written. */
    unsetenv("TROUPE_CUDA_GATHER_GEMM");
    OK(troupe_config_reload());
    cr_assert_eq(troupe_config_cuda_gather_gemm(), TROUPE_CUDA_GATHER_GEMM_CHECKED);
    troupe_dqueue_t *q3 = NULL;
    OK(troupe_driver_queue_create(drv, 0, &q3));
    int32_t bad = tok[29];
    tok[29] = 3;
    OK(troupe_driver_h2d(drv, q3, args[pt].buf, tok, args[pt].buf.size_bytes));
    irt_binds_free(&ref);
    irt_binds_copy(&ref, &host, irt_is_param_node, lib.res);
    irt_call(&lib, &ref);
    const float *yr = irt_binds_get(&ref, n[4]);
    troupe_driver_graph_stats(&gs);
    uint64_t replays = gs.replays, failures = gs.capture_failures;
    for (int run = 0; run < TROUPE_GRAPH_WARMUP_RUNS + 2; run++) {
        OK(troupe_driver_launch(drv, q3, code, args, gen->nparams));
        OK(s_cuda_sync(drv, q3));
        OK(troupe_driver_d2h(drv, q3, emb, args[pe].buf, (int64_t)sizeof emb));
        OK(troupe_driver_d2h(drv, q3, y, args[py].buf, (int64_t)sizeof y));
        cr_assert(memcmp(emb, irt_binds_get(&ref, n[2]), sizeof emb) == 0, "checked: emb");
        for (int i = 0; i < R * DW; i++)
            cr_assert(fabsf(y[i] - yr[i]) <= 1e-5f * (1.0f + fabsf(yr[i])),
                      "checked, run %d: y[%d] %g, %g", run, i, (double)y[i], (double)yr[i]);
    }
    troupe_driver_graph_stats(&gs);
    cr_assert_eq(gs.replays, replays, "checked: a launch was replayed from a graph");
    cr_assert_eq(gs.capture_failures, failures, "checked: a capture failed");
    tok[29] = bad;
    OK(troupe_driver_h2d(drv, q3, args[pt].buf, tok, args[pt].buf.size_bytes));
    OK(troupe_driver_h2d(drv, q3, args[pe].buf, emb0, args[pe].buf.size_bytes));
    OK(troupe_driver_h2d(drv, q3, args[py].buf, y0, args[py].buf.size_bytes));
    OK(troupe_driver_launch(drv, q3, code, args, gen->nparams));
    cr_assert_eq(s_cuda_sync(drv, q3), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "tokens[29] = 50"), "%s", troupe_last_error());
    OK(troupe_driver_d2h(drv, q3, emb, args[pe].buf, (int64_t)sizeof emb));
    OK(troupe_driver_d2h(drv, q3, y, args[py].buf, (int64_t)sizeof y));
    cr_assert(memcmp(emb, emb0, sizeof emb) == 0, "checked: emb was written");
    cr_assert(memcmp(y, y0, sizeof y) == 0, "checked: y was written (cuBLASLt ran after the "
                                            "failed check)");
    troupe_driver_queue_destroy(drv, q3);

    troupe_driver_queue_destroy(drv, q);
    troupe_driver_code_release(drv, code);
    for (size_t k = 0; k < gen->nparams; k++)
        OK(troupe_driver_free_pool(drv, 0, (int32_t)k + 1));
    troupe_driver_close(drv);
    irt_lib_close(&lib);
    irt_binds_free(&ref);
    irt_binds_free(&host);
    troupe_ll_proc_destroy(&proc);
    s_free_nodes(n, 5);
#endif
}
