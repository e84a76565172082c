/* troupe — conformance suite of the user-facing runtime (actors/troupe.h), run on every built
 * driver ("sync", "cpu", and "cuda" when a device is present): transfers, compile/link/run
 * against the interpreter, contexts
 * and finalize, events and deadlines, link errors, failure propagation, memory accounting,
 * debug info, suggested streams. */
#include "actors/troupe.h"

#include "base/alloc.h"
#include "base/config.h"
#include "compiler/interp.h"
#include "compiler/optimize.h"
#include "ir/sexp.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
}

TestSuite(runtime, .init = s_setup);

static void s_expect(troupe_tnode_t *tn, const double *want)
{
    size_t n = (size_t)troupe_tnode_num_elems(tn);
    double got[64];
    cr_assert(n <= 64);
    OK(troupe_tnode_get_values(tn, got, n));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "element %zu: got %g want %g", i, got[i], want[i]);
}

Test(runtime, transfers_round_trip)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_node("a", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 3});
        const double v1[6] = {1, 2, 3, 4, 5, 6}, zeros[6] = {0}, junk[6] = {9, 9, 9, 9, 9, 9};
        rtu_set(a, v1);
        troupe_context_t *c1 = e.ctx[0], *c2 = e.ctx[1];
        troupe_context_retain(c1);
        troupe_context_retain(c2);
        rtu_init(&c1, a); /* stream 0 holds v1 */
        rtu_set(a, zeros); /* waits for the upload still reading the host array */
        rtu_init(&c2, a); /* stream 1 holds zeros */
        troupe_event_t *ev = NULL;
        OK(troupe_device_to_device(a, TROUPE_MERGE_NO, c2, c1, NULL, NULL, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        rtu_set(a, junk);
        OK(troupe_to_host(c2, a, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        s_expect(a, v1);
        /* and back: host -> stream 0 -> host */
        rtu_set(a, junk);
        OK(troupe_from_host(c1, a, NULL));
        rtu_set(a, zeros);
        OK(troupe_to_host(c1, a, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        s_expect(a, junk);
        /* errors */
        troupe_tnode_t *other = rtu_vec("other", 2);
        cr_assert_eq(troupe_to_host(c1, other, NULL), TROUPE_NOT_FOUND);
        cr_assert_eq(troupe_init_from_host(c1, a, &(troupe_context_t *){NULL}, NULL),
                     TROUPE_ALREADY_EXISTS);
        troupe_tnode_release(&other);
        troupe_context_release(&c1);
        troupe_context_release(&c2);
        troupe_tnode_release(&a);
        rtu_env_close(&e);
    }
}

Test(runtime, packed_uploads_lie_in_one_pool_in_order_at_64_byte_steps)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        /* 10 floats (40 bytes: the next starts 64 bytes on), 16 (64), 3 */
        troupe_tnode_t *a = rtu_vec("a", 10), *b = rtu_vec("b", 16), *c = rtu_vec("c", 3);
        double va[10], vb[16], vc[3];
        for (int i = 0; i < 16; i++)
            vb[i] = 100 + i;
        for (int i = 0; i < 10; i++)
            va[i] = i;
        for (int i = 0; i < 3; i++)
            vc[i] = -i;
        rtu_set(a, va);
        rtu_set(b, vb);
        rtu_set(c, vc);
        troupe_tnode_t *order[3] = {b, a, c}; /* not node-id order: the order given counts */
        troupe_context_t *ctx = NULL;
        OK(troupe_init_from_host_packed(e.ctx[0], 3, order, &ctx));
        troupe_buffer_loc_t lb, la, lc;
        OK(troupe_context_buffer(ctx, b, &lb));
        OK(troupe_context_buffer(ctx, a, &la));
        OK(troupe_context_buffer(ctx, c, &lc));
        cr_assert(lb.pool_id == la.pool_id && la.pool_id == lc.pool_id, "one pool: %d %d %d",
                  lb.pool_id, la.pool_id, lc.pool_id);
        cr_assert(lb.offset == 0 && la.offset == 64 && lc.offset == 128,
                  "offsets %lld %lld %lld", (long long)lb.offset, (long long)la.offset,
                  (long long)lc.offset);
        rtu_set(a, (double[10]){0});
        troupe_event_t *ev = NULL;
        OK(troupe_to_host(ctx, a, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        s_expect(a, va);
        /* errors name the node; nothing is allocated */
        troupe_context_t *none = NULL;
        troupe_tnode_t *twice[2] = {c, c};
        cr_assert_eq(troupe_init_from_host_packed(e.ctx[0], 2, twice, &none),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_not_null(strstr(troupe_last_error(), "given twice"), "%s", troupe_last_error());
        cr_assert_eq(troupe_init_from_host_packed(ctx, 1, &a, &none), TROUPE_ALREADY_EXISTS);
        cr_assert_eq(troupe_init_from_host_packed(e.ctx[0], 0, order, &none),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_not_null(strstr(troupe_last_error(), "no nodes"), "%s", troupe_last_error());
        troupe_tnode_t *with_null[2] = {c, NULL};
        cr_assert_eq(troupe_init_from_host_packed(e.ctx[0], 2, with_null, &none),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_not_null(strstr(troupe_last_error(), "node 1 is NULL"), "%s",
                           troupe_last_error());
        cr_assert_null(none);
        troupe_context_release(&ctx);
        troupe_tnode_release(&a);
        troupe_tnode_release(&b);
        troupe_tnode_release(&c);
        rtu_env_close(&e);
    }
}

/* y = relu(x * w + b): x 2x3, w 3x4, b 4, y 2x4 */
static troupe_asgn_comp_t *s_mlp_comp(troupe_tnode_t *x, troupe_tnode_t *w, troupe_tnode_t *b,
                                      troupe_tnode_t *h, troupe_tnode_t *t, troupe_tnode_t *y)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *s1 = NULL, *s2 = NULL, *s3 = NULL, *seq = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ADD, h, TROUPE_BINOP_MUL,
                               troupe_asgn_node(x), troupe_asgn_node(w), "bi,ij=>bj", &s1));
    OK(troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ARG2, t, TROUPE_BINOP_ADD,
                               troupe_asgn_node(h), troupe_asgn_node(b), "bj,j=>bj", &s2));
    OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, y, TROUPE_UNOP_RELU,
                              troupe_asgn_node(t), "bj=>bj", &s3));
    troupe_asgn_t *items[3] = {s1, s2, s3};
    OK(troupe_asgn_seq(comp, 3, items, &seq));
    troupe_asgn_comp_set_root(comp, seq);
    return comp;
}

Test(runtime, matmul_bias_relu_matches_interpreter)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *x = rtu_node("x", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 3});
        troupe_tnode_t *w = rtu_node("w", TROUPE_PREC_SINGLE, 2, (int64_t[]){3, 4});
        troupe_tnode_t *b = rtu_vec("b", 4);
        troupe_tnode_t *h = rtu_node("h", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 4});
        troupe_tnode_t *t = rtu_node("t", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 4});
        troupe_tnode_t *y = rtu_node("y", TROUPE_PREC_SINGLE, 2, (int64_t[]){2, 4});
        double xv[6], wv[12], bv[4];
        for (int i = 0; i < 6; i++)
            xv[i] = 0.37 * i - 0.9;
        for (int i = 0; i < 12; i++)
            wv[i] = 0.11 * (i % 5) - 0.23 * (i % 3);
        for (int i = 0; i < 4; i++)
            bv[i] = 0.05 * i - 0.1;
        rtu_set(x, xv);
        rtu_set(w, wv);
        rtu_set(b, bv);
        rtu_set_hosted(y, 411);
        troupe_asgn_comp_t *comp = s_mlp_comp(x, w, b, h, t, y);
        troupe_code_t *code = NULL;
        OK(troupe_compile(e.b, comp, "mlp", &code));

        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        rtu_init(&ctx, x);
        rtu_init(&ctx, w);
        rtu_init(&ctx, b);
        troupe_routine_t *r = NULL;
        OK(troupe_link(ctx, code, &r));
        troupe_event_t *ev = NULL;
        OK(troupe_routine_run(r, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        double got[8];
        OK(troupe_tnode_get_values(y, got, 8)); /* fetched from the device by the hook */

        /* the interpreter on the same optimized procedure */
        const troupe_ll_proc_t *proc = troupe_code_proc(code);
        troupe_interp_buffer_t bufs[16];
        size_t nb = 0;
        float xs[6], ws[12], bs[4], ys[8] = {0}, scratch[2][8] = {{0}};
        for (int i = 0; i < 6; i++)
            xs[i] = (float)xv[i];
        for (int i = 0; i < 12; i++)
            ws[i] = (float)wv[i];
        for (int i = 0; i < 4; i++)
            bs[i] = (float)bv[i];
        int k = 0;
        for (size_t i = 0; i < proc->nnodes; i++) {
            troupe_tnode_t *tn = proc->nodes[i];
            void *data = tn == x ? (void *)xs : tn == w ? (void *)ws : tn == b ? (void *)bs
                       : tn == y ? (void *)ys : NULL;
            if (!data && troupe_tnode_known_not_materialized(tn))
                continue;
            if (!data)
                data = scratch[k++];
            bufs[nb++] = (troupe_interp_buffer_t){tn, data};
        }
        troupe_interp_args_t args = {bufs, nb, NULL, 0, NULL};
        OK(troupe_interp_run(proc, &args));
        bool some_positive = false, some_zero = false;
        for (int i = 0; i < 8; i++) {
            cr_assert_eq((float)got[i], ys[i], "%s: y[%d] = %.9g, interpreter %.9g", *drv, i,
                         got[i], (double)ys[i]);
            some_positive |= ys[i] > 0;
            some_zero |= ys[i] == 0;
        }
        cr_assert(some_positive && some_zero, "the data exercises relu");

        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_asgn_comp_destroy(&comp);
        troupe_context_release(&ctx);
        troupe_tnode_release(&x);
        troupe_tnode_release(&w);
        troupe_tnode_release(&b);
        troupe_tnode_release(&h);
        troupe_tnode_release(&t);
        troupe_tnode_release(&y);
        rtu_env_close(&e);
    }
}

Test(runtime, link_error_names_the_missing_prior_node)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *a = rtu_vec("a", 4), *bb = rtu_vec("bb", 4);
        rtu_set(a, (double[]){1, 2, 3, 4});
        rtu_set(bb, (double[]){1, 2, 3, 4});
        troupe_code_t *code = rtu_add_code(e.b, a, bb, "add_ab");
        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        rtu_init(&ctx, a);
        troupe_routine_t *r = NULL;
        cr_assert_eq(troupe_link(ctx, code, &r), TROUPE_FAILED_PRECONDITION);
        cr_assert_null(r);
        char want[64];
        troupe_tnode_debug_name(bb, want, sizeof want);
        cr_assert(strstr(troupe_last_error(), "lacks node") && strstr(troupe_last_error(), want),
                  "message: %s", troupe_last_error());
        rtu_init(&ctx, bb);
        OK(troupe_link(ctx, code, &r));
        OK(troupe_routine_run(r, NULL));
        s_expect(a, (double[]){2, 4, 6, 8});
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_context_release(&ctx);
        troupe_tnode_release(&a);
        troupe_tnode_release(&bb);
        rtu_env_close(&e);
    }
}

/* A routine whose per-stream arrays need more host memory than TROUPE_HOST_MEMORY allows is
 * refused at link, before any memory is touched, with a message naming the routine, the bytes,
 * its three largest arrays in order and the setting; with the check off the same link succeeds
 * and runs. */
Test(runtime, link_past_host_memory_is_refused_naming_routine_and_arrays)
{
    const int64_t n[4] = {(int64_t)1 << 19, (int64_t)1 << 20, 16, (int64_t)1 << 18};
    FOR_EACH_HOST_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *in[4], *out[4];
        troupe_asgn_t *t[4];
        troupe_asgn_comp_t *comp = NULL;
        OK(troupe_asgn_comp_new(&comp));
        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        double *v = troupe_calloc((size_t)n[1], sizeof *v);
        cr_assert_not_null(v);
        for (int k = 0; k < 4; k++) {
            char label[16];
            snprintf(label, sizeof label, "in%d", k);
            in[k] = rtu_vec(label, n[k]);
            snprintf(label, sizeof label, "out%d", k);
            out[k] = rtu_vec(label, n[k]);
            v[0] = 1.5 + k;
            v[n[k] - 1] = -2;
            rtu_set(in[k], v);
            v[n[k] - 1] = 0;
            rtu_set_hosted(out[k], 1);
            OK(troupe_asgn_pointwise_binop(comp, out[k], TROUPE_BINOP_ADD, troupe_asgn_node(in[k]),
                                           troupe_asgn_node(in[k]), &t[k]));
            rtu_init(&ctx, in[k]);
        }
        troupe_asgn_t *root = NULL;
        OK(troupe_asgn_seq(comp, 4, t, &root));
        troupe_code_t *code = rtu_compile_root(e.b, &comp, root, "double_four");
        int64_t before = 0, after = 0;
        OK(troupe_get_used_memory(e.d, &before));

        OK(troupe_config_set_host_memory((int64_t)1 << 20));
        troupe_routine_t *r = NULL;
        cr_assert_eq(troupe_link(ctx, code, &r), TROUPE_RESOURCE_EXHAUSTED, "%s: %s", *drv,
                     troupe_last_error());
        cr_assert_null(r);
        char nm[3][64], want[256];
        for (int k = 0; k < 3; k++)
            troupe_tnode_debug_name(out[(int[]){1, 0, 3}[k]], nm[k], sizeof nm[k]);
        snprintf(want, sizeof want, "the largest: %s 4194304, %s 2097152, %s 1048576)", nm[0],
                 nm[1], nm[2]);
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, "link double_four") &&
                      strstr(msg, "4 per-stream arrays take 7340096 bytes") && strstr(msg, want) &&
                      strstr(msg, "TROUPE_HOST_MEMORY=1048576"),
                  "%s: %s\nwant: %s", *drv, msg, want);
        OK(troupe_get_used_memory(e.d, &after));
        cr_assert_eq(after, before, "%s: the refused pool is not counted", *drv);
        cr_assert_eq(troupe_config_set_host_memory(-3), TROUPE_INVALID_ARGUMENT);

        OK(troupe_config_set_host_memory(TROUPE_HOST_MEMORY_OFF));
        OK(troupe_link(ctx, code, &r));
        OK(troupe_routine_run(r, NULL));
        OK(troupe_config_set_host_memory(TROUPE_HOST_MEMORY_AUTO));
        float *got = troupe_calloc((size_t)n[1], sizeof *got);
        cr_assert_not_null(got);
        for (int k = 0; k < 4; k++) {
            rtu_get(troupe_routine_context(r), out[k], got);
            cr_assert(got[0] == 3 + 2 * k && got[1] == 0 && got[n[k] - 1] == -4,
                      "%s out%d: %g %g %g", *drv, k, got[0], got[1], got[n[k] - 1]);
            troupe_tnode_release(&in[k]);
            troupe_tnode_release(&out[k]);
        }
        troupe_free(got);
        troupe_free(v);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_context_release(&ctx);
        rtu_env_close(&e);
    }
}

Test(runtime, used_memory_is_exact_and_finalize_returns_it)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        int64_t base = -1, used = -1;
        OK(troupe_get_used_memory(e.d, &base));
        cr_assert_eq(base, 0);
        troupe_tnode_t *a = rtu_vec("a", 3); /* 12 bytes */
        rtu_set(a, (double[]){1, 2, 3});
        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        rtu_init(&ctx, a);
        OK(troupe_get_used_memory(e.d, &used));
        cr_assert_eq(used, base + 12);
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *seq = NULL;
        troupe_tnode_t *c = rtu_node("c", TROUPE_PREC_DOUBLE, 1, (int64_t[]){3}); /* 24 bytes */
        troupe_tnode_t *d2 = rtu_vec("d2", 3);                      /* 12 bytes */
        rtu_set_hosted(c, 411);
        rtu_set_hosted(d2, 411);
        OK(troupe_asgn_comp_new(&comp));
        troupe_asgn_t *t1 = NULL, *t2 = NULL;
        OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, c, TROUPE_UNOP_IDENTITY,
                                  troupe_asgn_node(a), "i=>i", &t1));
        OK(troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, d2, TROUPE_UNOP_NEG,
                                  troupe_asgn_node(a), "i=>i", &t2));
        OK(troupe_asgn_seq2(comp, t1, t2, &seq));
        troupe_asgn_comp_set_root(comp, seq);
        troupe_code_t *code = NULL;
        OK(troupe_compile(e.b, comp, "copy_neg", &code));
        troupe_routine_t *r = NULL;
        OK(troupe_link(ctx, code, &r));
        OK(troupe_get_used_memory(e.d, &used));
        /* c (lower id) at offset 0, 24 bytes; d2 at offset 64, 12 bytes: one 76-byte pool */
        cr_assert_eq(used, base + 12 + 76, "used %lld", (long long)used);
        troupe_buffer_loc_t lc, ld;
        OK(troupe_context_buffer(troupe_routine_context(r), c, &lc));
        OK(troupe_context_buffer(troupe_routine_context(r), d2, &ld));
        cr_assert_eq(lc.pool_id, ld.pool_id);
        cr_assert_eq(lc.offset, 0);
        cr_assert_eq(ld.offset, 64);
        OK(troupe_routine_run(r, NULL));
        s_expect(c, (double[]){1, 2, 3});
        s_expect(d2, (double[]){-1, -2, -3});
        /* a child holds the same arrays and adds nothing */
        troupe_context_t *child = NULL;
        OK(troupe_context_child(troupe_routine_context(r), &child));
        OK(troupe_context_buffer(child, c, &ld));
        cr_assert_eq(ld.pool_id, lc.pool_id);
        OK(troupe_context_finalize(child));
        OK(troupe_get_used_memory(e.d, &used));
        cr_assert_eq(used, base + 88);
        OK(troupe_context_finalize(troupe_routine_context(r)));
        OK(troupe_get_used_memory(e.d, &used));
        cr_assert_eq(used, base + 12);
        OK(troupe_context_finalize(ctx));
        OK(troupe_context_finalize(ctx)); /* twice is fine */
        OK(troupe_get_used_memory(e.d, &used));
        cr_assert_eq(used, base);
        troupe_context_release(&child);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_asgn_comp_destroy(&comp);
        troupe_context_release(&ctx);
        troupe_tnode_release(&a);
        troupe_tnode_release(&c);
        troupe_tnode_release(&d2);
        rtu_env_close(&e);
    }
}

Test(runtime, wait_on_an_event_that_never_completes_hits_the_deadline)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *a = rtu_vec("a", 4);
        rtu_set(a, (double[]){1, 2, 3, 4});
        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        rtu_init(&ctx, a);
        troupe_code_t *code = rtu_add_code(e.b, a, NULL, "double_a");
        troupe_routine_t *r = NULL;
        OK(troupe_link(ctx, code, &r));
        troupe_event_t *never = NULL, *ev = NULL;
        OK(troupe_event_new("never", &never));
        OK(troupe_will_wait_for(ctx, never));
        OK(troupe_routine_run(r, &ev));
        cr_assert_not(troupe_event_is_done(ev));
        cr_assert_eq(troupe_event_sync(ev, 50 * MS), TROUPE_DEADLINE_EXCEEDED);
        cr_assert_eq(troupe_stream_await(e.s[0], 50 * MS), TROUPE_DEADLINE_EXCEEDED);
        cr_assert_not(troupe_stream_is_idle(e.s[0]));
        troupe_event_complete(never, TROUPE_OK, NULL);
        OK(troupe_event_sync(ev, 10000 * MS));
        OK(troupe_stream_await(e.s[0], 10000 * MS));
        cr_assert(troupe_stream_is_idle(e.s[0]));
        troupe_event_t *all = NULL;
        OK(troupe_stream_all_work(e.s[0], &all));
        OK(troupe_event_sync(all, 10000 * MS));
        s_expect(a, (double[]){2, 4, 6, 8});
        troupe_event_release(&all);
        troupe_event_release(&ev);
        troupe_event_release(&never);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_context_release(&ctx);
        troupe_tnode_release(&a);
        rtu_env_close(&e);
    }
}

static troupe_status_t s_failing_work(void *arg, troupe_dqueue_t *q)
{
    (void)arg, (void)q;
    return troupe__error(TROUPE_DEVICE_ERROR, "injected kernel failure");
}

Test(runtime, a_failed_routine_fails_its_event_and_its_dependants)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_vec("a", 4);
        rtu_set(a, (double[]){1, 2, 3, 4});
        troupe_context_t *ca = e.ctx[0], *cb = e.ctx[1];
        troupe_context_retain(ca);
        troupe_context_retain(cb);
        rtu_init(&ca, a);
        rtu_init(&cb, a);
        OK(troupe_stream_await(e.s[0], 10000 * MS));
        troupe_code_t *code = rtu_add_code(e.b, a, NULL, "double_a");
        troupe_routine_t *ra = NULL, *rb = NULL;
        OK(troupe_link(ca, code, &ra));
        OK(troupe_link(cb, code, &rb));
        /* stream 0 is held until we release it, so the failure happens after B is scheduled */
        troupe_event_t *gate = NULL, *ea = NULL, *eb = NULL;
        OK(troupe_event_new("gate", &gate));
        OK(troupe_will_wait_for(ca, gate));
        OK(troupe_stream_schedule(e.s[0], s_failing_work, NULL, NULL));
        OK(troupe_routine_run(ra, &ea)); /* writes a on stream 0 */
        /* stream 1 copies stream 0's a (RAW on the failed write), then runs */
        OK(troupe_device_to_device(a, TROUPE_MERGE_NO, troupe_routine_context(rb), ca, NULL, NULL,
                                   NULL));
        OK(troupe_routine_run(rb, &eb));
        troupe_event_complete(gate, TROUPE_OK, NULL);
        cr_assert_eq(troupe_event_sync(ea, 10000 * MS), TROUPE_DEVICE_ERROR);
        cr_assert_eq(troupe_event_sync(eb, 10000 * MS), TROUPE_DEVICE_ERROR);
        cr_assert(strstr(troupe_last_error(), "injected"), "message: %s", troupe_last_error());
        cr_assert_eq(troupe_stream_await(e.s[1], 10000 * MS), TROUPE_DEVICE_ERROR);
        cr_assert_eq(troupe_stream_await(e.s[0], 10000 * MS), TROUPE_DEVICE_ERROR);
        /* later scheduling on the failed stream returns the error */
        cr_assert_eq(troupe_routine_run(ra, NULL), TROUPE_DEVICE_ERROR);
        cr_assert_eq(troupe_from_host(ca, a, NULL), TROUPE_DEVICE_ERROR);
        troupe_event_release(&gate);
        troupe_event_release(&ea);
        troupe_event_release(&eb);
        troupe_routine_release(&ra);
        troupe_routine_release(&rb);
        troupe_code_release(&code);
        troupe_context_release(&ca);
        troupe_context_release(&cb);
        troupe_tnode_release(&a);
        rtu_env_close(&e);
    }
}

Test(runtime, static_index_is_bound_and_bounds_checked)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 1);
        troupe_tnode_t *data = rtu_node("data", TROUPE_PREC_SINGLE, 2, (int64_t[]){3, 2});
        troupe_tnode_t *row = rtu_vec("row", 2);
        rtu_set(data, (double[]){1, 2, 3, 4, 5, 6});
        rtu_set_hosted(row, 411);
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *t = NULL;
        int32_t sym = -1;
        OK(troupe_asgn_comp_new(&comp));
        OK(troupe_asgn_comp_add_static_symbol(comp, "batch_n", 3, &sym));
        OK(troupe_asgn_fetch_slice(comp, row, sym, data, &t));
        troupe_asgn_comp_set_root(comp, t);
        troupe_code_t *code = NULL;
        OK(troupe_compile(e.b, comp, "slice_row", &code));
        troupe_context_t *ctx = e.ctx[0];
        troupe_context_retain(ctx);
        rtu_init(&ctx, data);
        troupe_routine_t *r = NULL;
        OK(troupe_link(ctx, code, &r));
        cr_assert_eq(troupe_routine_set_index(r, "batch_n", 3), TROUPE_INVALID_ARGUMENT);
        cr_assert(strstr(troupe_last_error(), "batch_n"));
        cr_assert_eq(troupe_routine_set_index(r, "batch_n", -1), TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(troupe_routine_set_index(r, "nope", 0), TROUPE_NOT_FOUND);
        OK(troupe_routine_set_index(r, "batch_n", 2));
        int64_t v = -1;
        OK(troupe_routine_get_index(r, "batch_n", &v));
        cr_assert_eq(v, 2);
        OK(troupe_routine_run(r, NULL));
        s_expect(row, (double[]){5, 6});
        OK(troupe_routine_set_index(r, "batch_n", 0));
        OK(troupe_routine_run(r, NULL));
        s_expect(row, (double[]){1, 2});
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_asgn_comp_destroy(&comp);
        troupe_context_release(&ctx);
        troupe_tnode_release(&data);
        troupe_tnode_release(&row);
        rtu_env_close(&e);
    }
}

Test(runtime, debug_info_is_an_sexp_mentioning_streams)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_vec("a", 4);
        rtu_set(a, (double[]){1, 2, 3, 4});
        troupe_context_t *ctx = e.ctx[1];
        troupe_context_retain(ctx);
        rtu_init(&ctx, a);
        char *all = NULL, *one = NULL;
        OK(troupe_debug_info(e.b, NULL, &all));
        OK(troupe_debug_info(e.b, e.s[1], &one));
        char name0[32], name1[32], node[64];
        snprintf(name0, sizeof name0, "%s:0:0", *drv);
        snprintf(name1, sizeof name1, "%s:0:1", *drv);
        troupe_tnode_debug_name(a, node, sizeof node);
        cr_assert_str_eq(troupe_stream_name(e.s[1]), name1);
        /* (backend (name DRV) (devices ((device ... (streams (S0 S1)) (ledger (ARRAY...)))))) */
        troupe_sexp_t *x = NULL;
        cr_assert_eq(troupe_sexp_read(all, strlen(all), &x), TROUPE_OK, "%s: %s",
                     troupe_last_error(), all);
        cr_assert(troupe_sexp_is_form(x, "backend"), "%s", all);
        const troupe_sexp_t *name = troupe_sexp_find(x, "name");
        cr_assert(name && name->count == 2 && troupe_sexp_is_atom(name->items[1], *drv), "%s", all);
        const troupe_sexp_t *devices = troupe_sexp_find(x, "devices");
        cr_assert(devices && devices->count == 2 && devices->items[1]->count == 1, "%s", all);
        const troupe_sexp_t *dev = devices->items[1]->items[0];
        cr_assert(troupe_sexp_is_form(dev, "device"), "%s", all);
        const troupe_sexp_t *streams = troupe_sexp_find(dev, "streams");
        cr_assert(streams && streams->count == 2 && streams->items[1]->count == 2, "%s", all);
        for (int k = 0; k < 2; k++) {
            const troupe_sexp_t *srec = streams->items[1]->items[k];
            cr_assert(troupe_sexp_is_form(srec, "troupe_stream"), "%s", all);
            const troupe_sexp_t *id = troupe_sexp_find(srec, "stream_id");
            cr_assert(id && id->count == 2 && id->items[1]->kind == TROUPE_SEXP_ATOM &&
                          atoi(id->items[1]->text) == k,
                      "%s", all);
            const troupe_sexp_t *sname = troupe_sexp_find(troupe_sexp_find(srec, "stream"), "name");
            cr_assert(sname && sname->count == 2 && sname->items[1]->kind == TROUPE_SEXP_STRING &&
                          strcmp(sname->items[1]->text, k ? name1 : name0) == 0,
                      "%s", all);
        }
        /* The ledger has an entry for node a's array (in stream 1's context). */
        const troupe_sexp_t *ledger = troupe_sexp_find(dev, "ledger");
        cr_assert(ledger && ledger->count == 2, "%s", all);
        bool found = false;
        for (size_t k = 0; k < ledger->items[1]->count; k++) {
            const troupe_sexp_t *arr = ledger->items[1]->items[k];
            const troupe_sexp_t *n = troupe_sexp_find(arr, "node");
            cr_assert(troupe_sexp_is_form(arr, "array") && n && n->count == 2, "%s", all);
            found = found || troupe_sexp_is_atom(n->items[1], node);
        }
        cr_assert(found, "no ledger entry for %s: %s", node, all);
        troupe_sexp_destroy(&x);
        /* One stream: (troupe_stream (backend DRV) ... (stream (name "DRV:0:1") ...)). */
        cr_assert_eq(troupe_sexp_read(one, strlen(one), &x), TROUPE_OK, "%s: %s",
                     troupe_last_error(), one);
        cr_assert(troupe_sexp_is_form(x, "troupe_stream"), "%s", one);
        const troupe_sexp_t *sname = troupe_sexp_find(troupe_sexp_find(x, "stream"), "name");
        cr_assert(sname && sname->count == 2 && strcmp(sname->items[1]->text, name1) == 0, "%s",
                  one);
        troupe_sexp_destroy(&x);
        troupe_free(all);
        troupe_free(one);
        troupe_context_release(&ctx);
        troupe_tnode_release(&a);
        rtu_env_close(&e);
    }
}

Test(runtime, suggested_num_streams)
{
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    int n = 0, count = 0;
    OK(troupe_backend_open("cpu", TROUPE_MOST_PARALLEL_STREAMS, &b));
    OK(troupe_num_devices(b, &count));
    cr_assert_eq(count, 1);
    OK(troupe_get_device(b, 0, &d));
    cr_assert_eq(troupe_get_device(b, 1, &d), TROUPE_NOT_FOUND);
    OK(troupe_get_device(b, 0, &d));
    OK(troupe_suggested_num_streams(d, &n));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(n, cores < 1 ? 1 : (int)cores);
    cr_assert_geq(n, 1);
    troupe_backend_close(&b);
    OK(troupe_backend_open("sync", TROUPE_MOST_PARALLEL_STREAMS, &b));
    OK(troupe_get_device(b, 0, &d));
    OK(troupe_suggested_num_streams(d, &n));
    cr_assert_eq(n, 1);
    troupe_backend_close(&b);
    cr_assert_eq(troupe_backend_open("nope", TROUPE_ONLY_DEVICES_PARALLEL, &b), TROUPE_NOT_FOUND);
}

Test(runtime, raw_and_war_across_streams_with_a_slow_writer)
{
    /* Stream 0 writes a after a gate; stream 1 copies it (RAW) and stream 0's next upload must
     * wait for that copy (WAR). */
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_vec("a", 4);
        rtu_set(a, (double[]){1, 2, 3, 4});
        troupe_context_t *c0 = e.ctx[0], *c1 = e.ctx[1];
        troupe_context_retain(c0);
        troupe_context_retain(c1);
        rtu_init(&c0, a);
        rtu_init(&c1, a);
        troupe_code_t *code = rtu_add_code(e.b, a, NULL, "double_a");
        troupe_routine_t *r0 = NULL;
        OK(troupe_link(c0, code, &r0));
        troupe_event_t *gate = NULL, *ev = NULL;
        OK(troupe_event_new("gate", &gate));
        OK(troupe_will_wait_for(c0, gate));
        OK(troupe_routine_run(r0, NULL)); /* a = 2 4 6 8 on stream 0, held by the gate */
        OK(troupe_device_to_device(a, TROUPE_MERGE_NO, c1, c0, NULL, NULL, &ev));
        cr_assert_not(troupe_event_is_done(ev), "the copy waits for the write");
        troupe_event_complete(gate, TROUPE_OK, NULL);
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        rtu_set(a, (double[]){0, 0, 0, 0});
        OK(troupe_to_host(c1, a, &ev));
        OK(troupe_event_sync(ev, 10000 * MS));
        troupe_event_release(&ev);
        double got[4];
        void *host = NULL;
        OK(troupe_tnode_host_array(a, &host));
        for (int i = 0; i < 4; i++)
            got[i] = ((float *)host)[i];
        cr_assert(got[0] == 2 && got[1] == 4 && got[2] == 6 && got[3] == 8);
        troupe_event_release(&gate);
        troupe_routine_release(&r0);
        troupe_code_release(&code);
        troupe_context_release(&c0);
        troupe_context_release(&c1);
        troupe_tnode_release(&a);
        rtu_env_close(&e);
    }
}

Test(runtime, explicit_uploads_are_not_undone_by_automatic_transfers)
{
    /* a's host array is set and uploaded explicitly into stream 0, then set again and uploaded
     * into stream 1: a routine reading a on stream 0 must still see stream 0's values, not an
     * automatic upload of the newer host array (actors/host.h, "Lagging the host"). A later
     * host write that no explicit upload follows does refresh stream 0's array. */
    FOR_EACH_DRIVER(drv)
    {
        cr_assert(troupe_config_auto_host_transfers());
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_vec("a", 4), *y = rtu_vec("y", 4);
        troupe_context_t *c0 = e.ctx[0], *c1 = e.ctx[1];
        troupe_context_retain(c0);
        troupe_context_retain(c1);
        rtu_put(&c0, y, (double[]){0, 0, 0, 0});
        rtu_put(&c0, a, (double[]){1, 2, 3, 4});
        rtu_put(&c1, a, (double[]){10, 20, 30, 40});
        troupe_code_t *code = rtu_add_code(e.b, y, a, "y_plus_a");
        troupe_routine_t *r0 = NULL;
        OK(troupe_link(c0, code, &r0));
        OK(troupe_routine_run(r0, NULL));
        float got[4];
        rtu_get(c0, y, got);
        cr_assert(got[0] == 1 && got[1] == 2 && got[2] == 3 && got[3] == 4,
                  "stream 0 read an automatic upload: y = %g %g %g %g", got[0], got[1], got[2],
                  got[3]);
        rtu_get(c0, a, got);
        cr_assert(got[0] == 1 && got[3] == 4, "stream 0's a = %g .. %g", got[0], got[3]);
        rtu_get(c1, a, got);
        cr_assert(got[0] == 10 && got[3] == 40, "stream 1's a = %g .. %g", got[0], got[3]);
        /* a host write with no explicit upload after it: stream 0's array follows the host */
        rtu_set(a, (double[]){100, 200, 300, 400});
        OK(troupe_routine_run(r0, NULL));
        rtu_get(c0, y, got);
        cr_assert(got[0] == 101 && got[1] == 202 && got[2] == 303 && got[3] == 404,
                  "y = %g %g %g %g", got[0], got[1], got[2], got[3]);
        troupe_routine_release(&r0);
        troupe_code_release(&code);
        troupe_context_release(&c0);
        troupe_context_release(&c1);
        troupe_tnode_release(&a);
        troupe_tnode_release(&y);
        rtu_env_close(&e);
    }
}

Test(runtime, a_second_stream_writing_a_shared_array_is_refused_at_link)
{
    /* c is one array for every stream of the device (Shared_cross_streams): the first stream
     * linking code that writes it owns it; code writing it on another stream is refused at link
     * time, naming the node and both streams (docs/architecture.md §4, WAW). */
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *b = rtu_vec("b", 4), *c = rtu_vec("c", 4);
        troupe_memory_mode_t shared = {TROUPE_MM_ON_DEVICE, TROUPE_MEMTYPE_UNSET_HOSTED,
                                       TROUPE_SHARING_SHARED_CROSS_STREAMS};
        OK(troupe_tnode_update_memory_mode(c, shared, 1));
        troupe_context_t *c0 = e.ctx[0], *c1 = e.ctx[1];
        troupe_context_retain(c0);
        troupe_context_retain(c1);
        rtu_put(&c0, b, (double[]){1, 2, 3, 4});
        rtu_put(&c1, b, (double[]){1, 2, 3, 4});
        troupe_asgn_comp_t *comp = NULL;
        troupe_asgn_t *t = NULL;
        OK(troupe_asgn_comp_new(&comp));
        OK(troupe_asgn_pointwise_binop(comp, c, TROUPE_BINOP_ADD, troupe_asgn_node(b),
                                       troupe_asgn_node(b), &t));
        troupe_code_t *code = rtu_compile_root(e.b, &comp, t, "c_is_2b");
        troupe_routine_t *r0 = NULL, *again = NULL, *r1 = NULL;
        OK(troupe_link(c0, code, &r0));
        /* the owner stream may link more code writing it */
        OK(troupe_link(troupe_routine_context(r0), code, &again));
        cr_assert_eq(troupe_link(c1, code, &r1), TROUPE_FAILED_PRECONDITION, "%s",
                     troupe_last_error());
        cr_assert_null(r1);
        char name[64], want[256];
        troupe_tnode_debug_name(c, name, sizeof name);
        snprintf(want, sizeof want,
                 "link c_is_2b: node %s is shared across streams and written by stream %s; "
                 "stream %s cannot write it too",
                 name, troupe_stream_name(e.s[0]), troupe_stream_name(e.s[1]));
        cr_assert_str_eq(troupe_last_error(), want);
        troupe_routine_release(&r0);
        troupe_routine_release(&again);
        troupe_code_release(&code);
        troupe_context_release(&c0);
        troupe_context_release(&c1);
        troupe_tnode_release(&b);
        troupe_tnode_release(&c);
        rtu_env_close(&e);
    }
}

/* TROUPE_DENORMALS (base/config.h): with flush (the default) a routine's subnormal inputs read
 * as 0 and its subnormal results become 0; with keep they follow IEEE gradual underflow. The
 * calling thread's floating-point mode is the same after a run as before it (the sync backend
 * runs routines on the caller's thread). */
Test(runtime, subnormals_are_flushed_in_routines_unless_kept)
{
    const float tiny = FLT_MIN / 4; /* subnormal; tiny + tiny = FLT_MIN / 2, subnormal too */
    FOR_EACH_DRIVER(drv)
    {
        for (int keep = 0; keep <= 1; keep++) {
            troupe_config_set_flush_denormals(!keep);
            rtu_env_t e;
            rtu_env_open(&e, *drv, 1);
            troupe_tnode_t *a = rtu_vec("a", 2);
            troupe_context_t *c = e.ctx[0];
            troupe_context_retain(c);
            rtu_put(&c, a, (double[]){tiny, 1.5});
            troupe_code_t *code = rtu_add_code(e.b, a, NULL, "a_twice");
            troupe_routine_t *r = NULL;
            OK(troupe_link(c, code, &r));
            volatile float before = tiny; /* this thread keeps IEEE semantics around the run */
            OK(troupe_routine_run(r, NULL));
            float got[2];
            rtu_get(c, a, got);
            volatile float after = before + before;
            cr_assert_eq(after, FLT_MIN / 2, "%s: the caller's mode changed", *drv);
            cr_assert_eq(got[1], 3.0f, "%s: a normal value is unchanged", *drv);
            if (keep)
                cr_assert_eq(got[0], FLT_MIN / 2, "%s keep: got %a want %a (flush setting %d)",
                             *drv, got[0], FLT_MIN / 2, (int)troupe_config_flush_denormals());
            else
                cr_assert_eq(got[0], 0.0f, "%s flush: got %a want 0", *drv, got[0]);
            troupe_routine_release(&r);
            troupe_code_release(&code);
            troupe_context_release(&c);
            troupe_tnode_release(&a);
            rtu_env_close(&e);
        }
    }
    troupe_config_set_flush_denormals(true);
}
