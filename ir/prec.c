/* troupe — precisions of seed Ops and conversions between them (see ir/prec.h).
 *
 * All three small float formats (half = E5M10, bfloat16 = E8M7, fp8 = E5M2) share one
 * encoder, s_encode, that rounds a double straight to a format with E exponent bits and M
 * mantissa bits, round-to-nearest-even, by integer arithmetic on the double's bits. The
 * single-precision entry points widen the float to double first, which is exact, so there
 * is exactly one rounding; troupe_prec_store_double rounds the double directly, so storing a
 * double never double-rounds (double -> float -> half could: 1 + 2^-11 + 2^-40 would round
 * to 1 + 2^-11 in float, a tie that goes to 1.0 in half, while the correct half is the next
 * code up). One decoder, s_decode, serves the reverse direction.
 *
 * Source: seed Ir.Ops precision section; OCANNL_NOTES §8.1 (sizes, promotion), §8.2
 * (conversions, and the OCANNL defects this file deliberately does not reproduce: bfloat16
 * NaN -> Inf, the fp8 mantissa-scaling bug and fp8 flushing of subnormals).
 */
#include "ir/prec.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- table of precisions ---------------------------------------------------------------- */

typedef struct s_prec_info {
    const char *name;   /* seed name */
    const char *c_type; /* C storage type in generated code */
    size_t size_bytes;
    int rank; /* promote_prec: larger wins */
    bool is_float;
} s_prec_info_t;

/* Indexed by troupe_prec_t. Ranks follow OCANNL_NOTES §8.1: uint4x32 > double > single >
 * bfloat16 > half > fp8 > uint64 > int64 > uint32 > int32 > uint16 > byte > void. */
static const s_prec_info_t s_info[TROUPE_PREC_COUNT] = {
    [TROUPE_PREC_VOID] = {"void", "void", 0, 0, false},
    [TROUPE_PREC_BYTE] = {"byte", "uint8_t", 1, 1, false},
    [TROUPE_PREC_UINT16] = {"uint16", "uint16_t", 2, 2, false},
    [TROUPE_PREC_INT32] = {"int32", "int32_t", 4, 3, false},
    [TROUPE_PREC_UINT32] = {"uint32", "uint32_t", 4, 4, false},
    [TROUPE_PREC_INT64] = {"int64", "int64_t", 8, 5, false},
    [TROUPE_PREC_UINT64] = {"uint64", "uint64_t", 8, 6, false},
    [TROUPE_PREC_UINT4X32] = {"uint4x32", "uint4x32_t", 16, 12, false},
    [TROUPE_PREC_HALF] = {"half", "uint16_t", 2, 8, true},
    [TROUPE_PREC_BFLOAT16] = {"bfloat16", "uint16_t", 2, 9, true},
    [TROUPE_PREC_FP8] = {"fp8", "uint8_t", 1, 7, true},
    [TROUPE_PREC_SINGLE] = {"single", "float", 4, 10, true},
    [TROUPE_PREC_DOUBLE] = {"double", "double", 8, 11, true},
};

/* Listed in error messages. */
static const char s_valid_names[] =
    "void, byte, uint16, int32, uint32, int64, uint64, uint4x32, half, bfloat16, fp8, "
    "single, double";

bool troupe_prec_is_valid(troupe_prec_t p)
{
    return (int)p >= 0 && (int)p < TROUPE_PREC_COUNT;
}

size_t troupe_prec_size_bytes(troupe_prec_t p)
{
    return troupe_prec_is_valid(p) ? s_info[p].size_bytes : 0;
}

const char *troupe_prec_name(troupe_prec_t p)
{
    return troupe_prec_is_valid(p) ? s_info[p].name : "invalid";
}

/* Out of range: "invalid", like troupe_prec_name (never NULL). */
const char *troupe_prec_c_type(troupe_prec_t p)
{
    return troupe_prec_is_valid(p) ? s_info[p].c_type : "invalid";
}

troupe_status_t troupe_prec_of_string(const char *name, troupe_prec_t *out)
{
    troupe_status_t status = TROUPE_INVALID_ARGUMENT;
    if (name == NULL) {
        status = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "precision name is NULL; expected one of: %s", s_valid_names);
        goto done;
    }
    for (int i = 0; i < TROUPE_PREC_COUNT; i++) {
        if (strcmp(name, s_info[i].name) == 0) {
            *out = (troupe_prec_t)i;
            status = TROUPE_OK;
            goto done;
        }
    }
    status =
        troupe__error(TROUPE_INVALID_ARGUMENT, "unknown precision \"%.200s\"; expected one of: %s",
                      name, s_valid_names);
done:
    return status;
}

bool troupe_prec_is_float(troupe_prec_t p)
{
    return troupe_prec_is_valid(p) && s_info[p].is_float;
}

bool troupe_prec_is_up_to_fp16(troupe_prec_t p)
{
    return troupe_prec_is_valid(p) && p != TROUPE_PREC_VOID && s_info[p].size_bytes <= 2;
}

troupe_prec_t troupe_prec_compute(troupe_prec_t p)
{
    return (p == TROUPE_PREC_HALF || p == TROUPE_PREC_BFLOAT16 || p == TROUPE_PREC_FP8)
               ? TROUPE_PREC_SINGLE
               : p;
}

bool troupe_exceeds_fp16_cutoff(double c)
{
    return fabs(c) >= 16384.0; /* false for NaN */
}

/* An out-of-range precision ranks below void, so the valid argument wins. */
troupe_prec_t troupe_promote_prec(troupe_prec_t a, troupe_prec_t b)
{
    int ra = troupe_prec_is_valid(a) ? s_info[a].rank : -1;
    int rb = troupe_prec_is_valid(b) ? s_info[b].rank : -1;
    return ra >= rb ? a : b;
}

/* ---- generic small-float codec ---------------------------------------------------------- */

/* A binary interchange-style format: 1 sign bit, exp_bits exponent bits (bias
 * 2^(exp_bits-1) - 1, all-ones = inf/NaN), man_bits stored mantissa bits. */
typedef struct s_format {
    int exp_bits;
    int man_bits;
} s_format_t;

static const s_format_t s_half = {5, 10};
static const s_format_t s_bf16 = {8, 7};
static const s_format_t s_fp8 = {5, 2};

static uint64_t s_double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float s_float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds x to format `fmt`, round-to-nearest-even, and returns the code. Overflow goes to
 * infinity, or to the largest finite code of the same sign when `saturate`. NaN becomes a
 * quiet NaN of the same sign keeping the top payload bits that fit. */
static uint32_t s_encode(double x, s_format_t fmt, bool saturate)
{
    const int m = fmt.man_bits;
    const int32_t bias = (1 << (fmt.exp_bits - 1)) - 1;
    const uint64_t exp_all_ones = ((uint64_t)1 << fmt.exp_bits) - 1;
    const uint64_t inf_code = exp_all_ones << m;
    const uint64_t d = s_double_bits(x);
    const uint64_t sign = (d >> 63) << (fmt.exp_bits + m);
    const int32_t dexp = (int32_t)((d >> 52) & 0x7FF);
    const uint64_t dman = d & (((uint64_t)1 << 52) - 1);
    uint64_t code;

    if (dexp == 0x7FF && dman != 0) {
        code = inf_code | (dman >> (52 - m)) | ((uint64_t)1 << (m - 1)); /* quiet NaN */
    } else if (dexp == 0x7FF) {
        code = saturate ? inf_code - 1 : inf_code;
    } else if (dexp == 0) {
        /* Zero or a double subnormal (< 2^-1022): far below half the smallest subnormal of
         * every format here, so it rounds to a signed zero. */
        code = 0;
    } else {
        /* x = sig * 2^(e - 52) with sig a 53-bit integer; the target exponent field is te. */
        const uint64_t sig = dman | ((uint64_t)1 << 52);
        const int32_t te = dexp - 1023 + bias;
        if (te >= (int32_t)exp_all_ones) {
            code = inf_code; /* |x| >= 2^(emax+1): beyond rounding range */
        } else {
            /* Keep m fraction bits for a normal result; for a subnormal one (te <= 0) the
             * unit is fixed at 2^(1 - bias - m), so shift 1 - te further. Past 54 the value
             * is below half the smallest subnormal anyway. */
            int shift = 52 - m + (te < 1 ? 1 - te : 0);
            if (shift > 54)
                shift = 54;
            const uint64_t q = sig >> shift;
            const uint64_t rem = sig & (((uint64_t)1 << shift) - 1);
            const uint64_t halfway = (uint64_t)1 << (shift - 1);
            const uint64_t rounded = q + ((rem > halfway || (rem == halfway && (q & 1))) ? 1 : 0);
            /* `rounded` carries the hidden bit, so adding it to the exponent field below
             * turns a mantissa carry (or a subnormal rounding up to 2^-(bias-1)) into the
             * next exponent for free; a carry out of the top exponent lands on inf_code. */
            code = (te < 1 ? 0 : ((uint64_t)(te - 1) << m)) + rounded;
        }
        if (code >= inf_code)
            code = saturate ? inf_code - 1 : inf_code;
    }
    return (uint32_t)(sign | code);
}

/* Decodes a code of format `fmt` to single precision (exact: every value of the three
 * formats is a float). NaN keeps its sign and payload (shifted to the top) and is quiet. */
static float s_decode(uint32_t code, s_format_t fmt)
{
    const int m = fmt.man_bits;
    const int32_t bias = (1 << (fmt.exp_bits - 1)) - 1;
    const uint32_t exp_all_ones = (1u << fmt.exp_bits) - 1;
    const uint32_t negative = (code >> (fmt.exp_bits + m)) & 1u;
    const uint32_t e = (code >> m) & exp_all_ones;
    const uint32_t man = code & ((1u << m) - 1);
    float result;

    if (e == exp_all_ones) {
        uint32_t bits = (negative << 31) | 0x7F800000u;
        if (man != 0)
            bits |= (man << (23 - m)) | 0x00400000u;
        result = s_float_of_bits(bits);
    } else {
        /* value = significand * 2^(exponent - bias - m); subnormals have no hidden bit and
         * the exponent of e == 1. ldexp is exact here since the result is representable. */
        const uint32_t significand = e == 0 ? man : (man | (1u << m));
        const int32_t exponent = (e == 0 ? 1 : (int32_t)e) - bias - m;
        const double magnitude = ldexp((double)significand, exponent);
        result = (float)(negative ? -magnitude : magnitude);
    }
    return result;
}

float troupe_half_to_single(uint16_t h)
{
    return s_decode(h, s_half);
}

uint16_t troupe_single_to_half(float f)
{
    return (uint16_t)s_encode((double)f, s_half, false);
}

uint16_t troupe_single_to_half_sat(float f)
{
    return (uint16_t)s_encode((double)f, s_half, true);
}

float troupe_bfloat16_to_single(uint16_t b)
{
    return s_decode(b, s_bf16);
}

uint16_t troupe_single_to_bfloat16(float f)
{
    return (uint16_t)s_encode((double)f, s_bf16, false);
}

uint16_t troupe_single_to_bfloat16_sat(float f)
{
    return (uint16_t)s_encode((double)f, s_bf16, true);
}

float troupe_fp8_to_single(uint8_t e5m2)
{
    return s_decode(e5m2, s_fp8);
}

uint8_t troupe_single_to_fp8(float f)
{
    return (uint8_t)s_encode((double)f, s_fp8, false);
}

uint8_t troupe_single_to_fp8_sat(float f)
{
    return (uint8_t)s_encode((double)f, s_fp8, true);
}

/* ---- load / store as double ------------------------------------------------------------- */

/* Truncates toward zero and clamps to [lo, hi]; NaN -> 0. lo and hi must be exact doubles
 * (true for every integer type up to 32 bits). */
static double s_trunc_clamp(double x, double lo, double hi)
{
    double r = 0.0;
    if (!isnan(x)) {
        r = trunc(x);
        r = r < lo ? lo : (r > hi ? hi : r);
    }
    return r;
}

/* 64-bit integers: 2^63 and 2^64 are exact doubles, the maxima are not. */
static int64_t s_to_int64(double x)
{
    int64_t r = 0;
    if (isnan(x))
        r = 0;
    else if (x >= 9223372036854775808.0)
        r = INT64_MAX;
    else if (x <= -9223372036854775808.0)
        r = INT64_MIN;
    else
        r = (int64_t)x; /* C conversion truncates toward zero */
    return r;
}

static uint64_t s_to_uint64(double x)
{
    uint64_t r = 0;
    if (!(x > 0.0)) /* NaN, zero, negative */
        r = 0;
    else if (x >= 18446744073709551616.0)
        r = UINT64_MAX;
    else
        r = (uint64_t)x;
    return r;
}

/* Void and out-of-range precisions have no value: the result is 0.0. */
double troupe_prec_load_double(troupe_prec_t p, const void *src)
{
    union {
        uint8_t u8;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        float f32;
        double f64;
    } v;
    double r = 0.0;
    memset(&v, 0, sizeof v);
    if (troupe_prec_is_valid(p) && p != TROUPE_PREC_VOID) {
        /* uint4x32 reads word 0, which is the first 4 bytes. */
        memcpy(&v, src, p == TROUPE_PREC_UINT4X32 ? 4 : s_info[p].size_bytes);
    }
    switch (p) {
    case TROUPE_PREC_BYTE:
        r = v.u8;
        break;
    case TROUPE_PREC_UINT16:
        r = v.u16;
        break;
    case TROUPE_PREC_INT32:
        r = v.i32;
        break;
    case TROUPE_PREC_UINT32:
    case TROUPE_PREC_UINT4X32:
        r = v.u32;
        break;
    case TROUPE_PREC_INT64:
        r = (double)v.i64;
        break;
    case TROUPE_PREC_UINT64:
        r = (double)v.u64;
        break;
    case TROUPE_PREC_HALF:
        r = troupe_half_to_single(v.u16);
        break;
    case TROUPE_PREC_BFLOAT16:
        r = troupe_bfloat16_to_single(v.u16);
        break;
    case TROUPE_PREC_FP8:
        r = troupe_fp8_to_single(v.u8);
        break;
    case TROUPE_PREC_SINGLE:
        r = v.f32;
        break;
    case TROUPE_PREC_DOUBLE:
        r = v.f64;
        break;
    default: /* void, out of range */
        break;
    }
    return r;
}

/* Void and out-of-range precisions write nothing. Floats narrower than double are rounded
 * once, directly from x (no double rounding through single, except for single itself). */
void troupe_prec_store_double(troupe_prec_t p, void *dst, double x)
{
    union {
        uint8_t u8;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        float f32;
        double f64;
        troupe_uint4x32_t u128;
    } v;
    memset(&v, 0, sizeof v);
    switch (p) {
    case TROUPE_PREC_BYTE:
        v.u8 = (uint8_t)s_trunc_clamp(x, 0.0, (double)UINT8_MAX);
        break;
    case TROUPE_PREC_UINT16:
        v.u16 = (uint16_t)s_trunc_clamp(x, 0.0, (double)UINT16_MAX);
        break;
    case TROUPE_PREC_INT32:
        v.i32 = (int32_t)s_trunc_clamp(x, (double)INT32_MIN, (double)INT32_MAX);
        break;
    case TROUPE_PREC_UINT32:
        v.u32 = (uint32_t)s_trunc_clamp(x, 0.0, (double)UINT32_MAX);
        break;
    case TROUPE_PREC_UINT4X32:
        v.u128.v[0] = (uint32_t)s_trunc_clamp(x, 0.0, (double)UINT32_MAX);
        break;
    case TROUPE_PREC_INT64:
        v.i64 = s_to_int64(x);
        break;
    case TROUPE_PREC_UINT64:
        v.u64 = s_to_uint64(x);
        break;
    case TROUPE_PREC_HALF:
        v.u16 = (uint16_t)s_encode(x, s_half, false);
        break;
    case TROUPE_PREC_BFLOAT16:
        v.u16 = (uint16_t)s_encode(x, s_bf16, false);
        break;
    case TROUPE_PREC_FP8:
        v.u8 = (uint8_t)s_encode(x, s_fp8, false);
        break;
    case TROUPE_PREC_SINGLE:
        v.f32 = (float)x;
        break;
    case TROUPE_PREC_DOUBLE:
        v.f64 = x;
        break;
    default: /* void, out of range */
        break;
    }
    if (troupe_prec_is_valid(p))
        memcpy(dst, &v, s_info[p].size_bytes);
}
