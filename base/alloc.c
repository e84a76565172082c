#include "base/alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *s_default_malloc(void *user, size_t n)
{
    (void)user;
    return malloc(n);
}
static void *s_default_realloc(void *user, void *p, size_t n)
{
    (void)user;
    return realloc(p, n);
}
static void s_default_free(void *user, void *p)
{
    (void)user;
    free(p);
}

static troupe_allocator_t s_alloc = {s_default_malloc, s_default_realloc, s_default_free, NULL};

void troupe_set_allocator(const troupe_allocator_t *a)
{
    if (a == NULL || a->malloc_fn == NULL || a->realloc_fn == NULL || a->free_fn == NULL) {
        s_alloc = (troupe_allocator_t){s_default_malloc, s_default_realloc, s_default_free, NULL};
        return;
    }
    s_alloc = *a;
}

void *troupe_malloc(size_t n)
{
    return s_alloc.malloc_fn(s_alloc.user, n == 0 ? 1 : n);
}

void *troupe_calloc(size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size)
        return NULL;
    size_t n = count * size;
    void *p = troupe_malloc(n);
    if (p != NULL)
        memset(p, 0, n == 0 ? 1 : n);
    return p;
}

void *troupe_realloc(void *p, size_t n)
{
    return s_alloc.realloc_fn(s_alloc.user, p, n == 0 ? 1 : n);
}

void troupe_free(void *p)
{
    if (p != NULL)
        s_alloc.free_fn(s_alloc.user, p);
}

char *troupe_strdup(const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = troupe_malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

char *troupe_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = troupe_malloc((size_t)n + 1);
    if (s == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}
