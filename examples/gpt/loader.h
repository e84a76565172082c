/* gpt — the trainer's data, sharded per rank: the token shards read in place (pread), the
 * batch order of issue 31, and a loader thread that prefetches the next step's share.
 *
 * gpt_shards_t: the shards a glob names (sorted), seen as one concatenated token stream. Opening
 * checks every shard (magic, version, size against the header, at least min_tokens tokens,
 * every token id below V) by reading it once in chunks; nothing of it is kept. Later reads take
 * only the tokens asked for.
 *
 * gpt_order_t: which tokens step s trains on. Batch s holds B sequences of T+1 tokens (inputs
 * and their targets shifted by one). Without shuffling, sequence i of batch s starts at token
 * ((s mod nb) B + i) T, nb = floor((count - 1) / (B T)) batches a pass (the pass starts again at
 * token 0 when fewer than B T + 1 tokens remain): llm.c's loader without shuffling. With
 * shuffling, pass e = s / nb takes the same nb B sequence slots in an order of its own: slot j
 * goes to position perm(seed, e, j) of the pass, perm a keyed bijection of [0, nb B) (a
 * Feistel network, cycle-walked), so no table is held. Both orders depend on s, B, T, the
 * tokens and the seed only: every layout trains on the same batches.
 *
 * gpt_loader_t: runs of sequences first + j stride + [0, n), j < runs, of every batch (a rank's
 * replicas' share of each micro-step) as int32 inputs x and targets y (runs n, T), each step's
 * read on a thread of its own while the caller trains on the previous one.
 *
 * Errors: INVALID_ARGUMENT naming the file and the problem, NOT_FOUND (a missing file or a glob
 * matching nothing), FAILED_PRECONDITION (read failures, with strerror), RESOURCE_EXHAUSTED.
 * Thread safety: a gpt_shards_t serves one reader at a time (the loader's thread once a loader
 * holds it); a loader is driven from one thread. Ownership: _open/_new return objects freed with
 * _close/_destroy; a loader borrows its shards, which must outlive it.
 */
#ifndef GPT_LOADER_H
#define GPT_LOADER_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_shards gpt_shards_t;

/* Opens and checks the shards pattern names (see above). min_tokens: the fewest tokens a shard
 * may hold (B T + 1 for a trainer). */
TROUPE_MUST_USE troupe_status_t gpt_shards_open(const char *pattern, int32_t vocab,
                                                size_t min_tokens, gpt_shards_t **out);
void gpt_shards_close(gpt_shards_t **s_p);
size_t gpt_shards_count(const gpt_shards_t *s); /* tokens of all shards */
int gpt_shards_files(const gpt_shards_t *s);    /* shards */
/* Tokens [at, at + n) of the concatenation into out, checked below V again (a file changed
 * since it was opened is refused naming it). INVALID_ARGUMENT beyond the end. */
TROUPE_MUST_USE troupe_status_t gpt_shards_read(gpt_shards_t *s, size_t at, size_t n,
                                                uint16_t *out);

typedef struct gpt_order {
    int64_t batch; /* B, sequences a batch (over every replica) */
    int64_t seq;   /* T */
    size_t count;  /* tokens of the stream */
    bool shuffle;  /* the shuffled order, keyed by seed */
    uint64_t seed;
} gpt_order_t;

/* Batches a pass: floor((count - 1) / (B T)) (0 when the stream is too short). */
int64_t gpt_order_batches(const gpt_order_t *o);
/* The first token of sequence i (0 <= i < B) of batch `step` (>= 0); nb must be > 0. */
size_t gpt_order_start(const gpt_order_t *o, int64_t step, int64_t i);

typedef struct gpt_loader gpt_loader_t;

/* A loader of the runs of sequences first + j stride + [0, n), j < runs (stride >= n), of each
 * batch of order o from shards s, starting with batch `step` (prefetched at once).
 * INVALID_ARGUMENT (a range outside [0, B), a stream without one batch), RESOURCE_EXHAUSTED,
 * FAILED_PRECONDITION (the thread did not start). */
TROUPE_MUST_USE troupe_status_t gpt_loader_new(gpt_shards_t *s, const gpt_order_t *o, int64_t first,
                                               int64_t n, int64_t runs, int64_t stride,
                                               int64_t step, gpt_loader_t **out);
/* The next batch's share: x and y (runs n T int32 each, run by run), then the one after starts
 * loading. The read's error (named as gpt_shards_read's) when it failed. */
TROUPE_MUST_USE troupe_status_t gpt_loader_next(gpt_loader_t *l, int32_t *x, int32_t *y);
/* Bytes of token data the loader holds (its prefetch buffers). */
size_t gpt_loader_bytes(const gpt_loader_t *l);
void gpt_loader_destroy(gpt_loader_t **l_p);

#ifdef __cplusplus
}
#endif

#endif
