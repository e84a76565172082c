/* libFuzzer target for llm.c's file formats as `gpt` reads them (examples/gpt/llmc.c and the
 * trainer's shard reader, examples/gpt/loader.c). Every input is one file (a memory file,
 * /proc/self/fd/N, so no disk is touched) read as each of the four formats:
 * - a model file (gpt_llmc_model_read): accepted only with a valid config and exactly
 *   1024 + n * (4 or 2) bytes, the parameters decoded from the bytes (fp32, or bf16 widened);
 * - a debug state for a fixed tiny config (gpt_llmc_state_read): accepted only with exactly
 *   the bytes its header implies and every token of x and y below V;
 * - a tokenizer (gpt_llmc_tokenizer_read): accepted only when its tokens tile the file exactly,
 *   the offsets rising to the bytes held, eot from version 2's header or 50256;
 * - a token shard, through both readers the trainer has (gpt_llmc_shards_read, which loads the
 *   file whole, and gpt_shards_open + gpt_shards_read, which check it in chunks and read it in
 *   place): they must agree, accepting the same tokens or refusing with the same status.
 * A refusal must be INVALID_ARGUMENT or RESOURCE_EXHAUSTED with a message starting with the
 * file's path, and must leave every output as it was (nothing is loaded in part, issue 31). A
 * broken rule traps; crashes, leaks, over-large allocations and undefined behaviour are caught by
 * libFuzzer and the sanitizers. The seed corpus, tests/data/gpt_corpus (made by
 * tests/fuzz/gpt_seeds.py: valid files of each format and damaged copies), also runs as a plain
 * test (corpus_gpt, tests/fuzz/CMakeLists.txt).
 *
 * Build: deploy/fuzz.sh (clang); run: deploy/fuzz.sh SECONDS gpt. */
#define _GNU_SOURCE /* memfd_create */
#include "llmc.h"
#include "loader.h"

#define FUZZ_NAME "fuzz_gpt"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S_HEADER_BYTES (GPT_LLMC_HEADER_INTS * 4)

/* The debug state's model: 300 parameters, so a whole state fits in the fuzzer's 4 KiB inputs
 * (gpt_seeds.py writes the same config). */
static const gpt_llmc_config_t s_state_cfg = {
    .max_seq = 4, .vocab = 5, .layers = 1, .heads = 2, .channels = 4, .padded_vocab = 8};

static const char *s_path; /* the memory file holding the input */

static int32_t s_i32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24));
}

static void s_model(const uint8_t *data, size_t size)
{
    gpt_llmc_config_t cfg, before;
    memset(&cfg, 0x5a, sizeof cfg);
    before = cfg;
    float sentinel = 0, *params = &sentinel;
    troupe_status_t st = gpt_llmc_model_read(s_path, &cfg, &params);
    if (st != TROUPE_OK) {
        fuzz_check_refusal(st, s_path);
        FUZZ_CHECK(memcmp(&cfg, &before, sizeof cfg) == 0 && params == &sentinel);
        return;
    }
    int32_t version = s_i32(data + 4);
    FUZZ_CHECK(s_i32(data) == GPT_LLMC_MODEL_MAGIC && (version == 3 || version == 5));
    FUZZ_CHECK(gpt_llmc_config_check(&cfg, "accepted") == TROUPE_OK);
    FUZZ_CHECK(cfg.max_seq == s_i32(data + 8) && cfg.padded_vocab == s_i32(data + 28));
    size_t n = gpt_llmc_num_params(&cfg), esize = version == 3 ? 4 : 2;
    FUZZ_CHECK(n > 0 && size == S_HEADER_BYTES + n * esize);
    const size_t ends[2] = {0, n - 1}; /* the first and the last parameter */
    for (int k = 0; k < 2; k++) {
        const uint8_t *b = data + S_HEADER_BYTES + ends[k] * esize;
        uint32_t want =
            esize == 4 ? (uint32_t)s_i32(b) : ((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
        uint32_t got;
        memcpy(&got, &params[ends[k]], sizeof got);
        FUZZ_CHECK(got == want);
    }
    free(params);
}

static void s_state(const uint8_t *data, size_t size)
{
    gpt_llmc_state_t s, before;
    memset(&s, 0x5a, sizeof s);
    before = s;
    troupe_status_t st = gpt_llmc_state_read(s_path, &s_state_cfg, &s);
    if (st != TROUPE_OK) {
        fuzz_check_refusal(st, s_path);
        FUZZ_CHECK(memcmp(&s, &before, sizeof s) == 0);
        return;
    }
    FUZZ_CHECK(s.batch >= 1 && s.seq >= 1 && s.seq <= s_state_cfg.max_seq);
    size_t bt = (size_t)s.batch * (size_t)s.seq;
    size_t want = S_HEADER_BYTES + 4 * (2 * bt + bt * (size_t)s_state_cfg.vocab + 1 +
                                        gpt_llmc_num_params(&s_state_cfg));
    FUZZ_CHECK(size == want && s.x && s.y && s.logits && s.grads);
    for (size_t i = 0; i < bt; i++)
        FUZZ_CHECK(s.x[i] >= 0 && s.x[i] < s_state_cfg.vocab && s.y[i] >= 0 &&
                   s.y[i] < s_state_cfg.vocab);
    uint32_t loss_bits;
    memcpy(&loss_bits, &s.loss, sizeof loss_bits);
    FUZZ_CHECK(loss_bits ==
               (uint32_t)s_i32(data + S_HEADER_BYTES + 4 * (2 * bt + bt * s_state_cfg.vocab)));
    gpt_llmc_state_free(&s);
    FUZZ_CHECK(s.x == NULL && s.grads == NULL);
}

static void s_tokenizer(const uint8_t *data, size_t size)
{
    gpt_llmc_tokenizer_t t, before;
    memset(&t, 0x5a, sizeof t);
    before = t;
    troupe_status_t st = gpt_llmc_tokenizer_read(s_path, &t);
    if (st != TROUPE_OK) {
        fuzz_check_refusal(st, s_path);
        FUZZ_CHECK(memcmp(&t, &before, sizeof t) == 0);
        return;
    }
    int32_t version = s_i32(data + 4);
    FUZZ_CHECK(t.vocab == s_i32(data + 8) && t.vocab >= 1);
    FUZZ_CHECK(t.eot == (version == 2 ? s_i32(data + 12) : 50256));
    FUZZ_CHECK(t.offsets[0] == 0);
    for (int32_t i = 0; i < t.vocab; i++)
        FUZZ_CHECK(t.offsets[i] <= t.offsets[i + 1] && t.offsets[i + 1] - t.offsets[i] <= 255);
    /* each token is its length byte and its bytes, tiling the file after the header */
    FUZZ_CHECK(S_HEADER_BYTES + (size_t)t.vocab + t.offsets[t.vocab] == size);
    if (t.vocab > 0 && t.offsets[1] > 0) /* the first token's bytes are the file's */
        FUZZ_CHECK(memcmp(t.bytes, data + S_HEADER_BYTES + 1, t.offsets[1]) == 0);
    gpt_llmc_tokenizer_free(&t);
}

/* Both shard readers, on the same vocabulary and the same fewest tokens. */
static void s_shard(const uint8_t *data, size_t size)
{
    const int32_t vocab = 256;                 /* gpt data's byte-level shards */
    const size_t min_tokens = 1 + size % 3;    /* a batch of B T + 1 tokens, 1 to 3 */
    uint16_t sentinel = 7, *whole = &sentinel; /* gpt_llmc_shards_read */
    size_t whole_n = 99;
    int files = -1;
    troupe_status_t st = gpt_llmc_shards_read(s_path, vocab, min_tokens, &whole, &whole_n, &files);
    char whole_msg[1024];
    snprintf(whole_msg, sizeof whole_msg, "%s", troupe_last_error());
    gpt_shards_t *sh = NULL;
    troupe_status_t st2 = gpt_shards_open(s_path, vocab, min_tokens, &sh);
    FUZZ_CHECK(st == st2); /* the two readers agree */
    if (st != TROUPE_OK) {
        fuzz_check_refusal(st, s_path);
        FUZZ_CHECK(strcmp(whole_msg, troupe_last_error()) == 0); /* on the same problem */
        FUZZ_CHECK(whole == &sentinel && whole_n == 99 && files == -1 && sh == NULL);
        return;
    }
    FUZZ_CHECK(files == 1 && gpt_shards_files(sh) == 1);
    FUZZ_CHECK(whole_n >= min_tokens && whole_n == gpt_shards_count(sh));
    FUZZ_CHECK(size == S_HEADER_BYTES + 2 * whole_n);
    uint16_t *inplace = malloc(whole_n * sizeof *inplace);
    FUZZ_CHECK(inplace != NULL);
    FUZZ_CHECK(gpt_shards_read(sh, 0, whole_n, inplace) == TROUPE_OK);
    for (size_t i = 0; i < whole_n; i++) {
        uint16_t want =
            (uint16_t)(data[S_HEADER_BYTES + 2 * i] | data[S_HEADER_BYTES + 2 * i + 1] << 8);
        FUZZ_CHECK(whole[i] == want && inplace[i] == want && want < vocab);
    }
    /* past the end is refused, naming the range */
    FUZZ_CHECK(gpt_shards_read(sh, whole_n, 1, inplace) == TROUPE_INVALID_ARGUMENT);
    free(inplace);
    free(whole);
    gpt_shards_close(&sh);
    FUZZ_CHECK(sh == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_path = fuzz_memfile_put(data, size);
    s_model(data, size);
    s_state(data, size);
    s_tokenizer(data, size);
    s_shard(data, size);
    return 0;
}
