/* gpt — llm.c's file formats (see llmc.h). */
#define _POSIX_C_SOURCE 200809L
#include "llmc.h"

#include "base/file_impl.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_HEADER_BYTES (GPT_LLMC_HEADER_INTS * 4)

static const char *const s_names[GPT_LLMC_NTENSORS] = {
    "wte",  "wpe",  "ln1w", "ln1b",     "qkvw",   "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",      "fcprojw", "fcprojb", "lnfw",     "lnfb"};

const char *gpt_llmc_tensor_name(int tensor)
{
    return tensor >= 0 && tensor < GPT_LLMC_NTENSORS ? s_names[tensor] : "?";
}

int gpt_llmc_tensor_per_layer(int tensor)
{
    return tensor >= GPT_LN1W && tensor <= GPT_FCPROJB;
}

void gpt_llmc_tensor_counts(const gpt_llmc_config_t *cfg, size_t counts[GPT_LLMC_NTENSORS])
{
    size_t L = (size_t)cfg->layers, C = (size_t)cfg->channels;
    size_t sz[GPT_LLMC_NTENSORS] = {(size_t)cfg->padded_vocab * C,
                                    (size_t)cfg->max_seq * C,
                                    L * C,
                                    L * C,
                                    L * 3 * C * C,
                                    L * 3 * C,
                                    L * C * C,
                                    L * C,
                                    L * C,
                                    L * C,
                                    L * 4 * C * C,
                                    L * 4 * C,
                                    L * C * 4 * C,
                                    L * C,
                                    C,
                                    C};
    memcpy(counts, sz, sizeof sz);
}

size_t gpt_llmc_num_params(const gpt_llmc_config_t *cfg)
{
    size_t counts[GPT_LLMC_NTENSORS], n = 0;
    gpt_llmc_tensor_counts(cfg, counts);
    for (int i = 0; i < GPT_LLMC_NTENSORS; i++)
        n += counts[i];
    return n;
}

troupe_status_t gpt_llmc_config_check(const gpt_llmc_config_t *c, const char *name)
{
    const char *bad = NULL;
    if (c->max_seq < 1)
        bad = "maxT";
    else if (c->vocab < 1)
        bad = "V";
    else if (c->layers < 1)
        bad = "L";
    else if (c->heads < 1)
        bad = "NH";
    else if (c->channels < 1)
        bad = "C";
    else if (c->padded_vocab < 1)
        bad = "Vp";
    if (bad)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad model header: %s must be positive (maxT=%d V=%d L=%d "
                                "NH=%d C=%d Vp=%d)",
                                name, bad, c->max_seq, c->vocab, c->layers, c->heads, c->channels,
                                c->padded_vocab);
    if (c->padded_vocab < c->vocab)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad model header: padded vocabulary Vp=%d below V=%d", name,
                                c->padded_vocab, c->vocab);
    if (c->channels % c->heads != 0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad model header: C=%d is not a multiple of NH=%d", name,
                                c->channels, c->heads);
    /* 12 L C^2 + Vp C + maxT C + 13 L C + 2 C, in double to see an overflow */
    double L = c->layers, C = c->channels;
    double n = 12 * L * C * C + ((double)c->padded_vocab + c->max_seq) * C + 13 * L * C + 2 * C;
    if (n > 2147483647.0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad model header: %.0f parameters (at most 2^31-1)", name, n);
    return TROUPE_OK;
}

/* ---- whole files ---------------------------------------------------------------------------- */

static troupe_status_t s_slurp(const char *path, const char *what, unsigned char **out,
                               size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    /* a directory, FIFO or device is refused by its kind (a directory would size as LONG_MAX) */
    char expected[64];
    snprintf(expected, sizeof expected, "a %s", what);
    int fd = -1;
    struct stat sb;
    TROUPE_RETURN_IF_ERROR(troupe__file_open_regular(path, expected, 0, 0, &fd, &sb));
    size_t len = (size_t)sb.st_size;
    unsigned char *buf = malloc(len > 0 ? len : 1);
    if (!buf) {
        close(fd);
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory for %zu bytes", path,
                                len);
    }
    size_t done = 0;
    while (done < len) {
        ssize_t got = read(fd, buf + done, len - done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            int e = errno;
            close(fd);
            free(buf);
            return troupe_error_set(TROUPE_FAILED_PRECONDITION, "%s: cannot read the %s: %s", path,
                                    what, got < 0 ? strerror(e) : "the file shrank");
        }
        done += (size_t)got;
    }
    close(fd);
    *out = buf;
    *out_len = len;
    return TROUPE_OK;
}

static int32_t s_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24));
}

static void s_put_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

static float s_f32(const unsigned char *p)
{
    uint32_t u = (uint32_t)s_i32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The header, or an error naming what is wrong with it. */
static troupe_status_t s_header(const char *path, const char *what, const unsigned char *buf,
                                size_t len, int32_t magic, int32_t *hdr)
{
    if (len < S_HEADER_BYTES)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: truncated %s: %zu bytes, shorter than its %d-byte header",
                                path, what, len, S_HEADER_BYTES);
    for (int i = 0; i < GPT_LLMC_HEADER_INTS; i++)
        hdr[i] = s_i32(buf + 4 * i);
    if (hdr[0] != magic)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: bad magic %d (a %s starts with %d)", path, hdr[0], what,
                                magic);
    return TROUPE_OK;
}

/* `have` bytes against the `want` the header implies. */
static troupe_status_t s_size(const char *path, const char *what, size_t have, size_t want)
{
    if (have < want)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: truncated %s: %zu bytes, its header says %zu", path, what,
                                have, want);
    if (have > want)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: %s size %zu bytes disagrees with its header (%zu bytes)",
                                path, what, have, want);
    return TROUPE_OK;
}

/* Writes bytes to a temporary beside path, then renames it over path. */
static troupe_status_t s_write_atomic(const char *path, const char *what,
                                      const unsigned char *head, size_t head_len,
                                      const void *body, size_t body_len)
{
    size_t plen = strlen(path) + 32;
    char *tmp = malloc(plen);
    if (!tmp)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    troupe_status_t st = TROUPE_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = troupe_error_set(errno == ENOENT ? TROUPE_NOT_FOUND : TROUPE_FAILED_PRECONDITION,
                              "%s: cannot write the %s: %s", path, what, strerror(errno));
        goto free_tmp;
    }
    int ok = fwrite(head, 1, head_len, f) == head_len &&
             (body_len == 0 || fwrite(body, 1, body_len, f) == body_len);
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok)
            e = errno;
        st = troupe_error_set(TROUPE_FAILED_PRECONDITION, "%s: cannot write the %s: %s", path,
                              what, strerror(e));
        remove(tmp);
    }
free_tmp:
    free(tmp);
    return st;
}

/* ---- model files ---------------------------------------------------------------------------- */

troupe_status_t gpt_llmc_model_read(const char *path, gpt_llmc_config_t *out_cfg,
                                    float **out_params)
{
    if (!path || !out_cfg || !out_params)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_model_read: NULL argument");
    const char *what = "model file";
    unsigned char *buf = NULL;
    size_t len = 0;
    int32_t hdr[GPT_LLMC_HEADER_INTS];
    TROUPE_RETURN_IF_ERROR(s_slurp(path, what, &buf, &len));
    troupe_status_t st = s_header(path, what, buf, len, GPT_LLMC_MODEL_MAGIC, hdr);
    if (st != TROUPE_OK)
        goto free_buf;
    if (hdr[1] != 3 && hdr[1] != 5) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: unsupported model file version %d (3 = fp32 and 5 = bf16 "
                              "are read)",
                              path, hdr[1]);
        goto free_buf;
    }
    gpt_llmc_config_t cfg = {hdr[2], hdr[3], hdr[4], hdr[5], hdr[6], hdr[7]};
    st = gpt_llmc_config_check(&cfg, path);
    if (st != TROUPE_OK)
        goto free_buf;
    size_t n = gpt_llmc_num_params(&cfg), esize = hdr[1] == 3 ? 4 : 2;
    st = s_size(path, what, len, S_HEADER_BYTES + n * esize);
    if (st != TROUPE_OK)
        goto free_buf;
    float *p = malloc(n * sizeof *p);
    if (!p) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory for %zu parameters",
                              path, n);
        goto free_buf;
    }
    const unsigned char *d = buf + S_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        if (esize == 4) {
            p[i] = s_f32(d + 4 * i);
        } else { /* bf16: the top half of a float */
            uint32_t u = ((uint32_t)d[2 * i] | ((uint32_t)d[2 * i + 1] << 8)) << 16;
            memcpy(&p[i], &u, sizeof u);
        }
    }
    *out_cfg = cfg;
    *out_params = p;
free_buf:
    free(buf);
    return st;
}

troupe_status_t gpt_llmc_model_write(const char *path, const gpt_llmc_config_t *cfg,
                                     const float *params)
{
    if (!path || !cfg || !params)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_model_write: NULL argument");
    TROUPE_RETURN_IF_ERROR(gpt_llmc_config_check(cfg, path));
    unsigned char head[S_HEADER_BYTES] = {0};
    const int32_t v[8] = {GPT_LLMC_MODEL_MAGIC, 3,          cfg->max_seq,  cfg->vocab,
                          cfg->layers,          cfg->heads, cfg->channels, cfg->padded_vocab};
    for (int i = 0; i < 8; i++)
        s_put_i32(head + 4 * i, v[i]);
    size_t n = gpt_llmc_num_params(cfg);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c's files are little-endian; this writer assumes a little-endian host"
#endif
    return s_write_atomic(path, "model file", head, sizeof head, params, n * sizeof(float));
}

/* ---- token shards --------------------------------------------------------------------------- */

/* Checks one shard image; *count its tokens. */
troupe_status_t gpt_llmc_shard_header(const char *path, const unsigned char *head,
                                      size_t file_bytes, size_t min_tokens, size_t *out_count)
{
    if (!path || !head || !out_count)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_shard_header: bad argument");
    const char *what = "token shard";
    int32_t hdr[GPT_LLMC_HEADER_INTS];
    TROUPE_RETURN_IF_ERROR(
        s_header(path, what, head, file_bytes < S_HEADER_BYTES ? file_bytes : S_HEADER_BYTES,
                 GPT_LLMC_SHARD_MAGIC, hdr));
    if (hdr[1] != 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: unsupported token shard version %d (1 is read: uint16 "
                                "tokens)",
                                path, hdr[1]);
    if (hdr[2] < 0)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s: bad token count %d in the header",
                                path, hdr[2]);
    size_t n = (size_t)hdr[2];
    TROUPE_RETURN_IF_ERROR(s_size(path, what, file_bytes, S_HEADER_BYTES + 2 * n));
    if (n < min_tokens)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                "%s: the shard holds %zu tokens, fewer than one batch needs "
                                "(B*T+1 = %zu)",
                                path, n, min_tokens);
    *out_count = n;
    return TROUPE_OK;
}

troupe_status_t gpt_llmc_tokens_check(const char *path, const uint16_t *tokens, size_t n,
                                      size_t first, int32_t vocab)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= (uint32_t)vocab)
            return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                    "%s: token %u at position %zu is not below the vocabulary "
                                    "size V = %d",
                                    path, (unsigned)tokens[i], first + i, vocab);
    return TROUPE_OK;
}

static troupe_status_t s_shard_check(const char *path, const unsigned char *buf, size_t len,
                                     int32_t vocab, size_t min_tokens, size_t *count)
{
    size_t n = 0;
    TROUPE_RETURN_IF_ERROR(gpt_llmc_shard_header(path, buf, len, min_tokens, &n));
    const unsigned char *d = buf + S_HEADER_BYTES;
    for (size_t i = 0; i < n; i++) {
        uint16_t t = (uint16_t)(d[2 * i] | (d[2 * i + 1] << 8));
        TROUPE_RETURN_IF_ERROR(gpt_llmc_tokens_check(path, &t, 1, i, vocab));
    }
    *count = n;
    return TROUPE_OK;
}

troupe_status_t gpt_llmc_shards_glob(const char *pattern, glob_t *g)
{
    memset(g, 0, sizeof *g);
    int gr = glob(pattern, 0, NULL, g);
    if (gr == GLOB_NOMATCH || (gr == 0 && g->gl_pathc == 0)) {
        globfree(g);
        return troupe_error_set(TROUPE_NOT_FOUND, "%s: no token shard matches", pattern);
    }
    if (gr != 0) {
        globfree(g);
        return troupe_error_set(TROUPE_FAILED_PRECONDITION, "%s: cannot expand the pattern",
                                pattern);
    }
    return TROUPE_OK;
}

troupe_status_t gpt_llmc_shards_read(const char *pattern, int32_t vocab, size_t min_tokens,
                                     uint16_t **out_tokens, size_t *out_count, int *out_shards)
{
    if (!pattern || !out_tokens || !out_count || vocab < 1)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_shards_read: bad argument");
    glob_t g;
    TROUPE_RETURN_IF_ERROR(gpt_llmc_shards_glob(pattern, &g));
    troupe_status_t st = TROUPE_OK;
    uint16_t *all = NULL;
    size_t total = 0;
    for (size_t s = 0; s < g.gl_pathc && st == TROUPE_OK; s++) {
        unsigned char *buf = NULL;
        size_t len = 0, n = 0;
        st = s_slurp(g.gl_pathv[s], "token shard", &buf, &len);
        if (st == TROUPE_OK)
            st = s_shard_check(g.gl_pathv[s], buf, len, vocab, min_tokens, &n);
        if (st == TROUPE_OK && n > 0) {
            uint16_t *grown = realloc(all, (total + n) * sizeof *all);
            if (!grown) {
                st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tokens",
                                      g.gl_pathv[s], total + n);
            } else {
                all = grown;
                const unsigned char *d = buf + S_HEADER_BYTES;
                for (size_t i = 0; i < n; i++)
                    all[total + i] = (uint16_t)(d[2 * i] | (d[2 * i + 1] << 8));
                total += n;
            }
        }
        free(buf);
    }
    if (st == TROUPE_OK) {
        *out_tokens = all;
        *out_count = total;
        if (out_shards)
            *out_shards = (int)g.gl_pathc;
    } else {
        free(all);
    }
    globfree(&g);
    return st;
}

troupe_status_t gpt_llmc_shard_write(const char *path, const uint16_t *tokens, size_t count)
{
    if (!path || (!tokens && count > 0) || count > (size_t)INT32_MAX)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_shard_write: bad argument");
    unsigned char head[S_HEADER_BYTES] = {0};
    s_put_i32(head, GPT_LLMC_SHARD_MAGIC);
    s_put_i32(head + 4, 1);
    s_put_i32(head + 8, (int32_t)count);
    return s_write_atomic(path, "token shard", head, sizeof head, tokens, count * 2);
}

/* ---- debug state ---------------------------------------------------------------------------- */

troupe_status_t gpt_llmc_state_read(const char *path, const gpt_llmc_config_t *cfg,
                                    gpt_llmc_state_t *out)
{
    if (!path || !cfg || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_state_read: NULL argument");
    const char *what = "debug state";
    unsigned char *buf = NULL;
    size_t len = 0;
    int32_t hdr[GPT_LLMC_HEADER_INTS];
    TROUPE_RETURN_IF_ERROR(gpt_llmc_config_check(cfg, path));
    TROUPE_RETURN_IF_ERROR(s_slurp(path, what, &buf, &len));
    gpt_llmc_state_t s = {0};
    troupe_status_t st = s_header(path, what, buf, len, GPT_LLMC_STATE_MAGIC, hdr);
    if (st != TROUPE_OK)
        goto free_buf;
    if (hdr[1] != 2) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: unsupported debug state version %d (2 is read)", path, hdr[1]);
        goto free_buf;
    }
    if (hdr[2] < 1 || hdr[3] < 1 || hdr[3] > cfg->max_seq) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: bad batch B=%d T=%d (T from 1 to maxT=%d)", path, hdr[2],
                              hdr[3], cfg->max_seq);
        goto free_buf;
    }
    size_t bt = (size_t)hdr[2] * (size_t)hdr[3], nl = bt * (size_t)cfg->vocab;
    size_t np = gpt_llmc_num_params(cfg);
    st = s_size(path, what, len, S_HEADER_BYTES + 4 * (2 * bt + nl + 1 + np));
    if (st != TROUPE_OK)
        goto free_buf;
    s.batch = hdr[2];
    s.seq = hdr[3];
    s.x = malloc(bt * sizeof *s.x);
    s.y = malloc(bt * sizeof *s.y);
    s.logits = malloc(nl * sizeof *s.logits);
    s.grads = malloc(np * sizeof *s.grads);
    if (!s.x || !s.y || !s.logits || !s.grads) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto free_state;
    }
    const unsigned char *d = buf + S_HEADER_BYTES;
    for (size_t i = 0; i < bt; i++, d += 4)
        s.x[i] = s_i32(d);
    for (size_t i = 0; i < bt; i++, d += 4)
        s.y[i] = s_i32(d);
    for (size_t i = 0; i < bt; i++)
        if (s.x[i] < 0 || s.x[i] >= cfg->vocab || s.y[i] < 0 || s.y[i] >= cfg->vocab) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "%s: token x=%d y=%d at %zu is outside the vocabulary V = %d",
                                  path, s.x[i], s.y[i], i, cfg->vocab);
            goto free_state;
        }
    for (size_t i = 0; i < nl; i++, d += 4)
        s.logits[i] = s_f32(d);
    s.loss = s_f32(d);
    d += 4;
    for (size_t i = 0; i < np; i++, d += 4)
        s.grads[i] = s_f32(d);
    *out = s;
    goto free_buf;
free_state:
    gpt_llmc_state_free(&s);
free_buf:
    free(buf);
    return st;
}

void gpt_llmc_state_free(gpt_llmc_state_t *s)
{
    if (!s)
        return;
    free(s->x);
    free(s->y);
    free(s->logits);
    free(s->grads);
    memset(s, 0, sizeof *s);
}

/* ---- tokenizer ------------------------------------------------------------------------------ */

troupe_status_t gpt_llmc_tokenizer_read(const char *path, gpt_llmc_tokenizer_t *out)
{
    if (!path || !out)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "gpt_llmc_tokenizer_read: NULL argument");
    const char *what = "tokenizer";
    unsigned char *buf = NULL;
    size_t len = 0;
    int32_t hdr[GPT_LLMC_HEADER_INTS];
    TROUPE_RETURN_IF_ERROR(s_slurp(path, what, &buf, &len));
    gpt_llmc_tokenizer_t t = {0};
    troupe_status_t st = s_header(path, what, buf, len, GPT_LLMC_TOKENIZER_MAGIC, hdr);
    if (st != TROUPE_OK)
        goto free_buf;
    if ((hdr[1] != 1 && hdr[1] != 2) || hdr[2] < 1) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: unsupported tokenizer version %d or vocabulary %d", path,
                              hdr[1], hdr[2]);
        goto free_buf;
    }
    /* every token takes at least its length byte: a vocabulary the file cannot hold is refused
     * before the offsets (4 bytes a token) are allocated for it */
    if ((size_t)hdr[2] > len - S_HEADER_BYTES) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: truncated tokenizer: %d tokens need at least %d bytes after "
                              "the header, the file has %zu",
                              path, hdr[2], hdr[2], len - S_HEADER_BYTES);
        goto free_buf;
    }
    t.vocab = hdr[2];
    t.eot = hdr[1] == 2 ? hdr[3] : 50256;
    t.offsets = malloc(((size_t)t.vocab + 1) * sizeof *t.offsets);
    t.bytes = malloc(len);
    if (!t.offsets || !t.bytes) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", path);
        goto free_tok;
    }
    size_t at = S_HEADER_BYTES, used = 0;
    for (int32_t i = 0; i < t.vocab; i++) {
        if (at >= len || at + 1 + buf[at] > len) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "%s: truncated tokenizer: token %d of %d runs past the end "
                                  "(%zu bytes)",
                                  path, i, t.vocab, len);
            goto free_tok;
        }
        size_t n = buf[at];
        t.offsets[i] = (uint32_t)used;
        memcpy(t.bytes + used, buf + at + 1, n);
        used += n;
        at += 1 + n;
    }
    t.offsets[t.vocab] = (uint32_t)used;
    if (at != len) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: tokenizer size %zu bytes disagrees with its %d tokens (%zu "
                              "bytes)",
                              path, len, t.vocab, at);
        goto free_tok;
    }
    *out = t;
    goto free_buf;
free_tok:
    gpt_llmc_tokenizer_free(&t);
free_buf:
    free(buf);
    return st;
}

void gpt_llmc_tokenizer_free(gpt_llmc_tokenizer_t *t)
{
    if (!t)
        return;
    free(t->offsets);
    free(t->bytes);
    memset(t, 0, sizeof *t);
}
