/* troupe — the prelude of generated code (see compiler/cgen_impl.h for how it is assembled).
 *
 * Every helper here restates a host function so that generated code computes the same bits:
 *   - half/bfloat16/fp8 <-> single: ir/prec.c (RNE from the double value, overflow to
 *     infinity, NaN kept quiet with its top payload bits; decoding exact);
 *   - Threefry4x32 (OCANNL's variant, crypto 20 rounds, light 2), counter construction
 *     (<prec>_to_uint4x32, spreading of 32-bit counters), uint4x32 -> uniform values
 *     (pointwise and vectorised), satur01 gates, integer max/min: ir/ops.c, whose C syntax
 *     (ops.h) references these identifiers. troupe_cgen_c_prelude returns all of them,
 *     assembled below: this file is their only text.
 * tests/test_cgen.c compiles generated routines and compares them with the host functions
 * (exhaustively for the small-float decoders).
 *
 * Texts are written in the common subset of C11 and CUDA C++: no compound literals, no
 * designated initialisers, no static locals, no hex-float literals (the constants 2^-k are
 * written as exact decimals), bit casts through troupe__f32_bits & co. (memcpy in C,
 * intrinsics in CUDA).
 */
#include "compiler/cgen_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- core texts ------------------------------------------------------------------------- */

static const char s_core_c[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "#if defined(__GNUC__)\n"
    "#define TROUPE_FN static inline __attribute__((unused))\n"
    "#else\n"
    "#define TROUPE_FN static inline\n"
    "#endif\n"
    "#define TROUPE_INF_F ((float)INFINITY)\n"
    "#define TROUPE_NAN_F ((float)NAN)\n"
    "#define TROUPE_INF_D ((double)INFINITY)\n"
    "#define TROUPE_NAN_D ((double)NAN)\n"
    "/* A lane sum's lanes stay one vector loop (compiler/cgen.h, \"Lane sums\"). */\n"
    "#if defined(__GNUC__)\n"
    "#define TROUPE_LANE_LOOP _Pragma(\"GCC unroll 1\")\n"
    "#else\n"
    "#define TROUPE_LANE_LOOP\n"
    "#endif\n"
    "/* No contraction of a*b+c into fma, and wrapping signed integer arithmetic: results must\n"
    " * match the interpreter bit for bit (compiler/interp.h). */\n"
    "#if defined(__clang__)\n"
    "#pragma STDC FP_CONTRACT OFF\n"
    "#elif defined(__GNUC__)\n"
    "#pragma GCC optimize(\"fp-contract=off\", \"wrapv\")\n"
    "#endif\n";

static const char s_core_cuda[] =
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef short int16_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef int int32_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef long long int64_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "#define TROUPE_FN static __device__ __forceinline__\n"
    "#define TROUPE_INF_F __int_as_float(0x7f800000)\n"
    "#define TROUPE_NAN_F __int_as_float(0x7fc00000)\n"
    "#define TROUPE_INF_D __longlong_as_double(0x7ff0000000000000LL)\n"
    "#define TROUPE_NAN_D __longlong_as_double(0x7ff8000000000000LL)\n"
    "#ifndef TROUPE_DYN_SHARED\n"
    "#define TROUPE_DYN_SHARED(name) extern __shared__ __align__(16) unsigned char name[]\n"
    "#endif\n";

const char *troupe__cgen_core(troupe_cgen_dialect_t dialect)
{
    switch (dialect) {
    case TROUPE_CGEN_C:
        return s_core_c;
    case TROUPE_CGEN_CUDA:
        return s_core_cuda;
    default:
        return NULL;
    }
}

/* ---- sections ----------------------------------------------------------------------------- */

static const char s_bits_c[] = "TROUPE_FN uint32_t troupe__f32_bits(float f) { uint32_t u; "
                               "memcpy(&u, &f, sizeof u); return u; }\n"
                               "TROUPE_FN float troupe__bits_f32(uint32_t u) { float f; memcpy(&f, "
                               "&u, sizeof f); return f; }\n"
                               "TROUPE_FN uint64_t troupe__f64_bits(double d) { uint64_t u; "
                               "memcpy(&u, &d, sizeof u); return u; }\n";

static const char s_bits_cuda[] =
    "TROUPE_FN uint32_t troupe__f32_bits(float f) { return __float_as_uint(f); }\n"
    "TROUPE_FN float troupe__bits_f32(uint32_t u) { return __uint_as_float(u); }\n"
    "TROUPE_FN uint64_t troupe__f64_bits(double d) { return (uint64_t)__double_as_longlong(d); }\n";

static const char s_u4[] = "#ifndef TROUPE_UINT4X32_T_DEFINED\n"
                           "#define TROUPE_UINT4X32_T_DEFINED\n"
                           "typedef struct { uint32_t v[4]; } uint4x32_t;\n"
                           "#endif\n";

static const char s_u4_make[] =
    "TROUPE_FN uint4x32_t troupe__u4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {\n"
    "  uint4x32_t r; r.v[0] = a; r.v[1] = b; r.v[2] = c; r.v[3] = d; return r;\n"
    "}\n";

/* ir/prec.c s_encode without saturation: round the double x to a format with eb exponent
 * bits (bias 2^(eb-1)-1, all-ones = inf/NaN) and mb mantissa bits, RNE, by integer
 * arithmetic on the double's bits. */
static const char s_encode[] =
    "TROUPE_FN uint32_t troupe__encode_small(double x, int eb, int mb) {\n"
    "  const int32_t bias = (1 << (eb - 1)) - 1;\n"
    "  const uint64_t all1 = ((uint64_t)1 << eb) - 1;\n"
    "  const uint64_t inf_code = all1 << mb;\n"
    "  const uint64_t d = troupe__f64_bits(x);\n"
    "  const uint64_t sign = (d >> 63) << (eb + mb);\n"
    "  const int32_t dexp = (int32_t)((d >> 52) & 0x7FF);\n"
    "  const uint64_t dman = d & (((uint64_t)1 << 52) - 1);\n"
    "  uint64_t code;\n"
    "  if (dexp == 0x7FF && dman != 0) {\n"
    "    code = inf_code | (dman >> (52 - mb)) | ((uint64_t)1 << (mb - 1));\n"
    "  } else if (dexp == 0x7FF) {\n"
    "    code = inf_code;\n"
    "  } else if (dexp == 0) {\n"
    "    code = 0;\n"
    "  } else {\n"
    "    const uint64_t sig = dman | ((uint64_t)1 << 52);\n"
    "    const int32_t te = dexp - 1023 + bias;\n"
    "    if (te >= (int32_t)all1) {\n"
    "      code = inf_code;\n"
    "    } else {\n"
    "      int shift = 52 - mb + (te < 1 ? 1 - te : 0);\n"
    "      if (shift > 54) shift = 54;\n"
    "      const uint64_t q = sig >> shift;\n"
    "      const uint64_t rem = sig & (((uint64_t)1 << shift) - 1);\n"
    "      const uint64_t halfway = (uint64_t)1 << (shift - 1);\n"
    "      const uint64_t up = (rem > halfway || (rem == halfway && (q & 1))) ? 1 : 0;\n"
    "      code = (te < 1 ? 0 : ((uint64_t)(te - 1) << mb)) + q + up;\n"
    "    }\n"
    "    if (code >= inf_code) code = inf_code;\n"
    "  }\n"
    "  return (uint32_t)(sign | code);\n"
    "}\n";

/* Decoders: exact; NaN keeps sign and payload (moved to the top) and becomes quiet, as
 * ir/prec.c s_decode. */
static const char s_half[] =
    "TROUPE_FN float troupe_half_to_single(uint16_t h) {\n"
    "  const uint32_t neg = (uint32_t)(h >> 15) & 1u, e = (uint32_t)(h >> 10) & 0x1Fu;\n"
    "  const uint32_t m = (uint32_t)h & 0x3FFu;\n"
    "  if (e == 0x1Fu)\n"
    "    return troupe__bits_f32((neg << 31) | 0x7F800000u | (m != 0 ? (m << 13) | 0x00400000u : "
    "0u));\n"
    "  if (e == 0) {\n"
    "    const float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */\n"
    "    return neg ? -v : v;\n"
    "  }\n"
    "  return troupe__bits_f32((neg << 31) | ((e + 112u) << 23) | (m << 13));\n"
    "}\n"
    /* RNE on the bits, troupe__encode_small((double)f, 5, 10) bit for bit (checked for all
     * 2^32 inputs against ir/prec.c): NaN quiet with its top payload; from 65520 up the carry
     * reaches infinity; below 2^-14 the significand shifted to units of 2^-24 (subnormals) */
    "TROUPE_FN uint16_t troupe_single_to_half(float f) {\n"
    "  const uint32_t u = troupe__f32_bits(f), sign = (u >> 16) & 0x8000u;\n"
    "  const uint32_t a = u & 0x7FFFFFFFu;\n"
    "  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));\n"
    "  if (a >= 0x47800000u) return (uint16_t)(sign | 0x7C00u);\n"
    "  if (a >= 0x38800000u) {\n"
    "    const uint32_t r = a - 0x38000000u;\n"
    "    return (uint16_t)(sign | ((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13));\n"
    "  }\n"
    "  const uint32_t e = a >> 23;\n"
    "  if (e < 102u) return (uint16_t)sign;\n"
    "  const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u, sh = 126u - e;\n"
    "  const uint32_t q = sig >> sh, rem = sig & ((1u << sh) - 1u), hw = 1u << (sh - 1u);\n"
    "  return (uint16_t)(sign | (q + (rem > hw || (rem == hw && (q & 1u)))));\n"
    "}\n";

static const char s_bf16[] = "TROUPE_FN float troupe_bfloat16_to_single(uint16_t b) {\n"
                             "  const uint32_t u = (uint32_t)b << 16;\n"
                             "  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007F0000u) != 0)\n"
                             "    return troupe__bits_f32(u | 0x00400000u);\n"
                             "  return troupe__bits_f32(u);\n"
                             "}\n"
                             /* RNE on the bits: bfloat16 is single's top half, so this is
                              * troupe__encode_small((double)f, 8, 7) bit for bit (overflow
                              * carries into infinity; NaN keeps its top payload, made quiet),
                              * in straight-line code GCC vectorises. */
                             "TROUPE_FN uint16_t troupe_single_to_bfloat16(float f) {\n"
                             "  const uint32_t u = troupe__f32_bits(f);\n"
                             "  if ((u & 0x7FFFFFFFu) > 0x7F800000u)\n"
                             "    return (uint16_t)((u >> 16) | 0x0040u);\n"
                             "  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);\n"
                             "}\n";

static const char s_fp8[] =
    "TROUPE_FN float troupe_fp8_to_single(uint8_t x) {\n"
    "  const uint32_t neg = (uint32_t)(x >> 7) & 1u, e = (uint32_t)(x >> 2) & 0x1Fu;\n"
    "  const uint32_t m = (uint32_t)x & 0x3u;\n"
    "  if (e == 0x1Fu)\n"
    "    return troupe__bits_f32((neg << 31) | 0x7F800000u | (m != 0 ? (m << 21) | 0x00400000u : "
    "0u));\n"
    "  if (e == 0) {\n"
    "    const float v = (float)m * 1.52587890625e-05f; /* 2^-16 */\n"
    "    return neg ? -v : v;\n"
    "  }\n"
    "  return troupe__bits_f32((neg << 31) | ((e + 112u) << 23) | (m << 21));\n"
    "}\n"
    "TROUPE_FN uint8_t troupe_single_to_fp8(float f) {\n"
    "  return (uint8_t)troupe__encode_small((double)f, 5, 2);\n"
    "}\n";

/* CUDA texts of the three sections above: CUDA's own types and conversions (cuda_fp16.h,
 * cuda_bf16.h, cuda_fp8.h; NVRTC finds them on the toolkit include path devices/cuda/nvrtc.c
 * passes), with the rounding of ir/prec.c: __float2half_rn, __float2bfloat16_rn and
 * __nv_cvt_float_to_fp8(.., __NV_NOSAT, __NV_E5M2) round to nearest even with subnormals and
 * overflow to infinity, and the widening conversions are exact. Only NaN differs (CUDA gives
 * the canonical NaN 0x7FFF / 0x7F and does not keep the payload, troupe keeps sign and top
 * payload bits and sets the quiet bit), so NaN takes troupe's software rule, in both
 * directions. troupe__nan_small: ir/prec.c s_encode's NaN branch on a float's bits. */
static const char s_nan_small_cuda[] =
    "TROUPE_FN uint32_t troupe__nan_small(uint32_t u, int eb, int mb) {\n"
    "  return ((u >> 31) << (eb + mb)) | (((1u << eb) - 1u) << mb) | ((u & 0x7FFFFFu) >> (23 - "
    "mb))\n"
    "         | (1u << (mb - 1));\n"
    "}\n"
    "TROUPE_FN float troupe__nan_single(uint32_t code, int eb, int mb) {\n"
    "  return troupe__bits_f32(((code >> (eb + mb)) << 31) | 0x7FC00000u\n"
    "                          | ((code & ((1u << mb) - 1u)) << (23 - mb)));\n"
    "}\n";

#define S_IS_NAN_SMALL(X, EXP, MAN) "((" X " & " EXP ") == " EXP " && (" X " & " MAN ") != 0)"

static const char s_half_cuda[] =
    "#include <cuda_fp16.h>\n"
    "TROUPE_FN float troupe_half_to_single(uint16_t h) {\n"
    "  if " S_IS_NAN_SMALL(
        "h", "0x7C00u",
        "0x3FFu") " return troupe__nan_single(h, 5, 10);\n"
                  "  return __half2float(__ushort_as_half(h));\n"
                  "}\n"
                  "TROUPE_FN uint16_t troupe_single_to_half(float f) {\n"
                  "  if (f != f) return (uint16_t)troupe__nan_small(troupe__f32_bits(f), 5, 10);\n"
                  "  return __half_as_ushort(__float2half_rn(f));\n"
                  "}\n";

static const char s_bf16_cuda[] =
    "#include <cuda_bf16.h>\n"
    "TROUPE_FN float troupe_bfloat16_to_single(uint16_t b) {\n"
    "  if " S_IS_NAN_SMALL(
        "b", "0x7F80u",
        "0x7Fu") " return troupe__nan_single(b, 8, 7);\n"
                 "  return __bfloat162float(__ushort_as_bfloat16(b));\n"
                 "}\n"
                 "TROUPE_FN uint16_t troupe_single_to_bfloat16(float f) {\n"
                 "  if (f != f) return (uint16_t)troupe__nan_small(troupe__f32_bits(f), 8, 7);\n"
                 "  return __bfloat16_as_ushort(__float2bfloat16_rn(f));\n"
                 "}\n";

static const char s_fp8_cuda[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_fp8.h>\n"
    "TROUPE_FN float troupe_fp8_to_single(uint8_t x) {\n"
    "  if " S_IS_NAN_SMALL(
        "x", "0x7Cu",
        "0x3u") " return troupe__nan_single(x, 5, 2);\n"
                "  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x, "
                "__NV_E5M2)));\n"
                "}\n"
                "TROUPE_FN uint8_t troupe_single_to_fp8(float f) {\n"
                "  if (f != f) return (uint8_t)troupe__nan_small(troupe__f32_bits(f), 5, 2);\n"
                "  return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E5M2);\n"
                "}\n";

static const char s_rotl[] = "TROUPE_FN uint32_t troupe__rotl32(uint32_t x, unsigned n) {\n"
                             "  return (x << n) | (x >> (32u - n));\n"
                             "}\n";

/* OCANNL's Threefry4x32: a round is two MIX layers on (x0,x1), (x2,x3), each followed by
 * swapping x1 and x3; rotations (13,15,26,6) on even rounds, (17,29,16,24) on odd ones; key
 * injection s after every 4th round and after the last. */
static const char s_threefry[] =
    "TROUPE_FN void troupe__tf_mix(uint32_t x[4], unsigned ra, unsigned rb) {\n"
    "  uint32_t t;\n"
    "  x[0] += x[1]; x[1] = troupe__rotl32(x[1], ra); x[1] ^= x[0];\n"
    "  x[2] += x[3]; x[3] = troupe__rotl32(x[3], rb); x[3] ^= x[2];\n"
    "  t = x[1]; x[1] = x[3]; x[3] = t;\n"
    "}\n"
    "TROUPE_FN uint4x32_t troupe__threefry4x32(uint4x32_t key, uint4x32_t ctr, int rounds) {\n"
    "  uint32_t ks[5], x[4];\n"
    "  uint4x32_t out;\n"
    "  int i, r, s = 0;\n"
    "  ks[4] = 0x1BD11BDAu;\n"
    "  for (i = 0; i < 4; i++) { ks[i] = key.v[i]; ks[4] ^= key.v[i]; x[i] = ctr.v[i] + ks[i]; }\n"
    "  for (r = 0; r < rounds; r++) {\n"
    "    if ((r & 1) == 0) { troupe__tf_mix(x, 13, 15); troupe__tf_mix(x, 26, 6); }\n"
    "    else { troupe__tf_mix(x, 17, 29); troupe__tf_mix(x, 16, 24); }\n"
    "    if ((r + 1) % 4 == 0 || r == rounds - 1) {\n"
    "      s++;\n"
    "      for (i = 0; i < 4; i++) x[i] += ks[(s + i) % 5];\n"
    "      x[3] += (uint32_t)s;\n"
    "    }\n"
    "  }\n"
    "  for (i = 0; i < 4; i++) out.v[i] = x[i];\n"
    "  return out;\n"
    "}\n";

static const char s_threefry_crypto[] =
    "TROUPE_FN uint4x32_t troupe_threefry4x32_crypto(uint4x32_t key, uint4x32_t ctr) {\n"
    "  return troupe__threefry4x32(key, ctr, 20);\n"
    "}\n";

static const char s_threefry_light[] =
    "TROUPE_FN uint4x32_t troupe_threefry4x32_light(uint4x32_t key, uint4x32_t ctr) {\n"
    "  return troupe__threefry4x32(key, ctr, 2);\n"
    "}\n";

static const char s_spread32[] =
    "TROUPE_FN uint4x32_t troupe__spread32(uint32_t u) {\n"
    "  return troupe__u4(u, u ^ 0x9E3779B9u, u ^ 0x6C078965u, u ^ troupe__rotl32(u, 16));\n"
    "}\n";

static const char s_split64[] = "TROUPE_FN uint4x32_t troupe__split64(uint64_t u) {\n"
                                "  return troupe__u4((uint32_t)u, (uint32_t)(u >> 32), 0, 0);\n"
                                "}\n";

/* Counter construction (ops.h troupe_prec_bits_to_uint4x32). */
#define S_CTR_LOW(P, T)                                                                            \
    "TROUPE_FN uint4x32_t troupe_" P "_to_uint4x32(" T " x) { return troupe__u4(x, 0, 0, 0); }\n"
#define S_CTR_SPREAD(P, T)                                                                         \
    "TROUPE_FN uint4x32_t troupe_" P "_to_uint4x32(" T                                             \
    " x) { return troupe__spread32((uint32_t)x); }\n"
#define S_CTR_SPLIT(P, T)                                                                          \
    "TROUPE_FN uint4x32_t troupe_" P "_to_uint4x32(" T                                             \
    " x) { return troupe__split64((uint64_t)x); }\n"

static const char s_ctr_single[] = "TROUPE_FN uint4x32_t troupe_single_to_uint4x32(float x) {\n"
                                   "  return troupe__u4(troupe__f32_bits(x), 0, 0, 0);\n"
                                   "}\n";
static const char s_ctr_double[] = "TROUPE_FN uint4x32_t troupe_double_to_uint4x32(double x) {\n"
                                   "  return troupe__split64(troupe__f64_bits(x));\n"
                                   "}\n";

/* Uniform helpers (ops.c troupe_uint4x32_to_prec_uniform1 and _uniform). */
static const char s_unit_f[] = "TROUPE_FN float troupe__unit_f(uint32_t v) {\n"
                               "  return (float)(v >> 8) * 5.9604644775390625e-08f; /* 2^-24 */\n"
                               "}\n";
static const char s_w64[] = "TROUPE_FN uint64_t troupe__w64(uint32_t lo, uint32_t hi) {\n"
                            "  return ((uint64_t)hi << 32) | lo;\n"
                            "}\n";
static const char s_unit_d[] =
    "TROUPE_FN double troupe__unit_d(uint32_t lo, uint32_t hi) {\n"
    "  return (double)(troupe__w64(lo, hi) >> 11) * 1.1102230246251565404236316680908203125e-16;\n"
    "}\n";
static const char s_half_rz[] =
    "TROUPE_FN uint16_t troupe__half_rz(float f) {\n"
    "  const uint32_t b = troupe__f32_bits(f);\n"
    "  if (b < 0x38800000u) return (uint16_t)(f * 16777216.0f);\n"
    "  return (uint16_t)((((b >> 23) - 112u) << 10) | ((b >> 13) & 0x3FFu));\n"
    "}\n";
static const char s_bf16_rz[] = "TROUPE_FN uint16_t troupe__bf16_rz(float f) { return "
                                "(uint16_t)(troupe__f32_bits(f) >> 16); }\n";
static const char s_fp8_rz[] =
    "TROUPE_FN uint8_t troupe__fp8_rz(float f) { return (uint8_t)(troupe__half_rz(f) >> 8); }\n";
static const char s_i32[] = "TROUPE_FN int32_t troupe__i32(uint32_t u) { return (int32_t)u; }\n";
static const char s_i64[] = "TROUPE_FN int64_t troupe__i64(uint64_t u) { return (int64_t)u; }\n";

/* Pointwise uniforms. */
static const char s_uni_byte[] =
    "TROUPE_FN uint8_t troupe_uint4x32_to_byte_uniform(uint4x32_t x) { return (uint8_t)x.v[0]; }\n";
static const char s_uni_uint16[] =
    "TROUPE_FN uint16_t troupe_uint4x32_to_uint16_uniform(uint4x32_t x) { return (uint16_t)x.v[0]; "
    "}\n";
static const char s_uni_int32[] = "TROUPE_FN int32_t troupe_uint4x32_to_int32_uniform(uint4x32_t "
                                  "x) { return troupe__i32(x.v[0]); }\n";
static const char s_uni_uint32[] =
    "TROUPE_FN uint32_t troupe_uint4x32_to_uint32_uniform(uint4x32_t x) { return x.v[0]; }\n";
static const char s_uni_int64[] =
    "TROUPE_FN int64_t troupe_uint4x32_to_int64_uniform(uint4x32_t x) {\n"
    "  return troupe__i64(troupe__w64(x.v[0], x.v[1]));\n"
    "}\n";
static const char s_uni_uint64[] =
    "TROUPE_FN uint64_t troupe_uint4x32_to_uint64_uniform(uint4x32_t x) {\n"
    "  return troupe__w64(x.v[0], x.v[1]);\n"
    "}\n";
static const char s_uni_half[] =
    "TROUPE_FN uint16_t troupe_uint4x32_to_half_uniform(uint4x32_t x) {\n"
    "  return troupe__half_rz(troupe__unit_f(x.v[0]));\n"
    "}\n";
static const char s_uni_bf16[] =
    "TROUPE_FN uint16_t troupe_uint4x32_to_bfloat16_uniform(uint4x32_t x) {\n"
    "  return troupe__bf16_rz(troupe__unit_f(x.v[0]));\n"
    "}\n";
static const char s_uni_fp8[] = "TROUPE_FN uint8_t troupe_uint4x32_to_fp8_uniform(uint4x32_t x) {\n"
                                "  return troupe__fp8_rz(troupe__unit_f(x.v[0]));\n"
                                "}\n";
static const char s_uni_single[] =
    "TROUPE_FN float troupe_uint4x32_to_single_uniform(uint4x32_t x) {\n"
    "  return troupe__unit_f(x.v[0]);\n"
    "}\n";
static const char s_uni_double[] =
    "TROUPE_FN double troupe_uint4x32_to_double_uniform(uint4x32_t x) {\n"
    "  return troupe__unit_d(x.v[0], x.v[1]);\n"
    "}\n";

/* Vectorised uniforms: all 128 bits. */
static const char s_vec_byte[] =
    "TROUPE_FN void troupe_uint4x32_to_byte_uniform_vec(uint4x32_t x, uint8_t *o) {\n"
    "  for (int i = 0; i < 16; i++) o[i] = (uint8_t)(x.v[i / 4] >> (8 * (i % 4)));\n"
    "}\n";
static const char s_vec_fp8[] =
    "TROUPE_FN void troupe_uint4x32_to_fp8_uniform_vec(uint4x32_t x, uint8_t *o) {\n"
    "  for (int i = 0; i < 16; i++)\n"
    "    o[i] = troupe__fp8_rz((float)((x.v[i / 4] >> (8 * (i % 4))) & 0xFFu) * 0.00390625f);\n"
    "}\n";
static const char s_vec_uint16[] =
    "TROUPE_FN void troupe_uint4x32_to_uint16_uniform_vec(uint4x32_t x, uint16_t *o) {\n"
    "  for (int i = 0; i < 8; i++) o[i] = (uint16_t)(x.v[i / 2] >> (16 * (i % 2)));\n"
    "}\n";
static const char s_vec_half[] =
    "TROUPE_FN void troupe_uint4x32_to_half_uniform_vec(uint4x32_t x, uint16_t *o) {\n"
    "  for (int i = 0; i < 8; i++)\n"
    "    o[i] = troupe__half_rz((float)((x.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu) * "
    "1.52587890625e-05f);\n"
    "}\n";
static const char s_vec_bf16[] =
    "TROUPE_FN void troupe_uint4x32_to_bfloat16_uniform_vec(uint4x32_t x, uint16_t *o) {\n"
    "  for (int i = 0; i < 8; i++)\n"
    "    o[i] = troupe__bf16_rz((float)((x.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu) * "
    "1.52587890625e-05f);\n"
    "}\n";
static const char s_vec_int32[] =
    "TROUPE_FN void troupe_uint4x32_to_int32_uniform_vec(uint4x32_t x, int32_t *o) {\n"
    "  for (int i = 0; i < 4; i++) o[i] = troupe__i32(x.v[i]);\n"
    "}\n";
static const char s_vec_uint32[] =
    "TROUPE_FN void troupe_uint4x32_to_uint32_uniform_vec(uint4x32_t x, uint32_t *o) {\n"
    "  for (int i = 0; i < 4; i++) o[i] = x.v[i];\n"
    "}\n";
static const char s_vec_single[] =
    "TROUPE_FN void troupe_uint4x32_to_single_uniform_vec(uint4x32_t x, float *o) {\n"
    "  for (int i = 0; i < 4; i++) o[i] = troupe__unit_f(x.v[i]);\n"
    "}\n";
static const char s_vec_int64[] =
    "TROUPE_FN void troupe_uint4x32_to_int64_uniform_vec(uint4x32_t x, int64_t *o) {\n"
    "  o[0] = troupe__i64(troupe__w64(x.v[0], x.v[1]));\n"
    "  o[1] = troupe__i64(troupe__w64(x.v[2], x.v[3]));\n"
    "}\n";
static const char s_vec_uint64[] =
    "TROUPE_FN void troupe_uint4x32_to_uint64_uniform_vec(uint4x32_t x, uint64_t *o) {\n"
    "  o[0] = troupe__w64(x.v[0], x.v[1]);\n"
    "  o[1] = troupe__w64(x.v[2], x.v[3]);\n"
    "}\n";
static const char s_vec_double[] =
    "TROUPE_FN void troupe_uint4x32_to_double_uniform_vec(uint4x32_t x, double *o) {\n"
    "  o[0] = troupe__unit_d(x.v[0], x.v[1]);\n"
    "  o[1] = troupe__unit_d(x.v[2], x.v[3]);\n"
    "}\n";

/* troupe's max/min of floats (ir/ops.h troupe_fmaxf and friends, the same expressions). */
static const char s_fmax[] = "TROUPE_FN float troupe_fmaxf(float a, float b) { return b != b ? a : "
                             "(a != a ? b : (a > b ? a : b)); }\n"
                             "TROUPE_FN float troupe_fminf(float a, float b) { return b != b ? a : "
                             "(a != a ? b : (a < b ? a : b)); }\n"
                             "TROUPE_FN double troupe_fmax(double a, double b) { return b != b ? a "
                             ": (a != a ? b : (a > b ? a : b)); }\n"
                             "TROUPE_FN double troupe_fmin(double a, double b) { return b != b ? a "
                             ": (a != a ? b : (a < b ? a : b)); }\n";

static const char s_gate_f[] = "TROUPE_FN float troupe_satur01_gate_f(float a, float b) {\n"
                               "  return (a > 0.0f && a < 1.0f) ? b : 0.0f;\n"
                               "}\n";
static const char s_gate_d[] = "TROUPE_FN double troupe_satur01_gate_d(double a, double b) {\n"
                               "  return (a > 0.0 && a < 1.0) ? b : 0.0;\n"
                               "}\n";

/* relu_gate and where as calls, so both arms are evaluated (ir/ops.c: a GCC 12 masked-load
 * miscompilation of `c ? x[i] : y` in vectorised loop nests). */
static const char s_select_f[] =
    "TROUPE_FN float troupe_relu_gate_f(float a, float b) { return a > 0.0f ? b : 0.0f; }\n"
    "TROUPE_FN float troupe_where_f(int c, float a, float b) { return c ? a : b; }\n";
static const char s_select_d[] =
    "TROUPE_FN double troupe_relu_gate_d(double a, double b) { return a > 0.0 ? b : 0.0; }\n"
    "TROUPE_FN double troupe_where_d(int c, double a, double b) { return c ? a : b; }\n";

#define S_MAXMIN(P, T)                                                                             \
    "TROUPE_FN " T " troupe_max_" P "(" T " a, " T " b) { return a > b ? a : b; }\n"               \
    "TROUPE_FN " T " troupe_min_" P "(" T " a, " T " b) { return a < b ? a : b; }\n"               \
    "TROUPE_FN " T " troupe_relu_gate_" P "(" T " a, " T " b) { return a > 0 ? b : 0; }\n"         \
    "TROUPE_FN " T " troupe_where_" P "(int c, " T " a, " T " b) { return c ? a : b; }\n"

/* The GEMM library's entries, set by the loader through <routine>_gemm_hooks (compiler/gemm.h,
 * devices/host/gemm_library.h); NULL runs the generated loops. C dialect only. */
static const char s_gemm[] =
    "typedef void (*troupe_sgemm_fn)(int, int, int64_t, int64_t, int64_t, float, const float *,\n"
    "                                int64_t, const float *, int64_t, float, float *, int64_t);\n"
    "typedef void (*troupe_dgemm_fn)(int, int, int64_t, int64_t, int64_t, double, const double *,\n"
    "                                int64_t, const double *, int64_t, double, double *, "
    "int64_t);\n"
    "#if defined(__GNUC__)\n"
    "#define TROUPE_GEMM_HOOK static __attribute__((unused))\n"
    "#else\n"
    "#define TROUPE_GEMM_HOOK static\n"
    "#endif\n"
    "TROUPE_GEMM_HOOK troupe_sgemm_fn troupe_sgemm;\n"
    "TROUPE_GEMM_HOOK troupe_dgemm_fn troupe_dgemm;\n";

/* The bfloat16 GEMM entry (bfloat16 factors, single output), set by the loader through
 * <routine>_gemm_bf16_hooks; NULL runs the generated loops. C dialect only. */
static const char s_gemm_bf16[] =
    "typedef void (*troupe_bgemm_fn)(int, int, int64_t, int64_t, int64_t, const uint16_t *,\n"
    "                                int64_t, const uint16_t *, int64_t, float, float *, "
    "int64_t);\n"
    "#if defined(__GNUC__)\n"
    "static __attribute__((unused)) troupe_bgemm_fn troupe_bgemm;\n"
    "#else\n"
    "static troupe_bgemm_fn troupe_bgemm;\n"
    "#endif\n";

/* The half GEMM entry (IEEE binary16 factors, single output), set by the loader through
 * <routine>_gemm_half_hooks; NULL runs the generated loops. C dialect only. */
static const char s_gemm_half[] =
    "typedef void (*troupe_hgemm_fn)(int, int, int64_t, int64_t, int64_t, const uint16_t *,\n"
    "                                int64_t, const uint16_t *, int64_t, float, float *, "
    "int64_t);\n"
    "#if defined(__GNUC__)\n"
    "static __attribute__((unused)) troupe_hgemm_fn troupe_hgemm;\n"
    "#else\n"
    "static troupe_hgemm_fn troupe_hgemm;\n"
    "#endif\n";

/* The pack of B^T for a loop of shifted A B^T calls (devices/host/gemm_library.h,
 * troupe_spack_bt_fn), set by the loader through <routine>_gemm_pack_hooks; NULL (or a NULL
 * result) makes each call as it is. C dialect only. */
static const char s_gemm_pack[] =
    "typedef const float *(*troupe_spack_bt_fn)(int64_t, int64_t, int64_t, int64_t, int64_t,\n"
    "                                           const float *, int64_t, float, int64_t);\n"
    "#if defined(__GNUC__)\n"
    "static __attribute__((unused)) troupe_spack_bt_fn troupe_spack_bt;\n"
    "#else\n"
    "static troupe_spack_bt_fn troupe_spack_bt;\n"
    "#endif\n";

/* The batch-reduce entry for a loop of calls accumulating into one block
 * (devices/host/gemm_library.h, troupe_sbrgemm_fn), set by the loader through
 * <routine>_gemm_brgemm_hooks; NULL (or a 0 result) makes the calls as they are. C dialect
 * only. */
static const char s_gemm_brgemm[] =
    "typedef int (*troupe_sbrgemm_fn)(int64_t, int64_t, int64_t, int64_t, const float *, "
    "int64_t,\n"
    "                                 const int64_t *, const float *, int64_t, const int64_t *,\n"
    "                                 float *, int64_t);\n"
    "#if defined(__GNUC__)\n"
    "static __attribute__((unused)) troupe_sbrgemm_fn troupe_sbrgemm;\n"
    "#else\n"
    "static troupe_sbrgemm_fn troupe_sbrgemm;\n"
    "#endif\n";

#define S_SEC(name, provides, text)                                                                \
    {                                                                                              \
        name, provides, text, NULL                                                                 \
    }

/* troupe_expf and troupe_tanhf: ir/ops.h's code, which the interpreter runs (test_cgen checks
 * the two agree bit for bit over a sweep of floats), in both dialects. */
static const char s_mathf[] =
    "TROUPE_FN float troupe__exp_poly(float r)\n"
    "{\n"
    "    float p = 1.98412698e-04f;\n"
    "    p = fmaf(p, r, 1.38888889e-03f);\n"
    "    p = fmaf(p, r, 8.33333333e-03f);\n"
    "    p = fmaf(p, r, 4.16666667e-02f);\n"
    "    p = fmaf(p, r, 1.66666667e-01f);\n"
    "    p = fmaf(p, r, 0.5f);\n"
    "    p = fmaf(p, r, 1.0f);\n"
    "    p = fmaf(p, r, 1.0f);\n"
    "    return p;\n"
    "}\n"
    "TROUPE_FN float troupe_expf(float x)\n"
    "{\n"
    "    float xc = x > 88.8f ? 88.8f : (x < -104.0f ? -104.0f : x);\n"
    "    float t = xc * 1.44269502f + 12582912.0f;\n"
    "    float n = t - 12582912.0f;\n"
    "    uint32_t ni = troupe__f32_bits(t) - 0x4B400000u;\n"
    "    float r = fmaf(n, -0.693145751953125f, xc);\n"
    "    r = fmaf(n, -1.42860677e-06f, r);\n"
    "    float p = troupe__exp_poly(r);\n"
    "    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1;\n"
    "    uint32_t b1 = (n1 + 127u) << 23, b2 = (n2 + 127u) << 23;\n"
    "    float y = p * troupe__bits_f32(b1) * troupe__bits_f32(b2);\n"
    "    return x != x ? x + x : y;\n"
    "}\n"
    "TROUPE_FN float troupe_tanhf(float x)\n"
    "{\n"
    "    float ax = fabsf(x);\n"
    "    ax = ax > 9.1f ? 9.1f : ax;\n"
    "    float x2 = ax * ax;\n"
    "    float q = -6.23571684e-03f;\n"
    "    q = fmaf(q, x2, 2.10398063e-02f);\n"
    "    q = fmaf(q, x2, -5.38427469e-02f);\n"
    "    q = fmaf(q, x2, 1.33324613e-01f);\n"
    "    q = fmaf(q, x2, -3.33333110e-01f);\n"
    "    float small = fmaf(ax * x2, q, ax);\n"
    "    float y = ax + ax;\n"
    "    float t = y * 1.44269502f + 12582912.0f;\n"
    "    float n = t - 12582912.0f;\n"
    "    float r = fmaf(n, -0.693145751953125f, y);\n"
    "    r = fmaf(n, -1.42860677e-06f, r);\n"
    "    float p = troupe__exp_poly(r);\n"
    "    uint32_t sb = (troupe__f32_bits(t) - 0x4B400000u + 127u) << 23;\n"
    "    float big = 1.0f - 2.0f / fmaf(p, troupe__bits_f32(sb), 1.0f);\n"
    "    return copysignf(ax < 0.55f ? small : big, x);\n"
    "}\n";

/* Dependencies first: a section's text only uses identifiers of sections above it. */
static const troupe__cgen_section_t s_sections[] = {
    {"bits", "troupe__f32_bits troupe__bits_f32 troupe__f64_bits", s_bits_c, s_bits_cuda},
    S_SEC("uint4x32_t", "uint4x32_t", s_u4),
    S_SEC("u4", "troupe__u4", s_u4_make),
    S_SEC("encode_small", "troupe__encode_small", s_encode),
    {"nan_small", "troupe__nan_small troupe__nan_single", "", s_nan_small_cuda},
    {"half", "troupe_half_to_single troupe_single_to_half", s_half, s_half_cuda},
    {"bfloat16", "troupe_bfloat16_to_single troupe_single_to_bfloat16", s_bf16, s_bf16_cuda},
    {"fp8", "troupe_fp8_to_single troupe_single_to_fp8", s_fp8, s_fp8_cuda},
    S_SEC("rotl32", "troupe__rotl32", s_rotl),
    S_SEC("threefry", "troupe__tf_mix troupe__threefry4x32", s_threefry),
    S_SEC("threefry_crypto", "troupe_threefry4x32_crypto", s_threefry_crypto),
    S_SEC("threefry_light", "troupe_threefry4x32_light", s_threefry_light),
    S_SEC("spread32", "troupe__spread32", s_spread32),
    S_SEC("split64", "troupe__split64", s_split64),
    S_SEC("ctr_byte", "troupe_byte_to_uint4x32", S_CTR_LOW("byte", "uint8_t")),
    S_SEC("ctr_uint16", "troupe_uint16_to_uint4x32", S_CTR_LOW("uint16", "uint16_t")),
    S_SEC("ctr_half", "troupe_half_to_uint4x32", S_CTR_LOW("half", "uint16_t")),
    S_SEC("ctr_bfloat16", "troupe_bfloat16_to_uint4x32", S_CTR_LOW("bfloat16", "uint16_t")),
    S_SEC("ctr_fp8", "troupe_fp8_to_uint4x32", S_CTR_LOW("fp8", "uint8_t")),
    S_SEC("ctr_int32", "troupe_int32_to_uint4x32", S_CTR_SPREAD("int32", "int32_t")),
    S_SEC("ctr_uint32", "troupe_uint32_to_uint4x32", S_CTR_SPREAD("uint32", "uint32_t")),
    S_SEC("ctr_int64", "troupe_int64_to_uint4x32", S_CTR_SPLIT("int64", "int64_t")),
    S_SEC("ctr_uint64", "troupe_uint64_to_uint4x32", S_CTR_SPLIT("uint64", "uint64_t")),
    S_SEC("ctr_single", "troupe_single_to_uint4x32", s_ctr_single),
    S_SEC("ctr_double", "troupe_double_to_uint4x32", s_ctr_double),
    S_SEC("unit_f", "troupe__unit_f", s_unit_f),
    S_SEC("w64", "troupe__w64", s_w64),
    S_SEC("unit_d", "troupe__unit_d", s_unit_d),
    S_SEC("half_rz", "troupe__half_rz", s_half_rz),
    S_SEC("bf16_rz", "troupe__bf16_rz", s_bf16_rz),
    S_SEC("fp8_rz", "troupe__fp8_rz", s_fp8_rz),
    S_SEC("i32", "troupe__i32", s_i32),
    S_SEC("i64", "troupe__i64", s_i64),
    S_SEC("uniform_byte", "troupe_uint4x32_to_byte_uniform", s_uni_byte),
    S_SEC("uniform_uint16", "troupe_uint4x32_to_uint16_uniform", s_uni_uint16),
    S_SEC("uniform_int32", "troupe_uint4x32_to_int32_uniform", s_uni_int32),
    S_SEC("uniform_uint32", "troupe_uint4x32_to_uint32_uniform", s_uni_uint32),
    S_SEC("uniform_int64", "troupe_uint4x32_to_int64_uniform", s_uni_int64),
    S_SEC("uniform_uint64", "troupe_uint4x32_to_uint64_uniform", s_uni_uint64),
    S_SEC("uniform_half", "troupe_uint4x32_to_half_uniform", s_uni_half),
    S_SEC("uniform_bfloat16", "troupe_uint4x32_to_bfloat16_uniform", s_uni_bf16),
    S_SEC("uniform_fp8", "troupe_uint4x32_to_fp8_uniform", s_uni_fp8),
    S_SEC("uniform_single", "troupe_uint4x32_to_single_uniform", s_uni_single),
    S_SEC("uniform_double", "troupe_uint4x32_to_double_uniform", s_uni_double),
    S_SEC("uniform_vec_byte", "troupe_uint4x32_to_byte_uniform_vec", s_vec_byte),
    S_SEC("uniform_vec_fp8", "troupe_uint4x32_to_fp8_uniform_vec", s_vec_fp8),
    S_SEC("uniform_vec_uint16", "troupe_uint4x32_to_uint16_uniform_vec", s_vec_uint16),
    S_SEC("uniform_vec_half", "troupe_uint4x32_to_half_uniform_vec", s_vec_half),
    S_SEC("uniform_vec_bfloat16", "troupe_uint4x32_to_bfloat16_uniform_vec", s_vec_bf16),
    S_SEC("uniform_vec_int32", "troupe_uint4x32_to_int32_uniform_vec", s_vec_int32),
    S_SEC("uniform_vec_uint32", "troupe_uint4x32_to_uint32_uniform_vec", s_vec_uint32),
    S_SEC("uniform_vec_single", "troupe_uint4x32_to_single_uniform_vec", s_vec_single),
    S_SEC("uniform_vec_int64", "troupe_uint4x32_to_int64_uniform_vec", s_vec_int64),
    S_SEC("uniform_vec_uint64", "troupe_uint4x32_to_uint64_uniform_vec", s_vec_uint64),
    S_SEC("uniform_vec_double", "troupe_uint4x32_to_double_uniform_vec", s_vec_double),
    S_SEC("mathf", "troupe__exp_poly troupe_expf troupe_tanhf", s_mathf),
    S_SEC("fmax", "troupe_fmaxf troupe_fminf troupe_fmax troupe_fmin", s_fmax),
    S_SEC("satur01_gate_f", "troupe_satur01_gate_f", s_gate_f),
    S_SEC("satur01_gate_d", "troupe_satur01_gate_d", s_gate_d),
    S_SEC("select_f", "troupe_relu_gate_f troupe_where_f", s_select_f),
    S_SEC("select_d", "troupe_relu_gate_d troupe_where_d", s_select_d),
    S_SEC("maxmin_byte", "troupe_max_byte troupe_min_byte troupe_relu_gate_byte troupe_where_byte",
          S_MAXMIN("byte", "uint8_t")),
    S_SEC("maxmin_uint16",
          "troupe_max_uint16 troupe_min_uint16 troupe_relu_gate_uint16 troupe_where_uint16",
          S_MAXMIN("uint16", "uint16_t")),
    S_SEC("maxmin_int32",
          "troupe_max_int32 troupe_min_int32 troupe_relu_gate_int32 troupe_where_int32",
          S_MAXMIN("int32", "int32_t")),
    S_SEC("maxmin_uint32",
          "troupe_max_uint32 troupe_min_uint32 troupe_relu_gate_uint32 troupe_where_uint32",
          S_MAXMIN("uint32", "uint32_t")),
    S_SEC("maxmin_int64",
          "troupe_max_int64 troupe_min_int64 troupe_relu_gate_int64 troupe_where_int64",
          S_MAXMIN("int64", "int64_t")),
    S_SEC("maxmin_uint64",
          "troupe_max_uint64 troupe_min_uint64 troupe_relu_gate_uint64 troupe_where_uint64",
          S_MAXMIN("uint64", "uint64_t")),
    S_SEC("gemm", "troupe_sgemm_fn troupe_dgemm_fn troupe_sgemm troupe_dgemm", s_gemm),
    S_SEC("gemm_bf16", "troupe_bgemm_fn troupe_bgemm", s_gemm_bf16),
    S_SEC("gemm_half", "troupe_hgemm_fn troupe_hgemm", s_gemm_half),
    S_SEC("gemm_pack", "troupe_spack_bt_fn troupe_spack_bt", s_gemm_pack),
    S_SEC("gemm_brgemm", "troupe_sbrgemm_fn troupe_sbrgemm", s_gemm_brgemm),
};

const troupe__cgen_section_t *troupe__cgen_sections(size_t *count)
{
    *count = sizeof s_sections / sizeof s_sections[0];
    return s_sections;
}

/* ---- the whole C prelude ------------------------------------------------------------------ */

/* Room for the C core and every section (about 13 KB today); s_build_c_prelude asserts it. */
static char s_c_prelude[32768];
static size_t s_c_prelude_len;
static pthread_once_t s_c_prelude_once = PTHREAD_ONCE_INIT;

static void s_c_prelude_append(const char *text)
{
    const size_t n = strlen(text);
    assert(s_c_prelude_len + n < sizeof s_c_prelude && "grow s_c_prelude");
    if (s_c_prelude_len + n >= sizeof s_c_prelude)
        return;
    memcpy(s_c_prelude + s_c_prelude_len, text, n + 1);
    s_c_prelude_len += n;
}

static void s_build_c_prelude(void)
{
    char header[128];
    s_c_prelude_append(s_core_c);
    for (size_t i = 0; i < sizeof s_sections / sizeof s_sections[0]; i++) {
        snprintf(header, sizeof header, TROUPE__CGEN_SECTION_HEADER, s_sections[i].name);
        s_c_prelude_append(header);
        s_c_prelude_append(s_sections[i].text_c);
    }
}

const char *troupe_cgen_c_prelude(void)
{
    pthread_once(&s_c_prelude_once, s_build_c_prelude);
    return s_c_prelude;
}
