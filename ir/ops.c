/* troupe — operations of seed Ops (see ir/ops.h).
 *
 * Layout: name tables; algebra (neutral elements, assignment ops, homogeneity); the double
 * interpreters; the C syntax tables, one row per op with a template per compute class, expanded
 * into caller-owned buffers; Threefry; counter spreading; uniform conversions.
 *
 * The code generators' prelude (compiler/cgen_builtins.c, troupe_cgen_c_prelude) restates the
 * Threefry, spreading and uniform functions for generated code. Both copies follow the same
 * rules, stated once in ops.h; the test suite compiles the prelude and compares it with the
 * host functions on many inputs, so the two cannot drift apart unnoticed.
 *
 * Source: seed module Ops (004); OCANNL_NOTES §8.1, §8.3, §8.4; OCANNL arrayjit ops.ml and
 * builtins (read for semantics, not copied); Random123 threefry.h conventions for the
 * reference variant.
 */
#include "ir/ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------------------ */

static const char *const s_binop_names[TROUPE_BINOP_COUNT] = {
    [TROUPE_BINOP_ARG1] = "arg1",
    [TROUPE_BINOP_ARG2] = "arg2",
    [TROUPE_BINOP_ADD] = "add",
    [TROUPE_BINOP_SUB] = "sub",
    [TROUPE_BINOP_MUL] = "mul",
    [TROUPE_BINOP_DIV] = "div",
    [TROUPE_BINOP_TO_POW_OF] = "to_pow_of",
    [TROUPE_BINOP_RELU_GATE] = "relu_gate",
    [TROUPE_BINOP_SATUR01_GATE] = "satur01_gate",
    [TROUPE_BINOP_MAX] = "max",
    [TROUPE_BINOP_MIN] = "min",
    [TROUPE_BINOP_MOD] = "mod",
    [TROUPE_BINOP_CMPLT] = "cmplt",
    [TROUPE_BINOP_CMPEQ] = "cmpeq",
    [TROUPE_BINOP_CMPNE] = "cmpne",
    [TROUPE_BINOP_OR] = "or",
    [TROUPE_BINOP_AND] = "and",
    [TROUPE_BINOP_THREEFRY4X32_CRYPTO] = "threefry4x32_crypto",
    [TROUPE_BINOP_THREEFRY4X32_LIGHT] = "threefry4x32_light",
};

static const char *const s_unop_names[TROUPE_UNOP_COUNT] = {
    [TROUPE_UNOP_IDENTITY] = "identity",
    [TROUPE_UNOP_RELU] = "relu",
    [TROUPE_UNOP_SATUR01] = "satur01",
    [TROUPE_UNOP_EXP] = "exp",
    [TROUPE_UNOP_LOG] = "log",
    [TROUPE_UNOP_EXP2] = "exp2",
    [TROUPE_UNOP_LOG2] = "log2",
    [TROUPE_UNOP_SIN] = "sin",
    [TROUPE_UNOP_COS] = "cos",
    [TROUPE_UNOP_SQRT] = "sqrt",
    [TROUPE_UNOP_RECIP] = "recip",
    [TROUPE_UNOP_RECIP_SQRT] = "recip_sqrt",
    [TROUPE_UNOP_NEG] = "neg",
    [TROUPE_UNOP_TANH_APPROX] = "tanh_approx",
    [TROUPE_UNOP_NOT] = "not",
    [TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1] = "uint4x32_to_prec_uniform1",
};

static const char *const s_vec_unop_names[TROUPE_VEC_UNOP_COUNT] = {
    [TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM] = "uint4x32_to_prec_uniform",
};

static const char *const s_ternop_names[TROUPE_TERNOP_COUNT] = {
    [TROUPE_TERNOP_WHERE] = "where",
    [TROUPE_TERNOP_FMA] = "fma",
};

/* Finds `name` in `names`; on failure records a message listing the valid names. */
static troupe_status_t s_parse(const char *kind, const char *const *names, int count,
                               const char *name, int *out_index)
{
    char valid[512];
    size_t used = 0;
    troupe_status_t status = TROUPE_INVALID_ARGUMENT;
    if (name != NULL) {
        for (int i = 0; i < count; i++) {
            if (strcmp(name, names[i]) == 0) {
                *out_index = i;
                status = TROUPE_OK;
                goto done;
            }
        }
    }
    valid[0] = '\0';
    for (int i = 0; i < count && used < sizeof valid; i++) {
        int n = snprintf(valid + used, sizeof valid - used, "%s%s", i ? ", " : "", names[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    if (name == NULL)
        status = troupe__error(TROUPE_INVALID_ARGUMENT, "%s name is NULL; expected one of: %s",
                               kind, valid);
    else
        status = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "unknown %s \"%.200s\"; expected one of: %s", kind, name, valid);
done:
    return status;
}

/* The functions of an op family over its name table: troupe_<family>_is_valid, _name (the
 * table's entry, "invalid" out of range) and _of_string (s_parse). */
#define S_FAMILY(family, names, count)                                                             \
    bool troupe_##family##_is_valid(troupe_##family##_t op)                                        \
    {                                                                                              \
        return (int)op >= 0 && (int)op < count;                                                    \
    }                                                                                              \
    const char *troupe_##family##_name(troupe_##family##_t op)                                     \
    {                                                                                              \
        return troupe_##family##_is_valid(op) ? names[op] : "invalid";                             \
    }                                                                                              \
    troupe_status_t troupe_##family##_of_string(const char *name, troupe_##family##_t *out)        \
    {                                                                                              \
        int i = 0;                                                                                 \
        troupe_status_t s = s_parse(#family, names, count, name, &i);                              \
        if (s == TROUPE_OK)                                                                        \
            *out = (troupe_##family##_t)i;                                                         \
        return s;                                                                                  \
    }

S_FAMILY(binop, s_binop_names, TROUPE_BINOP_COUNT)
S_FAMILY(unop, s_unop_names, TROUPE_UNOP_COUNT)
S_FAMILY(vec_unop, s_vec_unop_names, TROUPE_VEC_UNOP_COUNT)
S_FAMILY(ternop, s_ternop_names, TROUPE_TERNOP_COUNT)

/* ---- algebra ---------------------------------------------------------------------------- */

troupe_status_t troupe_binop_neutral(troupe_binop_t op, double *out)
{
    troupe_status_t status = TROUPE_OK;
    double n = 0.0;
    switch (op) {
    case TROUPE_BINOP_ARG1:
    case TROUPE_BINOP_ARG2:
    case TROUPE_BINOP_ADD:
    case TROUPE_BINOP_SUB:
    case TROUPE_BINOP_OR:
        n = 0.0;
        break;
    case TROUPE_BINOP_MUL:
    case TROUPE_BINOP_DIV:
    case TROUPE_BINOP_TO_POW_OF:
    case TROUPE_BINOP_RELU_GATE:
    case TROUPE_BINOP_AND:
        n = 1.0;
        break;
    case TROUPE_BINOP_SATUR01_GATE:
        n = 0.5;
        break;
    case TROUPE_BINOP_MAX:
        n = -INFINITY;
        break;
    case TROUPE_BINOP_MIN:
        n = INFINITY;
        break;
    case TROUPE_BINOP_MOD:
    case TROUPE_BINOP_CMPLT:
    case TROUPE_BINOP_CMPEQ:
    case TROUPE_BINOP_CMPNE:
    case TROUPE_BINOP_THREEFRY4X32_CRYPTO:
    case TROUPE_BINOP_THREEFRY4X32_LIGHT:
        status = troupe__error(TROUPE_FAILED_PRECONDITION, "binop %s has no neutral element",
                               s_binop_names[op]);
        break;
    default:
        status = troupe__error(TROUPE_INVALID_ARGUMENT, "binop value %d out of range", (int)op);
        break;
    }
    if (status == TROUPE_OK)
        *out = n;
    return status;
}

bool troupe_binop_neutral_is_left(troupe_binop_t op)
{
    return op == TROUPE_BINOP_RELU_GATE || op == TROUPE_BINOP_SATUR01_GATE ||
           op == TROUPE_BINOP_ARG2;
}

bool troupe_is_assign_op(troupe_binop_t op)
{
    switch (op) {
    case TROUPE_BINOP_ARG2:
    case TROUPE_BINOP_ADD:
    case TROUPE_BINOP_SUB:
    case TROUPE_BINOP_MUL:
    case TROUPE_BINOP_DIV:
    case TROUPE_BINOP_TO_POW_OF:
    case TROUPE_BINOP_RELU_GATE:
    case TROUPE_BINOP_SATUR01_GATE:
    case TROUPE_BINOP_MAX:
    case TROUPE_BINOP_MIN:
    case TROUPE_BINOP_OR:
    case TROUPE_BINOP_AND:
        return true;
    default:
        return false;
    }
}

bool troupe_is_homogeneous_prec_unop(troupe_unop_t op)
{
    return op != TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1;
}

bool troupe_is_homogeneous_prec_vec_unop(troupe_vec_unop_t op)
{
    return op != TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM;
}

bool troupe_is_homogeneous_prec_binop(troupe_binop_t op)
{
    (void)op;
    return true;
}

bool troupe_is_homogeneous_prec_ternop(troupe_ternop_t op)
{
    return op != TROUPE_TERNOP_WHERE;
}

/* ---- interpreters ----------------------------------------------------------------------- */

static double s_bool(bool b)
{
    return b ? 1.0 : 0.0;
}

double troupe_interpret_binop(troupe_binop_t op, double a, double b)
{
    switch (op) {
    case TROUPE_BINOP_ARG1:
        return a;
    case TROUPE_BINOP_ARG2:
        return b;
    case TROUPE_BINOP_ADD:
        return a + b;
    case TROUPE_BINOP_SUB:
        return a - b;
    case TROUPE_BINOP_MUL:
        return a * b;
    case TROUPE_BINOP_DIV:
        return a / b;
    case TROUPE_BINOP_TO_POW_OF:
        return pow(a, b);
    case TROUPE_BINOP_RELU_GATE:
        return a > 0.0 ? b : 0.0;
    case TROUPE_BINOP_SATUR01_GATE:
        return (a > 0.0 && a < 1.0) ? b : 0.0;
    case TROUPE_BINOP_MAX:
        return troupe_fmax(a, b);
    case TROUPE_BINOP_MIN:
        return troupe_fmin(a, b);
    case TROUPE_BINOP_MOD:
        return fmod(a, b);
    case TROUPE_BINOP_CMPLT:
        return s_bool(a < b);
    case TROUPE_BINOP_CMPEQ:
        return s_bool(a == b);
    case TROUPE_BINOP_CMPNE:
        return s_bool(a != b);
    case TROUPE_BINOP_OR:
        return s_bool(a != 0.0 || b != 0.0);
    case TROUPE_BINOP_AND:
        return s_bool(a != 0.0 && b != 0.0);
    default: /* threefry (uint4x32 only), out of range */
        return NAN;
    }
}

double troupe_interpret_unop(troupe_unop_t op, double a)
{
    switch (op) {
    case TROUPE_UNOP_IDENTITY:
        return a;
    case TROUPE_UNOP_RELU:
        return troupe_fmax(0.0, a);
    case TROUPE_UNOP_SATUR01:
        return troupe_fmin(1.0, troupe_fmax(0.0, a));
    case TROUPE_UNOP_EXP:
        return exp(a);
    case TROUPE_UNOP_LOG:
        return log(a);
    case TROUPE_UNOP_EXP2:
        return exp2(a);
    case TROUPE_UNOP_LOG2:
        return log2(a);
    case TROUPE_UNOP_SIN:
        return sin(a);
    case TROUPE_UNOP_COS:
        return cos(a);
    case TROUPE_UNOP_SQRT:
        return sqrt(a);
    case TROUPE_UNOP_RECIP:
        return 1.0 / a;
    case TROUPE_UNOP_RECIP_SQRT:
        return 1.0 / sqrt(a);
    case TROUPE_UNOP_NEG:
        return -a;
    case TROUPE_UNOP_TANH_APPROX:
        return tanh(a);
    case TROUPE_UNOP_NOT:
        return s_bool(a == 0.0);
    default: /* uint4x32_to_prec_uniform1 (uint4x32 argument), out of range */
        return NAN;
    }
}

double troupe_interpret_ternop(troupe_ternop_t op, double a, double b, double c)
{
    switch (op) {
    case TROUPE_TERNOP_WHERE:
        return a != 0.0 ? b : c;
    case TROUPE_TERNOP_FMA:
        return fma(a, b, c);
    default:
        return NAN;
    }
}

troupe_status_t troupe_interpret_binop_uint4x32(troupe_binop_t op, troupe_uint4x32_t a,
                                                troupe_uint4x32_t b, troupe_uint4x32_t *out)
{
    troupe_status_t status = TROUPE_OK;
    switch (op) {
    case TROUPE_BINOP_ARG1:
        *out = a;
        break;
    case TROUPE_BINOP_ARG2:
        *out = b;
        break;
    case TROUPE_BINOP_THREEFRY4X32_CRYPTO:
        *out = troupe_threefry4x32_crypto(a, b);
        break;
    case TROUPE_BINOP_THREEFRY4X32_LIGHT:
        *out = troupe_threefry4x32_light(a, b);
        break;
    default:
        status = troupe__error(TROUPE_INVALID_ARGUMENT, "binop %s is not defined on uint4x32",
                               troupe_binop_name(op));
        break;
    }
    return status;
}

/* ---- C syntax --------------------------------------------------------------------------- */

/* Compute classes: how a precision computes in generated C. */
typedef enum s_cls {
    S_CLS_F32 = 0, /* single, and half/bfloat16/fp8 computed in float */
    S_CLS_F64,     /* double */
    S_CLS_SINT,    /* int32, int64 */
    S_CLS_UINT,    /* byte, uint16, uint32, uint64 */
    S_CLS_U4,      /* uint4x32 */
    S_CLS_COUNT,
    S_CLS_NONE = -1, /* void, out of range */
} s_cls_t;

static s_cls_t s_class(troupe_prec_t p)
{
    switch (p) {
    case TROUPE_PREC_SINGLE:
    case TROUPE_PREC_HALF:
    case TROUPE_PREC_BFLOAT16:
    case TROUPE_PREC_FP8:
        return S_CLS_F32;
    case TROUPE_PREC_DOUBLE:
        return S_CLS_F64;
    case TROUPE_PREC_INT32:
    case TROUPE_PREC_INT64:
        return S_CLS_SINT;
    case TROUPE_PREC_BYTE:
    case TROUPE_PREC_UINT16:
    case TROUPE_PREC_UINT32:
    case TROUPE_PREC_UINT64:
        return S_CLS_UINT;
    case TROUPE_PREC_UINT4X32:
        return S_CLS_U4;
    default:
        return S_CLS_NONE;
    }
}

static bool s_is_small_float(troupe_prec_t p)
{
    return p == TROUPE_PREC_HALF || p == TROUPE_PREC_BFLOAT16 || p == TROUPE_PREC_FP8;
}

/* A template: up to 4 pieces; NULL piece[0] = not defined for that class. In a piece, "$T"
 * expands to the prec's C storage type and "$P" to its name. */
typedef struct s_tmpl {
    const char *piece[TROUPE_C_SYNTAX_MAX_PIECES];
} s_tmpl_t;

#define S_T2(a, b)                                                                                 \
    {                                                                                              \
        {                                                                                          \
            a, b, NULL, NULL                                                                       \
        }                                                                                          \
    }
#define S_T3(a, b, c)                                                                              \
    {                                                                                              \
        {                                                                                          \
            a, b, c, NULL                                                                          \
        }                                                                                          \
    }
#define S_T4(a, b, c, d)                                                                           \
    {                                                                                              \
        {                                                                                          \
            a, b, c, d                                                                             \
        }                                                                                          \
    }
#define S_NONE                                                                                     \
    {                                                                                              \
        {                                                                                          \
            NULL, NULL, NULL, NULL                                                                 \
        }                                                                                          \
    }
/* Row helpers: [F32, F64, SINT, UINT, U4]. */
#define S_ALL(t)                                                                                   \
    {                                                                                              \
        t, t, t, t, t                                                                              \
    }
#define S_NUM(t)                                                                                   \
    {                                                                                              \
        t, t, t, t, S_NONE                                                                         \
    }
#define S_FFI(f, d, i)                                                                             \
    {                                                                                              \
        f, d, i, i, S_NONE                                                                         \
    }
#define S_BIN_INFIX(op) S_NUM(S_T3("((", ") " op " (", "))"))
#define S_BIN_CALL(f, d, ipre, iin, isuf)                                                          \
    {                                                                                              \
        S_T3(f "((", "), (", "))"), S_T3(d "((", "), (", "))"), S_T3(ipre, iin, isuf),             \
            S_T3(ipre, iin, isuf), S_NONE                                                          \
    }
/* Integer unops computed in double and cast back. */
#define S_UN_MATH(f, d)                                                                            \
    {                                                                                              \
        S_T2(f "(", ")"), S_T2(d "(", ")"), S_T2("(($T)" d "((double)(", ")))"),                   \
            S_T2("(($T)" d "((double)(", ")))"), S_NONE                                            \
    }

static const s_tmpl_t s_binop_c[TROUPE_BINOP_COUNT][S_CLS_COUNT] = {
    [TROUPE_BINOP_ARG1] = S_ALL(S_T3("(1 ? (", ") : (", "))")),
    [TROUPE_BINOP_ARG2] = S_ALL(S_T3("(0 ? (", ") : (", "))")),
    [TROUPE_BINOP_ADD] = S_BIN_INFIX("+"),
    [TROUPE_BINOP_SUB] = S_BIN_INFIX("-"),
    [TROUPE_BINOP_MUL] = S_BIN_INFIX("*"),
    [TROUPE_BINOP_DIV] = S_BIN_INFIX("/"),
    [TROUPE_BINOP_TO_POW_OF] =
        S_BIN_CALL("powf", "pow", "(($T)pow((double)(", "), (double)(", ")))"),
    /* relu_gate and where go through helpers, never `c ? x : y` with loads in the arms: GCC
     * 12 at -O3 -march=native (AVX-512) vectorises such a select in a loop nest with masked
     * loads and gets it wrong for some trip counts (e.g. 2x4x10x10: 125 of 800 cells); a
     * call evaluates both arms, so the loads are plain. */
    [TROUPE_BINOP_RELU_GATE] = S_BIN_CALL("troupe_relu_gate_f", "troupe_relu_gate_d",
                                          "troupe_relu_gate_$P((", "), (", "))"),
    [TROUPE_BINOP_SATUR01_GATE] = S_BIN_CALL("troupe_satur01_gate_f", "troupe_satur01_gate_d",
                                             "((void)(", "), (void)(", "), ($T)0)"),
    [TROUPE_BINOP_MAX] = S_BIN_CALL("troupe_fmaxf", "troupe_fmax", "troupe_max_$P((", "), (", "))"),
    [TROUPE_BINOP_MIN] = S_BIN_CALL("troupe_fminf", "troupe_fmin", "troupe_min_$P((", "), (", "))"),
    [TROUPE_BINOP_MOD] = S_BIN_CALL("fmodf", "fmod", "((", ") % (", "))"),
    [TROUPE_BINOP_CMPLT] = S_BIN_INFIX("<"),
    [TROUPE_BINOP_CMPEQ] = S_BIN_INFIX("=="),
    [TROUPE_BINOP_CMPNE] = S_BIN_INFIX("!="),
    [TROUPE_BINOP_OR] = S_BIN_INFIX("||"),
    [TROUPE_BINOP_AND] = S_BIN_INFIX("&&"),
    [TROUPE_BINOP_THREEFRY4X32_CRYPTO] = {S_NONE, S_NONE, S_NONE, S_NONE,
                                          S_T3("troupe_threefry4x32_crypto((", "), (", "))")},
    [TROUPE_BINOP_THREEFRY4X32_LIGHT] = {S_NONE, S_NONE, S_NONE, S_NONE,
                                         S_T3("troupe_threefry4x32_light((", "), (", "))")},
};

/* TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1 depends on the precision itself: see s_uniform1_c. */
static const s_tmpl_t s_unop_c[TROUPE_UNOP_COUNT][S_CLS_COUNT] = {
    [TROUPE_UNOP_IDENTITY] = S_ALL(S_T2("(", ")")),
    [TROUPE_UNOP_RELU] = {S_T2("troupe_fmaxf(0.0f, (", "))"), S_T2("troupe_fmax(0.0, (", "))"),
                          S_T2("troupe_max_$P(0, (", "))"), S_T2("(", ")"), S_NONE},
    [TROUPE_UNOP_SATUR01] = {S_T2("troupe_fminf(1.0f, troupe_fmaxf(0.0f, (", ")))"),
                             S_T2("troupe_fmin(1.0, troupe_fmax(0.0, (", ")))"),
                             S_T2("troupe_min_$P(1, troupe_max_$P(0, (", ")))"),
                             S_T2("troupe_min_$P(1, (", "))"), S_NONE},
    [TROUPE_UNOP_EXP] = S_UN_MATH("troupe_expf", "exp"),
    [TROUPE_UNOP_LOG] = S_UN_MATH("logf", "log"),
    [TROUPE_UNOP_EXP2] = S_UN_MATH("exp2f", "exp2"),
    [TROUPE_UNOP_LOG2] = S_UN_MATH("log2f", "log2"),
    [TROUPE_UNOP_SIN] = S_UN_MATH("sinf", "sin"),
    [TROUPE_UNOP_COS] = S_UN_MATH("cosf", "cos"),
    [TROUPE_UNOP_SQRT] = S_UN_MATH("sqrtf", "sqrt"),
    [TROUPE_UNOP_RECIP] = S_FFI(S_T2("(1.0f / (", "))"), S_T2("(1.0 / (", "))"),
                                S_T2("(($T)(1.0 / (double)(", ")))")),
    [TROUPE_UNOP_RECIP_SQRT] = S_FFI(S_T2("(1.0f / sqrtf(", "))"), S_T2("(1.0 / sqrt(", "))"),
                                     S_T2("(($T)(1.0 / sqrt((double)(", "))))")),
    [TROUPE_UNOP_NEG] = S_NUM(S_T2("(-(", "))")),
    [TROUPE_UNOP_TANH_APPROX] = S_UN_MATH("troupe_tanhf", "tanh"),
    [TROUPE_UNOP_NOT] = S_NUM(S_T2("((", ") == 0)")),
};

static const s_tmpl_t s_ternop_c[TROUPE_TERNOP_COUNT][S_CLS_COUNT] = {
    [TROUPE_TERNOP_WHERE] = {S_T4("troupe_where_f(((", ") != 0), (", "), (", "))"),
                             S_T4("troupe_where_d(((", ") != 0), (", "), (", "))"),
                             S_T4("troupe_where_$P(((", ") != 0), (", "), (", "))"),
                             S_T4("troupe_where_$P(((", ") != 0), (", "), (", "))"),
                             S_T4("((", ") != 0 ? (", ") : (", "))")},
    [TROUPE_TERNOP_FMA] =
        S_FFI(S_T4("fmaf((", "), (", "), (", "))"), S_T4("fma((", "), (", "), (", "))"),
              S_T4("((", ") * (", ") + (", "))")),
};

/* Appends `src` to dst (capacity TROUPE_C_SYNTAX_PIECE_SIZE) expanding $T and $P for prec.
 * Returns false when it does not fit. */
static bool s_append(char *dst, const char *src, troupe_prec_t prec)
{
    size_t n = strlen(dst);
    for (const char *s = src; *s != '\0'; s++) {
        const char *sub = NULL;
        if (s[0] == '$' && s[1] == 'T')
            sub = troupe_prec_c_type(prec);
        else if (s[0] == '$' && s[1] == 'P')
            sub = troupe_prec_name(prec);
        if (sub != NULL) {
            size_t m = strlen(sub);
            if (n + m >= TROUPE_C_SYNTAX_PIECE_SIZE)
                return false;
            memcpy(dst + n, sub, m);
            n += m;
            s++;
        } else {
            if (n + 1 >= TROUPE_C_SYNTAX_PIECE_SIZE)
                return false;
            dst[n++] = *s;
        }
    }
    dst[n] = '\0';
    return true;
}

static void s_syntax_clear(troupe_c_syntax_t *out, int count)
{
    memset(out, 0, sizeof *out);
    out->count = count;
}

/* Fills `out` from `t` (count pieces) for prec. */
static troupe_status_t s_fill(const s_tmpl_t *t, int count, troupe_prec_t prec,
                              troupe_c_syntax_t *out)
{
    s_syntax_clear(out, count);
    for (int i = 0; i < count; i++) {
        if (!s_append(out->piece[i], t->piece[i] ? t->piece[i] : "", prec))
            return troupe__error(TROUPE_INTERNAL, "C syntax piece too long for %s",
                                 troupe_prec_name(prec));
    }
    return TROUPE_OK;
}

/* Checks op/prec and picks the class row; records why not. */
static troupe_status_t s_pick(const s_tmpl_t *row, const char *kind, const char *name,
                              troupe_prec_t prec, const s_tmpl_t **out)
{
    s_cls_t cls = s_class(prec);
    if (cls == S_CLS_NONE)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s %s: no C syntax for precision %s", kind,
                             name, troupe_prec_name(prec));
    if (row[cls].piece[0] == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s %s is not defined in precision %s", kind,
                             name, troupe_prec_name(prec));
    *out = &row[cls];
    return TROUPE_OK;
}

troupe_status_t troupe_binop_c_syntax(troupe_prec_t prec, troupe_binop_t op, troupe_c_syntax_t *out)
{
    const s_tmpl_t *t = NULL;
    if (!troupe_binop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "binop value %d out of range", (int)op);
    TROUPE_RETURN_IF_ERROR(s_pick(s_binop_c[op], "binop", s_binop_names[op], prec, &t));
    return s_fill(t, 3, prec, out);
}

/* uint4x32_to_prec_uniform1 into prec: the prelude's function, decoded to float for the
 * formats computed in float. */
static troupe_status_t s_uniform1_c(troupe_prec_t prec, troupe_c_syntax_t *out)
{
    static const s_tmpl_t plain = S_T2("troupe_uint4x32_to_$P_uniform((", "))");
    static const s_tmpl_t decoded =
        S_T2("troupe_$P_to_single(troupe_uint4x32_to_$P_uniform((", ")))");
    s_cls_t cls = s_class(prec);
    if (cls == S_CLS_NONE || cls == S_CLS_U4)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "unop uint4x32_to_prec_uniform1 is not defined into precision %s",
                             troupe_prec_name(prec));
    return s_fill(s_is_small_float(prec) ? &decoded : &plain, 2, prec, out);
}

troupe_status_t troupe_unop_c_syntax(troupe_prec_t prec, troupe_unop_t op, troupe_c_syntax_t *out)
{
    const s_tmpl_t *t = NULL;
    if (!troupe_unop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "unop value %d out of range", (int)op);
    if (op == TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1)
        return s_uniform1_c(prec, out);
    TROUPE_RETURN_IF_ERROR(s_pick(s_unop_c[op], "unop", s_unop_names[op], prec, &t));
    return s_fill(t, 2, prec, out);
}

troupe_status_t troupe_vec_unop_c_syntax(troupe_prec_t prec, troupe_vec_unop_t op,
                                         troupe_c_syntax_t *out)
{
    static const s_tmpl_t vec = S_T3("troupe_uint4x32_to_$P_uniform_vec((", "), (", "))");
    if (!troupe_vec_unop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "vec_unop value %d out of range", (int)op);
    if (troupe_vec_unop_output_count(op, prec) == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "vec_unop %s is not defined into precision %s", s_vec_unop_names[op],
                             troupe_prec_name(prec));
    return s_fill(&vec, 3, prec, out);
}

troupe_status_t troupe_ternop_c_syntax(troupe_prec_t prec, troupe_ternop_t op,
                                       troupe_c_syntax_t *out)
{
    const s_tmpl_t *t = NULL;
    if (!troupe_ternop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "ternop value %d out of range", (int)op);
    TROUPE_RETURN_IF_ERROR(s_pick(s_ternop_c[op], "ternop", s_ternop_names[op], prec, &t));
    return s_fill(t, 4, prec, out);
}

/* Builds prefix = a1 a2, suffix = b2 b1 (a1/b1 the outer layer). Pieces may use $T/$P of
 * `tprec` only through s_append. */
static troupe_status_t s_conv_layers(troupe_c_syntax_t *out, const char *outer_pre,
                                     troupe_prec_t outer_prec, const char *inner_pre,
                                     troupe_prec_t inner_prec, const char *inner_suf,
                                     const char *outer_suf)
{
    s_syntax_clear(out, 2);
    if (!s_append(out->piece[0], outer_pre, outer_prec) ||
        !s_append(out->piece[0], inner_pre, inner_prec) ||
        !s_append(out->piece[1], inner_suf, inner_prec) ||
        !s_append(out->piece[1], outer_suf, outer_prec))
        return troupe__error(TROUPE_INTERNAL, "conversion syntax too long");
    return TROUPE_OK;
}

troupe_status_t troupe_c_convert_precision(troupe_prec_t from, troupe_prec_t to,
                                           troupe_c_syntax_t *out)
{
    const char *outer_pre = "", *outer_suf = "", *inner_pre = "", *inner_suf = "";
    if (!troupe_prec_is_valid(from) || !troupe_prec_is_valid(to))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "precision value out of range (%d -> %d)",
                             (int)from, (int)to);
    if (from == to) {
        s_syntax_clear(out, 2);
        return TROUPE_OK;
    }
    if (from == TROUPE_PREC_VOID || to == TROUPE_PREC_VOID)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "no conversion between %s and %s",
                             troupe_prec_name(from), troupe_prec_name(to));
    if (to == TROUPE_PREC_UINT4X32)
        return s_conv_layers(out, "troupe_$P_to_uint4x32(", from, "", from, "", ")");
    if (from == TROUPE_PREC_UINT4X32) {
        /* Word 0 as a uint32, then the uint32 -> to conversion around it. */
        TROUPE_RETURN_IF_ERROR(troupe_c_convert_precision(TROUPE_PREC_UINT32, to, out));
        char pre[TROUPE_C_SYNTAX_PIECE_SIZE], suf[TROUPE_C_SYNTAX_PIECE_SIZE];
        memcpy(pre, out->piece[0], sizeof pre);
        memcpy(suf, out->piece[1], sizeof suf);
        return s_conv_layers(out, pre, TROUPE_PREC_VOID, "(", TROUPE_PREC_VOID, ").v[0]", suf);
    }
    /* Outer layer: produce `to`'s storage value. */
    if (s_is_small_float(to)) {
        outer_pre = "troupe_single_to_$P(";
        outer_suf = ")";
    } else if (!(s_is_small_float(from) && to == TROUPE_PREC_SINGLE)) {
        outer_pre = "($T)(";
        outer_suf = ")";
    }
    /* Inner layer: read `from` as a float when it is stored in a small format, or cast to
     * float before encoding into one. */
    if (s_is_small_float(from)) {
        inner_pre = "troupe_$P_to_single(";
        inner_suf = ")";
    } else if (s_is_small_float(to) && from != TROUPE_PREC_SINGLE) {
        inner_pre = "(float)(";
        inner_suf = ")";
    }
    return s_conv_layers(out, outer_pre, to, inner_pre, from, inner_suf, outer_suf);
}

/* ---- Threefry4x32 ----------------------------------------------------------------------- */

#define S_KS_PARITY 0x1BD11BDAu

static uint32_t s_rotl32(uint32_t x, unsigned n)
{
    n &= 31u;
    return n == 0 ? x : (x << n) | (x >> (32u - n));
}

/* Threefry-2x32 rotation constants, used by OCANNL's 4x32 variant on alternate rounds. */
static const unsigned s_ocannl_rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};

static void s_ocannl_round(uint32_t x[4], const unsigned r[4])
{
    uint32_t t;
    x[0] += x[1];
    x[1] = s_rotl32(x[1], r[0]) ^ x[0];
    x[2] += x[3];
    x[3] = s_rotl32(x[3], r[1]) ^ x[2];
    t = x[1];
    x[1] = x[3];
    x[3] = t;
    x[0] += x[1];
    x[1] = s_rotl32(x[1], r[2]) ^ x[0];
    x[2] += x[3];
    x[3] = s_rotl32(x[3], r[3]) ^ x[2];
    t = x[1];
    x[1] = x[3];
    x[3] = t;
}

static void s_key_schedule(troupe_uint4x32_t key, uint32_t ks[5])
{
    ks[4] = S_KS_PARITY;
    for (int i = 0; i < 4; i++) {
        ks[i] = key.v[i];
        ks[4] ^= key.v[i];
    }
}

static void s_inject(uint32_t x[4], const uint32_t ks[5], int s)
{
    for (int i = 0; i < 4; i++)
        x[i] += ks[(s + i) % 5];
    x[3] += (uint32_t)s;
}

/* OCANNL's variant: injection after every 4th round and after the last. */
static troupe_uint4x32_t s_threefry_ocannl(troupe_uint4x32_t key, troupe_uint4x32_t counter,
                                           int rounds)
{
    uint32_t ks[5], x[4];
    troupe_uint4x32_t out;
    int s = 0;
    s_key_schedule(key, ks);
    for (int i = 0; i < 4; i++)
        x[i] = counter.v[i] + ks[i];
    for (int r = 0; r < rounds; r++) {
        s_ocannl_round(x, s_ocannl_rot[r & 1]);
        if ((r + 1) % 4 == 0 || r == rounds - 1)
            s_inject(x, ks, ++s);
    }
    memcpy(out.v, x, sizeof x);
    return out;
}

troupe_uint4x32_t troupe_threefry4x32_crypto(troupe_uint4x32_t key, troupe_uint4x32_t counter)
{
    return s_threefry_ocannl(key, counter, 20);
}

troupe_uint4x32_t troupe_threefry4x32_light(troupe_uint4x32_t key, troupe_uint4x32_t counter)
{
    return s_threefry_ocannl(key, counter, 2);
}

/* Random123 R_32x4 rotation table. */
static const unsigned s_r123_rot[8][2] = {{10, 26}, {11, 21}, {13, 27}, {23, 5},
                                          {6, 20},  {17, 11}, {25, 10}, {18, 20}};

troupe_uint4x32_t troupe_threefry4x32_random123(unsigned rounds, troupe_uint4x32_t key,
                                                troupe_uint4x32_t counter)
{
    uint32_t ks[5], x[4];
    troupe_uint4x32_t out;
    s_key_schedule(key, ks);
    for (int i = 0; i < 4; i++)
        x[i] = counter.v[i] + ks[i];
    for (unsigned r = 0; r < rounds; r++) {
        const unsigned *rot = s_r123_rot[r % 8];
        if (r % 2 == 0) {
            x[0] += x[1];
            x[1] = s_rotl32(x[1], rot[0]) ^ x[0];
            x[2] += x[3];
            x[3] = s_rotl32(x[3], rot[1]) ^ x[2];
        } else {
            x[0] += x[3];
            x[3] = s_rotl32(x[3], rot[0]) ^ x[0];
            x[2] += x[1];
            x[1] = s_rotl32(x[1], rot[1]) ^ x[2];
        }
        if (r % 4 == 3)
            s_inject(x, ks, (int)(r / 4 + 1));
    }
    memcpy(out.v, x, sizeof x);
    return out;
}

troupe_uint4x32_t troupe_threefry4x32_20_random123(troupe_uint4x32_t key, troupe_uint4x32_t counter)
{
    return troupe_threefry4x32_random123(20, key, counter);
}

/* ---- counter construction --------------------------------------------------------------- */

static troupe_uint4x32_t s_u4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    troupe_uint4x32_t r = {{a, b, c, d}};
    return r;
}

static troupe_uint4x32_t s_spread32(uint32_t u)
{
    return s_u4(u, u ^ 0x9E3779B9u, u ^ 0x6C078965u, u ^ s_rotl32(u, 16));
}

static troupe_uint4x32_t s_split64(uint64_t u)
{
    return s_u4((uint32_t)u, (uint32_t)(u >> 32), 0, 0);
}

troupe_status_t troupe_prec_bits_to_uint4x32(troupe_prec_t prec, const void *elem,
                                             troupe_uint4x32_t *out)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    if (elem == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "NULL element or output for %s",
                             troupe_prec_name(prec));
    switch (prec) {
    case TROUPE_PREC_BYTE:
    case TROUPE_PREC_FP8:
        memcpy(&u8, elem, 1);
        *out = s_u4(u8, 0, 0, 0);
        break;
    case TROUPE_PREC_UINT16:
    case TROUPE_PREC_HALF:
    case TROUPE_PREC_BFLOAT16:
        memcpy(&u16, elem, 2);
        *out = s_u4(u16, 0, 0, 0);
        break;
    case TROUPE_PREC_INT32:
    case TROUPE_PREC_UINT32:
        memcpy(&u32, elem, 4);
        *out = s_spread32(u32);
        break;
    case TROUPE_PREC_SINGLE:
        memcpy(&u32, elem, 4);
        *out = s_u4(u32, 0, 0, 0);
        break;
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT64:
    case TROUPE_PREC_DOUBLE:
        memcpy(&u64, elem, 8);
        *out = s_split64(u64);
        break;
    case TROUPE_PREC_UINT4X32:
        memcpy(out, elem, sizeof *out);
        break;
    default:
        return troupe__error(TROUPE_INVALID_ARGUMENT, "no uint4x32 counter from precision %s",
                             troupe_prec_name(prec));
    }
    return TROUPE_OK;
}

troupe_status_t troupe_prec_value_to_uint4x32(troupe_prec_t prec, double x, troupe_uint4x32_t *out)
{
    troupe_uint4x32_t elem; /* 16 bytes: room for any precision */
    memset(&elem, 0, sizeof elem);
    if (!troupe_prec_is_valid(prec) || prec == TROUPE_PREC_VOID)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "no uint4x32 counter from precision %s",
                             troupe_prec_name(prec));
    troupe_prec_store_double(prec, &elem, x);
    return troupe_prec_bits_to_uint4x32(prec, &elem, out);
}

/* ---- uniform conversions ---------------------------------------------------------------- */

/* Top 24 bits as a float in [0, 1); exact. */
static float s_unit_f(uint32_t v)
{
    return (float)(v >> 8) * 0x1p-24f;
}

/* Top 53 of the 64 bits hi:lo as a double in [0, 1); exact. */
static double s_unit_d(uint32_t lo, uint32_t hi)
{
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

static uint32_t s_float_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* Rounds f in [0, 1) toward zero to binary16 bits. Below 2^-14 (half subnormals) the code is
 * f * 2^24 truncated; above, the float's exponent rebiased (127 -> 15) and its top 10
 * mantissa bits. */
static uint16_t s_half_rz(float f)
{
    uint32_t b = s_float_bits(f);
    if (b < 0x38800000u) /* 2^-14 */
        return (uint16_t)(f * 0x1p24f);
    return (uint16_t)((((b >> 23) - 112u) << 10) | ((b >> 13) & 0x3FFu));
}

/* bfloat16 is the top half of a float: truncation is rounding toward zero. */
static uint16_t s_bf16_rz(float f)
{
    return (uint16_t)(s_float_bits(f) >> 16);
}

/* E5M2 is the top byte of binary16 (same exponent field and bias), so truncating a half that
 * was itself rounded toward zero rounds toward zero. */
static uint8_t s_fp8_rz(float f)
{
    return (uint8_t)(s_half_rz(f) >> 8);
}

static uint64_t s_w64(uint32_t lo, uint32_t hi)
{
    return ((uint64_t)hi << 32) | lo;
}

troupe_status_t troupe_uint4x32_to_prec_uniform1(troupe_prec_t prec, troupe_uint4x32_t x, void *out)
{
    union {
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        float f32;
        double f64;
    } v;
    size_t size = troupe_prec_size_bytes(prec);
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "NULL output for uniform %s",
                             troupe_prec_name(prec));
    switch (prec) {
    case TROUPE_PREC_BYTE:
        v.u8 = (uint8_t)(x.v[0] & 0xFFu);
        break;
    case TROUPE_PREC_UINT16:
        v.u16 = (uint16_t)(x.v[0] & 0xFFFFu);
        break;
    case TROUPE_PREC_INT32: /* two's complement: same bytes as uint32 */
    case TROUPE_PREC_UINT32:
        v.u32 = x.v[0];
        break;
    case TROUPE_PREC_INT64:
    case TROUPE_PREC_UINT64:
        v.u64 = s_w64(x.v[0], x.v[1]);
        break;
    case TROUPE_PREC_HALF:
        v.u16 = s_half_rz(s_unit_f(x.v[0]));
        break;
    case TROUPE_PREC_BFLOAT16:
        v.u16 = s_bf16_rz(s_unit_f(x.v[0]));
        break;
    case TROUPE_PREC_FP8:
        v.u8 = s_fp8_rz(s_unit_f(x.v[0]));
        break;
    case TROUPE_PREC_SINGLE:
        v.f32 = s_unit_f(x.v[0]);
        break;
    case TROUPE_PREC_DOUBLE:
        v.f64 = s_unit_d(x.v[0], x.v[1]);
        break;
    default:
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "uint4x32_to_prec_uniform1 is not defined into precision %s",
                             troupe_prec_name(prec));
    }
    memcpy(out, &v, size);
    return TROUPE_OK;
}

size_t troupe_vec_unop_output_count(troupe_vec_unop_t op, troupe_prec_t prec)
{
    if (op != TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM || prec == TROUPE_PREC_UINT4X32)
        return 0;
    size_t size = troupe_prec_size_bytes(prec); /* 0 for void and out of range */
    return size == 0 ? 0 : 16 / size;
}

troupe_status_t troupe_uint4x32_to_prec_uniform(troupe_prec_t prec, troupe_uint4x32_t x, void *out,
                                                size_t *out_count)
{
    union {
        uint8_t u8[16];
        uint16_t u16[8];
        uint32_t u32[4];
        uint64_t u64[2];
        float f32[4];
        double f64[2];
    } v;
    size_t count = troupe_vec_unop_output_count(TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM, prec);
    if (count == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "uint4x32_to_prec_uniform is not defined into precision %s",
                             troupe_prec_name(prec));
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "NULL output for uniform %s",
                             troupe_prec_name(prec));
    for (int i = 0; i < 16; i++) {
        uint32_t byte = (x.v[i / 4] >> (8 * (i % 4))) & 0xFFu;
        if (prec == TROUPE_PREC_BYTE)
            v.u8[i] = (uint8_t)byte;
        else if (prec == TROUPE_PREC_FP8)
            v.u8[i] = s_fp8_rz((float)byte * 0x1p-8f);
    }
    for (int i = 0; i < 8; i++) {
        uint32_t half_word = (x.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
        if (prec == TROUPE_PREC_UINT16)
            v.u16[i] = (uint16_t)half_word;
        else if (prec == TROUPE_PREC_HALF)
            v.u16[i] = s_half_rz((float)half_word * 0x1p-16f);
        else if (prec == TROUPE_PREC_BFLOAT16)
            v.u16[i] = s_bf16_rz((float)half_word * 0x1p-16f);
    }
    for (int i = 0; i < 4; i++) {
        if (prec == TROUPE_PREC_INT32 || prec == TROUPE_PREC_UINT32)
            v.u32[i] = x.v[i];
        else if (prec == TROUPE_PREC_SINGLE)
            v.f32[i] = s_unit_f(x.v[i]);
    }
    for (int i = 0; i < 2; i++) {
        if (prec == TROUPE_PREC_INT64 || prec == TROUPE_PREC_UINT64)
            v.u64[i] = s_w64(x.v[2 * i], x.v[2 * i + 1]);
        else if (prec == TROUPE_PREC_DOUBLE)
            v.f64[i] = s_unit_d(x.v[2 * i], x.v[2 * i + 1]);
    }
    memcpy(out, &v, 16);
    if (out_count != NULL)
        *out_count = count;
    return TROUPE_OK;
}
