/* Shared helpers for the IR tests that compile generated code (tests/test_ir_pipeline.c).
 *
 *  - a deterministic xorshift generator (irt_rnd32, irt_rndf, irt_rndd);
 *  - tnodes with a chosen id (irt_node; ids > 0 are fixed, 0 takes a fresh id);
 *  - node -> host buffer tables (irt_binds_t) that own zero-filled buffers;
 *  - C dialect: emit, write to a temporary directory, compile with the system compiler
 *    (`cc <flags> -shared -fPIC ... -lm`), dlopen, dlsym `<name>_entry` (irt_lib_open), call
 *    it with buffers looked up by node (irt_call);
 *  - the reference interpreter over a table (irt_interp) and the bit-for-bit comparison of a
 *    compiled run against the interpreter (irt_run_and_compare);
 *  - the CUDA dialect through NVRTC (irt_nvrtc_check; no GPU needed) and run on the host
 *    (irt_emu_check, tests/cuda_emu.h: bit for bit against the compiled C);
 *  - text round trips of procedures and comps (irt_roundtrip_proc, irt_roundtrip_comp);
 *  - golden files under TROUPE_TEST_DATA_DIR/golden (irt_golden_check; TROUPE_UPDATE_GOLDEN=1
 *    rewrites them).
 * Every helper fails the current Criterion test on error. All functions are static inline so
 * that a test using only some of them stays warning-free.
 *
 * The includer must define _POSIX_C_SOURCE (>= 200809L, for mkdtemp) before any header, and
 * the build must define TROUPE_TEST_DATA_DIR (tests/CMakeLists.txt does).
 */
#ifndef TROUPE_TESTS_IR_TEST_UTIL_H
#define TROUPE_TESTS_IR_TEST_UTIL_H

#include "base/alloc.h"
#include "base/status.h"
#include "compiler/cgen.h"
#include "compiler/interp.h"
#include "compiler/lower.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/prec.h"
#include "ir/text.h"
#include "ir/tnode.h"
#include "troupe_config.h"
#if TROUPE_HAVE_CUDA
#include "devices/cuda/nvrtc.h"
#endif

#include "cuda_emu.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TROUPE_TEST_DATA_DIR
#error "TROUPE_TEST_DATA_DIR must be defined (tests/CMakeLists.txt)"
#endif

/* ---- random numbers ------------------------------------------------------------------------ */

static uint64_t irt_rng_state = 0x243F6A8885A308D3ull;

static inline void irt_seed(uint64_t seed)
{
    irt_rng_state = seed != 0 ? seed : 0x243F6A8885A308D3ull;
}

static inline uint32_t irt_rnd32(void)
{
    irt_rng_state ^= irt_rng_state >> 12;
    irt_rng_state ^= irt_rng_state << 25;
    irt_rng_state ^= irt_rng_state >> 27;
    return (uint32_t)((irt_rng_state * 2685821657736338717ull) >> 32);
}

/* Uniform in [lo, hi), 24 random bits. */
static inline float irt_rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(irt_rnd32() >> 8) * (1.0f / 16777216.0f);
}

/* Uniform in [lo, hi), 53 random bits. */
static inline double irt_rndd(double lo, double hi)
{
    uint64_t b = ((uint64_t)irt_rnd32() << 32 | irt_rnd32()) >> 11;
    return lo + (hi - lo) * (double)b * 0x1p-53;
}

/* ---- nodes ----------------------------------------------------------------------------------- */

/* A node labelled `label` with `ndims` dims; id > 0 uses that id (troupe_tnode_new_with_id),
 * 0 a fresh one. The caller owns the reference. */
static inline troupe_tnode_t *irt_node(int32_t id, const char *label, troupe_prec_t prec,
                                       int ndims, const int64_t *dims)
{
    const char *labels[1] = {label};
    troupe_tnode_t *tn = NULL;
    troupe_status_t st =
        id > 0 ? troupe_tnode_new_with_id(id, labels, 1, prec, ndims, dims, NULL, 0.0, &tn)
               : troupe_tnode_new(labels, 1, prec, ndims, dims, NULL, 0.0, &tn);
    cr_assert_eq(st, TROUPE_OK, "node %d %s: %s", id, label, troupe_last_error());
    return tn;
}

/* ---- node -> buffer tables ------------------------------------------------------------------- */

#define IRT_MAX_BINDS 64

/* Buffers owned by the table (calloc'ed, freed by irt_binds_free). Nodes are borrowed. */
typedef struct irt_binds {
    size_t n;
    const troupe_tnode_t *tn[IRT_MAX_BINDS];
    void *data[IRT_MAX_BINDS];
} irt_binds_t;

static inline void *irt_binds_get(const irt_binds_t *b, const troupe_tnode_t *tn)
{
    for (size_t k = 0; k < b->n; k++)
        if (b->tn[k] == tn)
            return b->data[k];
    return NULL;
}

/* The buffer of tn, created zero-filled (tn->size_bytes) when missing. */
static inline void *irt_binds_ensure(irt_binds_t *b, const troupe_tnode_t *tn)
{
    void *d = irt_binds_get(b, tn);
    if (d != NULL)
        return d;
    cr_assert_lt(b->n, IRT_MAX_BINDS, "too many buffers");
    d = calloc(1, tn->size_bytes);
    cr_assert_not_null(d);
    b->tn[b->n] = tn;
    b->data[b->n] = d;
    b->n++;
    return d;
}

static inline void irt_binds_free(irt_binds_t *b)
{
    for (size_t k = 0; k < b->n; k++)
        free(b->data[k]);
    memset(b, 0, sizeof *b);
}

/* dst := a deep copy of the entries of src whose node satisfies keep (NULL: all). */
static inline void irt_binds_copy(irt_binds_t *dst, const irt_binds_t *src,
                                  bool (*keep)(const troupe_tnode_t *tn, const void *ctx),
                                  const void *ctx)
{
    memset(dst, 0, sizeof *dst);
    for (size_t k = 0; k < src->n; k++) {
        if (keep != NULL && !keep(src->tn[k], ctx))
            continue;
        void *d = irt_binds_ensure(dst, src->tn[k]);
        memcpy(d, src->data[k], src->tn[k]->size_bytes);
    }
}

/* Fills tn's buffer with uniform values in [lo, hi), stored in tn's precision (RNE). */
static inline void irt_fill_uniform(irt_binds_t *b, const troupe_tnode_t *tn, double lo, double hi)
{
    char *d = irt_binds_ensure(b, tn);
    size_t es = troupe_prec_size_bytes(tn->prec);
    int64_t n = troupe_tnode_num_elems(tn);
    for (int64_t i = 0; i < n; i++)
        troupe_prec_store_double(tn->prec, d + (size_t)i * es, irt_rndd(lo, hi));
}

/* Element i of tn's buffer as a double. */
static inline double irt_value(const irt_binds_t *b, const troupe_tnode_t *tn, int64_t i)
{
    const char *d = irt_binds_get(b, tn);
    cr_assert_not_null(d, "no buffer for node #%d", tn->id);
    return troupe_prec_load_double(tn->prec, d + (size_t)i * troupe_prec_size_bytes(tn->prec));
}

/* ---- files ----------------------------------------------------------------------------------- */

/* Whole file, NUL-terminated (malloc), or NULL when it cannot be read. */
static inline char *irt_read_file(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            s = realloc(s, cap);
            cr_assert_not_null(s);
        }
        size_t got = fread(s + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    s[len] = '\0';
    if (len_out != NULL)
        *len_out = len;
    return s;
}

static inline void irt_write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, f), len, "short write to %s", path);
    cr_assert_eq(fclose(f), 0, "closing %s: %s", path, strerror(errno));
}

/* ---- C dialect: compile, load, call ---------------------------------------------------------- */

typedef struct irt_lib {
    char dir[128];
    void *handle;
    void (*entry)(void **args);
    troupe_cgen_result_t *res;
} irt_lib_t;

static const char irt_cc_flags[] = "-O2 -Wall -Wextra -Werror";

static inline void irt_lib_close(irt_lib_t *lib)
{
    char path[256];
    if (lib->handle != NULL)
        dlclose(lib->handle);
    troupe_cgen_result_destroy(&lib->res);
    if (lib->dir[0] != '\0') {
        const char *files[] = {"routine.c", "routine.so", "cc.log"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", lib->dir, files[i]);
            unlink(path);
        }
        rmdir(lib->dir);
    }
    memset(lib, 0, sizeof *lib);
}

/* Emits the C dialect of proc, compiles it with `cc <flags> -shared -fPIC` (NULL flags:
 * irt_cc_flags) and loads it. Fails the test on any error (the compiler log and the source are
 * logged). */
static inline void irt_lib_open(const troupe_ll_proc_t *proc, const char *flags, irt_lib_t *lib)
{
    char path[256], cmd[1024];
    memset(lib, 0, sizeof *lib);
    cr_assert_eq(troupe_cgen_emit(proc, TROUPE_CGEN_C, &lib->res), TROUPE_OK, "emit %s: %s",
                 proc->name, troupe_last_error());
    cr_assert_not_null(lib->res->entry_name);
    snprintf(lib->dir, sizeof lib->dir, "/tmp/troupe-irpipe-XXXXXX");
    cr_assert_not_null(mkdtemp(lib->dir), "mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/routine.c", lib->dir);
    irt_write_file(path, lib->res->source, lib->res->source_len);
    snprintf(cmd, sizeof cmd, "cc %s -shared -fPIC -o %s/routine.so %s -lm 2> %s/cc.log",
             flags != NULL ? flags : irt_cc_flags, lib->dir, path, lib->dir);
    if (system(cmd) != 0) {
        snprintf(path, sizeof path, "%s/cc.log", lib->dir);
        char *log = irt_read_file(path, NULL);
        cr_log_error("compiler failed for %s:\n%s\n--- source ---\n%s", proc->name,
                     log ? log : "", lib->res->source);
        free(log);
        cr_assert_fail("cc failed for %s", proc->name);
    }
    snprintf(path, sizeof path, "%s/routine.so", lib->dir);
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib->handle, "dlopen: %s", dlerror());
    void *sym = dlsym(lib->handle, lib->res->entry_name);
    cr_assert_not_null(sym, "dlsym %s", lib->res->entry_name);
    memcpy(&lib->entry, &sym, sizeof sym);
}

/* Calls the compiled routine with the buffers of `b` (every NODE_PTR parameter must have one;
 * static indices and merge buffers are not used by these tests and fail the test). */
static inline void irt_call(const irt_lib_t *lib, const irt_binds_t *b)
{
    void *args[IRT_MAX_BINDS + 1];
    int64_t err[TROUPE_CGEN_GATHER_ERR_WORDS] = {0};
    const troupe_cgen_result_t *res = lib->res;
    cr_assert_leq(res->nparams, IRT_MAX_BINDS);
    for (size_t k = 0; k < res->nparams; k++) {
        const troupe_cgen_param_t *p = &res->params[k];
        cr_assert_eq(p->kind, TROUPE_CGEN_PARAM_NODE_PTR, "parameter %s: unsupported kind",
                     p->decl);
        args[k] = irt_binds_get(b, p->tn);
        cr_assert_not_null(args[k], "no buffer for parameter %s", p->decl);
    }
    args[res->nparams] = err; /* read only by code with gather indices */
    lib->entry(args);
    cr_assert_eq(err[0], 0, "%s: a gather index was out of range", res->name);
}

/* ---- interpreter ----------------------------------------------------------------------------- */

/* Runs the interpreter on the buffers of `b` whose nodes the procedure mentions. */
static inline void irt_interp(const troupe_ll_proc_t *proc, irt_binds_t *b)
{
    troupe_interp_buffer_t bufs[IRT_MAX_BINDS];
    size_t n = 0;
    for (size_t k = 0; k < b->n; k++) {
        if (troupe_ll_proc_node_index(proc, b->tn[k]) < 0)
            continue;
        bufs[n].tn = b->tn[k];
        bufs[n].data = b->data[k];
        n++;
    }
    troupe_interp_args_t args = {bufs, n, NULL, 0, NULL};
    cr_assert_eq(troupe_interp_run(proc, &args), TROUPE_OK, "interp %s: %s", proc->name,
                 troupe_last_error());
}

/* Asserts that tn's buffers in `got` and `want` are equal byte for byte, naming the first
 * element that differs. */
static inline void irt_expect_same_bytes(const char *what, const troupe_tnode_t *tn,
                                         const irt_binds_t *got, const irt_binds_t *want)
{
    const char *x = irt_binds_get(got, tn), *y = irt_binds_get(want, tn);
    cr_assert(x != NULL && y != NULL, "%s: node #%d has no buffer", what, tn->id);
    size_t es = troupe_prec_size_bytes(tn->prec);
    int64_t n = troupe_tnode_num_elems(tn);
    char label[64];
    troupe_tnode_label_string(tn, label, sizeof label);
    for (int64_t i = 0; i < n; i++) {
        const char *xi = x + (size_t)i * es, *yi = y + (size_t)i * es;
        if (memcmp(xi, yi, es) != 0)
            cr_assert_fail("%s: node #%d %s (%s) element %lld differs: %.17g vs %.17g", what,
                           tn->id, label, troupe_prec_name(tn->prec), (long long)i,
                           troupe_prec_load_double(tn->prec, xi),
                           troupe_prec_load_double(tn->prec, yi));
    }
}

static inline bool irt_is_param_node(const troupe_tnode_t *tn, const void *ctx)
{
    return troupe_cgen_find_node_param((const troupe_cgen_result_t *)ctx, tn) >= 0;
}

/* Runs the CUDA dialect of proc on the host (tests/cuda_emu.h) from the buffers of `orig`,
 * with the planned launch and with a small grid in reverse thread order, and asserts every
 * parameter node ends up bit-for-bit as in `want`. Nothing without a C++ compiler. */
static inline void irt_emu_check(const troupe_ll_proc_t *proc, const irt_binds_t *orig,
                                 const irt_binds_t *want)
{
    if (!troupe_emu_available())
        return;
    troupe_cgen_result_t *res = NULL;
    cr_assert_eq(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res), TROUPE_OK, "emit CUDA %s: %s",
                 proc->name, troupe_last_error());
    troupe_emu_t e;
    troupe_emu_open(res, &e);
    void *ptrs[IRT_MAX_BINDS], *args[IRT_MAX_BINDS + 1];
    int64_t err[TROUPE_CGEN_GATHER_ERR_WORDS], *errp = err;
    args[res->nparams] = &errp; /* the gather error words (read only by code with gathers) */
    cr_assert_leq(res->nparams, IRT_MAX_BINDS);
    for (int shape = 0; shape < 2; shape++) {
        memset(err, 0, sizeof err);
        irt_binds_t got;
        irt_binds_copy(&got, orig, irt_is_param_node, res);
        for (size_t k = 0; k < res->nparams; k++) {
            cr_assert_eq(res->params[k].kind, TROUPE_CGEN_PARAM_NODE_PTR);
            ptrs[k] = irt_binds_get(&got, res->params[k].tn);
            cr_assert_not_null(ptrs[k]);
            args[k] = &ptrs[k];
        }
        troupe_emu_run(&e, args, (troupe_emu_shape_t)shape, -1);
        cr_assert_eq(err[0], 0, "%s: the emulated index check failed", proc->name);
        char what[160];
        snprintf(what, sizeof what, "%s: CUDA dialect emulated (%s) vs compiled C", proc->name,
                 shape ? "small grid, reverse" : "planned grid");
        for (size_t k = 0; k < res->nparams; k++)
            irt_expect_same_bytes(what, res->params[k].tn, &got, want);
        irt_binds_free(&got);
    }
    troupe_emu_close(&e);
    troupe_cgen_result_destroy(&res);
}

/* Makes sure every parameter node has a buffer in `b` (zero-filled if new), runs the compiled
 * routine on `b` (updated in place) and the interpreter on a copy made before the call, and
 * asserts every parameter node ends up bit-for-bit identical; then the same for the CUDA
 * dialect run on the host (irt_emu_check). */
static inline void irt_run_and_compare(const troupe_ll_proc_t *proc, const irt_lib_t *lib,
                                       irt_binds_t *b)
{
    irt_binds_t ref;
    for (size_t k = 0; k < lib->res->nparams; k++)
        irt_binds_ensure(b, lib->res->params[k].tn);
    irt_binds_copy(&ref, b, irt_is_param_node, lib->res);
    irt_binds_t orig;
    irt_binds_copy(&orig, b, irt_is_param_node, lib->res);
    irt_call(lib, b);
    irt_interp(proc, &ref);
    char what[160];
    snprintf(what, sizeof what, "%s: compiled C vs interpreter", proc->name);
    for (size_t k = 0; k < lib->res->nparams; k++)
        irt_expect_same_bytes(what, lib->res->params[k].tn, b, &ref);
    irt_binds_free(&ref);
    irt_emu_check(proc, &orig, b);
    irt_binds_free(&orig);
}

/* ---- CUDA dialect ------------------------------------------------------------------------------ */

/* Emits the CUDA dialect of proc and compiles it with NVRTC (compute_80), asserting success
 * and that the PTX defines every kernel. Without the toolkit it does nothing and returns false. */
static inline bool irt_nvrtc_check(const troupe_ll_proc_t *proc)
{
#if TROUPE_HAVE_CUDA
    troupe_cgen_result_t *res = NULL;
    char *ptx = NULL, *log = NULL, entry[256];
    cr_assert_eq(troupe_cgen_emit(proc, TROUPE_CGEN_CUDA, &res), TROUPE_OK, "emit CUDA %s: %s",
                 proc->name, troupe_last_error());
    troupe_status_t st = troupe_nvrtc_compile(res->source, proc->name, "compute_80", &ptx, &log);
    if (st != TROUPE_OK)
        cr_log_error("NVRTC log for %s:\n%s\n--- source ---\n%s", proc->name, log ? log : "",
                     res->source);
    cr_assert_eq(st, TROUPE_OK, "nvrtc %s: %s", proc->name, troupe_last_error());
    for (size_t k = 0; k < res->nkernels; k++) {
        snprintf(entry, sizeof entry, ".entry %s(", res->kernels[k].name);
        cr_assert_not_null(strstr(ptx, entry), "PTX of %s lacks '%s'", proc->name, entry);
    }
    troupe_free(ptx);
    troupe_free(log);
    troupe_cgen_result_destroy(&res);
    return true;
#else
    (void)proc;
    return false;
#endif
}

/* ---- text round trips ------------------------------------------------------------------------ */

/* Prints proc, parses it back, asserts an equal tree (body, symbol table, nodes) and an
 * identical re-print. Returns the text (troupe_free) when keep_text, else NULL. */
static inline char *irt_roundtrip_proc(const troupe_ll_proc_t *p, bool keep_text)
{
    char *t1 = NULL, *t2 = NULL;
    troupe_ll_proc_t *q = NULL;
    cr_assert_eq(troupe_text_print_proc(p, &t1), TROUPE_OK, "print %s: %s", p->name,
                 troupe_last_error());
    cr_assert_eq(troupe_text_parse_proc(t1, &q), TROUPE_OK, "parse %s: %s\n%s", p->name,
                 troupe_last_error(), t1);
    cr_assert_str_eq(q->name, p->name);
    cr_assert(troupe_ll_equal(p->body, q->body), "%s: parsed tree differs:\n%s", p->name, t1);
    cr_assert_eq(q->nsyms, p->nsyms, "%s: symbol count", p->name);
    for (int32_t i = 0; i < p->nsyms; i++) {
        cr_assert_str_eq(q->syms[i].name, p->syms[i].name);
        cr_assert_eq(q->syms[i].is_static, p->syms[i].is_static);
        cr_assert_eq(q->syms[i].static_range, p->syms[i].static_range);
    }
    cr_assert_eq(q->nnodes, p->nnodes, "%s: node count", p->name);
    for (size_t i = 0; i < p->nnodes; i++)
        cr_assert_eq(q->nodes[i], p->nodes[i], "%s: node %zu not reused", p->name, i);
    cr_assert_eq(troupe_text_print_proc(q, &t2), TROUPE_OK, "re-print %s: %s", p->name,
                 troupe_last_error());
    cr_assert(strcmp(t1, t2) == 0, "%s: re-print differs:\n%s\n---\n%s", p->name, t1, t2);
    troupe_free(t2);
    troupe_ll_proc_destroy(&q);
    if (keep_text)
        return t1;
    troupe_free(t1);
    return NULL;
}

/* The same for an assignment comp (troupe_asgn_equal on the roots, symbols, embedded nodes). */
static inline char *irt_roundtrip_comp(const troupe_asgn_comp_t *c, bool keep_text)
{
    char *t1 = NULL, *t2 = NULL;
    troupe_asgn_comp_t *q = NULL;
    cr_assert_eq(troupe_text_print_comp(c, &t1), TROUPE_OK, "print comp: %s",
                 troupe_last_error());
    cr_assert_eq(troupe_text_parse_comp(t1, &q), TROUPE_OK, "parse comp: %s\n%s",
                 troupe_last_error(), t1);
    cr_assert(troupe_asgn_equal(c->root, q->root), "parsed comp differs:\n%s", t1);
    cr_assert_eq(q->nsyms, c->nsyms);
    for (int32_t i = 0; i < c->nsyms; i++) {
        cr_assert_str_eq(q->syms[i].name, c->syms[i].name);
        cr_assert_eq(q->syms[i].range, c->syms[i].range);
    }
    cr_assert_eq(q->nembedded, c->nembedded);
    for (size_t i = 0; i < c->nembedded; i++)
        cr_assert_eq(q->embedded[i], c->embedded[i]);
    cr_assert_eq(troupe_text_print_comp(q, &t2), TROUPE_OK, "re-print comp: %s",
                 troupe_last_error());
    cr_assert(strcmp(t1, t2) == 0, "comp re-print differs:\n%s\n---\n%s", t1, t2);
    troupe_free(t2);
    troupe_asgn_comp_destroy(&q);
    if (keep_text)
        return t1;
    troupe_free(t1);
    return NULL;
}

/* ---- golden files ------------------------------------------------------------------------------ */

static inline bool irt_update_golden(void)
{
    const char *v = getenv("TROUPE_UPDATE_GOLDEN");
    return v != NULL && strcmp(v, "1") == 0;
}

/* Compares `text` byte for byte with TROUPE_TEST_DATA_DIR/golden/<name>.sexp; with
 * TROUPE_UPDATE_GOLDEN=1 in the environment, rewrites the file instead. On a mismatch the
 * first differing line of both is reported. */
static inline void irt_golden_check(const char *name, const char *text)
{
    char path[512];
    size_t len = strlen(text);
    snprintf(path, sizeof path, "%s/golden", TROUPE_TEST_DATA_DIR);
    if (irt_update_golden()) {
        if (mkdir(path, 0777) != 0)
            cr_assert_eq(errno, EEXIST, "mkdir %s: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/golden/%s.sexp", TROUPE_TEST_DATA_DIR, name);
        irt_write_file(path, text, len);
        cr_log_warn("rewrote golden file %s", path);
        return;
    }
    snprintf(path, sizeof path, "%s/golden/%s.sexp", TROUPE_TEST_DATA_DIR, name);
    size_t glen = 0;
    char *golden = irt_read_file(path, &glen);
    cr_assert_not_null(golden, "missing golden file %s (run with TROUPE_UPDATE_GOLDEN=1)", path);
    if (glen != len || memcmp(golden, text, len) != 0) {
        size_t i = 0, line = 1, bol = 0;
        while (i < len && i < glen && text[i] == golden[i]) {
            if (text[i] == '\n') {
                line++;
                bol = i + 1;
            }
            i++;
        }
        const char *g = golden + bol, *t = text + bol;
        int gl = (int)strcspn(g, "\n"), tl = (int)strcspn(t, "\n");
        cr_log_error("actual text:\n%s", text);
        cr_assert_fail("%s differs from the golden file at line %zu (byte %zu):\n"
                       "golden: %.*s\nactual: %.*s\n(TROUPE_UPDATE_GOLDEN=1 rewrites it)",
                       path, line, i, gl, g, tl, t);
    }
    free(golden);
}

#endif
