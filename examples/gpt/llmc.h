/* gpt — llm.c's file formats: the GPT-2 model file (magic 20240326, version 3 fp32 read and
 * written, version 5 bf16 read), token shards (magic 20240520, version 1, uint16 tokens), the
 * debug state of its PyTorch reference (magic 20240327, version 2) and the GPT-2 tokenizer
 * (magic 20240328, versions 1 and 2). Layouts are in docs/gpt.md.
 *
 * Every file starts with 256 little-endian int32. A reader checks the whole file (magic,
 * version, sizes against the header, token ids) before it returns anything: on an error the
 * outputs are untouched and nothing is loaded in part. Errors are INVALID_ARGUMENT naming the
 * file and the problem, NOT_FOUND for a missing file or a glob that matches nothing,
 * RESOURCE_EXHAUSTED, FAILED_PRECONDITION for read/write failures (with strerror).
 *
 * Thread safety: pure functions of their arguments and the files. Ownership: arrays returned
 * through out_* are malloc'd and the caller's (free()).
 */
#ifndef GPT_LLMC_H
#define GPT_LLMC_H

#include "base/status.h"

#include <stddef.h>
#include <glob.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_LLMC_MODEL_MAGIC 20240326
#define GPT_LLMC_STATE_MAGIC 20240327
#define GPT_LLMC_TOKENIZER_MAGIC 20240328
#define GPT_LLMC_SHARD_MAGIC 20240520
#define GPT_LLMC_HEADER_INTS 256
#define GPT_LLMC_NTENSORS 16

/* The model's sizes, as the model file's header gives them. */
typedef struct gpt_llmc_config {
    int32_t max_seq;      /* maxT: positions wpe holds */
    int32_t vocab;        /* V: tokens that count */
    int32_t layers;       /* L */
    int32_t heads;        /* NH (divides channels) */
    int32_t channels;     /* C */
    int32_t padded_vocab; /* Vp >= V: rows of wte and logits */
} gpt_llmc_config_t;

/* The 16 tensors in file order: wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C),
 * qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C),
 * fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C).
 * Weights are (out, in). */
typedef enum gpt_llmc_tensor {
    GPT_WTE = 0, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB,
    GPT_LN2W, GPT_LN2B, GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB
} gpt_llmc_tensor_t;

/* The tensor's name ("wte", ...). */
const char *gpt_llmc_tensor_name(int tensor);
/* Whether the tensor holds one slice per layer (its first axis is L). */
int gpt_llmc_tensor_per_layer(int tensor);
/* Elements of each tensor (all layers) and their sum. The config must be valid. */
void gpt_llmc_tensor_counts(const gpt_llmc_config_t *cfg, size_t counts[GPT_LLMC_NTENSORS]);
size_t gpt_llmc_num_params(const gpt_llmc_config_t *cfg);
/* Checks the sizes: all positive, Vp >= V, C a multiple of NH, at most 2^31 parameters.
 * INVALID_ARGUMENT naming `name` and the field. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_config_check(const gpt_llmc_config_t *cfg,
                                                      const char *name);

/* Reads a model file: version 3 (fp32) or 5 (bf16, widened). *out_params holds all
 * gpt_llmc_num_params floats in file order. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_model_read(const char *path, gpt_llmc_config_t *out_cfg,
                                                    float **out_params);
/* Writes a version 3 (fp32) model file atomically (a temporary renamed over path). */
TROUPE_MUST_USE troupe_status_t gpt_llmc_model_write(const char *path,
                                                     const gpt_llmc_config_t *cfg,
                                                     const float *params);

/* Expands a shard glob (sorted, as glob(3) sorts) into *g, which the caller frees with
 * globfree on success. Errors: NOT_FOUND when nothing matches, FAILED_PRECONDITION when the
 * pattern cannot be expanded (nothing to free then); both name the pattern. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_shards_glob(const char *pattern, glob_t *g);

/* Reads the shards a glob pattern names (sorted by name) and concatenates their tokens.
 * Each shard must hold at least min_tokens tokens (B*T+1 for a trainer) and every token must
 * be < vocab. *out_count tokens in *out_tokens, *out_shards files. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_shards_read(const char *pattern, int32_t vocab,
                                                     size_t min_tokens, uint16_t **out_tokens,
                                                     size_t *out_count, int *out_shards);
/* Checks a shard's header (head: its first min(file_bytes, 1024) bytes) against the file's
 * size: magic, version 1, the count, file_bytes = 1024 + 2 count, count >= min_tokens.
 * *out_count its tokens. INVALID_ARGUMENT naming path and the problem. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_shard_header(const char *path, const unsigned char *head,
                                                      size_t file_bytes, size_t min_tokens,
                                                      size_t *out_count);
/* Checks that tokens[0..n) (positions first.. of the shard at path) are below vocab:
 * INVALID_ARGUMENT naming the file, the token and its position. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_tokens_check(const char *path, const uint16_t *tokens,
                                                      size_t n, size_t first, int32_t vocab);
/* Writes one shard (count tokens, at most INT32_MAX) atomically. */
TROUPE_MUST_USE troupe_status_t gpt_llmc_shard_write(const char *path, const uint16_t *tokens,
                                                     size_t count);

/* The debug state of one step for a model of config cfg (version 2): x and y (B,T) int32,
 * the logits (B,T,V), the loss and every gradient (num_params floats, wte padded to Vp). */
typedef struct gpt_llmc_state {
    int32_t batch, seq; /* B, T */
    int32_t *x, *y;
    float *logits;
    float loss;
    float *grads;
} gpt_llmc_state_t;
TROUPE_MUST_USE troupe_status_t gpt_llmc_state_read(const char *path,
                                                    const gpt_llmc_config_t *cfg,
                                                    gpt_llmc_state_t *out);
void gpt_llmc_state_free(gpt_llmc_state_t *s);

/* The GPT-2 tokenizer: vocab strings (token i is bytes[offsets[i] .. offsets[i+1])). */
typedef struct gpt_llmc_tokenizer {
    int32_t vocab;
    int32_t eot; /* end-of-text token (version 2; 50256 for version 1) */
    uint32_t *offsets;
    unsigned char *bytes;
} gpt_llmc_tokenizer_t;
TROUPE_MUST_USE troupe_status_t gpt_llmc_tokenizer_read(const char *path,
                                                        gpt_llmc_tokenizer_t *out);
void gpt_llmc_tokenizer_free(gpt_llmc_tokenizer_t *t);

#ifdef __cplusplus
}
#endif

#endif
