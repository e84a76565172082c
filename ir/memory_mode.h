/* troupe — memory modes of tensor nodes (seed `Tnode.memory_mode`, OCANNL_NOTES §5): where a
 * node's array lives (nowhere: inlined; on the stack of a routine; on each device; on the host
 * too) and whether the streams of a device share it.
 *
 * Memory modes and sharing follow the seed's refinement lattice (OCANNL_NOTES §5):
 *   Effectively_constant  = Hosted Constant, or a kind of Virtual
 *   Never_virtual         = Local | On_device | Hosted
 *   Device_only           = Local | On_device
 *   Materialized          = On_device | Hosted
 * with sharing Per_stream | Shared_cross_streams (or unset) for On_device and
 * Hosted (Changed_on_devices s), and hosted memory types Constant | Nonconstant
 * (= Changed_on_devices | Volatile) | Changed_on_devices s | Volatile | Unset_hosted.
 * Each refinement records a provenance code (OCANNL_NOTES §5.3): an int naming the call
 * site that fixed it, chained as old*1000+new where OCANNL does, and printed in errors.
 *
 * The functions on a node read or refine the mode it records (ir/tnode.h) under the node's
 * lock; the optimizer (compiler/optimize.h), linking and transfers (actors/) ask them.
 *
 * Thread safety: every function here is thread-safe (the node's lock).
 * Ownership: nothing is retained; text goes to caller-owned buffers (snprintf convention).
 */
#ifndef TROUPE_IR_MEMORY_MODE_H
#define TROUPE_IR_MEMORY_MODE_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A node (ir/tnode.h). */
typedef struct troupe_tnode troupe_tnode_t;

typedef enum troupe_sharing {
    TROUPE_SHARING_UNSET = 0,
    TROUPE_SHARING_PER_STREAM,
    TROUPE_SHARING_SHARED_CROSS_STREAMS,
} troupe_sharing_t;

typedef enum troupe_memory_type {
    TROUPE_MEMTYPE_UNSET_HOSTED = 0,
    TROUPE_MEMTYPE_CONSTANT,
    TROUPE_MEMTYPE_NONCONSTANT,        /* one of Changed_on_devices, Volatile */
    TROUPE_MEMTYPE_CHANGED_ON_DEVICES, /* with a sharing */
    TROUPE_MEMTYPE_VOLATILE,
} troupe_memory_type_t;

typedef enum troupe_memory_mode_kind {
    TROUPE_MM_EFFECTIVELY_CONSTANT = 1,
    TROUPE_MM_VIRTUAL,
    TROUPE_MM_NEVER_VIRTUAL,
    TROUPE_MM_LOCAL,
    TROUPE_MM_DEVICE_ONLY,
    TROUPE_MM_ON_DEVICE, /* with a sharing */
    TROUPE_MM_MATERIALIZED,
    TROUPE_MM_HOSTED, /* with a memory type */
} troupe_memory_mode_kind_t;

/* A memory mode: `kind`, plus `memtype` for HOSTED and `sharing` for ON_DEVICE and
 * HOSTED/CHANGED_ON_DEVICES (ignored otherwise, keep 0). */
typedef struct troupe_memory_mode {
    troupe_memory_mode_kind_t kind;
    troupe_memory_type_t memtype;
    troupe_sharing_t sharing;
} troupe_memory_mode_t;

/* "Virtual", "On_device(Per_stream)", "Hosted(Changed_on_devices(Shared_cross_streams))", ... */
size_t troupe_memory_mode_to_string(troupe_memory_mode_t m, char *buf, size_t cap);

/* Refines tn's memory mode by the seed's rules (OCANNL_NOTES §5.2). An inconsistent update
 * returns FAILED_PRECONDITION naming the node, the current mode/provenance and the requested
 * mode/provenance; the mode is unchanged. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_update_memory_mode(troupe_tnode_t *tn,
                                                                troupe_memory_mode_t mode,
                                                                int32_t provenance);
/* Refines only the sharing (seed update_memory_sharing): an unset mode, Device_only,
 * Materialized and On_device(Unset) become On_device(sharing); Hosted Nonconstant (also
 * Unset_hosted and Changed_on_devices(Unset)) specialises to Hosted(Changed_on_devices sharing)
 * with the provenance chained (old*1000+new); Hosted Constant/Volatile accept only
 * Shared_cross_streams; un-setting is an error. FAILED_PRECONDITION as above. */
TROUPE_MUST_USE troupe_status_t troupe_tnode_update_memory_sharing(troupe_tnode_t *tn,
                                                                   troupe_sharing_t sharing,
                                                                   int32_t provenance);
/* Snapshot of the mode (false when unset). */
bool troupe_tnode_get_memory_mode(troupe_tnode_t *tn, troupe_memory_mode_t *mode,
                                  int32_t *provenance);

/* Seed `default_to_most_local`: resolves placeholders. Unset/Effectively_constant ->
 * Virtual; Never_virtual/Device_only -> Local if size_bytes <= stack threshold
 * (troupe_config_stack_threshold_bytes) else On_device(Unset); Materialized ->
 * On_device(Unset). Sharing stays unset. */
void troupe_tnode_default_to_most_local(troupe_tnode_t *tn, int32_t provenance);
/* The same with `local_max_bytes` for the stack threshold (negative: the configured one; 0: no
 * node becomes Local). The optimizer's, per backend (compiler/optimize.h, local_max_bytes). */
void troupe_tnode_default_to_most_local_within(troupe_tnode_t *tn, int32_t provenance,
                                               int64_t local_max_bytes);

/* Seed predicates on the current mode, no refinement. */
bool troupe_tnode_known_not_materialized(troupe_tnode_t *tn); /* Virtual or Local */
bool troupe_tnode_known_hosted(troupe_tnode_t *tn);           /* Hosted, any memory type */
/* Effectively_constant or Hosted Constant (as the seed). */
bool troupe_tnode_known_constant(troupe_tnode_t *tn);
bool troupe_tnode_known_volatile(troupe_tnode_t *tn);         /* Hosted Volatile */
bool troupe_tnode_known_non_virtual(troupe_tnode_t *tn);
bool troupe_tnode_known_virtual(troupe_tnode_t *tn);
bool troupe_tnode_known_non_cross_stream(troupe_tnode_t *tn); /* sharing Per_stream */
/* One array per device for all its streams: On_device(Shared_cross_streams), Hosted Constant,
 * Hosted Volatile, Hosted(Changed_on_devices(Shared_cross_streams)). */
bool troupe_tnode_known_shared_cross_streams(troupe_tnode_t *tn);
bool troupe_tnode_potentially_cross_stream(troupe_tnode_t *tn);
/* Unset, Never_virtual or Effectively_constant (the seed's choice of placeholders). */
bool troupe_tnode_mode_is_unspecified(troupe_tnode_t *tn);
/* *_force: resolve placeholders with default_to_most_local first, then answer. */
bool troupe_tnode_is_virtual_force(troupe_tnode_t *tn, int32_t provenance);
bool troupe_tnode_is_hosted_force(troupe_tnode_t *tn, int32_t provenance);
bool troupe_tnode_is_materialized_force(troupe_tnode_t *tn, int32_t provenance);
/* In a context (an array per stream/device): Hosted (not constant/volatile on unified host
 * memory), On_device, Materialized; not Virtual/Local. */
bool troupe_tnode_is_in_context_force(troupe_tnode_t *tn, bool use_host_memory,
                                      int32_t provenance);

#ifdef __cplusplus
}
#endif
#endif
