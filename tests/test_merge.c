/* troupe — merge buffers and device_to_device (DESIGN.md §5): COPY and STREAMING merges, the
 * link-time merge-buffer check, and the WAR guard that keeps a streamed source from being
 * overwritten while its consumer still reads it. Runs on "sync" and "cpu". */
#include "actors/troupe.h"

#include "base/alloc.h"

#include <criterion/criterion.h>
#include <string.h>

#define MS (1000000LL)

static const char *const s_drivers[] = {"sync", "cpu"};
#define FOR_EACH_DRIVER(var) for (const char *const *var = s_drivers; var < s_drivers + 2; var++)

static void s_setup(void)
{
    cr_assert_eq(troupe_config_set_cache_dir(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime"),
                 TROUPE_OK);
    cr_assert_eq(troupe_config_set_timeout_s(30), TROUPE_OK);
    /* Both streams hold their own values of one hosted node: automatic uploads of the host
     * array (which holds the last values set) would overwrite them. */
    troupe_config_set_auto_host_transfers(false);
}

TestSuite(merge, .init = s_setup);

#define OK(expr)                                                                                   \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        cr_assert_eq(s__, TROUPE_OK, "%s -> %s: %s", #expr, troupe_status_str(s__),              \
                     troupe_last_error());                                                         \
    } while (0)

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    OK(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0.0, &tn));
    return tn;
}

typedef struct env {
    troupe_backend_t *b;
    troupe_device_t *d;
    troupe_stream_t *s[2];
    troupe_context_t *ctx[2];
} env_t;

static void s_env(env_t *e, const char *driver)
{
    memset(e, 0, sizeof *e);
    OK(troupe_backend_open(driver, TROUPE_FOR_PARALLEL_COPYING, &e->b));
    OK(troupe_get_device(e->b, 0, &e->d));
    for (int i = 0; i < 2; i++) {
        OK(troupe_new_stream(e->d, &e->s[i]));
        OK(troupe_context_new(e->s[i], &e->ctx[i]));
    }
}

static void s_env_done(env_t *e)
{
    for (int i = 0; i < 2; i++) {
        troupe_context_release(&e->ctx[i]);
        troupe_stream_release(&e->s[i]);
    }
    troupe_backend_close(&e->b);
}

/* Uploads `values` of tn into stream i's context (init_from_host). */
static void s_put(env_t *e, int i, troupe_tnode_t *tn, const double *values)
{
    OK(troupe_tnode_set_values(tn, values, (size_t)troupe_tnode_num_elems(tn)));
    troupe_context_t *c = NULL;
    OK(troupe_init_from_host(e->ctx[i], tn, &c, NULL));
    troupe_context_release(&e->ctx[i]);
    e->ctx[i] = c;
}

/* Stream i's values of tn, through to_host and the event only. */
static void s_get(troupe_context_t *ctx, troupe_tnode_t *tn, float *out)
{
    troupe_event_t *ev = NULL;
    OK(troupe_to_host(ctx, tn, &ev));
    OK(troupe_event_sync(ev, 20000 * MS));
    troupe_event_release(&ev);
    void *host = NULL;
    OK(troupe_tnode_host_array(tn, &host));
    memcpy(out, host, tn->size_bytes);
}

/* lhs =+ rhs.merge over spec */
static troupe_code_t *s_consumer(troupe_backend_t *b, troupe_tnode_t *lhs, troupe_tnode_t *merged,
                                 const char *spec, const char *name)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    troupe_code_t *code = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, lhs, TROUPE_UNOP_IDENTITY,
                              troupe_asgn_merge(merged), spec, &t));
    troupe_asgn_comp_set_root(comp, t);
    OK(troupe_compile(b, comp, name, &code));
    troupe_asgn_comp_destroy(&comp);
    return code;
}

/* tn = tn + tn */
static troupe_code_t *s_doubler(troupe_backend_t *b, troupe_tnode_t *tn, const char *name)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    troupe_code_t *code = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_pointwise_binop(comp, tn, TROUPE_BINOP_ADD, troupe_asgn_node(tn),
                                   troupe_asgn_node(tn), &t));
    troupe_asgn_comp_set_root(comp, t);
    OK(troupe_compile(b, comp, name, &code));
    troupe_asgn_comp_destroy(&comp);
    return code;
}

Test(merge, copy_merges_1_2_and_3_4_into_4_6)
{
    FOR_EACH_DRIVER(drv)
    {
        env_t e;
        s_env(&e, *drv);
        troupe_tnode_t *a = s_node("a", 1, (int64_t[]){2});
        s_put(&e, 0, a, (double[]){1, 2});
        s_put(&e, 1, a, (double[]){3, 4});
        troupe_code_t *code = s_consumer(e.b, a, a, "i=>i", "merge_a");
        int64_t before = 0, after = 0;
        OK(troupe_get_used_memory(e.d, &before));
        troupe_context_t *tagged = NULL;
        OK(troupe_device_to_device(a, TROUPE_MERGE_COPY, e.ctx[0], e.ctx[1], NULL, &tagged, NULL));
        cr_assert_eq(troupe_context_merge_buffer_node(tagged), a);
        OK(troupe_get_used_memory(e.d, &after));
        cr_assert_eq(after, before + 8, "the merge buffer holds one copy of a");
        troupe_routine_t *r = NULL;
        OK(troupe_link(tagged, code, &r));
        troupe_event_t *ev = NULL;
        OK(troupe_routine_run(r, &ev));
        OK(troupe_event_sync(ev, 20000 * MS));
        troupe_event_release(&ev);
        float got[2];
        s_get(e.ctx[0], a, got);
        cr_assert(got[0] == 4 && got[1] == 6, "%s: got %g %g", *drv, got[0], got[1]);
        s_get(e.ctx[1], a, got);
        cr_assert(got[0] == 3 && got[1] == 4, "the source is unchanged");
        /* a second, smaller merge reuses the (grow-only) buffer */
        troupe_tnode_t *s = s_node("s", 1, (int64_t[]){1});
        s_put(&e, 0, s, (double[]){10});
        s_put(&e, 1, s, (double[]){5});
        troupe_context_t *tagged2 = NULL;
        OK(troupe_device_to_device(s, TROUPE_MERGE_COPY, e.ctx[0], e.ctx[1], NULL, &tagged2, NULL));
        OK(troupe_get_used_memory(e.d, &after));
        cr_assert_eq(after, before + 8 + 8, "grow-only merge buffer plus two 4-byte arrays");
        troupe_code_t *code_s = s_consumer(e.b, s, s, "i=>i", "merge_s");
        troupe_routine_t *rs = NULL;
        OK(troupe_link(tagged2, code_s, &rs));
        OK(troupe_routine_run(rs, NULL));
        float gs;
        s_get(e.ctx[0], s, &gs);
        cr_assert_eq(gs, 15.0f);
        /* the merge buffer now holds s: running the consumer of a fails before scheduling */
        cr_assert_eq(troupe_routine_run(r, NULL), TROUPE_FAILED_PRECONDITION);
        troupe_routine_release(&rs);
        troupe_code_release(&code_s);
        troupe_context_release(&tagged2);
        troupe_tnode_release(&s);
        troupe_routine_release(&r);
        troupe_context_release(&tagged);
        troupe_code_release(&code);
        troupe_tnode_release(&a);
        s_env_done(&e);
    }
}

Test(merge, streaming_merges_1_2_and_3_4_into_4_6)
{
    FOR_EACH_DRIVER(drv)
    {
        env_t e;
        s_env(&e, *drv);
        troupe_tnode_t *a = s_node("a", 1, (int64_t[]){2});
        s_put(&e, 0, a, (double[]){1, 2});
        s_put(&e, 1, a, (double[]){3, 4});
        troupe_code_t *code = s_consumer(e.b, a, a, "i=>i", "merge_a");
        troupe_routine_t *r = NULL;
        OK(troupe_link(e.ctx[0], code, &r));
        int64_t before = 0, after = 0;
        OK(troupe_get_used_memory(e.d, &before));
        troupe_event_t *ev = NULL;
        troupe_context_t *tagged = NULL;
        OK(troupe_device_to_device(a, TROUPE_MERGE_STREAMING, e.ctx[0], e.ctx[1], r, &tagged, &ev));
        cr_assert_eq(troupe_context_merge_buffer_node(tagged), a);
        OK(troupe_event_sync(ev, 20000 * MS));
        troupe_event_release(&ev);
        OK(troupe_get_used_memory(e.d, &after));
        cr_assert_eq(after, before, "streaming copies nothing");
        float got[2];
        s_get(e.ctx[0], a, got);
        cr_assert(got[0] == 4 && got[1] == 6, "%s: got %g %g", *drv, got[0], got[1]);
        /* argument checks */
        cr_assert_eq(troupe_device_to_device(a, TROUPE_MERGE_STREAMING, e.ctx[0], e.ctx[1], NULL,
                                             NULL, NULL),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(troupe_device_to_device(a, TROUPE_MERGE_STREAMING, e.ctx[1], e.ctx[0], r, NULL,
                                             NULL),
                     TROUPE_INVALID_ARGUMENT, "the consumer runs on another stream");
        troupe_context_release(&tagged);
        troupe_routine_release(&r);
        troupe_code_release(&code);
        troupe_tnode_release(&a);
        s_env_done(&e);
    }
}

Test(merge, consumer_of_the_wrong_merge_node_fails_at_link)
{
    FOR_EACH_DRIVER(drv)
    {
        env_t e;
        s_env(&e, *drv);
        troupe_tnode_t *a = s_node("a", 1, (int64_t[]){2});
        troupe_tnode_t *g = s_node("g", 1, (int64_t[]){2});
        s_put(&e, 0, a, (double[]){1, 2});
        s_put(&e, 0, g, (double[]){1, 2});
        s_put(&e, 1, a, (double[]){3, 4});
        s_put(&e, 1, g, (double[]){3, 4});
        troupe_code_t *code_a = s_consumer(e.b, a, a, "i=>i", "merge_a");
        troupe_context_t *tagged = NULL;
        OK(troupe_device_to_device(g, TROUPE_MERGE_COPY, e.ctx[0], e.ctx[1], NULL, &tagged, NULL));
        troupe_routine_t *r = NULL;
        cr_assert_eq(troupe_link(tagged, code_a, &r), TROUPE_FAILED_PRECONDITION);
        cr_assert_null(r);
        char na[64], ng[64];
        troupe_tnode_debug_name(a, na, sizeof na);
        troupe_tnode_debug_name(g, ng, sizeof ng);
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, "merge buffer") && strstr(msg, na) && strstr(msg, ng), "%s", msg);
        /* the right node links */
        troupe_code_t *code_g = s_consumer(e.b, g, g, "i=>i", "merge_g");
        OK(troupe_link(tagged, code_g, &r));
        troupe_routine_release(&r);
        /* STREAMING checks the consumer against the streamed node */
        OK(troupe_link(e.ctx[0], code_a, &r));
        cr_assert_eq(troupe_device_to_device(g, TROUPE_MERGE_STREAMING, e.ctx[0], e.ctx[1], r, NULL,
                                             NULL),
                     TROUPE_FAILED_PRECONDITION);
        cr_assert(strstr(troupe_last_error(), na) && strstr(troupe_last_error(), ng));
        troupe_routine_release(&r);
        troupe_code_release(&code_g);
        troupe_code_release(&code_a);
        troupe_context_release(&tagged);
        troupe_tnode_release(&a);
        troupe_tnode_release(&g);
        s_env_done(&e);
    }
}

#define S_I 4096
#define S_J 8192

/* The source g (S_J) lives on stream 1; stream 0's consumer sums all of g.merge into every cell
 * of out (S_I x 1): out[i][0] += g.merge[j] for every j — a long sequential reduction, slow on
 * purpose. Right after the merge is scheduled, a routine on stream 1 doubles g. The ledger must
 * make that write wait for the consumer (WAR on a merge-buffer reader), so every cell of out
 * sees the old sum. With `gated`, stream 0 is additionally held until after the overwrite was
 * scheduled, which makes a missing guard fail deterministically. */
static void s_overwrite_after_merge(const char *drv, troupe_merge_use_t use, bool gated)
{
    env_t e;
    s_env(&e, drv);
    troupe_tnode_t *g = s_node("g", 1, (int64_t[]){S_J});
    troupe_tnode_t *out = s_node("out", 2, (int64_t[]){S_I, 1});
    double *gv = troupe_malloc(S_J * sizeof *gv);
    double *zeros = troupe_calloc(S_I, sizeof *zeros);
    double sum = 0;
    for (int j = 0; j < S_J; j++) {
        gv[j] = j % 7;
        sum += gv[j];
    }
    s_put(&e, 0, g, gv);
    s_put(&e, 1, g, gv);
    s_put(&e, 0, out, zeros);
    troupe_code_t *consumer = s_consumer(e.b, out, g, "j=>i[0]", "sum_into_out");
    troupe_code_t *doubler = s_doubler(e.b, g, "double_g");
    troupe_routine_t *rc = NULL, *rd = NULL;
    OK(troupe_link(e.ctx[1], doubler, &rd));
    troupe_event_t *gate = NULL, *ev = NULL, *ed = NULL;
    OK(troupe_event_new("gate", &gate));
    if (gated)
        OK(troupe_will_wait_for(e.ctx[0], gate));
    else
        troupe_event_complete(gate, TROUPE_OK, NULL);
    if (use == TROUPE_MERGE_STREAMING) {
        OK(troupe_link(e.ctx[0], consumer, &rc));
        OK(troupe_device_to_device(g, use, e.ctx[0], e.ctx[1], rc, NULL, &ev));
    } else {
        troupe_context_t *tagged = NULL;
        OK(troupe_device_to_device(g, use, e.ctx[0], e.ctx[1], NULL, &tagged, NULL));
        OK(troupe_link(tagged, consumer, &rc));
        troupe_context_release(&tagged);
        OK(troupe_routine_run(rc, &ev));
    }
    OK(troupe_routine_run(rd, &ed)); /* overwrites the source right away */
    if (gated)
        troupe_event_complete(gate, TROUPE_OK, NULL);
    OK(troupe_event_sync(ev, 20000 * MS));
    OK(troupe_event_sync(ed, 20000 * MS));
    float *got = troupe_malloc(S_I * sizeof *got);
    s_get(troupe_routine_context(rc), out, got);
    for (int i = 0; i < S_I; i++)
        cr_assert_eq(got[i], (float)sum, "%s %s%s: out[%d] = %g, want the old sum %g", drv,
                     use == TROUPE_MERGE_COPY ? "COPY" : "STREAMING", gated ? " gated" : "", i,
                     (double)got[i], sum);
    float *gnow = troupe_malloc(S_J * sizeof *gnow);
    s_get(troupe_routine_context(rd), g, gnow);
    for (int j = 0; j < S_J; j++)
        cr_assert_eq(gnow[j], (float)(2 * gv[j]));
    troupe_free(gnow);
    troupe_free(got);
    troupe_free(gv);
    troupe_free(zeros);
    troupe_event_release(&gate);
    troupe_event_release(&ev);
    troupe_event_release(&ed);
    troupe_routine_release(&rc);
    troupe_routine_release(&rd);
    troupe_code_release(&consumer);
    troupe_code_release(&doubler);
    troupe_tnode_release(&g);
    troupe_tnode_release(&out);
    s_env_done(&e);
}

Test(merge, streamed_source_overwritten_right_after_waits_for_the_slow_consumer)
{
    FOR_EACH_DRIVER(drv)
    {
        s_overwrite_after_merge(*drv, TROUPE_MERGE_STREAMING, false);
        s_overwrite_after_merge(*drv, TROUPE_MERGE_STREAMING, true);
    }
}

Test(merge, copied_source_overwritten_right_after_waits_for_the_copy)
{
    FOR_EACH_DRIVER(drv)
    {
        s_overwrite_after_merge(*drv, TROUPE_MERGE_COPY, false);
        s_overwrite_after_merge(*drv, TROUPE_MERGE_COPY, true);
    }
}
