/* troupe — fault injection (TROUPE_FAULT, base/fault_impl.h) in one process: the specification
 * language (good specs arm, a bad one is refused naming its bad part, and the library refuses
 * to start with it), and the faults one process can show: a failed device pool allocation, a
 * failed routine run, a checkpoint write stopped half-way (the previous checkpoint stays intact
 * and loadable, no committed step is lost), a stalled step, the control-plane decisions. The
 * faults that kill or stall a rank of several are tested under mpiexec (tests/mpi/fault.cmake)
 * and through the trainer (tests/fault/). */
#define _POSIX_C_SOURCE 200809L
#include "actors/troupe.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "parallel/dp.h"

#include "runtime_test_util.h"

#define DPT_CHECK(expr) OK(expr)
#include "dp_test_model.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-fault", 30);
}

TestSuite(fault, .init = s_setup);

/* ---- the language ------------------------------------------------------------------------- */

Test(fault, good_specifications_arm_and_empty_disarms)
{
    const char *good[] = {
        "kill:rank=1:collective=3",
        "stall:rank=0:step=5:ms=2000",
        "slow:rank=1:ms=50",
        "slow:ms=5:collective=2",
        "alloc:nth=2",
        "alloc",
        "kernel:routine=dp_grad",
        "kernel:routine=dp_grad:nth=4:rank=0",
        "kernel:routine=dp_grad:ms=50:nth=2",
        "ckpt:half",
        "ckpt:half:nth=2:kill",
        "ctrl:drop",
        "ctrl:drop:nth=3",
        "ctrl:delay=250",
        "overflow:step=4",
        "overflow:step=0:rank=1",
        "kill:rank=1:collective=3,alloc:nth=2,ctrl:delay=5",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        OK(troupe_config_set_fault(good[i]));
        cr_assert_str_eq(troupe_config_fault(), good[i]);
        OK(troupe__fault_check());
    }
    OK(troupe_config_set_fault(""));
    cr_assert_str_eq(troupe_config_fault(), "");
    cr_assert_eq(atomic_load(&troupe__fault_places), 0u, "an empty spec arms nothing");
    OK(troupe_config_set_fault("kill:step=1,alloc"));
    cr_assert_eq(atomic_load(&troupe__fault_places), TROUPE__FAULT_STEP | TROUPE__FAULT_ALLOC);
    OK(troupe_config_set_fault(NULL));
    cr_assert_eq(atomic_load(&troupe__fault_places), 0u);
}

/* Each bad spec is refused with INVALID_ARGUMENT; the message names TROUPE_FAULT, the bad
 * part (its index and text) and what is wrong with it. */
Test(fault, bad_specifications_name_the_bad_part)
{
    static const struct {
        const char *spec, *part, *why;
    } bad[] = {
        {"kil:rank=1:collective=3", "fault 1 'kil:rank=1:collective=3'", "unknown fault 'kil'"},
        {"alloc,kill:rank=x:step=1", "fault 2 'kill:rank=x:step=1'", "rank='x'"},
        {"kill:rank=1", "fault 1 'kill:rank=1'", "needs a place: collective=N or step=N"},
        {"kill:collective=0", "fault 1", "collective number >= 1"},
        {"kill:step=1:collective=2", "fault 1", "not both"},
        {"stall:step=1", "fault 1 'stall:step=1'", "stall needs ms=M"},
        {"slow:rank=1", "fault 1", "slow needs ms=M"},
        {"alloc:nth=0", "fault 1 'alloc:nth=0'", "nth='0'"},
        {"alloc:routine=x", "fault 1", "'routine' is not a setting of alloc"},
        {"kernel:nth=2", "fault 1", "kernel needs routine=NAME"},
        {"ckpt", "fault 1 'ckpt'", "ckpt needs 'half'"},
        {"ckpt:half=1", "fault 1", "'half' takes no value"},
        {"ctrl", "fault 1", "ctrl needs one of drop or delay=MS"},
        {"ctrl:drop:delay=5", "fault 1", "ctrl needs one of drop or delay=MS"},
        {"ctrl:delay=5:nth=2", "fault 1", "nth goes with drop only"},
        {"overflow", "fault 1 'overflow'", "overflow needs step=N"},
        {"overflow:collective=2", "fault 1", "'collective' is not a setting of overflow"},
        {"kill:step=1:step=2", "fault 1", "'step' given twice"},
        {"kill:step", "fault 1", "'step' needs a value"},
        {"alloc,,alloc", "fault 2 ''", "empty"},
        {"alloc,", "fault 2 ''", "empty"},
        {"stall:step=1:ms=-5", "fault 1", "ms='-5'"},
        {"kill:step=99999999999999999999", "fault 1", "step='99999999999999999999'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        OK(troupe_config_set_fault("alloc:nth=7"));
        troupe_status_t st = troupe_config_set_fault(bad[i].spec);
        cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "'%s' accepted", bad[i].spec);
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, "TROUPE_FAULT") != NULL, "'%s': %s", bad[i].spec, msg);
        cr_assert(strstr(msg, bad[i].part) != NULL, "'%s': no '%s' in: %s", bad[i].spec,
                  bad[i].part, msg);
        cr_assert(strstr(msg, bad[i].why) != NULL, "'%s': no '%s' in: %s", bad[i].spec, bad[i].why,
                  msg);
        cr_assert_eq(atomic_load(&troupe__fault_places), 0u, "'%s' left a fault armed",
                     bad[i].spec);
        cr_assert_eq(troupe__fault_check(), TROUPE_INVALID_ARGUMENT);
    }
}

/* A malformed TROUPE_FAULT in the environment: troupe_config_check reports it, and the
 * library refuses to start (the backend does not open) with a message naming it. */
Test(fault, a_malformed_environment_value_refuses_to_start)
{
    cr_assert_eq(setenv("TROUPE_FAULT", "kill:rank=1:colective=3", 1), 0);
    cr_assert_eq(troupe_config_reload(), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_FAULT='kill:rank=1:colective=3'") != NULL, "%s",
              troupe_last_error());
    troupe_backend_t *b = NULL;
    cr_assert_eq(troupe_backend_open("sync", TROUPE_MOST_PARALLEL_STREAMS, &b),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_null(b);
    cr_assert(strstr(troupe_last_error(), "'colective' is not a setting of kill") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(setenv("TROUPE_FAULT", "kill:rank=1:collective=3", 1), 0);
    cr_assert_eq(troupe_config_reload(), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_str_eq(troupe_config_fault(), "kill:rank=1:collective=3");
    OK(troupe_backend_open("sync", TROUPE_MOST_PARALLEL_STREAMS, &b));
    troupe_backend_close(&b);
    cr_assert_eq(unsetenv("TROUPE_FAULT"), 0);
    OK(troupe_config_reload());
    cr_assert_str_eq(troupe_config_fault(), "");
}

/* A fault for another rank does nothing here (rank 0). */
Test(fault, another_ranks_fault_does_not_fire)
{
    OK(troupe_config_set_fault("alloc:rank=1,kernel:rank=3:routine=dp_grad,ctrl:drop:rank=1"));
    cr_assert_eq(troupe__fault_alloc("pool"), TROUPE_OK);
    cr_assert_eq(troupe__fault_kernel("dp_grad"), TROUPE_OK);
    cr_assert_eq(troupe__fault_ctrl("HEARTBEAT", NULL), TROUPE__FAULT_CTRL_PASS);
    troupe__fault_set_rank(1);
    cr_assert_eq(troupe__fault_alloc("pool"), TROUPE_RESOURCE_EXHAUSTED);
    cr_assert_eq(troupe__fault_ctrl("HEARTBEAT", NULL), TROUPE__FAULT_CTRL_DROP);
    troupe__fault_set_rank(-1);
}

/* ---- the control plane's decisions ---------------------------------------------------------- */

Test(fault, control_messages_are_dropped_or_delayed_as_asked)
{
    int64_t ms = -1;
    OK(troupe_config_set_fault(""));
    cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_PASS);
    cr_assert_eq(ms, 0);
    OK(troupe_config_set_fault("ctrl:drop:nth=2"));
    cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_PASS);
    cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_DROP);
    cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_PASS);
    OK(troupe_config_set_fault("ctrl:drop"));
    for (int i = 0; i < 5; i++)
        cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_DROP);
    OK(troupe_config_set_fault("ctrl:delay=75"));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(troupe__fault_ctrl("STATUS", &ms), TROUPE__FAULT_CTRL_DELAY);
        cr_assert_eq(ms, 75);
    }
}

/* ---- faults in a training run -----------------------------------------------------------------
 */

#define NB 4
#define BS 4
#define DIN 3
#define DOUT 2

/* The linear model of the dp tests on a small fixed data set. */
static void s_model(dpt_lr_t *m)
{
    double x[NB * BS * DIN], y[NB * BS * DOUT], w[DIN * DOUT], b[DOUT] = {0.1, -0.1};
    for (int i = 0; i < NB * BS * DIN; i++)
        x[i] = (double)((i * 7) % 11) / 11.0 - 0.5;
    for (int i = 0; i < NB * BS * DOUT; i++)
        y[i] = (double)((i * 5) % 13) / 13.0;
    for (int i = 0; i < DIN * DOUT; i++)
        w[i] = 0.05 * (double)(i - 2);
    dpt_lr_new(m, NB, BS, DIN, DOUT, x, y, w, b);
}

static troupe_status_t s_dp(dpt_lr_t *m, const char *backend, int streams, troupe_dp_t **out)
{
    troupe_dp_config_t cfg = {.backend = backend,
                              .streams = streams,
                              .optimizer = dpt_opt(TROUPE_OPT_SGD),
                              .local_only = true};
    return troupe_dp_new(&cfg, &m->model, out);
}

/* alloc:nth=2: the second device pool allocation fails while the driver is built, with
 * RESOURCE_EXHAUSTED naming the pool and the fault; the first one went through. */
Test(fault, alloc_fails_the_nth_pool_allocation)
{
    FOR_EACH_DRIVER(drv)
    {
        OK(troupe_config_set_fault("alloc:nth=2"));
        dpt_lr_t m;
        s_model(&m);
        troupe_dp_t *dp = NULL;
        troupe_status_t st = s_dp(&m, *drv, 2, &dp);
        cr_assert_eq(st, TROUPE_RESOURCE_EXHAUSTED, "%s: %s: %s", *drv, troupe_status_str(st),
                     troupe_last_error());
        cr_assert_null(dp);
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, "alloc_pool: pool") != NULL, "%s", msg);
        cr_assert(strstr(msg, "TROUPE_FAULT 'alloc:nth=2'") != NULL, "%s", msg);
        cr_assert(strstr(msg, "allocation 2 of this process") != NULL, "%s", msg);
        /* disarmed, the same build goes through */
        OK(troupe_config_set_fault(NULL));
        OK(s_dp(&m, *drv, 2, &dp));
        troupe_dp_destroy(&dp);
        dpt_lr_destroy(&m);
    }
}

/* kernel:routine=dp_grad:nth=5: the 5th run of the gradient routine fails its event; the step
 * it belongs to fails (at once on sync, at the next sync on cpu) with DEVICE_ERROR naming the
 * routine and the fault, and later steps are refused instead of computing on a broken state. */
Test(fault, kernel_fails_the_nth_run_of_the_named_routine)
{
    FOR_EACH_DRIVER(drv)
    {
        OK(troupe_config_set_fault("kernel:routine=dp_grad:nth=5"));
        dpt_lr_t m;
        s_model(&m);
        troupe_dp_t *dp = NULL;
        OK(s_dp(&m, *drv, 2, &dp));
        OK(troupe_dp_step(dp)); /* runs 1, 2 */
        OK(troupe_dp_step(dp)); /* runs 3, 4 */
        OK(troupe_dp_sync(dp));
        /* runs 5 (fails), 6: inline on sync (the step fails), on cpu's streams (the sync) */
        troupe_status_t st = troupe_dp_step(dp);
        if (st == TROUPE_OK)
            st = troupe_dp_sync(dp);
        cr_assert_eq(st, TROUPE_DEVICE_ERROR, "%s: %s: %s", *drv, troupe_status_str(st),
                     troupe_last_error());
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, "routine dp_grad: run 5 failed by TROUPE_FAULT "
                              "'kernel:routine=dp_grad:nth=5'") != NULL,
                  "%s", msg);
        cr_assert_neq(troupe_dp_step(dp), TROUPE_OK, "a step after the failure was accepted");
        troupe_dp_destroy(&dp);
        dpt_lr_destroy(&m);
        OK(troupe_config_set_fault(NULL));
    }
}

static long s_file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* ckpt:half:nth=2: the second save stops half-way as a crash would. The save fails with
 * INTERNAL naming the fault and the temporary it left (half the bytes of a whole checkpoint);
 * the checkpoint file is the first save, bit for bit, and loads with its step count and
 * parameters (no committed step lost). The next save, unfaulted, replaces it. */
Test(fault, ckpt_half_leaves_the_previous_checkpoint_intact)
{
    const char *path = TROUPE_TEST_BUILD_DIR "/fault-ckpt.ck";
    char *tmp = troupe_strdup_printf("%s.tmp.%ld", path, (long)getpid());
    unlink(path);
    unlink(tmp);
    OK(troupe_config_set_fault("ckpt:half:nth=2"));
    dpt_lr_t m;
    s_model(&m);
    troupe_dp_t *dp = NULL;
    OK(s_dp(&m, "sync", 1, &dp));
    for (int i = 0; i < 3; i++)
        OK(troupe_dp_step(dp));
    OK(troupe_dp_save(dp, path)); /* committed: step 3 */
    OK(troupe_dp_params_to_host(dp));
    float saved[DIN * DOUT + DOUT];
    dpt_lr_params(&m, saved);
    long whole = s_file_size(path);
    cr_assert_gt(whole, 0);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char *before = malloc((size_t)whole);
    cr_assert_eq(fread(before, 1, (size_t)whole, f), (size_t)whole);
    fclose(f);

    for (int i = 0; i < 2; i++)
        OK(troupe_dp_step(dp));
    troupe_status_t st = troupe_dp_save(dp, path);
    cr_assert_eq(st, TROUPE_INTERNAL, "%s: %s", troupe_status_str(st), troupe_last_error());
    const char *msg = troupe_last_error();
    cr_assert(strstr(msg, "checkpoint write 2 stopped half-way by TROUPE_FAULT "
                          "'ckpt:half:nth=2'") != NULL,
              "%s", msg);
    cr_assert(strstr(msg, tmp) != NULL, "the message does not name the temporary: %s", msg);
    cr_assert_eq(s_file_size(tmp), whole / 2, "the temporary holds %ld bytes, expected %ld",
                 s_file_size(tmp), whole / 2);
    /* the checkpoint is the first save, unchanged */
    cr_assert_eq(s_file_size(path), whole);
    f = fopen(path, "rb");
    unsigned char *after = malloc((size_t)whole);
    cr_assert_eq(fread(after, 1, (size_t)whole, f), (size_t)whole);
    fclose(f);
    cr_assert_eq(memcmp(before, after, (size_t)whole), 0, "the checkpoint changed");
    /* and it loads: step 3 and its parameters */
    OK(troupe_dp_load(dp, path));
    cr_assert_eq(troupe_dp_steps_done(dp), 3);
    OK(troupe_dp_params_to_host(dp));
    float loaded[DIN * DOUT + DOUT];
    dpt_lr_params(&m, loaded);
    cr_assert_eq(memcmp(saved, loaded, sizeof saved), 0);
    /* the fault fired once: the next save goes through and replaces the file */
    OK(troupe_dp_step(dp));
    OK(troupe_dp_save(dp, path));
    OK(troupe_dp_load(dp, path));
    cr_assert_eq(troupe_dp_steps_done(dp), 4);
    cr_assert_eq(s_file_size(tmp), -1, "the temporary is still there after a good save");
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
    free(before);
    free(after);
    unlink(path);
    troupe_free(tmp);
}

/* The text of the file at path (at most 64 KiB); the caller frees it. */
static char *s_read(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char *text = troupe_calloc(1, 1 << 16);
    cr_assert_not_null(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* stall:step=2:ms=400: scheduling step 2 (the third) sleeps 400 ms, once; steps 0, 1, 3 and 4
 * do not: the fault's warning is logged once, naming step 2 (counted rather than timed: on a
 * loaded machine any step can take long). */
Test(fault, stall_sleeps_once_at_its_step)
{
    char path[] = "/tmp/troupe-fault-stall-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    OK(troupe_log_set_file(path));
    OK(troupe_log_configure("warn"));
    OK(troupe_config_set_fault("stall:step=2:ms=400"));
    dpt_lr_t m;
    s_model(&m);
    troupe_dp_t *dp = NULL;
    OK(s_dp(&m, "sync", 1, &dp));
    int64_t took[5];
    for (int i = 0; i < 5; i++) {
        int64_t t0 = troupe_now_ns();
        OK(troupe_dp_step(dp));
        took[i] = troupe_now_ns() - t0;
    }
    OK(troupe_dp_sync(dp));
    OK(troupe_log_set_file(NULL));
    char *text = s_read(path);
    unlink(path);
    cr_assert_geq(took[2], 400 * MS, "step 2 took %lld ns", (long long)took[2]);
    int stalls = 0;
    for (const char *p = text; (p = strstr(p, "stalling")) != NULL; p++)
        stalls++;
    cr_assert_eq(stalls, 1, "%d stalls logged: %s", stalls, text);
    cr_assert(strstr(text, "stalling 400 ms at training step 2") != NULL, "%s", text);
    troupe_free(text);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}

/* slow:ms=60:step=1: every step from step 1 on takes at least 60 ms. */
Test(fault, slow_delays_every_step_from_its_start)
{
    OK(troupe_config_set_fault("slow:ms=60:step=1"));
    dpt_lr_t m;
    s_model(&m);
    troupe_dp_t *dp = NULL;
    OK(s_dp(&m, "sync", 1, &dp));
    int64_t took[4];
    for (int i = 0; i < 4; i++) {
        int64_t t0 = troupe_now_ns();
        OK(troupe_dp_step(dp));
        took[i] = troupe_now_ns() - t0;
    }
    OK(troupe_dp_sync(dp));
    for (int i = 1; i < 4; i++)
        cr_assert_geq(took[i], 60 * MS, "step %d took %lld ns", i, (long long)took[i]);
    troupe_dp_destroy(&dp);
    dpt_lr_destroy(&m);
}
