/* Tests of examples/gpt's model against PyTorch, as llm.c's test_gpt2.c checks its C code:
 * bench/peers/torch_gpt_reference.py wrote a small random-init model (L=2 NH=2 C=32 maxT=16
 * V=60 Vp=64), the debug state of one batch (B=2 T=16: x, y, logits, loss, every gradient) and
 * the losses of 10 AdamW steps on it (lr 1e-4, wd 0.01) into tests/data/. llm.c's tolerances:
 * logits 1e-2, loss 1e-2, gradients 2e-2, each step's loss 1e-2. The largest errors are
 * printed (GPT_NUMERICS_PRINT=1). */
#include "llmc.h"
#include "model.h"

#include "parallel/dp.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-gpt", 600);
}

TestSuite(gpt_numerics, .init = s_setup, .timeout = 900);

static void s_report(const char *what, double err, double tol)
{
    if (getenv("GPT_NUMERICS_PRINT"))
        fprintf(stderr, "gpt numerics: %-10s max |troupe - torch| %.3g (tolerance %g)\n", what,
                err, tol);
}

Test(gpt_numerics, step0_logits_loss_and_gradients_match_pytorch)
{
    gpt_llmc_config_t cfg;
    float *flat = NULL;
    gpt_llmc_state_t s;
    OK(gpt_llmc_model_read(TROUPE_TEST_DATA_DIR "/gpt_ref_model.bin", &cfg, &flat));
    OK(gpt_llmc_state_read(TROUPE_TEST_DATA_DIR "/gpt_ref_state.bin", &cfg, &s));
    cr_assert(cfg.padded_vocab > cfg.vocab, "the reference exercises the padded vocabulary");
    gpt_params_t *p = NULL;
    gpt_model_t *m = NULL;
    gpt_runner_t *r = NULL;
    gpt_model_config_t mc = {.batch = s.batch, .seq = s.seq, .train = true, .targets = true};
    OK(gpt_params_new(&cfg, &p));
    OK(gpt_params_set(p, flat));
    OK(gpt_model_new(p, &mc, &m));
    /* the logits and gradients are read back */
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    OK(troupe_tnode_update_memory_mode(m->logits, hosted, 990));
    for (size_t k = 0; k < p->n; k++)
        OK(troupe_tnode_update_memory_mode(p->grads[k], hosted, 990));
    OK(gpt_model_set_batch(m, s.x, s.y));
    OK(gpt_runner_new("cpu", NULL, NULL, p, m, "gpt_numerics", &r));
    OK(gpt_runner_run(r));

    size_t bt = (size_t)(s.batch * s.seq), V = (size_t)cfg.vocab, Vp = (size_t)cfg.padded_vocab;
    double *lg = malloc(bt * Vp * sizeof *lg);
    OK(troupe_tnode_get_values(m->logits, lg, bt * Vp));
    double lerr = 0;
    for (size_t i = 0; i < bt; i++)
        for (size_t v = 0; v < V; v++)
            lerr = fmax(lerr, fabs(lg[i * Vp + v] - s.logits[i * V + v]));
    double loss = 0;
    OK(troupe_tnode_get_values(m->loss, &loss, 1));
    s_report("logits", lerr, 1e-2);
    s_report("loss", fabs(loss - s.loss), 1e-2);
    cr_expect_leq(lerr, 1e-2, "logits differ by %g", lerr);
    cr_expect_leq(fabs(loss - s.loss), 1e-2, "loss %.9g, PyTorch %.9g", loss, (double)s.loss);

    size_t np = gpt_llmc_num_params(&cfg), counts[GPT_LLMC_NTENSORS], at = 0;
    float *g = malloc(np * sizeof *g);
    OK(gpt_params_get_grads(p, g));
    gpt_llmc_tensor_counts(&cfg, counts);
    for (int t = 0; t < GPT_LLMC_NTENSORS; t++) {
        double err = 0, gmax = 0;
        for (size_t i = at; i < at + counts[t]; i++) {
            err = fmax(err, fabs((double)g[i] - s.grads[i]));
            gmax = fmax(gmax, fabs((double)s.grads[i]));
        }
        cr_assert_gt(gmax, 0.0, "PyTorch's %s gradient is not all zero", gpt_llmc_tensor_name(t));
        s_report(gpt_llmc_tensor_name(t), err, 2e-2);
        cr_expect_leq(err, 2e-2, "%s's gradient differs by %g (max |g| %g)",
                      gpt_llmc_tensor_name(t), err, gmax);
        at += counts[t];
    }
    /* wte's padded rows are neither looked up nor counted in the loss */
    for (size_t i = V * (size_t)cfg.channels; i < Vp * (size_t)cfg.channels; i++)
        cr_expect_eq(g[i], 0.0f, "wte's padded row %zu gets gradient %g", i / cfg.channels, g[i]);
    free(g);
    free(lg);
    gpt_runner_destroy(&r);
    gpt_model_destroy(&m);
    gpt_params_destroy(&p);
    gpt_llmc_state_free(&s);
    free(flat);
}

Test(gpt_numerics, ten_adamw_steps_match_pytorch)
{
    gpt_llmc_config_t cfg;
    float *flat = NULL;
    gpt_llmc_state_t s;
    OK(gpt_llmc_model_read(TROUPE_TEST_DATA_DIR "/gpt_ref_model.bin", &cfg, &flat));
    OK(gpt_llmc_state_read(TROUPE_TEST_DATA_DIR "/gpt_ref_state.bin", &cfg, &s));
    double want[10];
    FILE *f = fopen(TROUPE_TEST_DATA_DIR "/gpt_ref_losses.txt", "r");
    cr_assert_not_null(f, "tests/data/gpt_ref_losses.txt (bench/peers/torch_gpt_reference.py)");
    for (int i = 0; i < 10; i++)
        cr_assert_eq(fscanf(f, "%lf", &want[i]), 1);
    fclose(f);
    /* the batch as a token stream: x is tokens 0..BT-1, y tokens 1..BT (one contiguous run) */
    size_t bt = (size_t)(s.batch * s.seq);
    uint16_t *tokens = malloc((bt + 1) * sizeof *tokens);
    for (size_t i = 0; i < bt; i++)
        tokens[i] = (uint16_t)s.x[i];
    tokens[bt] = (uint16_t)s.y[bt - 1];
    for (size_t i = 0; i + 1 < bt; i++)
        cr_assert_eq(s.y[i], s.x[i + 1], "the reference batch is one run of tokens");

    gpt_params_t *p = NULL;
    gpt_model_t *m = NULL;
    gpt_model_config_t mc = {
        .batch = s.batch, .seq = s.seq, .num_batches = 1, .train = true, .targets = true};
    OK(gpt_params_new(&cfg, &p));
    OK(gpt_params_set(p, flat));
    OK(gpt_model_new(p, &mc, &m));
    OK(gpt_model_set_data(m, tokens, bt + 1));
    troupe_tnode_t *inputs[3] = {m->x_all, m->y_all, m->pos};
    troupe_dp_model_t model = {.grad_comp = m->comp, .batch_index = GPT_BATCH_SYMBOL,
                               .num_batches = 1, .params = p->params, .grads = p->grads,
                               .n_params = p->n, .loss = m->loss, .inputs = inputs,
                               .n_inputs = 3, .feed_comp = m->feed_comp};
    troupe_optimizer_t opt = {.kind = TROUPE_OPT_ADAMW, .lr = 1e-4, .weight_decay = 0.01,
                              .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    troupe_dp_config_t dc = {.backend = "cpu", .streams = 1, .optimizer = opt, .local_only = true};
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&dc, &model, &dp));
    double err = 0;
    for (int k = 0; k < 10; k++) {
        double l = 0;
        OK(troupe_dp_step(dp));
        OK(troupe_dp_last_loss(dp, &l));
        err = fmax(err, fabs(l - want[k]));
        cr_expect_leq(fabs(l - want[k]), 1e-2, "step %d: loss %.9g, PyTorch %.9g", k, l, want[k]);
    }
    cr_assert_lt(want[9], want[0], "the reference's loss falls");
    s_report("10 losses", err, 1e-2);
    troupe_dp_destroy(&dp);
    gpt_model_destroy(&m);
    gpt_params_destroy(&p);
    gpt_llmc_state_free(&s);
    free(tokens);
    free(flat);
}
