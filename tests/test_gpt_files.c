/* Tests of examples/gpt/llmc.h: llm.c's model files and token shards round-trip, and every bad
 * file is refused with an error naming the file and the problem, leaving the outputs untouched. */
#define _POSIX_C_SOURCE 200809L
#include "llmc.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(x) cr_assert_eq((x), TROUPE_OK, "%s", troupe_last_error())

static char s_dir[256];

static void s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "%s/gpt-files-%ld", TROUPE_TEST_BUILD_DIR, (long)getpid());
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

TestSuite(gpt_files, .init = s_setup, .fini = s_teardown);

static const gpt_llmc_config_t k_cfg = {8, 10, 1, 2, 4, 16}; /* maxT V L NH C Vp */

static char *s_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", s_dir, name);
    return p[k];
}

static void s_write_raw(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

static unsigned char *s_read_raw(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 16);
    cr_assert_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* A model file's bytes with the config's parameters 0, 1, 2, ... */
static const char *s_good_model(void)
{
    size_t n = gpt_llmc_num_params(&k_cfg);
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)i * 0.5f;
    const char *path = s_path("good.bin");
    OK(gpt_llmc_model_write(path, &k_cfg, p));
    free(p);
    return path;
}

/* The reader refuses path with INVALID_ARGUMENT naming it and `words`; *out stays NULL. */
static void s_refused_model(const char *path, const char *words)
{
    gpt_llmc_config_t cfg = {0};
    float *params = NULL;
    troupe_status_t st = gpt_llmc_model_read(path, &cfg, &params);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: status %d", words, st);
    cr_expect_null(params);
    cr_expect_eq(cfg.layers, 0, "nothing loaded in part");
    cr_expect(strstr(troupe_last_error(), path), "names the file: %s", troupe_last_error());
    cr_expect(strstr(troupe_last_error(), words), "says '%s': %s", words, troupe_last_error());
}

Test(gpt_files, model_round_trips)
{
    const char *path = s_good_model();
    gpt_llmc_config_t cfg;
    float *p = NULL;
    OK(gpt_llmc_model_read(path, &cfg, &p));
    cr_assert_eq(memcmp(&cfg, &k_cfg, sizeof cfg), 0);
    size_t n = gpt_llmc_num_params(&cfg);
    cr_assert_eq(n, 16 * 4 + 8 * 4 + 12 * 16 + 13 * 4 + 2 * 4);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(p[i], (float)i * 0.5f);
    free(p);
}

Test(gpt_files, model_reads_bf16_version_5)
{
    size_t len;
    unsigned char *b = s_read_raw(s_good_model(), &len);
    size_t n = gpt_llmc_num_params(&k_cfg);
    b[4] = 5; /* version 5: the top halves of the floats */
    for (size_t i = 0; i < n; i++)
        memmove(b + 1024 + 2 * i, b + 1024 + 4 * i + 2, 2);
    s_write_raw(s_path("bf16.bin"), b, 1024 + 2 * n);
    gpt_llmc_config_t cfg;
    float *p = NULL;
    OK(gpt_llmc_model_read(s_path("bf16.bin"), &cfg, &p));
    for (size_t i = 0; i < n; i++) { /* i * 0.5 for small i is exact in bf16 */
        uint32_t u;
        float want = (float)i * 0.5f;
        memcpy(&u, &want, 4);
        u &= 0xffff0000u;
        memcpy(&want, &u, 4);
        cr_assert_eq(p[i], want, "parameter %zu", i);
    }
    free(p);
    free(b);
}

Test(gpt_files, model_bad_files_are_refused_by_name)
{
    size_t len;
    unsigned char *b = s_read_raw(s_good_model(), &len);
    unsigned char *c = malloc(len + 8);
    memcpy(c, b, len);
    c[0] ^= 1;
    s_write_raw(s_path("magic.bin"), c, len);
    s_refused_model(s_path("magic.bin"), "bad magic");
    memcpy(c, b, len);
    c[4] = 4;
    s_write_raw(s_path("version.bin"), c, len);
    s_refused_model(s_path("version.bin"), "version 4");
    s_write_raw(s_path("short_header.bin"), b, 100);
    s_refused_model(s_path("short_header.bin"), "truncated");
    s_write_raw(s_path("truncated.bin"), b, len - 4);
    s_refused_model(s_path("truncated.bin"), "truncated");
    memcpy(c, b, len);
    memset(c + len, 0, 8);
    s_write_raw(s_path("long.bin"), c, len + 8);
    s_refused_model(s_path("long.bin"), "disagrees with its header");
    memcpy(c, b, len);
    c[6 * 4] = 3; /* C = 3 with NH = 2 */
    s_write_raw(s_path("heads.bin"), c, len);
    s_refused_model(s_path("heads.bin"), "not a multiple of NH");
    free(c);
    free(b);
    /* a directory opens for reading and sizes as LONG_MAX: refused by what it is, not as an
     * allocation of 2^63 bytes (the readers of the tokenizer and the debug state share this) */
    s_refused_model(s_path(""), "not a regular file");
    gpt_llmc_tokenizer_t tok = {0};
    cr_expect_eq(gpt_llmc_tokenizer_read(s_path(""), &tok), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "not a regular file"), "%s", troupe_last_error());
    cr_expect_null(tok.offsets);
    /* a header claiming more tokens than the file has bytes is refused before the offsets (4
     * bytes a token) are allocated, saying so */
    unsigned char th[1024 + 3] = {0};
    const int32_t thv[4] = {GPT_LLMC_TOKENIZER_MAGIC, 1, 2147483647, 0};
    memcpy(th, thv, sizeof thv); /* little-endian host, as the writers assume */
    th[1024] = 2, th[1025] = 'h', th[1026] = 'i';
    s_write_raw(s_path("tok_huge.bin"), th, sizeof th);
    cr_expect_eq(gpt_llmc_tokenizer_read(s_path("tok_huge.bin"), &tok), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(),
                     "truncated tokenizer: 2147483647 tokens need at least 2147483647 bytes "
                     "after the header, the file has 3"),
              "%s", troupe_last_error());
    cr_expect_null(tok.offsets);
    gpt_llmc_config_t cfg;
    float *p = NULL;
    cr_assert_eq(gpt_llmc_model_read(s_path("missing.bin"), &cfg, &p), TROUPE_NOT_FOUND);
}

/* A shard of n tokens (t % mod) at name. */
static void s_shard(const char *name, size_t n, int mod)
{
    uint16_t *t = malloc(n * sizeof *t + 2);
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)(i % (size_t)mod);
    OK(gpt_llmc_shard_write(s_path(name), t, n));
    free(t);
}

static void s_refused_shards(const char *pattern, const char *bad, size_t min, const char *words)
{
    uint16_t *tok = NULL;
    size_t n = 77;
    troupe_status_t st = gpt_llmc_shards_read(pattern, 10, min, &tok, &n, NULL);
    cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: status %d", words, st);
    cr_expect_null(tok, "nothing loaded in part");
    cr_expect_eq(n, 77);
    cr_expect(strstr(troupe_last_error(), bad), "names %s: %s", bad, troupe_last_error());
    cr_expect(strstr(troupe_last_error(), words), "says '%s': %s", words, troupe_last_error());
}

Test(gpt_files, shards_concatenate_in_name_order)
{
    s_shard("d_000.bin", 20, 10);
    s_shard("d_001.bin", 30, 7);
    uint16_t *tok = NULL;
    size_t n = 0;
    int ns = 0;
    OK(gpt_llmc_shards_read(s_path("d_*.bin"), 10, 17, &tok, &n, &ns));
    cr_assert_eq(n, 50);
    cr_assert_eq(ns, 2);
    for (size_t i = 0; i < 20; i++)
        cr_assert_eq(tok[i], i % 10);
    for (size_t i = 0; i < 30; i++)
        cr_assert_eq(tok[20 + i], i % 7);
    free(tok);
}

Test(gpt_files, shard_bad_files_are_refused_by_name)
{
    s_shard("a_000.bin", 40, 10);
    size_t len;
    unsigned char *b = s_read_raw(s_path("a_000.bin"), &len);
    unsigned char *c = malloc(len + 8);
    /* each bad shard sits after a good one: nothing of the good one is returned */
    memcpy(c, b, len);
    c[0] ^= 1;
    s_write_raw(s_path("a_001.bin"), c, len);
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "bad magic");
    memcpy(c, b, len);
    c[4] = 2;
    s_write_raw(s_path("a_001.bin"), c, len);
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "version 2");
    s_write_raw(s_path("a_001.bin"), b, len - 2);
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "truncated");
    memcpy(c, b, len);
    s_write_raw(s_path("a_001.bin"), c, len + 4);
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "disagrees with its header");
    s_shard("a_001.bin", 40, 11); /* token 10 with V = 10 */
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "token 10 at position 10");
    s_shard("a_001.bin", 16, 10); /* 16 tokens, one batch needs 17 */
    s_refused_shards(s_path("a_*.bin"), "a_001.bin", 17, "fewer than one batch needs");
    free(c);
    free(b);
    uint16_t *tok = NULL;
    size_t n = 0;
    cr_assert_eq(gpt_llmc_shards_read(s_path("none_*.bin"), 10, 1, &tok, &n, NULL),
                 TROUPE_NOT_FOUND);
    cr_expect(strstr(troupe_last_error(), "no token shard matches"), "%s", troupe_last_error());
}
