/* troupe — what the two text forms share (internal; not installed): ir/text.c holds the pieces
 * both the low-level form (ir/text_lowlevel.c) and the assignment form (ir/text_assign.c) print
 * and parse — the node declarations, symbol names, the printer's and the parser's frames — and
 * the round-trip entry point.
 *
 * The parser is a recursive descent over the tokens of ir/sexp_impl.h that builds the tree
 * directly with the builders of ir/lowlevel.h and ir/assign.h. Everything a failed parse
 * allocated is owned by the procedure or comp under construction (arena, node references) or
 * by the parser (tables, string buffer) and released by troupe__text_parser_close.
 *
 * Thread safety: a printer or parser belongs to one call. Ownership: see each function.
 */
#ifndef TROUPE_IR_TEXT_IMPL_H
#define TROUPE_IR_TEXT_IMPL_H

#include "base/strbuf.h"
#include "ir/assign.h"
#include "ir/lowlevel.h"
#include "ir/sexp_impl.h"
#include "ir/text.h"

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest tree the printers accept: each tree level opens at least one list, and the header
 * (3 lists) and an index (up to 4) add a few more, so printed text stays within
 * TROUPE_TEXT_MAX_DEPTH and parses back. */
#define TROUPE__TEXT_MAX_TREE_DEPTH (TROUPE_TEXT_MAX_DEPTH - 16)

/* ---- C locale -------------------------------------------------------------------------------- */

typedef struct troupe__text_locale {
    locale_t c, old;
    bool active;
} troupe__text_locale_t;

/* Switches this thread to the C numeric locale (printf/strtod use '.'); best effort. */
void troupe__text_locale_enter(troupe__text_locale_t *l);
void troupe__text_locale_leave(troupe__text_locale_t *l);

/* ---- printing -------------------------------------------------------------------------------- */

typedef struct troupe__text_printer {
    troupe__strbuf_t sb;
    const char **names; /* symbol names by id (owned array, borrowed strings) */
    int32_t nsyms;
    troupe_status_t st; /* first malformation found */
    troupe__text_locale_t loc;
} troupe__text_printer_t;

/* Start printing a procedure / a comp (the arguments of troupe_text_print_proc / _comp):
 * check the arguments (INVALID_ARGUMENT "<function>: out is NULL", "...: proc is NULL"; *out
 * is NULL from here on), that the symbol names are distinct identifiers (the text refers to
 * symbols by name), and enter the C locale. troupe__text_printer_close must follow a success. */
TROUPE_MUST_USE troupe_status_t troupe__text_printer_open_proc(troupe__text_printer_t *c,
                                                               const troupe_ll_proc_t *proc,
                                                               char **out);
TROUPE_MUST_USE troupe_status_t troupe__text_printer_open_comp(troupe__text_printer_t *c,
                                                               const troupe_asgn_comp_t *comp,
                                                               char **out);
/* Ends printing: hands the text to *out, or returns the first malformation or
 * RESOURCE_EXHAUSTED ("out of memory printing <what>") with *out NULL. Frees the rest. */
TROUPE_MUST_USE troupe_status_t troupe__text_printer_close(troupe__text_printer_t *c,
                                                           const char *what, char **out);
/* Records a malformation (the first one wins): INVALID_ARGUMENT "cannot print: <what>". */
void troupe__text_bad(troupe__text_printer_t *c, const char *what);
/* A newline and `indent` blanks. */
void troupe__text_newline(troupe__text_printer_t *c, int indent);
/* (node ID (label ...) PREC (dims ...) [(padding V (L R)...)]) */
void troupe__text_print_node_decl(troupe__text_printer_t *c, const troupe_tnode_t *tn);

/* ---- parsing --------------------------------------------------------------------------------- */

/* Declared nodes, sorted by id, one reference each. */
typedef struct troupe__text_ntab {
    troupe_tnode_t **nodes;
    size_t count, cap;
} troupe__text_ntab_t;

/* Symbol name -> id, open addressing over a power-of-two table (ids + 1; 0 = empty). */
typedef struct troupe__text_stab {
    int32_t *slots;
    size_t cap;
    size_t count;
} troupe__text_stab_t;

typedef struct troupe__text_parser {
    troupe__sexp_reader_t r;
    troupe__text_ntab_t nodes; /* declared nodes */
    troupe__text_stab_t syms;  /* declared symbol names */
    const char **sym_names;    /* names by id (the strings belong to the proc/comp being built) */
    size_t sym_names_cap;
    int32_t nsyms;
    int32_t *scopes; /* open local scope ids */
    size_t nscopes, scopes_cap;
    troupe_ll_proc_t *proc;
    troupe_asgn_comp_t *comp;
    troupe__text_locale_t loc;
} troupe__text_parser_t;

/* Starts parsing the `len` bytes at text (NULL with len 0 reads as ""): enters the C locale,
 * reads the first token and consumes "(<form>". INVALID_ARGUMENT "<fn>: text is NULL" for
 * NULL text with len > 0. troupe__text_parser_close must follow, whatever this returns. */
TROUPE_MUST_USE troupe_status_t troupe__text_parser_open(troupe__text_parser_t *p, const char *fn,
                                                         const char *text, size_t len,
                                                         const char *form);
/* Consumes the end of a form "(<...> (body X))": the body's ')', the form's ')' and the end of
 * input. */
TROUPE_MUST_USE troupe_status_t troupe__text_parse_end(troupe__text_parser_t *p,
                                                       const char *form_name);
/* Frees the parser's tables and leaves the C locale (not proc or comp). */
void troupe__text_parser_close(troupe__text_parser_t *p);

/* (nodes NODE*): declares each node in p->nodes, reusing a matching live node. */
TROUPE_MUST_USE troupe_status_t troupe__text_parse_nodes(troupe__text_parser_t *p);
/* A declared node id; *out is borrowed from p->nodes. */
TROUPE_MUST_USE troupe_status_t troupe__text_node_ref(troupe__text_parser_t *p,
                                                      troupe_tnode_t **out);
/* A declared symbol name; *out its id. `what` names the expected token. */
TROUPE_MUST_USE troupe_status_t troupe__text_sym_ref(troupe__text_parser_t *p, const char *what,
                                                     int32_t *out);
/* After '(' and the keyword sym/static: "ID NAME" with ID == expected; copies the new name. */
TROUPE_MUST_USE troupe_status_t troupe__text_sym_decl_head(troupe__text_parser_t *p,
                                                           int32_t expected, char *name,
                                                           size_t cap);
/* Records symbol `id` (named `name`, a string owned by the tree) for troupe__text_sym_ref. */
TROUPE_MUST_USE troupe_status_t troupe__text_declare_sym(troupe__text_parser_t *p, int32_t id,
                                                         const char *name);
/* The head atom of a form after its '(' into buf (empty when it is not an atom). */
void troupe__text_head(const troupe__text_parser_t *p, char *buf, size_t cap);

#endif
