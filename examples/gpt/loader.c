/* gpt — the trainer's data, sharded per rank (see loader.h). */
#define _POSIX_C_SOURCE 200809L
#include "loader.h"

#include "llmc.h"

#include "base/file_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_HEADER_BYTES (GPT_LLMC_HEADER_INTS * 4)
#define S_CHUNK_TOKENS (1 << 19) /* the opening check reads 1 MiB at a time */

/* ---- shards --------------------------------------------------------------------------------- */

typedef struct s_shard {
    char *path;
    int fd;
    size_t first; /* its first token's place in the concatenation */
    size_t count;
} s_shard_t;

struct gpt_shards {
    s_shard_t *v;
    int n;
    size_t count;
    int32_t vocab;
};

/* Reads exactly len bytes at offset off of the shard. */
static troupe_status_t s_pread(const s_shard_t *sh, void *buf, size_t len, off_t off)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = pread(sh->fd, p, len, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return troupe_error_set(TROUPE_FAILED_PRECONDITION,
                                    "%s: cannot read the token shard: %s", sh->path,
                                    got < 0 ? strerror(errno) : "the file shrank");
        p += got;
        len -= (size_t)got;
        off += got;
    }
    return TROUPE_OK;
}

/* Tokens [at, at + n) of one shard, from little-endian uint16. */
static troupe_status_t s_shard_tokens(const s_shard_t *sh, size_t at, size_t n, uint16_t *out)
{
    TROUPE_RETURN_IF_ERROR(s_pread(sh, out, 2 * n, (off_t)(S_HEADER_BYTES + 2 * at)));
    const unsigned char *b = (const unsigned char *)out;
    for (size_t i = 0; i < n; i++) {
        uint16_t t = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
        out[i] = t;
    }
    return TROUPE_OK;
}

/* Opens and checks one shard: header, size, every token id (read in chunks, not kept). */
static troupe_status_t s_shard_open(s_shard_t *sh, int32_t vocab, size_t min_tokens,
                                    uint16_t *chunk)
{
    struct stat sb;
    TROUPE_RETURN_IF_ERROR(
        troupe__file_open_regular(sh->path, "a token shard", 0, 0, &sh->fd, &sb));
    size_t bytes = (size_t)sb.st_size;
    unsigned char head[S_HEADER_BYTES];
    size_t hl = bytes < sizeof head ? bytes : sizeof head;
    TROUPE_RETURN_IF_ERROR(s_pread(sh, head, hl, 0));
    TROUPE_RETURN_IF_ERROR(gpt_llmc_shard_header(sh->path, head, bytes, min_tokens, &sh->count));
    for (size_t at = 0; at < sh->count; at += S_CHUNK_TOKENS) {
        size_t n = sh->count - at < S_CHUNK_TOKENS ? sh->count - at : S_CHUNK_TOKENS;
        TROUPE_RETURN_IF_ERROR(s_shard_tokens(sh, at, n, chunk));
        TROUPE_RETURN_IF_ERROR(gpt_llmc_tokens_check(sh->path, chunk, n, at, vocab));
    }
    return TROUPE_OK;
}

troupe_status_t gpt_shards_open(const char *pattern, int32_t vocab, size_t min_tokens,
                                gpt_shards_t **out)
{
    if (!pattern || !out || vocab < 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_shards_open: bad argument");
    *out = NULL;
    glob_t g;
    TROUPE_RETURN_IF_ERROR(gpt_llmc_shards_glob(pattern, &g));
    troupe_status_t st = TROUPE_OK;
    gpt_shards_t *s = calloc(1, sizeof *s);
    uint16_t *chunk = malloc(S_CHUNK_TOKENS * sizeof *chunk);
    if (s)
        s->v = calloc(g.gl_pathc, sizeof *s->v);
    if (!s || !s->v || !chunk) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", pattern);
        goto free_all;
    }
    s->vocab = vocab;
    for (size_t i = 0; i < g.gl_pathc && st == TROUPE_OK; i++) {
        s_shard_t *sh = &s->v[s->n++];
        sh->fd = -1;
        sh->path = strdup(g.gl_pathv[i]);
        if (!sh->path) {
            st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", pattern);
            break;
        }
        st = s_shard_open(sh, vocab, min_tokens, chunk);
        sh->first = s->count;
        s->count += sh->count;
    }
    if (st == TROUPE_OK) {
        *out = s;
        s = NULL;
    }
free_all:
    free(chunk);
    gpt_shards_close(&s);
    globfree(&g);
    return st;
}

void gpt_shards_close(gpt_shards_t **s_p)
{
    if (!s_p || !*s_p)
        return;
    gpt_shards_t *s = *s_p;
    *s_p = NULL;
    for (int i = 0; i < s->n; i++) {
        if (s->v[i].fd >= 0)
            close(s->v[i].fd);
        free(s->v[i].path);
    }
    free(s->v);
    free(s);
}

size_t gpt_shards_count(const gpt_shards_t *s)
{
    return s ? s->count : 0;
}

int gpt_shards_files(const gpt_shards_t *s)
{
    return s ? s->n : 0;
}

troupe_status_t gpt_shards_read(gpt_shards_t *s, size_t at, size_t n, uint16_t *out)
{
    if (!s || (!out && n > 0))
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_shards_read: bad argument");
    if (at > s->count || n > s->count - at)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_shards_read: tokens [%zu, %zu) beyond the %zu the shards hold",
                                at, at + n, s->count);
    int k = 0; /* the shard holding token `at` (few shards: a scan) */
    while (k + 1 < s->n && s->v[k + 1].first <= at)
        k++;
    while (n > 0) {
        const s_shard_t *sh = &s->v[k];
        size_t in = at - sh->first, take = sh->count - in < n ? sh->count - in : n;
        if (take > 0) {
            TROUPE_RETURN_IF_ERROR(s_shard_tokens(sh, in, take, out));
            TROUPE_RETURN_IF_ERROR(gpt_llmc_tokens_check(sh->path, out, take, in, s->vocab));
        }
        out += take;
        at += take;
        n -= take;
        k++;
    }
    return TROUPE_OK;
}

/* ---- the order ------------------------------------------------------------------------------ */

int64_t gpt_order_batches(const gpt_order_t *o)
{
    if (!o || o->batch < 1 || o->seq < 1 || o->count < 1)
        return 0;
    return (int64_t)((o->count - 1) / ((size_t)o->batch * (size_t)o->seq));
}

/* SplitMix64's finaliser: the Feistel rounds' function. */
static uint64_t s_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A keyed bijection of [0, n): a 4-round Feistel network on 2h bits (2^2h >= n), walked along
 * its cycle until the value falls below n (Black & Rogaway's cycle walking). */
static uint64_t s_permute(uint64_t j, uint64_t n, uint64_t key)
{
    int h = 1;
    while (h < 32 && (1ull << (2 * h)) < n)
        h++;
    uint64_t mask = (1ull << h) - 1;
    do {
        uint64_t l = j >> h, r = j & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = s_mix(key ^ (round << 56) ^ r) & mask;
            uint64_t t = l ^ f;
            l = r;
            r = t;
        }
        j = (l << h) | r;
    } while (j >= n);
    return j;
}

size_t gpt_order_start(const gpt_order_t *o, int64_t step, int64_t i)
{
    int64_t nb = gpt_order_batches(o);
    if (nb < 1 || step < 0 || i < 0 || i >= o->batch)
        return 0;
    uint64_t slot = (uint64_t)(step % nb) * (uint64_t)o->batch + (uint64_t)i;
    if (o->shuffle) {
        uint64_t pass = (uint64_t)(step / nb);
        slot = s_permute(slot, (uint64_t)nb * (uint64_t)o->batch,
                         s_mix(o->seed) ^ s_mix(pass + 0x51ED2701ull));
    }
    return (size_t)slot * (size_t)o->seq;
}

/* ---- the loader ----------------------------------------------------------------------------- */

struct gpt_loader {
    gpt_shards_t *shards;
    gpt_order_t order;
    int64_t first, n, runs, stride; /* sequences first + j stride + [0, n), j < runs */
    uint16_t *tok;                  /* one sequence's T + 1 tokens */
    int32_t *x, *y;                 /* the prefetched share (n, T) */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t want;  /* the batch the thread loads next (-1: nothing asked) */
    int64_t ready; /* the batch x, y hold (-1: none) */
    bool stop;
    troupe_status_t st; /* the thread's failure, with its message */
    char msg[512];
};

/* Loads batch `step`'s share into l->x, l->y (the thread's work, outside the lock). */
static troupe_status_t s_load(gpt_loader_t *l, int64_t step)
{
    size_t T = (size_t)l->order.seq;
    for (int64_t i = 0; i < l->runs * l->n; i++) {
        size_t at = gpt_order_start(&l->order, step, l->first + i / l->n * l->stride + i % l->n);
        TROUPE_RETURN_IF_ERROR(gpt_shards_read(l->shards, at, T + 1, l->tok));
        for (size_t t = 0; t < T; t++) {
            l->x[(size_t)i * T + t] = l->tok[t];
            l->y[(size_t)i * T + t] = l->tok[t + 1];
        }
    }
    return TROUPE_OK;
}

static void *s_thread(void *arg)
{
    gpt_loader_t *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (l->want < 0 || l->st != TROUPE_OK))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        int64_t step = l->want;
        l->want = -1;
        pthread_mutex_unlock(&l->mu);
        troupe_status_t st = s_load(l, step);
        pthread_mutex_lock(&l->mu);
        if (st == TROUPE_OK) {
            l->ready = step;
        } else {
            l->st = st;
            snprintf(l->msg, sizeof l->msg, "%s", troupe_last_error());
        }
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

troupe_status_t gpt_loader_new(gpt_shards_t *s, const gpt_order_t *o, int64_t first, int64_t n,
                               int64_t runs, int64_t stride, int64_t step, gpt_loader_t **out)
{
    if (!s || !o || !out || step < 0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_loader_new: bad argument");
    *out = NULL;
    if (first < 0 || n < 1 || runs < 1 || stride < n || first + (runs - 1) * stride + n > o->batch)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_loader_new: %lld runs of sequences [%lld, %lld) every %lld "
                                "outside a batch of %lld",
                                (long long)runs, (long long)first, (long long)(first + n),
                                (long long)stride, (long long)o->batch);
    if (gpt_order_batches(o) < 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "gpt_loader_new: %zu tokens hold no batch of %lld x %lld", o->count,
                                (long long)o->batch, (long long)o->seq);
    gpt_loader_t *l = calloc(1, sizeof *l);
    if (!l)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_loader_new: out of memory");
    size_t nt = (size_t)(runs * n) * (size_t)o->seq;
    l->shards = s;
    l->order = *o;
    l->first = first;
    l->n = n;
    l->runs = runs;
    l->stride = stride;
    l->tok = malloc(((size_t)o->seq + 1) * sizeof *l->tok);
    l->x = malloc(nt * sizeof *l->x);
    l->y = malloc(nt * sizeof *l->y);
    l->want = step;
    l->ready = -1;
    troupe_status_t st = TROUPE_OK;
    if (!l->tok || !l->x || !l->y) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "gpt_loader_new: out of memory");
        goto free_loader;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int e = pthread_create(&l->thread, NULL, s_thread, l);
    if (e != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        st = troupe_error_set(TROUPE_FAILED_PRECONDITION, "gpt_loader_new: no thread: %s",
                              strerror(e));
        goto free_loader;
    }
    l->started = true;
    *out = l;
    return TROUPE_OK;
free_loader:
    free(l->tok);
    free(l->x);
    free(l->y);
    free(l);
    return st;
}

troupe_status_t gpt_loader_next(gpt_loader_t *l, int32_t *x, int32_t *y)
{
    if (!l || !x || !y)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_loader_next: bad argument");
    pthread_mutex_lock(&l->mu);
    while (l->ready < 0 && l->st == TROUPE_OK)
        pthread_cond_wait(&l->cv, &l->mu);
    troupe_status_t st = l->st;
    if (st == TROUPE_OK) {
        size_t nt = (size_t)(l->runs * l->n) * (size_t)l->order.seq;
        memcpy(x, l->x, nt * sizeof *x);
        memcpy(y, l->y, nt * sizeof *y);
        l->want = l->ready + 1; /* the next one, while the caller trains on this one */
        l->ready = -1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    if (st != TROUPE_OK)
        return troupe_error_set(st, "%s", l->msg);
    return TROUPE_OK;
}

size_t gpt_loader_bytes(const gpt_loader_t *l)
{
    if (!l)
        return 0;
    return 2 * (size_t)(l->runs * l->n) * (size_t)l->order.seq * sizeof(int32_t) +
           ((size_t)l->order.seq + 1) * sizeof(uint16_t);
}

void gpt_loader_destroy(gpt_loader_t **l_p)
{
    if (!l_p || !*l_p)
        return;
    gpt_loader_t *l = *l_p;
    *l_p = NULL;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    free(l->tok);
    free(l->x);
    free(l->y);
    free(l);
}
