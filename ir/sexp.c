/* troupe — the S-expression reader (see ir/sexp.h) and its token level (ir/sexp_impl.h): the
 * streaming reader the text forms parse with, the writers of atoms, and troupe_sexp_read, which
 * builds a tree with it. */
#define _POSIX_C_SOURCE 200809L
#include "ir/sexp.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/names_impl.h"
#include "ir/sexp_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CANON_NAN_BITS UINT64_C(0x7ff8000000000000)

/* ---- writers --------------------------------------------------------------------------------- */

/* A quoted string with escapes for '"', '\\' and bytes below 0x20 or equal to 0x7F. */
void troupe__sexp_put_quoted(troupe__strbuf_t *sb, const char *s)
{
    troupe__strbuf_puts(sb, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"':
            troupe__strbuf_puts(sb, "\\\"");
            break;
        case '\\':
            troupe__strbuf_puts(sb, "\\\\");
            break;
        case '\n':
            troupe__strbuf_puts(sb, "\\n");
            break;
        case '\t':
            troupe__strbuf_puts(sb, "\\t");
            break;
        case '\r':
            troupe__strbuf_puts(sb, "\\r");
            break;
        default:
            if (*p < 0x20 || *p == 0x7F)
                troupe__strbuf_printf(sb, "\\x%02x", *p);
            else
                troupe__strbuf_putn(sb, (const char *)p, 1);
        }
    }
    troupe__strbuf_puts(sb, "\"");
}

uint64_t troupe__sexp_double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

double troupe__sexp_bits_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A constant: shortest exact decimal, inf/-inf/nan, or (f64 #x...) for other NaNs. The
 * caller has entered the C locale. */
void troupe__sexp_put_double(troupe__strbuf_t *sb, double x)
{
    uint64_t bits = troupe__sexp_double_bits(x);
    if (isnan(x)) {
        if (bits == S_CANON_NAN_BITS)
            troupe__strbuf_puts(sb, "nan");
        else
            troupe__strbuf_printf(sb, "(f64 #x%016" PRIx64 ")", bits);
        return;
    }
    if (isinf(x)) {
        troupe__strbuf_puts(sb, x > 0 ? "inf" : "-inf");
        return;
    }
    char buf[48];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (troupe__sexp_double_bits(strtod(buf, NULL)) == bits)
            break;
    }
    troupe__strbuf_puts(sb, buf);
}

void troupe__sexp_put_bits(troupe__strbuf_t *sb, int64_t bits)
{
    troupe__strbuf_printf(sb, "#x%" PRIx64, (uint64_t)bits);
}

/* ---- reader ---------------------------------------------------------------------------------- */

/* The message of a failure at (line, col). */
troupe_status_t troupe__sexp_err_at(int line, int col, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "%d:%d: %s", line, col, msg);
}

troupe_status_t troupe__sexp_oom(void)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory parsing text");
}

/* Describes the current token for "found ..." */
void troupe__sexp_describe(const troupe__sexp_reader_t *r, char *buf, size_t cap)
{
    switch (r->tk) {
    case TROUPE__SEXP_LP:
        snprintf(buf, cap, "'('");
        break;
    case TROUPE__SEXP_RP:
        snprintf(buf, cap, "')'");
        break;
    case TROUPE__SEXP_STR:
        snprintf(buf, cap, "a string");
        break;
    case TROUPE__SEXP_EOF:
        snprintf(buf, cap, "end of input");
        break;
    case TROUPE__SEXP_ATOM: {
        int n = r->tlen > 40 ? 40 : (int)r->tlen;
        snprintf(buf, cap, "'%.*s%s'", n, r->src + r->tstart, r->tlen > 40 ? "..." : "");
        break;
    }
    }
}

troupe_status_t troupe__sexp_expected(const troupe__sexp_reader_t *r, const char *what)
{
    char found[64];
    troupe__sexp_describe(r, found, sizeof found);
    return troupe__sexp_err_at(r->tline, r->tcol, "expected %s, found %s", what, found);
}

static void s_step(troupe__sexp_reader_t *r)
{
    if (r->src[r->pos] == '\n') {
        r->line++;
        r->col = 1;
    } else {
        r->col++;
    }
    r->pos++;
}

static int s_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool s_atom_byte(unsigned char c)
{
    return c >= 0x21 && c <= 0x7E && c != '(' && c != ')' && c != '"' && c != ';';
}

static troupe_status_t s_str_push(troupe__sexp_reader_t *r, char c)
{
    if (!TROUPE__VEC_RESERVE(r->str, r->str_cap, r->str_len + 2))
        return troupe__sexp_oom();
    r->str[r->str_len++] = c;
    r->str[r->str_len] = '\0';
    return TROUPE_OK;
}

static troupe_status_t s_lex_string(troupe__sexp_reader_t *r)
{
    r->str_len = 0;
    TROUPE_RETURN_IF_ERROR(s_str_push(r, 'x')); /* ensure allocation; reset below */
    r->str_len = 0;
    r->str[0] = '\0';
    s_step(r); /* opening quote */
    for (;;) {
        if (r->pos >= r->len)
            return troupe__sexp_err_at(r->line, r->col,
                                       "expected '\"' closing the string started at %d:%d, "
                                       "found end of input",
                                       r->tline, r->tcol);
        unsigned char c = (unsigned char)r->src[r->pos];
        if (c == '"') {
            s_step(r);
            return TROUPE_OK;
        }
        if (c == '\\') {
            int line = r->line, col = r->col;
            s_step(r);
            unsigned char e = r->pos < r->len ? (unsigned char)r->src[r->pos] : 0;
            char out;
            switch (e) {
            case '\\':
            case '"':
                out = (char)e;
                s_step(r);
                break;
            case 'n':
                out = '\n';
                s_step(r);
                break;
            case 't':
                out = '\t';
                s_step(r);
                break;
            case 'r':
                out = '\r';
                s_step(r);
                break;
            case 'x': {
                s_step(r);
                int h1 = r->pos < r->len ? s_hexval((unsigned char)r->src[r->pos]) : -1;
                int h2 = r->pos + 1 < r->len ? s_hexval((unsigned char)r->src[r->pos + 1]) : -1;
                if (h1 < 0 || h2 < 0 || (h1 == 0 && h2 == 0))
                    return troupe__sexp_err_at(line, col,
                                               "expected an escape \\xHH with two hex digits "
                                               "(not 00), found a bad escape");
                out = (char)(h1 * 16 + h2);
                s_step(r);
                s_step(r);
                break;
            }
            default:
                return troupe__sexp_err_at(line, col,
                                           "expected an escape (\\\\ \\\" \\n \\t \\r \\xHH), "
                                           "found a bad escape");
            }
            TROUPE_RETURN_IF_ERROR(s_str_push(r, out));
            continue;
        }
        if (c < 0x20 || c == 0x7F)
            return troupe__sexp_err_at(r->line, r->col,
                                       "expected a printable byte in a string, found byte "
                                       "0x%02x",
                                       c);
        TROUPE_RETURN_IF_ERROR(s_str_push(r, (char)c));
        s_step(r);
    }
}

/* Reads the next token into r->tk. */
troupe_status_t troupe__sexp_next(troupe__sexp_reader_t *r)
{
    for (;;) {
        if (r->pos >= r->len)
            break;
        char c = r->src[r->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            s_step(r);
        } else if (c == ';') {
            while (r->pos < r->len && r->src[r->pos] != '\n')
                s_step(r);
        } else {
            break;
        }
    }
    r->tline = r->line;
    r->tcol = r->col;
    if (r->pos >= r->len) {
        r->tk = TROUPE__SEXP_EOF;
        return TROUPE_OK;
    }
    unsigned char c = (unsigned char)r->src[r->pos];
    if (c == '(') {
        r->tk = TROUPE__SEXP_LP;
        s_step(r);
        return TROUPE_OK;
    }
    if (c == ')') {
        r->tk = TROUPE__SEXP_RP;
        s_step(r);
        return TROUPE_OK;
    }
    if (c == '"') {
        r->tk = TROUPE__SEXP_STR;
        return s_lex_string(r);
    }
    if (!s_atom_byte(c))
        return troupe__sexp_err_at(r->line, r->col, "expected a token, found byte 0x%02x", c);
    r->tk = TROUPE__SEXP_ATOM;
    r->tstart = r->pos;
    while (r->pos < r->len && s_atom_byte((unsigned char)r->src[r->pos])) {
        s_step(r);
        if (r->pos - r->tstart > TROUPE_SEXP_MAX_ATOM)
            return troupe__sexp_err_at(r->tline, r->tcol,
                                       "expected an atom of at most %d bytes, found a "
                                       "longer one",
                                       TROUPE_SEXP_MAX_ATOM);
    }
    r->tlen = r->pos - r->tstart;
    return TROUPE_OK;
}

/* ---- token predicates and expecting readers -------------------------------------------------- */

bool troupe__sexp_is(const troupe__sexp_reader_t *r, const char *kw)
{
    size_t n = strlen(kw);
    return r->tk == TROUPE__SEXP_ATOM && r->tlen == n && memcmp(r->src + r->tstart, kw, n) == 0;
}

/* Copies the current atom (NUL-terminated) into buf; false when it does not fit. */
bool troupe__sexp_atom_copy(const troupe__sexp_reader_t *r, char *buf, size_t cap)
{
    if (r->tk != TROUPE__SEXP_ATOM || r->tlen + 1 > cap)
        return false;
    memcpy(buf, r->src + r->tstart, r->tlen);
    buf[r->tlen] = '\0';
    return true;
}

troupe_status_t troupe__sexp_lp(troupe__sexp_reader_t *r, const char *what)
{
    if (r->tk != TROUPE__SEXP_LP)
        return troupe__sexp_expected(r, what);
    if (r->depth >= TROUPE_SEXP_MAX_DEPTH)
        return troupe__sexp_err_at(r->tline, r->tcol,
                                   "expected lists nested at most %d deep, found "
                                   "deeper nesting",
                                   TROUPE_SEXP_MAX_DEPTH);
    r->depth++;
    return troupe__sexp_next(r);
}

troupe_status_t troupe__sexp_rp(troupe__sexp_reader_t *r, const char *closing)
{
    if (r->tk != TROUPE__SEXP_RP) {
        char what[96];
        snprintf(what, sizeof what, "')' closing %s", closing);
        return troupe__sexp_expected(r, what);
    }
    r->depth--;
    return troupe__sexp_next(r);
}

troupe_status_t troupe__sexp_keyword(troupe__sexp_reader_t *r, const char *kw)
{
    if (!troupe__sexp_is(r, kw)) {
        char what[64];
        snprintf(what, sizeof what, "'%s'", kw);
        return troupe__sexp_expected(r, what);
    }
    return troupe__sexp_next(r);
}

static bool s_parse_int_text(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    if (i == n)
        return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_C(9223372036854775808) - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (!neg && v > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v; /* 0 - 2^63 wraps to INT64_MIN */
    return true;
}

bool troupe__sexp_atom_int(const troupe__sexp_reader_t *r, int64_t *out)
{
    return r->tk == TROUPE__SEXP_ATOM && s_parse_int_text(r->src + r->tstart, r->tlen, out);
}

/* An integer in [lo, hi]; `what` names it in the error. */
troupe_status_t troupe__sexp_int(troupe__sexp_reader_t *r, const char *what, int64_t lo, int64_t hi,
                                 int64_t *out)
{
    int64_t v;
    if (!troupe__sexp_atom_int(r, &v) || v < lo || v > hi)
        return troupe__sexp_expected(r, what);
    *out = v;
    return troupe__sexp_next(r);
}

bool troupe__sexp_atom_ident(const troupe__sexp_reader_t *r)
{
    return r->tk == TROUPE__SEXP_ATOM && troupe__ir_is_identifier_n(r->src + r->tstart, r->tlen);
}

/* BITS: #x and 1..16 hex digits. */
bool troupe__sexp_atom_bits(const troupe__sexp_reader_t *r, int64_t *out)
{
    if (r->tk != TROUPE__SEXP_ATOM || r->tlen < 3 || r->tlen > 18)
        return false;
    const char *s = r->src + r->tstart;
    if (s[0] != '#' || s[1] != 'x')
        return false;
    uint64_t v = 0;
    for (size_t i = 2; i < r->tlen; i++) {
        int h = s_hexval((unsigned char)s[i]);
        if (h < 0)
            return false;
        v = (v << 4) | (uint64_t)h;
    }
    *out = (int64_t)v;
    return true;
}

/* Decimal syntax [+-]?D+[.D*][(e|E)[+-]?D+]. */
static bool s_decimal_syntax(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    size_t d0 = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == d0)
        return false;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e0 = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == e0)
            return false;
    }
    return i == n;
}

/* NUMBER (see text.h). False for anything else, including overflowing decimals. */
bool troupe__sexp_atom_number(const troupe__sexp_reader_t *r, double *out)
{
    if (r->tk != TROUPE__SEXP_ATOM)
        return false;
    if (troupe__sexp_is(r, "inf") || troupe__sexp_is(r, "+inf")) {
        *out = INFINITY;
        return true;
    }
    if (troupe__sexp_is(r, "-inf")) {
        *out = -INFINITY;
        return true;
    }
    if (troupe__sexp_is(r, "nan")) {
        *out = troupe__sexp_bits_double(S_CANON_NAN_BITS);
        return true;
    }
    const char *s = r->src + r->tstart;
    if (!s_decimal_syntax(s, r->tlen))
        return false;
    char buf[TROUPE_SEXP_MAX_ATOM + 1];
    memcpy(buf, s, r->tlen);
    buf[r->tlen] = '\0';
    errno = 0;
    double v = strtod(buf, NULL);
    if (errno == ERANGE && isinf(v))
        return false;
    *out = v;
    return true;
}

/* A constant value: NUMBER or (f64 BITS). */
troupe_status_t troupe__sexp_value(troupe__sexp_reader_t *r, const char *what, double *out)
{
    if (r->tk == TROUPE__SEXP_LP) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(r, what));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(r, "f64"));
        int64_t bits = 0;
        if (!troupe__sexp_atom_bits(r, &bits))
            return troupe__sexp_expected(r, "a bit pattern #xHH...");
        *out = troupe__sexp_bits_double((uint64_t)bits);
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(r));
        return troupe__sexp_rp(r, "f64");
    }
    if (!troupe__sexp_atom_number(r, out))
        return troupe__sexp_expected(r, what);
    return troupe__sexp_next(r);
}

troupe_status_t troupe__sexp_reader_init(troupe__sexp_reader_t *r, const char *text, size_t len)
{
    memset(r, 0, sizeof *r);
    r->src = text;
    r->len = len;
    r->line = 1;
    r->col = 1;
    if (len > TROUPE_SEXP_MAX_BYTES)
        return troupe__sexp_err_at(1, 1, "expected at most %zu bytes of input, found %zu",
                                   TROUPE_SEXP_MAX_BYTES, len);
    return troupe__sexp_next(r);
}

void troupe__sexp_reader_fini(troupe__sexp_reader_t *r)
{
    troupe_free(r->str);
    r->str = NULL;
    r->str_len = r->str_cap = 0;
}

/* ---- trees ----------------------------------------------------------------------------------- */

static troupe_status_t s_datum(troupe__sexp_reader_t *r, troupe_sexp_t **out);

static troupe_sexp_t *s_new(troupe_sexp_kind_t kind, int line, int col)
{
    troupe_sexp_t *x = troupe_calloc(1, sizeof *x);
    if (x != NULL) {
        x->kind = kind;
        x->line = line;
        x->col = col;
    }
    return x;
}

/* The items of a list after its '(' up to and including its ')'. */
static troupe_status_t s_items(troupe__sexp_reader_t *r, troupe_sexp_t *list)
{
    size_t cap = 0;
    while (r->tk != TROUPE__SEXP_RP) {
        if (r->tk == TROUPE__SEXP_EOF)
            return troupe__sexp_expected(r, "')'");
        troupe_sexp_t *item = NULL;
        TROUPE_RETURN_IF_ERROR(s_datum(r, &item));
        if (!TROUPE__VEC_PUSH(list->items, list->count, cap, item)) {
            troupe_sexp_destroy(&item);
            return troupe__sexp_oom();
        }
    }
    return troupe__sexp_rp(r, "the list");
}

static troupe_status_t s_datum(troupe__sexp_reader_t *r, troupe_sexp_t **out)
{
    *out = NULL;
    troupe_sexp_t *x;
    troupe_status_t st = TROUPE_OK;
    switch (r->tk) {
    case TROUPE__SEXP_LP:
        if ((x = s_new(TROUPE_SEXP_LIST, r->tline, r->tcol)) == NULL)
            return troupe__sexp_oom();
        if ((st = troupe__sexp_lp(r, "a datum")) == TROUPE_OK)
            st = s_items(r, x);
        break;
    case TROUPE__SEXP_ATOM:
    case TROUPE__SEXP_STR: {
        bool atom = r->tk == TROUPE__SEXP_ATOM;
        if ((x = s_new(atom ? TROUPE_SEXP_ATOM : TROUPE_SEXP_STRING, r->tline, r->tcol)) == NULL)
            return troupe__sexp_oom();
        const char *bytes = atom ? r->src + r->tstart : r->str;
        x->len = atom ? r->tlen : r->str_len;
        if ((x->text = troupe_malloc(x->len + 1)) == NULL) {
            st = troupe__sexp_oom();
            break;
        }
        memcpy(x->text, bytes, x->len);
        x->text[x->len] = '\0';
        st = troupe__sexp_next(r);
        break;
    }
    default:
        return troupe__sexp_expected(r, "a datum ('(', an atom or a string)");
    }
    if (st != TROUPE_OK) {
        troupe_sexp_destroy(&x);
        return st;
    }
    *out = x;
    return TROUPE_OK;
}

troupe_status_t troupe_sexp_read(const char *text, size_t len, troupe_sexp_t **out)
{
    if (out == NULL || (text == NULL && len > 0)) {
        if (out != NULL)
            *out = NULL;
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_sexp_read: NULL argument");
    }
    *out = NULL;
    troupe__sexp_reader_t r;
    troupe_sexp_t *x = NULL;
    troupe_status_t st = troupe__sexp_reader_init(&r, text ? text : "", len);
    if (st == TROUPE_OK)
        st = s_datum(&r, &x);
    if (st == TROUPE_OK && r.tk != TROUPE__SEXP_EOF)
        st = troupe__sexp_expected(&r, "end of input");
    troupe__sexp_reader_fini(&r);
    if (st != TROUPE_OK) {
        troupe_sexp_destroy(&x);
        return st;
    }
    *out = x;
    return TROUPE_OK;
}

void troupe_sexp_destroy(troupe_sexp_t **sexp_p)
{
    if (sexp_p == NULL || *sexp_p == NULL)
        return;
    troupe_sexp_t *x = *sexp_p;
    for (size_t i = 0; i < x->count; i++)
        troupe_sexp_destroy(&x->items[i]);
    troupe_free(x->items);
    troupe_free(x->text);
    troupe_free(x);
    *sexp_p = NULL;
}

bool troupe_sexp_is_atom(const troupe_sexp_t *x, const char *atom)
{
    return x != NULL && atom != NULL && x->kind == TROUPE_SEXP_ATOM && strcmp(x->text, atom) == 0;
}

bool troupe_sexp_is_form(const troupe_sexp_t *x, const char *head)
{
    return x != NULL && x->kind == TROUPE_SEXP_LIST && x->count > 0 &&
           troupe_sexp_is_atom(x->items[0], head);
}

const troupe_sexp_t *troupe_sexp_find(const troupe_sexp_t *x, const char *head)
{
    if (x == NULL || x->kind != TROUPE_SEXP_LIST)
        return NULL;
    for (size_t i = 0; i < x->count; i++)
        if (troupe_sexp_is_form(x->items[i], head))
            return x->items[i];
    return NULL;
}
