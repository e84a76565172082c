/* troupe — the devices dimension without a GPU: TROUPE_CPU_DEVICES (base/config.h; the host
 * drivers expose N devices, each with its own pools, the cores split among them for
 * suggested_num_streams), device_to_device between two devices of one backend (actors/
 * transfer.h: NO and COPY move the bytes, STREAMING is refused), TROUPE_DEVICE's parsing, and
 * troupe_dp_pick_devices / troupe_dp_suggested_streams (parallel/dp.h) driven by the
 * environment a launcher sets (OMPI_COMM_WORLD_LOCAL_RANK/_SIZE, SLURM_LOCALID/
 * SLURM_NTASKS_PER_NODE) and by TROUPE_DEVICE. Criterion runs each test in its own process, so
 * the environment a test sets stays with it. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, setenv */
#include "actors/troupe.h"
#include "base/config.h"
#include "parallel/dp.h"
#include "parallel/dp_impl.h"

#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-dp-devices", 60);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_NTASKS_PER_NODE");
    unsetenv("TROUPE_DEVICE");
    unsetenv("TROUPE_CPU_DEVICES");
    OK(troupe_config_reload());
}

TestSuite(dp_devices, .init = s_setup);

/* Re-reads the environment after setenv; the status of the reload. */
static troupe_status_t s_env(const char *var, const char *value)
{
    setenv(var, value, 1);
    return troupe_config_reload();
}

/* ---- configuration ----------------------------------------------------------------------- */

Test(dp_devices, cpu_devices_is_parsed_and_validated)
{
    cr_assert_eq(troupe_config_cpu_devices(), 1, "default");
    OK(s_env("TROUPE_CPU_DEVICES", "3"));
    cr_assert_eq(troupe_config_cpu_devices(), 3);
    const char *bad[] = {"0", "-1", "65", "two", "2x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(s_env("TROUPE_CPU_DEVICES", bad[i]), TROUPE_INVALID_ARGUMENT, "'%s'", bad[i]);
        cr_assert(strstr(troupe_last_error(), "TROUPE_CPU_DEVICES") != NULL, "%s",
                  troupe_last_error());
        cr_assert_eq(troupe_config_cpu_devices(), 1, "'%s' keeps the default", bad[i]);
    }
    unsetenv("TROUPE_CPU_DEVICES");
    OK(troupe_config_reload());
    cr_assert_eq(troupe_config_set_cpu_devices(0), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_config_set_cpu_devices(TROUPE_CONFIG_MAX_CPU_DEVICES + 1),
                 TROUPE_INVALID_ARGUMENT);
    OK(troupe_config_set_cpu_devices(TROUPE_CONFIG_MAX_CPU_DEVICES));
    cr_assert_eq(troupe_config_cpu_devices(), TROUPE_CONFIG_MAX_CPU_DEVICES);
}

Test(dp_devices, device_list_is_parsed_and_validated)
{
    int v[TROUPE_CONFIG_MAX_DEVICE_LIST], n = -1;
    OK(troupe_config_parse_device_list("", v, 8, &n));
    cr_assert_eq(n, 0);
    OK(troupe_config_parse_device_list("2", v, 8, &n));
    cr_assert(n == 1 && v[0] == 2);
    OK(troupe_config_parse_device_list("3,0,12", v, 8, &n));
    cr_assert(n == 3 && v[0] == 3 && v[1] == 0 && v[2] == 12);
    const char *bad[] = {"a", "-1", "1,", ",1", "1,,2", "1 ", "1,1", "0,1,2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(troupe_config_parse_device_list(bad[i], v, 2, &n), TROUPE_INVALID_ARGUMENT,
                     "'%s'", bad[i]);
        cr_assert(strstr(troupe_last_error(), bad[i]) != NULL, "%s", troupe_last_error());
    }
    cr_assert_eq(troupe_config_parse_device_list("1,1", v, 8, &n), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "device 1 is named twice") != NULL, "%s",
              troupe_last_error());
    OK(s_env("TROUPE_DEVICE", "1,0"));
    cr_assert_str_eq(troupe_config_device(), "1,0");
    cr_assert_eq(s_env("TROUPE_DEVICE", "x"), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "TROUPE_DEVICE='x'") != NULL, "%s", troupe_last_error());
    cr_assert_str_eq(troupe_config_device(), "", "a bad value keeps the default");
    cr_assert_eq(troupe_config_set_device("2,2"), TROUPE_INVALID_ARGUMENT);
    OK(troupe_config_set_device("2"));
    cr_assert_str_eq(troupe_config_device(), "2");
    OK(troupe_config_set_device(NULL));
    cr_assert_str_eq(troupe_config_device(), "");
}

/* ---- the host drivers' devices --------------------------------------------------------------- */

static int s_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

Test(dp_devices, host_backends_expose_the_configured_devices)
{
    OK(troupe_config_set_cpu_devices(3));
    const char *names[2] = {"cpu", "sync"};
    for (int b = 0; b < 2; b++) {
        troupe_backend_t *be = NULL;
        OK(troupe_backend_open(names[b], TROUPE_MOST_PARALLEL_STREAMS, &be));
        int n = 0, sum = 0;
        OK(troupe_num_devices(be, &n));
        cr_assert_eq(n, 3, "%s: %d devices", names[b], n);
        for (int o = 0; o < 3; o++) {
            troupe_device_t *d = NULL;
            int per = 0;
            OK(troupe_get_device(be, o, &d));
            OK(troupe_suggested_num_streams(d, &per));
            cr_assert_geq(per, 1);
            sum += per;
            if (b == 1)
                cr_assert_eq(per, 1, "sync: one stream per device");
        }
        if (b == 0) /* the cores split among the devices, at least 1 each */
            cr_assert_eq(sum, s_cores() >= 3 ? s_cores() : 3, "cpu: %d streams on %d cores", sum,
                         s_cores());
        troupe_device_t *d = NULL;
        cr_assert_eq(troupe_get_device(be, 3, &d), TROUPE_NOT_FOUND);
        troupe_backend_close(&be);
    }
}

/* A node uploaded with different values on two devices; NO copies device 0's array over
 * device 1's, COPY into device 1's merge buffer feeds a merge routine there, STREAMING is
 * refused (its consumer would read another device's memory in place). */
Test(dp_devices, device_to_device_crosses_devices)
{
    OK(troupe_config_set_cpu_devices(2));
    const char *const *drivers = rtu_host_drivers();
    for (int i = 0; drivers[i]; i++) {
        troupe_backend_t *b = NULL;
        troupe_device_t *d0 = NULL, *d1 = NULL;
        troupe_stream_t *s0 = NULL, *s1 = NULL;
        troupe_context_t *c0 = NULL, *c1 = NULL;
        OK(troupe_backend_open(drivers[i], TROUPE_FOR_PARALLEL_COPYING, &b));
        OK(troupe_get_device(b, 0, &d0));
        OK(troupe_get_device(b, 1, &d1));
        OK(troupe_new_stream(d0, &s0));
        OK(troupe_new_stream(d1, &s1));
        OK(troupe_context_new(s0, &c0));
        OK(troupe_context_new(s1, &c1));
        troupe_tnode_t *a = rtu_vec("a", 4), *acc = rtu_vec("acc", 4);
        rtu_put(&c0, a, (double[]){1, 2, 3, 4});
        rtu_put(&c1, a, (double[]){-1, -1, -1, -1});
        rtu_put(&c1, acc, (double[]){10, 20, 30, 40});
        troupe_code_t *mc = rtu_merge_code(b, acc, a, "i=>i", "acc_merge");
        troupe_routine_t *merge = NULL;
        OK(troupe_link(c1, mc, &merge));
        /* COPY: device 0's a into stream 1's merge buffer, acc += a.merge on device 1 */
        OK(troupe_device_to_device(a, TROUPE_MERGE_COPY, troupe_routine_context(merge), c0, NULL,
                                   NULL, NULL));
        OK(troupe_routine_run(merge, NULL));
        float got[4];
        rtu_get(troupe_routine_context(merge), acc, got);
        for (int e = 0; e < 4; e++)
            cr_assert_float_eq(got[e], 10.0f * (e + 1) + (e + 1), 0, "%s COPY: acc[%d] = %g",
                               drivers[i], e, got[e]);
        /* NO: device 1's a becomes device 0's */
        troupe_event_t *ev = NULL;
        OK(troupe_device_to_device(a, TROUPE_MERGE_NO, c1, c0, NULL, NULL, &ev));
        OK(troupe_event_sync(ev, 20000 * MS));
        troupe_event_release(&ev);
        rtu_get(c1, a, got);
        for (int e = 0; e < 4; e++)
            cr_assert_float_eq(got[e], (float)(e + 1), 0, "%s NO: a[%d] = %g", drivers[i], e,
                               got[e]);
        cr_assert_eq(troupe_device_to_device(a, TROUPE_MERGE_STREAMING, troupe_routine_context(merge),
                                             c0, merge, NULL, NULL),
                     TROUPE_FAILED_PRECONDITION);
        cr_assert(strstr(troupe_last_error(), "STREAMING from device 0 to device 1") != NULL, "%s",
                  troupe_last_error());
        troupe_routine_release(&merge);
        troupe_code_release(&mc);
        troupe_context_release(&c0);
        troupe_context_release(&c1);
        troupe_stream_release(&s0);
        troupe_stream_release(&s1);
        troupe_backend_close(&b);
        troupe_tnode_release(&a);
        troupe_tnode_release(&acc);
    }
}

/* ---- picking this rank's devices -------------------------------------------------------- */

/* Picks on `driver` with `ndev` devices; the ordinals in out[0..return). */
static int s_pick(const char *driver, int ndev, int *out, troupe_status_t *st)
{
    OK(troupe_config_set_cpu_devices(ndev));
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open(driver, TROUPE_MOST_PARALLEL_STREAMS, &b));
    troupe_dp_devices_t dv;
    *st = troupe_dp_pick_devices(b, &dv);
    troupe_backend_close(&b);
    if (*st != TROUPE_OK)
        return 0;
    memcpy(out, dv.ordinals, (size_t)dv.n * sizeof *out);
    return dv.n;
}

static void s_expect(const char *what, int ndev, const int *want, int nwant)
{
    int got[TROUPE_DP_MAX_DEVICES];
    troupe_status_t st;
    int n = s_pick("sync", ndev, got, &st);
    cr_assert_eq(st, TROUPE_OK, "%s: %s", what, troupe_last_error());
    cr_assert_eq(n, nwant, "%s on %d devices: %d devices, want %d", what, ndev, n, nwant);
    for (int i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s on %d devices: device %d is %d, want %d", what, ndev, i,
                     got[i], want[i]);
}

Test(dp_devices, one_rank_alone_takes_every_device)
{
    s_expect("no launcher", 1, (int[]){0}, 1);
    s_expect("no launcher", 3, (int[]){0, 1, 2}, 3);
}

Test(dp_devices, open_mpi_local_rank_takes_its_share)
{
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    s_expect("local rank 1 of 2", 4, (int[]){1, 3}, 2); /* more devices than ranks: a share */
    s_expect("local rank 1 of 2", 2, (int[]){1}, 1);    /* one GPU per rank */
    s_expect("local rank 1 of 2", 1, (int[]){0}, 1);    /* fewer: modulo, shared */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    s_expect("local rank 0 of 2", 3, (int[]){0, 2}, 2);
}

Test(dp_devices, slurm_local_id_takes_its_share)
{
    setenv("SLURM_LOCALID", "3", 1);
    setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1); /* Slurm's uneven form: its leading count */
    s_expect("SLURM_LOCALID 3 of 4", 2, (int[]){1}, 1); /* 3 mod 2 */
    s_expect("SLURM_LOCALID 3 of 4", 8, (int[]){3, 7}, 2);
}

Test(dp_devices, troupe_device_overrides_the_local_rank)
{
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    OK(s_env("TROUPE_DEVICE", "0"));
    s_expect("TROUPE_DEVICE=0", 2, (int[]){0}, 1);
    OK(s_env("TROUPE_DEVICE", "2,0"));
    s_expect("TROUPE_DEVICE=2,0", 3, (int[]){2, 0}, 2);
    int got[TROUPE_DP_MAX_DEVICES];
    troupe_status_t st;
    s_pick("sync", 2, got, &st);
    cr_assert_eq(st, TROUPE_NOT_FOUND, "an ordinal the backend lacks");
    cr_assert(strstr(troupe_last_error(), "TROUPE_DEVICE=2,0: backend sync has no device 2 (it "
                                          "has 2") != NULL,
              "%s", troupe_last_error());
}

Test(dp_devices, suggested_streams_follow_the_devices_and_their_sharers)
{
    OK(troupe_config_set_cpu_devices(2));
    troupe_backend_t *b = NULL;
    OK(troupe_backend_open("sync", TROUPE_MOST_PARALLEL_STREAMS, &b));
    int n = 0;
    OK(troupe_dp_suggested_streams(b, &n));
    cr_assert_eq(n, 2, "one rank, two sync devices: one stream each");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    OK(troupe_dp_suggested_streams(b, &n));
    cr_assert_eq(n, 1, "local rank 1 of 2: its one device");
    troupe_backend_close(&b);
    OK(troupe_backend_open("cpu", TROUPE_MOST_PARALLEL_STREAMS, &b));
    troupe_device_t *d1 = NULL;
    int per = 0;
    OK(troupe_get_device(b, 1, &d1));
    OK(troupe_suggested_num_streams(d1, &per));
    OK(troupe_dp_suggested_streams(b, &n));
    cr_assert_eq(n, per, "local rank 1 of 2 on two cpu devices: device 1's cores, unshared");
    troupe_backend_close(&b);
}

/* A device backend's device takes one replica whatever its suggestion (an H200 suggests its
 * 132 multiprocessors), shared or not; a host device its cores divided among its sharers, at
 * least one. */
Test(dp_devices, a_gpu_takes_one_replica_and_host_devices_their_share_of_cores)
{
    cr_assert_eq(troupe__dp_device_streams(false, 132, 1), 1);
    cr_assert_eq(troupe__dp_device_streams(false, 132, 4), 1);
    cr_assert_eq(troupe__dp_device_streams(true, 16, 1), 16);
    cr_assert_eq(troupe__dp_device_streams(true, 16, 4), 4);
    cr_assert_eq(troupe__dp_device_streams(true, 2, 4), 1);
    cr_assert_eq(troupe__dp_device_streams(true, 0, 1), 1);
}
