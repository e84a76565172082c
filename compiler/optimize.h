/* troupe — the low-level optimiser: OCANNL's `optimize_proc` (OCANNL_NOTES §5.4, §6.3) on a
 * troupe_ll_proc_t, in place.
 *
 * Pipeline (each step's OCANNL source in brackets):
 *  0. Sole accumulations (troupe's, sole_accumulations): a top-level ZERO_OUT of a node followed
 *     by loop nests that each add a value not reading the node into every cell of their own box
 *     of it exactly once (each axis an offset plus a mixed-radix sum of the nest's iterators,
 *     every iterator used), the boxes partitioning the node, becomes those nests setting the
 *     values: a permuted copy no longer zeroes and rereads its output (0 + e is e, but for -0).
 *  1. Tracing [Low_level.visit_llc]: per node of proc->nodes, fills proc->traced (aligned with
 *     proc->nodes): statements writing it, the most reads of one element, zero-initialisation,
 *     read-before-write (recurrence), read-only, scalar constant expression, whether it is read
 *     at all, whether its computation is complex; finds the single merge-buffer node.
 *     Loops are executed concretely over symbolic index values (static index symbols read as 0,
 *     as OCANNL does). When a full walk of the procedure would take more than
 *     `max_trace_steps` statement executions, the walk samples instead, exactly like OCANNL:
 *     each loop with trace_it runs only its first virtualize_max_tracing_dim + 1 values, a loop
 *     without trace_it only its first value. Sampling can only over-report recurrence (a read
 *     whose write fell outside the sample), which makes a node more materialized, never less.
 *  2. Memory-mode inference [visit_llc's epilogue], with OCANNL's provenance codes:
 *     scalar constant expression -> Virtual (40, applied in step 3 once inlining succeeded);
 *     a cell read more than virtualize_max_visits times, or recurrent, for a complex computation
 *     with no mode yet -> Never_virtual (1), unless the computation is cheap (troupe's: its
 *     SETs hold at most 8 operations, none transcendental, counting those of the definitions
 *     read more than once that they read and that are likely inlined with them plus one load
 *     each, and a cell is read at most virtualize_max_cheap_visits times: recomputing beats a
 *     store and loads, but not a whole chain of cheap definitions recomputed at every read);
 *     read-only and unspecified -> Hosted(Unset_hosted)
 *     (37), read-only and already non-virtual -> Materialized (35), read-only yet Virtual/Local
 *     -> FAILED_PRECONDITION; read before write -> Materialized (36).
 *     troupe addition: a node written here and read nowhere here (reads of a cell inside the
 *     statement accumulating into that same cell do not count) is a result of the procedure:
 *     Materialized (701) unless its mode says otherwise (OCANNL would virtualise it away unless
 *     the front end marked it). The node read through a merge buffer must exist on every
 *     device: Materialized (702).
 *  3. Virtualisation [virtual_llc, check_and_store_virtual, inline_computation,
 *     cleanup_virtual_llc]: nodes not known non-virtual are inlined at every read as a
 *     LOCAL_SCOPE that recomputes the cell, when all of these hold (else Never_virtual with the
 *     reason code below):
 *       - every statement writing the node is a top-level statement of the body (an item of
 *         its SEQ) that writes this node only (a "definition unit"): ZERO_OUT of the node, or a
 *         loop nest (possibly none) of SETs;
 *       - in a unit every SET uses one index tuple I whose axes are distinct plain loop
 *         iterators covering the whole axis (loop 0..dim-1) or the fixed index 0 on an axis of
 *         size 1; the node is read inside its units only at I (accumulation);
 *       - loops of a unit that are not iterators of I are reductions: only inlined with
 *         inline_complex_computations (default false, as OCANNL 0.6.0);
 *       - every other read comes after the last unit, is a plain GET (not a merge-buffer read),
 *         and no node the definition reads is written between the definition and the read;
 *       - every substituted index stays within TROUPE_MAX_INDEX_TERMS terms;
 *       - its precision is not half/bfloat16/fp8, unless inline_narrow_precisions: a local
 *         scope holds its compute type (float), so inlining would drop the rounding to the
 *         storage format and change results.
 *     The inlined body replays the units in order with SET_LOCAL, substituting the read's
 *     indices for I's iterators (loops over them disappear; reduction loops become local loops
 *     over fresh symbols). Definitions are removed and the node becomes Virtual (152, or 40 for
 *     a scalar constant expression). Read twice by a complex computation, it was made
 *     Never_virtual in step 2 and stays; a simple computation (a copy or a constant, OCANNL's
 *     `is_complex` false; troupe's: also an identity of a read of a node that stays stored, so
 *     a product reads that node through its strides) read several times is inlined at every
 *     read (inline_simple_computations).
 *  4. Simplification [simplify_llc], in the precision of each expression's context (the node
 *     set, or the local scope's node):
 *       - constant folding with troupe_interpret_* of ops whose result the generated code
 *         computes exactly the same way (+ - * / fmod max min comparisons logic relu satur01
 *         gates neg not sqrt recip identity arg1 arg2 where, fma in double only): double
 *         contexts fold in double; single/half/bfloat16/fp8 contexts round the operands to
 *         float, compute in double and round to float, which equals float arithmetic for these
 *         ops; finite results only. Transcendentals and pow are not folded (libm results are
 *         not correctly rounded). Integer and uint4x32 contexts are not folded;
 *       - identities: x+0, 0+x, x-0, x*1, 1*x, x/1, identity(x), arg1, arg2 -> the operand
 *         (x+0 -> x turns a -0 into -0 where C gives +0); x*0 -> 0 in integer contexts, and in
 *         float contexts only for an operand that cannot be NaN or infinite (a finite constant,
 *         an embedded index) unless fold_mul_by_zero (OCANNL folds it always; 0*NaN is NaN);
 *       - integer powers (expand_integer_pow; x ** n, n a constant): 1 -> x, 0 -> 1,
 *         -1 -> recip(x), 2..8 -> a left-nested product x*x*...*x (a base that is not a plain
 *         read is computed once in a local scope of the context node). The product rounds
 *         n-1 times where pow rounds once; OCANNL's optimize_integer_pow does the same;
 *       - FMA fusion (fuse_fma, default true): a*b+c and c+a*b -> fma(a,b,c) in float contexts.
 *         This changes rounding (one rounding instead of two) and is what OCANNL does;
 *       - a local scope whose body is only SET_LOCAL(v) becomes v when the scope's precision is
 *         the context's (otherwise the rounding to the scope's precision would be lost).
 *  4b. Loop fusion (fuse_loops, default true; troupe's): adjacent pointwise nests over the same
 *     iteration space become one nest, nests sharing outer loops fuse over them where each
 *     shared cell belongs to one outer iteration, and a zeroing moves into the nest after it
 *     when that nest's outer iterations own its slices (compiler/fuse.h); bit for bit the same
 *     results. fuse_outer false keeps only the first kind (a backend's choice: cuda).
 *  4c. Iteration scalars (iteration_scalars, default false; troupe's, compiler/scalars.c): a
 *     node written and read only in the body of one loop (not in a loop nested in it, not under
 *     a gather's bound index), at one index tuple, its first access in program order a write,
 *     never zeroed, vector-written or read through a merge buffer, single or double precision,
 *     and still a placeholder of this optimiser (Never_virtual or Device_only), becomes Local
 *     (provenance old*1000+700) with traced->iteration_scalar: the generated C holds it in a
 *     scalar declared around that loop, no array (compiler/cgen.h). Every iteration writes it
 *     before reading it, so no value crosses iterations: the results are bit for bit those of
 *     the array. Like any Local node it is then this procedure's own: another procedure that
 *     reads it without computing it fails (FAILED_PRECONDITION), and one that computes it but
 *     not as an iteration scalar must hold it on the stack, which is refused above
 *     local_max_bytes (FAILED_PRECONDITION naming the node: mark it materialized first).
 *  5. Every node's placeholder mode is resolved (troupe_tnode_default_to_most_local_within with
 *     opts->local_max_bytes, provenance old*1000+703); proc->inputs (materialized, not
 *     constant, read-only or read-before-write), proc->outputs (materialized and written),
 *     proc->merge_node are filled, sorted by id;
 *     proc->optimized = true; troupe_ll_proc_validate runs last, so an optimiser bug surfaces as
 *     an error rather than as wrong code.
 *
 * Thread safety: troupe_ll_optimize mutates the procedure and the memory modes of its nodes;
 * one call per procedure at a time (tnode mode updates are themselves thread-safe).
 * Ownership: the procedure keeps owning everything; new statements come from its arena;
 * proc->traced/inputs/outputs are owned by the procedure (freed by troupe_ll_proc_destroy).
 */
#ifndef TROUPE_COMPILER_OPTIMIZE_H
#define TROUPE_COMPILER_OPTIMIZE_H

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Provenance codes the optimiser records with memory modes (OCANNL_NOTES §5.3). OCANNL's codes
 * keep their numbers; 7xx are troupe's. Reasons for Never_virtual are the 7xx codes >= 704. */
enum {
    TROUPE_PROV_ITERATION_SCALAR = 700,      /* step 4c: held in a scalar per iteration -> Local */
    TROUPE_PROV_TOO_MANY_VISITS = 1,         /* OCANNL 1: cell read > max_visits / recurrent */
    TROUPE_PROV_READ_ONLY_MATERIALIZED = 35, /* OCANNL 35: read-only, already non-virtual */
    TROUPE_PROV_RECURRENT = 36,              /* OCANNL 36: read before written -> Materialized */
    TROUPE_PROV_READ_ONLY_HOSTED = 37,       /* OCANNL 37: read-only, unspecified -> Hosted */
    TROUPE_PROV_SCALAR_CONSTEXPR = 40,       /* OCANNL 40: scalar constant expression -> Virtual */
    TROUPE_PROV_VIRTUALIZED = 152,           /* OCANNL 152: inlined, code removed -> Virtual */
    TROUPE_PROV_RESULT = 701,                /* written, never read here -> Materialized */
    TROUPE_PROV_MERGE_SOURCE = 702,          /* read through a merge buffer -> Materialized */
    TROUPE_PROV_RESOLVED = 703,              /* placeholder resolved after optimisation */
    TROUPE_PROV_NV_INDICES_DIFFER = 704,     /* SETs of one unit use different index tuples */
    TROUPE_PROV_NV_NOT_PER_INDEX = 705,      /* an axis is not a plain distinct iterator */
    TROUPE_PROV_NV_SHARED_STATEMENT = 707,   /* a statement writing it writes other nodes too */
    TROUPE_PROV_NV_CROSS_ELEMENT = 709,      /* its definition reads it at other cells */
    TROUPE_PROV_NV_INDEX_TOO_COMPLEX = 713,  /* a substituted index exceeds the term limit */
    TROUPE_PROV_NV_PARTIAL = 714,            /* a unit does not cover the whole node */
    TROUPE_PROV_NV_USE_ORDER = 715,          /* read before or between its definition units */
    TROUPE_PROV_NV_MERGE_READ = 716,         /* read through a merge buffer */
    TROUPE_PROV_NV_INPUT_CHANGED = 717,      /* an input of its definition changes before a read */
    TROUPE_PROV_NV_REDUCTION = 718,          /* a reduction, inline_complex_computations off */
    TROUPE_PROV_NV_VECTOR_WRITE = 719,       /* written by SET_FROM_VEC */
    TROUPE_PROV_NV_DISABLED = 720,           /* opts->virtualize is false */
    TROUPE_PROV_NV_NARROW_PRECISION = 721,   /* half/bfloat16/fp8, inline_narrow_precisions off */
    TROUPE_PROV_NV_GATHER = 722,             /* accessed under a gather index (BIND_INDEX) */
};

/* Settings (OCANNL's virtualize_settings global arguments, §6.3, plus troupe's). */
typedef struct troupe_optimize_opts {
    int64_t virtualize_max_visits;      /* 1: reads of one cell beyond which complex
                                           computations are not inlined */
    int64_t virtualize_max_cheap_visits; /* 3: reads of one cell up to which a cheap
                                            computation (at most 8 operations, none of them a
                                            transcendental, a power or random bits) is inlined
                                            even when complex (troupe's; 0: OCANNL's rule) */
    int64_t virtualize_max_tracing_dim; /* 5: loop values traced when sampling */
    int64_t max_trace_steps;            /* 1 << 20: statement executions of a full tracing
                                           walk; beyond it tracing samples (see step 1) */
    bool inline_scalar_constexprs;      /* true */
    bool inline_simple_computations;    /* true */
    bool inline_complex_computations;   /* false (OCANNL 0.6.0): reductions stay materialized */
    bool inline_narrow_precisions;      /* false: half/bfloat16/fp8 nodes stay materialized (a
                                           local scope computes in float and would skip the
                                           rounding to the format; compiler/interp.h,
                                           compiler/cgen.h) */
    bool virtualize;                    /* true: run step 3 (false: every node written and read
                                           here is Never_virtual, code kept as is) */
    bool simplify;                      /* true: run step 4 */
    bool fuse_fma;                      /* true: a*b+c -> fma (changes rounding; OCANNL does) */
    bool expand_integer_pow;            /* true: x ** n -> products (changes rounding; OCANNL
                                           does) */
    bool fold_mul_by_zero;              /* false: x*0 -> 0 only where x cannot be NaN or
                                           infinite; true: always (OCANNL) */
    bool fuse_loops;                    /* true: adjacent pointwise nests over the same space
                                           become one (compiler/fuse.h; bit-exact) */
    bool fuse_outer;                    /* with fuse_loops, true: also over shared outer loops,
                                           past independent statements, with sunk zeroings
                                           (fuse.h troupe_ll_fuse_loops_outer); the backend's
                                           choice (devices/device.h, no_outer_fusion) */
    bool sole_accumulations;            /* true: a zeroing followed by nests adding into each
                                           cell once (boxes partitioning the node) becomes
                                           those nests setting it (step 0; troupe's) */
    bool iteration_scalars;             /* false: step 4c makes no iteration scalars; the
                                           host drivers' routines set it true
                                           (actors/routine.c, TROUPE_ITERATION_SCALARS), the
                                           cuda driver's do not */
    int64_t local_max_bytes;            /* -1: the routine's temporaries (Never_virtual and
                                           Device_only nodes, resolved here) of at most
                                           TROUPE_STACK_THRESHOLD bytes become Local
                                           (ir/memory_mode.h); otherwise this many bytes (0:
                                           none: On_device). The backend's choice
                                           (devices/device.h, no_local_arrays) */
} troupe_optimize_opts_t;

/* Fills *opts with the defaults listed above. */
void troupe_optimize_opts_default(troupe_optimize_opts_t *opts);

/* Optimises `proc` in place (steps 1-5 above). `opts` NULL = defaults; it is copied.
 * Errors: INVALID_ARGUMENT for a NULL proc, a procedure that does not validate (the
 * validator's message), bad options (negative limits; local_max_bytes below -1), or two
 * distinct merge-buffer nodes ("at most one merge buffer per routine"); FAILED_PRECONDITION when a
 * node's memory mode contradicts what the procedure does with it (the tnode message names the
 * node, its mode and the requested one, e.g. a node set Virtual that cannot be inlined, or a
 * Local/Virtual node read but not computed here); RESOURCE_EXHAUSTED; INTERNAL if the result fails
 * validation (an optimiser bug). On error the procedure may be partly rewritten and memory modes
 * partly refined; proc->optimized stays false. A procedure may be optimised again (its local
 * scopes are traced and kept). */
TROUPE_MUST_USE troupe_status_t troupe_ll_optimize(troupe_ll_proc_t *proc,
                                                   const troupe_optimize_opts_t *opts);

/* The traced facts of `tn` in an optimised procedure (proc->traced entry), or NULL when the
 * procedure is not optimised or does not mention tn. Borrowed; valid while proc lives.
 * Field meanings (see troupe_ll_traced_t): assignments = statements writing the node;
 * max_visits = most reads of one cell (an accumulation's read of the cell it writes is not
 * counted when inline_complex_computations, as OCANNL); read_before_write is also true for a
 * read-only node that is read (OCANNL marks such reads recurrent); is_accessing = read by a GET
 * or a merge-buffer read; is_complex = OCANNL's notion (its value applies an operation to reads
 * of memory, or reads a local scope; an identity of a stored node's read is not one) or a
 * reduction loop around its definition. */
const troupe_ll_traced_t *troupe_optimize_traced(const troupe_ll_proc_t *proc,
                                                 const troupe_tnode_t *tn);

#ifdef __cplusplus
}
#endif
#endif
