/* troupe — the pieces of the IR's structural equalities (internal; not installed):
 * troupe_asgn_equal (ir/assign.c) and troupe_ll_equal / troupe_sc_equal (ir/lowlevel.c) compare
 * nodes by id, constants bit for bit and sequences item by item, the same way.
 *
 * Thread safety: pure functions. Ownership: nothing is retained.
 */
#ifndef TROUPE_IR_EQUAL_IMPL_H
#define TROUPE_IR_EQUAL_IMPL_H

#include "ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The start of a structural equality of two trees tagged by `kind`: equal when they are the
 * same tree, unequal when one is missing or their kinds differ. */
#define TROUPE__IR_EQUAL_START(a, b)                                                               \
    do {                                                                                           \
        if ((a) == (b))                                                                            \
            return true;                                                                           \
        if ((a) == NULL || (b) == NULL || (a)->kind != (b)->kind)                                  \
            return false;                                                                          \
    } while (0)

/* Both nodes exist and have one id. */
static inline bool troupe__ir_same_node(const troupe_tnode_t *a, const troupe_tnode_t *b)
{
    return a != NULL && b != NULL && a->id == b->id;
}

/* The same bits (so NaN equals NaN and -0 differs from +0). */
static inline bool troupe__ir_same_bits(const double *a, const double *b, size_t count)
{
    return count == 0 || memcmp(a, b, count * sizeof *a) == 0;
}

/* Two sequences of na and nb trees, equal item by item under eq. */
static inline bool troupe__ir_items_equal(const void *const *a, size_t na, const void *const *b,
                                          size_t nb, bool (*eq)(const void *, const void *))
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!eq(a[i], b[i]))
            return false;
    return true;
}

#endif
