/* troupe — C and CUDA source generation from the low-level IR (see compiler/cgen.h).
 *
 * Steps of troupe_cgen_emit:
 *  1. validate the procedure (troupe_ll_proc_validate) and its name;
 *  2. walk the tree once to find, per node, whether the code reads, writes or reads it
 *     through the merge buffer, and classify each directly accessed node as a parameter or a
 *     local array from its memory mode;
 *  3. emit the routine's body (statements into a buffer; local scopes hoisted into a block
 *     in front of the statement that uses them);
 *  4. build and sort the parameters, then assemble: header comment, the dialect's core text,
 *     the prelude sections the routine's text references (transitively), the routine, and for
 *     C the `_entry` trampoline.
 *
 * Source: OCANNL `C_syntax` (OCANNL_NOTES §6.4), cc_backend and cuda_backend (§6.5–6.7), read
 * for behaviour; the operator syntax comes from ir/ops.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "compiler/cgen.h"

#include "base/alloc.h"
#include "base/log.h"
#include "base/strbuf.h"
#include "base/vec.h"
#include "compiler/cgen_impl.h"
#include "compiler/gemm.h"
#include "ir/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_IDENT_CAP 64
#define S_LABEL_MAX 40

/* ---- identifiers -------------------------------------------------------------------------- */

static bool s_is_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool s_is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Appends `s` sanitised to [A-Za-z0-9_] (others become '_'), at most `max` characters. */
static size_t s_sanitize(const char *s, char *out, size_t max)
{
    size_t n = 0;
    for (; *s != '\0' && n < max; s++)
        out[n++] = s_is_ident_char(*s) ? *s : '_';
    out[n] = '\0';
    return n;
}

size_t troupe_cgen_node_ident(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    char label[256], clean[S_LABEL_MAX + 1];
    if (tn == NULL) {
        if (cap > 0)
            buf[0] = '\0';
        return 0;
    }
    if (tn->label_count == 0)
        return (size_t)snprintf(buf, cap, "n%" PRId32, tn->id);
    troupe_tnode_label_string(tn, label, sizeof label);
    s_sanitize(label, clean, S_LABEL_MAX);
    return (size_t)snprintf(buf, cap, "n%" PRId32 "_%s", tn->id, clean);
}

/* Identifiers a procedure name may not take: keywords of C and C++, names the generated code
 * uses itself, and the math library functions the operator syntax calls. */
static const char *const s_reserved_names[] = {
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "const",
    "const_cast",
    "constexpr",
    "continue",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "main",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
    /* generated code */
    "args",
    "merge_buffer",
    "zi",
    "int8_t",
    "uint8_t",
    "int16_t",
    "uint16_t",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
    "uint4x32_t",
    "memcpy",
    "memset",
    "ldexp",
    /* libm */
    "exp",
    "expf",
    "exp2",
    "exp2f",
    "log",
    "logf",
    "log2",
    "log2f",
    "sin",
    "sinf",
    "cos",
    "cosf",
    "sqrt",
    "sqrtf",
    "pow",
    "powf",
    "fmax",
    "fmaxf",
    "fmin",
    "fminf",
    "fmod",
    "fmodf",
    "fma",
    "fmaf",
    "tanh",
    "tanhf",
    "fabs",
    "fabsf",
    "floor",
    "floorf",
    "trunc",
    "truncf",
};

static troupe_status_t s_check_name(const char *name)
{
    bool bad = name == NULL || !s_is_ident_start(name[0]);
    if (!bad) {
        for (const char *p = name; *p != '\0'; p++)
            bad = bad || !s_is_ident_char(*p);
    }
    if (!bad) {
        bad = strncmp(name, "troupe", 6) == 0 || strncmp(name, "TROUPE", 6) == 0 ||
              strncmp(name, "__", 2) == 0 ||
              (strchr("nvsi", name[0]) != NULL && name[1] >= '0' && name[1] <= '9');
        for (size_t i = 0; !bad && i < sizeof s_reserved_names / sizeof s_reserved_names[0]; i++)
            bad = strcmp(name, s_reserved_names[i]) == 0;
    }
    if (bad)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "cgen: procedure name '%.200s' cannot name a generated routine (it "
                             "collides with a keyword, a library function or generated "
                             "identifiers: troupe*, __*, n<digit>, v<digit>, s<digit>, i<digit>)",
                             name ? name : "(null)");
    return TROUPE_OK;
}

/* ---- generator state ---------------------------------------------------------------------- */

typedef struct s_node_info {
    bool read, written, merge_read;
    bool is_local; /* memory mode Local: an array inside the routine */
    bool is_param;
    bool is_scalar;       /* an iteration scalar (compiler/optimize.h step 4c): no array */
    bool scalar_declared; /* declared by the block being emitted (around its loop) */
    bool scalar_emitted;  /* declared at least once */
    char ident[S_IDENT_CAP];
} s_node_info_t;

typedef struct s_scope {
    int32_t id;
    const troupe_tnode_t *tn;
    char ident[S_IDENT_CAP];
} s_scope_t;

typedef struct s_range {
    bool known;
    int64_t lo, hi;
} s_range_t;

struct troupe__cgen {
    const troupe_ll_proc_t *proc;
    const troupe__cgen_target_t *target;
    s_node_info_t *nodes;      /* aligned with proc->nodes */
    char (*syms)[S_IDENT_CAP]; /* per symbol */
    s_range_t *ranges;         /* per symbol, during emission */
    s_scope_t *scopes;         /* open local scopes, innermost last */
    size_t nscopes, scopes_cap;
    int32_t *scope_uses; /* per scope id: instances emitted so far */
    int32_t nscope_ids;
    const troupe_tnode_t *merge_node;
    bool uses_gemm; /* some contraction calls the GEMM library (compiler/gemm.h) */
    bool uses_bgemm; /* some with bfloat16 factors (troupe_bgemm) */
    bool uses_hgemm; /* some with half factors (troupe_hgemm) */
    bool uses_spack; /* some loop of A B^T calls packs B^T once (troupe_spack_bt, s_bt_pack) */
    bool uses_brgemm; /* some loop of calls runs as one batch-reduce call (troupe_sbrgemm) */
    const troupe_ll_t **binds; /* the BIND_INDEX statements: gather i+1 */
    size_t nbinds, binds_cap;
    bool *bound;    /* per symbol: defined by the target (a thread index); loops over it elided */
    /* per symbol: a skew pair's member (troupe__cgen_bind_skew), u NULL when not */
    struct s_skew {
        const char *u;   /* the target's variable holding outer + inner */
        int32_t partner; /* the pair's other symbol */
        bool outer;
        int64_t lo, hi; /* the inner loop's range (for the outer's bounds) */
    } * skew;
    /* s_emit_for's register accumulation: reads of acc_tn at acc_idcs print acc_name */
    const troupe_tnode_t *acc_tn;
    const troupe_axis_index_t *acc_idcs;
    const char *acc_name;
    bool reassociates; /* some loop became a lane sum (s_emit_lanes) */
    /* s_emit_lanes over a collapsed nest: offsets leave out these outer loops' terms, the
     * innermost loop's symbol printing the flat index (s_put_offset) */
    const int32_t *flat_outer;
    int nflat_outer;
    /* the output of the batched product being emitted whose zeroing was dropped: each call
     * overwrites its block (troupe__cgen_batched_zero) */
    const troupe_tnode_t *beta_zero_c;
    troupe_cgen_options_t opts; /* troupe_cgen_emit_with's, zeroes when none */
};
typedef struct troupe__cgen s_gen_t;

/* The target of a dialect, or NULL. */
static const troupe__cgen_target_t *s_target(troupe_cgen_dialect_t d)
{
    return d == TROUPE_CGEN_C      ? &troupe__cgen_target_c
           : d == TROUPE_CGEN_CUDA ? &troupe__cgen_target_cuda
                                   : NULL;
}

const char *troupe_cgen_dialect_name(troupe_cgen_dialect_t dialect)
{
    const troupe__cgen_target_t *t = s_target(dialect);
    return t != NULL ? t->name : "invalid";
}

/* Re-records the current last error prefixed with the generation context. */
static troupe_status_t s_wrap_error(const s_gen_t *g, troupe_status_t status)
{
    char msg[768];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    return troupe__error(status, "cgen (%s dialect) of procedure %s: %s", g->target->name,
                         g->proc->name, msg);
}

static s_node_info_t *s_info(s_gen_t *g, const troupe_tnode_t *tn)
{
    ptrdiff_t i = troupe_ll_proc_node_index(g->proc, tn);
    return i < 0 ? NULL : &g->nodes[i];
}

/* ---- access collection -------------------------------------------------------------------- */

static troupe_status_t s_collect_ll(s_gen_t *g, const troupe_ll_t *s);

static troupe_status_t s_mark(s_gen_t *g, const troupe_tnode_t *tn, bool read, bool written,
                              bool merge)
{
    s_node_info_t *info = s_info(g, tn);
    if (info == NULL)
        return troupe__error(TROUPE_INTERNAL, "cgen: node #%d missing from procedure %s", tn->id,
                             g->proc->name);
    info->read = info->read || read;
    info->written = info->written || written;
    info->merge_read = info->merge_read || merge;
    if (merge)
        g->merge_node = tn;
    return TROUPE_OK;
}

static troupe_status_t s_collect_sc(s_gen_t *g, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        if (troupe_ll_has_bind_index(e->u.local_scope.body))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "cgen of procedure %s: a gather index (bind_index) inside a "
                                 "local scope is not supported (it could not be checked before "
                                 "the routine's first write)",
                                 g->proc->name);
        return s_collect_ll(g, e->u.local_scope.body);
    case TROUPE_SC_GET:
        return s_mark(g, e->u.get.tn, true, false, false);
    case TROUPE_SC_GET_MERGE_BUFFER:
        return s_mark(g, e->u.get.tn, false, false, true);
    case TROUPE_SC_TERNOP:
        for (int i = 0; i < 3; i++)
            TROUPE_RETURN_IF_ERROR(s_collect_sc(g, e->u.op.args[i]));
        return TROUPE_OK;
    case TROUPE_SC_BINOP:
        for (int i = 0; i < 2; i++)
            TROUPE_RETURN_IF_ERROR(s_collect_sc(g, e->u.op.args[i]));
        return TROUPE_OK;
    case TROUPE_SC_UNOP:
        return s_collect_sc(g, e->u.op.args[0]);
    default:
        return TROUPE_OK;
    }
}

static troupe_status_t s_collect_ll(s_gen_t *g, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_collect_ll(g, s->u.seq.items[i]));
        return TROUPE_OK;
    case TROUPE_LL_FOR:
        return s_collect_ll(g, s->u.for_loop.body);
    case TROUPE_LL_ZERO_OUT:
        return s_mark(g, s->u.zero_out, false, true, false);
    case TROUPE_LL_SET:
        TROUPE_RETURN_IF_ERROR(s_mark(g, s->u.set.tn, false, true, false));
        return s_collect_sc(g, s->u.set.value);
    case TROUPE_LL_SET_FROM_VEC:
        TROUPE_RETURN_IF_ERROR(s_mark(g, s->u.set_from_vec.tn, false, true, false));
        return s_collect_sc(g, s->u.set_from_vec.arg);
    case TROUPE_LL_SET_LOCAL:
        return s_collect_sc(g, s->u.set_local.value);
    case TROUPE_LL_BIND_INDEX:
        TROUPE_RETURN_IF_ERROR(s_mark(g, s->u.bind_index.tn, true, false, false));
        if (!TROUPE__VEC_PUSH(g->binds, g->nbinds, g->binds_cap, s))
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        return s_collect_ll(g, s->u.bind_index.body);
    default:
        return TROUPE_OK;
    }
}

/* The 1-based gather number of BIND_INDEX s. */
static size_t s_gather_no(const s_gen_t *g, const troupe_ll_t *s)
{
    for (size_t i = 0; i < g->nbinds; i++)
        if (g->binds[i] == s)
            return i + 1;
    return 0;
}

/* Parameters or local arrays, from the memory modes. */
static troupe_status_t s_classify(s_gen_t *g)
{
    const troupe_ll_proc_t *proc = g->proc;
    for (size_t i = 0; i < proc->nnodes; i++) {
        s_node_info_t *info = &g->nodes[i];
        troupe_tnode_t *tn = proc->nodes[i];
        troupe_cgen_node_ident(tn, info->ident, sizeof info->ident);
        if (!info->read && !info->written)
            continue;
        troupe_memory_mode_t mode;
        int32_t prov = 0;
        bool has = troupe_tnode_get_memory_mode(tn, &mode, &prov);
        if (has && mode.kind == TROUPE_MM_VIRTUAL) {
            char name[96];
            troupe_tnode_debug_name(tn, name, sizeof name);
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "cgen (%s dialect) of procedure %s: node %s is Virtual "
                                 "(provenance %" PRId32 ") but the code %s it directly; inline it "
                                 "(compiler/optimize) or change its memory mode",
                                 g->target->name, proc->name, name, prov,
                                 info->written ? "writes" : "reads");
        }
        if (has && mode.kind == TROUPE_MM_LOCAL && proc->optimized && proc->traced != NULL &&
            proc->traced[i].iteration_scalar) {
            if (g->target->put_routine != NULL) { /* cuda: kernels of their own layout */
                char name[96];
                troupe_tnode_debug_name(tn, name, sizeof name);
                return troupe__error(TROUPE_FAILED_PRECONDITION,
                                     "cgen (%s dialect) of procedure %s: node %s is an iteration "
                                     "scalar, which only the C dialect generates; optimize with "
                                     "iteration_scalars false for this target",
                                     g->target->name, proc->name, name);
            }
            info->is_scalar = true;
        } else if (has && mode.kind == TROUPE_MM_LOCAL) {
            info->is_local = true;
        } else {
            info->is_param = true;
        }
    }
    if (g->merge_node == NULL && proc->optimized && proc->merge_node != NULL)
        g->merge_node = proc->merge_node;
    return TROUPE_OK;
}

/* Symbols: loop iterators named i<id> keep their name; others become s<id>_<name>. */
static void s_name_symbols(s_gen_t *g)
{
    for (int32_t i = 0; i < g->proc->nsyms; i++) {
        const troupe_ll_symbol_t *sym = &g->proc->syms[i];
        char own[32];
        snprintf(own, sizeof own, "i%" PRId32, i);
        if (!sym->is_static && strcmp(sym->name, own) == 0) {
            snprintf(g->syms[i], S_IDENT_CAP, "%s", own);
        } else {
            char clean[S_LABEL_MAX + 1];
            s_sanitize(sym->name, clean, S_LABEL_MAX);
            snprintf(g->syms[i], S_IDENT_CAP, "s%" PRId32 "_%s", i, clean);
        }
    }
}

/* ---- printing helpers --------------------------------------------------------------------- */

/* An int64 literal valid in C and C++ (LL suffix; INT64_MIN spelled out). */
static void s_put_i64(troupe__strbuf_t *b, int64_t v)
{
    if (v == INT64_MIN)
        troupe__strbuf_puts(b, "(-9223372036854775807LL - 1)");
    else if (v < 0)
        troupe__strbuf_printf(b, "(-%" PRId64 "LL)", -v);
    else
        troupe__strbuf_printf(b, "%" PRId64 "LL", v);
}

/* sum(coeff*sym) + offset over combined terms; "0" when empty. */
typedef struct s_affine {
    int n;
    int32_t sym[TROUPE_MAX_DIMS * TROUPE_MAX_INDEX_TERMS];
    int64_t coeff[TROUPE_MAX_DIMS * TROUPE_MAX_INDEX_TERMS];
    int64_t offset;
} s_affine_t;

static void s_affine_add(s_affine_t *a, const troupe_axis_index_t *idx, int64_t scale)
{
    for (int k = 0; k < idx->nterms; k++) {
        int j = 0;
        while (j < a->n && a->sym[j] != idx->terms[k].sym)
            j++;
        if (j == a->n) {
            a->sym[j] = idx->terms[k].sym;
            a->coeff[j] = 0;
            a->n++;
        }
        a->coeff[j] += idx->terms[k].coeff * scale;
    }
    a->offset += idx->offset * scale;
}

static void s_put_affine(const s_gen_t *g, troupe__strbuf_t *b, const s_affine_t *a)
{
    bool first = true;
    for (int j = 0; j < a->n; j++) {
        int64_t c = a->coeff[j];
        const char *name = g->syms[a->sym[j]];
        if (c == 0)
            continue;
        if (first) {
            if (c == 1)
                troupe__strbuf_printf(b, "%s", name);
            else if (c == -1)
                troupe__strbuf_printf(b, "-%s", name);
            else
                troupe__strbuf_printf(b, "%" PRId64 "*%s", c, name);
        } else {
            int64_t m = c < 0 ? -c : c;
            troupe__strbuf_puts(b, c < 0 ? " - " : " + ");
            if (m == 1)
                troupe__strbuf_printf(b, "%s", name);
            else
                troupe__strbuf_printf(b, "%" PRId64 "*%s", m, name);
        }
        first = false;
    }
    if (first)
        troupe__strbuf_printf(b, "%" PRId64, a->offset);
    else if (a->offset > 0)
        troupe__strbuf_printf(b, " + %" PRId64, a->offset);
    else if (a->offset < 0)
        troupe__strbuf_printf(b, " - %" PRId64, -a->offset);
}

/* Row-major flat offset of idcs into a node of the given dims. */
static void s_put_offset(const s_gen_t *g, troupe__strbuf_t *b, const troupe_tnode_t *tn,
                         const troupe_axis_index_t *idcs)
{
    s_affine_t a;
    memset(&a, 0, sizeof a);
    int64_t stride = 1;
    for (int ax = tn->ndims - 1; ax >= 0; ax--) {
        s_affine_add(&a, &idcs[ax], stride);
        stride *= tn->dims[ax];
    }
    /* in a collapsed nest, the innermost term times the flat index stands for them all */
    for (int j = 0; j < a.n; j++)
        for (int k = 0; k < g->nflat_outer; k++)
            if (a.sym[j] == g->flat_outer[k])
                a.coeff[j] = 0;
    /* Print the terms outermost axis first: reverse the order of first appearance. */
    s_affine_t r = a;
    for (int j = 0; j < a.n; j++) {
        r.sym[j] = a.sym[a.n - 1 - j];
        r.coeff[j] = a.coeff[a.n - 1 - j];
    }
    s_put_affine(g, b, &r);
}

/* ident[offset] of an access, or ident alone for an iteration scalar. */
static void s_put_elem(s_gen_t *g, troupe__strbuf_t *b, const troupe_tnode_t *tn,
                       const troupe_axis_index_t *idcs)
{
    const s_node_info_t *info = s_info(g, tn);
    troupe__strbuf_puts(b, info->ident);
    if (info->is_scalar)
        return;
    troupe__strbuf_puts(b, "[");
    s_put_offset(g, b, tn, idcs);
    troupe__strbuf_puts(b, "]");
}

static void s_put_index(const s_gen_t *g, troupe__strbuf_t *b, const troupe_axis_index_t *idx)
{
    s_affine_t a;
    memset(&a, 0, sizeof a);
    s_affine_add(&a, idx, 1);
    s_put_affine(g, b, &a);
}

/* Range of an index under the current loop ranges; false when some symbol is unbounded. */
static bool s_index_range(const s_gen_t *g, const troupe_axis_index_t *idx, int64_t *lo,
                          int64_t *hi)
{
    *lo = *hi = idx->offset;
    for (int k = 0; k < idx->nterms; k++) {
        const s_range_t *r = &g->ranges[idx->terms[k].sym];
        if (!r->known)
            return false;
        int64_t c = idx->terms[k].coeff;
        *lo += c >= 0 ? c * r->lo : c * r->hi;
        *hi += c >= 0 ? c * r->hi : c * r->lo;
    }
    return true;
}

/* Applies a ops.h syntax template around already-printed operands. */
static troupe_status_t s_convert(const s_gen_t *g, troupe_prec_t from, troupe_prec_t to,
                                 troupe_c_syntax_t *out)
{
    troupe_status_t s = troupe_c_convert_precision(from, to, out);
    return s == TROUPE_OK ? s : s_wrap_error(g, s);
}

static void s_put_float_literal(troupe__strbuf_t *b, double c, bool single)
{
    char num[64];
    if (isnan(c)) {
        troupe__strbuf_puts(b, single ? "TROUPE_NAN_F" : "TROUPE_NAN_D");
        return;
    }
    if (isinf(c)) {
        troupe__strbuf_puts(b, c < 0 ? (single ? "(-TROUPE_INF_F)" : "(-TROUPE_INF_D)")
                                     : (single ? "TROUPE_INF_F" : "TROUPE_INF_D"));
        return;
    }
    if (single)
        snprintf(num, sizeof num, "%.9g", (double)(float)c);
    else
        snprintf(num, sizeof num, "%.17g", c);
    bool has_point = strpbrk(num, ".e") != NULL;
    bool neg = num[0] == '-';
    troupe__strbuf_printf(b, "%s%s%s%s%s", neg ? "(" : "", num, has_point ? "" : ".0",
                          single ? "f" : "", neg ? ")" : "");
}

/* An integer value as a C value of integer precision p. */
static void s_put_int_in(troupe__strbuf_t *b, int64_t v, bool is_u64, troupe_prec_t p)
{
    if (is_u64) {
        troupe__strbuf_printf(b, "((uint64_t)%" PRIu64 "ULL)", (uint64_t)v);
    } else {
        troupe__strbuf_printf(b, "((%s)", troupe_prec_c_type(p));
        s_put_i64(b, v);
        troupe__strbuf_puts(b, ")");
    }
}

static void s_put_constant(troupe__strbuf_t *b, double c, troupe_prec_t prec)
{
    troupe_prec_t cp = troupe_prec_compute(prec);
    if (cp == TROUPE_PREC_SINGLE || cp == TROUPE_PREC_DOUBLE) {
        s_put_float_literal(b, c, cp == TROUPE_PREC_SINGLE);
        return;
    }
    if (cp == TROUPE_PREC_UINT4X32) { /* the truncated, saturated int64 as {lo, hi, 0, 0} */
        int64_t v = 0;
        troupe_prec_store_double(TROUPE_PREC_INT64, &v, c);
        troupe__strbuf_puts(b, "troupe_int64_to_uint4x32(");
        s_put_i64(b, v);
        troupe__strbuf_puts(b, ")");
        return;
    }
    /* Integers: truncate and saturate as troupe_prec_store_double. */
    unsigned char elem[16];
    memset(elem, 0, sizeof elem);
    troupe_prec_t store = cp;
    troupe_prec_store_double(store, elem, c);
    int64_t v = 0;
    uint64_t u = 0;
    switch (store) {
    case TROUPE_PREC_BYTE:
        v = elem[0];
        break;
    case TROUPE_PREC_UINT16: {
        uint16_t x;
        memcpy(&x, elem, sizeof x);
        v = x;
        break;
    }
    case TROUPE_PREC_INT32: {
        int32_t x;
        memcpy(&x, elem, sizeof x);
        v = x;
        break;
    }
    case TROUPE_PREC_UINT32: {
        uint32_t x;
        memcpy(&x, elem, sizeof x);
        v = x;
        break;
    }
    case TROUPE_PREC_UINT64:
        memcpy(&u, elem, sizeof u);
        s_put_int_in(b, (int64_t)u, true, cp);
        return;
    default: /* int64 */
        memcpy(&v, elem, sizeof v);
        break;
    }
    s_put_int_in(b, v, false, cp);
}

/* ---- expression emission ------------------------------------------------------------------ */

static troupe_status_t s_emit_ll(s_gen_t *g, const troupe_ll_t *s, int indent,
                                 troupe__strbuf_t *out);
static void s_put_index(const s_gen_t *g, troupe__strbuf_t *b, const troupe_axis_index_t *idx);

static const s_scope_t *s_find_scope(const s_gen_t *g, int32_t id)
{
    for (size_t i = g->nscopes; i > 0; i--)
        if (g->scopes[i - 1].id == id)
            return &g->scopes[i - 1];
    return NULL;
}

/* The precision an expression has of its own, for where's condition (a GET's or local
 * scope's node precision; otherwise the context's, int64 under a uint4x32 context). */
static troupe_prec_t s_natural_prec(const s_gen_t *g, const troupe_sc_t *e, troupe_prec_t ctx)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        return e->u.get.tn->prec;
    case TROUPE_SC_LOCAL_SCOPE:
        return e->u.local_scope.tn->prec;
    case TROUPE_SC_GET_LOCAL: {
        const s_scope_t *sc = s_find_scope(g, e->u.get_local.id);
        if (sc != NULL)
            return sc->tn->prec;
        break;
    }
    default:
        break;
    }
    return ctx == TROUPE_PREC_UINT4X32 ? TROUPE_PREC_INT64 : ctx;
}

static troupe_status_t s_emit_sc(s_gen_t *g, const troupe_sc_t *e, troupe_prec_t prec, int indent,
                                 troupe__strbuf_t *out, troupe__strbuf_t *pre);

/* piece[0] arg0 piece[1] arg1 ... piece[count-1], args emitted in their precisions. */
static troupe_status_t s_apply(s_gen_t *g, const troupe_c_syntax_t *syn, troupe_sc_t *const *args,
                               const troupe_prec_t *arg_precs, int indent, troupe__strbuf_t *out,
                               troupe__strbuf_t *pre)
{
    for (int i = 0; i < syn->count; i++) {
        troupe__strbuf_puts(out, syn->piece[i]);
        if (i + 1 < syn->count)
            TROUPE_RETURN_IF_ERROR(s_emit_sc(g, args[i], arg_precs[i], indent, out, pre));
    }
    return TROUPE_OK;
}

/* A value held in C as compute type of `from` (or stored type, for reads) converted to the
 * compute type of ctx. */
static troupe_status_t s_put_converted(s_gen_t *g, troupe_prec_t from, troupe_prec_t ctx,
                                       const char *value_prefix, const troupe_tnode_t *tn,
                                       const troupe_axis_index_t *idcs, troupe__strbuf_t *out)
{
    troupe_c_syntax_t conv;
    TROUPE_RETURN_IF_ERROR(s_convert(g, from, troupe_prec_compute(ctx), &conv));
    troupe__strbuf_puts(out, conv.piece[0]);
    troupe__strbuf_puts(out, value_prefix);
    if (tn != NULL && !s_info(g, tn)->is_scalar) {
        troupe__strbuf_puts(out, "[");
        s_put_offset(g, out, tn, idcs);
        troupe__strbuf_puts(out, "]");
    }
    troupe__strbuf_puts(out, conv.piece[1]);
    return TROUPE_OK;
}

static troupe_status_t s_emit_local_scope(s_gen_t *g, const troupe_sc_t *e, int indent,
                                          troupe__strbuf_t *pre, const s_scope_t **out_scope)
{
    const troupe_tnode_t *tn = e->u.local_scope.tn;
    int32_t id = e->u.local_scope.id;
    if (!TROUPE__VEC_RESERVE(g->scopes, g->scopes_cap, g->nscopes + 1))
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    s_scope_t *sc = &g->scopes[g->nscopes];
    sc->id = id;
    sc->tn = tn;
    char clean[S_LABEL_MAX + 1] = "";
    if (tn->label_count > 0) {
        char label[256];
        troupe_tnode_label_string(tn, label, sizeof label);
        s_sanitize(label, clean, S_LABEL_MAX);
    } else {
        snprintf(clean, sizeof clean, "n%" PRId32, tn->id);
    }
    int32_t uses = 0;
    if (id >= 0 && id < g->nscope_ids)
        uses = g->scope_uses[id]++;
    if (uses == 0)
        snprintf(sc->ident, sizeof sc->ident, "v%" PRId32 "_%s", id, clean);
    else
        snprintf(sc->ident, sizeof sc->ident, "v%" PRId32 "_%s_%" PRId32, id, clean, uses);

    troupe_prec_t cp = troupe_prec_compute(tn->prec);
    troupe__strbuf_repeat(pre, "    ", indent);
    if (cp == TROUPE_PREC_UINT4X32)
        troupe__strbuf_printf(pre, "uint4x32_t %s = {{0u, 0u, 0u, 0u}};\n", sc->ident);
    else
        troupe__strbuf_printf(pre, "%s %s = 0;\n", troupe_prec_c_type(cp), sc->ident);
    g->nscopes++;
    troupe_status_t st = s_emit_ll(g, e->u.local_scope.body, indent, pre);
    g->nscopes--;
    /* The slot stays valid (not reused) until the next push. */
    *out_scope = &g->scopes[g->nscopes];
    return st;
}

static troupe_status_t s_emit_sc(s_gen_t *g, const troupe_sc_t *e, troupe_prec_t prec, int indent,
                                 troupe__strbuf_t *out, troupe__strbuf_t *pre)
{
    troupe_c_syntax_t syn;
    troupe_status_t st = TROUPE_OK;
    switch (e->kind) {
    case TROUPE_SC_CONSTANT:
        s_put_constant(out, e->u.constant, prec);
        return TROUPE_OK;
    case TROUPE_SC_CONSTANT_BITS:
    case TROUPE_SC_EMBED_INDEX: {
        /* int64 values, converted like a GET of an int64 node; except that an index becomes a
         * uint4x32 counter as a uint32 (spread), OCANNL's index precision being uint32. */
        troupe_c_syntax_t conv;
        bool index_counter = e->kind == TROUPE_SC_EMBED_INDEX && prec == TROUPE_PREC_UINT4X32;
        TROUPE_RETURN_IF_ERROR(s_convert(g, index_counter ? TROUPE_PREC_UINT32 : TROUPE_PREC_INT64,
                                         troupe_prec_compute(prec), &conv));
        troupe__strbuf_puts(out, conv.piece[0]);
        if (e->kind == TROUPE_SC_CONSTANT_BITS) {
            s_put_i64(out, e->u.constant_bits);
        } else {
            troupe__strbuf_puts(out, index_counter ? "(uint32_t)(" : "(int64_t)(");
            s_put_index(g, out, &e->u.embed_index);
            troupe__strbuf_puts(out, ")");
        }
        troupe__strbuf_puts(out, conv.piece[1]);
        return TROUPE_OK;
    }
    case TROUPE_SC_GET: {
        const s_node_info_t *info = s_info(g, e->u.get.tn);
        if (g->acc_tn != NULL && e->u.get.tn == g->acc_tn) /* s_accumulates: same element */
            return s_put_converted(g, e->u.get.tn->prec, prec, g->acc_name, NULL, NULL, out);
        return s_put_converted(g, e->u.get.tn->prec, prec, info->ident, e->u.get.tn, e->u.get.idcs,
                               out);
    }
    case TROUPE_SC_GET_MERGE_BUFFER:
        return s_put_converted(g, e->u.get.tn->prec, prec, "merge_buffer", e->u.get.tn,
                               e->u.get.idcs, out);
    case TROUPE_SC_GET_LOCAL: {
        const s_scope_t *sc = s_find_scope(g, e->u.get_local.id);
        if (sc == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "cgen of procedure %s: get_local of scope %d outside it",
                                 g->proc->name, e->u.get_local.id);
        return s_put_converted(g, troupe_prec_compute(sc->tn->prec), prec, sc->ident, NULL, NULL,
                               out);
    }
    case TROUPE_SC_LOCAL_SCOPE: {
        const s_scope_t *sc = NULL;
        TROUPE_RETURN_IF_ERROR(s_emit_local_scope(g, e, indent, pre, &sc));
        char ident[S_IDENT_CAP];
        snprintf(ident, sizeof ident, "%s", sc->ident);
        return s_put_converted(g, troupe_prec_compute(e->u.local_scope.tn->prec), prec, ident, NULL,
                               NULL, out);
    }
    case TROUPE_SC_UNOP: {
        troupe_unop_t op = (troupe_unop_t)e->u.op.op;
        troupe_prec_t ap = troupe_is_homogeneous_prec_unop(op) ? prec : TROUPE_PREC_UINT4X32;
        st = troupe_unop_c_syntax(prec, op, &syn);
        if (st != TROUPE_OK)
            return s_wrap_error(g, st);
        return s_apply(g, &syn, e->u.op.args, &ap, indent, out, pre);
    }
    case TROUPE_SC_BINOP: {
        troupe_binop_t op = (troupe_binop_t)e->u.op.op;
        troupe_prec_t ap[2] = {prec, prec};
        st = troupe_binop_c_syntax(prec, op, &syn);
        if (st != TROUPE_OK)
            return s_wrap_error(g, st);
        return s_apply(g, &syn, e->u.op.args, ap, indent, out, pre);
    }
    case TROUPE_SC_TERNOP: {
        troupe_ternop_t op = (troupe_ternop_t)e->u.op.op;
        troupe_prec_t ap[3] = {prec, prec, prec};
        if (!troupe_is_homogeneous_prec_ternop(op)) { /* where: the condition's own precision */
            ap[0] = s_natural_prec(g, e->u.op.args[0], prec);
            if (ap[0] == TROUPE_PREC_UINT4X32)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "cgen (%s dialect) of procedure %s: ternop %s: a condition "
                                     "of precision uint4x32 is not supported",
                                     g->target->name, g->proc->name, troupe_ternop_name(op));
        }
        st = troupe_ternop_c_syntax(prec, op, &syn);
        if (st != TROUPE_OK)
            return s_wrap_error(g, st);
        return s_apply(g, &syn, e->u.op.args, ap, indent, out, pre);
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "cgen: unknown scalar kind %d", (int)e->kind);
}

/* ---- statement emission ------------------------------------------------------------------- */

/* A statement whose value needed pre-statements `pre` (hoisted local scopes) goes inside a
 * block after them: opens `{` and writes pre when it is not empty, and returns the indent of
 * the statement. s_close_pre_block closes the block. */
static int s_open_pre_block(troupe__strbuf_t *out, int indent, const troupe__strbuf_t *pre)
{
    if (pre->len == 0)
        return indent;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "{\n");
    troupe__strbuf_putn(out, pre->data, pre->len);
    return indent + 1;
}

static void s_close_pre_block(troupe__strbuf_t *out, int indent, const troupe__strbuf_t *pre)
{
    if (pre->len == 0)
        return;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
}

/* Ends a statement built from the buffers pre and expr: frees them, and makes st out of memory
 * when it was TROUPE_OK but a buffer failed to grow. */
static troupe_status_t s_stmt_done(troupe_status_t st, troupe__strbuf_t *pre,
                                   troupe__strbuf_t *expr)
{
    if (st == TROUPE_OK && (pre->failed || expr->failed))
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    troupe__strbuf_reset(pre);
    troupe__strbuf_reset(expr);
    return st;
}

/* Emits `<lhs> = <conv>(<value>);` with any local scopes of value hoisted into a block. `lhs`
 * is printed by the caller-supplied prefix (already formatted). */
static troupe_status_t s_emit_assign(s_gen_t *g, const char *lhs, const troupe_sc_t *value,
                                     troupe_prec_t value_prec, troupe_prec_t store_prec, int indent,
                                     troupe__strbuf_t *out)
{
    troupe__strbuf_t pre = TROUPE__STRBUF_INIT, expr = TROUPE__STRBUF_INIT;
    troupe_c_syntax_t conv;
    troupe_status_t st = s_emit_sc(g, value, value_prec, indent + 1, &expr, &pre);
    if (st == TROUPE_OK)
        st = s_convert(g, troupe_prec_compute(value_prec), store_prec, &conv);
    if (st == TROUPE_OK) {
        troupe__strbuf_repeat(out, "    ", s_open_pre_block(out, indent, &pre));
        troupe__strbuf_printf(out, "%s = %s", lhs, conv.piece[0]);
        if (expr.len > 0)
            troupe__strbuf_putn(out, expr.data, expr.len);
        troupe__strbuf_printf(out, "%s;\n", conv.piece[1]);
        s_close_pre_block(out, indent, &pre);
    }
    return s_stmt_done(st, &pre, &expr);
}

static void s_put_comment(troupe__strbuf_t *out, const char *text)
{
    troupe__strbuf_puts(out, "/* ");
    for (const char *p = text; *p != '\0'; p++) {
        if (p[0] == '*' && p[1] == '/')
            troupe__strbuf_puts(out, "* ");
        else if (p[0] == '/' && p[1] == '*')
            troupe__strbuf_puts(out, "/ ");
        else if (*p == '\n' || *p == '\r')
            troupe__strbuf_puts(out, " ");
        else
            troupe__strbuf_putn(out, p, 1);
    }
    troupe__strbuf_puts(out, " */\n");
}

/* Whether e reads tn only at idcs (never elsewhere) and holds no local scope. */
static bool s_reads_only_at(const troupe_sc_t *e, const troupe_tnode_t *tn,
                            const troupe_axis_index_t *idcs)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
        return e->u.get.tn != tn || troupe_axis_indices_equal(e->u.get.idcs, idcs, tn->ndims);
    case TROUPE_SC_LOCAL_SCOPE:
        return false;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n = e->kind == TROUPE_SC_TERNOP ? 3 : e->kind == TROUPE_SC_BINOP ? 2 : 1;
        for (int i = 0; i < n; i++)
            if (!s_reads_only_at(e->u.op.args[i], tn, idcs))
                return false;
        return true;
    }
    default:
        return true;
    }
}

/* The SET of loop s when, in the CUDA dialect, it accumulates into one element across the
 * loop: the body is that one SET of a single- or double-precision node at indices that do not
 * use the loop's symbol, reading the node only at that element. Such a loop keeps the element
 * in a register (loaded before, stored after): the same operations in the same order as
 * storing and reloading it at every step, so the same bits, without a memory round trip per
 * step that the compiler cannot remove (the node's pointer may alias the loop's other reads):
 * the main job's loss over the batch, a product's k loop in a thread. NULL otherwise. */
static const troupe_ll_t *s_accumulates(const s_gen_t *g, const troupe_ll_t *s)
{
    if (g->target != &troupe__cgen_target_cuda || g->acc_tn != NULL)
        return NULL;
    /* through one-item sequences and the loops the target binds (a thread's index: their
     * bodies are emitted alone, inside this loop) */
    const troupe_ll_t *body = s->u.for_loop.body;
    while (body != NULL && ((body->kind == TROUPE_LL_SEQ && body->u.seq.count == 1) ||
                            (body->kind == TROUPE_LL_FOR && g->bound[body->u.for_loop.sym])))
        body = body->kind == TROUPE_LL_SEQ ? body->u.seq.items[0] : body->u.for_loop.body;
    if (body == NULL || body->kind != TROUPE_LL_SET)
        return NULL;
    const troupe_tnode_t *tn = body->u.set.tn;

    if (tn->prec != TROUPE_PREC_SINGLE && tn->prec != TROUPE_PREC_DOUBLE)
        return NULL;
    if (troupe_axis_indices_use(body->u.set.idcs, tn->ndims, s->u.for_loop.sym))
        return NULL;
    return s_reads_only_at(body->u.set.value, tn, body->u.set.idcs) ? body : NULL;
}

/* Whether e reads tn nowhere and holds no local scope. */
static bool s_reads_none(const troupe_sc_t *e, const troupe_tnode_t *tn)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
        return e->u.get.tn != tn;
    case TROUPE_SC_LOCAL_SCOPE:
        return false;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n = e->kind == TROUPE_SC_TERNOP ? 3 : e->kind == TROUPE_SC_BINOP ? 2 : 1;
        for (int i = 0; i < n; i++)
            if (!s_reads_none(e->u.op.args[i], tn))
                return false;
        return true;
    }
    default:
        return true;
    }
}

/* Whether e is a GET of tn at idcs. */
static bool s_is_elem(const troupe_sc_t *e, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs)
{
    return e->kind == TROUPE_SC_GET && e->u.get.tn == tn &&
           troupe_axis_indices_equal(e->u.get.idcs, idcs, tn->ndims);
}

/* A lane sum's loops (cgen.h, "Lane sums"): one loop, or a perfect nest whose accesses
 * collapse into one flat loop. */
#define S_NEST_MAX 8
typedef struct s_nest {
    const troupe_ll_t *set;               /* the innermost body */
    const troupe_ll_t *loops[S_NEST_MAX]; /* outermost first */
    int32_t syms[S_NEST_MAX];
    int depth;
    int64_t trip; /* the product of the extents */
    int64_t from; /* the flat index's first value: sum of each from times the inner extents */
} s_nest_t;

/* b through one-item sequences. */
static const troupe_ll_t *s_through_seqs(const troupe_ll_t *b)
{
    while (b != NULL && b->kind == TROUPE_LL_SEQ && b->u.seq.count == 1)
        b = b->u.seq.items[0];
    return b;
}

/* The coefficient of sym in the row-major offset of idcs into tn. */
static int64_t s_offset_coeff(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                              int32_t sym)
{
    int64_t c = 0, stride = 1;
    for (int ax = tn->ndims - 1; ax >= 0; ax--) {
        for (int k = 0; k < idcs[ax].nterms; k++)
            if (idcs[ax].terms[k].sym == sym)
                c += idcs[ax].terms[k].coeff * stride;
        stride *= tn->dims[ax];
    }
    return c;
}

/* Whether the access idcs into tn steps through nest n like one loop of n->trip iterations:
 * each loop's coefficient is the next inner one's times that loop's extent. */
static bool s_access_collapses(const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                               const s_nest_t *n)
{
    for (int k = 0; k + 1 < n->depth; k++) {
        const troupe_ll_t *in = n->loops[k + 1];
        int64_t ext = in->u.for_loop.to - in->u.for_loop.from + 1;
        int64_t outer = s_offset_coeff(tn, idcs, n->syms[k]);
        int64_t inner = s_offset_coeff(tn, idcs, n->syms[k + 1]);
        int64_t prod;
        if (__builtin_mul_overflow(inner, ext, &prod) || outer != prod)
            return false;
    }
    return true;
}

/* Whether every access of e collapses over nest n and no other use of its loops' symbols
 * (an embedded index) needs them apart. */
static bool s_collapses(const troupe_sc_t *e, const s_nest_t *n)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        return s_access_collapses(e->u.get.tn, e->u.get.idcs, n);
    case TROUPE_SC_EMBED_INDEX:
        for (int k = 0; k < n->depth; k++)
            if (troupe_axis_indices_use(&e->u.embed_index, 1, n->syms[k]))
                return false;
        return true;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int m = e->kind == TROUPE_SC_TERNOP ? 3 : e->kind == TROUPE_SC_BINOP ? 2 : 1;
        for (int i = 0; i < m; i++)
            if (!s_collapses(e->u.op.args[i], n))
                return false;
        return true;
    }
    default:
        return true;
    }
}

/* Whether the C dialect runs loop s in TROUPE_CGEN_LANES lanes (cgen.h, "Lane sums"), and
 * then its loops into *n: s and the loops of a perfect nest under it (each body, through
 * one-item sequences, exactly the next loop) of at least TROUPE_CGEN_LANES_MIN_TRIP
 * iterations in all, the innermost body one SET of a single or double node O at indices
 * without the loops' symbols, of value O + t, t + O, O - t, fma(x, y, O), max(O, t),
 * max(t, O) or min alike, where t (x, y) reads O nowhere and holds no local scope; a nest of
 * two or more loops also collapses (s_collapses). */
static bool s_lane_sum(const s_gen_t *g, const troupe_ll_t *s, s_nest_t *n)
{
    if (g->target != &troupe__cgen_target_c || g->acc_tn != NULL)
        return false;
    memset(n, 0, sizeof *n);
    n->trip = 1;
    const troupe_ll_t *body = s;
    while (body != NULL && body->kind == TROUPE_LL_FOR) {
        int64_t ext = body->u.for_loop.to - body->u.for_loop.from + 1;
        if (n->depth == S_NEST_MAX || g->bound[body->u.for_loop.sym] || ext < 1 ||
            __builtin_mul_overflow(n->trip, ext, &n->trip) ||
            __builtin_mul_overflow(n->from, ext, &n->from) ||
            __builtin_add_overflow(n->from, body->u.for_loop.from, &n->from))
            return false;
        n->loops[n->depth] = body;
        n->syms[n->depth] = body->u.for_loop.sym;
        n->depth++;
        body = s_through_seqs(body->u.for_loop.body);
    }
    int64_t last;
    if (n->trip < TROUPE_CGEN_LANES_MIN_TRIP || body == NULL || body->kind != TROUPE_LL_SET ||
        __builtin_add_overflow(n->from, n->trip - 1, &last))
        return false;
    n->set = body;
    const troupe_tnode_t *tn = body->u.set.tn;
    const troupe_axis_index_t *idcs = body->u.set.idcs;
    if (tn->prec != TROUPE_PREC_SINGLE && tn->prec != TROUPE_PREC_DOUBLE)
        return false;
    for (int k = 0; k < n->depth; k++)
        if (troupe_axis_indices_use(idcs, tn->ndims, n->syms[k]))
            return false;
    const troupe_sc_t *v = body->u.set.value;
    if (n->depth > 1 && !s_collapses(v, n))
        return false;
    troupe_sc_t *const *a = v->u.op.args;
    if (v->kind == TROUPE_SC_BINOP &&
        (v->u.op.op == TROUPE_BINOP_ADD || v->u.op.op == TROUPE_BINOP_MAX ||
         v->u.op.op == TROUPE_BINOP_MIN)) {
        if (s_is_elem(a[0], tn, idcs) && s_reads_none(a[1], tn))
            return true;
        return s_is_elem(a[1], tn, idcs) && s_reads_none(a[0], tn);
    }
    if (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_SUB)
        return s_is_elem(a[0], tn, idcs) && s_reads_none(a[1], tn);
    if (v->kind == TROUPE_SC_TERNOP && v->u.op.op == TROUPE_TERNOP_FMA)
        return s_is_elem(a[2], tn, idcs) && s_reads_none(a[0], tn) && s_reads_none(a[1], tn);
    return false;
}

/* Emits the loops n that s_lane_sum accepted as a lane sum (cgen.h, "Lane sums"): over one
 * loop of n->trip iterations, a nest's flat index printed as its innermost loop's symbol. */
static troupe_status_t s_emit_lanes(s_gen_t *g, const s_nest_t *n, int indent,
                                    troupe__strbuf_t *out)
{
    const troupe_ll_t *set = n->set;
    int32_t sym = n->syms[n->depth - 1];
    const char *name = g->syms[sym];
    const troupe_tnode_t *tn = set->u.set.tn;
    int64_t from = n->from, to = n->from + n->trip - 1;
    int64_t end = from + (to - from + 1) / TROUPE_CGEN_LANES * TROUPE_CGEN_LANES; /* exclusive */
    const char *type = troupe_prec_c_type(tn->prec);
    char lane[S_IDENT_CAP + 8], acc[2 * S_IDENT_CAP + 48];
    snprintf(lane, sizeof lane, "lane_%s", name);
    troupe__strbuf_t elem = TROUPE__STRBUF_INIT;
    s_put_elem(g, &elem, tn, set->u.set.idcs);
    if (elem.failed) {
        troupe__strbuf_reset(&elem);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    }
    const troupe_sc_t *v = set->u.set.value;
    bool is_max = v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_MAX;
    bool is_maxmin = is_max || (v->kind == TROUPE_SC_BINOP && v->u.op.op == TROUPE_BINOP_MIN);
    bool dbl = tn->prec == TROUPE_PREC_DOUBLE;
    /* max: lanes start at -inf (min: +inf); a sum's at 0 */
    const char *init = !is_maxmin ? "0"
                       : is_max   ? (dbl ? "(-TROUPE_INF_D)" : "(-TROUPE_INF_F)")
                                  : (dbl ? "TROUPE_INF_D" : "TROUPE_INF_F");
    troupe_c_syntax_t comb; /* how two lanes combine: + for a sum, the op for max/min */
    troupe_status_t st = troupe_binop_c_syntax(
        tn->prec, is_maxmin ? (troupe_binop_t)v->u.op.op : TROUPE_BINOP_ADD, &comb);
    if (st != TROUPE_OK) {
        troupe__strbuf_reset(&elem);
        return s_wrap_error(g, st);
    }
    g->reassociates = g->reassociates || !is_maxmin;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "{ /* %s %s across ", elem.data,
                          is_maxmin ? (is_max ? "max" : "min") : "sums");
    for (int k = 0; k + 1 < n->depth; k++) /* a nest: its loops, then the flat index's name */
        troupe__strbuf_printf(out, "%s%s", g->syms[n->syms[k]], k + 2 < n->depth ? ", " : " and ");
    if (n->depth > 1)
        troupe__strbuf_printf(out, "%s as one loop %s", name, name);
    else
        troupe__strbuf_puts(out, name);
    troupe__strbuf_printf(out, " in %d lanes */\n", TROUPE_CGEN_LANES);
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out, "%s %s[%d];\n", type, lane, TROUPE_CGEN_LANES);
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out, "for (int k = 0; k < %d; ++k) %s[k] = %s;\n", TROUPE_CGEN_LANES,
                          lane, init);
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out,
                          "for (int64_t blk_%s = %" PRId64 "; blk_%s < %" PRId64
                          "; blk_%s += %d) {\n",
                          name, from, name, end, name, TROUPE_CGEN_LANES);
    /* one vector of lanes per block: GCC would otherwise unroll the lanes into scalars and
     * leave an in-order reduction per lane it does not vectorise */
    troupe__strbuf_repeat(out, "    ", indent + 2);
    troupe__strbuf_puts(out, "TROUPE_LANE_LOOP\n");
    troupe__strbuf_repeat(out, "    ", indent + 2);
    troupe__strbuf_printf(out, "for (int64_t k_%s = 0; k_%s < %d; ++k_%s) {\n", name, name,
                          TROUPE_CGEN_LANES, name);
    troupe__strbuf_repeat(out, "    ", indent + 3);
    troupe__strbuf_printf(out, "const int64_t %s = blk_%s + k_%s;\n", name, name, name);
    /* each symbol keeps its own range; a nest's outer ones leave the printed offsets */
    s_range_t saved[S_NEST_MAX];
    for (int k = 0; k < n->depth; k++) {
        saved[k] = g->ranges[n->syms[k]];
        g->ranges[n->syms[k]] =
            (s_range_t){true, n->loops[k]->u.for_loop.from, n->loops[k]->u.for_loop.to};
    }
    g->flat_outer = n->syms;
    g->nflat_outer = n->depth - 1;
    g->acc_tn = tn;
    g->acc_idcs = set->u.set.idcs;
    g->acc_name = acc;
    snprintf(acc, sizeof acc, "%s[k_%s]", lane, name);
    st = s_emit_assign(g, acc, set->u.set.value, tn->prec, tn->prec, indent + 3, out);
    troupe__strbuf_repeat(out, "    ", indent + 2);
    troupe__strbuf_puts(out, "}\n");
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_puts(out, "}\n");
    if (st == TROUPE_OK && end <= to) {
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_printf(out,
                              "for (int64_t %s = %" PRId64 "; %s <= %" PRId64 "; ++%s) {\n",
                              name, end, name, to, name);
        snprintf(acc, sizeof acc, "%s[%s - %" PRId64 "]", lane, name, end);
        st = s_emit_assign(g, acc, set->u.set.value, tn->prec, tn->prec, indent + 2, out);
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_puts(out, "}\n");
    }
    g->acc_tn = NULL;
    g->acc_idcs = NULL;
    g->acc_name = NULL;
    for (int w = TROUPE_CGEN_LANES / 2; w >= 1; w /= 2) {
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_printf(out, "for (int k = 0; k < %d; ++k) %s[k] = %s%s[k]%s%s[k + %d]%s;\n",
                              w, lane, comb.piece[0], lane, comb.piece[1], lane, w,
                              comb.piece[2]);
    }
    troupe__strbuf_repeat(out, "    ", indent + 1);
    if (!is_maxmin) {
        troupe__strbuf_printf(out, "%s = %s + %s[0];\n", elem.data, elem.data, lane);
    } else {
        /* a result other than 0 and the start value is the same bits in any order */
        bool o_first = s_is_elem(v->u.op.args[0], tn, set->u.set.idcs);
        troupe__strbuf_printf(out, "if (%s[0] != 0 && %s[0] != %s) {\n", lane, lane, init);
        troupe__strbuf_repeat(out, "    ", indent + 2);
        char lane0[S_IDENT_CAP + 16];
        snprintf(lane0, sizeof lane0, "%s[0]", lane);
        troupe__strbuf_printf(out, "%s = %s%s%s%s%s;\n", elem.data, comb.piece[0],
                              o_first ? elem.data : lane0, comb.piece[1],
                              o_first ? lane0 : elem.data, comb.piece[2]);
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_puts(out, "} else {\n");
        troupe__strbuf_repeat(out, "    ", indent + 2);
        troupe__strbuf_printf(out,
                              "for (int64_t %s = %" PRId64 "; %s <= %" PRId64 "; ++%s) {\n",
                              name, from, name, to, name);
        if (st == TROUPE_OK)
            st = s_emit_assign(g, elem.data, v, tn->prec, tn->prec, indent + 3, out);
        troupe__strbuf_repeat(out, "    ", indent + 2);
        troupe__strbuf_puts(out, "}\n");
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_puts(out, "}\n");
    }
    g->flat_outer = NULL;
    g->nflat_outer = 0;
    for (int k = 0; k < n->depth; k++)
        g->ranges[n->syms[k]] = saved[k];
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
    troupe__strbuf_reset(&elem);
    return st;
}

/* A loop over a skew pair's member (troupe__cgen_bind_skew): the outer one over the values
 * that leave the inner one in its range, in increasing order; the inner one the difference. */
static troupe_status_t s_emit_skewed(s_gen_t *g, const troupe_ll_t *s, int indent,
                                     troupe__strbuf_t *out)
{
    int32_t sym = s->u.for_loop.sym;
    const char *name = g->syms[sym];
    const struct s_skew *k = &g->skew[sym];
    const int64_t from = s->u.for_loop.from, to = s->u.for_loop.to;
    troupe__strbuf_repeat(out, "    ", indent);
    if (k->outer)
        troupe__strbuf_printf(out,
                              "for (int64_t %s = %s - %" PRId64 "LL > %" PRId64 "LL ? %s - %" PRId64
                              "LL : %" PRId64 "LL; %s <= (%s - %" PRId64 "LL < %" PRId64
                              "LL ? %s - %" PRId64 "LL : %" PRId64 "LL); ++%s) {\n",
                              name, k->u, k->hi, from, k->u, k->hi, from, name, k->u, k->lo, to,
                              k->u, k->lo, to, name);
    else
        troupe__strbuf_printf(out, "{\n%*sconst int64_t %s = %s - %s;\n", 4 * (indent + 1), "",
                              name, k->u, g->syms[k->partner]);
    s_range_t saved = g->ranges[sym];
    g->ranges[sym] = (s_range_t){true, from, to};
    troupe_status_t st = s_emit_ll(g, s->u.for_loop.body, indent + 1, out);
    g->ranges[sym] = saved;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
    return st;
}

static troupe_status_t s_emit_for(s_gen_t *g, const troupe_ll_t *s, int indent,
                                  troupe__strbuf_t *out)
{
    int32_t sym = s->u.for_loop.sym;
    const char *name = g->syms[sym];
    if (g->bound[sym]) /* the target defines the symbol (a thread's index): just the body */
        return s_emit_ll(g, s->u.for_loop.body, indent, out);
    if (g->skew[sym].u != NULL)
        return s_emit_skewed(g, s, indent, out);
    s_nest_t lanes;
    if (s_lane_sum(g, s, &lanes))
        return s_emit_lanes(g, &lanes, indent, out);
    const troupe_ll_t *acc = s_accumulates(g, s);
    if (acc != NULL) {
        const troupe_tnode_t *tn = acc->u.set.tn;
        char acc_name[S_IDENT_CAP + 8];
        snprintf(acc_name, sizeof acc_name, "acc_%s", name);
        troupe__strbuf_t elem = TROUPE__STRBUF_INIT;
        s_put_elem(g, &elem, tn, acc->u.set.idcs);
        if (elem.failed) {
            troupe__strbuf_reset(&elem);
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        }
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_printf(out, "{ /* %s accumulates in a register across %s */\n", elem.data,
                              name);
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_printf(out, "%s %s = %s;\n", troupe_prec_c_type(tn->prec), acc_name,
                              elem.data);
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_printf(out, "for (int64_t %s = %" PRId64 "; %s <= %" PRId64 "; ++%s) {\n",
                              name, s->u.for_loop.from, name, s->u.for_loop.to, name);
        s_range_t saved = g->ranges[sym];
        g->ranges[sym] = (s_range_t){true, s->u.for_loop.from, s->u.for_loop.to};
        g->acc_tn = tn;
        g->acc_idcs = acc->u.set.idcs;
        g->acc_name = acc_name;
        troupe_status_t st =
            s_emit_assign(g, acc_name, acc->u.set.value, tn->prec, tn->prec, indent + 2, out);
        g->acc_tn = NULL;
        g->acc_idcs = NULL;
        g->acc_name = NULL;
        g->ranges[sym] = saved;
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_puts(out, "}\n");
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_printf(out, "%s = %s;\n", elem.data, acc_name);
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_puts(out, "}\n");
        troupe__strbuf_reset(&elem);
        return st;
    }
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "for (int64_t %s = %" PRId64 "; %s <= %" PRId64 "; ++%s) {\n", name,
                          s->u.for_loop.from, name, s->u.for_loop.to, name);
    s_range_t saved = g->ranges[sym];
    g->ranges[sym] = (s_range_t){true, s->u.for_loop.from, s->u.for_loop.to};
    troupe_status_t st = s_emit_ll(g, s->u.for_loop.body, indent + 1, out);
    g->ranges[sym] = saved;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
    return st;
}

/* Whether sym is one of the outer loops gm->outer_syms[from..]. */
static bool s_gemm_outer_from(const troupe_gemm_t *gm, int from, int32_t sym)
{
    for (int o = from; o < gm->nouter; o++)
        if (gm->outer_syms[o] == sym)
            return true;
    return false;
}

/* &ident[offset of the access with the product's loops and its outer loops from `from` on at
 * 0]: the operand's base (from = gm->nouter), or that of the calls those outer loops make. */
static void s_put_gemm_base_from(s_gen_t *g, troupe__strbuf_t *b, const troupe_gemm_t *gm,
                                 const troupe_gemm_operand_t *o, int from)
{
    troupe_axis_index_t base[TROUPE_MAX_DIMS];
    for (int ax = 0; ax < o->tn->ndims; ax++) {
        base[ax] = o->idcs[ax];
        base[ax].nterms = 0;
        for (int t = 0; t < o->idcs[ax].nterms; t++) {
            int32_t sym = o->idcs[ax].terms[t].sym;
            if (!troupe_gemm_has_sym(gm, sym) && !s_gemm_outer_from(gm, from, sym))
                base[ax].terms[base[ax].nterms++] = o->idcs[ax].terms[t];
        }
    }
    troupe__strbuf_printf(b, "&%s[", s_info(g, o->tn)->ident);
    s_put_offset(g, b, o->tn, base);
    troupe__strbuf_puts(b, "]");
}

/* &ident[offset of the access with the product's loops at 0]: the operand's base. */
static void s_put_gemm_base(s_gen_t *g, troupe__strbuf_t *b, const troupe_gemm_t *gm,
                            const troupe_gemm_operand_t *o)
{
    s_put_gemm_base_from(g, b, gm, o, gm->nouter);
}

/* B^T packed once for the calls of a product's innermost outer loops (compiler/gemm.h, merged
 * loops). A single-precision C = A B^T call transposes its B into a scratch before libxsmm's A B
 * kernel (devices/host/gemm_library.h); when the loops from outer_syms[first] on move B only by
 * shifts along its contiguous k dimension (strides >= 0, e.g. a convolution's kernel offsets
 * over the rows of its input: docs/trainer.md, "Convolution lowering"), and the shifted ranges
 * [off, off + k) cover [0, kext) without a gap, the n x kext block they read is transposed once
 * per iteration of the loops outside them (troupe_spack_bt) and each call runs the A B kernel on
 * its shifted rows of that pack: the same kernel on the same values, bit for bit. The block is
 * exactly the memory the calls read (kext <= ldb: within B's rows). Chosen only when it copies
 * less than the calls would (calls * k > kext). */
typedef struct s_bt_pack {
    int first;     /* the outermost loop the pack serves; gm->nouter when none */
    int64_t kext;  /* k + the largest shift */
    int64_t calls; /* calls per pack */
} s_bt_pack_t;

/* Most distinct shifts the rule enumerates (a 3 x 3 kernel has 9). */
#define S_BT_PACK_MAX_SHIFTS 1024

static int s_int64_cmp(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static s_bt_pack_t s_gemm_bt_pack(const troupe_gemm_t *gm, const troupe_gemm_epilogue_t *ep)
{
    s_bt_pack_t pk = {gm->nouter, gm->k, 1};
    if (gm->prec != TROUPE_PREC_SINGLE || gm->factor_prec != TROUPE_PREC_SINGLE || !gm->b.trans ||
        gm->a.trans || gm->b.tn == gm->c.tn || ep->init != NULL || ep->post != NULL)
        return pk;
    int64_t shifts[S_BT_PACK_MAX_SHIFTS], grown[S_BT_PACK_MAX_SHIFTS];
    size_t nshifts = 1;
    shifts[0] = 0;
    int64_t calls = 1;
    for (int o = gm->nouter - 1; o >= 0; o--) {
        int64_t stride = troupe_gemm_sym_stride(gm->b.tn, gm->b.idcs, gm->outer_syms[o]);
        int64_t ext = gm->outer_ext[o];
        if (stride < 0 || ext < 1)
            break;
        if (stride > 0) {
            if (nshifts * (size_t)ext > S_BT_PACK_MAX_SHIFTS)
                break;
            size_t n = 0;
            for (int64_t i = 0; i < ext; i++)
                for (size_t q = 0; q < nshifts; q++)
                    grown[n++] = shifts[q] + i * stride;
            qsort(grown, n, sizeof grown[0], s_int64_cmp);
            size_t d = 0;
            for (size_t q = 0; q < n; q++)
                if (d == 0 || grown[q] != grown[d - 1])
                    grown[d++] = grown[q];
            bool gap = false;
            for (size_t q = 1; q < d; q++)
                gap = gap || grown[q] - grown[q - 1] > gm->k;
            if (gap || grown[d - 1] + gm->k > gm->b.ld)
                break;
            memcpy(shifts, grown, d * sizeof shifts[0]);
            nshifts = d;
        }
        calls *= ext;
        if (calls * gm->k > shifts[nshifts - 1] + gm->k)
            pk = (s_bt_pack_t){o, shifts[nshifts - 1] + gm->k, calls};
    }
    return pk;
}

/* One batch-reduce call for the calls of a product's innermost outer loops that accumulate
 * into one block (compiler/gemm.h, merged loops): when the loops from outer_syms[first] on
 * leave C's address unchanged (a K loop each: a convolution's forward summing its kernel
 * offsets into a sample's output, docs/trainer.md "Convolution lowering"), the product is
 * single precision, untransposed, accumulating (beta = 1) with no epilogue, and A and B move
 * by strides >= 0, those calls become troupe_sbrgemm(m, n, k, calls, A, lda, a_offs, B, ldb,
 * b_offs, C, ldc) once per iteration of the loops outside them, the element offsets listed in
 * the calls' order (a static table), with the loops of calls kept for when the hook is missing
 * or declines (devices/host/gemm_library.h, troupe_sbrgemm_fn: the same sums in the same
 * order, bit for bit). Measured about 5 % faster than the separate calls on conv2's forward
 * and 8 % on conv3's (libxsmm 1.17, one core): each call no longer reloads and stores the
 * output block. */
typedef struct s_brgemm {
    int first;     /* the outermost loop of the batch; gm->nouter when none */
    int64_t calls; /* calls per batch */
} s_brgemm_t;

/* Most calls one batch-reduce call takes (devices/host/gemm_library.h,
 * TROUPE_SBRGEMM_MAX_COUNT). */
#define S_BRGEMM_MAX_COUNT 1024

static s_brgemm_t s_gemm_brgemm(const troupe_gemm_t *gm, const troupe_gemm_epilogue_t *ep)
{
    s_brgemm_t br = {gm->nouter, 1};
    if (gm->prec != TROUPE_PREC_SINGLE || gm->factor_prec != TROUPE_PREC_SINGLE ||
        gm->a.trans || gm->b.trans || ep->beta_zero || ep->init != NULL || ep->post != NULL ||
        gm->c.tn == gm->a.tn || gm->c.tn == gm->b.tn)
        return br;
    int64_t calls = 1;
    for (int o = gm->nouter - 1; o >= 0; o--) {
        int32_t sym = gm->outer_syms[o];
        if (troupe_gemm_sym_stride(gm->c.tn, gm->c.idcs, sym) != 0 ||
            troupe_gemm_sym_stride(gm->a.tn, gm->a.idcs, sym) < 0 ||
            troupe_gemm_sym_stride(gm->b.tn, gm->b.idcs, sym) < 0 || gm->outer_ext[o] < 1 ||
            calls * gm->outer_ext[o] > S_BRGEMM_MAX_COUNT)
            break;
        calls *= gm->outer_ext[o];
        if (calls >= 2)
            br = (s_brgemm_t){o, calls};
    }
    /* the zeroing and the pass per iteration of the outermost loop stay outside the batch */
    if (br.first == 0 && (ep->zero_slice > 0 || ep->init_slice != NULL || ep->slice_post != NULL))
        br = (s_brgemm_t){gm->nouter, 1};
    return br;
}

/* The batch's offsets table for operand o, in the calls' order (loop first outermost). */
static void s_put_brgemm_offsets(troupe__strbuf_t *out, const troupe_gemm_t *gm,
                                 const troupe_gemm_operand_t *o, const s_brgemm_t *br)
{
    for (int64_t t = 0; t < br->calls; t++) {
        int64_t rest = t, off = 0;
        for (int q = gm->nouter - 1; q >= br->first; q--) {
            off += (rest % gm->outer_ext[q]) *
                   troupe_gemm_sym_stride(o->tn, o->idcs, gm->outer_syms[q]);
            rest /= gm->outer_ext[q];
        }
        troupe__strbuf_printf(out, "%s%" PRId64, t == 0 ? "" : ", ", off);
    }
}

#define S_GEMM_UNROLL 8 /* reduction steps per load and store of an output element */

/* Most bytes of the output one row panel of a product with an epilogue covers: the library
 * call writes a panel, and the epilogue passes over it right after, while it is still in L2
 * (256 KiB: a quarter of the smallest L2 of the x86 cores troupe targets, 1 MiB, leaving room
 * for the epilogue's other output and the factors' panels). Rows per panel: that many bytes of
 * output rows, rounded down to a multiple of 8 (the libraries' row blocking), at least 1. */
#define S_GEMM_PANEL_BYTES ((int64_t)256 << 10)

static int64_t s_gemm_panel_rows(const troupe_gemm_t *gm)
{
    int64_t row_bytes = gm->c.ld * (int64_t)troupe_prec_size_bytes(gm->prec);
    int64_t r = S_GEMM_PANEL_BYTES / (row_bytes > 0 ? row_bytes : 1);
    if (r >= 8)
        r -= r % 8;
    if (r < 1)
        r = 1;
    return r < gm->m ? r : gm->m;
}

/* The library entry's letter: s, d, b (bfloat16 factors), h (half factors). */
static char s_gemm_letter(const troupe_gemm_t *gm)
{
    if (gm->factor_prec == TROUPE_PREC_BFLOAT16)
        return 'b';
    if (gm->factor_prec == TROUPE_PREC_HALF)
        return 'h';
    return gm->prec == TROUPE_PREC_SINGLE ? 's' : 'd';
}

/* The loops of a recognised product when no library runs it, over rows row0 <= g_i < row1 (C
 * expressions): rows outermost, the reduction
 * S_GEMM_UNROLL steps at a time around the unit-stride column loop, so that each output element
 * is loaded and stored once per S_GEMM_UNROLL multiply-adds and kept in a register between them
 * (unroll and jam; 8 measured 1.6x faster than 4 and 1.7x than the plain nest, bench_matmul).
 * Every element still accumulates its k terms in ascending order with the same operation (fma,
 * or an add of a rounded product), so the results are bit for bit those of the plain loop nest
 * and the interpreter. */
static void s_emit_gemm_loops(s_gen_t *g, const troupe_gemm_t *gm, const char *row0,
                              const char *row1, int indent, troupe__strbuf_t *out)
{
    const char *t = gm->prec == TROUPE_PREC_SINGLE ? "float" : "double";
    const char *f = gm->prec == TROUPE_PREC_SINGLE ? "fmaf" : "fma";
    /* bfloat16 or half factors: read widened to single, exactly (the interpreter's
     * conversion) */
    bool bf16 = gm->factor_prec == TROUPE_PREC_BFLOAT16, half = gm->factor_prec == TROUPE_PREC_HALF;
    const char *ft = bf16 || half ? "uint16_t" : t;
    const char *cv = bf16 ? "troupe_bfloat16_to_single(" : half ? "troupe_half_to_single(" : "(";
    char a_at[S_GEMM_UNROLL][128], b_at[S_GEMM_UNROLL][128];
    for (int u = 0; u < S_GEMM_UNROLL; u++) {
        /* op(A)[g_i, g_k + u] and op(B)[g_k + u, g_j] */
        if (gm->a.trans)
            snprintf(a_at[u], sizeof a_at[u], "%sg_a[(g_k + %d) * %" PRId64 " + g_i])", cv, u,
                     gm->a.ld);
        else
            snprintf(a_at[u], sizeof a_at[u], "%sg_a[g_i * %" PRId64 " + g_k + %d])", cv,
                     gm->a.ld, u);
        if (gm->b.trans)
            snprintf(b_at[u], sizeof b_at[u], "%sg_b[g_j * %" PRId64 " + g_k + %d])", cv,
                     gm->b.ld, u);
        else
            snprintf(b_at[u], sizeof b_at[u], "%sg_b[(g_k + %d) * %" PRId64 " + g_j])", cv, u,
                     gm->b.ld);
    }
    int in = indent;
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_printf(out, "const %s *g_a = ", ft);
    s_put_gemm_base(g, out, gm, &gm->a);
    troupe__strbuf_printf(out, ";\n");
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_printf(out, "const %s *g_b = ", ft);
    s_put_gemm_base(g, out, gm, &gm->b);
    troupe__strbuf_printf(out, ";\n");
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_printf(out, "%s *g_c = ", t);
    s_put_gemm_base(g, out, gm, &gm->c);
    troupe__strbuf_printf(out, ";\n");
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_printf(out, "for (int64_t g_i = %s; g_i < %s; ++g_i) {\n", row0, row1);
    troupe__strbuf_repeat(out, "    ", in + 1);
    troupe__strbuf_puts(out, "int64_t g_k = 0;\n");
    for (int pass = 0; pass < 2; pass++) { /* by S_GEMM_UNROLL, then one by one */
        int nu = pass == 0 ? S_GEMM_UNROLL : 1;
        troupe__strbuf_repeat(out, "    ", in + 1);
        if (pass == 0)
            troupe__strbuf_printf(out, "for (; g_k + %d <= %" PRId64 "; g_k += %d) {\n",
                                  S_GEMM_UNROLL, gm->k, S_GEMM_UNROLL);
        else
            troupe__strbuf_printf(out, "for (; g_k < %" PRId64 "; ++g_k) {\n", gm->k);
        for (int u = 0; u < nu; u++) {
            troupe__strbuf_repeat(out, "    ", in + 2);
            troupe__strbuf_printf(out, "const %s g_a%d = %s;\n", t, u, a_at[u]);
        }
        troupe__strbuf_repeat(out, "    ", in + 2);
        troupe__strbuf_printf(out, "for (int64_t g_j = 0; g_j < %" PRId64 "; ++g_j) {\n", gm->n);
        troupe__strbuf_repeat(out, "    ", in + 3);
        troupe__strbuf_printf(out, "%s g_v = g_c[g_i * %" PRId64 " + g_j];\n", t, gm->c.ld);
        for (int u = 0; u < nu; u++) {
            troupe__strbuf_repeat(out, "    ", in + 3);
            if (gm->fma)
                troupe__strbuf_printf(out, "g_v = %s(g_a%d, %s, g_v);\n", f, u, b_at[u]);
            else
                troupe__strbuf_printf(out, "g_v = g_v + g_a%d * %s;\n", u, b_at[u]);
        }
        troupe__strbuf_repeat(out, "    ", in + 3);
        troupe__strbuf_printf(out, "g_c[g_i * %" PRId64 " + g_j] = g_v;\n", gm->c.ld);
        troupe__strbuf_repeat(out, "    ", in + 2);
        troupe__strbuf_puts(out, "}\n");
        troupe__strbuf_repeat(out, "    ", in + 1);
        troupe__strbuf_puts(out, "}\n");
    }
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_puts(out, "}\n");
}

/* An epilogue nest (compiler/gemm.h: init or post) over the panel's rows g_p <= i < g_p + g_pm,
 * rows outermost and the unit-stride columns inside (a vectorisable pass over the panel), its
 * statement as written: the same operations per element as the unfused nest. */
static troupe_status_t s_emit_panel_nest(s_gen_t *g, const troupe_gemm_t *gm,
                                         const troupe_ll_t *nest, int32_t sym_m, int32_t sym_n,
                                         int indent, troupe__strbuf_t *out)
{
    const troupe_ll_t *set = nest->u.for_loop.body->u.for_loop.body;
    const char *i = g->syms[sym_m], *j = g->syms[sym_n];
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "for (int64_t %s = g_p; %s < g_p + g_pm; ++%s) {\n", i, i, i);
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out, "for (int64_t %s = 0; %s < %" PRId64 "; ++%s) {\n", j, j, gm->n,
                          j);
    s_range_t saved_m = g->ranges[sym_m], saved_n = g->ranges[sym_n];
    g->ranges[sym_m] = (s_range_t){true, 0, gm->m - 1};
    g->ranges[sym_n] = (s_range_t){true, 0, gm->n - 1};
    troupe_status_t st = s_emit_ll(g, set, indent + 2, out);
    g->ranges[sym_m] = saved_m;
    g->ranges[sym_n] = saved_n;
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_puts(out, "}\n");
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
    return st;
}

/* The library call (through the hook the loader sets) for rows g_p.. of the product when
 * `panel`, else for all of it; with `pk`, the untransposed call on the pack g_bt (s_bt_pack_t). */
static void s_emit_gemm_call(s_gen_t *g, const troupe_gemm_t *gm, bool beta_zero, bool panel,
                             const s_bt_pack_t *pk, int indent, troupe__strbuf_t *out)
{
    bool single = gm->prec == TROUPE_PREC_SINGLE;
    /* troupe_bgemm, troupe_hgemm: no alpha */
    bool bf16 = gm->factor_prec == TROUPE_PREC_BFLOAT16, half = gm->factor_prec == TROUPE_PREC_HALF;
    const char *one = single ? "1.0f" : "1.0", *beta = beta_zero ? (single ? "0.0f" : "0.0") : one;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "troupe_%cgemm(%d, %d, ", s_gemm_letter(gm), gm->a.trans ? 1 : 0,
                          gm->b.trans && pk == NULL ? 1 : 0);
    if (panel)
        troupe__strbuf_puts(out, "g_pm");
    else
        troupe__strbuf_printf(out, "%" PRId64, gm->m);
    troupe__strbuf_printf(out, ", %" PRId64 ", %" PRId64 ", ", gm->n, gm->k);
    if (!bf16 && !half)
        troupe__strbuf_printf(out, "%s, ", one);
    s_put_gemm_base(g, out, gm, &gm->a);
    if (panel) /* row g_p of op(A) */
        troupe__strbuf_printf(out, " + g_p * %" PRId64, gm->a.trans ? (int64_t)1 : gm->a.ld);
    troupe__strbuf_printf(out, ", %" PRId64 ", ", gm->a.ld);
    if (pk != NULL) { /* g_bt + (the call's shift) * n */
        troupe__strbuf_puts(out, "g_bt");
        bool any = false;
        for (int o = pk->first; o < gm->nouter; o++) {
            int64_t st = troupe_gemm_sym_stride(gm->b.tn, gm->b.idcs, gm->outer_syms[o]);
            if (st == 1)
                troupe__strbuf_printf(out, "%s%s", any ? " + " : " + (",
                                      g->syms[gm->outer_syms[o]]);
            else if (st != 0)
                troupe__strbuf_printf(out, "%s%" PRId64 "*%s", any ? " + " : " + (", st,
                                      g->syms[gm->outer_syms[o]]);
            any = any || st != 0;
        }
        if (any)
            troupe__strbuf_printf(out, ") * %" PRId64, gm->n);
    } else {
        s_put_gemm_base(g, out, gm, &gm->b);
    }
    troupe__strbuf_printf(out, ", %" PRId64 ", %s, ", pk != NULL ? gm->n : gm->b.ld, beta);
    s_put_gemm_base(g, out, gm, &gm->c);
    if (panel)
        troupe__strbuf_printf(out, " + g_p * %" PRId64, gm->c.ld);
    troupe__strbuf_printf(out, ", %" PRId64 ");\n", gm->c.ld);
}

/* A contraction the GEMM library takes becomes a call through the hook the loader sets, with
 * the generated loops kept for when no library is there (TROUPE_GEMM=generated, a build
 * without one): compiler/gemm.h. With c_gemm_library_only (the loader always sets the hooks)
 * the loops are left out: only the call. With ep->beta_zero (a ZERO_OUT of the output just
 * before, the product writing the whole output) the call overwrites it (beta = 0) and the
 * zeroing runs only on the loops' side. With ep->zero_slice the outermost loop of accumulating
 * calls zeroes its slice first, on both sides; with ep->init_slice it runs its slice of the initial
 * values first. With an epilogue (ep->init, ep->post) the product runs in row panels
 * (s_gemm_panel_rows), each panel's initial values, product and post pass one after the other on
 * either side: issue 14's fused epilogue. */
static troupe_status_t s_emit_gemm_body(s_gen_t *g, const troupe_gemm_t *gm,
                                        const troupe_gemm_epilogue_t *ep, const s_bt_pack_t *pk,
                                        int indent, troupe__strbuf_t *out);

/* A slice nest inside the outermost loop of calls, before them (troupe_gemm_init_slice) or after
 * them (troupe_gemm_slice_post): its own outermost loop's body, that loop's symbol printed as the
 * calls' loop's. */
static troupe_status_t s_emit_slice_nest(s_gen_t *g, const troupe_gemm_t *gm,
                                         const troupe_ll_t *nest, const char *what, int indent,
                                         troupe__strbuf_t *out)
{
    int32_t sym = nest->u.for_loop.sym;
    char saved_name[S_IDENT_CAP], outer_name[S_IDENT_CAP];
    memcpy(saved_name, g->syms[sym], S_IDENT_CAP);
    memcpy(outer_name, g->syms[gm->outer_syms[0]], S_IDENT_CAP);
    memcpy(g->syms[sym], outer_name, S_IDENT_CAP);
    s_range_t saved = g->ranges[sym];
    g->ranges[sym] = (s_range_t){true, 0, gm->outer_ext[0] - 1};
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "/* %s, over this iteration's slice */\n", what);
    troupe_status_t st = s_emit_ll(g, nest->u.for_loop.body, indent, out);
    g->ranges[sym] = saved;
    memcpy(g->syms[sym], saved_name, S_IDENT_CAP);
    return st;
}

/* The product inside its outer loops (compiler/gemm.h, merged loops: a loop of calls, each
 * writing its own block of the output or accumulating into the same one), then the body. */
static troupe_status_t s_emit_gemm(s_gen_t *g, const troupe_gemm_t *gm,
                                   const troupe_gemm_epilogue_t *ep, int indent,
                                   troupe__strbuf_t *out)
{
    s_range_t saved[TROUPE_GEMM_MAX_LOOPS];
    const s_bt_pack_t pk = s_gemm_bt_pack(gm, ep);
    const bool packs = pk.first < gm->nouter;
    const s_brgemm_t br = s_gemm_brgemm(gm, ep);
    const bool batches = br.first < gm->nouter; /* never with packs: B^T there, B here */
    for (int o = 0; o < gm->nouter; o++) {
        int32_t sym = gm->outer_syms[o];
        int in = indent + o + (packs && o > pk.first) + (batches && o > br.first ? 2 : 0);
        if (batches && o == br.first) { /* the batch call, the loops of calls its fallback */
            g->uses_brgemm = true;
            TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_IR,
                       "cgen of %s: the %" PRId64 " calls into %s of the innermost loops "
                       "accumulate into one block: one batch-reduce call",
                       g->proc->name, br.calls, s_info(g, gm->c.tn)->ident);
            troupe__strbuf_repeat(out, "    ", in);
            troupe__strbuf_printf(out, "{ /* one batch-reduce call for the %" PRId64
                                       " calls inside */\n", br.calls);
            troupe__strbuf_repeat(out, "    ", in + 1);
            troupe__strbuf_printf(out, "static const int64_t g_ao[%" PRId64 "] = {", br.calls);
            s_put_brgemm_offsets(out, gm, &gm->a, &br);
            troupe__strbuf_puts(out, "};\n");
            troupe__strbuf_repeat(out, "    ", in + 1);
            troupe__strbuf_printf(out, "static const int64_t g_bo[%" PRId64 "] = {", br.calls);
            s_put_brgemm_offsets(out, gm, &gm->b, &br);
            troupe__strbuf_puts(out, "};\n");
            troupe__strbuf_repeat(out, "    ", in + 1);
            troupe__strbuf_printf(out,
                                  "if (troupe_sbrgemm == 0 || troupe_sgemm == 0 || "
                                  "!troupe_sbrgemm(%" PRId64 ", %" PRId64 ", %" PRId64
                                  ", %" PRId64 ", ",
                                  gm->m, gm->n, gm->k, br.calls);
            s_put_gemm_base_from(g, out, gm, &gm->a, br.first);
            troupe__strbuf_printf(out, ", %" PRId64 ", g_ao, ", gm->a.ld);
            s_put_gemm_base_from(g, out, gm, &gm->b, br.first);
            troupe__strbuf_printf(out, ", %" PRId64 ", g_bo, ", gm->b.ld);
            s_put_gemm_base_from(g, out, gm, &gm->c, br.first);
            troupe__strbuf_printf(out, ", %" PRId64 ")) {\n", gm->c.ld);
            in += 2;
        }
        if (packs && o == pk.first) { /* the pack, in a block of its own */
            g->uses_spack = true;
            troupe__strbuf_repeat(out, "    ", in);
            troupe__strbuf_printf(out, "{ /* B^T packed once for the %" PRId64 " calls inside */\n",
                                  pk.calls);
            troupe__strbuf_repeat(out, "    ", in + 1);
            troupe__strbuf_printf(out,
                                  "const float *g_bt = troupe_spack_bt != 0 && troupe_sgemm != 0"
                                  " ? troupe_spack_bt(%" PRId64 ", %" PRId64 ", %" PRId64
                                  ", %" PRId64 ", %" PRId64 ", ",
                                  gm->m, gm->n, gm->k, pk.kext, gm->a.ld);
            s_put_gemm_base_from(g, out, gm, &gm->b, pk.first);
            troupe__strbuf_printf(out, ", %" PRId64 ", %s, %" PRId64 ") : 0;\n", gm->b.ld,
                                  ep->beta_zero ? "0.0f" : "1.0f", gm->c.ld);
            in++;
        }
        troupe__strbuf_repeat(out, "    ", in);
        troupe__strbuf_printf(out,
                              "for (int64_t %s = 0; %s < %" PRId64 "; ++%s) { /* a call each */\n",
                              g->syms[sym], g->syms[sym], gm->outer_ext[o], g->syms[sym]);
        saved[o] = g->ranges[sym];
        g->ranges[sym] = (s_range_t){true, 0, gm->outer_ext[o] - 1};
        if (o == 0 && ep->zero_slice > 0) { /* this iteration's slice, before its calls */
            troupe__strbuf_repeat(out, "    ", in + 1);
            troupe__strbuf_printf(out,
                                  "for (int64_t zi = 0; zi < %" PRId64 "; ++zi) %s[%" PRId64
                                  "*%s + zi] = 0; /* this iteration's slice */\n",
                                  ep->zero_slice, s_info(g, gm->c.tn)->ident, ep->zero_slice,
                                  g->syms[sym]);
        }
        if (o == 0 && ep->init_slice != NULL) { /* this iteration's initial values, likewise */
            troupe_status_t ist =
                s_emit_slice_nest(g, gm, ep->init_slice, "the initial values", in + 1, out);
            if (ist != TROUPE_OK) {
                g->ranges[sym] = saved[o];
                return ist;
            }
        }
    }
    troupe_status_t st = s_emit_gemm_body(g, gm, ep, packs ? &pk : NULL,
                                          indent + gm->nouter + packs + (batches ? 2 : 0), out);
    for (int o = gm->nouter - 1; o >= 0; o--) {
        if (o == 0 && ep->slice_post != NULL && st == TROUPE_OK)
            st = s_emit_slice_nest(g, gm, ep->slice_post, "the pass after the calls",
                                   indent + 1 + (packs && pk.first == 0), out);
        g->ranges[gm->outer_syms[o]] = saved[o];
        int in = indent + o + (packs && o > pk.first) + (batches && o >= br.first ? 2 : 0);
        troupe__strbuf_repeat(out, "    ", in);
        troupe__strbuf_puts(out, "}\n");
        if (packs && o == pk.first) {
            troupe__strbuf_repeat(out, "    ", in - 1);
            troupe__strbuf_puts(out, "}\n");
        }
        if (batches && o == br.first) {
            troupe__strbuf_repeat(out, "    ", in - 1);
            troupe__strbuf_puts(out, "}\n");
            troupe__strbuf_repeat(out, "    ", in - 2);
            troupe__strbuf_puts(out, "}\n");
        }
    }
    return st;
}

/* After a product's call (and its loops): the epilogue's post pass, and the end of the row
 * panel's loop. `st` is the status so far. */
static troupe_status_t s_emit_gemm_tail(s_gen_t *g, const troupe_gemm_t *gm,
                                        const troupe_gemm_epilogue_t *ep, bool panel, int indent,
                                        int in, troupe__strbuf_t *out, troupe_status_t st)
{
    if (st == TROUPE_OK && ep->post != NULL)
        st = s_emit_panel_nest(g, gm, ep->post, ep->post_sym_m, ep->post_sym_n, in, out);
    if (panel) {
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_puts(out, "}\n");
    }
    return st;
}

static troupe_status_t s_emit_gemm_body(s_gen_t *g, const troupe_gemm_t *gm,
                                        const troupe_gemm_epilogue_t *ep, const s_bt_pack_t *pk,
                                        int indent, troupe__strbuf_t *out)
{
    bool single = gm->prec == TROUPE_PREC_SINGLE;
    bool panel = ep->init != NULL || ep->post != NULL;
    int64_t rows = panel ? s_gemm_panel_rows(gm) : gm->m;
    g->uses_gemm = true;
    g->uses_bgemm = g->uses_bgemm || gm->factor_prec == TROUPE_PREC_BFLOAT16;
    g->uses_hgemm = g->uses_hgemm || gm->factor_prec == TROUPE_PREC_HALF;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_IR,
               "cgen of %s: %s %s %s%s x %s%s (m=%" PRId64 " n=%" PRId64 " k=%" PRId64
               ") calls the GEMM library%s%s%s%s%s%s%s%s%s",
               g->proc->name, s_info(g, gm->c.tn)->ident,
               ep->beta_zero ? "=" : "+=", s_info(g, gm->a.tn)->ident, gm->a.trans ? "^T" : "",
               s_info(g, gm->b.tn)->ident, gm->b.trans ? "^T" : "", gm->m, gm->n, gm->k,
               panel ? ", with its epilogue:" : "",
               ep->bias != NULL ? (ep->bias_in_init ? " starts from bias " : " adds bias ") : "",
               ep->bias != NULL ? s_info(g, ep->bias)->ident : "",
               ep->bias != NULL ? (ep->bias_axis == TROUPE_GEMM_BIAS_N ? "[j]" : "[i]") : "",
               ep->relu ? " relu into " : (ep->post != NULL ? " into " : ""),
               ep->post != NULL ? s_info(g, ep->d)->ident : "",
               panel ? (rows < gm->m ? ", in row panels" : ", one panel") : "",
               gm->nouter > 0 ? ", once per iteration of the loops around it" : "",
               pk != NULL ? ", B^T packed once for the calls of the innermost loops" : "");
    int in = indent;
    if (panel) {
        troupe__strbuf_repeat(out, "    ", in);
        troupe__strbuf_printf(out,
                              "for (int64_t g_p = 0; g_p < %" PRId64 "; g_p += %" PRId64
                              ") { /* row panels of <= %" PRId64 " bytes of output */\n",
                              gm->m, rows, S_GEMM_PANEL_BYTES);
        troupe__strbuf_repeat(out, "    ", in + 1);
        troupe__strbuf_printf(out,
                              "const int64_t g_pm = %" PRId64 " - g_p < %" PRId64 " ? %" PRId64
                              " - g_p : %" PRId64 ";\n",
                              gm->m, rows, gm->m, rows);
        in++;
    }
    troupe_status_t st = TROUPE_OK;
    if (ep->init != NULL)
        st = s_emit_panel_nest(g, gm, ep->init, ep->init_sym_m, ep->init_sym_n, in, out);
    troupe__strbuf_repeat(out, "    ", in);
    if (pk != NULL) { /* not panel: s_gemm_bt_pack wants no epilogue */
        troupe__strbuf_puts(out, "if (g_bt != 0) {\n");
        s_emit_gemm_call(g, gm, ep->beta_zero, false, pk, in + 1, out);
        troupe__strbuf_repeat(out, "    ", in);
        troupe__strbuf_puts(out, "} else ");
    }
    troupe__strbuf_printf(out, "if (troupe_%cgemm != 0) {\n", s_gemm_letter(gm));
    s_emit_gemm_call(g, gm, ep->beta_zero, panel, NULL, in + 1, out);
    troupe__strbuf_repeat(out, "    ", in);
    if (g->opts.c_gemm_library_only) { /* the loader guarantees the hooks: no loops */
        troupe__strbuf_puts(out, "}\n");
        return s_emit_gemm_tail(g, gm, ep, panel, indent, in, out, st);
    }
    troupe__strbuf_puts(out, "} else {\n");
    if (ep->beta_zero && panel) { /* the panel's rows of the whole m x n output */
        troupe__strbuf_repeat(out, "    ", in + 1);
        troupe__strbuf_printf(out,
                              "for (int64_t zi = g_p * %" PRId64 "; zi < (g_p + g_pm) * %" PRId64
                              "; ++zi) %s[zi] = 0;\n",
                              gm->n, gm->n, s_info(g, gm->c.tn)->ident);
    } else if (ep->beta_zero) { /* the call's m x n block (the whole output, or one of the
                                   blocks the outer loops tile it with) */
        troupe__strbuf_repeat(out, "    ", in + 1);
        troupe__strbuf_printf(out, "%s *g_z = ", single ? "float" : "double");
        s_put_gemm_base(g, out, gm, &gm->c);
        troupe__strbuf_printf(out, ";\n");
        troupe__strbuf_repeat(out, "    ", in + 1);
        troupe__strbuf_printf(out, "for (int64_t zi = 0; zi < %" PRId64 "; ++zi) g_z[zi] = 0;\n",
                              gm->m * gm->n);
    }
    char row1[32];
    snprintf(row1, sizeof row1, "%" PRId64, gm->m);
    s_emit_gemm_loops(g, gm, panel ? "g_p" : "0", panel ? "g_p + g_pm" : row1, in + 1, out);
    troupe__strbuf_repeat(out, "    ", in);
    troupe__strbuf_puts(out, "}\n");
    return s_emit_gemm_tail(g, gm, ep, panel, indent, in, out, st);
}

/* "cgen of <proc>: the <what> into <c> <fate>: <why>" at debug:ir. */
static void s_log_refused(s_gen_t *g, const troupe_tnode_t *c, const char *what,
                          const char *fate, const char *why)
{
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_IR, "cgen of %s: the %s into %s %s: %s",
               g->proc->name, what, s_info(g, c)->ident, fate, why);
}

/* A FOR that is a product on its own (no statements beside it: inside a batch loop). */
static troupe_status_t s_emit_gemm_or_for(s_gen_t *g, const troupe_ll_t *s, int indent,
                                          troupe__strbuf_t *out)
{
    troupe_gemm_t gm;
    const char *why = NULL;
    troupe_gemm_verdict_t v = troupe_gemm_match(s, &gm, &why);
    if (v == TROUPE_GEMM_REFUSED)
        s_log_refused(g, gm.c.tn, "contraction", "stays generated loops", why);
    if (v != TROUPE_GEMM_YES)
        return s_emit_for(g, s, indent, out);
    troupe_gemm_epilogue_t none;
    memset(&none, 0, sizeof none);
    none.beta_zero = g->beta_zero_c == gm.c.tn;
    return s_emit_gemm(g, &gm, &none, indent, out);
}

/* Whether ZERO_OUT z is followed by s, a perfect nest of batch loops (from 0, each moving all
 * three operands) around one product into z's node that has no outer loops of its own, whose
 * m x n blocks (ldc = n) the batch loops step so that they tile the node: the attention's
 * products per (batch, head). Then each call overwrites its block (beta = 0) and the zeroing
 * goes, as troupe_gemm_covers_output allows for a product's own loops. */
bool troupe__cgen_batched_zero(const troupe_ll_t *z, const troupe_ll_t *s)
{
    const troupe_tnode_t *c = z->u.zero_out;
    int32_t bsym[TROUPE_GEMM_MAX_LOOPS];
    int64_t bext[TROUPE_GEMM_MAX_LOOPS];
    int nb = 0;
    troupe_gemm_t gm;
    for (;;) {
        const char *why = NULL;
        if (s->kind != TROUPE_LL_FOR || s->u.for_loop.from != 0 || s->u.for_loop.to < 0)
            return false;
        if (troupe_gemm_match(s, &gm, &why) == TROUPE_GEMM_YES)
            break;
        if (nb == TROUPE_GEMM_MAX_LOOPS || s->u.for_loop.body->kind != TROUPE_LL_FOR)
            return false;
        bsym[nb] = s->u.for_loop.sym;
        bext[nb++] = s->u.for_loop.to + 1;
        s = s->u.for_loop.body;
    }
    if (nb == 0 || gm.c.tn != c || gm.nouter != 0 || gm.c.ld != gm.n)
        return false;
    for (int ax = 0; ax < c->ndims; ax++) { /* only the product's and the batch's iterators */
        const troupe_axis_index_t *x = &gm.c.idcs[ax];
        if (x->offset != 0)
            return false;
        for (int t = 0; t < x->nterms; t++) {
            bool found = troupe_gemm_has_sym(&gm, x->terms[t].sym);
            for (int o = 0; o < nb && !found; o++)
                found = bsym[o] == x->terms[t].sym;
            if (!found)
                return false;
        }
    }
    int64_t block = gm.m * gm.n;
    bool used[TROUPE_GEMM_MAX_LOOPS] = {false};
    for (int placed = 0; placed < nb; placed++) { /* each batch loop steps by the block so far */
        int next = -1;
        for (int o = 0; o < nb && next < 0; o++)
            if (!used[o] && bext[o] > 1 && troupe_gemm_sym_stride(c, gm.c.idcs, bsym[o]) == block)
                next = o;
        for (int o = 0; o < nb && next < 0; o++)
            if (!used[o] && bext[o] == 1)
                next = o;
        if (next < 0)
            return false; /* a batch loop revisits a block, or leaves gaps */
        used[next] = true;
        block *= bext[next];
    }
    return block == troupe_tnode_num_elems(c);
}

bool troupe__cgen_flatten(const troupe_ll_t *s, const troupe_ll_t ***v, size_t *n, size_t *cap)
{
    if (s->kind == TROUPE_LL_NOOP)
        return true;
    if (s->kind != TROUPE_LL_SEQ)
        return TROUPE__VEC_PUSH(*v, *n, *cap, s);
    for (size_t i = 0; i < s->u.seq.count; i++)
        if (!troupe__cgen_flatten(s->u.seq.items[i], v, n, cap))
            return false;
    return true;
}

/* Fewest statements of a constant run (s_const_run) emitted as a table. */
#define S_CONST_RUN_MIN 64

/* The flat offset of SET s into its node when every index is a constant, else -1. */
static int64_t s_const_offset(const troupe_ll_t *s)
{
    const troupe_tnode_t *tn = s->u.set.tn;
    int64_t off = 0, stride = 1;
    for (int ax = tn->ndims - 1; ax >= 0; ax--) {
        const troupe_axis_index_t *x = &s->u.set.idcs[ax];
        if (x->nterms != 0 || x->offset < 0 || x->offset >= tn->dims[ax])
            return -1;
        off += x->offset * stride;
        stride *= tn->dims[ax];
    }
    return off;
}

/* The length of the run of statements items[at..] (C dialect) that set consecutive cells of
 * one single or double node to constants, each cell once, in ascending order (a constant
 * fill: OCANNL's Fetch constant_fill lowers to one SET per cell, T*T of them for a causal
 * mask); 0 when shorter than S_CONST_RUN_MIN. */
static size_t s_const_run(const s_gen_t *g, const troupe_ll_t *const *items, size_t n,
                          size_t at)
{
    if (g->target != &troupe__cgen_target_c)
        return 0;
    const troupe_ll_t *first = items[at];
    if (first->kind != TROUPE_LL_SET || first->u.set.value->kind != TROUPE_SC_CONSTANT)
        return 0;
    const troupe_tnode_t *tn = first->u.set.tn;
    if (tn->prec != TROUPE_PREC_SINGLE && tn->prec != TROUPE_PREC_DOUBLE)
        return 0;
    int64_t off0 = s_const_offset(first);
    if (off0 < 0)
        return 0;
    size_t len = 1;
    while (at + len < n) {
        const troupe_ll_t *s = items[at + len];
        if (s->kind != TROUPE_LL_SET || s->u.set.tn != tn ||
            s->u.set.value->kind != TROUPE_SC_CONSTANT ||
            s_const_offset(s) != off0 + (int64_t)len)
            break;
        len++;
    }
    return len >= S_CONST_RUN_MIN ? len : 0;
}

/* A run s_const_run found, as a static table copied into the node: the same values stored in
 * the same cells (each constant printed as its SET would print it), in a few lines of C
 * instead of one statement per cell, which GCC compiles in far less time and memory. */
static void s_emit_const_run(s_gen_t *g, const troupe_ll_t *const *items, size_t len,
                             int indent, troupe__strbuf_t *out)
{
    const troupe_tnode_t *tn = items[0]->u.set.tn;
    const char *type = tn->prec == TROUPE_PREC_SINGLE ? "float" : "double";
    const char *ident = s_info(g, tn)->ident;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "{ /* %zu constants into %s */\n", len, ident);
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out, "static const %s k_%s[%zu] = {", type, ident, len);
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) {
            troupe__strbuf_puts(out, "\n");
            troupe__strbuf_repeat(out, "    ", indent + 2);
        } else {
            troupe__strbuf_puts(out, " ");
        }
        s_put_constant(out, items[i]->u.set.value->u.constant, tn->prec);
        troupe__strbuf_puts(out, ",");
    }
    troupe__strbuf_puts(out, "\n");
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_puts(out, "};\n");
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out,
                          "for (int64_t ci = 0; ci < %zu; ++ci) %s[%" PRId64
                          " + ci] = k_%s[ci];\n",
                          len, ident, s_const_offset(items[0]), ident);
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
}

/* A SEQ on a target with the GEMM library: each product with what compiler/gemm.h's window
 * takes around it (zeroing or initial bias before, pointwise epilogue after) as one emission. */
static troupe_status_t s_emit_seq_gemm(s_gen_t *g, const troupe_ll_t *s, int indent,
                                       troupe__strbuf_t *out)
{
    const troupe_ll_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    if (!troupe__cgen_flatten(s, &items, &n, &cap))
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        const troupe_ll_t *it = items[i];
        size_t run = s_const_run(g, items, n, i);
        if (run > 0) {
            s_emit_const_run(g, items + i, run, indent, out);
            i += run - 1;
            continue;
        }
        if (it->kind == TROUPE_LL_FOR || it->kind == TROUPE_LL_ZERO_OUT) {
            troupe_gemm_t gm;
            troupe_gemm_epilogue_t ep;
            size_t used = 0;
            const char *why = NULL;
            troupe_gemm_verdict_t v = troupe_gemm_match_window(items, n, i, &gm, &ep, &used, &why);
            if (ep.refused != NULL)
                s_log_refused(g, gm.c.tn, "statement beside the product", "is not fused with it",
                              ep.refused);
            if (v == TROUPE_GEMM_YES) {
                st = s_emit_gemm(g, &gm, &ep, indent, out);
                if (ep.slice_post != NULL) /* the comments before it, then past it */
                    for (size_t j = i + used; j < i + ep.slice_post_at && st == TROUPE_OK; j++)
                        st = s_emit_ll(g, items[j], indent, out);
                i += (ep.slice_post != NULL ? ep.slice_post_at + 1 : used) - 1;
                continue;
            }
            if (it->kind == TROUPE_LL_ZERO_OUT && i + 1 < n &&
                troupe__cgen_batched_zero(it, items[i + 1])) {
                g->beta_zero_c = it->u.zero_out;
                st = s_emit_ll(g, items[i + 1], indent, out);
                g->beta_zero_c = NULL;
                i++;
                continue;
            }
        }
        st = s_emit_ll(g, it, indent, out); /* a refused product logs its reason here */
    }
    troupe_free(items);
    return st;
}

/* The index node's element of BIND_INDEX s: "<ident>[<offset>]". */
static void s_put_bind_read(s_gen_t *g, troupe__strbuf_t *out, const troupe_ll_t *s)
{
    const troupe_tnode_t *tn = s->u.bind_index.tn;
    troupe__strbuf_puts(out, s_info(g, tn)->ident);
    troupe__strbuf_puts(out, "[");
    s_put_offset(g, out, tn, s->u.bind_index.idcs);
    troupe__strbuf_puts(out, "]");
}

/* BIND_INDEX in the body: the symbol's value, already checked by the check pass. */
static troupe_status_t s_emit_bind(s_gen_t *g, const troupe_ll_t *s, int indent,
                                   troupe__strbuf_t *out)
{
    int32_t sym = s->u.bind_index.sym;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "{ /* gather index */\n");
    troupe__strbuf_repeat(out, "    ", indent + 1);
    troupe__strbuf_printf(out, "const int64_t %s = (int64_t)", g->syms[sym]);
    s_put_bind_read(g, out, s);
    troupe__strbuf_puts(out, ";\n");
    s_range_t saved = g->ranges[sym];
    g->ranges[sym] = (s_range_t){true, 0, s->u.bind_index.range - 1};
    troupe_status_t st = s_emit_ll(g, s->u.bind_index.body, indent + 1, out);
    g->ranges[sym] = saved;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_puts(out, "}\n");
    return st;
}

/* The check pass: the loops and binds leading to every BIND_INDEX, each bind's value checked
 * against its range; on a failure the error words are filled and the routine returns before
 * any write. */
static troupe_status_t s_emit_checks(s_gen_t *g, const troupe_ll_t *s, int indent,
                                     troupe__strbuf_t *out)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_emit_checks(g, s->u.seq.items[i], indent, out));
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        if (!troupe_ll_has_bind_index(s->u.for_loop.body))
            return TROUPE_OK;
        int32_t sym = s->u.for_loop.sym;
        const char *name = g->syms[sym];
        if (g->bound[sym]) /* the target defines it (a thread's index) */
            return s_emit_checks(g, s->u.for_loop.body, indent, out);
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_printf(out, "for (int64_t %s = %" PRId64 "; %s <= %" PRId64 "; ++%s) {\n",
                              name, s->u.for_loop.from, name, s->u.for_loop.to, name);
        s_range_t saved = g->ranges[sym];
        g->ranges[sym] = (s_range_t){true, s->u.for_loop.from, s->u.for_loop.to};
        troupe_status_t st = s_emit_checks(g, s->u.for_loop.body, indent + 1, out);
        g->ranges[sym] = saved;
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_puts(out, "}\n");
        return st;
    }
    case TROUPE_LL_BIND_INDEX: {
        const troupe_tnode_t *tn = s->u.bind_index.tn;
        int32_t sym = s->u.bind_index.sym;
        size_t no = s_gather_no(g, s);
        bool is_float = tn->prec == TROUPE_PREC_SINGLE || tn->prec == TROUPE_PREC_DOUBLE;
        int64_t range = s->u.bind_index.range;
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_printf(out, "{ /* check gather %zu */\n", no);
        troupe__strbuf_repeat(out, "    ", indent + 1);
        if (is_float) {
            troupe__strbuf_puts(out, "const double gv = (double)");
            s_put_bind_read(g, out, s);
            troupe__strbuf_puts(out, ";\n");
            troupe__strbuf_repeat(out, "    ", indent + 1);
            troupe__strbuf_printf(out,
                                  "if (!(gv >= 0.0 && gv < %" PRId64
                                  ".0) || gv != (double)(int64_t)gv) {\n",
                                  range);
        } else {
            troupe__strbuf_printf(out, "const %s graw = ", troupe_prec_c_type(tn->prec));
            s_put_bind_read(g, out, s);
            troupe__strbuf_puts(out, ";\n");
            troupe__strbuf_repeat(out, "    ", indent + 1);
            troupe__strbuf_puts(out, "const double gv = (double)graw;\n");
            troupe__strbuf_repeat(out, "    ", indent + 1);
            /* unsigned 64-bit values past INT64_MAX turn negative: out of range too */
            troupe__strbuf_printf(out, "if ((int64_t)graw < 0 || (int64_t)graw >= %" PRId64 ") {\n",
                                  range);
        }
        troupe__strbuf_repeat(out, "    ", indent + 2);
        troupe__strbuf_printf(out, "troupe_err[0] = %zu;\n", no);
        troupe__strbuf_repeat(out, "    ", indent + 2);
        troupe__strbuf_puts(out, "troupe_err[1] = (int64_t)troupe__f64_bits(gv);\n");
        for (int a = 0; a < tn->ndims; a++) {
            troupe__strbuf_repeat(out, "    ", indent + 2);
            troupe__strbuf_printf(out, "troupe_err[%d] = ", 2 + a);
            s_put_index(g, out, &s->u.bind_index.idcs[a]);
            troupe__strbuf_puts(out, ";\n");
        }
        troupe__strbuf_repeat(out, "    ", indent + 2);
        troupe__strbuf_puts(out, "return;\n");
        troupe__strbuf_repeat(out, "    ", indent + 1);
        troupe__strbuf_puts(out, "}\n");
        troupe_status_t st = TROUPE_OK;
        if (troupe_ll_has_bind_index(s->u.bind_index.body)) {
            troupe__strbuf_repeat(out, "    ", indent + 1);
            troupe__strbuf_printf(out, "const int64_t %s = (int64_t)gv;\n", g->syms[sym]);
            s_range_t saved = g->ranges[sym];
            g->ranges[sym] = (s_range_t){true, 0, range - 1};
            st = s_emit_checks(g, s->u.bind_index.body, indent + 1, out);
            g->ranges[sym] = saved;
        }
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_puts(out, "}\n");
        return st;
    }
    default:
        return TROUPE_OK;
    }
}

troupe_status_t troupe__cgen_emit_checks(troupe__cgen_t *g, const troupe_ll_t *s, int indent,
                                         troupe__strbuf_t *out)
{
    return s_emit_checks(g, s, indent, out);
}

size_t troupe__cgen_ngathers(const troupe__cgen_t *g)
{
    return g->nbinds;
}

/* What s_scalars does with the iteration scalars first written by a statement of a loop body. */
typedef enum { S_SCALARS_COUNT, S_SCALARS_DECLARE, S_SCALARS_CLOSE } s_scalars_do_t;

/* The iteration scalars whose first write is a statement of the loop body `body` (not inside a
 * loop nested in it, where none is: compiler/optimize.h step 4c): COUNT counts in *n those not
 * declared yet; DECLARE declares them into `out` ("T ident = 0;", the zero never read) and marks
 * them declared; CLOSE, when the block around the loop ends, marks them undeclared again (a loop
 * statement the procedure holds twice declares them in each block). */
static void s_scalars(s_gen_t *g, const troupe_ll_t *body, s_scalars_do_t what, int indent,
                      size_t *n, troupe__strbuf_t *out)
{
    if (body == NULL)
        return;
    if (body->kind == TROUPE_LL_SEQ) {
        for (size_t k = 0; k < body->u.seq.count; k++)
            s_scalars(g, body->u.seq.items[k], what, indent, n, out);
        return;
    }
    if (body->kind != TROUPE_LL_SET)
        return;
    s_node_info_t *info = s_info(g, body->u.set.tn);
    if (info == NULL || !info->is_scalar)
        return;
    if (what == S_SCALARS_CLOSE) {
        info->scalar_declared = false;
        return;
    }
    if (info->scalar_declared)
        return;
    (*n)++; /* a node set twice in the body counts twice: only "any?" is asked */
    if (what == S_SCALARS_COUNT)
        return;
    info->scalar_declared = info->scalar_emitted = true;
    troupe__strbuf_repeat(out, "    ", indent);
    troupe__strbuf_printf(out, "%s %s = 0; /* an iteration scalar */\n",
                          troupe_prec_c_type(body->u.set.tn->prec), info->ident);
}

static troupe_status_t s_emit_ll(s_gen_t *g, const troupe_ll_t *s, int indent,
                                 troupe__strbuf_t *out)
{
    switch (s->kind) {
    case TROUPE_LL_BIND_INDEX:
        return s_emit_bind(g, s, indent, out);
    case TROUPE_LL_NOOP:
        return TROUPE_OK;
    case TROUPE_LL_COMMENT:
        troupe__strbuf_repeat(out, "    ", indent);
        s_put_comment(out, s->u.comment);
        return TROUPE_OK;
    case TROUPE_LL_SEQ:
        if (g->target->gemm_library)
            return s_emit_seq_gemm(g, s, indent, out);
        for (size_t i = 0; i < s->u.seq.count; i++) {
            const troupe_ll_t *const *items = (const troupe_ll_t *const *)s->u.seq.items;
            size_t run = s_const_run(g, items, s->u.seq.count, i);
            if (run > 0) {
                s_emit_const_run(g, items + i, run, indent, out);
                i += run - 1;
                continue;
            }
            TROUPE_RETURN_IF_ERROR(s_emit_ll(g, s->u.seq.items[i], indent, out));
        }
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        /* the iteration scalars first written in this loop's body are declared around it */
        const troupe_ll_t *body = s->u.for_loop.body;
        size_t nscalars = 0;
        s_scalars(g, body, S_SCALARS_COUNT, indent + 1, &nscalars, NULL);
        if (nscalars > 0) {
            troupe__strbuf_repeat(out, "    ", indent);
            troupe__strbuf_puts(out, "{\n");
            s_scalars(g, body, S_SCALARS_DECLARE, indent + 1, &nscalars, out);
            indent++;
        }
        troupe_status_t st = g->target->gemm_library ? s_emit_gemm_or_for(g, s, indent, out)
                                                     : s_emit_for(g, s, indent, out);
        if (nscalars > 0) {
            s_scalars(g, body, S_SCALARS_CLOSE, indent, &nscalars, NULL);
            troupe__strbuf_repeat(out, "    ", indent - 1);
            troupe__strbuf_puts(out, "}\n");
        }
        return st;
    }
    case TROUPE_LL_ZERO_OUT: {
        const troupe_tnode_t *tn = s->u.zero_out;
        const s_node_info_t *info = s_info(g, tn);
        troupe__strbuf_repeat(out, "    ", indent);
        troupe__strbuf_printf(out, "for (int64_t zi = 0; zi < %" PRId64 "; ++zi)",
                              troupe_tnode_num_elems(tn));
        if (tn->prec == TROUPE_PREC_UINT4X32)
            troupe__strbuf_printf(out,
                                  " { %s[zi].v[0] = 0u; %s[zi].v[1] = 0u; %s[zi].v[2] = 0u; "
                                  "%s[zi].v[3] = 0u; }\n",
                                  info->ident, info->ident, info->ident, info->ident);
        else
            troupe__strbuf_printf(out, " %s[zi] = 0;\n", info->ident);
        return TROUPE_OK;
    }
    case TROUPE_LL_SET: {
        const troupe_tnode_t *tn = s->u.set.tn;
        troupe__strbuf_t lhs = TROUPE__STRBUF_INIT;
        s_put_elem(g, &lhs, tn, s->u.set.idcs);
        troupe_status_t st =
            lhs.failed
                ? troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory")
                : s_emit_assign(g, lhs.data, s->u.set.value, tn->prec, tn->prec, indent, out);
        troupe__strbuf_reset(&lhs);
        return st;
    }
    case TROUPE_LL_SET_LOCAL: {
        const s_scope_t *sc = s_find_scope(g, s->u.set_local.id);
        if (sc == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "cgen of procedure %s: set_local of scope %d outside it",
                                 g->proc->name, s->u.set_local.id);
        char ident[S_IDENT_CAP];
        snprintf(ident, sizeof ident, "%s", sc->ident);
        troupe_prec_t p = sc->tn->prec; /* the variable has the compute type: no rounding */
        return s_emit_assign(g, ident, s->u.set_local.value, p, troupe_prec_compute(p), indent,
                             out);
    }
    case TROUPE_LL_SET_FROM_VEC: {
        const troupe_tnode_t *tn = s->u.set_from_vec.tn;
        troupe_vec_unop_t op = s->u.set_from_vec.op;
        size_t count = troupe_vec_unop_output_count(op, tn->prec);
        troupe_c_syntax_t syn;
        troupe_status_t st = troupe_vec_unop_c_syntax(tn->prec, op, &syn);
        if (st != TROUPE_OK)
            return s_wrap_error(g, st);
        if (tn->ndims == 0 || (size_t)s->u.set_from_vec.length != count)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "cgen (%s dialect) of procedure %s: set_from_vec %s into node "
                                 "#%d (%s, %d dims) with length %d; the op writes %zu elements "
                                 "along the last axis",
                                 g->target->name, g->proc->name, troupe_vec_unop_name(op), tn->id,
                                 troupe_prec_name(tn->prec), tn->ndims, s->u.set_from_vec.length,
                                 count);
        int64_t lo, hi;
        const troupe_axis_index_t *last = &s->u.set_from_vec.idcs[tn->ndims - 1];
        if (s_index_range(g, last, &lo, &hi) && hi + (int64_t)count > tn->dims[tn->ndims - 1])
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "cgen (%s dialect) of procedure %s: set_from_vec into node #%d "
                                 "writes up to index %" PRId64 " of its last axis (dim %" PRId64
                                 ")",
                                 g->target->name, g->proc->name, tn->id, hi + (int64_t)count - 1,
                                 tn->dims[tn->ndims - 1]);
        troupe__strbuf_t pre = TROUPE__STRBUF_INIT, expr = TROUPE__STRBUF_INIT;
        st = s_emit_sc(g, s->u.set_from_vec.arg, TROUPE_PREC_UINT4X32, indent + 1, &expr, &pre);
        if (st == TROUPE_OK) {
            troupe__strbuf_repeat(out, "    ", s_open_pre_block(out, indent, &pre));
            troupe__strbuf_puts(out, syn.piece[0]);
            troupe__strbuf_putn(out, expr.data ? expr.data : "", expr.len);
            troupe__strbuf_printf(out, "%s&%s[", syn.piece[1], s_info(g, tn)->ident);
            s_put_offset(g, out, tn, s->u.set_from_vec.idcs);
            troupe__strbuf_printf(out, "]%s;\n", syn.piece[2]);
            s_close_pre_block(out, indent, &pre);
        }
        return s_stmt_done(st, &pre, &expr);
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "cgen: unknown statement kind %d", (int)s->kind);
}

/* ---- prelude selection -------------------------------------------------------------------- */

typedef struct s_prelude {
    const troupe__cgen_section_t *secs;
    size_t nsecs;
    bool *needed;
    const troupe__cgen_target_t *target;
} s_prelude_t;

static const char *s_section_text(const s_prelude_t *p, size_t i)
{
    return p->target->section_text(&p->secs[i]);
}

/* Index of the section providing identifier [id, id+n), or -1. */
static ptrdiff_t s_provider(const s_prelude_t *p, const char *id, size_t n)
{
    for (size_t i = 0; i < p->nsecs; i++) {
        const char *q = p->secs[i].provides;
        while (*q != '\0') {
            while (*q == ' ')
                q++;
            const char *start = q;
            while (*q != '\0' && *q != ' ')
                q++;
            if ((size_t)(q - start) == n && n > 0 && memcmp(start, id, n) == 0)
                return (ptrdiff_t)i;
        }
    }
    return -1;
}

/* Marks the sections whose identifiers `text` uses (outside comments), recursively. */
static troupe_status_t s_scan(s_prelude_t *p, const char *text)
{
    const char *s = text;
    while (*s != '\0') {
        if (s[0] == '/' && s[1] == '*') {
            const char *end = strstr(s + 2, "*/");
            s = end ? end + 2 : s + strlen(s);
            continue;
        }
        if (s[0] == '/' && s[1] == '/') {
            while (*s != '\0' && *s != '\n')
                s++;
            continue;
        }
        if (s_is_ident_start(*s)) {
            const char *start = s;
            while (s_is_ident_char(*s))
                s++;
            size_t n = (size_t)(s - start);
            bool ours = ((n > 7 && memcmp(start, "troupe_", 7) == 0) ||
                         (n == 10 && memcmp(start, "uint4x32_t", 10) == 0)) &&
                        !(n == 10 && memcmp(start, "troupe_err", 10) == 0); /* a parameter */
            if (!ours)
                continue;
            ptrdiff_t i = s_provider(p, start, n);
            if (i < 0)
                return troupe__error(TROUPE_INTERNAL,
                                     "cgen: generated code uses '%.*s' but no prelude section "
                                     "defines it",
                                     (int)(n > 100 ? 100 : n), start);
            if (!p->needed[i]) {
                p->needed[i] = true;
                TROUPE_RETURN_IF_ERROR(s_scan(p, s_section_text(p, (size_t)i)));
            }
            continue;
        }
        if (*s >= '0' && *s <= '9') { /* skip numbers such as 0x1Fu as one token */
            while (s_is_ident_char(*s) || *s == '.')
                s++;
            continue;
        }
        s++;
    }
    return TROUPE_OK;
}

/* ---- parameters --------------------------------------------------------------------------- */

static int s_param_cmp(const void *a, const void *b)
{
    const troupe_cgen_param_t *x = a, *y = b;
    return strcmp(x->decl, y->decl);
}

static void s_param_clear(troupe_cgen_param_t *p)
{
    troupe_free(p->decl);
    troupe_free(p->ident);
    troupe_free(p->sym_name);
    if (p->tn != NULL)
        troupe_tnode_release(&p->tn);
    memset(p, 0, sizeof *p);
}

void troupe_cgen_result_destroy(troupe_cgen_result_t **result_p)
{
    if (result_p == NULL || *result_p == NULL)
        return;
    troupe_cgen_result_t *r = *result_p;
    for (size_t i = 0; i < r->nparams; i++)
        s_param_clear(&r->params[i]);
    troupe_free(r->params);
    troupe_free(r->source);
    troupe_free(r->name);
    troupe_free(r->entry_name);
    troupe_free(r->gemm_hooks_name);
    troupe_free(r->gemm_bf16_hooks_name);
    troupe_free(r->gemm_half_hooks_name);
    troupe_free(r->gemm_pack_hooks_name);
    troupe_free(r->gemm_brgemm_hooks_name);
    for (size_t i = 0; i < r->nkernels; i++) {
        troupe_free(r->kernels[i].name);
        troupe_free(r->kernels[i].args);
    }
    troupe_free(r->kernels);
    troupe_free(r->steps);
    for (size_t i = 0; i < r->ngathers; i++) {
        troupe_free(r->gathers[i].index_name);
        troupe_free(r->gathers[i].table_name);
    }
    troupe_free(r->gathers);
    troupe_free(r);
    *result_p = NULL;
}

/* Rewrites "*restrict " in the sorted declarations into the target's qualifier. */
static troupe_status_t s_respell_restrict(const s_gen_t *g, troupe_cgen_result_t *r)
{
    const char *kw = g->target->restrict_kw;
    if (strcmp(kw, "restrict") == 0)
        return TROUPE_OK;
    for (size_t i = 0; i < r->nparams; i++) {
        char *d = r->params[i].decl;
        char *at = strstr(d, "*restrict ");
        if (at == NULL)
            continue;
        char *nd = troupe_strdup_printf("%.*s*%s %s", (int)(at - d), d, kw,
                                        at + strlen("*restrict "));
        if (nd == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        troupe_free(d);
        r->params[i].decl = nd;
    }
    return TROUPE_OK;
}

static troupe_status_t s_build_params(s_gen_t *g, troupe_cgen_result_t *r)
{
    const troupe_ll_proc_t *proc = g->proc;
    size_t n = 0;
    for (size_t i = 0; i < proc->nnodes; i++)
        n += g->nodes[i].is_param ? 1 : 0;
    for (int32_t i = 0; i < proc->nsyms; i++)
        n += proc->syms[i].is_static ? 1 : 0;
    n += g->merge_node != NULL ? 1 : 0;
    r->params = troupe_calloc(n > 0 ? n : 1, sizeof *r->params);
    if (r->params == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    /* Declarations are sorted with C's `restrict` and then spelled in the dialect, so both
     * dialects order the parameters alike (drivers bind arguments in one order). */
    const char *restrict_kw = "restrict";
    size_t k = 0;
    bool oom = false;
    for (size_t i = 0; i < proc->nnodes; i++) {
        const s_node_info_t *info = &g->nodes[i];
        if (!info->is_param)
            continue;
        troupe_tnode_t *tn = proc->nodes[i];
        troupe_cgen_param_t *p = &r->params[k++];
        const char *type = troupe_prec_c_type(tn->prec);
        p->kind = TROUPE_CGEN_PARAM_NODE_PTR;
        p->sym = -1;
        p->is_read = info->read;
        p->is_written = info->written;
        /* read and written: restrict too (nodes never share an array), unless a merge buffer
         * may be that node's array (a streaming merge on one device) */
        if (info->read && info->written && g->merge_node != NULL)
            p->decl = troupe_strdup_printf("%s *%s", type, info->ident);
        else
            p->decl = troupe_strdup_printf("%s%s *%s %s", info->written ? "" : "const ", type,
                                           restrict_kw, info->ident);
        p->ident = troupe_strdup(info->ident);
        troupe_tnode_retain(tn);
        p->tn = tn;
        oom = oom || p->decl == NULL || p->ident == NULL;
    }
    for (int32_t i = 0; i < proc->nsyms; i++) {
        if (!proc->syms[i].is_static)
            continue;
        troupe_cgen_param_t *p = &r->params[k++];
        p->kind = TROUPE_CGEN_PARAM_STATIC_IDX;
        p->sym = i;
        p->static_range = proc->syms[i].static_range;
        p->sym_name = troupe_strdup(proc->syms[i].name);
        p->ident = troupe_strdup(g->syms[i]);
        p->decl = troupe_strdup_printf("const int64_t %s", g->syms[i]);
        oom = oom || p->decl == NULL || p->ident == NULL || p->sym_name == NULL;
    }
    if (g->merge_node != NULL) {
        troupe_cgen_param_t *p = &r->params[k++];
        p->kind = TROUPE_CGEN_PARAM_MERGE_BUFFER;
        p->sym = -1;
        p->is_read = true;
        p->decl =
            troupe_strdup_printf("const %s *merge_buffer", troupe_prec_c_type(g->merge_node->prec));
        p->ident = troupe_strdup("merge_buffer");
        troupe_tnode_retain((troupe_tnode_t *)g->merge_node);
        p->tn = (troupe_tnode_t *)g->merge_node;
        oom = oom || p->decl == NULL || p->ident == NULL;
    }
    r->nparams = k;
    if (oom)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    qsort(r->params, r->nparams, sizeof *r->params, s_param_cmp);
    return s_respell_restrict(g, r);
}

/* ---- assembly ----------------------------------------------------------------------------- */

static void s_put_header(const s_gen_t *g, const troupe_cgen_result_t *r, troupe__strbuf_t *b)
{
    troupe__strbuf_printf(
        b, "/* troupe compiler/cgen: routine %s, %s dialect. Generated code; do not edit.\n",
        r->name, g->target->name);
    g->target->put_calling(b, r);
    troupe__strbuf_puts(b, " * Parameters (call order):\n");
    if (r->nparams == 0)
        troupe__strbuf_puts(b, " *   (none)\n");
    for (size_t i = 0; i < r->nparams; i++) {
        const troupe_cgen_param_t *p = &r->params[i];
        troupe__strbuf_printf(b, " *   %zu: %s", i, p->decl);
        if (p->kind == TROUPE_CGEN_PARAM_NODE_PTR || p->kind == TROUPE_CGEN_PARAM_MERGE_BUFFER) {
            char dims[128];
            troupe_tnode_dims_to_string(p->tn, false, dims, sizeof dims);
            troupe__strbuf_printf(
                b, " -- %snode #%d, %s %s%s%s\n",
                p->kind == TROUPE_CGEN_PARAM_MERGE_BUFFER ? "merge buffer of " : "", p->tn->id,
                troupe_prec_name(p->tn->prec), dims,
                p->kind == TROUPE_CGEN_PARAM_NODE_PTR && p->is_read ? ", read" : "",
                p->is_written ? ", written" : "");
        } else {
            troupe__strbuf_printf(b, " -- static index %" PRId32 ", range %" PRId64 "\n", p->sym,
                                  p->static_range);
        }
    }
    troupe__strbuf_puts(b, " */\n");
}

void troupe__cgen_put_signature(troupe__strbuf_t *b, const char *prefix,
                                const troupe_cgen_result_t *r, const char *no_params)
{
    troupe__strbuf_printf(b, "%s%s(", prefix, r->name);
    if (r->nparams == 0)
        troupe__strbuf_puts(b, no_params);
    for (size_t i = 0; i < r->nparams; i++)
        troupe__strbuf_printf(b, "%s%s", i ? ", " : "", r->params[i].decl);
    if (r->ngathers > 0)
        troupe__strbuf_printf(b, "%sint64_t *troupe_err", r->nparams ? ", " : "");
    troupe__strbuf_puts(b, ")\n{\n");
}

/* ---- the emitter's side for targets (cgen_impl.h) -------------------------------------------- */

const troupe_ll_proc_t *troupe__cgen_proc(const troupe__cgen_t *g)
{
    return g->proc;
}

const char *troupe__cgen_sym_ident(const troupe__cgen_t *g, int32_t sym)
{
    return g->syms[sym];
}

const char *troupe__cgen_node_ident(troupe__cgen_t *g, const troupe_tnode_t *tn)
{
    const s_node_info_t *info = s_info(g, tn);
    return info != NULL ? info->ident : "?";
}

bool troupe__cgen_node_is_local(troupe__cgen_t *g, const troupe_tnode_t *tn)
{
    const s_node_info_t *info = s_info(g, tn);
    return info != NULL && info->is_local;
}

void troupe__cgen_put_local_arrays(const troupe__cgen_t *g, troupe__strbuf_t *b)
{
    const troupe_ll_proc_t *proc = g->proc;
    bool any_local = false;
    for (size_t i = 0; i < proc->nnodes; i++) {
        const s_node_info_t *info = &g->nodes[i];
        if (!info->is_local)
            continue;
        const troupe_tnode_t *tn = proc->nodes[i];
        if (!any_local)
            troupe__strbuf_puts(b, "    /* Local arrays. */\n");
        any_local = true;
        troupe__strbuf_printf(b, "    %s %s[%" PRId64 "] = %s;\n", troupe_prec_c_type(tn->prec),
                              info->ident, troupe_tnode_num_elems(tn),
                              tn->prec == TROUPE_PREC_UINT4X32 ? "{{{0u}}}" : "{0}");
    }
}

void troupe__cgen_bind_sym(troupe__cgen_t *g, int32_t sym, bool bound, int64_t lo, int64_t hi)
{
    g->bound[sym] = bound;
    g->ranges[sym] = bound ? (s_range_t){true, lo, hi} : (s_range_t){false, 0, 0};
}

void troupe__cgen_read_as(troupe__cgen_t *g, const troupe_tnode_t *tn, const char *text)
{
    g->acc_tn = text != NULL ? tn : NULL;
    g->acc_idcs = NULL;
    g->acc_name = text;
}

void troupe__cgen_bind_skew(troupe__cgen_t *g, int32_t outer, int32_t inner, const char *u,
                            int64_t inner_lo, int64_t inner_hi)
{
    g->skew[outer] = (struct s_skew){u, inner, true, inner_lo, inner_hi};
    g->skew[inner] = (struct s_skew){u, outer, false, 0, 0};
    if (u == NULL)
        g->skew[outer].u = g->skew[inner].u = NULL;
}

troupe_status_t troupe__cgen_emit_stmt(troupe__cgen_t *g, const troupe_ll_t *s, int indent,
                                       troupe__strbuf_t *out)
{
    return s_emit_ll(g, s, indent, out);
}

troupe_status_t troupe__cgen_emit_value(troupe__cgen_t *g, const char *lhs,
                                        const troupe_sc_t *value, troupe_prec_t prec, int indent,
                                        troupe__strbuf_t *out)
{
    return s_emit_assign(g, lhs, value, prec, prec, indent, out);
}

void troupe__cgen_put_access(troupe__cgen_t *g, troupe__strbuf_t *b, const troupe_tnode_t *tn,
                             const troupe_axis_index_t *idcs)
{
    s_put_elem(g, b, tn, idcs);
}

/* The routine: the target's signature and prologue, local arrays, body. */
static void s_put_function(const s_gen_t *g, const troupe_cgen_result_t *r,
                           const troupe__strbuf_t *body, troupe__strbuf_t *b)
{
    g->target->put_open(b, r);
    troupe__cgen_put_local_arrays(g, b);
    troupe__strbuf_puts(b, "    /* Main logic. */\n");
    if (body->len > 0)
        troupe__strbuf_putn(b, body->data, body->len);
    troupe__strbuf_puts(b, "}\n");
}

troupe_status_t troupe_cgen_emit(const troupe_ll_proc_t *proc, troupe_cgen_dialect_t dialect,
                                 troupe_cgen_result_t **out)
{
    return troupe_cgen_emit_with(proc, dialect, NULL, out);
}

int64_t troupe__cgen_cuda_shared_max(const troupe__cgen_t *g)
{
    int64_t v = g->opts.cuda_shared_max_bytes;
    if (v > INT32_MAX) /* a kernel's dynamic shared bytes are a uint32_t, the attribute an int */
        v = INT32_MAX;
    return v > TROUPE__CGEN_STATIC_SHARED_MAX ? v : TROUPE__CGEN_STATIC_SHARED_MAX;
}

troupe_status_t troupe_cgen_emit_with(const troupe_ll_proc_t *proc, troupe_cgen_dialect_t dialect,
                                      const troupe_cgen_options_t *opts, troupe_cgen_result_t **out)
{
    troupe_status_t st = TROUPE_OK;
    s_gen_t g;
    troupe__strbuf_t body = TROUPE__STRBUF_INIT, fn = TROUPE__STRBUF_INIT,
                     src = TROUPE__STRBUF_INIT;
    s_prelude_t pre;
    troupe_cgen_result_t *r = NULL;
    memset(&g, 0, sizeof g);
    memset(&pre, 0, sizeof pre);
    if (opts != NULL)
        g.opts = *opts;

    if (out == NULL || proc == NULL) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_cgen_emit: NULL %s",
                           out == NULL ? "out" : "proc");
        goto done;
    }
    *out = NULL;
    const troupe__cgen_target_t *target = s_target(dialect);
    if (target == NULL) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_cgen_emit: unknown dialect %d",
                           (int)dialect);
        goto done;
    }
    if (troupe_ll_proc_status(proc) != TROUPE_OK) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "cgen: procedure %s failed while being built (%s)", proc->name,
                           troupe_status_str(troupe_ll_proc_status(proc)));
        goto done;
    }
    if ((st = s_check_name(proc->name)) != TROUPE_OK)
        goto done;
    if ((st = troupe_ll_proc_validate(proc)) != TROUPE_OK)
        goto done;

    g.proc = proc;
    g.target = target;
    g.nodes = troupe_calloc(proc->nnodes ? proc->nnodes : 1, sizeof *g.nodes);
    g.syms = troupe_calloc(proc->nsyms ? (size_t)proc->nsyms : 1, sizeof *g.syms);
    g.ranges = troupe_calloc(proc->nsyms ? (size_t)proc->nsyms : 1, sizeof *g.ranges);
    g.nscope_ids = proc->next_scope_id > 0 ? proc->next_scope_id : 0;
    g.scope_uses = troupe_calloc(g.nscope_ids ? (size_t)g.nscope_ids : 1, sizeof *g.scope_uses);
    g.bound = troupe_calloc(proc->nsyms ? (size_t)proc->nsyms : 1, sizeof *g.bound);
    g.skew = troupe_calloc(proc->nsyms ? (size_t)proc->nsyms : 1, sizeof *g.skew);
    if (g.nodes == NULL || g.syms == NULL || g.ranges == NULL || g.scope_uses == NULL ||
        g.bound == NULL || g.skew == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto done;
    }
    s_name_symbols(&g);
    for (int32_t i = 0; i < proc->nsyms; i++) {
        const troupe_ll_symbol_t *sym = &proc->syms[i];
        if (sym->is_static && sym->static_range > 0)
            g.ranges[i] = (s_range_t){true, 0, sym->static_range - 1};
    }
    if ((st = s_collect_ll(&g, proc->body)) != TROUPE_OK)
        goto done;
    if ((st = s_classify(&g)) != TROUPE_OK)
        goto done;
    /* A target with its own routine layout (CUDA's kernels) emits the body after the
     * parameters are known; the others get it here. */
    if (target->put_routine == NULL && g.nbinds > 0) {
        troupe__strbuf_puts(&body, "    /* Gather indices, checked before any write. */\n");
        if ((st = s_emit_checks(&g, proc->body, 1, &body)) != TROUPE_OK)
            goto done;
    }
    if (target->put_routine == NULL && (st = s_emit_ll(&g, proc->body, 1, &body)) != TROUPE_OK)
        goto done;
    for (size_t i = 0; i < proc->nnodes; i++)
        if (g.nodes[i].is_scalar && !g.nodes[i].scalar_emitted) {
            st = troupe__error(TROUPE_INTERNAL,
                               "cgen of procedure %s: iteration scalar %s is not first written "
                               "in a loop's body (an optimizer or code generator bug)",
                               proc->name, g.nodes[i].ident);
            goto done;
        }

    r = troupe_calloc(1, sizeof *r);
    if (r == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto done;
    }
    r->dialect = dialect;
    r->name = troupe_strdup(proc->name);
    r->entry_name = target->has_entry ? troupe_strdup_printf("%s_entry", proc->name) : NULL;
    if (r->name == NULL || (target->has_entry && r->entry_name == NULL)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto done;
    }
    if ((st = s_build_params(&g, r)) != TROUPE_OK)
        goto done;
    if (g.nbinds > 0) {
        r->gathers = troupe_calloc(g.nbinds, sizeof *r->gathers);
        if (r->gathers == NULL) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
            goto done;
        }
        r->ngathers = g.nbinds;
        for (size_t i = 0; i < g.nbinds; i++) {
            const troupe_ll_t *b = g.binds[i];
            troupe_cgen_gather_t *x = &r->gathers[i];
            char name[128];
            troupe_tnode_debug_name(b->u.bind_index.tn, name, sizeof name);
            x->index_name = troupe_strdup(name);
            if (b->u.bind_index.table != NULL) {
                troupe_tnode_debug_name(b->u.bind_index.table, name, sizeof name);
                x->table_name = troupe_strdup(name);
            }
            x->ndims = b->u.bind_index.tn->ndims;
            x->axis = b->u.bind_index.axis;
            x->range = b->u.bind_index.range;
            if (x->index_name == NULL || (b->u.bind_index.table != NULL && x->table_name == NULL)) {
                st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
                goto done;
            }
        }
    }

    r->reassociates = g.reassociates;
    if (g.uses_gemm) {
        r->gemm_library_only = g.opts.c_gemm_library_only;
        r->gemm_hooks_name = troupe_strdup_printf("%s_gemm_hooks", proc->name);
        if (g.uses_bgemm)
            r->gemm_bf16_hooks_name = troupe_strdup_printf("%s_gemm_bf16_hooks", proc->name);
        if (g.uses_hgemm)
            r->gemm_half_hooks_name = troupe_strdup_printf("%s_gemm_half_hooks", proc->name);
        if (g.uses_spack)
            r->gemm_pack_hooks_name = troupe_strdup_printf("%s_gemm_pack_hooks", proc->name);
        if (g.uses_brgemm)
            r->gemm_brgemm_hooks_name =
                troupe_strdup_printf("%s_gemm_brgemm_hooks", proc->name);
        if (r->gemm_hooks_name == NULL || (g.uses_bgemm && r->gemm_bf16_hooks_name == NULL) ||
            (g.uses_hgemm && r->gemm_half_hooks_name == NULL) ||
            (g.uses_spack && r->gemm_pack_hooks_name == NULL) ||
            (g.uses_brgemm && r->gemm_brgemm_hooks_name == NULL)) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
            goto done;
        }
    }
    if (target->put_routine != NULL) {
        if ((st = target->put_routine(&g, r, &fn)) != TROUPE_OK)
            goto done;
    } else {
        s_put_function(&g, r, &body, &fn);
    }
    if (target->put_after != NULL)
        target->put_after(&fn, r);

    pre.secs = troupe__cgen_sections(&pre.nsecs);
    pre.target = target;
    pre.needed = troupe_calloc(pre.nsecs, sizeof *pre.needed);
    if (pre.needed == NULL || body.failed || fn.failed) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto done;
    }
    if ((st = s_scan(&pre, fn.data)) != TROUPE_OK)
        goto done;

    s_put_header(&g, r, &src);
    troupe__strbuf_puts(&src, troupe__cgen_core(dialect));
    for (size_t i = 0; i < pre.nsecs; i++) {
        if (!pre.needed[i])
            continue;
        troupe__strbuf_printf(&src, TROUPE__CGEN_SECTION_HEADER, pre.secs[i].name);
        troupe__strbuf_puts(&src, s_section_text(&pre, i));
    }
    troupe__strbuf_puts(&src, "\n");
    troupe__strbuf_putn(&src, fn.data, fn.len);
    if (src.failed) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto done;
    }
    r->source = src.data;
    r->source_len = src.len;
    src.data = NULL;
    *out = r;
    r = NULL;

done:
    troupe_cgen_result_destroy(&r);
    troupe__strbuf_reset(&body);
    troupe__strbuf_reset(&fn);
    troupe__strbuf_reset(&src);
    troupe_free(pre.needed);
    troupe_free(g.nodes);
    troupe_free(g.syms);
    troupe_free(g.ranges);
    troupe_free(g.scopes);
    troupe_free(g.scope_uses);
    troupe_free(g.bound);
    troupe_free(g.skew);
    troupe_free(g.binds);
    return st;
}

troupe_status_t troupe_cgen_gather_failure(const troupe_cgen_result_t *result, const int64_t *err)
{
    if (result == NULL || err == NULL || err[0] == 0)
        return TROUPE_OK;
    if (err[0] < 0 || (size_t)err[0] > result->ngathers)
        return troupe__error(TROUPE_INTERNAL, "routine %s reported gather %" PRId64 " of %zu",
                             result->name, err[0], result->ngathers);
    const troupe_cgen_gather_t *x = &result->gathers[err[0] - 1];
    uint64_t bits = (uint64_t)err[1];
    double v;
    memcpy(&v, &bits, sizeof v);
    return troupe_ll_gather_failure(x->index_name, x->ndims, err + 2, v, x->range, x->table_name,
                                    x->axis);
}

/* ---- lookups ------------------------------------------------------------------------------ */

ptrdiff_t troupe_cgen_find_node_param(const troupe_cgen_result_t *result, const troupe_tnode_t *tn)
{
    if (result == NULL || tn == NULL)
        return -1;
    for (size_t i = 0; i < result->nparams; i++)
        if (result->params[i].kind == TROUPE_CGEN_PARAM_NODE_PTR && result->params[i].tn == tn)
            return (ptrdiff_t)i;
    return -1;
}

ptrdiff_t troupe_cgen_find_static_param(const troupe_cgen_result_t *result, const char *sym_name)
{
    if (result == NULL || sym_name == NULL)
        return -1;
    for (size_t i = 0; i < result->nparams; i++)
        if (result->params[i].kind == TROUPE_CGEN_PARAM_STATIC_IDX &&
            strcmp(result->params[i].sym_name, sym_name) == 0)
            return (ptrdiff_t)i;
    return -1;
}

ptrdiff_t troupe_cgen_find_merge_param(const troupe_cgen_result_t *result)
{
    if (result == NULL)
        return -1;
    for (size_t i = 0; i < result->nparams; i++)
        if (result->params[i].kind == TROUPE_CGEN_PARAM_MERGE_BUFFER)
            return (ptrdiff_t)i;
    return -1;
}
