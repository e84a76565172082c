/* troupe — merge buffers and device_to_device (docs/architecture.md §5): COPY and STREAMING merges, the
 * link-time merge-buffer check, and the WAR guard that keeps a streamed source from being
 * overwritten while its consumer still reads it. Runs on "sync", "cpu", and "cuda" when a device
 * is present. */
#include "actors/troupe.h"

#include "base/alloc.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-runtime", 30);
    /* Both streams hold their own values of one hosted node: automatic uploads of the host
     * array (which holds the last values set) would overwrite them. */
    troupe_config_set_auto_host_transfers(false);
}

TestSuite(merge, .init = s_setup);

/* Two streams of `driver` holding a = [1 2] (stream 0) and [3 4] (stream 1); *code is
 * a =+ a.merge. */
static troupe_tnode_t *s_a_on_two_streams(rtu_env_t *e, const char *driver, troupe_code_t **code)
{
    rtu_env_open(e, driver, 2);
    troupe_tnode_t *a = rtu_vec("a", 2);
    rtu_put(&e->ctx[0], a, (double[]){1, 2});
    rtu_put(&e->ctx[1], a, (double[]){3, 4});
    *code = rtu_merge_code(e->b, a, a, "i=>i", "merge_a");
    return a;
}

Test(merge, copy_merges_1_2_and_3_4_into_4_6)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        troupe_code_t *code = NULL;
        troupe_tnode_t *a = s_a_on_two_streams(&e, *drv, &code);
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
        rtu_get(e.ctx[0], a, got);
        cr_assert(got[0] == 4 && got[1] == 6, "%s: got %g %g", *drv, got[0], got[1]);
        rtu_get(e.ctx[1], a, got);
        cr_assert(got[0] == 3 && got[1] == 4, "the source is unchanged");
        /* a second, smaller merge reuses the (grow-only) buffer */
        troupe_tnode_t *s = rtu_vec("s", 1);
        rtu_put(&e.ctx[0], s, (double[]){10});
        rtu_put(&e.ctx[1], s, (double[]){5});
        troupe_context_t *tagged2 = NULL;
        OK(troupe_device_to_device(s, TROUPE_MERGE_COPY, e.ctx[0], e.ctx[1], NULL, &tagged2, NULL));
        OK(troupe_get_used_memory(e.d, &after));
        cr_assert_eq(after, before + 8 + 8, "grow-only merge buffer plus two 4-byte arrays");
        troupe_code_t *code_s = rtu_merge_code(e.b, s, s, "i=>i", "merge_s");
        troupe_routine_t *rs = NULL;
        OK(troupe_link(tagged2, code_s, &rs));
        OK(troupe_routine_run(rs, NULL));
        float gs;
        rtu_get(e.ctx[0], s, &gs);
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
        rtu_env_close(&e);
    }
}

Test(merge, streaming_merges_1_2_and_3_4_into_4_6)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        troupe_code_t *code = NULL;
        troupe_tnode_t *a = s_a_on_two_streams(&e, *drv, &code);
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
        rtu_get(e.ctx[0], a, got);
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
        rtu_env_close(&e);
    }
}

Test(merge, consumer_of_the_wrong_merge_node_fails_at_link)
{
    FOR_EACH_DRIVER(drv)
    {
        rtu_env_t e;
        rtu_env_open(&e, *drv, 2);
        troupe_tnode_t *a = rtu_vec("a", 2);
        troupe_tnode_t *g = rtu_vec("g", 2);
        rtu_put(&e.ctx[0], a, (double[]){1, 2});
        rtu_put(&e.ctx[0], g, (double[]){1, 2});
        rtu_put(&e.ctx[1], a, (double[]){3, 4});
        rtu_put(&e.ctx[1], g, (double[]){3, 4});
        troupe_code_t *code_a = rtu_merge_code(e.b, a, a, "i=>i", "merge_a");
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
        troupe_code_t *code_g = rtu_merge_code(e.b, g, g, "i=>i", "merge_g");
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
        rtu_env_close(&e);
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
    rtu_env_t e;
    rtu_env_open(&e, drv, 2);
    troupe_tnode_t *g = rtu_vec("g", S_J);
    troupe_tnode_t *out = rtu_node("out", TROUPE_PREC_SINGLE, 2, (int64_t[]){S_I, 1});
    double *gv = troupe_malloc(S_J * sizeof *gv);
    double *zeros = troupe_calloc(S_I, sizeof *zeros);
    double sum = 0;
    for (int j = 0; j < S_J; j++) {
        gv[j] = j % 7;
        sum += gv[j];
    }
    rtu_put(&e.ctx[0], g, gv);
    rtu_put(&e.ctx[1], g, gv);
    rtu_put(&e.ctx[0], out, zeros);
    troupe_code_t *consumer = rtu_merge_code(e.b, out, g, "j=>^i[0]", "sum_into_out");
    troupe_code_t *doubler = rtu_add_code(e.b, g, NULL, "double_g");
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
    rtu_get(troupe_routine_context(rc), out, got);
    for (int i = 0; i < S_I; i++)
        cr_assert_eq(got[i], (float)sum, "%s %s%s: out[%d] = %g, want the old sum %g", drv,
                     use == TROUPE_MERGE_COPY ? "COPY" : "STREAMING", gated ? " gated" : "", i,
                     (double)got[i], sum);
    float *gnow = troupe_malloc(S_J * sizeof *gnow);
    rtu_get(troupe_routine_context(rd), g, gnow);
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
    rtu_env_close(&e);
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
