/* troupe — private interface between compiler/cgen.c (the emitter) and compiler/cgen_builtins.c (the text
 * of the prelude emitted into generated code). Not installed.
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

#include "compiler/cgen.h"

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

#endif
