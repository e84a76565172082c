/* fmnist's sharded training data (examples/fmnist/loader.h): for layouts with x_all holding
 * only this rank's rows (K N) and a row per replica (K T), every step's row that parallel/dp.h
 * binds for micro-step j and replica k holds the minibatch the whole-set trainer gives it
 * (positions g B .. g B + B - 1 of the shuffled order, g = (s K + j) T + o + k mod S K T),
 * across epochs and from a step other than 0, and the rows of other ranks stay zero. */
#include "examples/fmnist/idx.h"
#include "examples/fmnist/loader.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 4, CLASSES = 10, B = 3, S = 5 };

/* The item an x row encodes: pixels 0 and 1 hold item mod 200 and item / 200. */
static int64_t s_item(const float *row)
{
    return (int64_t)lrintf(row[0] * 255.0f) + 200 * (int64_t)lrintf(row[1] * 255.0f);
}

static void s_check_layout(int64_t K, int64_t T, int64_t o, int64_t N, int64_t R, bool equal,
                           int64_t want_rows)
{
    fmnist_share_t sh;
    cr_assert_eq(fmnist_share_init(B, S, K, T, o, N, R, equal, &sh), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(sh.rows, want_rows, "K %lld T %lld N %lld R %lld: rows", (long long)K,
                 (long long)T, (long long)N, (long long)R);
    int64_t total = S * K * T * B + 2; /* the shuffled set, with a tail no step takes */
    int64_t *order = malloc((size_t)total * sizeof *order);
    fmnist_shuffle_order(total, 11, order);
    int64_t n = fmnist_share_count(&sh);
    cr_assert_eq(n, S * K * N * B);
    int64_t *items = malloc((size_t)n * sizeof *items);
    fmnist_share_items(&sh, order, items);
    fmnist_dataset_t share = {n, 1, IN, malloc((size_t)(n * IN)), malloc((size_t)n)};
    for (int64_t i = 0; i < n; i++) {
        uint8_t *px = share.pixels + i * IN;
        px[0] = (uint8_t)(items[i] % 200);
        px[1] = (uint8_t)(items[i] / 200);
        px[2] = px[3] = 7;
        share.labels[i] = (uint8_t)(items[i] % CLASSES);
    }
    fmnist_loader_t *l = NULL;
    int64_t first = 3; /* a resumed run */
    cr_assert_eq(fmnist_loader_new(&sh, &share, IN, CLASSES, first, &l), TROUPE_OK, "%s",
                 troupe_last_error());
    for (int64_t s = first; s < first + 2 * S; s++) {
        const float *x = NULL, *y = NULL;
        cr_assert_eq(fmnist_loader_next(l, &x, &y), TROUPE_OK);
        bool mine[64] = {false};
        for (int64_t j = 0; j < K; j++)
            for (int64_t k = 0; k < N; k++) {
                int64_t g = ((s * K + j) * T + o + k) % (S * K * T); /* the whole-set minibatch */
                int64_t row = ((s * K + j) * T + o + k) % sh.rows;    /* the row dp binds */
                cr_assert(!mine[row], "step %lld: row %lld taken twice", (long long)s,
                          (long long)row);
                mine[row] = true;
                for (int64_t i = 0; i < B; i++) {
                    const float *xr = x + (row * B + i) * IN, *yr = y + (row * B + i) * CLASSES;
                    int64_t want = order[g * B + i];
                    cr_assert_eq(s_item(xr), want, "step %lld j %lld k %lld row %lld",
                                 (long long)s, (long long)j, (long long)k, (long long)i);
                    cr_assert_eq(xr[2], (float)(7 * (1.0 / 255.0)), "scaled as the trainer");
                    for (int c = 0; c < CLASSES; c++)
                        cr_assert_eq(yr[c], c == want % CLASSES ? 1.0f : 0.0f, "one-hot");
                }
            }
        for (int64_t row = 0; row < sh.rows; row++)
            for (int64_t i = 0; !mine[row] && i < B * IN; i++)
                cr_assert_eq(x[row * B * IN + i], 0.0f, "another rank's row %lld", (long long)row);
    }
    fmnist_loader_destroy(&l);
    cr_assert_null(l);
    fmnist_dataset_free(&share);
    free(items);
    free(order);
}

Test(fmnist_loader, rows_hold_the_whole_set_minibatches)
{
    s_check_layout(1, 1, 0, 1, 1, true, 1);  /* one rank */
    s_check_layout(1, 2, 1, 1, 2, true, 1);  /* rank 1 of 2: its own row only */
    s_check_layout(2, 6, 2, 2, 3, true, 4);  /* K 2, 3 ranks of 2: gcd 1, K N rows */
    s_check_layout(2, 4, 2, 2, 2, true, 8);  /* K 2 on 2 ranks: a row per replica */
    s_check_layout(1, 3, 2, 1, 2, false, 3); /* 2 + 1 streams: a row per replica */
}

Test(fmnist_loader, bad_layouts_are_refused)
{
    fmnist_share_t sh;
    cr_assert_eq(fmnist_share_init(B, S, 1, 2, 1, 2, 2, true, &sh), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "replicas [1, 3) of 2"), "%s", troupe_last_error());
    cr_assert_eq(fmnist_share_init(B, 0, 1, 1, 0, 1, 1, true, &sh), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(fmnist_share_init(B, S, 1, 1, 0, 1, 1, true, &sh), TROUPE_OK);
    fmnist_dataset_t wrong = {S * B - 1, 1, IN, calloc(S * B, IN), calloc(S * B, 1)};
    fmnist_loader_t *l = NULL;
    cr_assert_eq(fmnist_loader_new(&sh, &wrong, IN, CLASSES, 0, &l), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "the share holds 14 items"), "%s", troupe_last_error());
    wrong.count = S * B;
    wrong.labels[3] = CLASSES;
    cr_assert_eq(fmnist_loader_new(&sh, &wrong, IN, CLASSES, 0, &l), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "label 10 of item 3"), "%s", troupe_last_error());
    cr_assert_null(l);
    fmnist_dataset_free(&wrong);
}
