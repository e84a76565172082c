/* troupe — the S-expression reader: the lexical syntax of troupe's text forms (the IR's text,
 * ir/text.h, and the runtime's debug info, troupe_debug_info) and a reader that turns such text
 * into a tree, so that programs and tests can look at an S-expression's structure.
 *
 * ---- Lexical syntax -------------------------------------------------------------------------
 *   whitespace   space, tab, CR, LF separate tokens; `;` starts a comment to end of line.
 *   ( )          list delimiters.
 *   "string"     double-quoted bytes; escapes \\ \" \n \t \r \xHH (HH two hex digits, not 00);
 *                raw bytes 0x20..0xFF other than `"` and `\` stand for themselves.
 *   atom         a run of printable ASCII (0x21..0x7E) other than ( ) " ; — classified by use:
 *                  INT    [+-]?[0-9]+ fitting int64 (ids, ranges, dims, index offsets);
 *                  NAME   [A-Za-z_][A-Za-z0-9_]* (procedure, symbol and op names);
 *                  NUMBER decimal [+-]?D+[.D*][(e|E)[+-]?D+], or inf, -inf, nan (the
 *                         quiet NaN 0x7ff8000000000000 only);
 *                  BITS   #x followed by 1..16 hex digits (a 64-bit pattern).
 *   Any other byte outside a string (control bytes, NUL, bytes >= 0x80) is an error.
 * Input longer than TROUPE_SEXP_MAX_BYTES, lists nested deeper than TROUPE_SEXP_MAX_DEPTH and
 * atoms longer than TROUPE_SEXP_MAX_ATOM are errors.
 *
 * Errors: a malformed text is TROUPE_INVALID_ARGUMENT with troupe_last_error() reading
 * "LINE:COL: expected <what>, found <what>" (1-based line and byte column of the offending
 * token); out of memory is TROUPE_RESOURCE_EXHAUSTED.
 *
 * Thread safety: the functions are thread-safe for distinct trees; a tree is immutable once
 * read. Ownership: troupe_sexp_read returns a tree the caller owns and releases with
 * troupe_sexp_destroy; everything in it (items, text) belongs to the tree.
 */
#ifndef TROUPE_IR_SEXP_H
#define TROUPE_IR_SEXP_H

#include "troupe/base/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TROUPE_SEXP_MAX_BYTES ((size_t)16 << 20) /* longest accepted input */
#define TROUPE_SEXP_MAX_DEPTH 256                /* deepest list nesting accepted */
#define TROUPE_SEXP_MAX_ATOM 1024                /* longest atom, in bytes */

typedef enum troupe_sexp_kind {
    TROUPE_SEXP_ATOM = 0,
    TROUPE_SEXP_STRING,
    TROUPE_SEXP_LIST,
} troupe_sexp_kind_t;

typedef struct troupe_sexp troupe_sexp_t;

/* One datum of the text. */
struct troupe_sexp {
    troupe_sexp_kind_t kind;
    char *text;            /* ATOM: its bytes; STRING: the decoded bytes; LIST: NULL.
                              NUL-terminated (a string may hold other NULs: see len) */
    size_t len;            /* bytes of text */
    troupe_sexp_t **items; /* LIST: count items, in order */
    size_t count;
    int line, col; /* where the datum starts (1-based) */
};

/* Reads exactly one datum from the `len` bytes at `text` (surrounding whitespace and comments
 * allowed; anything else after it is an error) into a new tree *out (NULL on failure).
 * Errors as described above; INVALID_ARGUMENT for NULL arguments. */
TROUPE_MUST_USE troupe_status_t troupe_sexp_read(const char *text, size_t len, troupe_sexp_t **out);

/* Frees a tree. Accepts NULL; sets *sexp_p to NULL. */
void troupe_sexp_destroy(troupe_sexp_t **sexp_p);

/* x is the atom `atom`. */
bool troupe_sexp_is_atom(const troupe_sexp_t *x, const char *atom);

/* x is a list whose first item is the atom `head` (a form such as "(name cpu)"). */
bool troupe_sexp_is_form(const troupe_sexp_t *x, const char *head);

/* The first item of list x that is a form with head `head`, or NULL (also when x is not a
 * list). E.g. troupe_sexp_find(backend, "name") on "(backend (name cpu) ...)". */
const troupe_sexp_t *troupe_sexp_find(const troupe_sexp_t *x, const char *head);

#ifdef __cplusplus
}
#endif
#endif
