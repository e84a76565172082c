/* troupe — reference interpreter of the low-level IR (ir/lowlevel.h) over host arrays.
 *
 * It runs a procedure element by element with the arithmetic that generated C performs
 * (ir/ops.h C syntax, troupe_c_convert_precision), so it is the oracle the code generators
 * and drivers are tested against: results agree bit for bit for + - * / and conversions,
 * and up to libm for the transcendental functions (it calls the same float/double libm
 * functions generated code calls, so on one machine they agree too).
 *
 * Evaluation rules (the contract generated code follows as well):
 *  - Every scalar expression is evaluated in the precision of its context: the node a SET
 *    writes, the node of the local scope a SET_LOCAL writes, uint4x32 for the argument of
 *    SET_FROM_VEC and of uint4x32_to_prec_uniform1. Binop/unop/ternop operands are
 *    evaluated in the same context (seed homogeneity rule), except the argument of
 *    uint4x32_to_prec_uniform1 (uint4x32) and the condition of `where`, which computes in
 *    its own precision: a GET's or local scope's node precision, otherwise the context
 *    precision (int64 under a uint4x32 context); a uint4x32 condition is an error. Only the
 *    chosen branch of where, arg1/arg2, relu_gate, or/and is evaluated, as C's ?: || && do.
 *  - Compute types: double computes in double; single, half, bfloat16 and fp8 compute in
 *    float (float variables and the f-suffixed libm functions: expf, fmaxf, fmodf, powf,
 *    fmaf, tanhf ...); integer precisions compute with C integer semantics in C's promoted
 *    type (byte and uint16 promote to int, so intermediate results are not narrowed; int32 in
 *    int, uint32 in unsigned, int64/uint64 in 64 bits) with two's-complement wrap-around where
 *    C leaves signed overflow undefined; the integer helpers of the ops prelude (max, min,
 *    relu, satur01) narrow their arguments to the storage type, and the libm-based integer
 *    ops compute in double and convert to the storage type; uint4x32 supports arg1, arg2,
 *    identity, where and threefry4x32_*. As in C, comparisons, or, and and not yield an
 *    `int` (0 or 1), arithmetic between two such ints stays in int (so (a<b) / (c<d) is an
 *    integer division even in a float context), and an int meets a value of the context
 *    type through C's usual arithmetic conversions.
 *  - A SET converts the computed value to the node's storage once: half/bfloat16/fp8 with
 *    ir/prec.h's round-to-nearest-even troupe_single_to_* (overflow to infinity), integers
 *    modulo 2^bits. Intermediate results are never rounded to the storage format.
 *  - GET of a node of precision p in a context of precision q reads the element and converts
 *    it as troupe_c_convert_precision(p, q') does, where q' is q's compute precision (single
 *    for half/bfloat16/fp8): half/bfloat16/fp8 decode exactly to float; into uint4x32 the
 *    counter construction troupe_prec_bits_to_uint4x32 applies; from uint4x32 word 0 is read
 *    as a uint32; other pairs are C conversions.
 *  - CONSTANT c: (float)c in float contexts, c in double, c truncated toward zero and
 *    saturated (NaN -> 0; troupe_prec_store_double) into the storage type in integer contexts
 *    and into int64 then {lo, hi, 0, 0} in uint4x32. CONSTANT_BITS b is the int64 b converted
 *    like a GET of an int64 node (keys become {lo(b), hi(b), 0, 0}). EMBED_INDEX is the int64
 *    index value converted the same way, except into uint4x32, where its low 32 bits are
 *    spread like a uint32 counter (OCANNL's index precision is uint32).
 *  - A LOCAL_SCOPE is a variable of its node's compute precision (float for half, bfloat16
 *    and fp8: no rounding to the format; the storage type for integers), zero-initialised
 *    each time the scope is entered, written by SET_LOCAL and read by GET_LOCAL and as the
 *    scope's value with the GET conversion from the compute precision. This is what
 *    compiler/cgen.h emits.
 *  - SET_FROM_VEC writes troupe_uint4x32_to_prec_uniform's elements; its length must equal
 *    troupe_vec_unop_output_count for the node's precision.
 *  - C's undefined behaviour is an error instead: integer division or remainder by zero; a
 *    float converted into an integer type outside its range saturates (NaN -> 0).
 *
 * Buffers: each node the procedure reads or writes (GET, SET, SET_FROM_VEC, ZERO_OUT) needs
 * a host buffer of tn->size_bytes (dense row-major over the stored dims). The caller passes
 * one for every such node; a node known Virtual or Local (troupe_tnode_known_not_materialized)
 * without one gets a zero-filled scratch buffer that lives for the call. A node only used as
 * a LOCAL_SCOPE's node needs none. GET_MERGE_BUFFER reads `merge_buffer`, laid out like the
 * merge node.
 *
 * Thread safety: runs may proceed concurrently on distinct buffers; the procedure is only
 * read. Ownership: nothing is retained; buffers are borrowed for the call.
 */
#ifndef TROUPE_COMPILER_INTERP_H
#define TROUPE_COMPILER_INTERP_H

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A host buffer for one node (matched by node id). */
typedef struct troupe_interp_buffer {
    const troupe_tnode_t *tn;
    void *data; /* tn->size_bytes bytes */
} troupe_interp_buffer_t;

/* The value of one static index symbol: by id when sym >= 0, else by name. */
typedef struct troupe_interp_static {
    int32_t sym;
    const char *name;
    int64_t value;
} troupe_interp_static_t;

typedef struct troupe_interp_args {
    const troupe_interp_buffer_t *buffers;
    size_t nbuffers;
    const troupe_interp_static_t *statics; /* one for every static symbol of the procedure */
    size_t nstatics;
    const void *merge_buffer; /* data of the merge node, or NULL when none is read */
} troupe_interp_args_t;

/* Runs `proc` once over the buffers in `args` (which may be NULL when the procedure needs
 * nothing), with the semantics in the header comment. The procedure is validated first
 * (troupe_ll_proc_validate); indices are also checked at every access.
 * Errors (INVALID_ARGUMENT unless noted), each naming what is wrong:
 *  - a validation failure (its message);
 *  - a static symbol without a value, a value for an unknown or non-static symbol or given
 *    twice, a value outside 0..range-1 (or negative for an unbounded symbol): "static symbol
 *    'batch_n' = 12 outside its range 0..9";
 *  - a node without a buffer that is not known Virtual/Local: "node #3 x: no buffer supplied
 *    (memory mode ...)"; two buffers for one node;
 *  - a merge-buffer read without merge_buffer;
 *  - an index outside its axis at run time (unbounded static symbols);
 *  - an operation undefined in its context precision (e.g. add in uint4x32, threefry in
 *    single, a uniform into uint4x32), a SET_FROM_VEC whose length differs from the op's
 *    output count, integer division by zero;
 *  - RESOURCE_EXHAUSTED for scratch buffers.
 * Buffers may have been partly written when an error is returned. */
TROUPE_MUST_USE troupe_status_t troupe_interp_run(const troupe_ll_proc_t *proc,
                                                  const troupe_interp_args_t *args);

#ifdef __cplusplus
}
#endif
#endif
