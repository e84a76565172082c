/* troupe — dynamic loss scaling in the data-parallel driver (parallel/dp.h, loss_scaling) on a
 * tiny softmax regression whose products run in half precision (nn/, compute precision HALF):
 * an injected overflow (TROUPE_FAULT overflow:step=K) skips exactly step K (the parameters after
 * it are those after K - 1, the scale halves, one step is counted as skipped) and training goes
 * on; a run resumed from a checkpoint saved after the skip continues bit for bit, the file
 * carrying the scale and the count; bad loss scaling settings are refused by name. */
#include "actors/troupe.h"
#include "base/config.h"
#include "parallel/dp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define OK(expr)                                                                                   \
    do {                                                                                           \
        troupe_status_t st_ = (expr);                                                              \
        cr_assert_eq(st_, TROUPE_OK, "%s: %s", #expr, troupe_last_error());                        \
    } while (0)

#define DHM_CHECK(expr) OK(expr)
#include "dp_half_model.h"

static troupe_dp_config_t s_config(void)
{
    return dhm_config(2, true);
}

Test(dp_loss_scale, an_injected_overflow_skips_exactly_that_step)
{
    OK(troupe_config_set_fault("overflow:step=2"));
    dhm_model_t m;
    dhm_model_new(&m);
    troupe_dp_config_t cfg = s_config();
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.dp, &dp));
    float p[5][DHM_NP];
    troupe_dp_loss_scale_state_t ls[5];
    dhm_steps(dp, &m, 5, p, ls);
    for (int s = 0; s < 5; s++)
        for (int e = 0; e < DHM_NP; e++)
            cr_assert(isfinite(p[s][e]), "step %d: parameter %d is %g", s, e, p[s][e]);
    cr_assert(ls[0].on);
    cr_expect_neq(memcmp(p[0], p[1], sizeof p[0]), 0, "step 1 changed nothing");
    cr_assert_eq(memcmp(p[1], p[2], sizeof p[0]), 0,
                 "the overflowed step 2 changed the parameters");
    cr_assert_neq(memcmp(p[2], p[3], sizeof p[0]), 0, "training stopped after the skip");
    cr_assert_neq(memcmp(p[3], p[4], sizeof p[0]), 0, "training stopped after the skip");
    cr_assert_eq(ls[1].scale, 65536.0);
    cr_assert_eq(ls[1].skipped_steps, 0);
    cr_assert_eq(ls[1].good_steps, 2);
    cr_assert_eq(ls[2].scale, 32768.0, "scale after the overflow: %g", ls[2].scale);
    cr_assert_eq(ls[2].skipped_steps, 1);
    cr_assert_eq(ls[2].good_steps, 0);
    cr_assert_eq(ls[4].scale, 32768.0);
    cr_assert_eq(ls[4].skipped_steps, 1);
    cr_assert_eq(ls[4].good_steps, 2);
    troupe_dp_destroy(&dp);
    dhm_model_destroy(&m);
    OK(troupe_config_set_fault(""));
}

/* The scale grows by growth after `interval` good steps in a row. */
Test(dp_loss_scale, the_scale_grows_after_interval_good_steps)
{
    dhm_model_t m;
    dhm_model_new(&m);
    troupe_dp_config_t cfg = s_config();
    cfg.loss_scale_init = 1024.0;
    cfg.loss_scale_interval = 3;
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.dp, &dp));
    troupe_dp_loss_scale_state_t ls;
    for (int s = 0; s < 7; s++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_loss_scale(dp, &ls));
    cr_assert_eq(ls.scale, 4096.0, "after 7 good steps with interval 3: %g", ls.scale);
    cr_assert_eq(ls.good_steps, 1);
    cr_assert_eq(ls.skipped_steps, 0);
    troupe_dp_destroy(&dp);
    dhm_model_destroy(&m);
}

Test(dp_loss_scale, a_resumed_run_continues_bit_for_bit_with_its_scale)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/troupe_test_ls_%d.ck", (int)getpid());
    OK(troupe_config_set_fault("overflow:step=1"));
    dhm_model_t m;
    dhm_model_new(&m);
    troupe_dp_config_t cfg = s_config();
    troupe_dp_t *dp = NULL;
    OK(troupe_dp_new(&cfg, &m.dp, &dp));
    float a[DHM_NP], b[DHM_NP];
    for (int s = 0; s < 6; s++) {
        if (s == 3)
            OK(troupe_dp_save(dp, path));
        OK(troupe_dp_step(dp));
    }
    dhm_params(dp, &m, a);
    troupe_dp_loss_scale_state_t la, lb;
    OK(troupe_dp_loss_scale(dp, &la));
    troupe_dp_destroy(&dp);

    troupe_dp_checkpoint_info_t info;
    OK(troupe_dp_checkpoint_read(path, &info));
    cr_assert_eq(info.version, 4);
    cr_assert_eq(info.loss_scale, 32768.0);
    cr_assert_eq(info.skipped_steps, 1);
    cr_assert_eq(info.loss_scale_good, 1);

    dhm_init_params(&m); /* a fresh start, then the checkpoint */
    OK(troupe_dp_new(&cfg, &m.dp, &dp));
    OK(troupe_dp_load(dp, path));
    cr_assert_eq(troupe_dp_steps_done(dp), 3);
    for (int s = 3; s < 6; s++)
        OK(troupe_dp_step(dp));
    dhm_params(dp, &m, b);
    OK(troupe_dp_loss_scale(dp, &lb));
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "the resumed run differs");
    cr_assert_eq(la.scale, lb.scale);
    cr_assert_eq(la.skipped_steps, lb.skipped_steps);
    cr_assert_eq(la.good_steps, lb.good_steps);
    troupe_dp_destroy(&dp);
    dhm_model_destroy(&m);
    unlink(path);
    OK(troupe_config_set_fault(""));
}

Test(dp_loss_scale, bad_settings_are_refused_by_name)
{
    dhm_model_t m;
    dhm_model_new(&m);
    static const struct {
        double init, growth, backoff;
        int64_t interval;
        const char *name;
    } bad[] = {{-1.0, 0, 0, 0, "loss_scale_init"},
               {INFINITY, 0, 0, 0, "loss_scale_init"},
               {0, 0.5, 0, 0, "loss_scale_growth"},
               {0, 0, 1.5, 0, "loss_scale_backoff"},
               {0, 0, 0, -3, "loss_scale_interval"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        troupe_dp_config_t cfg = s_config();
        cfg.loss_scale_init = bad[i].init;
        cfg.loss_scale_growth = bad[i].growth;
        cfg.loss_scale_backoff = bad[i].backoff;
        cfg.loss_scale_interval = bad[i].interval;
        troupe_dp_t *dp = NULL;
        cr_assert_eq(troupe_dp_new(&cfg, &m.dp, &dp), TROUPE_INVALID_ARGUMENT, "case %zu", i);
        cr_assert_null(dp);
        cr_assert_not_null(strstr(troupe_last_error(), bad[i].name), "%s", troupe_last_error());
    }
    /* on without a loss_scale node */
    troupe_dp_config_t cfg = s_config();
    troupe_dp_model_t no_scale = m.dp;
    no_scale.loss_scale = NULL;
    troupe_dp_t *dp = NULL;
    cr_assert_eq(troupe_dp_new(&cfg, &no_scale, &dp), TROUPE_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(troupe_last_error(), "no loss_scale node"), "%s",
                       troupe_last_error());
    /* the fused update cannot skip a step */
    cfg.update = TROUPE_DP_UPDATE_FUSED;
    cr_assert_eq(troupe_dp_new(&cfg, &m.dp, &dp), TROUPE_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(troupe_last_error(), "loss scaling"), "%s", troupe_last_error());
    dhm_model_destroy(&m);
}
