/* Tests of nn/embedding.h: the embedding lookup and the cross-entropy against integer targets
 * (the IR's gather), their derived gradients (scatter-adds) against central differences in
 * double precision through the interpreter, on the sync and cpu drivers (and cuda when a device
 * is present) bit for bit across two runs and the drivers, the padded vocabulary, an
 * out-of-range token, and the routine compiled as several units (TROUPE_CC_SPLIT_BYTES). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv */
#include "nn/embedding.h"

#include "base/config.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "nn/layers.h"
#include "runtime_test_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TIMEOUT_NS (60LL * 1000000000LL)

static void s_setup(void)
{
    rtu_configure(TROUPE_TEST_BUILD_DIR "/troupe-cache-nn-embedding", 60);
}

TestSuite(nn_embedding, .init = s_setup);

enum { B = 2, T = 3, V = 5, VP = 8, C = 4 };

/* Tokens with duplicates (so the scatter-add sums several rows into one) and targets. */
static const int32_t k_tokens[B * T] = {1, 4, 1, 0, 1, 3};
static const int32_t k_targets[B * T] = {2, 0, 4, 4, 1, 3};

typedef struct s_model {
    troupe_asgn_comp_t *comp;
    troupe_nn_t *nn;
    troupe_tnode_t *tokens, *targets, *wte, *wpe_in, *loss;
} s_model_t;

/* loss = xent(linear(embedding(tokens)) over Vp logits, only V valid): the table and the
 * projection are the parameters. */
static void s_build(s_model_t *m, troupe_prec_t prec, int64_t vp)
{
    memset(m, 0, sizeof *m);
    OK(troupe_asgn_comp_new(&m->comp));
    OK(troupe_nn_new(m->comp, prec, &m->nn));
    troupe_nn_t *nn = m->nn;
    troupe_nn_node_prec(nn, "tokens", TROUPE_PREC_INT32, 2, (int64_t[]){B, T}, &m->tokens);
    troupe_nn_node_prec(nn, "targets", TROUPE_PREC_INT32, 2, (int64_t[]){B, T}, &m->targets);
    troupe_nn_param(nn, "wte", 2, (int64_t[]){V, C}, &m->wte);
    troupe_nn_param(nn, "proj", 2, (int64_t[]){C, vp}, &m->wpe_in);
    troupe_tnode_t *h = NULL, *z = NULL;
    troupe_nn_begin(nn, "embedding");
    troupe_nn_embedding(nn, m->tokens, m->wte, &h);
    troupe_nn_begin(nn, "logits");
    troupe_nn_linear(nn, h, m->wpe_in, NULL, &z);
    troupe_nn_begin(nn, "loss");
    troupe_nn_softmax_xent_targets(nn, z, m->targets, V, &m->loss);
    OK(troupe_nn_finish(nn, m->loss));
}

static void s_free(s_model_t *m)
{
    troupe_nn_destroy(&m->nn);
    troupe_asgn_comp_destroy(&m->comp);
}

/* ---- the interpreter: finite differences ---------------------------------------------------- */

typedef struct s_bufs {
    troupe_interp_buffer_t *b;
    size_t n;
} s_bufs_t;

static void *s_buf(s_bufs_t *bs, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < bs->n; i++)
        if (bs->b[i].tn == tn)
            return bs->b[i].data;
    cr_assert_fail("no buffer for #%d", tn->id);
    return NULL;
}

static double s_run(const troupe_ll_proc_t *proc, s_bufs_t *bs, const s_model_t *m)
{
    troupe_interp_args_t args = {bs->b, bs->n, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(proc, &args), TROUPE_OK, "%s", troupe_last_error());
    return ((double *)s_buf(bs, m->loss))[0];
}

Test(nn_embedding, gradients_match_finite_differences)
{
    s_model_t m;
    s_build(&m, TROUPE_PREC_DOUBLE, VP);
    troupe_ll_proc_t *proc = NULL;
    OK(troupe_asgn_lower(m.comp, "embedding_test", &proc));
    s_bufs_t bs = {calloc(m.comp->nnodes, sizeof(troupe_interp_buffer_t)), m.comp->nnodes};
    for (size_t i = 0; i < bs.n; i++) {
        bs.b[i].tn = m.comp->nodes[i];
        bs.b[i].data = calloc(1, m.comp->nodes[i]->size_bytes);
    }
    memcpy(s_buf(&bs, m.tokens), k_tokens, sizeof k_tokens);
    memcpy(s_buf(&bs, m.targets), k_targets, sizeof k_targets);
    uint64_t st = 5;
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(m.nn, &params, &grads);
    cr_assert_eq(np, 2);
    for (size_t p = 0; p < np; p++) {
        double *v = s_buf(&bs, params[p]);
        for (int64_t k = 0; k < troupe_tnode_num_elems(params[p]); k++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            v[k] = (double)(st >> 11) * 0x1p-53 * 2 - 1;
        }
    }
    for (size_t p = 0; p < np; p++) {
        s_run(proc, &bs, &m);
        int64_t n = troupe_tnode_num_elems(params[p]);
        double *g = malloc((size_t)n * sizeof *g), *v = s_buf(&bs, params[p]);
        memcpy(g, s_buf(&bs, grads[p]), (size_t)n * sizeof *g);
        for (int64_t k = 0; k < n; k++) {
            const double h = 1e-6, v0 = v[k];
            v[k] = v0 + h;
            double lp = s_run(proc, &bs, &m);
            v[k] = v0 - h;
            double lm = s_run(proc, &bs, &m);
            v[k] = v0;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - g[k]) / fmax(1.0, fmax(fabs(fd), fabs(g[k])));
            cr_expect_leq(err, 1e-6, "%s[%lld]: derived %.12g, finite difference %.12g",
                          params[p]->label[0], (long long)k, g[k], fd);
        }
        if (p == 0) /* row 2 of wte is never looked up: its gradient is exactly 0 */
            for (int c = 0; c < C; c++)
                cr_expect_eq(g[2 * C + c], 0.0);
        if (p == 1) /* the padded logits V..VP-1 take no part */
            for (int c = 0; c < C; c++)
                for (int j = V; j < VP; j++)
                    cr_expect_eq(g[c * VP + j], 0.0, "proj_grad[%d,%d]", c, j);
        free(g);
    }
    for (size_t i = 0; i < bs.n; i++)
        free(bs.b[i].data);
    free(bs.b);
    troupe_ll_proc_destroy(&proc);
    s_free(&m);
}

/* ---- the drivers -------------------------------------------------------------------------- */

typedef struct s_env {
    rtu_env_t rt;
    troupe_code_t *code;
    troupe_routine_t *r;
} s_env_t;

static const double k_wte[V * C] = {0.1, -0.2, 0.3, 0.4,  -0.5, 0.6,  0.7, -0.8, 0.9, 1.0,
                                    -1.1, 1.2, 1.3, -1.4, 1.5,  -1.6, 1.7, 1.8,  -1.9, 2.0};

static void s_env(s_env_t *e, const char *drv, s_model_t *m, const int32_t *tokens)
{
    memset(e, 0, sizeof *e);
    troupe_tnode_t *const *params, *const *grads;
    size_t np = troupe_nn_params(m->nn, &params, &grads);
    for (size_t p = 0; p < np; p++) {
        rtu_set_hosted(params[p], 960);
        rtu_set_hosted(grads[p], 960);
    }
    rtu_set_hosted(m->tokens, 960);
    rtu_set_hosted(m->targets, 960);
    rtu_set_hosted(m->loss, 960);
    double tv[B * T], gv[B * T];
    for (int i = 0; i < B * T; i++) {
        tv[i] = tokens[i];
        gv[i] = k_targets[i];
    }
    double pv[C * VP];
    for (int i = 0; i < C * VP; i++)
        pv[i] = 0.05 * (i % 7) - 0.1;
    rtu_env_open(&e->rt, drv, 1);
    rtu_put(&e->rt.ctx[0], m->tokens, tv);
    rtu_put(&e->rt.ctx[0], m->targets, gv);
    rtu_put(&e->rt.ctx[0], params[0], k_wte);
    rtu_put(&e->rt.ctx[0], params[1], pv);
    OK(troupe_compile(e->rt.b, m->comp, "embedding_test", &e->code));
    OK(troupe_link(e->rt.ctx[0], e->code, &e->r));
}

static void s_env_done(s_env_t *e)
{
    troupe_routine_release(&e->r);
    troupe_code_release(&e->code);
    rtu_env_close(&e->rt);
}

static troupe_status_t s_step(s_env_t *e)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(e->r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, TIMEOUT_NS);
    troupe_event_release(&ev);
    return st;
}

Test(nn_embedding, scatter_add_is_bitwise_reproducible_across_runs_and_drivers)
{
    float first[V * C];
    bool have = false;
    FOR_EACH_DRIVER(drv)
    {
        s_model_t m;
        s_build(&m, TROUPE_PREC_SINGLE, VP);
        s_env_t e;
        s_env(&e, *drv, &m, k_tokens);
        troupe_tnode_t *const *params, *const *grads;
        troupe_nn_params(m.nn, &params, &grads);
        double a[V * C], b[V * C];
        OK(s_step(&e));
        OK(troupe_tnode_get_values(grads[0], a, V * C));
        OK(s_step(&e));
        OK(troupe_tnode_get_values(grads[0], b, V * C));
        for (int i = 0; i < V * C; i++) {
            cr_assert_eq(memcmp(&a[i], &b[i], sizeof a[i]), 0, "%s: run 2 differs at %d", *drv,
                         i);
            float f = (float)a[i];
            if (have)
                cr_assert_eq(memcmp(&f, &first[i], sizeof f), 0, "%s differs from sync at %d",
                             *drv, i);
            else
                first[i] = f;
        }
        have = true;
        /* row 1 is looked up three times, row 2 never */
        cr_assert(a[1 * C] != 0 && a[2 * C] == 0);
        s_env_done(&e);
        s_free(&m);
    }
}

Test(nn_embedding, out_of_range_token_fails_the_run_naming_it)
{
    FOR_EACH_DRIVER(drv)
    {
        s_model_t m;
        s_build(&m, TROUPE_PREC_SINGLE, VP);
        const int32_t bad[B * T] = {1, 4, 1, 0, 7, 3};
        s_env_t e;
        s_env(&e, *drv, &m, bad);
        troupe_status_t st = s_step(&e);
        cr_assert_eq(st, TROUPE_INVALID_ARGUMENT, "%s: %s", *drv, troupe_last_error());
        const char *msg = troupe_last_error();
        cr_expect(strstr(msg, "tokens") && strstr(msg, "= 7") && strstr(msg, "0..4"), "%s: %s",
                  *drv, msg);
        s_env_done(&e);
        s_free(&m);
    }
}

/* ---- one routine compiled as several units ---------------------------------------------------- */

enum { S_NOUT = V * C + C * VP + 1 };

/* Files in dir ending in `suffix`; the largest one's size into *bytes. */
static int s_files(const char *dir, const char *suffix, long *bytes)
{
    DIR *d = opendir(dir);
    int n = 0;
    *bytes = 0;
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name), sl = strlen(suffix);
        if (len < sl || strcmp(de->d_name + len - sl, suffix) != 0)
            continue;
        char path[600];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &sb) == 0 && sb.st_size > *bytes)
            *bytes = (long)sb.st_size;
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int s_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF;)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

static void s_rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* One step on the cpu driver, compiled with TROUPE_CC_SPLIT_BYTES=split_bytes into a fresh
 * cache by a compiler that counts its runs, then compiled again (a cache hit): the gradients'
 * and the loss's values into out, the compiler's runs and the generated source's size. */
static void s_split_step(const char *split_bytes, double *out, int *runs, long *source_bytes)
{
    char dir[] = "/tmp/troupe-split-XXXXXX", cache[300], cc[300], count[300];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(cc, sizeof cc, "%s/counting-cc", dir);
    snprintf(count, sizeof count, "%s/runs", dir);
    FILE *f = fopen(cc, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho run >> '%s'\nexec cc \"$@\"\n", count);
    fclose(f);
    cr_assert_eq(chmod(cc, 0700), 0);
    OK(troupe_config_set_cache_dir(cache));
    OK(troupe_config_set_cc(cc));
    cr_assert_eq(setenv("TROUPE_CC_SPLIT_BYTES", split_bytes, 1), 0);

    s_model_t m;
    s_build(&m, TROUPE_PREC_SINGLE, VP);
    s_env_t e;
    s_env(&e, "cpu", &m, k_tokens);
    OK(s_step(&e));
    troupe_tnode_t *const *params, *const *grads;
    troupe_nn_params(m.nn, &params, &grads);
    OK(troupe_tnode_get_values(grads[0], out, V * C));
    OK(troupe_tnode_get_values(grads[1], out + V * C, C * VP));
    OK(troupe_tnode_get_values(m.loss, out + V * C + C * VP, 1));
    long ignored = 0;
    int before = s_lines(count);
    troupe_code_t *again = NULL;
    OK(troupe_compile(e.rt.b, m.comp, "embedding_test", &again));
    troupe_code_release(&again);
    int after = s_lines(count);
    cr_assert_eq(after, before, "split=%s: a cache hit ran the compiler", split_bytes);
    *runs = before;
    cr_assert_eq(s_files(cache, ".c", source_bytes), 1, "only the whole source is kept");
    cr_assert_eq(s_files(cache, ".o", &ignored), 0, "no object is left");
    s_env_done(&e);
    s_free(&m);
    unsetenv("TROUPE_CC_SPLIT_BYTES");
    s_rm_dir(cache);
    unlink(cc);
    unlink(count);
    rmdir(dir);
}

/* TROUPE_CC_SPLIT_BYTES below the source's size compiles the routine as several units (more
 * compiler runs: the units and the link) that compute the same bits as the whole unit. */
Test(nn_embedding, a_routine_split_into_units_computes_the_same_bits)
{
    double whole[S_NOUT], split[S_NOUT];
    int whole_runs = 0, split_runs = 0;
    long bytes = 0, split_source = 0; /* another model's node ids: another source, as long */
    s_split_step("0", whole, &whole_runs, &bytes);
    cr_assert_eq(whole_runs, 1, "TROUPE_CC_SPLIT_BYTES=0 compiles the routine whole");
    char sb[32];
    snprintf(sb, sizeof sb, "%ld", bytes / 8);
    s_split_step(sb, split, &split_runs, &split_source);
    cr_assert_geq(split_runs, 4, "split at %s of %ld bytes: %d compiler runs", sb, bytes,
                  split_runs);
    for (int i = 0; i < S_NOUT; i++)
        cr_assert_eq(memcmp(&whole[i], &split[i], sizeof whole[i]), 0,
                     "value %d: %.9g whole, %.9g split", i, whole[i], split[i]);
}

/* ---- refusals -------------------------------------------------------------------------------- */

Test(nn_embedding, bad_shapes_and_precisions_are_refused_naming_them)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_nn_t *nn = NULL;
    troupe_tnode_t *fids = NULL, *ids = NULL, *table = NULL, *out = NULL, *z = NULL, *t = NULL;
    /* ids of a float precision */
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn));
    OK(troupe_nn_node(nn, "fids", 1, (int64_t[]){4}, &fids));
    OK(troupe_nn_param(nn, "wte", 2, (int64_t[]){V, C}, &table));
    cr_assert_eq(troupe_nn_embedding(nn, fids, table, &out), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "integer tensor") && strstr(troupe_last_error(), "single"),
              "%s", troupe_last_error());
    cr_assert_eq(troupe_nn_status(nn), TROUPE_INVALID_ARGUMENT, "the error sticks");
    troupe_nn_destroy(&nn);
    troupe_asgn_comp_destroy(&comp);
    /* targets whose leading dims differ from the logits' */
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn));
    OK(troupe_nn_node(nn, "z", 3, (int64_t[]){B, T, VP}, &z));
    OK(troupe_nn_node_prec(nn, "t", TROUPE_PREC_INT32, 2, (int64_t[]){B, T + 1}, &t));
    cr_assert_eq(troupe_nn_softmax_xent_targets(nn, z, t, V, &out), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "softmax_xent_targets") &&
                  strstr(troupe_last_error(), "same leading dims"),
              "%s", troupe_last_error());
    troupe_nn_destroy(&nn);
    troupe_asgn_comp_destroy(&comp);
    /* n_valid beyond the padded vocabulary */
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn));
    OK(troupe_nn_node(nn, "z", 3, (int64_t[]){B, T, VP}, &z));
    OK(troupe_nn_node_prec(nn, "ids", TROUPE_PREC_INT32, 2, (int64_t[]){B, T}, &ids));
    cr_assert_eq(troupe_nn_softmax_xent_targets(nn, z, ids, VP + 1, &out), TROUPE_INVALID_ARGUMENT);
    cr_expect(strstr(troupe_last_error(), "n_valid 9 outside 0..8"), "%s", troupe_last_error());
    troupe_nn_destroy(&nn);
    troupe_asgn_comp_destroy(&comp);
}
