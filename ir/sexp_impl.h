/* troupe — the token level of the S-expression syntax (internal; not installed): the streaming
 * reader the text forms parse with (ir/text_*.c), and the writers of the atoms they print.
 *
 * The reader holds one token at a time (troupe__sexp_next advances); its predicates look at the
 * current token, and its expecting readers consume it or fail with a positioned message
 * ("LINE:COL: expected <what>, found <what>", ir/sexp.h). troupe__sexp_lp counts list depth
 * against TROUPE_SEXP_MAX_DEPTH, so a recursive descent over it cannot exhaust the stack.
 * Numbers are read and written with strtod/snprintf: callers run in the C numeric locale
 * (the text forms switch to it, ir/text_impl.h).
 *
 * Thread safety: a reader belongs to one thread. Ownership: the reader borrows its text and
 * owns its string buffer (troupe__sexp_reader_fini).
 */
#ifndef TROUPE_IR_SEXP_IMPL_H
#define TROUPE_IR_SEXP_IMPL_H

#include "base/status.h"
#include "base/strbuf.h"
#include "ir/sexp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reader ------------------------------------------------------------------------------- */

typedef enum troupe__sexp_tk {
    TROUPE__SEXP_LP,
    TROUPE__SEXP_RP,
    TROUPE__SEXP_ATOM,
    TROUPE__SEXP_STR,
    TROUPE__SEXP_EOF,
} troupe__sexp_tk_t;

typedef struct troupe__sexp_reader {
    const char *src;
    size_t len, pos;
    int line, col; /* of src[pos] */
    /* the current token */
    troupe__sexp_tk_t tk;
    size_t tstart, tlen; /* ATOM: its bytes in src */
    int tline, tcol;
    char *str; /* STR: the decoded string, NUL-terminated */
    size_t str_len, str_cap;
    int depth; /* lists open */
} troupe__sexp_reader_t;

/* Starts reading the `len` bytes at text: checks the length limit and reads the first token. */
TROUPE_MUST_USE troupe_status_t troupe__sexp_reader_init(troupe__sexp_reader_t *r, const char *text,
                                                         size_t len);
void troupe__sexp_reader_fini(troupe__sexp_reader_t *r);

/* Reads the next token. */
TROUPE_MUST_USE troupe_status_t troupe__sexp_next(troupe__sexp_reader_t *r);

/* INVALID_ARGUMENT "LINE:COL: <message>". */
TROUPE_MUST_USE troupe_status_t troupe__sexp_err_at(int line, int col, const char *fmt, ...)
    TROUPE_PRINTF(3, 4);
/* INVALID_ARGUMENT "LINE:COL: expected <what>, found <the current token>". */
TROUPE_MUST_USE troupe_status_t troupe__sexp_expected(const troupe__sexp_reader_t *r,
                                                      const char *what);
/* RESOURCE_EXHAUSTED "out of memory parsing text". */
TROUPE_MUST_USE troupe_status_t troupe__sexp_oom(void);
/* "'('", "a string", "'atom'" ...: the current token for a message. */
void troupe__sexp_describe(const troupe__sexp_reader_t *r, char *buf, size_t cap);

/* The current token is the atom kw. */
bool troupe__sexp_is(const troupe__sexp_reader_t *r, const char *kw);
/* Copies the current atom (NUL-terminated) into buf; false when it is not an atom or does not
 * fit. */
bool troupe__sexp_atom_copy(const troupe__sexp_reader_t *r, char *buf, size_t cap);
/* The current token is an INT / a NAME / BITS / a NUMBER (ir/sexp.h), its value in *out. */
bool troupe__sexp_atom_int(const troupe__sexp_reader_t *r, int64_t *out);
bool troupe__sexp_atom_ident(const troupe__sexp_reader_t *r);
bool troupe__sexp_atom_bits(const troupe__sexp_reader_t *r, int64_t *out);
bool troupe__sexp_atom_number(const troupe__sexp_reader_t *r, double *out);

/* Consume '(' (counting depth), ')' closing `closing`, or the atom kw. */
TROUPE_MUST_USE troupe_status_t troupe__sexp_lp(troupe__sexp_reader_t *r, const char *what);
TROUPE_MUST_USE troupe_status_t troupe__sexp_rp(troupe__sexp_reader_t *r, const char *closing);
TROUPE_MUST_USE troupe_status_t troupe__sexp_keyword(troupe__sexp_reader_t *r, const char *kw);
/* Consumes an INT in [lo, hi] into *out; `what` names it in the error. */
TROUPE_MUST_USE troupe_status_t troupe__sexp_int(troupe__sexp_reader_t *r, const char *what,
                                                 int64_t lo, int64_t hi, int64_t *out);
/* Consumes a constant value, NUMBER or (f64 BITS), into *out. */
TROUPE_MUST_USE troupe_status_t troupe__sexp_value(troupe__sexp_reader_t *r, const char *what,
                                                   double *out);

/* The double with bit pattern u. */
double troupe__sexp_bits_double(uint64_t u);
/* The bit pattern of x. */
uint64_t troupe__sexp_double_bits(double x);

/* ---- writers ------------------------------------------------------------------------------ */

/* A quoted string (NULL: "") with escapes for '"', '\\' and bytes below 0x20 or equal to 0x7F;
 * troupe_sexp_read gives the bytes back. */
void troupe__sexp_put_quoted(troupe__strbuf_t *sb, const char *s);
/* A constant: the shortest exact decimal of %.15g/%.16g/%.17g, inf/-inf/nan, or (f64 #x...)
 * for other NaNs. In the C locale. */
void troupe__sexp_put_double(troupe__strbuf_t *sb, double x);
/* BITS: #x and the hex digits of the 64-bit pattern. */
void troupe__sexp_put_bits(troupe__strbuf_t *sb, int64_t bits);

#endif
