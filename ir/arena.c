/* troupe — bump allocator for IR trees (see ir/arena_impl.h). */
#include "ir/arena_impl.h"

#include "base/alloc.h"

#include <stdint.h>
#include <string.h>

typedef struct s_chunk {
    struct s_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} s_chunk_t;

struct troupe_arena {
    s_chunk_t *head;
    size_t chunk_bytes;
};

troupe_arena_t *troupe__arena_new(size_t chunk_bytes)
{
    troupe_arena_t *a = troupe_calloc(1, sizeof *a);
    if (a != NULL)
        a->chunk_bytes = chunk_bytes;
    return a;
}

void troupe__arena_destroy(troupe_arena_t **arena_p)
{
    if (arena_p == NULL || *arena_p == NULL)
        return;
    s_chunk_t *c = (*arena_p)->head;
    while (c != NULL) {
        s_chunk_t *next = c->next;
        troupe_free(c);
        c = next;
    }
    troupe_free(*arena_p);
    *arena_p = NULL;
}

void *troupe__arena_alloc(troupe_arena_t *a, size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    n = (n + 15u) & ~(size_t)15u;
    if (n == 0)
        n = 16;
    if (a->head == NULL || a->head->cap - a->head->used < n) {
        size_t cap = n > a->chunk_bytes ? n : a->chunk_bytes;
        s_chunk_t *c = troupe_malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *troupe__arena_strdup(troupe_arena_t *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = troupe__arena_alloc(a, n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}
