/* Tests of examples/gpt/loader.h: the batch order (llm.c's sequential one with its wrap, the
 * shuffled one a permutation of each pass's sequence slots), the loader's per-rank shares
 * (together the whole batch, across shard boundaries, from any starting step) and bad shards
 * refused by name, at opening and when a file changes under a running loader. */
#define _POSIX_C_SOURCE 200809L
#include "llmc.h"
#include "loader.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(x) cr_assert_eq((x), TROUPE_OK, "%s", troupe_last_error())

static char s_dir[256];

static void s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "%s/gpt-loader-%ld", TROUPE_TEST_BUILD_DIR, (long)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static void s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(gpt_loader, .init = s_setup, .fini = s_teardown);

static char *s_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", s_dir, name);
    return p[k];
}

/* The token at place i of the test stream (distinct neighbours, below V = 251). */
static uint16_t s_tok(size_t i)
{
    return (uint16_t)((i * 7 + i / 251) % 251);
}

/* A shard holding tokens [from, from + n) of the test stream. */
static void s_shard(const char *name, size_t from, size_t n)
{
    uint16_t *t = malloc(n * sizeof *t + 2);
    for (size_t i = 0; i < n; i++)
        t[i] = s_tok(from + i);
    OK(gpt_llmc_shard_write(s_path(name), t, n));
    free(t);
}

Test(gpt_loader, sequential_order_is_llmc_s_and_wraps_to_token_0)
{
    gpt_order_t o = {.batch = 3, .seq = 4, .count = 50};
    cr_assert_eq(gpt_order_batches(&o), 4); /* (50 - 1) / 12: the fifth would need token 60 */
    for (int64_t s = 0; s < 10; s++)
        for (int64_t i = 0; i < 3; i++)
            cr_assert_eq(gpt_order_start(&o, s, i), (size_t)(((s % 4) * 3 + i) * 4),
                         "step %lld sequence %lld", (long long)s, (long long)i);
}

/* The starts of pass `pass`'s sequences, in order, into out (nb B). */
static void s_pass(const gpt_order_t *o, int64_t pass, size_t *out)
{
    int64_t nb = gpt_order_batches(o);
    for (int64_t s = 0; s < nb; s++)
        for (int64_t i = 0; i < o->batch; i++)
            out[s * o->batch + i] = gpt_order_start(o, pass * nb + s, i);
}

Test(gpt_loader, shuffled_pass_is_a_permutation_of_the_slots_keyed_by_seed_and_pass)
{
    gpt_order_t o = {.batch = 4, .seq = 5, .count = 1000, .shuffle = true, .seed = 7};
    int64_t nb = gpt_order_batches(&o);
    size_t n = (size_t)(nb * o.batch);
    cr_assert_eq(nb, 49);
    size_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    char *seen = malloc(n);
    for (int64_t pass = 0; pass < 3; pass++) {
        s_pass(&o, pass, a);
        memset(seen, 0, n);
        size_t moved = 0;
        for (size_t j = 0; j < n; j++) {
            cr_assert_eq(a[j] % 5, 0, "a sequence starts on a slot");
            cr_assert_lt(a[j] / 5, n, "within the pass's slots");
            cr_assert_eq(seen[a[j] / 5], 0, "pass %lld takes slot %zu twice", (long long)pass,
                         a[j] / 5);
            seen[a[j] / 5] = 1;
            moved += a[j] != j * 5;
        }
        cr_assert_gt(moved, n / 2, "pass %lld is shuffled (%zu of %zu moved)", (long long)pass,
                     moved, n);
    }
    s_pass(&o, 0, a);
    s_pass(&o, 1, b);
    cr_assert_neq(memcmp(a, b, n * sizeof *a), 0, "each pass has an order of its own");
    o.seed = 8;
    s_pass(&o, 0, b);
    cr_assert_neq(memcmp(a, b, n * sizeof *a), 0, "the seed decides the order");
    o.seed = 7;
    s_pass(&o, 0, b);
    cr_assert_eq(memcmp(a, b, n * sizeof *a), 0, "and only the seed");
    free(a);
    free(b);
    free(seen);
}

/* R loaders (ranks) of B / R sequences each, in K runs (micro-steps: run j of rank r holds
 * sequences (j R + r) b + [0, b), b = B / (R K)), from step `from`: for `steps` steps, their
 * shares together are the batch the order names, read across the shard boundaries. */
static void s_check_shares(gpt_shards_t *sh, const gpt_order_t *o, int R, int K, int64_t from,
                           int64_t steps)
{
    int64_t b = o->batch / (R * K), T = o->seq;
    gpt_loader_t *l[4] = {0};
    for (int r = 0; r < R; r++)
        OK(gpt_loader_new(sh, o, r * b, b, K, R * b, from, &l[r]));
    size_t nt = (size_t)(K * b * T);
    int32_t *x = malloc(nt * sizeof *x), *y = malloc(nt * sizeof *y);
    for (int64_t s = from; s < from + steps; s++)
        for (int r = 0; r < R; r++) {
            OK(gpt_loader_next(l[r], x, y));
            for (int64_t i = 0; i < K * b; i++) {
                size_t at = gpt_order_start(o, s, (i / b * R + r) * b + i % b);
                for (int64_t t = 0; t < T; t++) {
                    cr_assert_eq(x[i * T + t], s_tok(at + (size_t)t),
                                 "R=%d rank %d step %lld sequence %lld input %lld", R, r,
                                 (long long)s, (long long)i, (long long)t);
                    cr_assert_eq(y[i * T + t], s_tok(at + (size_t)t + 1),
                                 "R=%d rank %d step %lld sequence %lld target %lld", R, r,
                                 (long long)s, (long long)i, (long long)t);
                }
            }
        }
    for (int r = 0; r < R; r++)
        gpt_loader_destroy(&l[r]);
    free(x);
    free(y);
}

Test(gpt_loader, rank_shares_make_each_batch_across_shards_and_passes)
{
    s_shard("s_000.bin", 0, 70);
    s_shard("s_001.bin", 70, 45);
    s_shard("s_002.bin", 115, 90);
    gpt_shards_t *sh = NULL;
    OK(gpt_shards_open(s_path("s_*.bin"), 256, 33, &sh));
    cr_assert_eq(gpt_shards_count(sh), 205);
    cr_assert_eq(gpt_shards_files(sh), 3);
    gpt_order_t o = {.batch = 4, .seq = 8, .count = gpt_shards_count(sh)};
    cr_assert_eq(gpt_order_batches(&o), 6);
    for (int R = 1; R <= 4; R *= 2) {
        o.shuffle = false;
        s_check_shares(sh, &o, R, 1, 0, 14); /* past two wraps */
        o.shuffle = true;
        s_check_shares(sh, &o, R, 1, 0, 14);
    }
    o.shuffle = false;
    s_check_shares(sh, &o, 2, 2, 0, 14); /* 2 micro-steps (--grad-accum) */
    s_check_shares(sh, &o, 2, 1, 5, 3);  /* a resumed run starts at its step */
    gpt_shards_close(&sh);
}

static void s_refused(const char *pattern, size_t min, const char *bad, const char *words)
{
    gpt_shards_t *sh = NULL;
    troupe_status_t st = gpt_shards_open(pattern, 251, min, &sh);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: status %d", words, st);
    cr_expect_null(sh);
    cr_expect(strstr(troupe_last_error(), bad), "names %s: %s", bad, troupe_last_error());
    cr_expect(strstr(troupe_last_error(), words), "says '%s': %s", words, troupe_last_error());
}

Test(gpt_loader, bad_shards_are_refused_by_name)
{
    s_shard("a_000.bin", 0, 40);
    FILE *f = fopen(s_path("a_001.bin"), "wb");
    fputs("not a shard", f);
    fclose(f);
    s_refused(s_path("a_*.bin"), 17, "a_001.bin", "truncated");
    uint16_t big[40] = {0};
    big[33] = 251; /* V = 251 */
    OK(gpt_llmc_shard_write(s_path("a_001.bin"), big, 40));
    s_refused(s_path("a_*.bin"), 17, "a_001.bin",
              "token 251 at position 33 is not below the vocabulary size V = 251");
    s_shard("a_001.bin", 0, 16);
    s_refused(s_path("a_*.bin"), 17, "a_001.bin", "fewer than one batch needs");
    gpt_shards_t *sh = NULL;
    cr_assert_eq(gpt_shards_open(s_path("none_*.bin"), 251, 1, &sh), TROUPE_NOT_FOUND);
    cr_expect(strstr(troupe_last_error(), "no token shard matches"), "%s", troupe_last_error());
    OK(gpt_shards_open(s_path("a_000.bin"), 251, 1, &sh));
    uint16_t t[8];
    cr_assert_eq(gpt_shards_read(sh, 36, 5, t), TROUPE_INVALID_ARGUMENT, "beyond the end");
    gpt_shards_close(&sh);
}

Test(gpt_loader, a_shard_spoiled_under_a_running_loader_fails_its_batch_by_name)
{
    s_shard("c_000.bin", 0, 100);
    gpt_shards_t *sh = NULL;
    OK(gpt_shards_open(s_path("c_000.bin"), 251, 17, &sh));
    gpt_order_t o = {.batch = 2, .seq = 8, .count = gpt_shards_count(sh)};
    gpt_loader_t *l = NULL;
    int32_t x[16], y[16];
    OK(gpt_loader_new(sh, &o, 0, 2, 1, 2, 0, &l));
    OK(gpt_loader_next(l, x, y)); /* batch 0; batch 1 (tokens 16..32) loads now */
    OK(gpt_loader_next(l, x, y)); /* batch 1; batch 2 (tokens 32..48) loads now */
    gpt_loader_destroy(&l);
    /* token 40 becomes 65535, in place: a loader started at batch 2 must refuse it */
    FILE *f = fopen(s_path("c_000.bin"), "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, 1024 + 2 * 40, SEEK_SET), 0);
    fputc(0xff, f);
    fputc(0xff, f);
    fclose(f);
    OK(gpt_loader_new(sh, &o, 0, 2, 1, 2, 2, &l));
    cr_assert_eq(gpt_loader_next(l, x, y), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "c_000.bin: token 65535 at position 40"), "%s",
              troupe_last_error());
    cr_assert_eq(gpt_loader_next(l, x, y), TROUPE_INVALID_ARGUMENT, "the failure sticks");
    gpt_loader_destroy(&l);
    gpt_shards_close(&sh);
}
