/* troupe — the `cpu` driver (see cpu_impl.h): the host driver core with one stream per core. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "devices/cpu/cpu_impl.h"

#include "devices/host/host_impl.h"

#include <sched.h>
#include <stdint.h>
#include <unistd.h>

static troupe_status_t s_cpu_open(troupe_driver_t **out)
{
    return troupe__hdrv_open(&troupe__driver_cpu, out);
}

/* One stream per core this process may run on (its CPU affinity: a launcher or cgroup that
 * pins the process to some cores gets as many streams), else per online core, split among the
 * driver's devices (TROUPE_CPU_DEVICES = D: device d gets cores / D, plus one when d < cores %
 * D); at least 1, for every config (docs/architecture.md §2). 0 for a device that does not
 * exist. */
static int s_cpu_suggested_num_streams(troupe_driver_t *drv, int ordinal,
                                       troupe_stream_config_t cfg)
{
    int ndev = troupe__hdrv_num_devices(drv);
    if (ordinal < 0 || ordinal >= ndev)
        return 0;
    long n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    n = n / ndev + (ordinal < n % ndev ? 1 : 0);
    if (n < 1)
        return 1;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

const troupe_driver_vtable_t troupe__driver_cpu = {
    .name = "cpu",
    .open = s_cpu_open,
    .suggested_num_streams = s_cpu_suggested_num_streams,
    TROUPE__HDRV_ENTRIES,
};
