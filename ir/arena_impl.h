/* troupe — bump allocator for IR trees (internal; not installed).
 *
 * An arena hands out zero-filled, 16-byte-aligned blocks carved from chunks of at least
 * chunk_bytes, and frees them all at once when it is destroyed. A low-level procedure
 * (ir/lowlevel.h) and an assignment comp (ir/assign.h) each own one.
 *
 * Thread safety: none; an arena belongs to one owner, which serialises its use.
 * Ownership: the creator owns the arena and releases it with troupe__arena_destroy; blocks are
 * borrowed from the arena and live until it is destroyed.
 */
#ifndef TROUPE_IR_ARENA_IMPL_H
#define TROUPE_IR_ARENA_IMPL_H

#include <stddef.h>

/* Declared as well by ir/lowlevel.h (a procedure's field). */
typedef struct troupe_arena troupe_arena_t;

/* An empty arena whose chunks hold at least chunk_bytes (a larger block gets a chunk of its
 * own size). NULL when out of memory. */
troupe_arena_t *troupe__arena_new(size_t chunk_bytes);

/* Frees every block and the arena; accepts NULL and sets *arena_p to NULL. */
void troupe__arena_destroy(troupe_arena_t **arena_p);

/* A zero-filled block of size_bytes (rounded up to 16; 0 counts as 16), aligned to 16. NULL
 * when out of memory. */
void *troupe__arena_alloc(troupe_arena_t *arena, size_t size_bytes);

/* An arena copy of the NUL-terminated string s. NULL when out of memory. */
char *troupe__arena_strdup(troupe_arena_t *arena, const char *s);

#endif
