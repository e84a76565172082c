/* Shared scaffolding of the tests that drive the runtime (actors/troupe.h): tests/test_runtime.c,
 * test_merge.c, test_lend.c, test_schedule_fuzz.c, test_dp.c, test_mlp.c, test_transport.c, and
 * the MS / sleep helpers of test_stream.c and test_event.c.
 *
 *  - OK(expr): asserts that a troupe call returned TROUPE_OK, naming the call, the status and
 *    the last error;
 *  - MS: one millisecond in nanoseconds (deadlines are int64 nanoseconds);
 *  - FOR_EACH_DRIVER(var): runs the block once per driver ("sync", "cpu", then "cuda" when a
 *    CUDA device is present: rtu_cuda_present) with `*var` the driver's name;
 *    FOR_EACH_HOST_DRIVER(var) only over the drivers with host-addressable memory;
 *  - rtu_configure: what every suite's .init sets (the compiled-code cache directory and the
 *    default deadline);
 *  - rtu_sleep_ms: sleeps at least `ms` milliseconds;
 *  - single-precision or typed tnodes (rtu_node, rtu_vec), whole-array value setting (rtu_set)
 *    and the hosted memory mode (rtu_set_hosted);
 *  - rtu_env_t: a backend opened for parallel copying, its device 0 and n streams, each with
 *    its root context (rtu_env_open, rtu_env_close);
 *  - transfers: upload into a context, replacing the caller's reference (rtu_init, rtu_put) and
 *    read back through to_host and its event (rtu_get);
 *  - one-assignment codes: a = a + b (rtu_add_code) and lhs =+ merged.merge (rtu_merge_code).
 * Every helper fails the current Criterion test on error. All functions are static inline so
 * that a test using only some of them stays warning-free.
 *
 * The build must define TROUPE_TEST_BUILD_DIR (tests/CMakeLists.txt does); an includer that
 * uses rtu_sleep_ms defines _POSIX_C_SOURCE (>= 199309L, for nanosleep) before any header or
 * gets it from the headers it includes.
 */
#ifndef TROUPE_TESTS_RUNTIME_TEST_UTIL_H
#define TROUPE_TESTS_RUNTIME_TEST_UTIL_H

#include "actors/troupe.h"
#include "base/clock.h"
#include "base/status.h"
#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/cuda_impl.h"
#endif

#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MS (1000000LL)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        troupe_status_t s__ = (expr);                                                              \
        cr_assert_eq(s__, TROUPE_OK, "%s -> %s: %s", #expr, troupe_status_str(s__),                \
                     troupe_last_error());                                                         \
    } while (0)

/* Whether the cuda driver is built and the CUDA runtime sees a device (asked once per process);
 * when not and `why` is not NULL, the reason (for skip messages) goes into it. Side-effect free:
 * it asks the runtime for the device count (troupe__cuda_device_count) instead of opening a
 * backend, which would create a context on every GPU in every test process that asks. */
static inline bool rtu_cuda_present(char *why, size_t cap)
{
    static int present = -1;
    static char reason[512];
    if (present < 0) {
#if TROUPE_HAVE_CUDA
        present = troupe__cuda_device_count() > 0;
        char w[400] = "";
        troupe__cuda_why_no_device(w, sizeof w);
        snprintf(reason, sizeof reason, "no CUDA device: %s", w);
#else
        present = 0;
        snprintf(reason, sizeof reason, "the cuda driver is not built (TROUPE_WITH_CUDA)");
#endif
    }
    if (why != NULL && cap > 0)
        snprintf(why, cap, "%s", present == 1 ? "" : reason);
    return present == 1;
}

/* The drivers every runtime test runs on, NULL-terminated: "sync", "cpu", and "cuda" when a
 * device is present (tests/test_cuda.c's conformance test says so, or skips with the reason). */
static inline const char *const *rtu_drivers(void)
{
    static const char *drivers[4] = {"sync", "cpu", NULL, NULL};
    if (drivers[2] == NULL && rtu_cuda_present(NULL, 0))
        drivers[2] = "cuda";
    return drivers;
}

/* The drivers with host-addressable memory (troupe_lend_arrays and remote contexts need it). */
static inline const char *const *rtu_host_drivers(void)
{
    static const char *const drivers[] = {"sync", "cpu", NULL};
    return drivers;
}

#define FOR_EACH_DRIVER(var) for (const char *const *var = rtu_drivers(); *var; var++)
#define FOR_EACH_HOST_DRIVER(var) for (const char *const *var = rtu_host_drivers(); *var; var++)

/* Sets the compiled-code cache directory and the default deadline (seconds). */
static inline void rtu_configure(const char *cache_dir, int timeout_s)
{
    OK(troupe_config_set_cache_dir(cache_dir));
    OK(troupe_config_set_timeout_s(timeout_s));
}

static inline void rtu_sleep_ms(int ms)
{
    troupe_sleep_ns((int64_t)ms * 1000000LL);
}

/* ---- tnodes ------------------------------------------------------------------------------- */

static inline troupe_tnode_t *rtu_node(const char *label, troupe_prec_t prec, int ndims,
                                       const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *l[1] = {label};
    OK(troupe_tnode_new(l, 1, prec, ndims, dims, NULL, 0.0, &tn));
    return tn;
}

/* A single-precision vector of n elements. */
static inline troupe_tnode_t *rtu_vec(const char *label, int64_t n)
{
    return rtu_node(label, TROUPE_PREC_SINGLE, 1, &n);
}

/* Sets every element of tn's host values from `values`. */
static inline void rtu_set(troupe_tnode_t *tn, const double *values)
{
    OK(troupe_tnode_set_values(tn, values, (size_t)troupe_tnode_num_elems(tn)));
}

/* Makes tn hosted and non-constant (its values live on the host and devices copy them back),
 * recording `provenance` as troupe_tnode_update_memory_mode does. */
static inline void rtu_set_hosted(troupe_tnode_t *tn, int32_t provenance)
{
    troupe_memory_mode_t m = {TROUPE_MM_HOSTED, TROUPE_MEMTYPE_NONCONSTANT, 0};
    OK(troupe_tnode_update_memory_mode(tn, m, provenance));
}

/* ---- a backend, its device 0, streams and their root contexts -------------------------------- */

#define RTU_MAX_STREAMS 4

typedef struct rtu_env {
    troupe_backend_t *b;
    troupe_device_t *d;
    troupe_stream_t *s[RTU_MAX_STREAMS];
    troupe_context_t *ctx[RTU_MAX_STREAMS]; /* stream i's context (the root, or what replaced it) */
    int n;
} rtu_env_t;

/* Opens `driver` for parallel copying and makes nstreams (1..RTU_MAX_STREAMS) streams on its
 * device 0, each with a root context. Release with rtu_env_close. */
static inline void rtu_env_open(rtu_env_t *e, const char *driver, int nstreams)
{
    cr_assert(nstreams >= 1 && nstreams <= RTU_MAX_STREAMS);
    memset(e, 0, sizeof *e);
    OK(troupe_backend_open(driver, TROUPE_FOR_PARALLEL_COPYING, &e->b));
    OK(troupe_get_device(e->b, 0, &e->d));
    e->n = nstreams;
    for (int i = 0; i < nstreams; i++) {
        OK(troupe_new_stream(e->d, &e->s[i]));
        OK(troupe_context_new(e->s[i], &e->ctx[i]));
    }
}

static inline void rtu_env_close(rtu_env_t *e)
{
    for (int i = 0; i < e->n; i++) {
        troupe_context_release(&e->ctx[i]);
        troupe_stream_release(&e->s[i]);
    }
    troupe_backend_close(&e->b);
}

/* ---- transfers ------------------------------------------------------------------------------ */

/* *ctx := init_from_host(*ctx, tn), replacing the caller's reference. */
static inline void rtu_init(troupe_context_t **ctx, troupe_tnode_t *tn)
{
    troupe_context_t *c = NULL;
    OK(troupe_init_from_host(*ctx, tn, &c, NULL));
    troupe_context_release(ctx);
    *ctx = c;
}

/* Sets tn's host values to `values` and uploads them into *ctx (rtu_set, then rtu_init). */
static inline void rtu_put(troupe_context_t **ctx, troupe_tnode_t *tn, const double *values)
{
    rtu_set(tn, values);
    rtu_init(ctx, tn);
}

/* ctx's values of the single-precision tn, through to_host and its event only. */
static inline void rtu_get(troupe_context_t *ctx, troupe_tnode_t *tn, float *out)
{
    troupe_event_t *ev = NULL;
    OK(troupe_to_host(ctx, tn, &ev));
    OK(troupe_event_sync(ev, 20000 * MS));
    troupe_event_release(&ev);
    void *host = NULL;
    OK(troupe_tnode_host_array(tn, &host));
    memcpy(out, host, tn->size_bytes);
}

/* ---- one-assignment codes ------------------------------------------------------------------- */

/* Sets `root` as comp's root, compiles it for b under `name`, destroys the comp. */
static inline troupe_code_t *rtu_compile_root(troupe_backend_t *b, troupe_asgn_comp_t **comp,
                                              troupe_asgn_t *root, const char *name)
{
    troupe_code_t *code = NULL;
    troupe_asgn_comp_set_root(*comp, root);
    OK(troupe_compile(b, *comp, name, &code));
    troupe_asgn_comp_destroy(comp);
    return code;
}

/* a = a + rhs (pointwise), or a = a + a when rhs == NULL. */
static inline troupe_code_t *rtu_add_code(troupe_backend_t *b, troupe_tnode_t *a,
                                          troupe_tnode_t *rhs, const char *name)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_pointwise_binop(comp, a, TROUPE_BINOP_ADD, troupe_asgn_node(a),
                                   troupe_asgn_node(rhs ? rhs : a), &t));
    return rtu_compile_root(b, &comp, t, name);
}

/* lhs =+ merged.merge over `spec` (the merge buffer's values added into lhs). */
static inline troupe_code_t *rtu_merge_code(troupe_backend_t *b, troupe_tnode_t *lhs,
                                            troupe_tnode_t *merged, const char *spec,
                                            const char *name)
{
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    OK(troupe_asgn_comp_new(&comp));
    OK(troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, lhs, TROUPE_UNOP_IDENTITY,
                              troupe_asgn_merge(merged), spec, &t));
    return rtu_compile_root(b, &comp, t, name);
}

/* Whether the file at `path` (its first 64 KiB) contains `needle`: log files the tests wrote. */
static inline bool rtu_file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

#endif
