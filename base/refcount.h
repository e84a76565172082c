/* troupe — atomic reference counts for objects two actors can reach.
 *
 * Usage: embed `troupe_refcount_t refs;` initialised with troupe_refcount_init (count 1);
 * troupe_refcount_retain on each new owner; when troupe_refcount_release returns true
 * the caller held the last reference and destroys the object.
 *
 * Thread safety: all operations are atomic (acquire/release ordering on the final drop).
 * Ownership: none; the counter lives inside the object it counts.
 */
#ifndef TROUPE_BASE_REFCOUNT_H
#define TROUPE_BASE_REFCOUNT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct troupe_refcount {
    atomic_int_fast32_t count;
} troupe_refcount_t;

static inline void troupe_refcount_init(troupe_refcount_t *r)
{
    atomic_init(&r->count, 1);
}

static inline void troupe_refcount_retain(troupe_refcount_t *r)
{
    atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
}

/* Returns true when this call dropped the last reference. */
static inline bool troupe_refcount_release(troupe_refcount_t *r)
{
    /* acq_rel rather than release + fence: ThreadSanitizer does not model fences. */
    return atomic_fetch_sub_explicit(&r->count, 1, memory_order_acq_rel) == 1;
}

static inline int_fast32_t troupe_refcount_get(troupe_refcount_t *r)
{
    return atomic_load_explicit(&r->count, memory_order_relaxed);
}

#endif
