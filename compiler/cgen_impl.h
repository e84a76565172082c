/* troupe — private interface of the code generators (not installed): between the emitter
 * (compiler/cgen.c), its two targets (compiler/cgen_c.c, compiler/cgen_cuda.c) and the text of
 * the prelude emitted into generated code (compiler/cgen_builtins.c).
 *
 * One emitter, two targets: the emitter walks the procedure and writes statements and
 * expressions in the common subset of C11 and CUDA C++; a target supplies what differs between
 * the dialects (the routine's signature and prologue, the restrict qualifier, what follows the
 * routine, which text of a prelude section to use).
 *
 * The prelude is a table of sections. Each section defines some identifiers (its `provides`
 * list, blank-separated) with text valid both as C11 and as CUDA C++: functions are declared
 * with the TROUPE_FN macro that the dialect's core text defines (`static inline` in C,
 * `static __device__ __forceinline__` in CUDA). A section may have a CUDA-specific text.
 * The emitter scans the routine for identifiers, includes the sections providing them, then
 * scans those sections' texts the same way (dependencies), and emits them in table order —
 * the table lists every section after the ones it uses.
 *
 * Thread safety: immutable static data; troupe_cgen_c_prelude builds its text once
 * (pthread_once) and may be called from any thread. Ownership: static strings.
 */
#ifndef TROUPE_COMPILER_CGEN_IMPL_H
#define TROUPE_COMPILER_CGEN_IMPL_H

#include "base/strbuf.h"
#include "compiler/cgen.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct troupe__cgen_section {
    const char *name;      /* for comments: "half", "threefry", ... */
    const char *provides;  /* blank-separated identifiers the section defines */
    const char *text_c;    /* definition text for C (and CUDA when text_cuda is NULL) */
    const char *text_cuda; /* CUDA text, or NULL for "same as text_c" */
} troupe__cgen_section_t;

/* printf format of the comment line written before each section's text (one %s: its name). */
#define TROUPE__CGEN_SECTION_HEADER "/* prelude: %s */\n"

/* The section table (count entries, dependencies first). */
const troupe__cgen_section_t *troupe__cgen_sections(size_t *count);

/* The text every unit of the dialect starts with: includes or typedefs, TROUPE_FN, the
 * TROUPE_INF_F/TROUPE_NAN_F/TROUPE_INF_D/TROUPE_NAN_D macros, and (C) the
 * floating-point-contraction pragmas. NULL for an unknown dialect. */
const char *troupe__cgen_core(troupe_cgen_dialect_t dialect);

/* ---- the emitter, for targets that lay the routine out themselves --------------------------- */

typedef struct troupe__cgen troupe__cgen_t; /* one emission in progress (compiler/cgen.c) */

const troupe_ll_proc_t *troupe__cgen_proc(const troupe__cgen_t *g);
/* The identifier of symbol `sym` ("i3", "s1_batch"). */
const char *troupe__cgen_sym_ident(const troupe__cgen_t *g, int32_t sym);
/* The identifier of a node's array ("n3_w"). */
const char *troupe__cgen_node_ident(troupe__cgen_t *g, const troupe_tnode_t *tn);
/* Appends the statements of s to *v (a TROUPE__VEC of *n, capacity *cap; the caller frees it):
 * nested SEQs spliced in, NOOPs dropped, the rest in order. false when memory ran out. */
bool troupe__cgen_flatten(const troupe_ll_t *s, const troupe_ll_t ***v, size_t *n, size_t *cap);
/* Whether `tn` is one of the routine's Local arrays (declared by the routine itself). */
bool troupe__cgen_node_is_local(troupe__cgen_t *g, const troupe_tnode_t *tn);
/* The declarations of the routine's Local arrays (zero-filled, indented once). */
void troupe__cgen_put_local_arrays(const troupe__cgen_t *g, troupe__strbuf_t *b);
/* Marks loop symbol `sym` as defined by the target with values lo..hi (a thread's index):
 * troupe__cgen_emit_stmt then emits a loop over it as its body alone. bound false undoes it. */
void troupe__cgen_bind_sym(troupe__cgen_t *g, int32_t sym, bool bound, int64_t lo, int64_t hi);
/* Whether ZERO_OUT z's node is the output of the batched product s (a product inside loops, each
 * point of which writes its own block of the node) and those blocks tile the node exactly: the
 * zeroing then becomes beta = 0 in each call (each overwrites its block). */
bool troupe__cgen_batched_zero(const troupe_ll_t *z, const troupe_ll_t *s);
/* Reads of node tn print `text` (a value in tn's precision, converted as a read would be) until
 * text NULL undoes it: the first write of each element after a zeroing that was dropped. */
void troupe__cgen_read_as(troupe__cgen_t *g, const troupe_tnode_t *tn, const char *text);
/* Marks loop symbols `outer` and `inner` (a loop over inner nested in one over outer) as a skew
 * pair whose sum the target defines as its variable `u` (a thread's index; inner's loop runs
 * inner_lo..inner_hi): troupe__cgen_emit_stmt then emits the loop over outer over the values
 * that leave inner = u - outer in its range, increasing, and the loop over inner as that
 * difference. u NULL undoes it. */
void troupe__cgen_bind_skew(troupe__cgen_t *g, int32_t outer, int32_t inner, const char *u,
                            int64_t inner_lo, int64_t inner_hi);
/* Emits `<lhs> = <value>;` with value computed in the compute type of `prec` and stored as that
 * type (local scopes it holds hoisted into a block around it); lhs is an lvalue declared by the
 * caller. */
troupe_status_t troupe__cgen_emit_value(troupe__cgen_t *g, const char *lhs,
                                        const troupe_sc_t *value, troupe_prec_t prec, int indent,
                                        troupe__strbuf_t *out);
/* Writes the element access `<node ident>[<row-major offset of idcs>]`. */
void troupe__cgen_put_access(troupe__cgen_t *g, troupe__strbuf_t *b, const troupe_tnode_t *tn,
                             const troupe_axis_index_t *idcs);
/* Emits the gather check pass of `s` (compiler/cgen.c: loops to every BIND_INDEX, each value
 * checked, `troupe_err` filled and `return;` on a failure) at `indent` levels. */
troupe_status_t troupe__cgen_emit_checks(troupe__cgen_t *g, const troupe_ll_t *s, int indent,
                                         troupe__strbuf_t *out);
/* The number of gather indices (BIND_INDEX statements) of the emission. */
size_t troupe__cgen_ngathers(const troupe__cgen_t *g);
/* Emits statement `s` at `indent` levels (4 spaces each). */
troupe_status_t troupe__cgen_emit_stmt(troupe__cgen_t *g, const troupe_ll_t *s, int indent,
                                       troupe__strbuf_t *out);

/* The static shared memory every CUDA block may declare without opting in (48 KiB). */
#define TROUPE__CGEN_STATIC_SHARED_MAX (48 * 1024)
/* The shared memory one block of this emission may use: troupe_cgen_options_t.
 * cuda_shared_max_bytes, at least TROUPE__CGEN_STATIC_SHARED_MAX. */
int64_t troupe__cgen_cuda_shared_max(const troupe__cgen_t *g);

/* Tests only: whether the CUDA target lets independent statements share a kernel (default
 * true; compiler/cgen_cuda.c). Off, each statement keeps a launch of its own, so a test can
 * count what the sharing saves. Not thread-safe against concurrent emission. */
void troupe__cgen_cuda_set_sharing(bool on);

/* Tests only: the most outputs a CUDA reduction puts one block each on (default 16384; past
 * it, a warp each: compiler/cgen.h); 0 or negative restores the default. Lowered, the host
 * emulator runs the warp form without tens of thousands of outputs. Not thread-safe;
 * process-wide. */
void troupe__cgen_cuda_set_reduce_max_outputs(int64_t outputs);

/* Tests: single-precision GEMM fallback kernels with fewer 128x128 tiles than `tiles` use 64x64
 * tiles (0: always 128x128; negative: the default, 128). Not thread-safe; process-wide. */
void troupe__cgen_cuda_set_gemm_few_tiles(int64_t tiles);

/* ---- targets ------------------------------------------------------------------------------ */

typedef struct troupe__cgen_target {
    troupe_cgen_dialect_t dialect;
    const char *name;        /* "c", "cuda": in messages and the header comment */
    const char *restrict_kw; /* qualifier of node pointers only read or only written */
    bool has_entry;          /* the unit defines "<name>_entry" (troupe_cgen_result_t.entry_name) */
    bool gemm_library;       /* contractions may call the GEMM library (compiler/gemm.h) */
    /* The header comment's line saying how the routine is called. */
    void (*put_calling)(troupe__strbuf_t *b, const troupe_cgen_result_t *r);
    /* The routine's signature, its opening brace and the start of its body. */
    void (*put_open)(troupe__strbuf_t *b, const troupe_cgen_result_t *r);
    /* When set, replaces put_open and the emitter's body: writes the whole routine (CUDA: its
     * kernels) into b and fills r's kernels and steps; r's parameters are known. */
    troupe_status_t (*put_routine)(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                   troupe__strbuf_t *b);
    /* Text after the routine (C: the _entry trampoline and, when r->gemm_hooks_name is set, the
     * loader's door to the GEMM library), or NULL. */
    void (*put_after)(troupe__strbuf_t *b, const troupe_cgen_result_t *r);
    /* The text of prelude section s in this dialect. */
    const char *(*section_text)(const troupe__cgen_section_t *s);
} troupe__cgen_target_t;

extern const troupe__cgen_target_t troupe__cgen_target_c;    /* compiler/cgen_c.c */
extern const troupe__cgen_target_t troupe__cgen_target_cuda; /* compiler/cgen_cuda.c */

/* Writes "<prefix><name>(<parameter declarations>)\n{\n", with `no_params` between the
 * parentheses when there are none (compiler/cgen.c). */
void troupe__cgen_put_signature(troupe__strbuf_t *b, const char *prefix,
                                const troupe_cgen_result_t *r, const char *no_params);

#endif
