/* Tests for ir/prec: precision table (names, sizes, C types, parsing, predicates,
 * promotion), the half / bfloat16 / fp8 conversions (exhaustive over codes, against an
 * independent nearest-value reference, against the compiler's _Float16 where it exists,
 * OCANNL's reference vectors), and load/store as double for every precision. */
#include "ir/prec.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------------- */

static uint32_t s_bits_of_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float s_float_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Deterministic xorshift64* stream. */
static uint64_t s_rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t s_rand32(void)
{
    s_rng_state ^= s_rng_state >> 12;
    s_rng_state ^= s_rng_state << 25;
    s_rng_state ^= s_rng_state >> 27;
    return (uint32_t)((s_rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* A random float whose exponent lies in [lo, hi] (unbiased), random sign and mantissa. */
static float s_rand_float_in_exponents(int lo, int hi)
{
    uint32_t r = s_rand32();
    int e = lo + (int)(s_rand32() % (uint32_t)(hi - lo + 1));
    uint32_t bits = (r & 0x80000000u) | ((uint32_t)(e + 127) << 23) | (r & 0x007FFFFFu);
    return s_float_of_bits(bits);
}

/* An independent reference for a small float format (E exponent bits, M mantissa bits):
 * the table of all finite non-negative values in code order plus, at index inf_code, the
 * value 2^(emax+1) that an unbounded exponent would give next. Rounding = nearest table
 * entry, ties to the even code; past the table -> infinity. */
typedef struct s_ref {
    int exp_bits, man_bits;
    uint32_t inf_code; /* also the number of finite non-negative codes */
    double *table;     /* inf_code + 1 entries */
} s_ref_t;

static double s_ref_value(int exp_bits, int man_bits, uint32_t code)
{
    int bias = (1 << (exp_bits - 1)) - 1;
    uint32_t e = code >> man_bits, m = code & ((1u << man_bits) - 1);
    if (e == 0)
        return ldexp((double)m, 1 - bias - man_bits);
    return ldexp((double)((1u << man_bits) + m), (int)e - bias - man_bits);
}

static s_ref_t s_ref_make(int exp_bits, int man_bits)
{
    s_ref_t r = {exp_bits, man_bits, ((1u << exp_bits) - 1) << man_bits, NULL};
    r.table = malloc(sizeof(double) * (r.inf_code + 1));
    cr_assert_not_null(r.table);
    for (uint32_t c = 0; c <= r.inf_code; c++)
        r.table[c] = s_ref_value(exp_bits, man_bits, c);
    return r;
}

static uint32_t s_ref_encode(const s_ref_t *r, double x, bool saturate)
{
    uint32_t sign = signbit(x) ? 1u << (r->exp_bits + r->man_bits) : 0;
    double a = fabs(x);
    uint32_t code;
    if (a >= r->table[r->inf_code]) {
        code = r->inf_code;
    } else {
        /* largest lo with table[lo] <= a */
        uint32_t lo = 0, hi = r->inf_code;
        while (hi - lo > 1) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (r->table[mid] <= a)
                lo = mid;
            else
                hi = mid;
        }
        double dlo = a - r->table[lo], dhi = r->table[hi] - a;
        code = (dlo < dhi || (dlo == dhi && (lo & 1) == 0)) ? lo : hi;
    }
    if (saturate && code == r->inf_code)
        code--;
    return sign | code;
}

/* Checks that every code of a 16- or 8-bit format decodes and re-encodes to itself (NaN
 * codes to some NaN code of the same sign) and decodes to the reference value. */
static void s_check_all_codes(const s_ref_t *r, float (*dec)(uint32_t), uint32_t (*enc)(float))
{
    uint32_t total = 1u << (1 + r->exp_bits + r->man_bits);
    uint32_t sign_bit = total >> 1;
    for (uint32_t c = 0; c < total; c++) {
        float f = dec(c);
        uint32_t back = enc(f);
        uint32_t mag = c & (sign_bit - 1);
        if (mag > r->inf_code) {
            cr_assert(isnan(f), "code %#x should decode to NaN, got %a", c, (double)f);
            cr_assert((back & (sign_bit - 1)) > r->inf_code, "NaN code %#x re-encoded to %#x", c,
                      back);
            cr_assert_eq(back & sign_bit, c & sign_bit, "NaN sign lost for %#x", c);
        } else {
            double want = mag == r->inf_code ? INFINITY : r->table[mag];
            if (c & sign_bit)
                want = -want;
            cr_assert((double)f == want && !signbit(f) == !signbit(want),
                      "code %#x decodes to %a, want %a", c, (double)f, want);
            cr_assert_eq(back, c, "code %#x round-trips to %#x", c, back);
        }
    }
}

/* Checks the encoder at every midpoint between adjacent finite codes and one float ulp
 * either side of it (exact in float for all three formats). */
static void s_check_midpoints(const s_ref_t *r, uint32_t (*enc)(float))
{
    for (uint32_t c = 0; c < r->inf_code; c++) {
        double mid = (r->table[c] + r->table[c + 1]) / 2;
        float fm = (float)mid;
        if ((double)fm != mid)
            continue; /* not representable in float: cannot be an input */
        uint32_t even = (c & 1) == 0 ? c : c + 1;
        cr_assert_eq(enc(fm), even, "midpoint %a above code %#x -> %#x", mid, c, enc(fm));
        cr_assert_eq(enc(nextafterf(fm, 0.0f)), c, "just below midpoint %a", mid);
        cr_assert_eq(enc(nextafterf(fm, INFINITY)), c + 1, "just above midpoint %a", mid);
        cr_assert_eq(enc(-fm), even | (1u << (r->exp_bits + r->man_bits)), "negative midpoint %a",
                     mid);
    }
}

/* Compares the encoder with the reference for many random floats. */
static void s_check_random(const s_ref_t *r, uint32_t (*enc)(float), bool saturate, int lo_exp,
                           int hi_exp)
{
    for (int i = 0; i < 400000; i++) {
        float f =
            i % 4 == 0 ? s_float_of_bits(s_rand32()) : s_rand_float_in_exponents(lo_exp, hi_exp);
        uint32_t got = enc(f);
        if (isnan(f)) {
            cr_assert((got & ((1u << (r->exp_bits + r->man_bits)) - 1)) > r->inf_code,
                      "NaN %#x -> %#x", s_bits_of_float(f), got);
            continue;
        }
        uint32_t want = s_ref_encode(r, f, saturate);
        cr_assert_eq(got, want, "%a (%#x) -> %#x, want %#x", (double)f, s_bits_of_float(f), got,
                     want);
    }
}

/* Adapters so the generic checks can take one signature. */
static float s_dec_half(uint32_t c)
{
    return troupe_half_to_single((uint16_t)c);
}
static uint32_t s_enc_half(float f)
{
    return troupe_single_to_half(f);
}
static uint32_t s_enc_half_sat(float f)
{
    return troupe_single_to_half_sat(f);
}
static float s_dec_bf16(uint32_t c)
{
    return troupe_bfloat16_to_single((uint16_t)c);
}
static uint32_t s_enc_bf16(float f)
{
    return troupe_single_to_bfloat16(f);
}
static uint32_t s_enc_bf16_sat(float f)
{
    return troupe_single_to_bfloat16_sat(f);
}
static float s_dec_fp8(uint32_t c)
{
    return troupe_fp8_to_single((uint8_t)c);
}
static uint32_t s_enc_fp8(float f)
{
    return troupe_single_to_fp8(f);
}
static uint32_t s_enc_fp8_sat(float f)
{
    return troupe_single_to_fp8_sat(f);
}

/* ---- precision table -------------------------------------------------------------------- */

static const char *const s_names[TROUPE_PREC_COUNT] = {
    "void",     "byte", "uint16",   "int32", "uint32", "int64",  "uint64",
    "uint4x32", "half", "bfloat16", "fp8",   "single", "double",
};

Test(prec, sizes_names_and_c_types)
{
    static const size_t sizes[TROUPE_PREC_COUNT] = {0, 1, 2, 4, 4, 8, 8, 16, 2, 2, 1, 4, 8};
    static const char *const ctypes[TROUPE_PREC_COUNT] = {
        "void",       "uint8_t",  "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
        "uint4x32_t", "uint16_t", "uint16_t", "uint8_t", "float",    "double",
    };
    for (int i = 0; i < TROUPE_PREC_COUNT; i++) {
        troupe_prec_t p = (troupe_prec_t)i;
        cr_assert(troupe_prec_is_valid(p));
        cr_assert_eq(troupe_prec_size_bytes(p), sizes[i], "size of %s", s_names[i]);
        cr_assert_str_eq(troupe_prec_name(p), s_names[i]);
        cr_assert_str_eq(troupe_prec_c_type(p), ctypes[i]);
    }
    cr_assert_eq(sizeof(troupe_uint4x32_t), 16);
    cr_assert_not(troupe_prec_is_valid((troupe_prec_t)TROUPE_PREC_COUNT));
    cr_assert_not(troupe_prec_is_valid((troupe_prec_t)-1));
    cr_assert_str_eq(troupe_prec_name((troupe_prec_t)TROUPE_PREC_COUNT), "invalid");
    cr_assert_eq(troupe_prec_size_bytes((troupe_prec_t)99), 0);
}

Test(prec, of_string_accepts_every_name)
{
    for (int i = 0; i < TROUPE_PREC_COUNT; i++) {
        troupe_prec_t p = TROUPE_PREC_VOID;
        cr_assert_eq(troupe_prec_of_string(s_names[i], &p), TROUPE_OK, "%s", s_names[i]);
        cr_assert_eq(p, (troupe_prec_t)i);
    }
}

Test(prec, of_string_rejects_other_text)
{
    static const char *const bad[] = {"float", "", "Single", "half ", "fp16", "uint4x3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        troupe_prec_t p = TROUPE_PREC_DOUBLE;
        troupe_clear_error();
        cr_assert_eq(troupe_prec_of_string(bad[i], &p), TROUPE_INVALID_ARGUMENT, "\"%s\"", bad[i]);
        cr_assert_eq(p, TROUPE_PREC_DOUBLE, "out must stay untouched");
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
        cr_assert(strstr(troupe_last_error(), quoted) != NULL, "message %s", troupe_last_error());
        cr_assert(strstr(troupe_last_error(), "bfloat16") != NULL, "lists valid names");
    }
    troupe_prec_t p = TROUPE_PREC_BYTE;
    troupe_clear_error();
    cr_assert_eq(troupe_prec_of_string(NULL, &p), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(p, TROUPE_PREC_BYTE);
    cr_assert(strstr(troupe_last_error(), "NULL") != NULL, "message %s", troupe_last_error());
}

Test(prec, predicates)
{
    static const bool is_float[TROUPE_PREC_COUNT] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    static const bool up_to_fp16[TROUPE_PREC_COUNT] = {0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0};
    for (int i = 0; i < TROUPE_PREC_COUNT; i++) {
        cr_assert_eq(troupe_prec_is_float((troupe_prec_t)i), is_float[i], "%s", s_names[i]);
        cr_assert_eq(troupe_prec_is_up_to_fp16((troupe_prec_t)i), up_to_fp16[i], "%s", s_names[i]);
    }
    cr_assert_not(troupe_prec_is_float((troupe_prec_t)42));
    cr_assert_not(troupe_prec_is_up_to_fp16((troupe_prec_t)42));
    cr_assert(troupe_exceeds_fp16_cutoff(16384.0));
    cr_assert(troupe_exceeds_fp16_cutoff(-16384.0));
    cr_assert(troupe_exceeds_fp16_cutoff(INFINITY));
    cr_assert_not(troupe_exceeds_fp16_cutoff(16383.999));
    cr_assert_not(troupe_exceeds_fp16_cutoff(-16383.999));
    cr_assert_not(troupe_exceeds_fp16_cutoff(0.0));
    cr_assert_not(troupe_exceeds_fp16_cutoff(NAN));
}

Test(prec, promote_follows_the_seed_order)
{
    /* Winner first, as in OCANNL_NOTES §8.1. */
    static const troupe_prec_t order[TROUPE_PREC_COUNT] = {
        TROUPE_PREC_UINT4X32, TROUPE_PREC_DOUBLE, TROUPE_PREC_SINGLE, TROUPE_PREC_BFLOAT16,
        TROUPE_PREC_HALF,     TROUPE_PREC_FP8,    TROUPE_PREC_UINT64, TROUPE_PREC_INT64,
        TROUPE_PREC_UINT32,   TROUPE_PREC_INT32,  TROUPE_PREC_UINT16, TROUPE_PREC_BYTE,
        TROUPE_PREC_VOID,
    };
    for (int i = 0; i < TROUPE_PREC_COUNT; i++)
        for (int j = 0; j < TROUPE_PREC_COUNT; j++) {
            troupe_prec_t want = order[i < j ? i : j];
            cr_assert_eq(troupe_promote_prec(order[i], order[j]), want, "%s vs %s",
                         troupe_prec_name(order[i]), troupe_prec_name(order[j]));
        }
    cr_assert_eq(troupe_promote_prec(TROUPE_PREC_HALF, TROUPE_PREC_BFLOAT16), TROUPE_PREC_BFLOAT16);
    cr_assert_eq(troupe_promote_prec(TROUPE_PREC_UINT64, TROUPE_PREC_FP8), TROUPE_PREC_FP8);
    cr_assert_eq(troupe_promote_prec(TROUPE_PREC_DOUBLE, TROUPE_PREC_UINT4X32),
                 TROUPE_PREC_UINT4X32);
    cr_assert_eq(troupe_promote_prec(TROUPE_PREC_VOID, TROUPE_PREC_BYTE), TROUPE_PREC_BYTE);
    cr_assert_eq(troupe_promote_prec((troupe_prec_t)77, TROUPE_PREC_VOID), TROUPE_PREC_VOID);
}

/* ---- half ------------------------------------------------------------------------------- */

Test(half, all_codes_round_trip)
{
    s_ref_t r = s_ref_make(5, 10);
    s_check_all_codes(&r, s_dec_half, s_enc_half);
    free(r.table);
}

Test(half, midpoints_round_to_even)
{
    s_ref_t r = s_ref_make(5, 10);
    s_check_midpoints(&r, s_enc_half);
    free(r.table);
    /* between 0 and the smallest subnormal 2^-24 */
    cr_assert_eq(troupe_single_to_half(ldexpf(1.0f, -25)), 0x0000);
    cr_assert_eq(troupe_single_to_half(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
    cr_assert_eq(troupe_single_to_half(ldexpf(3.0f, -25)), 0x0002); /* 1.5 ulp -> even 2 */
}

Test(half, random_floats_match_reference)
{
    s_ref_t r = s_ref_make(5, 10);
    s_check_random(&r, s_enc_half, false, -27, 17);
    s_check_random(&r, s_enc_half_sat, true, -27, 17);
    free(r.table);
}

Test(half, overflow_and_saturation)
{
    cr_assert_eq(troupe_single_to_half(65504.0f), 0x7BFF);
    cr_assert_eq(troupe_single_to_half(65519.99f), 0x7BFF);
    cr_assert_eq(troupe_single_to_half(65520.0f), 0x7C00);
    cr_assert_eq(troupe_single_to_half(-65520.0f), 0xFC00);
    cr_assert_eq(troupe_single_to_half(1e10f), 0x7C00);
    cr_assert_eq(troupe_single_to_half(INFINITY), 0x7C00);
    cr_assert_eq(troupe_single_to_half(-INFINITY), 0xFC00);
    cr_assert_eq(troupe_single_to_half_sat(65520.0f), 0x7BFF);
    cr_assert_eq(troupe_single_to_half_sat(-1e10f), 0xFBFF);
    cr_assert_eq(troupe_single_to_half_sat(INFINITY), 0x7BFF);
    cr_assert_eq(troupe_single_to_half_sat(-INFINITY), 0xFBFF);
    cr_assert_eq(troupe_single_to_half_sat(1.0f), 0x3C00);
    cr_assert_eq(troupe_single_to_half(-0.0f), 0x8000);
    cr_assert_eq(troupe_single_to_half(ldexpf(1.0f, -24)), 0x0001);
    cr_assert_eq(troupe_single_to_half(ldexpf(1.0f, -14)), 0x0400);
    cr_assert_eq(troupe_single_to_half(FLT_TRUE_MIN), 0x0000);
    cr_assert_eq(troupe_single_to_half(-FLT_TRUE_MIN), 0x8000);
}

Test(half, nan_stays_quiet_nan_with_payload)
{
    /* quiet NaN, signalling NaN with a high payload, NaN with payload only in low bits */
    cr_assert_eq(troupe_single_to_half(s_float_of_bits(0x7FC00000u)), 0x7E00);
    cr_assert_eq(troupe_single_to_half(s_float_of_bits(0xFFC00000u)), 0xFE00);
    cr_assert_eq(troupe_single_to_half(s_float_of_bits(0x7F802000u)), 0x7E01);
    cr_assert_eq(troupe_single_to_half(s_float_of_bits(0x7F800001u)), 0x7E00);
    cr_assert_eq(troupe_single_to_half_sat(s_float_of_bits(0x7FC00000u)), 0x7E00);
    /* Signalling double NaNs reach the encoder unchanged through store_double (no
     * hardware conversion quiets them on the way): low payload only, then a high payload. */
    static const uint64_t snan_low = 0x7FF0000000000001ull, snan_high = 0xFFF4000000000000ull;
    double d;
    uint16_t h;
    memcpy(&d, &snan_low, sizeof d);
    troupe_prec_store_double(TROUPE_PREC_HALF, &h, d);
    cr_assert_eq(h, 0x7E00);
    troupe_prec_store_double(TROUPE_PREC_BFLOAT16, &h, d);
    cr_assert_eq(h, 0x7FC0);
    memcpy(&d, &snan_high, sizeof d);
    troupe_prec_store_double(TROUPE_PREC_HALF, &h, d);
    cr_assert_eq(h, 0xFF00);
    uint8_t e;
    troupe_prec_store_double(TROUPE_PREC_FP8, &e, d);
    cr_assert_eq(e, 0xFF); /* payload bits 01 plus the quiet bit */
    cr_assert_eq(s_bits_of_float(troupe_half_to_single(0x7C01)), 0x7FC02000u);
    cr_assert_eq(s_bits_of_float(troupe_half_to_single(0xFE00)), 0xFFC00000u);
}

#if defined(__FLT16_MAX__)
static uint16_t s_f16_bits(_Float16 h)
{
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}
#endif

Test(half, decoder_matches_compiler_float16)
{
#if defined(__FLT16_MAX__)
    for (uint32_t c = 0; c < 65536; c++) {
        _Float16 h;
        uint16_t bits = (uint16_t)c;
        memcpy(&h, &bits, sizeof h);
        float want = (float)h, got = troupe_half_to_single(bits);
        if (isnan(want)) {
            cr_assert(isnan(got) && !signbit(got) == !signbit(want), "code %#x", c);
        } else {
            cr_assert_eq(s_bits_of_float(got), s_bits_of_float(want), "code %#x: %a vs %a", c,
                         (double)got, (double)want);
        }
    }
#else
    cr_skip_test("compiler has no _Float16");
#endif
}

Test(half, encoder_matches_compiler_float16)
{
#if defined(__FLT16_MAX__)
    for (int i = 0; i < 1000000; i++) {
        float f = i % 3 == 0 ? s_float_of_bits(s_rand32()) : s_rand_float_in_exponents(-27, 17);
        uint16_t want = s_f16_bits((_Float16)f), got = troupe_single_to_half(f);
        if (isnan(f))
            cr_assert((got & 0x7FFF) > 0x7C00 && (got & 0x8000) == (want & 0x8000), "NaN %#x",
                      s_bits_of_float(f));
        else
            cr_assert_eq(got, want, "%a -> %#x, _Float16 gives %#x", (double)f, got, want);
    }
    /* every halfway case between adjacent finite halves, both signs */
    for (uint32_t c = 0; c < 0x7BFF; c++) {
        float lo = troupe_half_to_single((uint16_t)c);
        float hi = troupe_half_to_single((uint16_t)(c + 1));
        float mid = (lo + hi) / 2;
        cr_assert_eq(troupe_single_to_half(mid), s_f16_bits((_Float16)mid), "mid %a", (double)mid);
        cr_assert_eq(troupe_single_to_half(-mid), s_f16_bits((_Float16)-mid), "mid %a",
                     (double)-mid);
    }
    cr_assert_eq(troupe_single_to_half(65520.0f), s_f16_bits((_Float16)65520.0f));
#else
    cr_skip_test("compiler has no _Float16");
#endif
}

/* ---- bfloat16 --------------------------------------------------------------------------- */

Test(bfloat16, ocannl_reference_vectors)
{
    cr_assert_eq(troupe_single_to_bfloat16(0.0f), 0x0000);
    cr_assert_eq(troupe_single_to_bfloat16(1.0f), 0x3f80);
    cr_assert_eq(troupe_single_to_bfloat16(-1.0f), 0xbf80);
    cr_assert_eq(troupe_single_to_bfloat16(3.14159f), 0x4049);
    cr_assert_eq(troupe_single_to_bfloat16(0.001f), 0x3a83);
    cr_assert_eq(troupe_single_to_bfloat16(1000.0f), 0x447a);
    cr_assert_eq(troupe_single_to_bfloat16(INFINITY), 0x7f80);
    cr_assert_eq(troupe_single_to_bfloat16(-INFINITY), 0xff80);
    cr_assert_eq(troupe_bfloat16_to_single(0x4049), 3.140625f);
    cr_assert_eq(troupe_bfloat16_to_single(0xbf80), -1.0f);
}

Test(bfloat16, nan_with_low_payload_stays_nan)
{
    uint16_t b = troupe_single_to_bfloat16(s_float_of_bits(0x7f800001u));
    cr_assert((b & 0x7FFF) > 0x7F80, "got %#x (Inf would be OCANNL's defect)", b);
    cr_assert_eq(b, 0x7FC0);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0xff800001u)), 0xFFC0);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x7fa50000u)), 0x7FE5);
    cr_assert_eq(troupe_single_to_bfloat16_sat(s_float_of_bits(0x7f800001u)), 0x7FC0);
    cr_assert(isnan(troupe_bfloat16_to_single(0x7F81)));
}

Test(bfloat16, ties_to_even)
{
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x3f808000u)), 0x3f80);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x3f818000u)), 0x3f82);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x3f808001u)), 0x3f81);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x3f807fffu)), 0x3f80);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x00008000u)), 0x0000);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x00018000u)), 0x0002);
    s_ref_t r = s_ref_make(8, 7);
    s_check_midpoints(&r, s_enc_bf16);
    free(r.table);
}

Test(bfloat16, all_codes_round_trip)
{
    s_ref_t r = s_ref_make(8, 7);
    s_check_all_codes(&r, s_dec_bf16, s_enc_bf16);
    free(r.table);
    for (uint32_t c = 0; c < 65536; c++) {
        float f = troupe_bfloat16_to_single((uint16_t)c);
        if (!isnan(f))
            cr_assert_eq(s_bits_of_float(f), c << 16, "code %#x", c);
    }
}

Test(bfloat16, matches_ocannl_formula_except_nan_and_reference)
{
    s_ref_t r = s_ref_make(8, 7);
    for (int i = 0; i < 1000000; i++) {
        uint32_t bits = s_rand32();
        float f = s_float_of_bits(bits);
        if (isnan(f))
            continue;
        uint16_t want = (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
        cr_assert_eq(troupe_single_to_bfloat16(f), want, "%#x", bits);
    }
    s_check_random(&r, s_enc_bf16, false, -140, 127);
    s_check_random(&r, s_enc_bf16_sat, true, -140, 127);
    free(r.table);
}

Test(bfloat16, overflow_and_saturation)
{
    cr_assert_eq(troupe_single_to_bfloat16(FLT_MAX), 0x7F80);
    cr_assert_eq(troupe_single_to_bfloat16(s_float_of_bits(0x7F7F7FFFu)), 0x7F7F);
    cr_assert_eq(troupe_single_to_bfloat16_sat(FLT_MAX), 0x7F7F);
    cr_assert_eq(troupe_single_to_bfloat16_sat(-FLT_MAX), 0xFF7F);
    cr_assert_eq(troupe_single_to_bfloat16_sat(INFINITY), 0x7F7F);
    cr_assert_eq(troupe_single_to_bfloat16_sat(-INFINITY), 0xFF7F);
}

/* ---- fp8 (E5M2) ------------------------------------------------------------------------- */

Test(fp8, all_codes_round_trip)
{
    s_ref_t r = s_ref_make(5, 2);
    s_check_all_codes(&r, s_dec_fp8, s_enc_fp8);
    free(r.table);
    cr_assert_eq(troupe_fp8_to_single(0x7B), 57344.0f);
    cr_assert_eq(troupe_fp8_to_single(0x01), ldexpf(1.0f, -16));
    cr_assert_eq(troupe_fp8_to_single(0x03), ldexpf(3.0f, -16));
    cr_assert_eq(troupe_fp8_to_single(0x04), ldexpf(1.0f, -14));
    cr_assert(isinf(troupe_fp8_to_single(0xFC)) && troupe_fp8_to_single(0xFC) < 0);
}

Test(fp8, correctly_rounded_vectors)
{
    cr_assert_eq(troupe_single_to_fp8(1.5f), 0x3E);
    cr_assert_eq(troupe_single_to_fp8(1.75f), 0x3F);
    cr_assert_eq(troupe_single_to_fp8(3.0f), 0x42);
    cr_assert_eq(troupe_single_to_fp8(57344.0f), 0x7B);
    cr_assert_eq(troupe_single_to_fp8(0.1f), 0x2E);
    cr_assert_eq(troupe_single_to_fp8(1.25f), 0x3D);
    cr_assert_eq(troupe_single_to_fp8(-2.5f), 0xC1);
}

Test(fp8, ocannl_power_of_two_vectors)
{
    cr_assert_eq(troupe_single_to_fp8(0.0f), 0x00);
    cr_assert_eq(troupe_single_to_fp8(1.0f), 0x3c);
    cr_assert_eq(troupe_single_to_fp8(-1.0f), 0xbc);
    cr_assert_eq(troupe_single_to_fp8(0.5f), 0x38);
    cr_assert_eq(troupe_single_to_fp8(2.0f), 0x40);
    cr_assert_eq(troupe_single_to_fp8(0.125f), 0x30);
    cr_assert_eq(troupe_single_to_fp8(16.0f), 0x4c);
    cr_assert_eq(troupe_single_to_fp8(-0.25f), 0xb4);
}

Test(fp8, ties_to_even)
{
    cr_assert_eq(troupe_single_to_fp8(1.125f), 0x3C); /* between 1.0 (0x3C) and 1.25 */
    cr_assert_eq(troupe_single_to_fp8(1.375f), 0x3E); /* between 1.25 and 1.5 (0x3E) */
    cr_assert_eq(troupe_single_to_fp8(1.625f), 0x3E); /* between 1.5 and 1.75 */
    cr_assert_eq(troupe_single_to_fp8(1.875f), 0x40); /* between 1.75 and 2.0 */
    cr_assert_eq(troupe_single_to_fp8(nextafterf(1.125f, 2.0f)), 0x3D);
    cr_assert_eq(troupe_single_to_fp8(-1.375f), 0xBE);
    s_ref_t r = s_ref_make(5, 2);
    s_check_midpoints(&r, s_enc_fp8);
    free(r.table);
}

Test(fp8, subnormals)
{
    const float tiny = ldexpf(1.0f, -16); /* smallest subnormal, code 0x01 */
    cr_assert_eq(troupe_single_to_fp8(tiny), 0x01);
    cr_assert_eq(troupe_single_to_fp8(-tiny), 0x81);
    cr_assert_eq(troupe_single_to_fp8(tiny / 2), 0x00); /* tie -> even 0 */
    cr_assert_eq(troupe_single_to_fp8(-tiny / 2), 0x80);
    cr_assert_eq(troupe_single_to_fp8(nextafterf(tiny / 2, 1.0f)), 0x01); /* above tie */
    cr_assert_eq(troupe_single_to_fp8(tiny / 3), 0x00);
    cr_assert_eq(troupe_single_to_fp8(tiny * 1.5f), 0x02); /* tie between 1 and 2 -> 2 */
    cr_assert_eq(troupe_single_to_fp8(tiny * 2.5f), 0x02); /* tie between 2 and 3 -> 2 */
    cr_assert_eq(troupe_single_to_fp8(tiny * 3.5f), 0x04); /* up to the smallest normal */
    cr_assert_eq(troupe_single_to_fp8(FLT_TRUE_MIN), 0x00);
}

Test(fp8, overflow_and_saturation)
{
    cr_assert_eq(troupe_single_to_fp8(61440.0f), 0x7C);
    cr_assert_eq(troupe_single_to_fp8(-61440.0f), 0xFC);
    cr_assert_eq(troupe_single_to_fp8(61439.0f), 0x7B);
    cr_assert_eq(troupe_single_to_fp8(INFINITY), 0x7C);
    cr_assert_eq(troupe_single_to_fp8_sat(61440.0f), 0x7B);
    cr_assert_eq(troupe_single_to_fp8_sat(-61440.0f), 0xFB);
    cr_assert_eq(troupe_single_to_fp8_sat(INFINITY), 0x7B);
    cr_assert_eq(troupe_single_to_fp8_sat(-INFINITY), 0xFB);
    cr_assert_eq(troupe_single_to_fp8_sat(1e30f), 0x7B);
    cr_assert_eq(troupe_single_to_fp8_sat(1.5f), 0x3E);
    uint8_t n = troupe_single_to_fp8_sat(NAN);
    cr_assert((n & 0x7F) > 0x7C, "NaN stays NaN, got %#x", n);
    cr_assert_eq(troupe_single_to_fp8(s_float_of_bits(0xFF800001u)), 0xFE);
}

Test(fp8, random_floats_match_reference)
{
    s_ref_t r = s_ref_make(5, 2);
    s_check_random(&r, s_enc_fp8, false, -20, 17);
    s_check_random(&r, s_enc_fp8_sat, true, -20, 17);
    free(r.table);
}

/* ---- load / store as double ------------------------------------------------------------- */

/* Stores x as precision p into a buffer pre-filled with 0xAB, checks nothing past the
 * element was written, and returns the stored bytes through out (16 bytes). */
static void s_store(troupe_prec_t p, double x, void *out)
{
    unsigned char buf[32];
    memset(buf, 0xAB, sizeof buf);
    troupe_prec_store_double(p, buf, x);
    size_t n = troupe_prec_size_bytes(p);
    for (size_t i = n; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0xAB, "%s store wrote byte %zu", troupe_prec_name(p), i);
    memcpy(out, buf, 16);
}

/* s_store_<type>(p, x): stores x as precision p and reads the element back as <type>. */
#define S_DEFINE_STORE_AS(type, suffix)                                                            \
    static type s_store_##suffix(troupe_prec_t p, double x)                                        \
    {                                                                                              \
        type v;                                                                                    \
        unsigned char b[16];                                                                       \
        s_store(p, x, b);                                                                          \
        memcpy(&v, b, sizeof v);                                                                   \
        return v;                                                                                  \
    }
S_DEFINE_STORE_AS(uint8_t, u8)
S_DEFINE_STORE_AS(uint16_t, u16)
S_DEFINE_STORE_AS(int32_t, i32)
S_DEFINE_STORE_AS(uint32_t, u32)
S_DEFINE_STORE_AS(int64_t, i64)
S_DEFINE_STORE_AS(uint64_t, u64)
S_DEFINE_STORE_AS(float, f32)
S_DEFINE_STORE_AS(double, f64)

Test(store_double, small_unsigned_truncate_and_saturate)
{
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, 3.9), 3);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, 255.9), 255);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, 300.0), 255);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, -0.9), 0);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, -1000.0), 0);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, NAN), 0);
    cr_assert_eq(s_store_u8(TROUPE_PREC_BYTE, INFINITY), 255);
    cr_assert_eq(s_store_u16(TROUPE_PREC_UINT16, 65535.7), 65535);
    cr_assert_eq(s_store_u16(TROUPE_PREC_UINT16, 70000.0), 65535);
    cr_assert_eq(s_store_u16(TROUPE_PREC_UINT16, 1234.5), 1234);
    cr_assert_eq(s_store_u16(TROUPE_PREC_UINT16, -5.0), 0);
    cr_assert_eq(s_store_u16(TROUPE_PREC_UINT16, NAN), 0);
}

Test(store_double, int32_and_uint32)
{
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, -3.9), -3);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, 3.9), 3);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, 3e9), INT32_MAX);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, -3e9), INT32_MIN);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, INFINITY), INT32_MAX);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, -INFINITY), INT32_MIN);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, NAN), 0);
    cr_assert_eq(s_store_i32(TROUPE_PREC_INT32, -2147483648.0), INT32_MIN);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, 4294967295.5), UINT32_MAX);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, 5e9), UINT32_MAX);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, -0.5), 0);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, -7.0), 0);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, NAN), 0);
    cr_assert_eq(s_store_u32(TROUPE_PREC_UINT32, 4000000000.25), 4000000000u);
}

Test(store_double, int64_and_uint64)
{
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, -123456789012.7), -123456789012LL);
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, 9223372036854775808.0), INT64_MAX); /* 2^63 */
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, 1e19), INT64_MAX);
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, -9223372036854775808.0), INT64_MIN); /* exact */
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, -1e19), INT64_MIN);
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, 9223372036854774784.0),
                 9223372036854774784LL); /* largest < 2^63 */
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, NAN), 0);
    cr_assert_eq(s_store_i64(TROUPE_PREC_INT64, -INFINITY), INT64_MIN);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, 18446744073709551616.0), UINT64_MAX); /* 2^64 */
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, 1.8e19), 18000000000000000000ull);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, 18446744073709549568.0), 18446744073709549568ull);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, -1.0), 0);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, NAN), 0);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, INFINITY), UINT64_MAX);
    cr_assert_eq(s_store_u64(TROUPE_PREC_UINT64, 42.99), 42);
}

Test(store_double, uint4x32_sets_word0_and_zeroes_the_rest)
{
    troupe_uint4x32_t v = {{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}};
    troupe_prec_store_double(TROUPE_PREC_UINT4X32, &v, 7.9);
    cr_assert(v.v[0] == 7 && v.v[1] == 0 && v.v[2] == 0 && v.v[3] == 0);
    troupe_prec_store_double(TROUPE_PREC_UINT4X32, &v, 1e10);
    cr_assert_eq(v.v[0], UINT32_MAX);
    troupe_prec_store_double(TROUPE_PREC_UINT4X32, &v, -1.0);
    cr_assert_eq(v.v[0], 0);
    troupe_prec_store_double(TROUPE_PREC_UINT4X32, &v, NAN);
    cr_assert_eq(v.v[0], 0);
    troupe_uint4x32_t w = {{123456789u, 5u, 6u, 7u}};
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_UINT4X32, &w), 123456789.0);
}

Test(store_double, floats)
{
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, 1.0), 0x3C00);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, 65520.0), 0x7C00);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, 65519.99), 0x7BFF);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, -1e300), 0xFC00);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, 1e-300), 0x0000);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, -5e-324), 0x8000); /* double subnormal */
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, NAN) & 0x7E00, 0x7E00);
    cr_assert_eq(s_store_u16(TROUPE_PREC_BFLOAT16, 3.14159), 0x4049);
    cr_assert_eq(s_store_u16(TROUPE_PREC_BFLOAT16, 1e300), 0x7F80);
    cr_assert_eq(s_store_u16(TROUPE_PREC_BFLOAT16, NAN) & 0x7FC0, 0x7FC0);
    cr_assert_eq(s_store_u8(TROUPE_PREC_FP8, 1.5), 0x3E);
    cr_assert_eq(s_store_u8(TROUPE_PREC_FP8, 0.1), 0x2E);
    cr_assert_eq(s_store_u8(TROUPE_PREC_FP8, -61440.0), 0xFC);
    cr_assert_eq(s_store_f32(TROUPE_PREC_SINGLE, 0.1), 0.1f);
    cr_assert_eq(s_store_f64(TROUPE_PREC_DOUBLE, 0.1), 0.1);
}

Test(store_double, rounds_directly_without_double_rounding)
{
    /* Each x lies just above a midpoint of the target format, but so little above that
     * rounding to float first lands exactly on the midpoint, which would then tie to the
     * even (lower) code. The direct rounding must give the upper code. */
    const double eps = ldexp(1.0, -40);
    cr_assert_eq(troupe_single_to_half((float)(1.0 + ldexp(1.0, -11) + eps)), 0x3C00);
    cr_assert_eq(s_store_u16(TROUPE_PREC_HALF, 1.0 + ldexp(1.0, -11) + eps), 0x3C01);
    cr_assert_eq(s_store_u16(TROUPE_PREC_BFLOAT16, 1.0 + ldexp(1.0, -8) + eps), 0x3F81);
    cr_assert_eq(s_store_u8(TROUPE_PREC_FP8, 1.0 + ldexp(1.0, -3) + eps), 0x3D);
    cr_assert_eq(s_store_u8(TROUPE_PREC_FP8, 1.0 + ldexp(1.0, -3) - eps), 0x3C);
}

Test(load_double, every_precision)
{
    uint8_t u8 = 200;
    uint16_t u16 = 65535;
    int32_t i32 = -7;
    uint32_t u32 = 4000000000u;
    int64_t i64 = -(1LL << 40);
    uint64_t u64 = 1ull << 63;
    uint16_t h = 0xC100, b = 0x4049;
    uint8_t f8 = 0x3F;
    float f = 0.1f;
    double d = -2.5;
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_BYTE, &u8), 200.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_UINT16, &u16), 65535.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_INT32, &i32), -7.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_UINT32, &u32), 4000000000.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_INT64, &i64), -1099511627776.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_UINT64, &u64), 9223372036854775808.0);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_HALF, &h), -2.5);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_BFLOAT16, &b), 3.140625);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_FP8, &f8), 1.75);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_SINGLE, &f), (double)0.1f);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_DOUBLE, &d), -2.5);
    cr_assert_eq(troupe_prec_load_double(TROUPE_PREC_VOID, &d), 0.0);
    uint16_t nan_h = 0x7E00;
    cr_assert(isnan(troupe_prec_load_double(TROUPE_PREC_HALF, &nan_h)));
}

Test(load_double, store_then_load_round_trips_exact_values)
{
    /* values exactly representable in every precision */
    static const double xs[] = {0.0, 1.0, 2.0, 3.0, 12.0, 96.0};
    for (int p = 1; p < TROUPE_PREC_COUNT; p++) {
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            unsigned char buf[16] = {0};
            troupe_prec_store_double((troupe_prec_t)p, buf, xs[i]);
            double back = troupe_prec_load_double((troupe_prec_t)p, buf);
            cr_assert_eq(back, xs[i], "%s: %g -> %g", s_names[p], xs[i], back);
        }
    }
}

Test(store_double, void_writes_nothing)
{
    unsigned char buf[8];
    memset(buf, 0xAB, sizeof buf);
    troupe_prec_store_double(TROUPE_PREC_VOID, buf, 1.0);
    troupe_prec_store_double((troupe_prec_t)99, buf, 1.0);
    for (size_t i = 0; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0xAB);
}
