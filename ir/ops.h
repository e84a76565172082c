/* troupe — operations of seed Ops (`Ir.Ops`): the binary, unary, vector-unary and ternary
 * operations shared by every driver, their names in the text format, neutral elements,
 * reference interpreters over doubles, the C syntax generated code uses for them, the
 * precision-homogeneity rules, the Threefry4x32 counter-based PRNG (OCANNL's variant and the
 * standard Random123 one), counter spreading into uint4x32, and the uint4x32 -> uniform
 * conversions.
 *
 * Sources: seed module Ops (004); OCANNL_NOTES §8.1 (operation set, homogeneity rule), §8.3
 * (Threefry variants, counter construction), §8.4 (uniform conversions), §8.5 (statistical
 * acceptance); OCANNL's arrayjit ops.ml and builtins for the semantics checked here.
 *
 * Departures from OCANNL, each chosen so that the interpreter, the generated C and the host
 * functions agree (they are the reference for one another):
 *  - Max/Min follow C fmax/fmin: a NaN operand is ignored (fmax(NaN, 1) == 1), as the
 *    generated fmaxf/fmax calls do. OCANNL's interpreter (Base Float.max) propagates NaN.
 *  - Mod is C fmod (truncated remainder, sign of the dividend; fmod(x, 0) is NaN), as the
 *    generated fmodf/fmod and the integer `%` compute. OCANNL's interpreter uses Base Float.(%)
 *    (floored, raising for a non-positive divisor) while its C emits `%`.
 *  - ToPowOf is C pow (OCANNL special-cases integer exponents with repeated multiplication).
 *  - Log2 is C log2 (OCANNL: log v / log 2, which is inexact for powers of two).
 *  - Satur01 is fmin(1, fmax(0, x)): NaN -> 0 like Relu (OCANNL's interpreter keeps NaN while
 *    its C, fmax(0, fmin(1, x)), gives 1).
 *  - Satur01_gate(a, b) = (0 < a < 1) ? b : 0 in the C as well; OCANNL's C used
 *    fabs(floor(a)) > 0, which disagrees at a == 0.
 *  - FMA interprets as fma() (one rounding), like the generated fmaf/fma.
 *  - Uniform conversions always land in [0, 1) for float precisions, including fp8 (OCANNL's
 *    fp8 "uniform" is the raw low byte) and half/bfloat16 (OCANNL rounds to nearest, so inputs
 *    near 2^32 give exactly 1.0); see troupe_uint4x32_to_prec_uniform1.
 *  - The double uniform uses the top 53 of 64 bits (OCANNL 0.6 scaled all 64 bits by 2^-64,
 *    which rounds to 1.0 for inputs near 2^64; later OCANNL made the same fix).
 *
 * Thread safety: every function is pure and thread-safe (failures record the thread-local
 * last error, base/status.h). Ownership: nothing is allocated; returned strings are static;
 * syntax pieces are written into caller-owned troupe_c_syntax_t values.
 */
#ifndef TROUPE_IR_OPS_H
#define TROUPE_IR_OPS_H

#include "troupe/base/status.h"
#include "troupe/ir/prec.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- operation sets (seed order; values are stable) ------------------------------------- */

typedef enum troupe_binop {
    TROUPE_BINOP_ARG1 = 0, /* a, ignoring b */
    TROUPE_BINOP_ARG2,     /* b, ignoring a (plain assignment as an accumulation) */
    TROUPE_BINOP_ADD,
    TROUPE_BINOP_SUB,
    TROUPE_BINOP_MUL,
    TROUPE_BINOP_DIV,
    TROUPE_BINOP_TO_POW_OF,    /* a ** b */
    TROUPE_BINOP_RELU_GATE,    /* a > 0 ? b : 0 */
    TROUPE_BINOP_SATUR01_GATE, /* 0 < a < 1 ? b : 0 */
    TROUPE_BINOP_MAX,
    TROUPE_BINOP_MIN,
    TROUPE_BINOP_MOD,
    TROUPE_BINOP_CMPLT, /* 1 or 0 */
    TROUPE_BINOP_CMPEQ,
    TROUPE_BINOP_CMPNE,
    TROUPE_BINOP_OR, /* logical, on nonzero */
    TROUPE_BINOP_AND,
    TROUPE_BINOP_THREEFRY4X32_CRYPTO, /* uint4x32 key, uint4x32 counter -> uint4x32; 20 rounds */
    TROUPE_BINOP_THREEFRY4X32_LIGHT,  /* the same, 2 rounds */
} troupe_binop_t;
#define TROUPE_BINOP_COUNT 19

typedef enum troupe_unop {
    TROUPE_UNOP_IDENTITY = 0,
    TROUPE_UNOP_RELU,
    TROUPE_UNOP_SATUR01, /* clamp to [0, 1] */
    TROUPE_UNOP_EXP,
    TROUPE_UNOP_LOG,
    TROUPE_UNOP_EXP2,
    TROUPE_UNOP_LOG2,
    TROUPE_UNOP_SIN,
    TROUPE_UNOP_COS,
    TROUPE_UNOP_SQRT,
    TROUPE_UNOP_RECIP,
    TROUPE_UNOP_RECIP_SQRT,
    TROUPE_UNOP_NEG,
    TROUPE_UNOP_TANH_APPROX,
    TROUPE_UNOP_NOT,                       /* x == 0 ? 1 : 0 */
    TROUPE_UNOP_UINT4X32_TO_PREC_UNIFORM1, /* uint4x32 -> one value of the result precision */
} troupe_unop_t;
#define TROUPE_UNOP_COUNT 16

typedef enum troupe_vec_unop {
    /* uint4x32 -> troupe_vec_unop_output_count() values of the result precision, using all
     * 128 bits. It changes shapes: one input cell gives several output cells. */
    TROUPE_VEC_UNOP_UINT4X32_TO_PREC_UNIFORM = 0,
} troupe_vec_unop_t;
#define TROUPE_VEC_UNOP_COUNT 1

typedef enum troupe_ternop {
    TROUPE_TERNOP_WHERE = 0, /* a != 0 ? b : c */
    TROUPE_TERNOP_FMA,       /* a * b + c, one rounding, non-accumulating */
} troupe_ternop_t;
#define TROUPE_TERNOP_COUNT 2

bool troupe_binop_is_valid(troupe_binop_t op);
bool troupe_unop_is_valid(troupe_unop_t op);
bool troupe_vec_unop_is_valid(troupe_vec_unop_t op);
bool troupe_ternop_is_valid(troupe_ternop_t op);

/* ---- names (text format) ---------------------------------------------------------------- */

/* Stable lower_snake names used by the text format (ir/text): the seed constructor in lower
 * case with CamelCase split, e.g. "add", "to_pow_of", "relu_gate", "satur01_gate", "cmpne",
 * "threefry4x32_crypto"; "identity", "recip_sqrt", "tanh_approx",
 * "uint4x32_to_prec_uniform1"; "uint4x32_to_prec_uniform"; "where", "fma".
 * Out-of-range values give "invalid". Never NULL. */
const char *troupe_binop_name(troupe_binop_t op);
const char *troupe_unop_name(troupe_unop_t op);
const char *troupe_vec_unop_name(troupe_vec_unop_t op);
const char *troupe_ternop_name(troupe_ternop_t op);

/* Parse an exact (case-sensitive) name from the lists above into *out. Returns
 * TROUPE_INVALID_ARGUMENT naming the text (or NULL) and listing the valid names; *out is
 * untouched then. */
TROUPE_MUST_USE troupe_status_t troupe_binop_of_string(const char *name, troupe_binop_t *out);
TROUPE_MUST_USE troupe_status_t troupe_unop_of_string(const char *name, troupe_unop_t *out);
TROUPE_MUST_USE troupe_status_t troupe_vec_unop_of_string(const char *name, troupe_vec_unop_t *out);
TROUPE_MUST_USE troupe_status_t troupe_ternop_of_string(const char *name, troupe_ternop_t *out);

/* ---- algebra ---------------------------------------------------------------------------- */

/* The neutral element of `op` (seed `neutral_elem`), used to initialise an accumulator:
 *   right-neutral (x op n == x): add 0, sub 0, mul 1, div 1, to_pow_of 1, max -inf, min +inf,
 *     arg1 0 (any value works);
 *   left-neutral (n op x == x): relu_gate 1, satur01_gate 0.5, arg2 0 (any value works);
 *   or 0 and and 1 are neutral on the logical values 0 and 1 (the results are 0/1).
 * Add, mul, max, min, or, and are neutral on both sides.
 * Returns TROUPE_OK and sets *out; TROUPE_FAILED_PRECONDITION for the ops without one (mod,
 * cmplt, cmpeq, cmpne, threefry4x32_*; OCANNL returns an unspecified 0 there);
 * TROUPE_INVALID_ARGUMENT for an out-of-range op. */
TROUPE_MUST_USE troupe_status_t troupe_binop_neutral(troupe_binop_t op, double *out);

/* True when troupe_binop_neutral's element is only left-neutral: relu_gate, satur01_gate,
 * arg2. */
bool troupe_binop_neutral_is_left(troupe_binop_t op);

/* Seed `is_assign_op`: ops usable as the accumulation of an assignment (`=+`, `=:` ...):
 * arg2 add sub mul div to_pow_of relu_gate satur01_gate max min or and. False for arg1, mod,
 * the comparisons and threefry (checked against OCANNL's ops.ml). */
bool troupe_is_assign_op(troupe_binop_t op);

/* ---- reference interpreters (double) ---------------------------------------------------- */

/* Seed `interpret_binop/unop/ternop` over doubles, with the semantics of the C the
 * generators emit (see the departures in the header comment). Comparisons, or, and, not give
 * exactly 1.0 or 0.0; "true" means != 0, so NaN is true. NaN propagates through arithmetic;
 * relu_gate, satur01_gate, relu, satur01 map a NaN gate/argument to 0; max/min ignore a NaN
 * operand. The sign of a zero produced by relu/max/min is unspecified (as for fmax).
 * Operations that are not scalar-double operations — threefry4x32_* and
 * uint4x32_to_prec_uniform1 — return NaN: use troupe_interpret_binop_uint4x32 and
 * troupe_uint4x32_to_prec_uniform1 instead. Out-of-range ops return NaN. */
double troupe_interpret_binop(troupe_binop_t op, double a, double b);
double troupe_interpret_unop(troupe_unop_t op, double a);
double troupe_interpret_ternop(troupe_ternop_t op, double a, double b, double c);

/* The binops defined on uint4x32 values: arg1, arg2, threefry4x32_crypto (a = key, b =
 * counter), threefry4x32_light. Returns TROUPE_INVALID_ARGUMENT for any other op. */
TROUPE_MUST_USE troupe_status_t troupe_interpret_binop_uint4x32(troupe_binop_t op,
                                                                troupe_uint4x32_t a,
                                                                troupe_uint4x32_t b,
                                                                troupe_uint4x32_t *out);

/* ---- precision homogeneity (seed "Precision homogeneity classification") ---------------- */

/* True when every argument is converted to the result precision before the op. False only
 * for uint4x32_to_prec_uniform1 and uint4x32_to_prec_uniform (the argument stays uint4x32)
 * and for where (the condition keeps its own precision; the branches are converted). Every
 * binop is homogeneous, threefry included: its result precision is uint4x32, so converting
 * the arguments to it is exactly the counter/key construction (troupe_prec_bits_to_uint4x32).
 * Out-of-range ops give true. */
bool troupe_is_homogeneous_prec_unop(troupe_unop_t op);
bool troupe_is_homogeneous_prec_vec_unop(troupe_vec_unop_t op);
bool troupe_is_homogeneous_prec_binop(troupe_binop_t op);
bool troupe_is_homogeneous_prec_ternop(troupe_ternop_t op);

/* ---- C syntax (CPU C dialect) ----------------------------------------------------------- */

#define TROUPE_C_SYNTAX_MAX_PIECES 4
#define TROUPE_C_SYNTAX_PIECE_SIZE 128

/* An expression template: piece[0] arg1 piece[1] arg2 ... piece[count-1]. count is 2 for a
 * unop or a conversion (prefix, suffix), 3 for a binop or the vec_unop (prefix, infix,
 * suffix), 4 for a ternop. Every operand sits inside parentheses, so any C expression may be
 * substituted. */
typedef struct troupe_c_syntax {
    int count;
    char piece[TROUPE_C_SYNTAX_MAX_PIECES][TROUPE_C_SYNTAX_PIECE_SIZE];
} troupe_c_syntax_t;

/* Seed `binop_c_syntax` / `unop_c_syntax` / `vec_unop_c_syntax` / `ternop_c_syntax`: the C
 * expression for `op` computing in precision `prec`, where operands and result have the
 * prec's compute type:
 *   single: float, with the f-suffixed libm functions (expf, fmaxf, fmodf, powf, fmaf ...);
 *   double: double, with exp, fmax, fmod, pow, fma ...;
 *   half, bfloat16, fp8: computed in float, exactly as single — the generator converts the
 *     operands to float and the result back (troupe_c_convert_precision);
 *   byte, uint16, int32, uint32, int64, uint64: integer C semantics for + - * / % and the
 *     comparisons (division truncates; division or `%` by zero is undefined); max/min/relu/
 *     satur01 use exact typed helpers; to_pow_of, exp, log, exp2, log2, sin, cos, sqrt, recip,
 *     recip_sqrt, tanh_approx compute in double and cast back (undefined when the result does
 *     not fit the type); satur01_gate is always 0 (no integer lies strictly inside (0, 1));
 *   uint4x32: only arg1, arg2, threefry4x32_*, identity and where.
 * uint4x32_to_prec_uniform1 takes a uint4x32 operand and yields the prec's compute value (for
 * half/bfloat16/fp8 a float exactly representable in that format). The vec_unop is a
 * statement-level call `troupe_uint4x32_to_<prec>_uniform_vec((x), (dst))` writing
 * troupe_vec_unop_output_count(prec) elements of the prec's storage type (troupe_prec_c_type)
 * at pointer dst.
 * Identifiers used: C11 <math.h>/<stdint.h>, the helpers defined by the generated-code
 * prelude (troupe_cgen_c_prelude, compiler/cgen.h)
 * (troupe_threefry4x32_*, troupe_satur01_gate_f/_d, troupe_max_<prec>/troupe_min_<prec>,
 * troupe_uint4x32_to_<prec>_uniform[_vec]) and, for half/bfloat16/fp8 uniforms, ir/prec.h's
 * troupe_<fmt>_to_single.
 * Returns TROUPE_INVALID_ARGUMENT for void, an out-of-range prec or op, or an op that has no
 * meaning in `prec` (e.g. add in uint4x32, threefry in single, a uniform into uint4x32). */
TROUPE_MUST_USE troupe_status_t troupe_binop_c_syntax(troupe_prec_t prec, troupe_binop_t op,
                                                      troupe_c_syntax_t *out);
TROUPE_MUST_USE troupe_status_t troupe_unop_c_syntax(troupe_prec_t prec, troupe_unop_t op,
                                                     troupe_c_syntax_t *out);
TROUPE_MUST_USE troupe_status_t troupe_vec_unop_c_syntax(troupe_prec_t prec, troupe_vec_unop_t op,
                                                         troupe_c_syntax_t *out);
TROUPE_MUST_USE troupe_status_t troupe_ternop_c_syntax(troupe_prec_t prec, troupe_ternop_t op,
                                                       troupe_c_syntax_t *out);

/* Seed `c_convert_precision`: prefix/suffix (count 2) turning a C value of `from`'s storage
 * type into `to`'s storage type (types of troupe_prec_c_type). Same precision: empty pieces.
 * half/bfloat16/fp8 decode and encode through ir/prec.h's function names
 * (troupe_half_to_single, troupe_single_to_half, troupe_bfloat16_to_single, ...), so
 * generated code must define functions of those names with prec.h's semantics (RNE,
 * overflow -> inf); a double or integer goes through (float) first. Into uint4x32:
 * troupe_<from>_to_uint4x32 (the counter spreading of troupe_prec_bits_to_uint4x32, defined
 * by the prelude). From uint4x32: word 0, converted as a uint32. Other pairs are C casts
 * (a float out of an integer type's range is undefined behaviour in C, unlike
 * troupe_prec_store_double, which saturates). Returns TROUPE_INVALID_ARGUMENT when either
 * side is void (and not both) or out of range. */
TROUPE_MUST_USE troupe_status_t troupe_c_convert_precision(troupe_prec_t from, troupe_prec_t to,
                                                           troupe_c_syntax_t *out);

/* ---- Threefry4x32 (OCANNL_NOTES §8.3) --------------------------------------------------- */

/* OCANNL's Threefry4x32 variant (not Random123's): key schedule ks[0..3] = key, ks[4] =
 * k0^k1^k2^k3^0x1BD11BDA; x = counter + ks[0..3]; a "round" is two MIX layers on (x0,x1) and
 * (x2,x3) (a += b; b = rotl(b, r); b ^= a), each followed by swapping x1 and x3, with the
 * Threefry-2x32 rotations (13,15,26,6) and (17,29,16,24) on alternate rounds; injection s
 * adds ks[(s+i) mod 5] to x[i] and s to x[3].
 * crypto: 20 rounds, injection after every 4 (s = 1..5). light: 2 rounds, then injection s = 1
 * ("as in JAX/XLA"); with key 0 and counter 0 it returns {0, 0, 0, 0x1bd11bdb}, which is why
 * counters are spread (troupe_prec_bits_to_uint4x32). Light diffuses weakly: over consecutive
 * spread counters under a plain key (e.g. {42, 0, 0, 0}) words 2 and 3 of its output fail a
 * 20-bin chi-square at 10,000 samples, while word 0 (what the pointwise uniforms read) passes;
 * prefer crypto, or a key that is itself a Threefry output, when all 128 bits are used. */
troupe_uint4x32_t troupe_threefry4x32_crypto(troupe_uint4x32_t key, troupe_uint4x32_t counter);
troupe_uint4x32_t troupe_threefry4x32_light(troupe_uint4x32_t key, troupe_uint4x32_t counter);

/* Standard Random123 threefry4x32 with `rounds` rounds (Random123 threefry.h: rotation table
 * R_32x4 {10,26} {11,21} {13,27} {23,5} {6,20} {17,11} {25,10} {18,20}, odd rounds mixing
 * (x0,x3) and (x2,x1), key injection every 4 rounds, parity 0x1BD11BDA). Matches Random123's
 * kat_vectors for 13, 20 and 72 rounds. Provided as a reference and for portable tests; the
 * ops use OCANNL's variant. */
troupe_uint4x32_t troupe_threefry4x32_random123(unsigned rounds, troupe_uint4x32_t key,
                                                troupe_uint4x32_t counter);
/* troupe_threefry4x32_random123(20, key, counter). Key 0, counter 0 gives
 * {0x9c6ca96a, 0xe17eae66, 0xfc10ecd4, 0x5256a7d8}. */
troupe_uint4x32_t troupe_threefry4x32_20_random123(troupe_uint4x32_t key,
                                                   troupe_uint4x32_t counter);

/* ---- counter construction: <prec>_to_uint4x32 (OCANNL_NOTES §8.3) ----------------------- */

/* Converts one element of precision `prec` stored at `elem` (storage type of
 * troupe_prec_c_type) into a uint4x32 counter or key:
 *   int32, uint32: spread, {u, u ^ 0x9E3779B9, u ^ 0x6C078965, u ^ rotl(u, 16)};
 *   int64, uint64, double (its bits): {lo, hi, 0, 0};
 *   single (its bits): {bits, 0, 0, 0};
 *   byte, uint16, half, bfloat16, fp8 (their bits): {x, 0, 0, 0};
 *   uint4x32: copied.
 * Returns TROUPE_INVALID_ARGUMENT for void, an out-of-range prec, or NULL pointers. */
TROUPE_MUST_USE troupe_status_t troupe_prec_bits_to_uint4x32(troupe_prec_t prec, const void *elem,
                                                             troupe_uint4x32_t *out);

/* Stores `x` in precision `prec` (troupe_prec_store_double's rounding) and converts that
 * element with troupe_prec_bits_to_uint4x32: what an interpreter does when a value of `prec`
 * feeds a threefry argument. Same status codes. */
TROUPE_MUST_USE troupe_status_t troupe_prec_value_to_uint4x32(troupe_prec_t prec, double x,
                                                              troupe_uint4x32_t *out);

/* ---- uint4x32 -> uniform values (OCANNL_NOTES §8.4) ------------------------------------- */

/* Pointwise: one element of `prec`'s storage type written at `out`, from the uint4x32 `x`.
 * For random bits the result is uniform over the whole type for integer precisions and over
 * [0, 1) for float precisions:
 *   byte: v0 & 0xFF; uint16: v0 & 0xFFFF; int32/uint32: v0 (two's complement);
 *   int64/uint64: v1:v0 (v1 high);
 *   single: (v0 >> 8) * 2^-24 (exact);
 *   double: (v1:v0 >> 11) * 2^-53 (exact; < 1 always);
 *   half, bfloat16, fp8: the single value above rounded toward zero to the format — every
 *     representable value g in [0, 1) is drawn with probability (width of [g, next g)) up to
 *     the 2^-24 grid, and 1.0 never occurs (round-to-nearest would give 1.0 for the top
 *     inputs: 65535/65536 rounds to 1.0 in half). The cost is a downward bias of about half a
 *     spacing: the mean is ~0.49984 for half, ~0.4987 for bfloat16, ~0.458 for fp8.
 * Returns TROUPE_INVALID_ARGUMENT for void, uint4x32, an out-of-range prec or NULL `out`. */
TROUPE_MUST_USE troupe_status_t troupe_uint4x32_to_prec_uniform1(troupe_prec_t prec,
                                                                 troupe_uint4x32_t x, void *out);

/* Elements troupe_uint4x32_to_prec_uniform writes for `prec`: 16 for byte and fp8, 8 for
 * uint16, half, bfloat16, 4 for int32, uint32, single, 2 for int64, uint64, double; 0 for
 * void, uint4x32 or out-of-range. Shape inference multiplies the innermost axis by it. */
size_t troupe_vec_unop_output_count(troupe_vec_unop_t op, troupe_prec_t prec);

/* Vectorised: uses all 128 bits, writing troupe_vec_unop_output_count(...) elements (always 16
 * bytes) of `prec`'s storage type at `out`, and that count to *out_count (may be NULL):
 *   byte, fp8: the 16 bytes little-endian (byte j of word i is element 4i+j); byte keeps the
 *     raw byte, fp8 maps it to k/256 rounded toward zero to fp8 (OCANNL keeps the raw byte,
 *     not a [0, 1) value — departure);
 *   uint16, half, bfloat16: for each word its low then high 16 bits; half and bfloat16 map k to
 *     k/65536 rounded toward zero;
 *   int32, uint32: the 4 words; single: (vi >> 8) * 2^-24;
 *   int64, uint64: v1:v0 then v3:v2; double: each >> 11, times 2^-53.
 * Returns TROUPE_INVALID_ARGUMENT for void, uint4x32, an out-of-range prec or NULL `out`. */
TROUPE_MUST_USE troupe_status_t troupe_uint4x32_to_prec_uniform(troupe_prec_t prec,
                                                                troupe_uint4x32_t x, void *out,
                                                                size_t *out_count);

/* Max and min of floating-point values (seed Ops Max, Min; relu = max(0, x), satur01 =
 * min(1, max(0, x))): the larger (smaller) operand; a NaN operand gives the other operand (two
 * NaNs: the first); equal operands (+0 and -0) give the second. The C library's fmax leaves the
 * signed-zero choice open (glibc's float and double versions differ), so troupe defines it:
 * constant folding, the interpreter and generated code (the same expression in its prelude)
 * agree bit for bit, and the generated form vectorises where a call to fmaxf does not. */
static inline double troupe_fmax(double a, double b)
{
    return b != b ? a : (a != a ? b : (a > b ? a : b));
}
static inline double troupe_fmin(double a, double b)
{
    return b != b ? a : (a != a ? b : (a < b ? a : b));
}
static inline float troupe_fmaxf(float a, float b)
{
    return b != b ? a : (a != a ? b : (a > b ? a : b));
}
static inline float troupe_fminf(float a, float b)
{
    return b != b ? a : (a != a ? b : (a < b ? a : b));
}

/* exp and tanh in single precision, as straight-line code that GCC vectorises (libm's expf
 * and tanhf stay scalar calls without -ffast-math): the interpreter's single (and small-float)
 * exp and tanh_approx, and the C dialect's prelude holds the same code, so the two agree bit for
 * bit on every IEEE machine. exp is within 1 ulp of the exact value, tanh within 1.6; specials,
 * overflow and subnormal results as libm's. Method and measurements: docs/architecture.md. */
/* e^r for the reduced argument |r| <= ln2/2 of troupe_expf and troupe_tanhf: a degree-7
 * polynomial in Horner form (fmas). */
static inline float troupe__exp_poly(float r)
{
    float p = 1.98412698e-04f;
    p = fmaf(p, r, 1.38888889e-03f);
    p = fmaf(p, r, 8.33333333e-03f);
    p = fmaf(p, r, 4.16666667e-02f);
    p = fmaf(p, r, 1.66666667e-01f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return p;
}
static inline float troupe_expf(float x)
{
    float xc = x > 88.8f ? 88.8f : (x < -104.0f ? -104.0f : x);
    float t = xc * 1.44269502f + 12582912.0f;
    float n = t - 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    uint32_t ni = tb - 0x4B400000u;
    float r = fmaf(n, -0.693145751953125f, xc);
    r = fmaf(n, -1.42860677e-06f, r);
    float p = troupe__exp_poly(r);
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1;
    uint32_t b1 = (n1 + 127u) << 23, b2 = (n2 + 127u) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float y = p * s1 * s2;
    return x != x ? x + x : y;
}
static inline float troupe_tanhf(float x)
{
    float ax = fabsf(x);
    ax = ax > 9.1f ? 9.1f : ax;
    float x2 = ax * ax;
    float q = -6.23571684e-03f;
    q = fmaf(q, x2, 2.10398063e-02f);
    q = fmaf(q, x2, -5.38427469e-02f);
    q = fmaf(q, x2, 1.33324613e-01f);
    q = fmaf(q, x2, -3.33333110e-01f);
    float small = fmaf(ax * x2, q, ax);
    float y = ax + ax;
    float t = y * 1.44269502f + 12582912.0f;
    float n = t - 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    float r = fmaf(n, -0.693145751953125f, y);
    r = fmaf(n, -1.42860677e-06f, r);
    float p = troupe__exp_poly(r);
    uint32_t sb = (tb - 0x4B400000u + 127u) << 23;
    float s;
    memcpy(&s, &sb, sizeof s);
    float big = 1.0f - 2.0f / fmaf(p, s, 1.0f);
    return copysignf(ax < 0.55f ? small : big, x);
}

#ifdef __cplusplus
}
#endif
#endif
