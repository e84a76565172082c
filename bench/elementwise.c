/* troupe — bench_elementwise: whether troupe's generated elementwise code reaches the memory
 * bandwidth (issue 14, "Generated code that vectorises").
 *
 * Case bias-relu: y[r, c] = relu(x[r, c] + b[c]) over S_ROWS x S_COLS single-precision
 * elements (64 MiB in, 64 MiB out), written as two assignments (t = x + b; y = relu(t)) the
 * optimizer turns into one vectorised pass (t is inlined), run as a routine on one stream of the
 * cpu backend; troupe_us is one run (routine_run + event_sync). Peer: memcpy of the same bytes
 * (64 MiB read, 64 MiB written) by the C library, the fastest a pass over this memory gets on
 * one core. ratio near 1 means the generated loop is bandwidth-bound, as it should be.
 *
 * Check: y equals relu(x + b) computed on the host, bit for bit. A wrong result prints why on
 * stderr and exits 1.
 *
 * Options: see --help (bench/bench_util.h). Exit status: 0, 1 on a failure, 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include "bench/bench_util.h"

#include "actors/troupe.h"
#include "ir/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_PROG "bench_elementwise"
#define S_ROWS 65536
#define S_COLS 256
#define S_N ((int64_t)S_ROWS * S_COLS)
#define S_SYNC_NS (60LL * 1000 * 1000 * 1000)

typedef struct s_troupe_side {
    troupe_routine_t *r;
} s_troupe_side_t;

static int s_run_troupe(void *arg)
{
    s_troupe_side_t *t = arg;
    troupe_event_t *ev = NULL;
    troupe_status_t st = troupe_routine_run(t->r, &ev);
    if (st == TROUPE_OK)
        st = troupe_event_sync(ev, S_SYNC_NS);
    troupe_event_release(&ev);
    return st == TROUPE_OK ? 0 : troupe_bench_fail_status(S_PROG, "run", st);
}

typedef struct s_copy_side {
    float *dst;
    const float *src;
} s_copy_side_t;

static int s_run_memcpy(void *arg)
{
    s_copy_side_t *c = arg;
    memcpy(c->dst, c->src, (size_t)S_N * sizeof(float));
    return 0;
}

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    troupe_status_t st = troupe_tnode_new((const char *[]){label}, 1, TROUPE_PREC_SINGLE, ndims,
                                          dims, NULL, 0, &tn);
    if (st != TROUPE_OK)
        (void)troupe_bench_fail_status(S_PROG, label, st);
    return tn;
}

#define S_TRY(what, call)                                                                          \
    do {                                                                                           \
        troupe_status_t st_ = (call);                                                              \
        if (st_ != TROUPE_OK) {                                                                    \
            rc = troupe_bench_fail_status(S_PROG, what, st_);                                      \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    troupe_bench_opts_t opts;
    troupe_bench_opts_default(&opts);
    int a = troupe_bench_parse_args(argc, argv,
                                    "generated elementwise code (bias + relu) against memcpy of "
                                    "the same bytes",
                                    &opts);
    if (a != 0)
        return a > 0 ? 0 : 2;
    troupe_bench_print_machine(TROUPE_BENCH_C_FLAGS);

    int rc = 1;
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *c1 = NULL, *c2 = NULL;
    troupe_asgn_comp_t *comp = NULL;
    troupe_code_t *code = NULL;
    troupe_routine_t *r = NULL;
    troupe_tnode_t *x = NULL, *bias = NULL, *t = NULL, *y = NULL;
    double *vals = malloc(sizeof(double) * (size_t)S_N);
    float *src = troupe_bench_alloc_floats(S_N), *dst = troupe_bench_alloc_floats(S_N);
    if (vals == NULL || src == NULL || dst == NULL) {
        fprintf(stderr, "%s: out of memory\n", S_PROG);
        goto done;
    }
    int64_t dims[2] = {S_ROWS, S_COLS};
    x = s_node("x", 2, dims);
    bias = s_node("b", 1, &dims[1]);
    t = s_node("t", 2, dims);
    y = s_node("y", 2, dims);
    if (x == NULL || bias == NULL || t == NULL || y == NULL)
        goto done;
    troupe_bench_fill_uniform(src, S_N, 7);
    for (int64_t i = 0; i < S_N; i++)
        vals[i] = src[i];
    S_TRY("set x", troupe_tnode_set_values(x, vals, (size_t)S_N));
    double bv[S_COLS];
    for (int c = 0; c < S_COLS; c++)
        bv[c] = 0.25 * ((c % 9) - 4) / 4.0;
    S_TRY("set b", troupe_tnode_set_values(bias, bv, S_COLS));
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    S_TRY("hosted y", troupe_tnode_update_memory_mode(y, hosted, 1));

    S_TRY("backend", troupe_backend_open("cpu", TROUPE_ONLY_DEVICES_PARALLEL, &b));
    S_TRY("device", troupe_get_device(b, 0, &d));
    S_TRY("stream", troupe_new_stream(d, &s));
    S_TRY("context", troupe_context_new(s, &ctx));
    troupe_asgn_t *add = NULL, *relu = NULL;
    S_TRY("comp", troupe_asgn_comp_new(&comp));
    S_TRY("t = x + b", troupe_asgn_accum_binop(comp, false, TROUPE_BINOP_ARG2, t, TROUPE_BINOP_ADD,
                                               troupe_asgn_node(x), troupe_asgn_node(bias),
                                               "rc,c=>rc", &add));
    S_TRY("y = relu(t)", troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ARG2, y,
                                                TROUPE_UNOP_RELU, troupe_asgn_node(t), "rc=>rc",
                                                &relu));
    troupe_asgn_t *seq = NULL;
    S_TRY("seq", troupe_asgn_seq2(comp, add, relu, &seq));
    troupe_asgn_comp_set_root(comp, seq);
    S_TRY("compile", troupe_compile(b, comp, "bias_relu", &code));
    S_TRY("upload x", troupe_init_from_host(ctx, x, &c1, NULL));
    S_TRY("upload b", troupe_init_from_host(c1, bias, &c2, NULL));
    S_TRY("link", troupe_link(c2, code, &r));

    s_troupe_side_t ts = {r};
    s_copy_side_t cs = {dst, src};
    troupe_bench_side_t sides[2] = {{s_run_troupe, &ts}, {s_run_memcpy, &cs}};
    troupe_bench_stats_t st[2];
    if (troupe_bench_time_sides(sides, 2, &opts, st) != 0) {
        fprintf(stderr, "%s: timing failed\n", S_PROG);
        goto done;
    }

    S_TRY("read y", troupe_tnode_get_values(y, vals, (size_t)S_N));
    for (int64_t i = 0; i < S_N; i++) {
        float want = troupe_fmaxf(0.0f, src[i] + (float)bv[i % S_COLS]), got = (float)vals[i];
        if (memcmp(&got, &want, sizeof got) != 0) {
            fprintf(stderr, "%s: y[%lld] = %.9g, want %.9g\n", S_PROG, (long long)i, vals[i],
                    (double)want);
            goto done;
        }
    }
    int64_t bytes = 2 * S_N * (int64_t)sizeof(float);
    troupe_bench_print_case("elementwise", "bias-relu", bytes, st[0].median_us, "memcpy",
                            st[1].median_us, "troupe_gbs=%.1f peer_gbs=%.1f check=ok",
                            (double)bytes / st[0].median_us / 1e3,
                            (double)bytes / st[1].median_us / 1e3);
    rc = 0;
done:
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_asgn_comp_destroy(&comp);
    troupe_context_release(&c2);
    troupe_context_release(&c1);
    troupe_context_release(&ctx);
    troupe_stream_release(&s);
    troupe_tnode_release(&x);
    troupe_tnode_release(&bias);
    troupe_tnode_release(&t);
    troupe_tnode_release(&y);
    troupe_backend_close(&b);
    free(vals);
    free(src);
    free(dst);
    return rc;
}
