/* troupe — the `sync` driver: everything runs inline in the caller, deterministically; the
 * reference driver for tests (docs/architecture.md §1 (devices), seed `Schedulers.Sync`).
 *
 * It is the host-memory driver core of devices/host/host_impl.h (pools, copies, events, the
 * shared compile cache) with one suggested stream for every config.
 *
 * Thread safety: as devices/device.h. Ownership: as devices/device.h.
 */
#ifndef TROUPE_DEVICES_SYNC_SYNC_IMPL_H
#define TROUPE_DEVICES_SYNC_SYNC_IMPL_H

#include "devices/device.h"

/* The sync driver's vtable (device.c's lookup table). */
extern const troupe_driver_vtable_t troupe__driver_sync;

#endif
