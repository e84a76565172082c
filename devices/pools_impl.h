/* troupe — what the drivers share (devices/device.h): the table of a device's pools, the checks
 * of copies and of a launch's arguments against the code's parameters, so that every driver
 * refuses the same mistakes with the same messages.
 *
 * Pools: a table of {pool id, base address, size} sorted by id (the base is a host pointer for
 * the host drivers, a device pointer for cuda); the caller guards it (each driver with its own
 * lock). Messages name the driver, the operation, the pool, the offset and the sizes.
 *
 * Thread safety: none of its own (the caller locks the table). Ownership: the table owns its
 * slot array (troupe__pools_free); the memory the bases point to is the driver's.
 */
#ifndef TROUPE_DEVICES_POOLS_IMPL_H
#define TROUPE_DEVICES_POOLS_IMPL_H

#include "base/status.h"
#include "compiler/cgen.h"
#include "devices/device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct troupe__pool_slot {
    int32_t id;
    void *base;
    int64_t size_bytes;
} troupe__pool_slot_t;

typedef struct troupe__pool_table {
    troupe__pool_slot_t *v; /* sorted by id */
    size_t n, cap;
} troupe__pool_table_t;

/* The slot of pool `id`, or NULL. */
troupe__pool_slot_t *troupe__pools_find(troupe__pool_table_t *t, int32_t id);

/* Before allocating pool `id`: ALREADY_EXISTS when it is live ("<drv> alloc_pool: pool N already
 * exists on device D (S bytes)"), RESOURCE_EXHAUSTED when the table cannot grow by one; after
 * TROUPE_OK, troupe__pools_insert cannot fail. */
troupe_status_t troupe__pools_reserve(troupe__pool_table_t *t, const char *drv, int ordinal,
                                      int32_t id);
void troupe__pools_insert(troupe__pool_table_t *t, troupe__pool_slot_t slot);
/* Removes pool `id` into *out: NOT_FOUND "<drv> free_pool: pool N not found on device D". */
troupe_status_t troupe__pools_remove(troupe__pool_table_t *t, const char *drv, int ordinal,
                                     int32_t id, troupe__pool_slot_t *out);
void troupe__pools_free(troupe__pool_table_t *t);

/* The address of `buf` (base + offset) after checking that it lies inside its pool:
 * INVALID_ARGUMENT for a negative offset or size or a buffer past the pool's end, NOT_FOUND for
 * an unknown pool; `op` names the operation ("h2d", "launch"...). */
troupe_status_t troupe__pools_resolve(troupe__pool_table_t *t, const char *drv, const char *op,
                                      int ordinal, troupe_buffer_loc_t buf, void **out);

/* A copy of size_bytes into or out of `buf` must fit it: INVALID_ARGUMENT otherwise. */
troupe_status_t troupe__check_copy_size(const char *drv, const char *op, troupe_buffer_loc_t buf,
                                        int64_t size_bytes);

/* ---- a launch's arguments ---------------------------------------------------------------- */

/* What a driver keeps of a code's parameter (compiler/cgen.h) to check arguments at launch. */
typedef struct troupe__kparam {
    troupe_cgen_param_kind_t kind;
    int64_t min_size_bytes; /* NODE_PTR / MERGE_BUFFER: the node's size */
    int64_t static_range;   /* STATIC_IDX: 0 = unbounded */
    char *ident;
} troupe__kparam_t;

/* The parameters of `gen` (gen->nparams entries, NULL when there are none) in *out.
 * RESOURCE_EXHAUSTED. */
troupe_status_t troupe__kparams_new(const troupe_cgen_result_t *gen, troupe__kparam_t **out);
void troupe__kparams_free(troupe__kparam_t *p, size_t n);

/* Checks argument i against parameter i: its kind, a static index within its range, a buffer at
 * least the node's size. INVALID_ARGUMENT naming the driver, the code, the parameter and what it
 * expects. */
troupe_status_t troupe__karg_check(const char *drv, const char *code, size_t i,
                                   const troupe__kparam_t *p, const troupe_karg_t *a);

#endif
