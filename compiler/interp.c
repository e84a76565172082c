/* troupe — reference interpreter of the low-level IR (see compiler/interp.h for the semantics).
 *
 * Values are carried in the compute representation of their context precision (s_cp_t):
 * float, double, a 64-bit pattern holding a C integer of the promoted type (sign- or
 * zero-extended), or a uint4x32. Conversions happen only at leaves (GET, GET_LOCAL, local
 * scope values, constants, embedded indices) and at stores, as in generated C.
 */
#define _POSIX_C_SOURCE 200809L
#include "compiler/interp.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/ops.h"
#include "ir/prec.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- compute representation -------------------------------------------------------------- */

typedef enum s_kind {
    S_K_F32 = 0, /* single, half, bfloat16, fp8 */
    S_K_F64,
    S_K_INT,
    S_K_U4,
} s_kind_t;

/* How a context precision computes. */
typedef struct s_cp {
    troupe_prec_t prec; /* the storage precision */
    s_kind_t kind;
    int bits;          /* S_K_INT: width of the promoted C type (32 or 64) */
    bool is_signed;    /* S_K_INT: signedness of the promoted C type */
    bool storage_uint; /* S_K_INT: the storage type is unsigned (OCANNL_NOTES UINT class) */
} s_cp_t;

/* A value in the compute representation of its context, or, when `ci` is set, a value of C
 * type `int` held in u (sign-extended): what comparisons, ||, && and ! yield in generated C
 * and what arithmetic between two such values stays. */
typedef struct s_val {
    union {
        float f;
        double d;
        uint64_t u; /* S_K_INT, normalised to the promoted type */
        troupe_uint4x32_t x;
    };
    bool ci;
} s_val_t;

static s_cp_t s_cp(troupe_prec_t p)
{
    s_cp_t c = {p, S_K_F32, 0, false, false};
    switch (p) {
    case TROUPE_PREC_DOUBLE:
        c.kind = S_K_F64;
        break;
    case TROUPE_PREC_BYTE:
    case TROUPE_PREC_UINT16:
        c.kind = S_K_INT; /* promoted to int */
        c.bits = 32;
        c.is_signed = true;
        c.storage_uint = true;
        break;
    case TROUPE_PREC_INT32:
        c.kind = S_K_INT;
        c.bits = 32;
        c.is_signed = true;
        break;
    case TROUPE_PREC_UINT32:
        c.kind = S_K_INT;
        c.bits = 32;
        c.storage_uint = true;
        break;
    case TROUPE_PREC_INT64:
        c.kind = S_K_INT;
        c.bits = 64;
        c.is_signed = true;
        break;
    case TROUPE_PREC_UINT64:
        c.kind = S_K_INT;
        c.bits = 64;
        c.storage_uint = true;
        break;
    case TROUPE_PREC_UINT4X32:
        c.kind = S_K_U4;
        break;
    default: /* single, half, bfloat16, fp8 */
        break;
    }
    return c;
}

/* Normalises a bit pattern to the promoted type of c. */
static uint64_t s_norm(const s_cp_t *c, uint64_t x)
{
    if (c->bits == 32)
        return c->is_signed ? (uint64_t)(int64_t)(int32_t)(uint32_t)x : (x & 0xFFFFFFFFu);
    return x;
}

static double s_int_to_double(const s_cp_t *c, uint64_t u)
{
    return c->is_signed ? (double)(int64_t)u : (double)u;
}

static float s_int_to_float(const s_cp_t *c, uint64_t u)
{
    return c->is_signed ? (float)(int64_t)u : (float)u;
}

/* Storage width and signedness of an integer precision. */
static void s_storage_int(troupe_prec_t p, int *bits, bool *is_signed)
{
    switch (p) {
    case TROUPE_PREC_BYTE:
        *bits = 8;
        *is_signed = false;
        return;
    case TROUPE_PREC_UINT16:
        *bits = 16;
        *is_signed = false;
        return;
    case TROUPE_PREC_INT32:
        *bits = 32;
        *is_signed = true;
        return;
    case TROUPE_PREC_UINT32:
        *bits = 32;
        *is_signed = false;
        return;
    case TROUPE_PREC_INT64:
        *bits = 64;
        *is_signed = true;
        return;
    default:
        *bits = 64;
        *is_signed = false;
        return;
    }
}

/* C conversion of an integer pattern to the storage type of p (modulo 2^bits), extended
 * back to 64 bits by the storage signedness. */
static uint64_t s_narrow(troupe_prec_t p, uint64_t x)
{
    int bits;
    bool sg;
    s_storage_int(p, &bits, &sg);
    if (bits == 64)
        return x;
    uint64_t mask = (UINT64_C(1) << bits) - 1;
    x &= mask;
    if (sg && (x >> (bits - 1)) != 0)
        x |= ~mask;
    return x;
}

/* A float value converted into the storage type of integer precision p: truncation toward
 * zero, saturating out of range (C leaves that undefined), NaN -> 0. Extended like
 * s_narrow. */
static uint64_t s_double_to_int(troupe_prec_t p, double x)
{
    int bits;
    bool sg;
    s_storage_int(p, &bits, &sg);
    if (isnan(x))
        return 0;
    x = trunc(x);
    if (sg) {
        double lo = -ldexp(1.0, bits - 1), hi = ldexp(1.0, bits - 1); /* hi exclusive */
        if (x < lo)
            return (uint64_t)(bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1)));
        if (x >= hi)
            return (uint64_t)(bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1);
        return (uint64_t)(int64_t)x;
    }
    double hi = ldexp(1.0, bits);
    if (x <= 0)
        return 0;
    if (x >= hi)
        return bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    return (uint64_t)x;
}

/* Reads one element of precision p into p's own compute representation. */
static s_val_t s_load(troupe_prec_t p, const void *src)
{
    s_val_t v;
    memset(&v, 0, sizeof v);
    switch (p) {
    case TROUPE_PREC_SINGLE:
        memcpy(&v.f, src, sizeof v.f);
        break;
    case TROUPE_PREC_HALF: {
        uint16_t h;
        memcpy(&h, src, sizeof h);
        v.f = troupe_half_to_single(h);
        break;
    }
    case TROUPE_PREC_BFLOAT16: {
        uint16_t h;
        memcpy(&h, src, sizeof h);
        v.f = troupe_bfloat16_to_single(h);
        break;
    }
    case TROUPE_PREC_FP8:
        v.f = troupe_fp8_to_single(*(const uint8_t *)src);
        break;
    case TROUPE_PREC_DOUBLE:
        memcpy(&v.d, src, sizeof v.d);
        break;
    case TROUPE_PREC_BYTE:
        v.u = *(const uint8_t *)src;
        break;
    case TROUPE_PREC_UINT16: {
        uint16_t h;
        memcpy(&h, src, sizeof h);
        v.u = h;
        break;
    }
    case TROUPE_PREC_INT32: {
        int32_t i;
        memcpy(&i, src, sizeof i);
        v.u = (uint64_t)(int64_t)i;
        break;
    }
    case TROUPE_PREC_UINT32: {
        uint32_t i;
        memcpy(&i, src, sizeof i);
        v.u = i;
        break;
    }
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT64:
        memcpy(&v.u, src, sizeof v.u);
        break;
    case TROUPE_PREC_UINT4X32:
        memcpy(&v.x, src, sizeof v.x);
        break;
    default:
        break;
    }
    return v;
}

/* Writes v (in p's compute representation) as one element of p: the SET rounding. */
static void s_store(troupe_prec_t p, void *dst, s_val_t v)
{
    switch (p) {
    case TROUPE_PREC_SINGLE:
        memcpy(dst, &v.f, sizeof v.f);
        break;
    case TROUPE_PREC_HALF: {
        uint16_t h = troupe_single_to_half(v.f);
        memcpy(dst, &h, sizeof h);
        break;
    }
    case TROUPE_PREC_BFLOAT16: {
        uint16_t h = troupe_single_to_bfloat16(v.f);
        memcpy(dst, &h, sizeof h);
        break;
    }
    case TROUPE_PREC_FP8:
        *(uint8_t *)dst = troupe_single_to_fp8(v.f);
        break;
    case TROUPE_PREC_DOUBLE:
        memcpy(dst, &v.d, sizeof v.d);
        break;
    case TROUPE_PREC_BYTE:
        *(uint8_t *)dst = (uint8_t)v.u;
        break;
    case TROUPE_PREC_UINT16: {
        uint16_t h = (uint16_t)v.u;
        memcpy(dst, &h, sizeof h);
        break;
    }
    case TROUPE_PREC_INT32:
    case TROUPE_PREC_UINT32: {
        uint32_t i = (uint32_t)v.u;
        memcpy(dst, &i, sizeof i);
        break;
    }
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT64:
        memcpy(dst, &v.u, sizeof v.u);
        break;
    case TROUPE_PREC_UINT4X32:
        memcpy(dst, &v.x, sizeof v.x);
        break;
    default:
        break;
    }
}

/* Converts v from precision `from`'s compute representation into `to`'s (the C conversion of
 * troupe_c_convert_precision(from, compute precision of to)). `elem`, when not NULL, is the
 * element v was loaded from (used for the bit-exact counter construction into uint4x32). */
static s_val_t s_convert(troupe_prec_t from, s_val_t v, const void *elem, troupe_prec_t to)
{
    s_cp_t f = s_cp(from), t = s_cp(to);
    s_val_t r;
    memset(&r, 0, sizeof r);
    if (t.kind == S_K_U4) {
        unsigned char buf[16];
        if (elem == NULL) {
            memset(buf, 0, sizeof buf);
            s_store(from, buf, v);
            elem = buf;
        }
        if (troupe_prec_bits_to_uint4x32(from, elem, &r.x) != TROUPE_OK)
            memset(&r.x, 0, sizeof r.x);
        return r;
    }
    if (f.kind == S_K_U4) {
        s_val_t w;
        memset(&w, 0, sizeof w);
        w.u = v.x.v[0];
        return s_convert(TROUPE_PREC_UINT32, w, NULL, to);
    }
    switch (t.kind) {
    case S_K_F32:
        r.f = f.kind == S_K_F32 ? v.f : f.kind == S_K_F64 ? (float)v.d : s_int_to_float(&f, v.u);
        break;
    case S_K_F64:
        r.d = f.kind == S_K_F32 ? (double)v.f : f.kind == S_K_F64 ? v.d : s_int_to_double(&f, v.u);
        break;
    case S_K_INT:
        if (f.kind == S_K_F32)
            r.u = s_double_to_int(to, (double)v.f);
        else if (f.kind == S_K_F64)
            r.u = s_double_to_int(to, v.d);
        else
            r.u = s_narrow(to, v.u);
        r.u = s_norm(&t, r.u);
        break;
    case S_K_U4:
        break;
    }
    return r;
}

/* ---- interpreter state ------------------------------------------------------------------- */

/* A local scope's variable: one element of the compute precision of its node's precision
 * (generated code declares it of that C type, zero-initialised). SET_LOCAL values are
 * evaluated in the node's precision itself. */
typedef struct s_scope {
    int32_t id;
    troupe_prec_t prec;  /* the scope node's precision: the evaluation context */
    troupe_prec_t cprec; /* its compute precision: the variable's type */
    _Alignas(16) unsigned char storage[16];
} s_scope_t;

typedef struct s_interp {
    const troupe_ll_proc_t *proc;
    unsigned char **bufs;    /* per proc->nodes entry */
    unsigned char **scratch; /* owned scratch buffers (subset of bufs) */
    const unsigned char *merge;
    int64_t *vals; /* symbol values */
    s_scope_t *scopes;
    size_t nscopes, scopes_cap;
} s_interp_t;

static void s_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_debug_name(tn, buf, cap);
}

static troupe_status_t s_node_slot(const s_interp_t *I, const troupe_tnode_t *tn, size_t *out)
{
    ptrdiff_t i = troupe_ll_proc_node_index(I->proc, tn);
    if (i < 0) {
        char name[96];
        s_name(tn, name, sizeof name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "node %s is used but not recorded in procedure %s", name,
                             I->proc->name);
    }
    *out = (size_t)i;
    return TROUPE_OK;
}

/* Flat element offset of tn[idcs], bounds-checked. */
static troupe_status_t s_offset(const s_interp_t *I, const troupe_tnode_t *tn,
                                const troupe_axis_index_t *idcs, const char *what,
                                int64_t last_extra, int64_t *out)
{
    int64_t off = 0;
    for (int a = 0; a < tn->ndims; a++) {
        const troupe_axis_index_t *ix = &idcs[a];
        int64_t v = ix->offset;
        bool ovf = false;
        for (int k = 0; k < ix->nterms; k++) {
            int64_t prod;
            ovf |= __builtin_mul_overflow(ix->terms[k].coeff, I->vals[ix->terms[k].sym], &prod);
            ovf |= __builtin_add_overflow(v, prod, &v);
        }
        int64_t hi = v;
        if (a == tn->ndims - 1)
            ovf |= __builtin_add_overflow(v, last_extra, &hi);
        if (ovf || v < 0 || hi >= tn->dims[a]) {
            char name[96];
            s_name(tn, name, sizeof name);
            if (ovf)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "%s of %s axis %d: index computation overflows", what, name,
                                     a);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s of %s axis %d: index %" PRId64 " outside 0..%" PRId64, what,
                                 name, a, v < 0 ? v : hi, tn->dims[a] - 1);
        }
        off = off * tn->dims[a] + v;
    }
    *out = off;
    return TROUPE_OK;
}

static troupe_status_t s_elem(const s_interp_t *I, const troupe_tnode_t *tn,
                              const troupe_axis_index_t *idcs, bool merge, const char *what,
                              unsigned char **out)
{
    int64_t off;
    TROUPE_RETURN_IF_ERROR(s_offset(I, tn, idcs, what, 0, &off));
    size_t esz = troupe_prec_size_bytes(tn->prec);
    if (merge) {
        if (I->merge == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "merge-buffer read of node #%" PRId32 " without a merge buffer",
                                 tn->id);
        *out = (unsigned char *)I->merge + (size_t)off * esz;
        return TROUPE_OK;
    }
    size_t slot = 0;
    TROUPE_RETURN_IF_ERROR(s_node_slot(I, tn, &slot));
    *out = I->bufs[slot] + (size_t)off * esz;
    return TROUPE_OK;
}

static s_scope_t *s_find_scope(s_interp_t *I, int32_t id)
{
    for (size_t i = I->nscopes; i > 0; i--)
        if (I->scopes[i - 1].id == id)
            return &I->scopes[i - 1];
    return NULL;
}

static troupe_status_t s_undefined(const char *kind, const char *op, troupe_prec_t p)
{
    return troupe__error(TROUPE_INVALID_ARGUMENT, "%s %s is not defined in precision %s", kind, op,
                         troupe_prec_name(p));
}

static troupe_status_t s_div_zero(const char *op, troupe_prec_t p)
{
    return troupe__error(TROUPE_INVALID_ARGUMENT, "integer %s by zero in precision %s", op,
                         troupe_prec_name(p));
}

/* ---- evaluation -------------------------------------------------------------------------- */

static troupe_status_t s_exec(s_interp_t *I, const troupe_ll_t *s);
static troupe_status_t s_eval(s_interp_t *I, const troupe_sc_t *e, const s_cp_t *c, s_val_t *out);

/* Whether C's `int` differs from the context's compute type, so that int-typed intermediate
 * results (comparisons, logical operators) must be tracked: float, double, uint32, int64,
 * uint64. byte, uint16 and int32 compute in int already; uint4x32 has no comparisons. */
static bool s_int_distinct(const s_cp_t *c)
{
    return c->kind == S_K_F32 || c->kind == S_K_F64 ||
           (c->kind == S_K_INT && !(c->bits == 32 && c->is_signed));
}

static s_val_t s_cint(int32_t v)
{
    s_val_t r;
    memset(&r, 0, sizeof r);
    r.u = (uint64_t)(int64_t)v;
    r.ci = true;
    return r;
}

static int32_t s_ival(s_val_t v)
{
    return (int32_t)(uint32_t)v.u;
}

/* The C conversion of a value to the context's compute type (a no-op unless it is an int). */
static s_val_t s_to_ctx(const s_cp_t *c, s_val_t v)
{
    if (!v.ci)
        return v;
    int32_t i = s_ival(v);
    s_val_t r;
    memset(&r, 0, sizeof r);
    if (c->kind == S_K_F32)
        r.f = (float)i;
    else if (c->kind == S_K_F64)
        r.d = (double)i;
    else
        r.u = s_norm(c, (uint64_t)(int64_t)i);
    return r;
}

/* (double)(x) of a value in its own C type. */
static double s_own_double(const s_cp_t *c, s_val_t v)
{
    if (v.ci)
        return (double)s_ival(v);
    if (c->kind == S_K_F32)
        return (double)v.f;
    if (c->kind == S_K_F64)
        return v.d;
    return s_int_to_double(c, v.u);
}

/* Whether `e`, evaluated in context c, has C type int in generated code (see s_val_t). Only
 * needed where C evaluates an operand lazily but its type still matters. */
static bool s_ctype_int(const troupe_sc_t *e, const s_cp_t *c)
{
    if (!s_int_distinct(c))
        return false;
    const troupe_sc_t *const *a = (const troupe_sc_t *const *)e->u.op.args;
    switch (e->kind) {
    case TROUPE_SC_BINOP:
        switch ((troupe_binop_t)e->u.op.op) {
        case TROUPE_BINOP_CMPLT:
        case TROUPE_BINOP_CMPEQ:
        case TROUPE_BINOP_CMPNE:
        case TROUPE_BINOP_OR:
        case TROUPE_BINOP_AND:
            return true;
        case TROUPE_BINOP_ADD:
        case TROUPE_BINOP_SUB:
        case TROUPE_BINOP_MUL:
        case TROUPE_BINOP_DIV:
        case TROUPE_BINOP_ARG1: /* (1 ? a : b): the common type */
        case TROUPE_BINOP_ARG2:
            return s_ctype_int(a[0], c) && s_ctype_int(a[1], c);
        case TROUPE_BINOP_MOD: /* % for integers, fmod for floats */
            return c->kind == S_K_INT && s_ctype_int(a[0], c) && s_ctype_int(a[1], c);
        case TROUPE_BINOP_RELU_GATE: /* (a > 0 ? b : 0) */
            return s_ctype_int(a[1], c);
        default:
            return false;
        }
    case TROUPE_SC_UNOP:
        switch ((troupe_unop_t)e->u.op.op) {
        case TROUPE_UNOP_NOT:
            return true;
        case TROUPE_UNOP_IDENTITY:
        case TROUPE_UNOP_NEG:
            return s_ctype_int(a[0], c);
        case TROUPE_UNOP_RELU: /* the identity for unsigned storage */
            return c->kind == S_K_INT && c->storage_uint && s_ctype_int(a[0], c);
        default:
            return false;
        }
    case TROUPE_SC_TERNOP:
        if (e->u.op.op == TROUPE_TERNOP_WHERE)
            return s_ctype_int(a[1], c) && s_ctype_int(a[2], c);
        return c->kind == S_K_INT && s_ctype_int(a[0], c) && s_ctype_int(a[1], c) &&
               s_ctype_int(a[2], c); /* integer fma is a * b + c */
    default:
        return false;
    }
}

/* C truthiness (x != 0) of a value in its own type. */
static bool s_truthy(const s_cp_t *c, s_val_t v)
{
    if (v.ci)
        return v.u != 0;
    switch (c->kind) {
    case S_K_F32:
        return v.f != 0.0f;
    case S_K_F64:
        return v.d != 0.0;
    case S_K_INT:
        return v.u != 0;
    case S_K_U4:
        return (v.x.v[0] | v.x.v[1] | v.x.v[2] | v.x.v[3]) != 0;
    }
    return false;
}

static bool s_int_lt(const s_cp_t *c, uint64_t a, uint64_t b)
{
    return c->is_signed ? (int64_t)a < (int64_t)b : a < b;
}

/* Storage-typed max/min (troupe_max_<prec>/troupe_min_<prec> of the prelude). */
static uint64_t s_int_maxmin(const s_cp_t *c, uint64_t a, uint64_t b, bool is_max)
{
    int bits;
    bool sg;
    s_storage_int(c->prec, &bits, &sg);
    a = s_narrow(c->prec, a);
    b = s_narrow(c->prec, b);
    bool lt = sg ? (int64_t)a < (int64_t)b : a < b;
    uint64_t r = is_max ? (lt ? b : a) : (lt ? a : b);
    return s_norm(c, r);
}

/* (($T)f((double)x)): a libm result converted to the storage type, then promoted. */
static uint64_t s_int_from_double(const s_cp_t *c, double x)
{
    return s_norm(c, s_double_to_int(c->prec, x));
}

/* Infix + - * / % with C's usual arithmetic conversions: two ints compute in int (wrapping
 * where C overflows), anything else in the context's compute type. */
static troupe_status_t s_arith(const s_cp_t *c, troupe_binop_t op, s_val_t a, s_val_t b,
                               s_val_t *out)
{
    memset(out, 0, sizeof *out);
    if (a.ci && b.ci) {
        uint32_t x = (uint32_t)s_ival(a), y = (uint32_t)s_ival(b);
        int32_t sx = s_ival(a), sy = s_ival(b);
        switch (op) {
        case TROUPE_BINOP_ADD:
            *out = s_cint((int32_t)(x + y));
            return TROUPE_OK;
        case TROUPE_BINOP_SUB:
            *out = s_cint((int32_t)(x - y));
            return TROUPE_OK;
        case TROUPE_BINOP_MUL:
            *out = s_cint((int32_t)(x * y));
            return TROUPE_OK;
        case TROUPE_BINOP_DIV:
        case TROUPE_BINOP_MOD:
            if (sy == 0)
                return s_div_zero(op == TROUPE_BINOP_DIV ? "division" : "remainder", c->prec);
            if (sy == -1)
                *out = s_cint(op == TROUPE_BINOP_DIV ? (int32_t)(0u - x) : 0);
            else
                *out = s_cint(op == TROUPE_BINOP_DIV ? sx / sy : sx % sy);
            return TROUPE_OK;
        default:
            return troupe__error(TROUPE_INTERNAL, "interp: s_arith on %s", troupe_binop_name(op));
        }
    }
    a = s_to_ctx(c, a);
    b = s_to_ctx(c, b);
    if (c->kind == S_K_F32) {
        float x = a.f, y = b.f;
        out->f = op == TROUPE_BINOP_ADD   ? x + y
                 : op == TROUPE_BINOP_SUB ? x - y
                 : op == TROUPE_BINOP_MUL ? x * y
                 : op == TROUPE_BINOP_DIV ? x / y
                                          : fmodf(x, y);
        return TROUPE_OK;
    }
    if (c->kind == S_K_F64) {
        double x = a.d, y = b.d;
        out->d = op == TROUPE_BINOP_ADD   ? x + y
                 : op == TROUPE_BINOP_SUB ? x - y
                 : op == TROUPE_BINOP_MUL ? x * y
                 : op == TROUPE_BINOP_DIV ? x / y
                                          : fmod(x, y);
        return TROUPE_OK;
    }
    uint64_t x = a.u, y = b.u;
    switch (op) {
    case TROUPE_BINOP_ADD:
        out->u = s_norm(c, x + y);
        return TROUPE_OK;
    case TROUPE_BINOP_SUB:
        out->u = s_norm(c, x - y);
        return TROUPE_OK;
    case TROUPE_BINOP_MUL:
        out->u = s_norm(c, x * y);
        return TROUPE_OK;
    default: {
        bool div = op == TROUPE_BINOP_DIV;
        if (y == 0)
            return s_div_zero(div ? "division" : "remainder", c->prec);
        if (c->is_signed) {
            int64_t sx = (int64_t)x, sy = (int64_t)y;
            if (sy == -1) /* avoids INT64_MIN / -1; the 32-bit case wraps in s_norm */
                out->u = div ? s_norm(c, 0 - x) : 0;
            else
                out->u = s_norm(c, (uint64_t)(div ? sx / sy : sx % sy));
        } else {
            out->u = div ? x / y : x % y;
        }
        return TROUPE_OK;
    }
    }
}

/* Infix < == != (result: int 0 or 1). */
static s_val_t s_compare(const s_cp_t *c, troupe_binop_t op, s_val_t a, s_val_t b)
{
    bool lt, eq;
    if (a.ci && b.ci) {
        lt = s_ival(a) < s_ival(b);
        eq = s_ival(a) == s_ival(b);
    } else {
        a = s_to_ctx(c, a);
        b = s_to_ctx(c, b);
        if (c->kind == S_K_F32) {
            lt = a.f < b.f;
            eq = a.f == b.f;
        } else if (c->kind == S_K_F64) {
            lt = a.d < b.d;
            eq = a.d == b.d;
        } else {
            lt = s_int_lt(c, a.u, b.u);
            eq = a.u == b.u;
        }
    }
    bool r = op == TROUPE_BINOP_CMPLT ? lt : op == TROUPE_BINOP_CMPEQ ? eq : !eq;
    return s_cint(r ? 1 : 0);
}

/* The zero of the type of `e` in context c (the `0` arm of relu_gate). */
static s_val_t s_zero_like(const troupe_sc_t *e, const s_cp_t *c)
{
    s_val_t z;
    memset(&z, 0, sizeof z);
    z.ci = s_ctype_int(e, c);
    return z;
}

/* `chosen` as the common type of itself and `other` (C's ?: on arithmetic operands). */
static s_val_t s_common(const s_cp_t *c, s_val_t chosen, const troupe_sc_t *other)
{
    if (chosen.ci && !s_ctype_int(other, c))
        return s_to_ctx(c, chosen);
    return chosen;
}

/* The binops and unops that generated code computes in one floating type, as a libm call or
 * an expression of x (and y): one list, instantiated for float (SUF f: powf, expf, fmaxf, ...)
 * and double (no suffix), each calling its own type's functions as the generated code does. */
/* Single exp and tanh are ir/ops.h's, as in the C dialect's prelude; double's are libm's. */
#define S_EXPf troupe_expf
#define S_EXP exp
#define S_TANHf troupe_tanhf
#define S_TANH tanh
#define S_FLOAT_BINOPS(CASE, T, SUF)                                                               \
    CASE(TROUPE_BINOP_TO_POW_OF, pow##SUF(x, y))                                                   \
    CASE(TROUPE_BINOP_SATUR01_GATE, (x > (T)0 && x < (T)1) ? y : (T)0)                             \
    CASE(TROUPE_BINOP_MAX, troupe_fmax##SUF(x, y))                                                 \
    CASE(TROUPE_BINOP_MIN, troupe_fmin##SUF(x, y))                                                 \
    CASE(TROUPE_BINOP_MOD, fmod##SUF(x, y))
#define S_FLOAT_UNOPS(CASE, T, SUF)                                                                \
    CASE(TROUPE_UNOP_RELU, troupe_fmax##SUF((T)0, x))                                              \
    CASE(TROUPE_UNOP_SATUR01, troupe_fmin##SUF((T)1, troupe_fmax##SUF((T)0, x)))                   \
    CASE(TROUPE_UNOP_EXP, S_EXP##SUF(x))                                                             \
    CASE(TROUPE_UNOP_LOG, log##SUF(x))                                                             \
    CASE(TROUPE_UNOP_EXP2, exp2##SUF(x))                                                           \
    CASE(TROUPE_UNOP_LOG2, log2##SUF(x))                                                           \
    CASE(TROUPE_UNOP_SIN, sin##SUF(x))                                                             \
    CASE(TROUPE_UNOP_COS, cos##SUF(x))                                                             \
    CASE(TROUPE_UNOP_SQRT, sqrt##SUF(x))                                                           \
    CASE(TROUPE_UNOP_RECIP, (T)1 / x)                                                              \
    CASE(TROUPE_UNOP_RECIP_SQRT, (T)1 / sqrt##SUF(x))                                              \
    CASE(TROUPE_UNOP_NEG, -x)                                                                      \
    CASE(TROUPE_UNOP_TANH_APPROX, S_TANH##SUF(x))
#define S_CASE(op, value)                                                                          \
    case op:                                                                                       \
        *r = value;                                                                                \
        return true;
/* s_binop_<T> and s_unop_<T>: *r = the op's value; false when op is not in the lists. */
#define S_FLOAT_OPS(T, SUF)                                                                        \
    static bool s_binop_##T(troupe_binop_t op, T x, T y, T *r)                                     \
    {                                                                                              \
        switch (op) {                                                                              \
            S_FLOAT_BINOPS(S_CASE, T, SUF)                                                         \
        default:                                                                                   \
            return false;                                                                          \
        }                                                                                          \
    }                                                                                              \
    static bool s_unop_##T(troupe_unop_t op, T x, T *r)                                            \
    {                                                                                              \
        switch (op) {                                                                              \
            S_FLOAT_UNOPS(S_CASE, T, SUF)                                                          \
        default:                                                                                   \
            return false;                                                                          \
        }                                                                                          \
    }

S_FLOAT_OPS(float, f)
S_FLOAT_OPS(double, )

static troupe_status_t s_binop(s_interp_t *I, troupe_binop_t op, const troupe_sc_t *ea,
                               const troupe_sc_t *eb, const s_cp_t *c, s_val_t *out)
{
    s_val_t a, b;
    const char *name = troupe_binop_name(op);
    memset(out, 0, sizeof *out);
    if (!troupe_binop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "binop value %d out of range", (int)op);
    if (c->kind == S_K_U4) {
        if (op != TROUPE_BINOP_ARG1 && op != TROUPE_BINOP_ARG2 &&
            op != TROUPE_BINOP_THREEFRY4X32_CRYPTO && op != TROUPE_BINOP_THREEFRY4X32_LIGHT)
            return s_undefined("binop", name, c->prec);
        if (op == TROUPE_BINOP_ARG1)
            return s_eval(I, ea, c, out);
        if (op == TROUPE_BINOP_ARG2)
            return s_eval(I, eb, c, out);
        TROUPE_RETURN_IF_ERROR(s_eval(I, ea, c, &a));
        TROUPE_RETURN_IF_ERROR(s_eval(I, eb, c, &b));
        return troupe_interpret_binop_uint4x32(op, a.x, b.x, &out->x);
    }
    if (op == TROUPE_BINOP_THREEFRY4X32_CRYPTO || op == TROUPE_BINOP_THREEFRY4X32_LIGHT)
        return s_undefined("binop", name, c->prec);
    /* Operators C evaluates lazily: (1 ? a : b), (0 ? a : b), (a > 0 ? b : 0), ||, &&. */
    if (op == TROUPE_BINOP_ARG1) {
        TROUPE_RETURN_IF_ERROR(s_eval(I, ea, c, &a));
        *out = s_common(c, a, eb);
        return TROUPE_OK;
    }
    if (op == TROUPE_BINOP_ARG2) {
        TROUPE_RETURN_IF_ERROR(s_eval(I, eb, c, &b));
        *out = s_common(c, b, ea);
        return TROUPE_OK;
    }
    TROUPE_RETURN_IF_ERROR(s_eval(I, ea, c, &a));
    if (op == TROUPE_BINOP_RELU_GATE) {
        bool pos;
        if (a.ci)
            pos = s_ival(a) > 0;
        else
            pos = c->kind == S_K_F32   ? a.f > 0.0f
                  : c->kind == S_K_F64 ? a.d > 0.0
                                       : s_int_lt(c, 0, a.u);
        if (pos)
            return s_eval(I, eb, c, out);
        *out = s_zero_like(eb, c);
        return TROUPE_OK;
    }
    if (op == TROUPE_BINOP_OR || op == TROUPE_BINOP_AND) {
        bool ta = s_truthy(c, a);
        if (op == TROUPE_BINOP_OR ? ta : !ta) {
            *out = s_cint(ta ? 1 : 0);
            return TROUPE_OK;
        }
        TROUPE_RETURN_IF_ERROR(s_eval(I, eb, c, &b));
        *out = s_cint(s_truthy(c, b) ? 1 : 0);
        return TROUPE_OK;
    }
    TROUPE_RETURN_IF_ERROR(s_eval(I, eb, c, &b));
    switch (op) {
    case TROUPE_BINOP_ADD:
    case TROUPE_BINOP_SUB:
    case TROUPE_BINOP_MUL:
    case TROUPE_BINOP_DIV:
        return s_arith(c, op, a, b, out);
    case TROUPE_BINOP_MOD:
        if (c->kind == S_K_INT) /* infix % */
            return s_arith(c, op, a, b, out);
        break;
    case TROUPE_BINOP_CMPLT:
    case TROUPE_BINOP_CMPEQ:
    case TROUPE_BINOP_CMPNE:
        *out = s_compare(c, op, a, b);
        return TROUPE_OK;
    default:
        break;
    }
    /* Function calls: the arguments convert to the parameter types. */
    if (c->kind == S_K_F32 || c->kind == S_K_F64) {
        s_val_t x = s_to_ctx(c, a), y = s_to_ctx(c, b);
        bool ok = c->kind == S_K_F32 ? s_binop_float(op, x.f, y.f, &out->f)
                                     : s_binop_double(op, x.d, y.d, &out->d);
        return ok ? TROUPE_OK : s_undefined("binop", name, c->prec);
    }
    /* Integers. */
    switch (op) {
    case TROUPE_BINOP_TO_POW_OF: /* (($T)pow((double)(a), (double)(b))) */
        out->u = s_int_from_double(c, pow(s_own_double(c, a), s_own_double(c, b)));
        return TROUPE_OK;
    case TROUPE_BINOP_SATUR01_GATE: /* no integer lies strictly inside (0, 1) */
        out->u = 0;
        return TROUPE_OK;
    case TROUPE_BINOP_MAX:
    case TROUPE_BINOP_MIN:
        out->u = s_int_maxmin(c, s_to_ctx(c, a).u, s_to_ctx(c, b).u, op == TROUPE_BINOP_MAX);
        return TROUPE_OK;
    default:
        return s_undefined("binop", name, c->prec);
    }
}

static troupe_status_t s_unop(s_interp_t *I, troupe_unop_t op, const troupe_sc_t *ea,
                              const s_cp_t *c, s_val_t *out)
{
    const char *name = troupe_unop_name(op);
    memset(out, 0, sizeof *out);
    if (!troupe_unop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "unop value %d out of range", (int)op);
    if (op == TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1) {
        if (c->kind == S_K_U4)
            return s_undefined("unop", name, c->prec);
        s_cp_t u4 = s_cp(TROUPE_PREC_UINT4X32);
        s_val_t x;
        TROUPE_RETURN_IF_ERROR(s_eval(I, ea, &u4, &x));
        _Alignas(16) unsigned char elem[16];
        TROUPE_RETURN_IF_ERROR(troupe_uint4x32_to_prec_uniform1(c->prec, x.x, elem));
        *out = s_load(c->prec, elem);
        return TROUPE_OK;
    }
    s_val_t a;
    TROUPE_RETURN_IF_ERROR(s_eval(I, ea, c, &a));
    if (c->kind == S_K_U4) {
        if (op != TROUPE_UNOP_IDENTITY)
            return s_undefined("unop", name, c->prec);
        *out = a;
        return TROUPE_OK;
    }
    /* Operators keeping or giving C int: (x), (-(x)), ((x) == 0), and relu on unsigned
     * storage, which is the identity. */
    if (op == TROUPE_UNOP_IDENTITY ||
        (op == TROUPE_UNOP_RELU && c->kind == S_K_INT && c->storage_uint)) {
        *out = a;
        return TROUPE_OK;
    }
    if (op == TROUPE_UNOP_NOT) {
        *out = s_cint(s_truthy(c, a) ? 0 : 1);
        return TROUPE_OK;
    }
    if (op == TROUPE_UNOP_NEG && a.ci) {
        *out = s_cint((int32_t)(0u - (uint32_t)s_ival(a)));
        return TROUPE_OK;
    }
    if (c->kind == S_K_F32 || c->kind == S_K_F64) {
        s_val_t x = s_to_ctx(c, a);
        bool ok =
            c->kind == S_K_F32 ? s_unop_float(op, x.f, &out->f) : s_unop_double(op, x.d, &out->d);
        return ok ? TROUPE_OK : s_undefined("unop", name, c->prec);
    }
    /* Integers: typed helpers take the context value; libm calls take (double)(x) of the
     * operand's own type and convert the result to the storage type. */
    uint64_t x = s_to_ctx(c, a).u;
    double d;
    switch (op) {
    case TROUPE_UNOP_RELU: /* signed storage (unsigned is the identity, above) */
        out->u = s_int_maxmin(c, 0, x, true);
        return TROUPE_OK;
    case TROUPE_UNOP_SATUR01:
        out->u = c->storage_uint ? s_int_maxmin(c, 1, x, false)
                                 : s_int_maxmin(c, 1, s_int_maxmin(c, 0, x, true), false);
        return TROUPE_OK;
    case TROUPE_UNOP_NEG:
        out->u = s_norm(c, 0 - x);
        return TROUPE_OK;
    default:
        if (!s_unop_double(op, s_own_double(c, a), &d))
            return s_undefined("unop", name, c->prec);
        out->u = s_int_from_double(c, d);
        return TROUPE_OK;
    }
}

/* Where's condition computes in its own precision (ops.h homogeneity rule): a GET's or local
 * scope's node precision, else the context precision (int64 under a uint4x32 context). */
static troupe_prec_t s_natural_prec(s_interp_t *I, const troupe_sc_t *e, troupe_prec_t ctx)
{
    switch (e->kind) {
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        return e->u.get.tn->prec;
    case TROUPE_SC_LOCAL_SCOPE:
        return e->u.local_scope.tn->prec;
    case TROUPE_SC_GET_LOCAL: {
        s_scope_t *sc = s_find_scope(I, e->u.get_local.id);
        if (sc != NULL)
            return sc->prec;
        break;
    }
    default:
        break;
    }
    return ctx == TROUPE_PREC_UINT4X32 ? TROUPE_PREC_INT64 : ctx;
}

static troupe_status_t s_ternop(s_interp_t *I, troupe_ternop_t op, troupe_sc_t *const *args,
                                const s_cp_t *c, s_val_t *out)
{
    memset(out, 0, sizeof *out);
    if (!troupe_ternop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "ternop value %d out of range", (int)op);
    s_val_t a, b, d;
    if (op == TROUPE_TERNOP_WHERE) { /* ((a) != 0 ? (b) : (c)): one branch runs */
        s_cp_t cc = s_cp(s_natural_prec(I, args[0], c->prec));
        if (cc.kind == S_K_U4)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "ternop where: a condition of precision uint4x32 is not "
                                 "supported");
        TROUPE_RETURN_IF_ERROR(s_eval(I, args[0], &cc, &a));
        bool t = s_truthy(&cc, a);
        TROUPE_RETURN_IF_ERROR(s_eval(I, t ? args[1] : args[2], c, &b));
        *out = s_common(c, b, t ? args[2] : args[1]);
        return TROUPE_OK;
    }
    if (c->kind == S_K_U4)
        return s_undefined("ternop", troupe_ternop_name(op), c->prec);
    TROUPE_RETURN_IF_ERROR(s_eval(I, args[0], c, &a));
    TROUPE_RETURN_IF_ERROR(s_eval(I, args[1], c, &b));
    TROUPE_RETURN_IF_ERROR(s_eval(I, args[2], c, &d));
    /* FMA: fmaf/fma for floats, ((a) * (b) + (c)) for integers */
    if (c->kind == S_K_F32) {
        out->f = fmaf(s_to_ctx(c, a).f, s_to_ctx(c, b).f, s_to_ctx(c, d).f);
        return TROUPE_OK;
    }
    if (c->kind == S_K_F64) {
        out->d = fma(s_to_ctx(c, a).d, s_to_ctx(c, b).d, s_to_ctx(c, d).d);
        return TROUPE_OK;
    }
    s_val_t prod;
    TROUPE_RETURN_IF_ERROR(s_arith(c, TROUPE_BINOP_MUL, a, b, &prod));
    return s_arith(c, TROUPE_BINOP_ADD, prod, d, out);
}

/* An int64 value (constant bits, embedded index) in context c. */
static s_val_t s_from_int64(int64_t v, const s_cp_t *c)
{
    s_val_t w;
    memset(&w, 0, sizeof w);
    w.u = (uint64_t)v;
    _Alignas(8) unsigned char elem[8];
    memcpy(elem, &w.u, sizeof w.u);
    return s_convert(TROUPE_PREC_INT64, w, elem, c->prec);
}

static troupe_status_t s_eval(s_interp_t *I, const troupe_sc_t *e, const s_cp_t *c, s_val_t *out)
{
    memset(out, 0, sizeof *out);
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        if (!TROUPE__VEC_RESERVE(I->scopes, I->scopes_cap, I->nscopes + 1))
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory (local scopes)");
        s_scope_t *sc = &I->scopes[I->nscopes++];
        memset(sc, 0, sizeof *sc);
        sc->id = e->u.local_scope.id;
        sc->prec = e->u.local_scope.tn->prec;
        sc->cprec = troupe_prec_compute(sc->prec);
        troupe_status_t st = s_exec(I, e->u.local_scope.body);
        sc = &I->scopes[--I->nscopes]; /* the array may have moved */
        if (st != TROUPE_OK)
            return st;
        *out = s_convert(sc->cprec, s_load(sc->cprec, sc->storage), sc->storage, c->prec);
        return TROUPE_OK;
    }
    case TROUPE_SC_GET_LOCAL: {
        s_scope_t *sc = s_find_scope(I, e->u.get_local.id);
        if (sc == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "get_local %" PRId32 " outside its scope",
                                 e->u.get_local.id);
        *out = s_convert(sc->cprec, s_load(sc->cprec, sc->storage), sc->storage, c->prec);
        return TROUPE_OK;
    }
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER: {
        const troupe_tnode_t *tn = e->u.get.tn;
        bool merge = e->kind == TROUPE_SC_GET_MERGE_BUFFER;
        unsigned char *p;
        TROUPE_RETURN_IF_ERROR(
            s_elem(I, tn, e->u.get.idcs, merge, merge ? "merge-buffer read" : "read", &p));
        *out = s_convert(tn->prec, s_load(tn->prec, p), p, c->prec);
        return TROUPE_OK;
    }
    case TROUPE_SC_TERNOP:
        return s_ternop(I, (troupe_ternop_t)e->u.op.op, e->u.op.args, c, out);
    case TROUPE_SC_BINOP:
        return s_binop(I, (troupe_binop_t)e->u.op.op, e->u.op.args[0], e->u.op.args[1], c, out);
    case TROUPE_SC_UNOP:
        return s_unop(I, (troupe_unop_t)e->u.op.op, e->u.op.args[0], c, out);
    case TROUPE_SC_CONSTANT: {
        double k = e->u.constant;
        switch (c->kind) {
        case S_K_F32:
            out->f = (float)k;
            break;
        case S_K_F64:
            out->d = k;
            break;
        case S_K_INT:
            out->u = s_norm(c, s_double_to_int(c->prec, k));
            break;
        case S_K_U4: /* the truncated, saturated int64 value as {lo, hi, 0, 0} */
            *out = s_from_int64((int64_t)s_double_to_int(TROUPE_PREC_INT64, k), c);
            break;
        }
        return TROUPE_OK;
    }
    case TROUPE_SC_CONSTANT_BITS:
        *out = s_from_int64(e->u.constant_bits, c);
        return TROUPE_OK;
    case TROUPE_SC_EMBED_INDEX: {
        const troupe_axis_index_t *ix = &e->u.embed_index;
        int64_t v = ix->offset;
        bool ovf = false;
        for (int k = 0; k < ix->nterms; k++) {
            int64_t prod;
            ovf |= __builtin_mul_overflow(ix->terms[k].coeff, I->vals[ix->terms[k].sym], &prod);
            ovf |= __builtin_add_overflow(v, prod, &v);
        }
        if (ovf)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "embedded index overflows int64");
        if (c->kind == S_K_U4) { /* the index precision is uint32: spread its low 32 bits */
            uint32_t lo = (uint32_t)(uint64_t)v;
            TROUPE_RETURN_IF_ERROR(troupe_prec_bits_to_uint4x32(TROUPE_PREC_UINT32, &lo, &out->x));
            return TROUPE_OK;
        }
        *out = s_from_int64(v, c);
        return TROUPE_OK;
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown scalar kind %d", (int)e->kind);
}

/* BIND_INDEX: the value of tn[idcs] in 0..range-1 into *out, else the gather failure. */
static troupe_status_t s_bind_value(s_interp_t *I, const troupe_ll_t *s, int64_t *out)
{
    const troupe_tnode_t *tn = s->u.bind_index.tn;
    unsigned char *p;
    TROUPE_RETURN_IF_ERROR(s_elem(I, tn, s->u.bind_index.idcs, false, "gather index read", &p));
    double d = 0;
    int64_t v = 0;
    bool ok;
    switch (tn->prec) {
    case TROUPE_PREC_BYTE: v = *(const uint8_t *)p; d = (double)v; break;
    case TROUPE_PREC_UINT16: { uint16_t x; memcpy(&x, p, 2); v = x; d = (double)v; break; }
    case TROUPE_PREC_INT32: { int32_t x; memcpy(&x, p, 4); v = x; d = (double)v; break; }
    case TROUPE_PREC_UINT32: { uint32_t x; memcpy(&x, p, 4); v = x; d = (double)v; break; }
    case TROUPE_PREC_INT64: { memcpy(&v, p, 8); d = (double)v; break; }
    case TROUPE_PREC_UINT64: {
        uint64_t x;
        memcpy(&x, p, 8);
        v = x > (uint64_t)INT64_MAX ? -1 : (int64_t)x;
        d = (double)x;
        break;
    }
    case TROUPE_PREC_SINGLE: { float x; memcpy(&x, p, 4); d = x; break; }
    case TROUPE_PREC_DOUBLE: memcpy(&d, p, 8); break;
    default:
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "gather index node #%" PRId32 " has precision %s, not an integer one",
                             tn->id, troupe_prec_name(tn->prec));
    }
    if (tn->prec == TROUPE_PREC_SINGLE || tn->prec == TROUPE_PREC_DOUBLE) {
        ok = d >= 0 && d < (double)s->u.bind_index.range && d == (double)(int64_t)d;
        v = ok ? (int64_t)d : -1;
    } else {
        ok = v >= 0 && v < s->u.bind_index.range;
    }
    if (!ok) {
        int64_t cell[TROUPE_MAX_DIMS];
        for (int a = 0; a < tn->ndims; a++) {
            const troupe_axis_index_t *ix = &s->u.bind_index.idcs[a];
            cell[a] = ix->offset;
            for (int k = 0; k < ix->nterms; k++)
                cell[a] += ix->terms[k].coeff * I->vals[ix->terms[k].sym];
        }
        char iname[96], tname[96];
        troupe_tnode_debug_name(tn, iname, sizeof iname);
        if (s->u.bind_index.table != NULL)
            troupe_tnode_debug_name(s->u.bind_index.table, tname, sizeof tname);
        return troupe_ll_gather_failure(iname, tn->ndims, cell, d, s->u.bind_index.range,
                                        s->u.bind_index.table != NULL ? tname : NULL,
                                        s->u.bind_index.axis);
    }
    *out = v;
    return TROUPE_OK;
}

/* The check pass before a run: every BIND_INDEX reached through loops and sequences (not
 * through local scopes, which the optimizer never builds around a gather) is checked, with no
 * write, so a failing run writes nothing. */
static troupe_status_t s_check_binds(s_interp_t *I, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_check_binds(I, s->u.seq.items[i]));
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        if (!troupe_ll_has_bind_index(s->u.for_loop.body))
            return TROUPE_OK;
        int32_t sym = s->u.for_loop.sym;
        if (s->u.for_loop.from > s->u.for_loop.to)
            return TROUPE_OK;
        for (int64_t v = s->u.for_loop.from;; v++) {
            I->vals[sym] = v;
            TROUPE_RETURN_IF_ERROR(s_check_binds(I, s->u.for_loop.body));
            if (v == s->u.for_loop.to)
                break;
        }
        return TROUPE_OK;
    }
    case TROUPE_LL_BIND_INDEX: {
        int64_t v;
        TROUPE_RETURN_IF_ERROR(s_bind_value(I, s, &v));
        I->vals[s->u.bind_index.sym] = v;
        return s_check_binds(I, s->u.bind_index.body);
    }
    default:
        return TROUPE_OK;
    }
}

static troupe_status_t s_exec(s_interp_t *I, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return TROUPE_OK;
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_exec(I, s->u.seq.items[i]));
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        int32_t sym = s->u.for_loop.sym;
        if (s->u.for_loop.from > s->u.for_loop.to)
            return TROUPE_OK;
        for (int64_t v = s->u.for_loop.from;; v++) {
            I->vals[sym] = v;
            TROUPE_RETURN_IF_ERROR(s_exec(I, s->u.for_loop.body));
            if (v == s->u.for_loop.to)
                break;
        }
        return TROUPE_OK;
    }
    case TROUPE_LL_ZERO_OUT: {
        size_t slot = 0;
        TROUPE_RETURN_IF_ERROR(s_node_slot(I, s->u.zero_out, &slot));
        memset(I->bufs[slot], 0, s->u.zero_out->size_bytes);
        return TROUPE_OK;
    }
    case TROUPE_LL_SET: {
        const troupe_tnode_t *tn = s->u.set.tn;
        unsigned char *p;
        TROUPE_RETURN_IF_ERROR(s_elem(I, tn, s->u.set.idcs, false, "write", &p));
        s_cp_t c = s_cp(tn->prec);
        s_val_t v;
        TROUPE_RETURN_IF_ERROR(s_eval(I, s->u.set.value, &c, &v));
        s_store(tn->prec, p, s_to_ctx(&c, v));
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_FROM_VEC: {
        const troupe_tnode_t *tn = s->u.set_from_vec.tn;
        size_t count = troupe_vec_unop_output_count(s->u.set_from_vec.op, tn->prec);
        if (count == 0)
            return s_undefined("vec_unop", troupe_vec_unop_name(s->u.set_from_vec.op), tn->prec);
        if ((size_t)s->u.set_from_vec.length != count)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "vector write of node #%" PRId32 ": length %d but %s gives %zu "
                                 "%s values",
                                 tn->id, s->u.set_from_vec.length,
                                 troupe_vec_unop_name(s->u.set_from_vec.op), count,
                                 troupe_prec_name(tn->prec));
        int64_t off;
        TROUPE_RETURN_IF_ERROR(
            s_offset(I, tn, s->u.set_from_vec.idcs, "vector write", (int64_t)count - 1, &off));
        size_t slot = 0;
        TROUPE_RETURN_IF_ERROR(s_node_slot(I, tn, &slot));
        s_cp_t u4 = s_cp(TROUPE_PREC_UINT4X32);
        s_val_t x;
        TROUPE_RETURN_IF_ERROR(s_eval(I, s->u.set_from_vec.arg, &u4, &x));
        _Alignas(16) unsigned char tmp[16];
        size_t n = 0;
        TROUPE_RETURN_IF_ERROR(troupe_uint4x32_to_prec_uniform(tn->prec, x.x, tmp, &n));
        size_t esz = troupe_prec_size_bytes(tn->prec);
        memcpy(I->bufs[slot] + (size_t)off * esz, tmp, count * esz);
        return TROUPE_OK;
    }
    case TROUPE_LL_SET_LOCAL: {
        s_scope_t *sc = s_find_scope(I, s->u.set_local.id);
        if (sc == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "set_local %" PRId32 " outside its scope",
                                 s->u.set_local.id);
        int32_t id = s->u.set_local.id;
        s_cp_t c = s_cp(sc->prec);
        s_val_t v;
        TROUPE_RETURN_IF_ERROR(s_eval(I, s->u.set_local.value, &c, &v));
        sc = s_find_scope(I, id); /* evaluation may have grown the scope stack */
        s_store(sc->cprec, sc->storage, s_to_ctx(&c, v)); /* no small-float rounding */
        return TROUPE_OK;
    }
    case TROUPE_LL_BIND_INDEX: {
        int64_t v;
        TROUPE_RETURN_IF_ERROR(s_bind_value(I, s, &v));
        I->vals[s->u.bind_index.sym] = v;
        return s_exec(I, s->u.bind_index.body);
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown statement kind %d", (int)s->kind);
}

/* ---- setup ------------------------------------------------------------------------------- */

static void s_mark_ll(const troupe_ll_proc_t *proc, const troupe_ll_t *s, bool *need, bool *merge);

static void s_mark_node(const troupe_ll_proc_t *proc, const troupe_tnode_t *tn, bool *need)
{
    ptrdiff_t i = troupe_ll_proc_node_index(proc, tn);
    if (i >= 0)
        need[i] = true;
}

static void s_mark_sc(const troupe_ll_proc_t *proc, const troupe_sc_t *e, bool *need, bool *merge)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        s_mark_ll(proc, e->u.local_scope.body, need, merge);
        return;
    case TROUPE_SC_GET:
        s_mark_node(proc, e->u.get.tn, need);
        return;
    case TROUPE_SC_GET_MERGE_BUFFER:
        *merge = true;
        return;
    case TROUPE_SC_TERNOP:
        for (int i = 0; i < 3; i++)
            s_mark_sc(proc, e->u.op.args[i], need, merge);
        return;
    case TROUPE_SC_BINOP:
        for (int i = 0; i < 2; i++)
            s_mark_sc(proc, e->u.op.args[i], need, merge);
        return;
    case TROUPE_SC_UNOP:
        s_mark_sc(proc, e->u.op.args[0], need, merge);
        return;
    default:
        return;
    }
}

static void s_mark_ll(const troupe_ll_proc_t *proc, const troupe_ll_t *s, bool *need, bool *merge)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            s_mark_ll(proc, s->u.seq.items[i], need, merge);
        return;
    case TROUPE_LL_FOR:
        s_mark_ll(proc, s->u.for_loop.body, need, merge);
        return;
    case TROUPE_LL_ZERO_OUT:
        s_mark_node(proc, s->u.zero_out, need);
        return;
    case TROUPE_LL_SET:
        s_mark_node(proc, s->u.set.tn, need);
        s_mark_sc(proc, s->u.set.value, need, merge);
        return;
    case TROUPE_LL_SET_FROM_VEC:
        s_mark_node(proc, s->u.set_from_vec.tn, need);
        s_mark_sc(proc, s->u.set_from_vec.arg, need, merge);
        return;
    case TROUPE_LL_SET_LOCAL:
        s_mark_sc(proc, s->u.set_local.value, need, merge);
        return;
    case TROUPE_LL_BIND_INDEX:
        s_mark_node(proc, s->u.bind_index.tn, need);
        s_mark_ll(proc, s->u.bind_index.body, need, merge);
        return;
    default:
        return;
    }
}

static ptrdiff_t s_slot_by_id(const troupe_ll_proc_t *proc, int32_t id)
{
    size_t lo = 0, hi = proc->nnodes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (proc->nodes[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < proc->nnodes && proc->nodes[lo]->id == id ? (ptrdiff_t)lo : -1;
}

static troupe_status_t s_bind_statics(s_interp_t *I, const troupe_interp_args_t *args)
{
    const troupe_ll_proc_t *proc = I->proc;
    troupe_status_t st = TROUPE_OK;
    bool *have = troupe_calloc((size_t)(proc->nsyms > 0 ? proc->nsyms : 1), sizeof *have);
    if (have == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory (static symbols)");
    size_t n = args ? args->nstatics : 0;
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        const troupe_interp_static_t *a = &args->statics[i];
        int32_t sym = a->sym;
        if (sym < 0 && a->name != NULL)
            sym = troupe_ll_proc_find_symbol(proc, a->name);
        if (sym < 0 || sym >= proc->nsyms) {
            st = troupe__error(
                TROUPE_INVALID_ARGUMENT, "static value %zu names no symbol of procedure %s (%s%s)",
                i, proc->name, a->name ? "name " : "id ", a->name ? a->name : "out of range");
            break;
        }
        const troupe_ll_symbol_t *s = &proc->syms[sym];
        if (!s->is_static)
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "symbol '%s' is a loop iterator, not a static symbol", s->name);
        else if (have[sym])
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "static symbol '%s' given twice", s->name);
        else if (a->value < 0 || (s->static_range > 0 && a->value >= s->static_range))
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "static symbol '%s' = %" PRId64 " outside its range 0..%" PRId64,
                               s->name, a->value,
                               s->static_range > 0 ? s->static_range - 1 : INT64_MAX);
        else {
            have[sym] = true;
            I->vals[sym] = a->value;
        }
    }
    for (int32_t i = 0; i < proc->nsyms && st == TROUPE_OK; i++)
        if (proc->syms[i].is_static && !have[i])
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "static symbol '%s' has no value",
                               proc->syms[i].name);
    troupe_free(have);
    return st;
}

static troupe_status_t s_bind_buffers(s_interp_t *I, const troupe_interp_args_t *args)
{
    const troupe_ll_proc_t *proc = I->proc;
    size_t nn = proc->nnodes > 0 ? proc->nnodes : 1;
    troupe_status_t st = TROUPE_OK;
    bool *need = troupe_calloc(nn, sizeof *need);
    if (need == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory (buffers)");
    bool merge = false;
    s_mark_ll(proc, proc->body, need, &merge);
    size_t nb = args ? args->nbuffers : 0;
    for (size_t i = 0; i < nb && st == TROUPE_OK; i++) {
        const troupe_interp_buffer_t *b = &args->buffers[i];
        if (b->tn == NULL || b->data == NULL) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "buffer %zu has a NULL %s", i,
                               b->tn == NULL ? "node" : "data pointer");
            break;
        }
        ptrdiff_t slot = s_slot_by_id(proc, b->tn->id);
        if (slot < 0)
            continue; /* a node this procedure does not mention */
        if (I->bufs[slot] != NULL) {
            char name[96];
            s_name(b->tn, name, sizeof name);
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "node %s: two buffers supplied", name);
            break;
        }
        I->bufs[slot] = b->data;
    }
    for (size_t i = 0; i < proc->nnodes && st == TROUPE_OK; i++) {
        if (!need[i] || I->bufs[i] != NULL)
            continue;
        troupe_tnode_t *tn = proc->nodes[i];
        if (troupe_tnode_known_not_materialized(tn)) {
            I->scratch[i] = troupe_calloc(1, tn->size_bytes);
            if (I->scratch[i] == NULL)
                st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                                   "out of memory (scratch buffer of %zu bytes)", tn->size_bytes);
            I->bufs[i] = I->scratch[i];
            continue;
        }
        char name[96], mode[96] = "unset";
        troupe_memory_mode_t mm;
        int32_t prov = 0;
        s_name(tn, name, sizeof name);
        if (troupe_tnode_get_memory_mode(tn, &mm, &prov)) {
            size_t k = troupe_memory_mode_to_string(mm, mode, sizeof mode);
            if (k < sizeof mode)
                snprintf(mode + k, sizeof mode - k, "/%" PRId32, prov);
        }
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "node %s: no buffer supplied (memory mode %s; only Virtual and Local "
                           "nodes get scratch buffers)",
                           name, mode);
    }
    if (st == TROUPE_OK && merge && (args == NULL || args->merge_buffer == NULL))
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "procedure %s reads a merge buffer but none was supplied", proc->name);
    if (st == TROUPE_OK && args != NULL)
        I->merge = args->merge_buffer;
    troupe_free(need);
    return st;
}

troupe_status_t troupe_interp_run(const troupe_ll_proc_t *proc, const troupe_interp_args_t *args)
{
    if (proc == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_interp_run: proc is NULL");
    if ((args != NULL) && ((args->nbuffers > 0 && args->buffers == NULL) ||
                           (args->nstatics > 0 && args->statics == NULL)))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_interp_run: NULL array in args");
    TROUPE_RETURN_IF_ERROR(troupe_ll_proc_validate(proc));
    troupe_status_t st = TROUPE_OK;
    s_interp_t I;
    memset(&I, 0, sizeof I);
    I.proc = proc;
    size_t nn = proc->nnodes > 0 ? proc->nnodes : 1;
    I.bufs = troupe_calloc(nn, sizeof *I.bufs);
    I.scratch = troupe_calloc(nn, sizeof *I.scratch);
    I.vals = troupe_calloc((size_t)(proc->nsyms > 0 ? proc->nsyms : 1), sizeof *I.vals);
    if (I.bufs == NULL || I.scratch == NULL || I.vals == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory (interpreter state)");
        goto done;
    }
    if ((st = s_bind_statics(&I, args)) != TROUPE_OK)
        goto done;
    if ((st = s_bind_buffers(&I, args)) != TROUPE_OK)
        goto done;
    if (troupe_ll_has_bind_index(proc->body) && (st = s_check_binds(&I, proc->body)) != TROUPE_OK)
        goto done;
    st = s_exec(&I, proc->body);
done:
    if (I.scratch != NULL)
        for (size_t i = 0; i < proc->nnodes; i++)
            troupe_free(I.scratch[i]);
    troupe_free(I.scratch);
    troupe_free(I.bufs);
    troupe_free(I.vals);
    troupe_free(I.scopes);
    return st;
}
