/* gpt — GPT-2 on llm.c's file formats, trained data-parallel with parallel/dp.h.
 *
 *   gpt init   --layers L --heads NH --channels C --max-seq maxT --vocab V [--padded-vocab Vp]
 *              --seed S --out FILE
 *   gpt data   [--text FILE]... --out-dir DIR [--name NAME] [--val-fraction F]
 *   gpt train  --model FILE --data GLOB [--val GLOB] --batch B --seq T --steps N [...]
 *   gpt sample --model FILE --tokens N --seed S [--temperature X] [--prompt TEXT |
 *              --prompt-tokens ID,...] [--tokenizer FILE]
 *
 * train: batch k holds the B sequences of T+1 tokens starting at tokens kBT, kBT+T, ... of the
 * concatenated shards (llm.c's loader without shuffling; back to token 0 when fewer than BT+1
 * remain; --shuffle: a seeded order of its own, loader.h); replica r of R takes sequences
 * [rB/R, (r+1)B/R), so every layout trains on the same batches, and each rank reads only its
 * replicas' sequences (loader.h), printing `data rank=R ... resident_bytes=N` first. Rank 0
 * prints `step=K loss=X` per step, `val_loss=X` at each validation and last
 * `final loss=X val_loss=X tokens_per_s=X ranks=R streams=S steps=N`. docs/gpt.md has the rest.
 */
#define _POSIX_C_SOURCE 200809L
#include "curve.h"
#include "llmc.h"
#include "loader.h"
#include "model.h"

#include "curve_plot.h"

#include "base/config.h"
#include "base/file_impl.h"
#include "base/log.h"
#include "parallel/dp.h"
#include "transport/mpi/cluster.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_FORTUNES "/usr/share/games/fortunes"

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A failure: one line on stderr, exit status 1 (75 when the cluster failed). */
static void s_die(troupe_status_t failed, const char *what)
{
    char line[1400];
    snprintf(line, sizeof line, "gpt: %s%s%s", what, *troupe_last_error() ? ": " : "",
             troupe_last_error());
    fprintf(stderr, "%s\n", line);
    fflush(stdout);
    troupe_status_t st = TROUPE_OK;
    if (troupe_cluster_is_distributed())
        st = troupe_cluster_leave(line);
    if (st == TROUPE_OK)
        st = troupe_cluster_finalize();
    (void)st;
    exit(failed == TROUPE_TRANSPORT_ERROR || failed == TROUPE_DEADLINE_EXCEEDED ? 75 : 1);
}

#define CHECK(expr, what)                                                                          \
    do {                                                                                           \
        troupe_status_t check_st_ = (expr);                                                        \
        if (check_st_ != TROUPE_OK)                                                                \
            s_die(check_st_, what);                                                                \
    } while (0)

/* ---- options -------------------------------------------------------------------------------- */

typedef struct opt {
    const char *name;
    const char *value;
} opt_t;

#define S_MAX_OPTS 48
typedef struct opts {
    opt_t v[S_MAX_OPTS];
    int n;
    const char *texts[64]; /* gpt data --text, repeated */
    int ntexts;
} opts_t;

static int s_usage(const char *msg)
{
    if (troupe_cluster_rank() == 0)
        fprintf(stderr, "gpt: %s\n(gpt --help lists the commands and options)\n", msg);
    troupe_status_t st = troupe_cluster_finalize();
    (void)st;
    return 2;
}

/* The commands and options: on stdout for --help, on stderr for a bare `gpt` (a usage error). */
static void s_help(FILE *f)
{
    fprintf(f,
        "usage: gpt COMMAND [options]      (train: under mpiexec, one process per rank)\n"
        "  init   --layers L --heads NH --channels C --max-seq maxT --vocab V [--padded-vocab Vp]\n"
        "         --seed S --out FILE          a GPT-2 random init in llm.c's model format\n"
        "  data   [--text FILE]... --out-dir DIR [--name NAME] [--val-fraction F]\n"
        "         bytes (V = 256) into NAME_train.bin and NAME_val.bin [fortunes, 0.1];\n"
        "         default text: Debian's fortunes (" S_FORTUNES ")\n"
        "  train  --model FILE --data GLOB [--val GLOB] --batch B --seq T --steps N\n"
        "         [--lr 1e-4] [--weight-decay 0] [--beta1 0.9 --beta2 0.999 --eps 1e-8]\n"
        "         [--schedule constant|cosine --warmup K] [--save FILE --save-every K]\n"
        "         [--resume FILE.state] [--backend NAME] [--streams S] [--val-every K\n"
        "         --val-batches M] [--sample-every K --sample-tokens N] [--seed S]\n"
        "         [--curve FILE.csv] [--plot FILE.png%s] [--grad-accum K] [--shuffle]\n"
        "         --batch is global: split over every replica of every rank and over\n"
        "         --grad-accum K micro-steps per optimizer step [1]; each rank reads only\n"
        "         its share of each batch; --shuffle: an order of its own (seeded by\n"
        "         --seed, the same batches for every layout)\n"
        "         [--precision fp32|bf16|fp16]: bf16 and fp16 run the matrix products on\n"
        "         bfloat16 or half copies of their factors with fp32 sums; parameters,\n"
        "         gradients and the optimizer stay fp32; fp16 adds dynamic loss scaling\n"
        "         (skipped steps appended to the last line) [fp32]\n"
        "  sample --model FILE --tokens N --seed S [--temperature 1] [--prompt TEXT |\n"
        "         --prompt-tokens ID,ID,...] [--tokenizer FILE] [--backend NAME]\n"
        "         a text --prompt needs a byte-level model (V >= 256): GPT-2 BPE prompts go\n"
        "         as --prompt-tokens (llm.c's tokenizer file cannot encode)\n",
        troupe_curve_plot_available() ? "" : " (not built: this gpt has no cairo)");
}

static bool s_parse(int argc, char **argv, const char *const *known, size_t nknown, opts_t *o,
                    char *err, size_t cap)
{
    memset(o, 0, sizeof *o);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool ok = false;
        for (size_t k = 0; k < nknown && !ok; k++)
            ok = strcmp(a, known[k]) == 0;
        if (!ok) {
            snprintf(err, cap, "unknown option '%.200s' for %s", a, argv[1]);
            return false;
        }
        if (strcmp(a, "--shuffle") == 0) { /* a flag: no value */
            if (o->n == S_MAX_OPTS) {
                snprintf(err, cap, "too many options");
                return false;
            }
            o->v[o->n].name = a;
            o->v[o->n++].value = "1";
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(err, cap, "option %s needs a value", a);
            return false;
        }
        if (strcmp(a, "--text") == 0) {
            if (o->ntexts == 64) {
                snprintf(err, cap, "at most 64 --text files");
                return false;
            }
            o->texts[o->ntexts++] = argv[++i];
            continue;
        }
        if (o->n == S_MAX_OPTS) {
            snprintf(err, cap, "too many options");
            return false;
        }
        o->v[o->n].name = a;
        o->v[o->n++].value = argv[++i];
    }
    return true;
}

static const char *s_get(const opts_t *o, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->v[i].name, name) == 0)
            v = o->v[i].value;
    return v;
}

/* An integer option in [lo, hi] (def when absent, or -1 required). */
static bool s_int(const opts_t *o, const char *name, long long def, long long lo, long long hi,
                  long long *out, char *err, size_t cap)
{
    const char *v = s_get(o, name);
    if (!v) {
        if (def == LLONG_MIN) {
            snprintf(err, cap, "option %s is required", name);
            return false;
        }
        *out = def;
        return true;
    }
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        snprintf(err, cap, "option %s: '%.100s' is not an integer from %lld to %lld", name, v, lo,
                 hi);
        return false;
    }
    *out = x;
    return true;
}

static bool s_real(const opts_t *o, const char *name, double def, double lo, double hi,
                   double *out, char *err, size_t cap)
{
    const char *v = s_get(o, name);
    if (!v) {
        *out = def;
        return true;
    }
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        snprintf(err, cap, "option %s: '%.100s' is not a number from %g to %g", name, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

#define REQ LLONG_MIN

/* ---- gpt init ------------------------------------------------------------------------------- */

static int s_cmd_init(int argc, char **argv)
{
    static const char *const known[] = {"--layers", "--heads", "--channels", "--max-seq",
                                        "--vocab",  "--padded-vocab", "--seed", "--out"};
    opts_t o;
    char err[512];
    long long L, NH, C, T, V, Vp, seed;
    if (!s_parse(argc, argv, known, sizeof known / sizeof *known, &o, err, sizeof err) ||
        !s_int(&o, "--layers", REQ, 1, 1024, &L, err, sizeof err) ||
        !s_int(&o, "--heads", REQ, 1, 1024, &NH, err, sizeof err) ||
        !s_int(&o, "--channels", REQ, 1, 65536, &C, err, sizeof err) ||
        !s_int(&o, "--max-seq", REQ, 1, 1 << 20, &T, err, sizeof err) ||
        !s_int(&o, "--vocab", REQ, 1, 65536, &V, err, sizeof err) ||
        !s_int(&o, "--padded-vocab", (V + 127) / 128 * 128, V, 1 << 20, &Vp, err, sizeof err) ||
        !s_int(&o, "--seed", 0, 0, LLONG_MAX, &seed, err, sizeof err))
        return s_usage(err);
    const char *out = s_get(&o, "--out");
    if (!out)
        return s_usage("option --out is required");
    gpt_llmc_config_t cfg = {(int32_t)T, (int32_t)V, (int32_t)L, (int32_t)NH, (int32_t)C,
                             (int32_t)Vp};
    CHECK(gpt_llmc_config_check(&cfg, "gpt init"), "checking the sizes");
    size_t n = gpt_llmc_num_params(&cfg);
    float *p = malloc(n * sizeof *p);
    if (!p)
        CHECK(troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%zu parameters", n), "out of memory");
    CHECK(gpt_init_params(&cfg, (uint64_t)seed, p), "initialising");
    CHECK(gpt_llmc_model_write(out, &cfg, p), "writing the model");
    printf("wrote %s: L=%lld NH=%lld C=%lld maxT=%lld V=%lld Vp=%lld, %zu parameters\n", out, L,
           NH, C, T, V, Vp, n);
    free(p);
    CHECK(troupe_cluster_finalize(), "stopping the cluster");
    return 0;
}

/* ---- gpt data ------------------------------------------------------------------------------- */

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends the bytes of file path to *buf. */
static bool s_append_file(const char *path, unsigned char **buf, size_t *len, size_t *cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gpt data: %s: cannot open: %s\n", path, strerror(errno));
        return false;
    }
    unsigned char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (*len + got > *cap) {
            size_t nc = (*cap ? 2 * *cap : 1 << 20) + got;
            unsigned char *g = realloc(*buf, nc);
            if (!g) {
                fclose(f);
                fprintf(stderr, "gpt data: out of memory\n");
                return false;
            }
            *buf = g;
            *cap = nc;
        }
        memcpy(*buf + *len, chunk, got);
        *len += got;
    }
    bool ok = !ferror(f);
    fclose(f);
    if (!ok)
        fprintf(stderr, "gpt data: %s: read error\n", path);
    return ok;
}

/* mkdir -p path (mode 0777 before the umask): 0, or -1 with errno. */
static int s_mkdirs(const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return -1;
        *c = '/';
    }
    struct stat sb;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return -1;
    if (stat(p, &sb) != 0)
        return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int s_cmd_data(int argc, char **argv)
{
    static const char *const known[] = {"--text", "--out-dir", "--name", "--val-fraction"};
    opts_t o;
    char err[512];
    double frac;
    if (!s_parse(argc, argv, known, sizeof known / sizeof *known, &o, err, sizeof err) ||
        !s_real(&o, "--val-fraction", 0.1, 0.0, 0.9, &frac, err, sizeof err))
        return s_usage(err);
    const char *dir = s_get(&o, "--out-dir"), *name = s_get(&o, "--name");
    if (!dir)
        return s_usage("option --out-dir is required");
    if (s_mkdirs(dir) != 0) {
        fprintf(stderr, "gpt data: %s: cannot create the directory: %s\n", dir, strerror(errno));
        return 1;
    }
    if (!name)
        name = o.ntexts ? "text" : "fortunes";
    /* the text: --text files in order, else every fortune file (sorted; not .dat, .u8) */
    char *files[1024];
    int nfiles = 0;
    if (o.ntexts) {
        for (int i = 0; i < o.ntexts; i++)
            files[nfiles++] = strdup(o.texts[i]);
    } else {
        DIR *d = opendir(S_FORTUNES);
        if (!d) {
            fprintf(stderr,
                    "gpt data: %s: %s (install Debian's fortunes package, or give --text)\n",
                    S_FORTUNES, strerror(errno));
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d)) && nfiles < 1024) {
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.' || (l > 4 && !strcmp(e->d_name + l - 4, ".dat")) ||
                (l > 3 && !strcmp(e->d_name + l - 3, ".u8")))
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", S_FORTUNES, e->d_name);
            struct stat sb;
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
                files[nfiles++] = strdup(path);
        }
        closedir(d);
        qsort(files, (size_t)nfiles, sizeof *files, s_cmp_str);
    }
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    bool ok = nfiles > 0;
    for (int i = 0; i < nfiles && ok; i++)
        ok = s_append_file(files[i], &buf, &len, &cap);
    for (int i = 0; i < nfiles; i++)
        free(files[i]);
    if (!ok || len < 2) {
        if (ok)
            fprintf(stderr, "gpt data: no text to tokenise\n");
        free(buf);
        return 1;
    }
    size_t nval = (size_t)((double)len * frac), ntrain = len - nval;
    uint16_t *tok = malloc(len * sizeof *tok);
    if (!tok) {
        free(buf);
        fprintf(stderr, "gpt data: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < len; i++)
        tok[i] = buf[i];
    free(buf);
    char tp[4096], vp[4096];
    snprintf(tp, sizeof tp, "%s/%s_train.bin", dir, name);
    snprintf(vp, sizeof vp, "%s/%s_val.bin", dir, name);
    CHECK(gpt_llmc_shard_write(tp, tok, ntrain), "writing the training shard");
    if (nval > 0)
        CHECK(gpt_llmc_shard_write(vp, tok + ntrain, nval), "writing the validation shard");
    printf("wrote %s (%zu tokens) and %s (%zu tokens) from %d file(s); V = 256 (bytes)\n", tp,
           ntrain, vp, nval, nfiles);
    free(tok);
    CHECK(troupe_cluster_finalize(), "stopping the cluster");
    return 0;
}

/* ---- sampling ------------------------------------------------------------------------------- */

/* xorshift* as llm.c's random_u32 / random_f32: a uniform in [0, 1). */
static float s_random_f32(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32) >> 8) / 16777216.0f;
}

/* Writes token t as text: a byte (V <= 256) or the tokenizer's string. */
static void s_emit(FILE *f, int32_t t, const gpt_llmc_tokenizer_t *tk)
{
    if (tk && tk->offsets && t >= 0 && t < tk->vocab)
        fwrite(tk->bytes + tk->offsets[t], 1, tk->offsets[t + 1] - tk->offsets[t], f);
    else if (t >= 0 && t < 256)
        fputc(t, f);
}

/* Generates n tokens after the prompt with the model of runner r (B = 1, T = its seq) and
 * prints them. */
static troupe_status_t s_generate(gpt_runner_t *r, gpt_model_t *m, const gpt_llmc_config_t *cfg,
                                  const int32_t *prompt, int nprompt, int n, double temp,
                                  uint64_t seed, const gpt_llmc_tokenizer_t *tk, FILE *out)
{
    int64_t T = m->cfg.seq, Vp = cfg->padded_vocab, V = cfg->vocab;
    int32_t *ctx = calloc((size_t)T, sizeof *ctx);
    double *logits = malloc((size_t)(T * Vp) * sizeof *logits);
    double *prob = malloc((size_t)V * sizeof *prob);
    troupe_status_t st = TROUPE_OK;
    if (!ctx || !logits || !prob) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "sampling: out of memory");
        goto done;
    }
    int len = 0;
    for (int i = 0; i < nprompt && len < T; i++) {
        ctx[len++] = prompt[i];
        s_emit(out, prompt[i], tk);
    }
    uint64_t rng = seed ? seed : 1337;
    for (int k = 0; k < n && st == TROUPE_OK; k++) {
        if (len == T) { /* slide the window by half */
            memmove(ctx, ctx + T / 2, (size_t)(T - T / 2) * sizeof *ctx);
            len = (int)(T - T / 2);
        }
        st = gpt_model_set_batch(m, ctx, NULL);
        if (st == TROUPE_OK)
            st = gpt_runner_run(r);
        if (st == TROUPE_OK)
            st = troupe_tnode_get_values(m->logits, logits, (size_t)(T * Vp));
        if (st != TROUPE_OK)
            break;
        const double *row = logits + (size_t)(len - 1) * (size_t)Vp;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++)
            mx = fmax(mx, row[v] / temp);
        for (int64_t v = 0; v < V; v++)
            sum += prob[v] = exp(row[v] / temp - mx);
        double u = s_random_f32(&rng) * sum, acc = 0;
        int32_t next = (int32_t)(V - 1);
        for (int64_t v = 0; v < V; v++) {
            acc += prob[v];
            if (u < acc) {
                next = (int32_t)v;
                break;
            }
        }
        ctx[len++] = next;
        s_emit(out, next, tk);
    }
    fputc('\n', out);
    fflush(out);
done:
    free(ctx);
    free(logits);
    free(prob);
    return st;
}

/* The first token when there is no prompt: GPT-2's end of text, else a newline. */
static int32_t s_start_token(const gpt_llmc_config_t *cfg, const gpt_llmc_tokenizer_t *tk)
{
    if (tk && tk->offsets)
        return tk->eot;
    return cfg->vocab == 50257 ? 50256 : (cfg->vocab > 10 ? 10 : 0);
}

static int s_cmd_sample(int argc, char **argv)
{
    static const char *const known[] = {"--model",       "--tokens",    "--seed",
                                        "--temperature", "--prompt",    "--tokenizer",
                                        "--backend",     "--prompt-tokens"};
    opts_t o;
    char err[512];
    long long ntok, seed;
    double temp;
    if (!s_parse(argc, argv, known, sizeof known / sizeof *known, &o, err, sizeof err) ||
        !s_int(&o, "--tokens", REQ, 1, 1 << 20, &ntok, err, sizeof err) ||
        !s_int(&o, "--seed", 1337, 0, LLONG_MAX, &seed, err, sizeof err) ||
        !s_real(&o, "--temperature", 1.0, 1e-3, 100.0, &temp, err, sizeof err))
        return s_usage(err);
    const char *path = s_get(&o, "--model");
    if (!path)
        return s_usage("option --model is required");
    const char *prompt = s_get(&o, "--prompt"), *ptoks = s_get(&o, "--prompt-tokens");
    if (prompt && ptoks)
        return s_usage("options --prompt and --prompt-tokens exclude each other");
    gpt_llmc_config_t cfg;
    float *flat = NULL;
    CHECK(gpt_llmc_model_read(path, &cfg, &flat), "reading the model");
    gpt_llmc_tokenizer_t tk = {0};
    if (s_get(&o, "--tokenizer"))
        CHECK(gpt_llmc_tokenizer_read(s_get(&o, "--tokenizer"), &tk), "reading the tokenizer");
    int32_t *pt = NULL;
    int np = 0;
    if (ptoks) {
        /* token ids, comma-separated, each below V */
        pt = malloc((strlen(ptoks) / 2 + 1) * sizeof *pt);
        if (!pt)
            CHECK(troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "prompt"), "out of memory");
        const char *c = ptoks;
        for (;;) {
            char *end = NULL;
            errno = 0;
            long v = strtol(c, &end, 10);
            if (errno || end == c || v < 0 || v >= cfg.vocab || (*end && *end != ',')) {
                snprintf(err, sizeof err,
                         "option --prompt-tokens: '%.100s' is not a list of token ids from 0 to "
                         "%d separated by commas",
                         ptoks, cfg.vocab - 1);
                free(pt);
                free(flat);
                gpt_llmc_tokenizer_free(&tk);
                return s_usage(err);
            }
            pt[np++] = (int32_t)v;
            if (!*end)
                break;
            c = end + 1;
        }
    } else if (prompt && *prompt) {
        if (cfg.vocab < 256) {
            fprintf(stderr, "gpt sample: --prompt needs a byte-level model (V >= 256), V = %d\n",
                    cfg.vocab);
            free(flat);
            gpt_llmc_tokenizer_free(&tk);
            return 2;
        }
        if (tk.offsets) {
            fprintf(stderr,
                    "gpt sample: --prompt with --tokenizer: a text prompt cannot be encoded: "
                    "llm.c's tokenizer file holds GPT-2's decoding table only, not the merge "
                    "ranks BPE encoding needs (an encoding from it alone would not be GPT-2's); "
                    "give the prompt's token ids instead, e.g. --prompt-tokens 15496,11,995 "
                    "(GPT-2's encoding of \"Hello, world\", from tiktoken or llm.c's "
                    "scripts)\n");
            free(flat);
            gpt_llmc_tokenizer_free(&tk);
            return 2;
        }
        np = (int)strlen(prompt);
        pt = malloc((size_t)np * sizeof *pt);
        for (int i = 0; pt && i < np; i++)
            pt[i] = (unsigned char)prompt[i];
    } else {
        pt = malloc(sizeof *pt);
        if (pt)
            pt[0] = s_start_token(&cfg, &tk);
        np = 1;
    }
    gpt_params_t *p = NULL;
    gpt_model_t *m = NULL;
    gpt_runner_t *r = NULL;
    int64_t T = cfg.max_seq < 1024 ? cfg.max_seq : 1024;
    gpt_model_config_t mc = {.batch = 1, .seq = T};
    CHECK(gpt_params_new(&cfg, &p), "building the parameters");
    CHECK(gpt_params_set(p, flat), "placing the parameters");
    CHECK(gpt_model_new(p, &mc, &m), "building the model");
    CHECK(gpt_runner_new(s_get(&o, "--backend"), NULL, NULL, p, m, "gpt_sample", &r),
          "compiling the model");
    CHECK(s_generate(r, m, &cfg, pt, np, (int)ntok, temp, (uint64_t)seed, &tk, stdout),
          "sampling");
    gpt_runner_destroy(&r);
    gpt_model_destroy(&m);
    gpt_params_destroy(&p);
    gpt_llmc_tokenizer_free(&tk);
    free(pt);
    free(flat);
    CHECK(troupe_cluster_finalize(), "stopping the cluster");
    return 0;
}

/* ---- gpt train ------------------------------------------------------------------------------ */

typedef struct train {
    long long B, T, steps, warmup, save_every, streams, val_every, val_batches, sample_every,
        sample_tokens, seed, grad_accum;
    double lr, wd, beta1, beta2, eps;
    double grad_clip; /* --grad-clip C: the largest global gradient norm, 0 off */
    bool cosine, shuffle;
    troupe_dp_precision_t precision; /* --precision: the products' (mixed precision) */
    const char *model, *data, *val, *save, *resume, *backend, *curve, *plot;
} train_t;

static double s_lr_at(const train_t *t, long long step)
{
    if (step < t->warmup)
        return t->lr * (double)(step + 1) / (double)t->warmup;
    if (!t->cosine)
        return t->lr;
    double span = (double)(t->steps - t->warmup);
    double ratio = span > 0 ? (double)(step - t->warmup) / span : 1.0;
    return t->lr * 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));
}

/* FILE.state, dp's checkpoint beside --save's FILE. */
static void s_state_path(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.state", path);
}

/* Writes the model file (rank 0) and, every rank, dp's checkpoint beside it (FILE.state). */
static void s_save(troupe_dp_t *dp, gpt_params_t *p, const char *path, int rank)
{
    char state[4200];
    s_state_path(path, state, sizeof state);
    CHECK(troupe_dp_save(dp, state), "saving the training state");
    if (rank != 0)
        return;
    float *flat = malloc(gpt_llmc_num_params(&p->cfg) * sizeof *flat);
    if (!flat)
        CHECK(troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "saving"), "out of memory");
    CHECK(troupe_dp_params_to_host(dp), "reading the parameters");
    CHECK(gpt_params_get(p, flat), "reading the parameters");
    CHECK(gpt_llmc_model_write(path, &p->cfg, flat), "saving the model");
    free(flat);
}

static int s_cmd_train(int argc, char **argv)
{
    static const char *const known[] = {
        "--model",       "--data",        "--val",          "--batch",        "--seq",
        "--steps",       "--lr",          "--weight-decay", "--beta1",        "--beta2",
        "--eps",         "--schedule",    "--warmup",       "--grad-clip",    "--save",
        "--save-every",  "--resume",      "--backend",      "--streams",      "--val-every",
        "--val-batches", "--sample-every", "--sample-tokens", "--seed",
        "--curve",       "--plot",        "--grad-accum",   "--shuffle",      "--precision"};
    opts_t o;
    char err[512];
    train_t t = {0};
    int rank = troupe_cluster_rank(), ranks = troupe_cluster_size();
    if (!s_parse(argc, argv, known, sizeof known / sizeof *known, &o, err, sizeof err) ||
        !s_int(&o, "--batch", REQ, 1, 1 << 20, &t.B, err, sizeof err) ||
        !s_int(&o, "--seq", REQ, 1, 1 << 20, &t.T, err, sizeof err) ||
        !s_int(&o, "--steps", REQ, 0, LLONG_MAX, &t.steps, err, sizeof err) ||
        !s_int(&o, "--warmup", 0, 0, LLONG_MAX, &t.warmup, err, sizeof err) ||
        !s_int(&o, "--save-every", 0, 0, LLONG_MAX, &t.save_every, err, sizeof err) ||
        !s_int(&o, "--streams", 0, 0, 1024, &t.streams, err, sizeof err) ||
        !s_int(&o, "--grad-accum", 1, 1, 1024, &t.grad_accum, err, sizeof err) ||
        !s_int(&o, "--val-every", 0, 0, LLONG_MAX, &t.val_every, err, sizeof err) ||
        !s_int(&o, "--val-batches", 5, 1, 1 << 20, &t.val_batches, err, sizeof err) ||
        !s_int(&o, "--sample-every", 0, 0, LLONG_MAX, &t.sample_every, err, sizeof err) ||
        !s_int(&o, "--sample-tokens", 64, 1, 1 << 20, &t.sample_tokens, err, sizeof err) ||
        !s_int(&o, "--seed", 0, 0, LLONG_MAX, &t.seed, err, sizeof err) ||
        !s_real(&o, "--lr", 1e-4, 1e-12, 10.0, &t.lr, err, sizeof err) ||
        !s_real(&o, "--weight-decay", 0.0, 0.0, 10.0, &t.wd, err, sizeof err) ||
        !s_real(&o, "--beta1", 0.9, 0.0, 0.999999, &t.beta1, err, sizeof err) ||
        !s_real(&o, "--beta2", 0.999, 0.0, 0.999999999, &t.beta2, err, sizeof err) ||
        !s_real(&o, "--eps", 1e-8, 1e-30, 1.0, &t.eps, err, sizeof err) ||
        !s_real(&o, "--grad-clip", 0.0, 0.0, 1e30, &t.grad_clip, err, sizeof err))
        return s_usage(err);
    t.model = s_get(&o, "--model");
    t.data = s_get(&o, "--data");
    t.val = s_get(&o, "--val");
    t.save = s_get(&o, "--save");
    t.resume = s_get(&o, "--resume");
    t.backend = s_get(&o, "--backend");
    t.curve = s_get(&o, "--curve");
    t.plot = s_get(&o, "--plot");
    const char *sched = s_get(&o, "--schedule");
    if (!t.model || !t.data)
        return s_usage("options --model and --data are required");
    if (sched && strcmp(sched, "constant") && strcmp(sched, "cosine"))
        return s_usage("option --schedule: 'constant' or 'cosine'");
    t.cosine = sched && !strcmp(sched, "cosine");
    t.shuffle = s_get(&o, "--shuffle") != NULL;
    const char *precision = s_get(&o, "--precision");
    if (precision && troupe_dp_precision_parse(precision, &t.precision) != TROUPE_OK)
        return s_usage("option --precision: 'fp32', 'bf16' or 'fp16'");
    if (t.save_every && !t.save)
        return s_usage("option --save-every needs --save");
    if (t.save) {
        /* FILE and FILE.state, checked before training, so that a long run does not end by
         * failing its first save */
        char state[4200];
        s_state_path(t.save, state, sizeof state);
        if (troupe__file_check_writable(t.save) != TROUPE_OK ||
            troupe__file_check_writable(state) != TROUPE_OK) {
            troupe__format_fit(err, sizeof err, "option --save: %s", troupe_last_error());
            return s_usage(err);
        }
    }
    if (t.plot && !troupe_curve_plot_available())
        return s_usage("option --plot: this gpt was built without cairo (libcairo2-dev): it "
                       "cannot draw");
    if (gpt_curve_check(t.curve, t.plot) != TROUPE_OK)
        return s_usage(troupe_last_error());

    /* every rank runs with the same settings (those that decide the results) */
    char sv[15][64];
    const char *sn[15] = {"--batch", "--seq",    "--steps",  "--lr",    "--weight-decay",
                          "--beta1", "--beta2",  "--eps",    "--schedule", "--warmup",
                          "--seed",  "--model",  "--grad-accum", "--shuffle", "--precision"};
    snprintf(sv[0], 64, "%lld", t.B);
    snprintf(sv[1], 64, "%lld", t.T);
    snprintf(sv[2], 64, "%lld", t.steps);
    snprintf(sv[3], 64, "%.17g", t.lr);
    snprintf(sv[4], 64, "%.17g", t.wd);
    snprintf(sv[5], 64, "%.17g", t.beta1);
    snprintf(sv[6], 64, "%.17g", t.beta2);
    snprintf(sv[7], 64, "%.17g", t.eps);
    snprintf(sv[8], 64, "%s", t.cosine ? "cosine" : "constant");
    snprintf(sv[9], 64, "%lld", t.warmup);
    snprintf(sv[10], 64, "%lld", t.seed);
    snprintf(sv[11], 64, "%.60s", t.model);
    snprintf(sv[12], 64, "%lld", t.grad_accum);
    snprintf(sv[13], 64, "%s", t.shuffle ? "on" : "off");
    snprintf(sv[14], 64, "%s", troupe_dp_precision_name(t.precision));
    troupe_dp_setting_t settings[15];
    for (int i = 0; i < 15; i++)
        settings[i] = (troupe_dp_setting_t){sn[i], sv[i]};
    CHECK(troupe_dp_agree(settings, 15), "checking the options across ranks");

    /* the model file and the data, checked before any work */
    gpt_llmc_config_t cfg;
    float *flat = NULL;
    CHECK(gpt_llmc_model_read(t.model, &cfg, &flat), "reading the model");
    if (cfg.max_seq < t.T) {
        troupe_error_set(TROUPE_INVALID_ARGUMENT,
                         "%s: the checkpoint's maxT = %d is below --seq %lld", t.model,
                         cfg.max_seq, t.T);
        s_die(TROUPE_INVALID_ARGUMENT, "checking the model");
    }
    /* the shards, checked whole, then read a batch at a time (loader.h) */
    gpt_shards_t *shards = NULL, *vshards = NULL;
    size_t need = (size_t)(t.B * t.T + 1);
    CHECK(gpt_shards_open(t.data, cfg.vocab, need, &shards), "reading the training data");
    if (t.val && rank == 0)
        CHECK(gpt_shards_open(t.val, cfg.vocab, need, &vshards), "reading the validation data");
    size_t ntokens = gpt_shards_count(shards), nvtokens = gpt_shards_count(vshards);
    int nshards = gpt_shards_files(shards);

    /* replicas, and this one's share of each batch */
    int streams = (int)t.streams;
    if (streams <= 0) {
        troupe_backend_t *b = NULL;
        CHECK(troupe_backend_open(t.backend, TROUPE_MOST_PARALLEL_STREAMS, &b),
              "opening the backend");
        troupe_status_t st = troupe_dp_suggested_streams(b, &streams);
        troupe_backend_close(&b);
        CHECK(st, "choosing the streams");
    }
    int64_t replicas = 0, offset = 0;
    CHECK(troupe_dp_replicas(streams, &replicas, &offset), "counting the replicas");
    int64_t parts = replicas * t.grad_accum; /* --grad-accum micro-steps on every replica */
    if (t.B % parts != 0) {
        snprintf(err, sizeof err,
                 "option --batch: %lld sequences do not split evenly over %lld replicas x %lld "
                 "micro-steps (--grad-accum)",
                 t.B, (long long)replicas, t.grad_accum);
        free(flat);
        gpt_shards_close(&shards);
        gpt_shards_close(&vshards);
        return s_usage(err);
    }
    int64_t b = t.B / parts;
    gpt_order_t order = {.batch = t.B, .seq = t.T, .count = ntokens, .shuffle = t.shuffle,
                         .seed = (uint64_t)t.seed};
    int64_t nb = gpt_order_batches(&order); /* batches before the wrap */
    /* This rank's share of each batch: in micro-step j (of K, --grad-accum) replica k takes
     * minibatch j replicas + offset + k of the batch, sequences [that b, + b) (parallel/dp.h's
     * round-robin: micro-step j of step s is round s K + j), and reads it from row
     * (j replicas + offset + k) mod rows of x_all, as dp binds the feed's index (the step's
     * part, s K replicas, is a multiple of rows). When every rank runs the same streams N (the
     * sum of the squares says so: sum N_r^2 = (sum N_r)^2 / R only for equal N_r) and
     * gcd(K, R) = 1 (K = 1 always), x_all holds just this rank's K N minibatches: the row is
     * N ((j R + r) mod K) + k, distinct for every j and k. Otherwise it has a row per replica
     * and micro-step of the run, of which this rank fills its own. */
    int64_t sq = 0, sq_offset = 0, K = t.grad_accum;
    CHECK(troupe_dp_replicas(streams * streams, &sq, &sq_offset), "counting the replicas");
    int64_t g = K, h = ranks;
    while (h) {
        int64_t r_ = g % h;
        g = h;
        h = r_;
    }
    bool compact = sq * ranks == replicas * replicas && g == 1;
    int64_t rows = K * (compact ? streams : replicas);
    gpt_params_t *p = NULL;
    gpt_model_t *m = NULL;
    const troupe_prec_t cp = t.precision == TROUPE_DP_PRECISION_BF16   ? TROUPE_PREC_BFLOAT16
                             : t.precision == TROUPE_DP_PRECISION_FP16 ? TROUPE_PREC_HALF
                                                                       : TROUPE_PREC_SINGLE;
    gpt_model_config_t mc = {.batch = b, .seq = t.T, .num_batches = rows, .train = true,
                             .targets = true, .compute_prec = cp};
    CHECK(gpt_params_new(&cfg, &p), "building the parameters");
    CHECK(gpt_params_set(p, flat), "placing the parameters");
    CHECK(gpt_model_new(p, &mc, &m), "building the model");
    size_t share = (size_t)(rows * b * t.T), mine = (size_t)(K * streams * b * t.T);
    int32_t *hx = calloc(share, sizeof *hx), *hy = calloc(share, sizeof *hy);
    int32_t *lx = malloc(mine * sizeof *lx), *ly = malloc(mine * sizeof *ly);
    if (!hx || !hy || !lx || !ly)
        CHECK(troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%zu tokens a step", share),
              "out of memory");
    /* each step's minibatches reach the streams' copies of x_all and y_all as automatic
     * transfers after the host write (gpt_model_set_minibatches): they must be on */
    troupe_config_set_auto_host_transfers(true);
    troupe_tnode_t *inputs[3] = {m->x_all, m->y_all, m->pos};
    troupe_dp_model_t model = {.grad_comp = m->comp,
                               .batch_index = GPT_BATCH_SYMBOL,
                               .num_batches = mc.num_batches,
                               .params = p->params,
                               .grads = p->grads,
                               .n_params = p->n,
                               .loss = m->loss,
                               .inputs = inputs,
                               .n_inputs = 3,
                               .feed_comp = m->feed_comp,
                               .loss_scale = m->loss_scale};
    troupe_optimizer_t opt = {.kind = TROUPE_OPT_ADAMW, .lr = s_lr_at(&t, 0),
                              .weight_decay = t.wd, .beta1 = t.beta1, .beta2 = t.beta2,
                              .eps = t.eps};
    troupe_dp_config_t dc = {.backend = t.backend, .streams = streams, .optimizer = opt,
                             .grad_accum = (int)t.grad_accum, .grad_clip = t.grad_clip,
                             .precision = t.precision};
    /* compiling is the long wait of a model's first run (GPT-2 124M on cuda: minutes of
     * NVRTC), silent otherwise: say so first, and how long it took */
    double t_compile = s_now();
    if (rank == 0) {
        printf("gpt: compiling the training routines for backend %s (code cache %s: a "
               "model's first run compiles, later runs load)\n",
               t.backend ? t.backend : troupe_config_backend(), troupe_config_cache_dir());
        fflush(stdout);
    }
    /* rank 0's validation and sampler, built and compiled on every rank before training
     * starts: a compile on rank 0 alone, mid-run, would leave the others waiting in the
     * allreduce (the code cache makes the later compile on rank 0 a lookup) */
    gpt_model_t *vm = NULL, *sm = NULL;
    if (t.val) {
        gpt_model_config_t vc = {.batch = t.B, .seq = t.T, .targets = true, .compute_prec = cp};
        CHECK(gpt_model_new(p, &vc, &vm), "building the validation");
    }
    if (t.sample_every) {
        gpt_model_config_t sc = {.batch = 1, .seq = t.T, .compute_prec = cp};
        CHECK(gpt_model_new(p, &sc, &sm), "building the sampler");
    }
    if (vm || sm) {
        troupe_backend_t *cb = NULL;
        troupe_code_t *code = NULL;
        CHECK(troupe_backend_open(t.backend, TROUPE_FOR_PARALLEL_COPYING, &cb),
              "opening the backend");
        if (vm)
            CHECK(troupe_compile(cb, vm->comp, "gpt_val", &code), "compiling the validation");
        troupe_code_release(&code);
        if (sm)
            CHECK(troupe_compile(cb, sm->comp, "gpt_sample", &code), "compiling the sampler");
        troupe_code_release(&code);
        troupe_backend_close(&cb);
    }
    troupe_dp_t *dp = NULL;
    troupe_status_t dst = troupe_dp_new(&dc, &model, &dp);
    if (dst == TROUPE_RESOURCE_EXHAUSTED)
        s_die(dst, "starting data-parallel training (too little memory: lower --batch or --seq, "
                   "or run fewer streams per rank with --streams)");
    CHECK(dst, "starting data-parallel training");
    if (rank == 0) {
        printf("gpt: compiled and linked in %.1f s\n", s_now() - t_compile);
        fflush(stdout);
    }
    if (t.resume)
        CHECK(troupe_dp_load(dp, t.resume), "resuming");
    long long first = troupe_dp_steps_done(dp);
    gpt_loader_t *loader = NULL;
    CHECK(gpt_loader_new(shards, &order, offset * b, streams * b, K, replicas * b, first,
                         &loader),
          "starting the data loader");
    {
        /* the training data this rank holds: the loader's prefetched share and its copy
         * here, the host arrays of x_all and y_all, their copy on each stream, and the
         * conversion buffer of the host write */
        size_t arrays = 2 * share * sizeof(int32_t);
        size_t resident = 2 * gpt_loader_bytes(loader) + arrays * (1 + (size_t)streams) +
                          share * sizeof(double);
        printf("data rank=%d tokens=%zu shards=%d sequences=%lld..%lld of %lld order=%s "
               "resident_bytes=%zu\n",
               rank, ntokens, nshards, (long long)(offset * b),
               (long long)((offset + streams) * b), t.B, t.shuffle ? "shuffled" : "sequential",
               resident);
    }
    gpt_curve_t curve = {0};
    if (rank == 0 && (t.curve || t.plot)) {
        char title[200];
        snprintf(title, sizeof title,
                 "gpt: L=%d NH=%d C=%d, batch %lld x %lld, %d rank(s) x %d stream(s)",
                 cfg.layers, cfg.heads, cfg.channels, t.B, t.T, ranks, streams);
        CHECK(gpt_curve_open(&curve, t.curve, t.plot, first, title), "the learning curve");
    }
    double pending_val = NAN; /* the validation before the next step, for the curve */
    if (rank == 0)
        printf("gpt: L=%d NH=%d C=%d V=%d Vp=%d, %zu parameters; %zu training tokens in %d "
               "shard(s), %lld batches of %lld x %lld; %d rank(s) x %d stream(s), "
               "optimizer_state_bytes=%lld device_bytes=%lld; precision %s\n",
               cfg.layers, cfg.heads, cfg.channels, cfg.vocab, cfg.padded_vocab,
               gpt_llmc_num_params(&cfg), ntokens, nshards, (long long)nb, t.B, t.T, ranks, streams,
               (long long)troupe_dp_optimizer_state_bytes(dp),
               (long long)troupe_dp_device_bytes(dp), troupe_dp_precision_name(t.precision));

    /* rank 0's evaluation (validation) and sampling, linked on the owner stream */
    gpt_runner_t *vr = NULL, *sr = NULL;
    int64_t vnb = 0;
    if (rank != 0) {
        gpt_model_destroy(&vm);
        gpt_model_destroy(&sm);
    }
    if (vm) {
        vnb = (int64_t)((nvtokens - 1) / (size_t)(t.B * t.T));
        if (vnb > t.val_batches)
            vnb = t.val_batches;
    }
    int32_t *vx = NULL, *vy = NULL;
    uint16_t *vtok = NULL;
    if (vm) {
        vx = malloc((size_t)(t.B * t.T) * sizeof *vx);
        vy = malloc((size_t)(t.B * t.T) * sizeof *vy);
        vtok = malloc((size_t)(t.B * t.T + 1) * sizeof *vtok);
        if (!vx || !vy || !vtok)
            CHECK(troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "validation"), "out of memory");
    }
    double val_loss = NAN, loss = NAN, t_train = 0;
    bool tty = rank == 0 && isatty(STDOUT_FILENO) && !troupe_cluster_is_distributed();
    for (long long step = first; step <= t.steps; step++) {
        bool last = step == t.steps;
        if (vm && ((t.val_every && step % t.val_every == 0) || last)) {
            CHECK(troupe_dp_sync(dp), "training");
            if (!vr)
                CHECK(gpt_runner_new(NULL, troupe_dp_backend(dp), troupe_dp_owner_context(dp),
                                     p, vm, "gpt_val", &vr),
                      "linking the validation");
            double sum = 0;
            for (int64_t k = 0; k < vnb; k++) {
                size_t at = (size_t)(k * t.B * t.T);
                CHECK(gpt_shards_read(vshards, at, (size_t)(t.B * t.T) + 1, vtok), "validation");
                for (size_t i = 0; i < (size_t)(t.B * t.T); i++) {
                    vx[i] = vtok[i];
                    vy[i] = vtok[i + 1];
                }
                double l = 0;
                CHECK(gpt_model_set_batch(vm, vx, vy), "validation");
                CHECK(gpt_runner_run(vr), "validation");
                CHECK(troupe_tnode_get_values(vm->loss, &l, 1), "validation");
                sum += l;
            }
            val_loss = sum / (double)vnb;
            if (tty)
                printf("\r\033[K");
            printf("val_loss=%.6f\n", val_loss);
            pending_val = val_loss;
        }
        if (sm && step > first && (step % t.sample_every == 0 || last)) {
            CHECK(troupe_dp_sync(dp), "training");
            if (!sr)
                CHECK(gpt_runner_new(NULL, troupe_dp_backend(dp), troupe_dp_owner_context(dp),
                                     p, sm, "gpt_sample", &sr),
                      "linking the sampler");
            int32_t start = s_start_token(&cfg, NULL);
            if (tty)
                printf("\r\033[K");
            printf("sample:\n");
            CHECK(s_generate(sr, sm, &cfg, &start, 1, (int)t.sample_tokens, 1.0,
                             (uint64_t)t.seed + 1337, NULL, stdout),
                  "sampling");
        }
        if (t.save && step > first && ((t.save_every && step % t.save_every == 0) || last))
            s_save(dp, p, t.save, rank);
        if (last) {
            if (rank == 0 && !isnan(pending_val))
                CHECK(gpt_curve_add(&curve, step, NAN, pending_val, t_train),
                      "the learning curve");
            gpt_curve_draw(&curve);
            break;
        }
        double t0 = s_now();
        if (t.warmup || t.cosine)
            CHECK(troupe_dp_set_lr(dp, s_lr_at(&t, step)), "setting the learning rate");
        /* the step's minibatches (the loader then reads the next step's) */
        CHECK(gpt_loader_next(loader, lx, ly), "reading the training data");
        for (int64_t j = 0; j < K; j++)
            for (int64_t k = 0; k < streams; k++) {
                size_t row = (size_t)((j * replicas + offset + k) % rows);
                size_t from = (size_t)((j * streams + k) * b * t.T), n = (size_t)(b * t.T);
                memcpy(hx + row * n, lx + from, n * sizeof *hx);
                memcpy(hy + row * n, ly + from, n * sizeof *hy);
            }
        CHECK(gpt_model_set_minibatches(m, hx, hy), "placing the training data");
        CHECK(troupe_dp_step(dp), "training");
        CHECK(troupe_dp_last_loss(dp, &loss), "training");
        t_train += s_now() - t0;
        if (rank == 0) {
            CHECK(gpt_curve_add(&curve, step, loss, pending_val, t_train), "the learning curve");
            if (!isnan(pending_val))
                gpt_curve_draw(&curve);
            pending_val = NAN;
            if (tty) {
                int w = 30, done = (int)(w * (step + 1) / (t.steps ? t.steps : 1));
                printf("\r\033[K");
                printf("step=%lld loss=%.6f\n", step, loss);
                printf("[%.*s%*s] %lld/%lld steps  %.0f tokens/s  loss %.4f", done,
                       "==============================", w - done, "", step + 1, t.steps,
                       (double)(step + 1 - first) * (double)(t.B * t.T) / t_train, loss);
                fflush(stdout);
            } else {
                printf("step=%lld loss=%.6f\n", step, loss);
            }
        }
        if (!isfinite(loss)) {
            troupe_error_set(TROUPE_FAILED_PRECONDITION, "the loss is %g at step %lld", loss,
                             step);
            s_die(TROUPE_FAILED_PRECONDITION, "training diverged");
        }
    }
    CHECK(troupe_dp_sync(dp), "training");
    if (rank == 0) {
        double tps = t_train > 0 ? (double)(t.steps - first) * (double)(t.B * t.T) / t_train : 0;
        if (tty)
            printf("\r\033[K");
        printf("final loss=%.6f val_loss=%.6f tokens_per_s=%.1f ranks=%d streams=%d steps=%lld",
               loss, val_loss, tps, ranks, streams, t.steps);
        /* loss scaling (fp16): the steps it skipped and its scale, appended */
        troupe_dp_loss_scale_state_t ls;
        CHECK(troupe_dp_loss_scale(dp, &ls), "reading the loss scale");
        if (ls.on)
            printf(" skipped_steps=%lld loss_scale=%g", (long long)ls.skipped_steps, ls.scale);
        printf("\n");
    }
    gpt_curve_close(&curve);
    gpt_runner_destroy(&vr);
    gpt_runner_destroy(&sr);
    troupe_dp_destroy(&dp);
    gpt_model_destroy(&vm);
    gpt_model_destroy(&sm);
    gpt_model_destroy(&m);
    gpt_params_destroy(&p);
    gpt_loader_destroy(&loader);
    gpt_shards_close(&shards);
    gpt_shards_close(&vshards);
    free(hx);
    free(hy);
    free(lx);
    free(ly);
    free(vx);
    free(vy);
    free(vtok);
    free(flat);
    CHECK(troupe_cluster_finalize(), "stopping the cluster");
    return 0;
}

int main(int argc, char **argv)
{
    if (troupe_cluster_init(&argc, &argv) != TROUPE_OK) {
        fprintf(stderr, "gpt: starting the cluster: %s\n", troupe_last_error());
        return 1;
    }
    bool help = false; /* `gpt --help`, and `gpt COMMAND ... --help` as users type it */
    for (int i = 1; i < argc && !help; i++)
        help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (argc < 2 || help) {
        if (troupe_cluster_rank() == 0)
            s_help(argc < 2 ? stderr : stdout);
        troupe_status_t st = troupe_cluster_finalize();
        (void)st;
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "init"))
        return s_cmd_init(argc, argv);
    if (!strcmp(argv[1], "data"))
        return s_cmd_data(argc, argv);
    if (!strcmp(argv[1], "train"))
        return s_cmd_train(argc, argv);
    if (!strcmp(argv[1], "sample"))
        return s_cmd_sample(argc, argv);
    return s_usage("unknown command (init, data, train, sample)");
}
