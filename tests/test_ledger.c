/* Tests of the coherence ledger's lookup (actors/ledger.h): its hash index finds every entry
 * added, through growth past its first table, after a pool's entries are forgotten and after a
 * clear, and never finds an entry that is gone. */
#include "actors/ledger.h"

#include "runtime_test_util.h"

#include <criterion/criterion.h>

enum { S_POOLS = 3, S_PER_POOL = 40 };

static troupe_buffer_loc_t s_loc(int pool, int k)
{
    /* offsets that collide in their low bits, as arrays of one size in a pool do */
    return (troupe_buffer_loc_t){pool, (int64_t)k * 4096, 4096};
}

/* Adds S_POOLS x S_PER_POOL arrays; each add of a known array returns its entry. */
static void s_fill(troupe__ledger_t *l, troupe_tnode_t *tn, troupe__entry_t **e)
{
    for (int p = 0; p < S_POOLS; p++)
        for (int k = 0; k < S_PER_POOL; k++)
            OK(troupe__ledger_add(l, tn, s_loc(p, k), false, &e[p * S_PER_POOL + k]));
    cr_assert_eq(l->nentries, (size_t)(S_POOLS * S_PER_POOL));
    for (int p = 0; p < S_POOLS; p++)
        for (int k = 0; k < S_PER_POOL; k++) {
            troupe__entry_t *again = NULL;
            OK(troupe__ledger_add(l, tn, s_loc(p, k), false, &again));
            cr_assert_eq(again, e[p * S_PER_POOL + k], "pool %d array %d added twice", p, k);
        }
    cr_assert_eq(l->nentries, (size_t)(S_POOLS * S_PER_POOL));
}

Test(ledger, finds_every_entry_after_growth_removal_and_clear)
{
    troupe_tnode_t *tn = rtu_node("a", TROUPE_PREC_SINGLE, 1, (int64_t[]){1024});
    troupe__ledger_t l = {0};
    troupe__entry_t *e[S_POOLS * S_PER_POOL];
    s_fill(&l, tn, e);
    for (int p = 0; p < S_POOLS; p++)
        for (int k = 0; k < S_PER_POOL; k++)
            cr_assert_eq(troupe__ledger_find(&l, troupe__key_of(s_loc(p, k))),
                         e[p * S_PER_POOL + k], "pool %d array %d", p, k);
    cr_assert_null(troupe__ledger_find(&l, troupe__key_of(s_loc(S_POOLS, 0))));
    cr_assert_null(troupe__ledger_find(&l, troupe__key_of(s_loc(0, S_PER_POOL))));
    /* pool 1 freed: its arrays are gone, the others still found */
    troupe__ledger_remove_pool(&l, 1);
    cr_assert_eq(l.nentries, (size_t)((S_POOLS - 1) * S_PER_POOL));
    for (int p = 0; p < S_POOLS; p++)
        for (int k = 0; k < S_PER_POOL; k++) {
            troupe__entry_t *f = troupe__ledger_find(&l, troupe__key_of(s_loc(p, k)));
            cr_assert_eq(f, p == 1 ? NULL : e[p * S_PER_POOL + k], "pool %d array %d", p, k);
        }
    /* re-added, pool 1's arrays are new entries, found again */
    for (int k = 0; k < S_PER_POOL; k++) {
        troupe__entry_t *n = NULL;
        OK(troupe__ledger_add(&l, tn, s_loc(1, k), false, &n));
        cr_assert_eq(troupe__ledger_find(&l, troupe__key_of(s_loc(1, k))), n);
        cr_assert_eq(n->host_gen, -1);
    }
    /* cleared, nothing is found; refilled, everything is */
    troupe__ledger_clear(&l);
    cr_assert_eq(l.nentries, 0);
    cr_assert_null(troupe__ledger_find(&l, troupe__key_of(s_loc(0, 0))));
    s_fill(&l, tn, e);
    for (int i = 0; i < S_POOLS * S_PER_POOL; i++)
        cr_assert_eq(troupe__ledger_find(&l, e[i]->key), e[i]);
    troupe__ledger_clear(&l);
    troupe_tnode_release(&tn);
}
