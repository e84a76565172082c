/* troupe — the floating-point mode of the calling thread: flushing subnormals to zero around
 * a routine run (base/config.h troupe_config_flush_denormals, TROUPE_DENORMALS).
 *
 * troupe__fp_flush_enter() sets flush-to-zero and denormals-are-zero on the calling thread and
 * returns the previous mode, which troupe__fp_restore() puts back. Both are a few cycles (one
 * read and one write of the control register). On x86-64 the mode is MXCSR's FTZ (bit 15) and
 * DAZ (bit 6) bits, which every SSE/AVX instruction and therefore the generated code and the
 * GEMM libraries obey; on AArch64 it is FPCR.FZ (bit 24). Elsewhere both are no-ops and
 * troupe__fp_flush_supported() is false.
 *
 * Internal (troupe__): not installed. */
#ifndef TROUPE_BASE_FPMODE_IMPL_H
#define TROUPE_BASE_FPMODE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define TROUPE__FP_FLUSH_BITS 0x8040u /* MXCSR FTZ | DAZ */
typedef unsigned int troupe__fp_mode_t;
static inline troupe__fp_mode_t troupe__fp_flush_enter(void)
{
    troupe__fp_mode_t prev = _mm_getcsr();
    if ((prev & TROUPE__FP_FLUSH_BITS) != TROUPE__FP_FLUSH_BITS)
        _mm_setcsr(prev | TROUPE__FP_FLUSH_BITS);
    return prev;
}
static inline void troupe__fp_restore(troupe__fp_mode_t prev)
{
    if (_mm_getcsr() != prev)
        _mm_setcsr(prev);
}
static inline bool troupe__fp_flush_supported(void)
{
    return true;
}
#elif defined(__aarch64__)
#define TROUPE__FP_FLUSH_BITS (UINT64_C(1) << 24) /* FPCR.FZ */
typedef uint64_t troupe__fp_mode_t;
static inline troupe__fp_mode_t troupe__fp_flush_enter(void)
{
    troupe__fp_mode_t prev;
    __asm__ volatile("mrs %0, fpcr" : "=r"(prev));
    if (!(prev & TROUPE__FP_FLUSH_BITS))
        __asm__ volatile("msr fpcr, %0" ::"r"(prev | TROUPE__FP_FLUSH_BITS));
    return prev;
}
static inline void troupe__fp_restore(troupe__fp_mode_t prev)
{
    __asm__ volatile("msr fpcr, %0" ::"r"(prev));
}
static inline bool troupe__fp_flush_supported(void)
{
    return true;
}
#else
typedef int troupe__fp_mode_t;
static inline troupe__fp_mode_t troupe__fp_flush_enter(void)
{
    return 0;
}
static inline void troupe__fp_restore(troupe__fp_mode_t prev)
{
    (void)prev;
}
static inline bool troupe__fp_flush_supported(void)
{
    return false;
}
#endif

#endif /* TROUPE_BASE_FPMODE_IMPL_H */
