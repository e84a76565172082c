/* troupe — precisions of seed Ops (`Ir.Ops.prec`) and conversions between them.
 *
 * The 12 element precisions plus void, their byte sizes, names, C type names and the
 * promotion order of OCANNL_NOTES §8.1; and the float format conversions, all
 * round-to-nearest-even with subnormals, infinities and NaN handled:
 *   single <-> half (IEEE binary16), single <-> bfloat16, single <-> fp8.
 * fp8 is E5M2 (1 sign, 5 exponent bits with bias 15, 2 mantissa bits; exponent 31 holds
 * infinities and NaN), the seed's fp8 and CUDA's __nv_fp8_e5m2. OCANNL's C encoder is
 * wrong (1.5 encodes to 1.25, OCANNL_NOTES §8.2); troupe's is correctly rounded.
 *
 * Overflow rule: the plain encoders follow IEEE 754 — a finite value whose rounded
 * magnitude exceeds the largest finite code becomes +/-infinity. The *_sat encoders
 * saturate instead: such values (and infinities) become the largest finite code of the same
 * sign (CUDA's __NV_SATFINITE); NaN stays NaN in both.
 *
 * Thread safety: all functions are pure and thread-safe. Ownership: nothing allocated;
 * returned strings are static.
 */
#ifndef TROUPE_IR_PREC_H
#define TROUPE_IR_PREC_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seed Ops `prec`, in the seed's order. Values are stable (they appear in text forms). */
typedef enum troupe_prec {
    TROUPE_PREC_VOID = 0,
    TROUPE_PREC_BYTE,     /* uint8 */
    TROUPE_PREC_UINT16,
    TROUPE_PREC_INT32,
    TROUPE_PREC_UINT32,
    TROUPE_PREC_INT64,
    TROUPE_PREC_UINT64,
    TROUPE_PREC_UINT4X32, /* 128-bit value: four uint32 words, word 0 first */
    TROUPE_PREC_HALF,     /* IEEE binary16, stored as uint16_t bits */
    TROUPE_PREC_BFLOAT16, /* stored as uint16_t bits */
    TROUPE_PREC_FP8,      /* E5M2, stored as uint8_t bits */
    TROUPE_PREC_SINGLE,
    TROUPE_PREC_DOUBLE,
} troupe_prec_t;

#define TROUPE_PREC_COUNT 13

/* A 128-bit uint4x32 value. */
typedef struct troupe_uint4x32 {
    uint32_t v[4];
} troupe_uint4x32_t;

/* Size of one element in bytes: 0 1 2 4 4 8 8 16 2 2 1 4 8 in enum order. */
size_t troupe_prec_size_bytes(troupe_prec_t p);

/* Lower-case seed name: "void" "byte" "uint16" "int32" "uint32" "int64" "uint64"
 * "uint4x32" "half" "bfloat16" "fp8" "single" "double"; "invalid" out of range. */
const char *troupe_prec_name(troupe_prec_t p);

/* Parses a seed name (exact, lower-case) into *out. Returns TROUPE_INVALID_ARGUMENT naming
 * the text for anything else (out untouched). */
TROUPE_MUST_USE troupe_status_t troupe_prec_of_string(const char *name, troupe_prec_t *out);

/* True for a value in the enum's range. */
bool troupe_prec_is_valid(troupe_prec_t p);

/* half, bfloat16, fp8, single, double. */
bool troupe_prec_is_float(troupe_prec_t p);

/* Seed `is_up_to_fp16`: byte, uint16, half, bfloat16, fp8 (element size <= 2 bytes,
 * non-void). */
bool troupe_prec_is_up_to_fp16(troupe_prec_t p);

/* The precision a value of precision p computes in: single for the small floats (half,
 * bfloat16, fp8), which troupe stores narrow and computes wide (the interpreter, generated C and
 * CUDA alike); p itself for every other precision. */
troupe_prec_t troupe_prec_compute(troupe_prec_t p);

/* Seed `exceeds_fp16_cutoff`: |c| >= 2^14 (OCANNL's check_half_prec_constants_cutoff), the
 * point from which a half-precision constant forces single precision. */
bool troupe_exceeds_fp16_cutoff(double c);

/* Seed `promote_prec`: the precision that wins when two meet (OCANNL_NOTES §8.1), winner
 * first: uint4x32 > double > single > bfloat16 > half > fp8 > uint64 > int64 > uint32 >
 * int32 > uint16 > byte > void. */
troupe_prec_t troupe_promote_prec(troupe_prec_t a, troupe_prec_t b);

/* C storage type of one element as generated code declares it: "uint8_t" "uint16_t"
 * "int32_t" "uint32_t" "int64_t" "uint64_t" "uint4x32_t" "uint16_t" (half) "uint16_t"
 * (bfloat16) "uint8_t" (fp8) "float" "double" "void". CUDA names come from compiler/cgen. */
const char *troupe_prec_c_type(troupe_prec_t p);

/* ---- conversions (bits in, bits out) ---------------------------------------------------- */
float troupe_half_to_single(uint16_t h);
uint16_t troupe_single_to_half(float f);     /* RNE, overflow -> inf */
uint16_t troupe_single_to_half_sat(float f); /* RNE, overflow/inf -> +/-65504 */
float troupe_bfloat16_to_single(uint16_t b);
uint16_t troupe_single_to_bfloat16(float f); /* RNE, overflow -> inf, NaN stays NaN (quiet) */
uint16_t troupe_single_to_bfloat16_sat(float f);
float troupe_fp8_to_single(uint8_t e5m2);
uint8_t troupe_single_to_fp8(float f);     /* E5M2 RNE, overflow -> inf */
uint8_t troupe_single_to_fp8_sat(float f); /* E5M2 RNE, overflow/inf -> +/-57344 */

/* Converts one element of precision `p` at `src` to double (uint4x32: word 0). */
double troupe_prec_load_double(troupe_prec_t p, const void *src);

/* Stores `x` as one element of precision `p` at `dst`, rounding as the precision's
 * conversion does (floats RNE; integers truncate toward zero and saturate to the type's
 * range, NaN -> 0; uint4x32 sets word 0 and zeroes the rest). */
void troupe_prec_store_double(troupe_prec_t p, void *dst, double x);

#ifdef __cplusplus
}
#endif
#endif
