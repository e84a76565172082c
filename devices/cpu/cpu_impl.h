/* troupe — the multicore `cpu` driver (docs/architecture.md §2, §7; seed `Schedulers.Multicore`).
 *
 * The host-memory driver core of devices/host/host_impl.h (pools, copies, events, code from
 * the shared C compile cache) with one suggested stream per core, split among its devices
 * (TROUPE_CPU_DEVICES); the actors above drive each of its queues from its own stream actor
 * thread.
 *
 * Thread safety: as devices/device.h. Ownership: as devices/device.h.
 */
#ifndef TROUPE_DEVICES_CPU_CPU_IMPL_H
#define TROUPE_DEVICES_CPU_CPU_IMPL_H

#include "devices/device.h"

/* The cpu driver's vtable (device.c's lookup table). */
extern const troupe_driver_vtable_t troupe__driver_cpu;

#endif
