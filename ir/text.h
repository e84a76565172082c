/* troupe — an S-expression text form of the low-level IR (ir/lowlevel.h) and of the
 * high-level assignments (ir/assign.h) that prints and parses back to an equal tree, so that
 * routines can be stored, shipped between processes, diffed in tests and fuzzed
 * (docs/architecture.md §1 (the IR and compiler) `text`).
 *
 * ---- Lexical syntax -------------------------------------------------------------------------
 *   ir/sexp.h: lists, strings and atoms (INT, NAME, NUMBER, BITS), `;` comments.
 *
 * ---- Low-level procedures -------------------------------------------------------------------
 *   proc    := (proc NAME (nodes NODE*) (symbols SYM*) (body STMT))
 *   NODE    := (node INT (label LABEL*) PREC (dims INT*) [(padding VALUE (INT INT)*)])
 *              LABEL is a string or an atom; PREC a precision name of ir/prec.h; the padding
 *              form, when present, gives the padding value and one (left right) per axis.
 *   SYM     := (sym INT NAME)              a loop iterator
 *            | (static INT NAME INT)       a static index symbol and its range (0: unbounded)
 *              Symbol ids must run 0, 1, 2, ... in order; names must be distinct.
 *   STMT    := (noop) | (comment STRING) | (seq STMT*)
 *            | (for NAME INT INT [untraced] STMT)          inclusive bounds; trace_it unless
 *                                                          `untraced`
 *            | (zero_out INT)
 *            | (set INT (IDX*) SCALAR)
 *            | (set_from_vec INT (IDX*) INT VECOP SCALAR)  node, first index, length, op, arg
 *            | (set_local INT SCALAR)                      scope id, value
 *   SCALAR  := NUMBER | (f64 BITS)                         a constant (f64: exact bit pattern,
 *                                                          used for NaNs other than `nan`)
 *            | BITS                                        constant_bits
 *            | (get INT (IDX*)) | (get_merge_buffer INT (IDX*))
 *            | (get_local INT)
 *            | (local_scope INT INT (IDX*) STMT)           scope id, node, orig indices, body
 *            | (embed IDX)                                 embed_index
 *            | (BINOP SCALAR SCALAR) | (UNOP SCALAR) | (TERNOP SCALAR SCALAR SCALAR)
 *              op names are ir/ops.h's (add, relu_gate, threefry4x32_light, where, fma, ...).
 *   IDX     := INT                                         a fixed index
 *            | NAME                                        a symbol with coefficient 1
 *            | (* INT NAME)                                one scaled term
 *            | (+ TERM* [INT])                             terms in order, then the offset
 *   TERM    := NAME | (* INT NAME)
 *   Nodes in the body are referred to by id and must be declared in (nodes ...); symbols by
 *   name and must be declared in (symbols ...); the number of indices must equal the node's
 *   number of dims; set_local/get_local must sit inside a local_scope with that id.
 *
 * ---- Assignment comps (ir/assign.h) ----------------------------------------------------------
 *   comp    := (comp (nodes NODE*) (symbols STATIC*) (embedded INT*) (body ASGN))
 *   STATIC  := (static INT NAME INT)                       ids 0, 1, ... in order; ranges
 *   ASGN    := (noop) | (seq ASGN*) | (block_comment STRING ASGN)
 *            | (accum_op INT ACCUM OP (BUF+) STRING [initialize_neutral])
 *                lhs node, accumulator (a binop name), op (a unop, binop or ternop name for
 *                1, 2 or 3 operands), operands, projection spec (ir/assign.h notation)
 *            | (set_vec_unop INT VECOP BUF STRING)         lhs, op, operand, spec
 *            | (fetch INT FETCH)
 *   FETCH   := constant VALUE | constant_bits BITS | constant_fill VALUE*
 *            | range_over_offsets | slice NAME INT | embed_symbol NAME | embed_self_id
 *              (slice: the static symbol and the sliced node)
 *   BUF     := INT | (merge INT)                           a node or its merge buffer
 *   VALUE   := NUMBER | (f64 BITS)
 *   The header lists every node the comp mentions or embeds (a declared node neither
 *   mentioned nor embedded is not kept by the parsed comp). Trees are rebuilt with the
 *   ir/assign.h builders, so a spec or shape they reject is a parse error at the form's
 *   position carrying the builder's message (a builder's FAILED_PRECONDITION too).
 *
 * Printing is canonical (printed text parses and prints back to the same text): two-space
 * indentation, one statement per line inside seq/for, scalars on one line; constants with
 * the shortest of %.15g/%.16g/%.17g that reads back exactly; an index prints as an INT when
 * it has no term, as a NAME for one term of coefficient 1 without offset, else as (+ ...)
 * with the offset last and only when nonzero. Numbers are printed and read in the C locale
 * whatever the process locale is.
 *
 * Nodes: when parsing, a node id that names a live node (troupe_tnode_find) reuses that
 * node if its precision, dims and padding equal the declaration (else INVALID_ARGUMENT
 * "node 3: declared single 2x3 but the live node is double 2x3"); otherwise the node is
 * created with troupe_tnode_new_with_id. Labels are not compared. The parsed procedure holds
 * a reference to every declared node (they appear in proc->nodes even if the body does not
 * use them).
 *
 * Errors: every parse error is TROUPE_INVALID_ARGUMENT with troupe_last_error() reading
 * "LINE:COL: expected <what>, found <what>" (1-based line and byte column of the offending
 * token) or "LINE:COL: <what went wrong>" for semantic errors (undeclared node, arity, ...).
 * Input longer than TROUPE_TEXT_MAX_BYTES, lists nested deeper than TROUPE_TEXT_MAX_DEPTH,
 * atoms longer than TROUPE_TEXT_MAX_ATOM and out-of-range numbers are errors of the same
 * kind. Out of memory gives TROUPE_RESOURCE_EXHAUSTED. A failed parse leaves nothing behind.
 *
 * Thread safety: functions are thread-safe for distinct outputs; parsing goes through the
 * thread-safe tnode registry. Printing reads the procedure only.
 * Ownership: printed text is allocated with troupe_malloc and released by the caller with
 * troupe_free; a parsed procedure or comp belongs to the caller (troupe_ll_proc_destroy,
 * troupe_asgn_comp_destroy).
 */
#ifndef TROUPE_IR_TEXT_H
#define TROUPE_IR_TEXT_H

#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/lowlevel.h"
#include "troupe/ir/sexp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_TEXT_MAX_BYTES TROUPE_SEXP_MAX_BYTES /* longest accepted input */
#define TROUPE_TEXT_MAX_DEPTH TROUPE_SEXP_MAX_DEPTH /* deepest list nesting accepted */
#define TROUPE_TEXT_MAX_ATOM TROUPE_SEXP_MAX_ATOM   /* longest atom, in bytes */

/* Prints `proc` in the grammar above into a new NUL-terminated string *out (troupe_free).
 * Errors: INVALID_ARGUMENT for a NULL argument, a malformed tree (NULL child, op out of
 * range, a symbol id not in the table), a tree more than TROUPE_TEXT_MAX_DEPTH - 16 levels
 * deep (its text would not parse back) or two symbols sharing a name (the text refers to
 * symbols by name); RESOURCE_EXHAUSTED. *out is NULL on failure. */
TROUPE_MUST_USE troupe_status_t troupe_text_print_proc(const troupe_ll_proc_t *proc, char **out);

/* Parses one procedure from the NUL-terminated `text` (surrounding whitespace and comments
 * allowed) into a new procedure *out. Errors as described above; *out is NULL on failure. */
TROUPE_MUST_USE troupe_status_t troupe_text_parse_proc(const char *text, troupe_ll_proc_t **out);

/* The same over `len` bytes that need not be NUL-terminated (a NUL byte is an error). */
TROUPE_MUST_USE troupe_status_t troupe_text_parse_proc_n(const char *text, size_t len,
                                                         troupe_ll_proc_t **out);

/* Prints an assignment comp (grammar above) into a new string *out (troupe_free). Errors as
 * troupe_text_print_proc. */
TROUPE_MUST_USE troupe_status_t troupe_text_print_comp(const troupe_asgn_comp_t *comp, char **out);

/* Parses one assignment comp into a new comp *out (troupe_asgn_comp_destroy). Errors as
 * troupe_text_parse_proc; *out is NULL on failure. */
TROUPE_MUST_USE troupe_status_t troupe_text_parse_comp(const char *text, troupe_asgn_comp_t **out);
TROUPE_MUST_USE troupe_status_t troupe_text_parse_comp_n(const char *text, size_t len,
                                                         troupe_asgn_comp_t **out);

/* Testing entry point shared by the libFuzzer target (tests/fuzz/fuzz_text.c) and the seed
 * corpus test: parses `data` as a procedure and as an assignment comp; whatever parses must
 * print, parse back to an equal tree and print identically.
 * Returns TROUPE_OK when the input was either rejected cleanly or round-tripped,
 * TROUPE_INTERNAL (with a message saying what differed) when a round trip broke, and
 * RESOURCE_EXHAUSTED when memory ran out. Never aborts. */
TROUPE_MUST_USE troupe_status_t troupe_text_fuzz_one(const uint8_t *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif
