/* troupe — the segmented gradient routine of the data-parallel driver (parallel/dp.h, Overlap;
 * parallel/dp_split.c): the splitter on the small comp of tests/dp_test_model.h (a linear
 * regression whose weight gradient is last written by item 10 of 12 and whose bias gradient by
 * item 11), the comps it rebuilds per segment, the crossing node it materializes, a comp
 * nested as Seq(forward, backprop) opened and cut inside, the comps it refuses to split and
 * why, the auto policy's rule, troupe_dp_new / troupe_dp_step with overlap on against off on
 * one process, flat and nested (the split changes no bit), and a segment that fails mid-step. */
#include "actors/troupe.h"
#include "base/config.h"
#include "ir/memory_mode.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"
#include "runtime_test_util.h"

#define DPT_CHECK(expr) OK(expr)
#include "dp_test_model.h"

#include <criterion/criterion.h>
#include <float.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp-split", 60);
}

TestSuite(dp_split, .init = s_setup);

#define NB 4
#define BS 4
#define DIN 3
#define DOUT 2
#define NP (DIN * DOUT + DOUT)

static void s_model(dpt_lr_t *m)
{
    double xv[NB * BS * DIN], yv[NB * BS * DOUT], wv[DIN * DOUT], bv[DOUT];
    for (int i = 0; i < NB * BS * DIN; i++)
        xv[i] = 0.01 * (double)((i * 37) % 101) - 0.5;
    for (int i = 0; i < NB * BS * DOUT; i++)
        yv[i] = 0.02 * (double)((i * 53) % 89) - 0.8;
    for (int i = 0; i < DIN * DOUT; i++)
        wv[i] = 0.1 * (double)(i + 1) * (i % 2 ? -1.0 : 1.0);
    bv[0] = 0.05;
    bv[1] = -0.05;
    dpt_lr_new(m, NB, BS, DIN, DOUT, xv, yv, wv, bv);
}

static const char *s_label(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_label_string(tn, buf, cap);
    return buf;
}

Test(dp_split, a_segment_ends_where_a_bucket_of_gradients_is_last_used)
{
    dpt_lr_t m;
    s_model(&m);
    troupe__dp_split_t sp;
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    cr_assert_eq(sp.nitems, 12);
    cr_assert_eq(sp.nseg, 2, "%zu segments (%s)", sp.nseg, sp.why);
    cr_assert_eq(sp.seg_end[0], 11); /* items 0..10: up to W_grad's write */
    cr_assert_eq(sp.seg_end[1], 12); /* item 11: b_grad's */
    cr_assert_eq(sp.seg_of_grad[0], 0);
    cr_assert_eq(sp.seg_of_grad[1], 1);
    cr_assert_str_empty(sp.why);
    /* gpred is written in segment 0 and read by b_grad's item: the one crossing node */
    char l[64];
    cr_assert_eq(sp.ncrossing, 1);
    cr_assert_str_eq(s_label(sp.crossing[0], l, sizeof l), "gpred");
    OK(troupe__dp_split_materialize(&sp));
    troupe_memory_mode_t mm;
    int32_t prov = 0;
    cr_assert(troupe_tnode_get_memory_mode(sp.crossing[0], &mm, &prov));
    cr_assert_eq(mm.kind, TROUPE_MM_MATERIALIZED, "gpred's mode is %d", (int)mm.kind);
    troupe__dp_split_free(&sp);
    dpt_lr_destroy(&m);
}

/* DDP's buckets: the one place to cut (after W_grad's last write: 6 floats, 24 bytes) is taken
 * only once the first bucket holds its cap; under it the comp keeps one segment and says why. */
Test(dp_split, a_bucket_closes_only_once_its_gradients_hold_the_cap)
{
    dpt_lr_t m;
    s_model(&m);
    troupe__dp_split_t sp;
    OK(troupe__dp_split_plan_buckets(m.comp, m.grads, 2, 24, 1 << 20, &sp));
    cr_assert_eq(sp.nseg, 2, "%zu segments (%s)", sp.nseg, sp.why);
    cr_assert_eq(sp.seg_end[0], 11);
    troupe__dp_split_free(&sp);
    OK(troupe__dp_split_plan_buckets(m.comp, m.grads, 2, 25, 1 << 20, &sp));
    cr_assert_eq(sp.nseg, 1);
    cr_assert_eq(sp.ncrossing, 0);
    cr_assert(strstr(sp.why, "hold 24 bytes, under the first bucket's 25") != NULL, "why: %s",
              sp.why);
    troupe__dp_split_free(&sp);
    dpt_lr_destroy(&m);
}

Test(dp_split, each_segment_is_a_comp_with_the_static_index_and_its_embedded_nodes)
{
    dpt_lr_t m;
    s_model(&m);
    troupe__dp_split_t sp;
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    cr_assert_eq(sp.nseg, 2);
    troupe_asgn_comp_t *c0 = NULL, *c1 = NULL;
    OK(troupe__dp_split_comp(m.comp, &sp, 0, &c0));
    OK(troupe__dp_split_comp(m.comp, &sp, 1, &c1));
    cr_assert_eq(c0->root->kind, TROUPE_ASGN_SEQ);
    cr_assert_eq(c0->root->u.seq.count, 11);
    for (size_t j = 0; j < 11; j++) /* the same trees, rebuilt */
        cr_assert(troupe_asgn_equal(c0->root->u.seq.items[j], m.comp->root->u.seq.items[j]),
                  "item %zu differs", j);
    cr_assert(troupe_asgn_equal(c1->root, m.comp->root->u.seq.items[11]));
    for (int k = 0; k < 2; k++) {
        troupe_asgn_comp_t *c = k ? c1 : c0;
        cr_assert_eq(c->nsyms, 1);
        cr_assert_eq(troupe_asgn_comp_find_static_symbol(c, "batch"), 0);
        cr_assert_eq(c->syms[0].range, NB);
    }
    /* the two constants the comp fetches itself stay embedded where they are used */
    cr_assert_eq(c0->nembedded, 2);
    cr_assert_eq(c1->nembedded, 0);
    troupe_asgn_comp_destroy(&c0);
    troupe_asgn_comp_destroy(&c1);
    troupe__dp_split_free(&sp);
    dpt_lr_destroy(&m);
}

/* A comp built as Seq(forward, backprop) with each half under a block comment (as a user's
 * model built in two halves would be): every gradient is last used by the last top-level item,
 * so the splitter opens it and cuts inside; the segments hold the same assignments as the flat
 * comp's, and training on them gives the flat comp's bits. */
Test(dp_split, a_nested_backward_pass_is_opened_and_cut_inside)
{
    dpt_lr_t m;
    s_model(&m);
    troupe_asgn_t *flat = m.comp->root, *fwd = NULL, *bwd = NULL, *fb = NULL, *bb = NULL,
                  *root = NULL;
    cr_assert_eq(flat->u.seq.count, 12);
    OK(troupe_asgn_seq(m.comp, 6, flat->u.seq.items, &fwd));
    OK(troupe_asgn_seq(m.comp, 6, flat->u.seq.items + 6, &bwd));
    OK(troupe_asgn_block_comment(m.comp, "forward", fwd, &fb));
    OK(troupe_asgn_block_comment(m.comp, "backprop", bwd, &bb));
    OK(troupe_asgn_seq2(m.comp, fb, bb, &root));
    troupe_asgn_comp_set_root(m.comp, root);
    troupe__dp_split_t sp;
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    /* items: the forward block, then the backward pass's 6 assignments */
    cr_assert_eq(sp.nitems, 7);
    cr_assert_eq(sp.nseg, 2, "%zu segments (%s)", sp.nseg, sp.why);
    cr_assert_eq(sp.seg_end[0], 6); /* up to W_grad's write, flat item 10 */
    cr_assert_eq(sp.seg_end[1], 7);
    cr_assert_eq(sp.ncrossing, 1);
    troupe_asgn_comp_t *c0 = NULL, *c1 = NULL;
    OK(troupe__dp_split_comp(m.comp, &sp, 0, &c0));
    OK(troupe__dp_split_comp(m.comp, &sp, 1, &c1));
    cr_assert(troupe_asgn_equal(c0->root->u.seq.items[0], fb));
    for (size_t j = 1; j < 6; j++)
        cr_assert(troupe_asgn_equal(c0->root->u.seq.items[j], flat->u.seq.items[5 + j]),
                  "item %zu differs", j);
    cr_assert(troupe_asgn_equal(c1->root, flat->u.seq.items[11]));
    troupe_asgn_comp_destroy(&c0);
    troupe_asgn_comp_destroy(&c1);
    troupe__dp_split_free(&sp);
    dpt_lr_destroy(&m);
}

Test(dp_split, comps_that_cannot_be_split_keep_one_segment_and_say_why)
{
    dpt_lr_t m;
    s_model(&m);
    troupe__dp_split_t sp;
    /* one top-level item that is no sequence: the bias gradient's item alone */
    troupe_asgn_t *inner = NULL, *outer = NULL;
    troupe_asgn_t *seq = m.comp->root;
    troupe_asgn_comp_set_root(m.comp, seq->u.seq.items[11]);
    OK(troupe__dp_split_plan(m.comp, &m.gb, 1, &sp));
    cr_assert_eq(sp.nseg, 1);
    cr_assert_not_null(strstr(sp.why, "one top-level item"), "%s", sp.why);
    troupe__dp_split_free(&sp);
    /* the whole sequence under two block comments is opened */
    OK(troupe_asgn_block_comment(m.comp, "all", seq, &inner));
    OK(troupe_asgn_block_comment(m.comp, "wrapped", inner, &outer));
    troupe_asgn_comp_set_root(m.comp, outer);
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    cr_assert_eq(sp.nseg, 2, "%s", sp.why);
    troupe__dp_split_free(&sp);
    /* a root block comment around the sequence is opened */
    troupe_asgn_comp_set_root(m.comp, inner);
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    cr_assert_eq(sp.nseg, 2, "%s", sp.why);
    troupe__dp_split_free(&sp);
    /* only the bias gradient: it is last used by the last item */
    troupe_asgn_comp_set_root(m.comp, seq);
    OK(troupe__dp_split_plan(m.comp, &m.gb, 1, &sp));
    cr_assert_eq(sp.nseg, 1);
    cr_assert_not_null(strstr(sp.why, "last top-level item"), "%s", sp.why);
    troupe__dp_split_free(&sp);
    /* the crossing node already inlined (Virtual): it cannot live between two routines */
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    troupe_tnode_t *gpred = sp.crossing[0];
    troupe__dp_split_free(&sp);
    troupe_memory_mode_t v = {TROUPE_MM_VIRTUAL, TROUPE_MEMTYPE_UNSET_HOSTED, TROUPE_SHARING_UNSET};
    OK(troupe_tnode_update_memory_mode(gpred, v, 1));
    OK(troupe__dp_split_plan(m.comp, m.grads, 2, &sp));
    cr_assert_eq(sp.nseg, 1);
    cr_assert_not_null(strstr(sp.why, "gpred"), "%s", sp.why);
    cr_assert_not_null(strstr(sp.why, "Virtual"), "%s", sp.why);
    troupe__dp_split_free(&sp);
    dpt_lr_destroy(&m);
}

Test(dp_split, auto_overlaps_where_the_engine_has_a_core_or_the_compute_a_device)
{
    char why[256];
    /* on and off decide alone */
    cr_assert(troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_ON, 1, false, 1, 1, 1, why, sizeof why));
    cr_assert_not(
        troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_OFF, 8, true, 64, 1, 1, why, sizeof why));
    /* auto: one rank has nothing to overlap */
    cr_assert_not(
        troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_AUTO, 1, true, 64, 1, 1, why, sizeof why));
    cr_assert_not_null(strstr(why, "one rank"), "%s", why);
    /* this machine: 2 cores, 2 ranks of 1 stream: no core for the engines */
    cr_assert_not(
        troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_AUTO, 2, false, 2, 2, 1, why, sizeof why));
    cr_assert_not_null(strstr(why, "no core left"), "%s", why);
    /* 4 cores: one each for 2 streams and 2 engines */
    cr_assert(
        troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_AUTO, 2, false, 4, 2, 1, why, sizeof why));
    cr_assert_not(
        troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_AUTO, 2, false, 5, 2, 2, why, sizeof why));
    /* a device computes: the host is free */
    cr_assert(troupe__dp_choose_overlap(TROUPE_DP_OVERLAP_AUTO, 2, true, 2, 2, 1, why, sizeof why));
    cr_assert_not_null(strstr(why, "device"), "%s", why);
}

Test(dp_split, the_optimizer_step_fuses_into_one_in_place_allreduce_of_single_gradients)
{
    /* config on, ranks, exchange, segments, a late parameter, all single -> fused, and the
     * reason's words */
    static const struct {
        bool on;
        int ranks;
        troupe__dp_exchange_t exchange;
        size_t nseg;
        bool late, single, want;
        const char *why;
    } cases[] = {
        {true, 2, TROUPE__DP_EXCHANGE_INPLACE, 1, false, true, true, "in place, one allreduce"},
        {false, 2, TROUPE__DP_EXCHANGE_INPLACE, 1, false, true, false,
         "TROUPE_DP_FUSED_UPDATE=off"},
        {true, 1, TROUPE__DP_EXCHANGE_NONE, 1, false, true, false, "one rank"},
        {true, 2, TROUPE__DP_EXCHANGE_STAGED, 1, false, true, false, "not in place"},
        {true, 2, TROUPE__DP_EXCHANGE_INPLACE, 3, false, true, true, "one allreduce per overlap"},
        {true, 2, TROUPE__DP_EXCHANGE_INPLACE, 3, true, true, false, "reads a parameter"},
        {true, 2, TROUPE__DP_EXCHANGE_INPLACE, 1, false, false, false, "not single"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char why[128];
        bool got =
            troupe__dp_choose_fused(cases[k].on, cases[k].ranks, cases[k].exchange, cases[k].nseg,
                                    cases[k].late, cases[k].single, why, sizeof why);
        cr_assert_eq(got, cases[k].want, "case %zu: %s", k, why);
        cr_assert_not_null(strstr(why, cases[k].why), "case %zu: %s", k, why);
    }
}

Test(dp_split, the_fused_update_flushes_subnormals_as_the_routines_do)
{
    /* SGD with momentum 0.5, lr 0: m := 0.5 m + g / N on a subnormal m and a zero gradient */
    troupe__dp_apply_arg_t a;
    memset(&a, 0, sizeof a);
    a.kind = TROUPE_OPT_SGD;
    a.nstate = 1;
    a.h[TROUPE__DP_H_INV_N] = 1.0f;
    a.h[TROUPE__DP_H_SGD_MOMENTUM] = 0.5f;
    a.h[TROUPE__DP_H_SGD_LR] = 0.0f;
    const float tiny = 4 * FLT_TRUE_MIN, g[1] = {0.0f};
    float p[1] = {1.0f}, m[1] = {tiny};
    float *side[2] = {p, m};
    bool was = troupe_config_flush_denormals();
    troupe_config_set_flush_denormals(false); /* TROUPE_DENORMALS=keep: gradual underflow */
    troupe__dp_apply(&a, 1, g, side);
    cr_assert(m[0] == 2 * FLT_TRUE_MIN, "keep: m = %g", (double)m[0]);
    troupe_config_set_flush_denormals(true); /* the default: flushed, as every routine runs */
    m[0] = tiny;
    troupe__dp_apply(&a, 1, g, side);
    cr_assert(m[0] == 0.0f, "flush: m = %g", (double)m[0]);
    cr_assert(p[0] == 1.0f);
    troupe_config_set_flush_denormals(was);
}

/* Trains K steps of `kind` with overlap `mode` on `backend` with 2 streams; the parameters
 * into out, the segments dp used into *nseg. */
static void s_train(const char *backend, troupe_dp_overlap_t mode, bool nested,
                    troupe_optimizer_kind_t kind, float *out, size_t *nseg)
{
    dpt_lr_t m;
    s_model(&m);
    if (nested) { /* Seq(forward, backprop), each under a block comment */
        troupe_asgn_t *flat = m.comp->root, *f = NULL, *b = NULL, *fb = NULL, *bb = NULL,
                      *root = NULL;
        OK(troupe_asgn_seq(m.comp, 6, flat->u.seq.items, &f));
        OK(troupe_asgn_seq(m.comp, 6, flat->u.seq.items + 6, &b));
        OK(troupe_asgn_block_comment(m.comp, "forward", f, &fb));
        OK(troupe_asgn_block_comment(m.comp, "backprop", b, &bb));
        OK(troupe_asgn_seq2(m.comp, fb, bb, &root));
        troupe_asgn_comp_set_root(m.comp, root);
    }
    troupe_dp_config_t cfg = {.backend = backend,
                              .streams = 2,
                              .optimizer = dpt_opt(kind),
                              .overlap = mode,
                              .bucket_bytes = 1}; /* a segment per gradient's last use */
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.model, &dp));
    *nseg = dp->nseg;
    cr_assert_eq(dp->overlap, dp->nseg > 1);
    for (int s = 0; s < 6; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_params_to_host(dp));
    dpt_lr_params(&m, out);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

Test(dp_split, overlap_on_trains_bit_for_bit_like_off_flat_and_nested)
{
    troupe_optimizer_kind_t kinds[2] = {TROUPE_OPT_SGD, TROUPE_OPT_ADAMW};
    const char *backends[2] = {"sync", "cpu"};
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < 2; q++) {
            float off[NP], on[NP], one[NP];
            size_t n_off = 0, n_on = 0, n_one = 0;
            s_train(backends[b], TROUPE_DP_OVERLAP_OFF, false, kinds[q], off, &n_off);
            s_train(backends[b], TROUPE_DP_OVERLAP_ON, false, kinds[q], on, &n_on);
            s_train(backends[b], TROUPE_DP_OVERLAP_ON, true, kinds[q], one, &n_one);
            cr_assert_eq(n_off, 1);
            cr_assert_eq(n_on, 2);
            cr_assert_eq(n_one, 2, "the nested comp is opened and cut");
            for (int e = 0; e < NP; e++) {
                cr_assert(memcmp(&on[e], &off[e], sizeof(float)) == 0,
                          "%s %s: parameter %d: %.9g with overlap, %.9g without", backends[b],
                          troupe_optimizer_name(kinds[q]), e, (double)on[e], (double)off[e]);
                cr_assert(memcmp(&one[e], &off[e], sizeof(float)) == 0,
                          "%s %s: parameter %d: %.9g nested, %.9g", backends[b],
                          troupe_optimizer_name(kinds[q]), e, (double)one[e], (double)off[e]);
            }
        }
}

/* A segment that fails mid-step (TROUPE_FAULT kernel:routine=dp_grad_s1:nth=3: the second
 * segment's third run, one of step 2's two, after that step's segment 0 ran on both replicas):
 * the step fails (at once on sync, at the next sync on cpu) with DEVICE_ERROR naming the
 * segment's routine and the fault; later steps, the loss and a checkpoint are refused with the
 * step's message instead of computing on a half-done step; teardown returns. */
Test(dp_split, a_segment_that_fails_mid_step_fails_dp_with_its_name)
{
    const char *backends[2] = {"sync", "cpu"};
    for (int b = 0; b < 2; b++) {
        OK(troupe_config_set_fault("kernel:routine=dp_grad_s1:nth=3"));
        dpt_lr_t m;
        s_model(&m);
        troupe_dp_config_t cfg = {.backend = backends[b],
                                  .streams = 2,
                                  .optimizer = dpt_opt(TROUPE_OPT_SGD),
                                  .overlap = TROUPE_DP_OVERLAP_ON,
                                  .bucket_bytes = 1};
        troupe_dp_t *dp = NULL;
        OK(troupe_dp_new(&cfg, &m.model, &dp));
        cr_assert_eq(dp->nseg, 2);
        OK(troupe_dp_step(dp)); /* dp_grad_s1 runs 1, 2 */
        OK(troupe_dp_sync(dp));
        troupe_status_t st = troupe_dp_step(dp); /* run 3 fails */
        if (st == TROUPE_OK)
            st = troupe_dp_sync(dp);
        cr_assert_eq(st, TROUPE_DEVICE_ERROR, "%s: %s: %s", backends[b], troupe_status_str(st),
                     troupe_last_error());
        cr_assert_not_null(strstr(troupe_last_error(), "routine dp_grad_s1: run 3 failed by "
                                                       "TROUPE_FAULT"),
                           "%s: %s", backends[b], troupe_last_error());
        cr_assert_neq(troupe_dp_step(dp), TROUPE_OK, "%s: a step after the failure", backends[b]);
        double loss = 0;
        cr_assert_neq(troupe_dp_last_loss(dp, &loss), TROUPE_OK, "%s: the loss", backends[b]);
        cr_assert_not_null(strstr(troupe_last_error(), "dp_grad_s1"), "%s: %s", backends[b],
                           troupe_last_error());
        cr_assert_neq(troupe_dp_save(dp, TROUPE_TEST_BUILD_DIR "/dp-split-failed.ck"), TROUPE_OK,
                      "%s: a checkpoint of a failed run", backends[b]);
        troupe_dp_destroy(&dp);
        dpt_lr_destroy(&m);
        OK(troupe_config_set_fault(NULL));
    }
}
