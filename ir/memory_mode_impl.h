/* troupe — what ir/tnode.c needs of the memory-mode lattice (internal; not installed).
 *
 * Thread safety: troupe__tnode_update_mode_locked runs with the node's lock held by the caller;
 * the rest are pure. Ownership: nothing is retained.
 */
#ifndef TROUPE_IR_MEMORY_MODE_IMPL_H
#define TROUPE_IR_MEMORY_MODE_IMPL_H

#include "base/strbuf.h"
#include "ir/memory_mode.h"

static inline troupe_memory_mode_t troupe__mm(troupe_memory_mode_kind_t kind,
                                              troupe_memory_type_t memtype,
                                              troupe_sharing_t sharing)
{
    troupe_memory_mode_t m = {kind, memtype, sharing};
    return m;
}

/* m is Hosted with memory type t. */
static inline bool troupe__mm_is_hosted(troupe_memory_mode_t m, troupe_memory_type_t t)
{
    return m.kind == TROUPE_MM_HOSTED && m.memtype == t;
}

/* troupe_tnode_update_memory_mode with tn->lock held. */
TROUPE_MUST_USE troupe_status_t troupe__tnode_update_mode_locked(troupe_tnode_t *tn,
                                                                 troupe_memory_mode_t mode,
                                                                 int32_t provenance);

/* Appends the mode as troupe_memory_mode_to_string writes it. */
void troupe__memory_mode_put(troupe__strbuf_t *sb, troupe_memory_mode_t m);

/* Appends "<mode>/<prov>", or "unknown" when !has (the seed's debug_memory_mode). */
void troupe__memory_mode_put_prov(troupe__strbuf_t *sb, bool has, troupe_memory_mode_t m,
                                  int32_t prov);

#endif
