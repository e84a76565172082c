/* troupe — replaceable allocation hooks.
 *
 * All host memory troupe allocates for its own objects goes through these functions, so an
 * embedding program can route it to its allocator (or count it in tests). Device memory
 * goes through the device drivers, not here.
 *
 * Thread safety: troupe_alloc_* are thread-safe. troupe_set_allocator must be called before
 * any other troupe call (it is not synchronised with allocations in flight).
 * Ownership: memory from troupe_malloc/calloc/realloc is released with troupe_free.
 */
#ifndef TROUPE_BASE_ALLOC_H
#define TROUPE_BASE_ALLOC_H

#include "troupe/base/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct troupe_allocator {
    void *(*malloc_fn)(void *user, size_t size_bytes);
    void *(*realloc_fn)(void *user, void *ptr, size_t size_bytes);
    void (*free_fn)(void *user, void *ptr);
    void *user;
} troupe_allocator_t;

/* Installs `a` (copied); NULL restores the C library's malloc/realloc/free. */
void troupe_set_allocator(const troupe_allocator_t *a);

/* Like malloc/calloc/realloc/free/strdup; NULL on failure (callers return
 * TROUPE_RESOURCE_EXHAUSTED). troupe_calloc checks count*size for overflow. */
void *troupe_malloc(size_t size_bytes);
void *troupe_calloc(size_t count, size_t size_bytes);
void *troupe_realloc(void *ptr, size_t size_bytes);
void troupe_free(void *ptr);
char *troupe_strdup(const char *s);

/* Like asprintf: the printf-formatted text in memory from troupe_malloc; NULL when out of
 * memory or on an encoding error. */
char *troupe_strdup_printf(const char *fmt, ...) TROUPE_PRINTF(1, 2);

#ifdef __cplusplus
}
#endif
#endif
