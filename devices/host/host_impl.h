/* troupe — the host-memory driver core shared by the `cpu` and `sync` drivers (docs/architecture.md
 * §2, §7; seeds `Schedulers.Multicore` and `Schedulers.Sync`); Open MPI's "base" component: the
 * drivers in devices/cpu/ and devices/sync/ are small vtables over it.
 *
 * Both drivers have TROUPE_CPU_DEVICES devices (base/config.h; 1 by default, ordinals 0..N-1)
 * whose memory is host memory: a pool is a 64-byte aligned host allocation in the device's
 * table keyed by pool id (pool ids are per device); d2d between two devices is a memcpy. Their
 * queues run every operation immediately in the calling thread and their events are complete
 * when recorded; the two differ only in how the actors above drive them (sync: inline in the
 * caller; cpu: one stream actor thread per queue) and in suggested_num_streams (sync 1; cpu
 * the cores of the process's affinity split among the devices).
 * Code is C from compiler/cgen compiled through the shared compile cache (cc_cache_impl.h).
 *
 * The functions below are the vtable entries; each driver's vtable names them
 * (TROUPE__HDRV_ENTRIES), plus its own `open` (which passes its vtable to troupe__hdrv_open)
 * and `suggested_num_streams`. Their contracts are those of devices/device.h, with these
 * specifics:
 *   - an ordinal outside 0..N-1 is TROUPE_NOT_FOUND;
 *   - alloc_pool: size_bytes >= 0, ALREADY_EXISTS for a live pool id, RESOURCE_EXHAUSTED when
 *     the allocation fails or the pool is larger than TROUPE_HOST_MEMORY allows (base/config.h;
 *     checked before any memory is taken); a large pool is node-shareable memory when the
 *     transport asked for it (base/shared_memory_impl.h), else an ordinary aligned allocation,
 *     from 2 MiB on 2 MiB-aligned with transparent huge pages asked for;
 *   - host_ptr and every copy: NOT_FOUND for an unknown pool, INVALID_ARGUMENT for a negative
 *     offset or size or offset+size beyond the pool (the message names pool, offset and sizes);
 *     copies also reject a size larger than the buffer's size_bytes;
 *   - launch checks the argument count and kinds against the code's parameters, buffer sizes
 *     against the parameter's node size, and static indices against their range
 *     (INVALID_ARGUMENT naming the parameter index and what it expects).
 *
 * Thread safety: as device.h: the pool table is guarded by one mutex per opened driver; a
 * pointer from host_ptr stays valid until its pool is freed (the caller orders those).
 * Ownership: as device.h; close frees the pools still allocated.
 */
#ifndef TROUPE_DEVICES_HOST_HOST_IMPL_H
#define TROUPE_DEVICES_HOST_HOST_IMPL_H

#include "compiler/cgen.h"
#include "devices/device.h"

/* The designated initializers every host driver's vtable shares: all entries but name, open
 * and suggested_num_streams. */
#define TROUPE__HDRV_ENTRIES                                                                       \
    .close = troupe__hdrv_close, .num_devices = troupe__hdrv_num_devices,                          \
    .alloc_pool = troupe__hdrv_alloc_pool, .free_pool = troupe__hdrv_free_pool,                    \
    .host_ptr = troupe__hdrv_host_ptr, .queue_create = troupe__hdrv_queue_create,                  \
    .queue_destroy = troupe__hdrv_queue_destroy, .memset_zero = troupe__hdrv_memset_zero,          \
    .h2d = troupe__hdrv_h2d, .d2h = troupe__hdrv_d2h, .d2d = troupe__hdrv_d2d,                     \
    .compile = troupe__hdrv_compile, .code_release = troupe__hdrv_code_release,                    \
    .launch = troupe__hdrv_launch, .event_record = troupe__hdrv_event_record,                      \
    .event_query = troupe__hdrv_event_query, .event_wait = troupe__hdrv_event_wait,                \
    .event_release = troupe__hdrv_event_release

/* Opens a host driver whose vtable is `vt` (it must use the entries below).
 * RESOURCE_EXHAUSTED on allocation failure. */
troupe_status_t troupe__hdrv_open(const troupe_driver_vtable_t *vt, troupe_driver_t **out);
void troupe__hdrv_close(troupe_driver_t *drv);
int troupe__hdrv_num_devices(troupe_driver_t *drv);

troupe_status_t troupe__hdrv_alloc_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id,
                                        int64_t size_bytes, bool zero);
troupe_status_t troupe__hdrv_free_pool(troupe_driver_t *drv, int ordinal, int32_t pool_id);
troupe_status_t troupe__hdrv_host_ptr(troupe_driver_t *drv, int ordinal, troupe_buffer_loc_t buf,
                                      void **out);

troupe_status_t troupe__hdrv_queue_create(troupe_driver_t *drv, int ordinal, troupe_dqueue_t **out);
void troupe__hdrv_queue_destroy(troupe_driver_t *drv, troupe_dqueue_t *q);
troupe_status_t troupe__hdrv_memset_zero(troupe_driver_t *drv, troupe_dqueue_t *q,
                                         troupe_buffer_loc_t dst);
troupe_status_t troupe__hdrv_h2d(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_buffer_loc_t dst,
                                 const void *src, int64_t size_bytes);
troupe_status_t troupe__hdrv_d2h(troupe_driver_t *drv, troupe_dqueue_t *q, void *dst,
                                 troupe_buffer_loc_t src, int64_t size_bytes);
troupe_status_t troupe__hdrv_d2d(troupe_driver_t *drv, troupe_dqueue_t *q, int dst_ordinal,
                                 troupe_buffer_loc_t dst, int src_ordinal, troupe_buffer_loc_t src,
                                 int64_t size_bytes);

troupe_status_t troupe__hdrv_compile(troupe_driver_t *drv, const troupe_ll_proc_t *proc,
                                     troupe_dcode_t **out);
/* Offers the C code (TROUPE_CGEN_C) the caller already generated from `proc`
 * (actors/routine.c generates it for the parameter list): the calling thread's next
 * troupe__hdrv_compile of that same procedure uses it instead of generating it again, which
 * would give the same bytes (cgen is deterministic). Borrowed until the offer is withdrawn
 * with troupe__hdrv_offer_gen(NULL, NULL); thread-local; drivers other than cpu and sync never
 * look at it. */
void troupe__hdrv_offer_gen(const troupe_ll_proc_t *proc, const troupe_cgen_result_t *gen);
/* The options a driver of table `vt` compiles generated C with, into *o (zeroed first): for
 * the host drivers (cpu, sync) c_gemm_library_only when a GEMM library is in use
 * (TROUPE_GEMM is not `generated` and one loaded) and has every entry the loader hands
 * generated code (devices/host/gemm_library.h), as the loader decides at each load; for other
 * drivers all defaults (no library is loaded for them). Whoever offers code
 * (troupe__hdrv_offer_gen) generates it with these; code generated library-only is refused
 * (FAILED_PRECONDITION) by a compile while the library is not in use. */
void troupe__hdrv_cgen_options(const troupe_driver_vtable_t *vt, troupe_cgen_options_t *o);
void troupe__hdrv_code_release(troupe_driver_t *drv, troupe_dcode_t *code);
troupe_status_t troupe__hdrv_launch(troupe_driver_t *drv, troupe_dqueue_t *q, troupe_dcode_t *code,
                                    const troupe_karg_t *args, size_t nargs);

troupe_status_t troupe__hdrv_event_record(troupe_driver_t *drv, troupe_dqueue_t *q,
                                          troupe_devent_t **out);
troupe_status_t troupe__hdrv_event_query(troupe_driver_t *drv, troupe_devent_t *ev, bool *done);
troupe_status_t troupe__hdrv_event_wait(troupe_driver_t *drv, troupe_dqueue_t *q,
                                        troupe_devent_t *ev);
void troupe__hdrv_event_release(troupe_driver_t *drv, troupe_devent_t *ev);

#endif
