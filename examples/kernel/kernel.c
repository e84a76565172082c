/* kernel — your own routine, compiled and run on every backend this troupe was built with
 * (docs/api.md walks through it).
 *
 * The routine, in troupe's assignment form (einsum-style projections, as OCANNL writes them):
 *   y   = x · w        "bi,ij=>bj"   (x: B x I, w: I x J)
 *   sq  = y * y        pointwise
 *   out = Σ_j sq       "bj=>b"       (out: B)
 * so out[b] = |x[b] · w|². y and sq are never read outside the routine: the optimizer keeps
 * them out of memory (inlined), and only x, w and out get arrays. Each backend generates and
 * compiles its own code from it: C compiled by $CC (cached in $TROUPE_CACHE_DIR) for "cpu" and
 * "sync"; a CUDA driver, once built, compiles CUDA C through NVRTC.
 *
 * For every built backend (devices/device.h troupe_driver_built_count/_name) it prints one line:
 *   kernel: backend cpu: out = 1 17 20 (matches plain C; compiled in 0.101 s)
 * or "not available here: <reason>" when the backend does not open on this machine (a CUDA
 * build without a GPU). The values are small integers, exact in single precision, so they
 * must equal the plain C result exactly. Exit status 0 when every available backend matched,
 * 1 otherwise (a failure prints troupe's one-line message).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "actors/troupe.h"
#include "devices/device.h"

#include <stdio.h>
#include <time.h>

#define B 3
#define I 4
#define J 2
#define DEADLINE_NS (60LL * 1000 * 1000 * 1000)

#define CHECK(call)                                                                                \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != TROUPE_OK) {                                                                     \
            fprintf(stderr, "kernel: %s: %s: %s\n", name, #call, troupe_last_error());             \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static double s_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    if (troupe_tnode_new(&label, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0, &tn) != TROUPE_OK)
        return NULL;
    return tn;
}

/* The routine's assignments over the given nodes, as a computation to compile. */
static troupe_status_t s_build(troupe_tnode_t *x, troupe_tnode_t *w, troupe_tnode_t *y,
                               troupe_tnode_t *sq, troupe_tnode_t *out, troupe_asgn_comp_t **comp)
{
    troupe_asgn_t *a[3] = {NULL, NULL, NULL}, *seq = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(comp));
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_binop(*comp, true, TROUPE_BINOP_ADD, y,
                                                   TROUPE_BINOP_MUL, troupe_asgn_node(x),
                                                   troupe_asgn_node(w), "bi,ij=>bj", &a[0]));
    TROUPE_RETURN_IF_ERROR(troupe_asgn_pointwise_binop(*comp, sq, TROUPE_BINOP_MUL,
                                                       troupe_asgn_node(y), troupe_asgn_node(y),
                                                       &a[1]));
    TROUPE_RETURN_IF_ERROR(troupe_asgn_accum_unop(*comp, true, TROUPE_BINOP_ADD, out,
                                                  TROUPE_UNOP_IDENTITY, troupe_asgn_node(sq),
                                                  "bj=>b", &a[2]));
    TROUPE_RETURN_IF_ERROR(troupe_asgn_seq(*comp, 3, a, &seq));
    troupe_asgn_comp_set_root(*comp, seq);
    return TROUPE_OK;
}

/* Runs the routine on backend `name`; returns 0 when it matched `want` or the backend is not
 * available here, 1 otherwise. */
static int s_run_on(const char *name, const double *xv, const double *wv, const double *want)
{
    troupe_status_t st = TROUPE_OK;
    int bad = 1;
    troupe_backend_t *b = NULL;
    troupe_device_t *d = NULL;
    troupe_stream_t *s = NULL;
    troupe_context_t *ctx = NULL, *cx = NULL, *cw = NULL;
    troupe_asgn_comp_t *comp = NULL;
    troupe_code_t *code = NULL;
    troupe_routine_t *r = NULL;
    troupe_event_t *ev = NULL;
    troupe_tnode_t *x = s_node("x", 2, (int64_t[]){B, I});
    troupe_tnode_t *w = s_node("w", 2, (int64_t[]){I, J});
    troupe_tnode_t *y = s_node("y", 2, (int64_t[]){B, J});
    troupe_tnode_t *sq = s_node("sq", 2, (int64_t[]){B, J});
    troupe_tnode_t *out = s_node("out", 1, (int64_t[]){B});
    if (!x || !w || !y || !sq || !out) {
        fprintf(stderr, "kernel: %s: creating the nodes: %s\n", name, troupe_last_error());
        goto out;
    }

    int ndev = 0;
    st = troupe_backend_open(name, TROUPE_ONLY_DEVICES_PARALLEL, &b);
    if (st == TROUPE_OK)
        st = troupe_num_devices(b, &ndev);
    if (st != TROUPE_OK || ndev == 0) {
        printf("kernel: backend %s: not available here: %s\n", name,
               st != TROUPE_OK ? troupe_last_error() : "no device");
        bad = 0;
        goto out;
    }
    CHECK(troupe_get_device(b, 0, &d));
    CHECK(troupe_new_stream(d, &s));
    CHECK(troupe_context_new(s, &ctx));
    CHECK(troupe_tnode_set_values(x, xv, B * I));
    CHECK(troupe_tnode_set_values(w, wv, I * J));
    troupe_memory_mode_t hosted = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    CHECK(troupe_tnode_update_memory_mode(out, hosted, 1)); /* read back on the host */

    CHECK(s_build(x, w, y, sq, out, &comp));
    double t0 = s_seconds();
    CHECK(troupe_compile(b, comp, "sum_of_squares", &code));
    double compile_s = s_seconds() - t0;
    CHECK(troupe_init_from_host(ctx, x, &cx, NULL));
    CHECK(troupe_init_from_host(cx, w, &cw, NULL));
    CHECK(troupe_link(cw, code, &r));
    CHECK(troupe_routine_run(r, &ev));
    CHECK(troupe_event_sync(ev, DEADLINE_NS));

    double got[B];
    CHECK(troupe_tnode_get_values(out, got, B));
    bad = 0;
    printf("kernel: backend %s: out =", name);
    for (int i = 0; i < B; i++) {
        printf(" %g", got[i]);
        bad |= got[i] != want[i];
    }
    printf(" (%s plain C; compiled in %.3f s)\n", bad ? "DIFFERS FROM" : "matches", compile_s);

out:
    troupe_event_release(&ev);
    troupe_routine_release(&r);
    troupe_code_release(&code);
    troupe_asgn_comp_destroy(&comp);
    troupe_context_release(&cw);
    troupe_context_release(&cx);
    troupe_context_release(&ctx);
    troupe_stream_release(&s);
    troupe_backend_close(&b);
    troupe_tnode_release(&x);
    troupe_tnode_release(&w);
    troupe_tnode_release(&y);
    troupe_tnode_release(&sq);
    troupe_tnode_release(&out);
    return bad;
}

int main(void)
{
    double xv[B * I], wv[I * J], want[B];
    for (int i = 0; i < B * I; i++)
        xv[i] = i % 5 - 2;
    for (int i = 0; i < I * J; i++)
        wv[i] = i % 3 - 1;
    for (int b = 0; b < B; b++) { /* the same routine in plain C */
        want[b] = 0;
        for (int j = 0; j < J; j++) {
            double yv = 0;
            for (int i = 0; i < I; i++)
                yv += xv[b * I + i] * wv[i * J + j];
            want[b] += yv * yv;
        }
    }
    int bad = 0;
    for (size_t i = 0; i < troupe_driver_built_count(); i++)
        bad |= s_run_on(troupe_driver_built_name(i), xv, wv, want);
    return bad;
}
