/* troupe — bench_layers: each layer's forward and derived backward pass (nn/) against
 * PyTorch's on one CPU thread, same shapes, same run (issue 30, "What differentiation emits
 * must run fast").
 *
 * A case builds one layer with nn/ (its input and weights are parameters, so the backward
 * computes every gradient PyTorch's does), loss = sum(y * r) for a fixed random r, derives the
 * backward (nn/grad.h), compiles it for one stream of the cpu backend and times routine_run +
 * event_sync. The peer is bench/peers/torch_layers.py (torch.set_num_threads(1)), which runs
 * the same cases; it is found as bench_train finds torch_mlp.py ($TROUPE_BENCH_PYTHON, python3,
 * /usr/bin/python3). Shapes: GPT small (B*T = 8*128 rows, C = 384, 4C = 1536; a byte vocabulary
 * of 256), the fmnist convnet's convolutions and pool at batch 128 (NCHW, 3x3 kernels: 1->32 on
 * 28x28 without the images' gradient, 32->32 on 26x26, 32->64 on 12x12; max pool 2 on 24x24)
 * and the main job's MLP (784-256-128-10, batch 128). Attention is GPT-2's causal
 * self-attention with the fused QKV and output projections (B=8, T=128, C=384, 6 heads).
 *
 * Output: the machine facts, torch's library line, then
 *   bench=layers case=<name> troupe_us=<median> peer=torch-<v>-1thread peer_us=<median>
 *     ratio=<troupe/peer> speedup=<peer/troupe>
 * or `peer torch absent: <why>` and peer_us=nan. Options: see --help (bench/bench_util.h), and
 * `--case NAME[,NAME...]` to run only those cases.
 * Exit status: 0, 1 on a failure, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "actors/troupe.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/conv.h"
#include "nn/embedding.h"
#include "nn/layers.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROG "bench_layers"
#define S_SYNC_NS (120LL * 1000 * 1000 * 1000)
#define S_MAX_HOSTED 32

#ifndef TROUPE_BENCH_TORCH_LAYERS_SCRIPT
#define TROUPE_BENCH_TORCH_LAYERS_SCRIPT "bench/peers/torch_layers.py"
#endif

/* ---- cases ------------------------------------------------------------------------------------ */

typedef struct s_build {
    troupe_nn_t *nn;
    troupe_tnode_t *hosted[S_MAX_HOSTED]; /* read by the routine: uploaded before linking */
    int nhosted;
    uint64_t seed;
} s_build_t;

/* A node with uniform values in [-1, 1), uploaded before the run (a parameter when param). */
static troupe_tnode_t *s_input(s_build_t *b, const char *label, bool param, int ndims,
                               const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    if (param)
        troupe_nn_param(b->nn, label, ndims, dims, &tn);
    else
        troupe_nn_node(b->nn, label, ndims, dims, &tn);
    if (!tn || b->nhosted == S_MAX_HOSTED)
        return NULL;
    int64_t n = troupe_tnode_num_elems(tn);
    float *f = troupe_bench_alloc_floats(n);
    double *v = malloc((size_t)n * sizeof *v);
    troupe_status_t st = f && v ? TROUPE_OK : TROUPE_RESOURCE_EXHAUSTED;
    if (st == TROUPE_OK) {
        troupe_bench_fill_uniform(f, n, ++b->seed);
        for (int64_t i = 0; i < n; i++)
            v[i] = f[i];
        troupe_memory_mode_t m = {TROUPE_MM_HOSTED,
                                  param ? TROUPE_MEMTYPE_NONCONSTANT : TROUPE_MEMTYPE_CONSTANT, 0};
        st = troupe_tnode_update_memory_mode(tn, m, 950);
    }
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(tn, v, (size_t)n);
    free(f);
    free(v);
    if (st != TROUPE_OK)
        return NULL;
    b->hosted[b->nhosted++] = tn;
    return tn;
}

/* One-hot rows of random classes: (rows, classes), uploaded. */
static troupe_tnode_t *s_onehot(s_build_t *b, int64_t rows, int64_t classes)
{
    troupe_tnode_t *tn = NULL;
    troupe_nn_node(b->nn, "onehot", 2, (int64_t[]){rows, classes}, &tn);
    if (!tn || b->nhosted == S_MAX_HOSTED)
        return NULL;
    double *v = calloc((size_t)(rows * classes), sizeof *v);
    uint64_t s = 12345;
    for (int64_t r = 0; v && r < rows; r++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        v[r * classes + (int64_t)((s >> 33) % (uint64_t)classes)] = 1.0;
    }
    troupe_memory_mode_t m = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT, 0};
    troupe_status_t st = v ? troupe_tnode_update_memory_mode(tn, m, 950) : TROUPE_RESOURCE_EXHAUSTED;
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(tn, v, (size_t)(rows * classes));
    free(v);
    if (st != TROUPE_OK)
        return NULL;
    b->hosted[b->nhosted++] = tn;
    return tn;
}

static troupe_tnode_t *s_linear(s_build_t *b, troupe_tnode_t *x, int64_t in, int64_t out,
                                const char *name)
{
    char wl[32], bl[32];
    snprintf(wl, sizeof wl, "%s_w", name);
    snprintf(bl, sizeof bl, "%s_b", name);
    troupe_tnode_t *w = s_input(b, wl, true, 2, (int64_t[]){in, out});
    troupe_tnode_t *bias = s_input(b, bl, true, 1, (int64_t[]){out});
    troupe_tnode_t *y = NULL;
    troupe_nn_linear(b->nn, x, w, bias, &y);
    return y;
}

static troupe_tnode_t *c_linear_fc(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){1024, 384});
    return s_linear(b, x, 384, 1536, "fc");
}

static troupe_tnode_t *c_linear_proj(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){1024, 1536});
    return s_linear(b, x, 1536, 384, "proj");
}

static troupe_tnode_t *c_relu(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){1024, 1536}), *y = NULL;
    troupe_nn_relu(b->nn, x, &y);
    return y;
}

static troupe_tnode_t *c_xent(s_build_t *b)
{
    troupe_tnode_t *z = s_input(b, "logits", true, 2, (int64_t[]){1024, 256});
    troupe_tnode_t *t = s_onehot(b, 1024, 256), *loss = NULL;
    troupe_nn_softmax_xent(b->nn, z, t, &loss);
    return loss;
}

static troupe_tnode_t *c_mlp(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){128, 784}), *a1 = NULL, *a2 = NULL;
    troupe_tnode_t *t = s_onehot(b, 128, 10), *loss = NULL;
    troupe_nn_relu(b->nn, s_linear(b, x, 784, 256, "l1"), &a1);
    troupe_nn_relu(b->nn, s_linear(b, a1, 256, 128, "l2"), &a2);
    troupe_nn_softmax_xent(b->nn, s_linear(b, a2, 128, 10, "l3"), t, &loss);
    return loss;
}

static troupe_tnode_t *c_gelu(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){1024, 1536}), *y = NULL;
    troupe_nn_gelu(b->nn, x, &y);
    return y;
}

static troupe_tnode_t *c_layernorm(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 3, (int64_t[]){8, 128, 384}), *y = NULL;
    troupe_tnode_t *w = s_input(b, "ln_w", true, 1, (int64_t[]){384});
    troupe_tnode_t *bias = s_input(b, "ln_b", true, 1, (int64_t[]){384});
    troupe_nn_layernorm(b->nn, x, w, bias, 1e-5, &y);
    return y;
}

static troupe_tnode_t *c_softmax(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 2, (int64_t[]){8 * 6 * 128, 128}), *y = NULL;
    troupe_nn_softmax(b->nn, x, &y);
    return y;
}

static troupe_tnode_t *c_attention(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 3, (int64_t[]){8, 128, 384}), *y = NULL;
    troupe_tnode_t *wq = s_input(b, "w_qkv", true, 2, (int64_t[]){384, 1152});
    troupe_tnode_t *bq = s_input(b, "b_qkv", true, 1, (int64_t[]){1152});
    troupe_tnode_t *wp = s_input(b, "w_proj", true, 2, (int64_t[]){384, 384});
    troupe_tnode_t *bp = s_input(b, "b_proj", true, 1, (int64_t[]){384});
    troupe_nn_attention(b->nn, x, wq, bq, wp, bp, 6, TROUPE_NN_IN_OUT, &y);
    return y;
}

/* Integer ids in 0..n-1 (as int32), uploaded. */
static troupe_tnode_t *s_ids(s_build_t *b, const char *label, int ndims, const int64_t *dims,
                             int64_t n)
{
    troupe_tnode_t *tn = NULL;
    troupe_nn_node_prec(b->nn, label, TROUPE_PREC_INT32, ndims, dims, &tn);
    if (!tn || b->nhosted == S_MAX_HOSTED)
        return NULL;
    int64_t count = troupe_tnode_num_elems(tn);
    double *v = malloc((size_t)count * sizeof *v);
    uint64_t s = 99;
    for (int64_t i = 0; v && i < count; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = (double)((s >> 33) % (uint64_t)n);
    }
    troupe_memory_mode_t m = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CONSTANT, 0};
    troupe_status_t st = v ? troupe_tnode_update_memory_mode(tn, m, 950) : TROUPE_RESOURCE_EXHAUSTED;
    if (st == TROUPE_OK)
        st = troupe_tnode_set_values(tn, v, (size_t)count);
    free(v);
    if (st != TROUPE_OK)
        return NULL;
    b->hosted[b->nhosted++] = tn;
    return tn;
}

static troupe_tnode_t *c_embedding(s_build_t *b)
{
    troupe_tnode_t *ids = s_ids(b, "tokens", 2, (int64_t[]){8, 128}, 256), *y = NULL;
    troupe_tnode_t *wte = s_input(b, "wte", true, 2, (int64_t[]){256, 384});
    troupe_nn_embedding(b->nn, ids, wte, &y);
    return y;
}

static troupe_tnode_t *c_xent_targets(s_build_t *b)
{
    troupe_tnode_t *z = s_input(b, "logits", true, 3, (int64_t[]){8, 128, 256}), *loss = NULL;
    troupe_tnode_t *t = s_ids(b, "targets", 2, (int64_t[]){8, 128}, 256);
    troupe_nn_softmax_xent_targets(b->nn, z, t, 0, &loss);
    return loss;
}

static troupe_tnode_t *s_conv(s_build_t *b, int64_t cin, int64_t cout, int64_t hw, bool dx)
{
    troupe_tnode_t *x = s_input(b, "x", dx, 4, (int64_t[]){128, cin, hw, hw}), *y = NULL;
    troupe_tnode_t *w = s_input(b, "w", true, 4, (int64_t[]){cout, cin, 3, 3});
    troupe_tnode_t *bias = s_input(b, "b", true, 1, (int64_t[]){cout});
    troupe_nn_conv2d(b->nn, x, w, bias, NULL, &y);
    return y;
}

static troupe_tnode_t *c_conv1(s_build_t *b)
{
    return s_conv(b, 1, 32, 28, false); /* the images need no gradient */
}

static troupe_tnode_t *c_conv2(s_build_t *b)
{
    return s_conv(b, 32, 32, 26, true);
}

static troupe_tnode_t *c_conv3(s_build_t *b)
{
    return s_conv(b, 32, 64, 12, true);
}

static troupe_tnode_t *c_maxpool(s_build_t *b)
{
    troupe_tnode_t *x = s_input(b, "x", true, 4, (int64_t[]){128, 32, 24, 24}), *y = NULL;
    troupe_nn_pool2d_opts_t o = TROUPE_NN_POOL2D_OPTS(2, 2);
    troupe_nn_maxpool2d(b->nn, x, &o, &y);
    return y;
}

typedef struct s_case {
    const char *name;
    troupe_tnode_t *(*build)(s_build_t *b);
} s_case_t;

static const s_case_t k_cases[] = {
    {"linear-fc", c_linear_fc},     {"linear-proj", c_linear_proj}, {"relu", c_relu},
    {"gelu", c_gelu},               {"layernorm", c_layernorm},     {"softmax", c_softmax},
    {"attention", c_attention},     {"embedding", c_embedding},     {"softmax-xent", c_xent},
    {"xent-targets", c_xent_targets}, {"conv1-1x32", c_conv1},      {"conv2-32x32", c_conv2},
    {"conv3-32x64", c_conv3},       {"maxpool", c_maxpool},         {"mlp-fmnist", c_mlp},
};
#define S_NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* ---- the torch peer ------------------------------------------------------------------------- */

static double s_peer_us[S_NCASES];
static char s_peer_name[64] = "torch";

/* Runs the peer once for every case; NAN where absent. */
static void s_run_peer(void)
{
    for (int i = 0; i < S_NCASES; i++)
        s_peer_us[i] = NAN;
    const char *env = getenv("TROUPE_BENCH_PYTHON");
    const char *pythons[] = {env && *env ? env : "python3", "/usr/bin/python3"};
    for (int p = 0; p < 2; p++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s %s --runs 11 2>&1", pythons[p],
                 TROUPE_BENCH_TORCH_LAYERS_SCRIPT);
        FILE *f = popen(cmd, "r");
        if (!f)
            continue;
        char line[1024];
        bool any = false;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "library name=torch ", 19) == 0) {
                fputs(line, stdout);
                int major = 0, minor = 0;
                const char *v = strstr(line, "version=\"");
                if (v && sscanf(v + 9, "%d.%d", &major, &minor) == 2)
                    snprintf(s_peer_name, sizeof s_peer_name, "torch-%d.%d-1thread", major,
                             minor);
            } else if (strncmp(line, "torch_layer case=", 17) == 0) {
                char name[64];
                double med = NAN;
                if (sscanf(line + 17, "%63s runs=%*d median_us=%lf", name, &med) == 2)
                    for (int i = 0; i < S_NCASES; i++)
                        if (strcmp(name, k_cases[i].name) == 0) {
                            s_peer_us[i] = med;
                            any = true;
                        }
            } else if (strncmp(line, "torch_peer absent", 17) == 0) {
                fprintf(stdout, "peer torch absent (%s): %s", pythons[p], line + 18);
            } else {
                fputs(line, stderr);
            }
        }
        pclose(f);
        if (any)
            return;
    }
}

/* ---- troupe's side -------------------------------------------------------------------------- */

static int s_run(void *arg)
{
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(arg, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, S_SYNC_NS);
    troupe_event_release(&ev);
    return st == TROUPE_OK ? 0 : troupe_bench_fail_status(S_PROG, "run", st);
}

static int s_case(troupe_backend_t *be, troupe_stream_t *s, const troupe_bench_opts_t *opts, int i)
{
    int rc = 1;
    troupe_asgn_comp_t *comp = NULL;
    troupe_nn_t *nn = NULL;
    troupe_code_t *code = NULL;
    troupe_routine_t *r = NULL;
    troupe_context_t *ctx[S_MAX_HOSTED + 2] = {NULL};
    int nctx = 0;
    s_build_t b = {0};
    troupe_status_t st = troupe_asgn_comp_new(&comp);
    if (st == TROUPE_OK)
        st = troupe_nn_new(comp, TROUPE_PREC_SINGLE, &nn);
    if (st != TROUPE_OK)
        goto fail;
    b.nn = nn;
    troupe_nn_begin(nn, k_cases[i].name);
    troupe_tnode_t *y = k_cases[i].build(&b), *rw = NULL, *loss = NULL;
    if (y) {
        rw = s_input(&b, "r", false, y->ndims, y->dims);
        troupe_nn_node(nn, "bench_loss", 0, NULL, &loss);
    }
    if (y && rw && loss) {
        char term[8] = "ABCD", spec[32];
        term[y->ndims] = '\0';
        snprintf(spec, sizeof spec, "%s,%s=>", term, term);
        troupe_nn_begin(nn, "loss = sum(y r)");
        troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, loss, TROUPE_BINOP_MUL, y, rw, spec);
    }
    st = troupe_nn_status(nn);
    if (st == TROUPE_OK && !(y && rw && loss))
        st = troupe_error_set(TROUPE_INTERNAL, "case %s: building failed", k_cases[i].name);
    if (st == TROUPE_OK)
        st = troupe_nn_finish(nn, loss);
    if (st != TROUPE_OK)
        goto fail;
    char name[64];
    snprintf(name, sizeof name, "layer_%d", i);
    st = troupe_compile(be, comp, name, &code);
    if (st == TROUPE_OK)
        st = troupe_context_new(s, &ctx[nctx++]);
    for (int h = 0; h < b.nhosted && st == TROUPE_OK; h++) {
        st = troupe_init_from_host(ctx[nctx - 1], b.hosted[h], &ctx[nctx], NULL);
        nctx++;
    }
    if (st == TROUPE_OK)
        st = troupe_link(ctx[nctx - 1], code, &r);
    if (st != TROUPE_OK)
        goto fail;
    troupe_bench_side_t side = {s_run, r};
    troupe_bench_stats_t stats;
    if (troupe_bench_time_sides(&side, 1, opts, &stats) != 0)
        goto done;
    troupe_bench_print_case("layers", k_cases[i].name, 0, stats.median_us, s_peer_name,
                            s_peer_us[i], "speedup=%.2f", s_peer_us[i] / stats.median_us);
    rc = 0;
    goto done;
fail:
    rc = troupe_bench_fail_status(S_PROG, k_cases[i].name, st);
done:
    troupe_routine_release(&r);
    troupe_code_release(&code);
    for (int c = nctx; c-- > 0;)
        troupe_context_release(&ctx[c]);
    troupe_nn_destroy(&nn);
    troupe_asgn_comp_destroy(&comp);
    return rc;
}

int main(int argc, char **argv)
{
    /* --case NAME[,NAME...] runs only those cases (taken out before the common options) */
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--case") == 0) {
            only = argv[i + 1];
            for (int j = i; j + 2 <= argc; j++)
                argv[j] = argv[j + 2];
            argc -= 2;
            break;
        }
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int a = troupe_bench_parse_args(argc, argv,
                                    "each nn/ layer's forward + derived backward against "
                                    "PyTorch's, one thread",
                                    &opts);
    if (a != 0)
        return a > 0 ? 0 : 2;
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);
    s_run_peer();
    int rc = 1;
    troupe_backend_t *be = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_status_t st = troupe_backend_open("cpu", TROUPE_ONLY_DEVICES_PARALLEL, &be);
    if (st == TROUPE_OK)
        st = troupe_get_device(be, 0, &d);
    if (st == TROUPE_OK)
        st = troupe_new_stream(d, &s);
    if (st != TROUPE_OK) {
        rc = troupe_bench_fail_status(S_PROG, "backend", st);
        goto done;
    }
    rc = 0;
    for (int i = 0; i < S_NCASES; i++) {
        if (only) {
            const char *p = strstr(only, k_cases[i].name);
            size_t n = strlen(k_cases[i].name);
            if (!p || (p != only && p[-1] != ',') || (p[n] != '\0' && p[n] != ','))
                continue;
        }
        rc |= s_case(be, s, &opts, i);
    }
done:
    troupe_stream_release(&s);
    troupe_backend_close(&be);
    return rc;
}
