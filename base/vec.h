/* troupe — growing arrays (internal; not installed).
 *
 * The one grow loop: troupe__vec_reserve makes an array of `elem_bytes` elements hold at least
 * `need` of them, doubling its capacity (first 8), with overflow checks, through the allocation
 * hooks. TROUPE__VEC_RESERVE and TROUPE__VEC_PUSH are typed shorthands:
 *
 *     if (!TROUPE__VEC_PUSH(v->items, v->count, v->cap, item))
 *         return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "...");
 *
 * Thread safety: none; the caller owns the array.
 * Ownership: the array is released with troupe_free by its owner.
 */
#ifndef TROUPE_BASE_VEC_H
#define TROUPE_BASE_VEC_H

#include "base/alloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Grows *data (capacity *cap elements) to hold `need` elements. false on overflow or out of
 * memory, with *data and *cap unchanged. New elements are not initialised. */
static inline bool troupe__vec_reserve(void **data, size_t *cap, size_t need, size_t elem_bytes)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return false;
        n *= 2;
    }
    if (elem_bytes != 0 && n > SIZE_MAX / elem_bytes)
        return false;
    void *p = troupe_realloc(*data, n * elem_bytes);
    if (p == NULL)
        return false;
    *data = p;
    *cap = n;
    return true;
}

/* `ptr` an lvalue pointer to the elements, `cap` an lvalue size_t. */
#define TROUPE__VEC_RESERVE(ptr, cap, need)                                                  \
    troupe__vec_reserve((void **)&(ptr), &(cap), (size_t)(need), sizeof *(ptr))

/* Appends `item` at ptr[count] and increments `count`; false (nothing changed) when out of
 * memory. */
#define TROUPE__VEC_PUSH(ptr, count, cap, item)                                              \
    (TROUPE__VEC_RESERVE(ptr, cap, (count) + 1) ? ((ptr)[(count)++] = (item), true) : false)

#endif
