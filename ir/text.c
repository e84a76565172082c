/* troupe — S-expression text form of low-level procedures and assignment comps (ir/text.h).
 *
 * Layout: string builder and number formatting; the lexer; parser helpers shared by both
 * forms (positions, errors, node and symbol tables); the low-level printer and parser; the
 * assignment printer and parser; the round-trip entry point used by the fuzzer.
 *
 * The parser is a recursive descent over tokens that builds the tree directly with the
 * builders of ir/lowlevel.h and ir/assign.h. Recursion only happens on '(' and the list depth
 * is capped at TROUPE_TEXT_MAX_DEPTH, so hostile input cannot exhaust the stack. Everything a
 * failed parse allocated is owned by the procedure or comp under construction (arena, node
 * references) or by the parser (string buffer, tables) and released on the way out.
 */
#define _POSIX_C_SOURCE 200809L
#include "ir/text.h"

#include "base/alloc.h"
#include "ir/assign.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CANON_NAN_BITS UINT64_C(0x7ff8000000000000)

/* Deepest tree the printers accept: each tree level opens at least one list, and the header
 * (3 lists) and an index (up to 4) add a few more, so printed text stays within
 * TROUPE_TEXT_MAX_DEPTH and parses back. */
#define S_MAX_TREE_DEPTH (TROUPE_TEXT_MAX_DEPTH - 16)

/* ---- C locale for number formatting -------------------------------------------------------- */

typedef struct s_cloc {
    locale_t c, old;
    bool active;
} s_cloc_t;

/* Switches this thread to the C numeric locale (printf/strtod use '.'); best effort. */
static void s_cloc_enter(s_cloc_t *l)
{
    l->active = false;
    l->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (l->c != (locale_t)0) {
        l->old = uselocale(l->c);
        l->active = l->old != (locale_t)0;
        if (!l->active)
            freelocale(l->c);
    }
}

static void s_cloc_leave(s_cloc_t *l)
{
    if (l->active) {
        uselocale(l->old);
        freelocale(l->c);
        l->active = false;
    }
}

/* ---- string builder ------------------------------------------------------------------------ */

typedef struct s_sb {
    char *buf;
    size_t len, cap;
    bool oom;
} s_sb_t;

static void s_sb_putn(s_sb_t *sb, const char *s, size_t n)
{
    if (sb->oom)
        return;
    if (sb->cap - sb->len < n + 1) {
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap - sb->len < n + 1) {
            if (cap > SIZE_MAX / 2) {
                sb->oom = true;
                return;
            }
            cap *= 2;
        }
        char *b = troupe_realloc(sb->buf, cap);
        if (b == NULL) {
            sb->oom = true;
            return;
        }
        sb->buf = b;
        sb->cap = cap;
    }
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

static void s_sb_put(s_sb_t *sb, const char *s)
{
    s_sb_putn(sb, s, strlen(s));
}

static void s_sb_printf(s_sb_t *sb, const char *fmt, ...) TROUPE_PRINTF(2, 3);
static void s_sb_printf(s_sb_t *sb, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        sb->oom = true; /* only short numeric pieces go through here */
        return;
    }
    s_sb_putn(sb, buf, (size_t)n);
}

static void s_sb_indent(s_sb_t *sb, int indent)
{
    s_sb_put(sb, "\n");
    for (int i = 0; i < indent; i++)
        s_sb_put(sb, " ");
}

/* A quoted string with escapes for '"', '\\' and bytes below 0x20 or equal to 0x7F. */
static void s_sb_quoted(s_sb_t *sb, const char *s)
{
    s_sb_put(sb, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            s_sb_put(sb, "\\\"");
            break;
        case '\\':
            s_sb_put(sb, "\\\\");
            break;
        case '\n':
            s_sb_put(sb, "\\n");
            break;
        case '\t':
            s_sb_put(sb, "\\t");
            break;
        case '\r':
            s_sb_put(sb, "\\r");
            break;
        default:
            if (*p < 0x20 || *p == 0x7F)
                s_sb_printf(sb, "\\x%02x", *p);
            else
                s_sb_putn(sb, (const char *)p, 1);
        }
    }
    s_sb_put(sb, "\"");
}

static uint64_t s_double_bits(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static double s_bits_double(uint64_t u)
{
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* A constant: shortest exact decimal, inf/-inf/nan, or (f64 #x...) for other NaNs. The
 * caller has entered the C locale. */
static void s_sb_double(s_sb_t *sb, double x)
{
    uint64_t bits = s_double_bits(x);
    if (isnan(x)) {
        if (bits == S_CANON_NAN_BITS)
            s_sb_put(sb, "nan");
        else
            s_sb_printf(sb, "(f64 #x%016" PRIx64 ")", bits);
        return;
    }
    if (isinf(x)) {
        s_sb_put(sb, x > 0 ? "inf" : "-inf");
        return;
    }
    char buf[48];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (s_double_bits(strtod(buf, NULL)) == bits)
            break;
    }
    s_sb_put(sb, buf);
}

static void s_sb_bits(s_sb_t *sb, int64_t bits)
{
    s_sb_printf(sb, "#x%" PRIx64, (uint64_t)bits);
}

/* ---- lexer --------------------------------------------------------------------------------- */

typedef enum s_tk {
    S_TK_LP,
    S_TK_RP,
    S_TK_ATOM,
    S_TK_STR,
    S_TK_EOF,
} s_tk_t;

typedef struct s_ntab {
    troupe_tnode_t **nodes; /* retained, sorted by id */
    size_t count, cap;
} s_ntab_t;

/* Symbol name -> id, open addressing over a power-of-two table (ids + 1; 0 = empty). */
typedef struct s_stab {
    int32_t *slots;
    size_t cap;
    size_t count;
} s_stab_t;

typedef struct s_parser {
    const char *src;
    size_t len, pos;
    int line, col; /* of src[pos] */
    /* current token */
    s_tk_t tk;
    size_t tstart, tlen; /* atom bytes in src */
    int tline, tcol;
    char *str; /* decoded string token, NUL-terminated */
    size_t str_len, str_cap;
    int depth;
    /* semantic state */
    s_ntab_t nodes;               /* declared nodes */
    s_stab_t syms;                /* declared symbol names */
    const char *const *sym_names; /* names by id, owned by the proc/comp being built */
    int32_t nsyms;
    int32_t *scopes; /* open local scope ids */
    size_t nscopes, scopes_cap;
    troupe_ll_proc_t *proc;
    troupe_asgn_comp_t *comp;
} s_parser_t;

/* The message of a failure at (line, col). */
static troupe_status_t s_err_at(int line, int col, const char *fmt, ...) TROUPE_PRINTF(3, 4);
static troupe_status_t s_err_at(int line, int col, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "%d:%d: %s", line, col, msg);
}

static troupe_status_t s_oom(void)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory parsing text");
}

/* Describes the current token for "found ..." */
static void s_describe(const s_parser_t *p, char *buf, size_t cap)
{
    switch (p->tk) {
    case S_TK_LP:
        snprintf(buf, cap, "'('");
        break;
    case S_TK_RP:
        snprintf(buf, cap, "')'");
        break;
    case S_TK_STR:
        snprintf(buf, cap, "a string");
        break;
    case S_TK_EOF:
        snprintf(buf, cap, "end of input");
        break;
    case S_TK_ATOM: {
        int n = p->tlen > 40 ? 40 : (int)p->tlen;
        snprintf(buf, cap, "'%.*s%s'", n, p->src + p->tstart, p->tlen > 40 ? "..." : "");
        break;
    }
    }
}

static troupe_status_t s_expected(const s_parser_t *p, const char *what)
{
    char found[64];
    s_describe(p, found, sizeof found);
    return s_err_at(p->tline, p->tcol, "expected %s, found %s", what, found);
}

static void s_step(s_parser_t *p)
{
    if (p->src[p->pos] == '\n') {
        p->line++;
        p->col = 1;
    } else {
        p->col++;
    }
    p->pos++;
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

static troupe_status_t s_str_push(s_parser_t *p, char c)
{
    if (p->str_len + 2 > p->str_cap) {
        size_t cap = p->str_cap ? p->str_cap * 2 : 64;
        char *s = troupe_realloc(p->str, cap);
        if (s == NULL)
            return s_oom();
        p->str = s;
        p->str_cap = cap;
    }
    p->str[p->str_len++] = c;
    p->str[p->str_len] = '\0';
    return TROUPE_OK;
}

static troupe_status_t s_lex_string(s_parser_t *p)
{
    p->str_len = 0;
    TROUPE_RETURN_IF_ERROR(s_str_push(p, 'x')); /* ensure allocation; reset below */
    p->str_len = 0;
    p->str[0] = '\0';
    s_step(p); /* opening quote */
    for (;;) {
        if (p->pos >= p->len)
            return s_err_at(p->line, p->col,
                            "expected '\"' closing the string started at %d:%d, "
                            "found end of input",
                            p->tline, p->tcol);
        unsigned char c = (unsigned char)p->src[p->pos];
        if (c == '"') {
            s_step(p);
            return TROUPE_OK;
        }
        if (c == '\\') {
            int line = p->line, col = p->col;
            s_step(p);
            unsigned char e = p->pos < p->len ? (unsigned char)p->src[p->pos] : 0;
            char out;
            switch (e) {
            case '\\':
            case '"':
                out = (char)e;
                s_step(p);
                break;
            case 'n':
                out = '\n';
                s_step(p);
                break;
            case 't':
                out = '\t';
                s_step(p);
                break;
            case 'r':
                out = '\r';
                s_step(p);
                break;
            case 'x': {
                s_step(p);
                int h1 = p->pos < p->len ? s_hexval((unsigned char)p->src[p->pos]) : -1;
                int h2 = p->pos + 1 < p->len ? s_hexval((unsigned char)p->src[p->pos + 1]) : -1;
                if (h1 < 0 || h2 < 0 || (h1 == 0 && h2 == 0))
                    return s_err_at(line, col,
                                    "expected an escape \\xHH with two hex digits "
                                    "(not 00), found a bad escape");
                out = (char)(h1 * 16 + h2);
                s_step(p);
                s_step(p);
                break;
            }
            default:
                return s_err_at(line, col,
                                "expected an escape (\\\\ \\\" \\n \\t \\r \\xHH), "
                                "found a bad escape");
            }
            TROUPE_RETURN_IF_ERROR(s_str_push(p, out));
            continue;
        }
        if (c < 0x20 || c == 0x7F)
            return s_err_at(p->line, p->col,
                            "expected a printable byte in a string, found byte "
                            "0x%02x",
                            c);
        TROUPE_RETURN_IF_ERROR(s_str_push(p, (char)c));
        s_step(p);
    }
}

/* Reads the next token into p->tk. */
static troupe_status_t s_next(s_parser_t *p)
{
    for (;;) {
        if (p->pos >= p->len)
            break;
        char c = p->src[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            s_step(p);
        } else if (c == ';') {
            while (p->pos < p->len && p->src[p->pos] != '\n')
                s_step(p);
        } else {
            break;
        }
    }
    p->tline = p->line;
    p->tcol = p->col;
    if (p->pos >= p->len) {
        p->tk = S_TK_EOF;
        return TROUPE_OK;
    }
    unsigned char c = (unsigned char)p->src[p->pos];
    if (c == '(') {
        p->tk = S_TK_LP;
        s_step(p);
        return TROUPE_OK;
    }
    if (c == ')') {
        p->tk = S_TK_RP;
        s_step(p);
        return TROUPE_OK;
    }
    if (c == '"') {
        p->tk = S_TK_STR;
        return s_lex_string(p);
    }
    if (!s_atom_byte(c))
        return s_err_at(p->line, p->col, "expected a token, found byte 0x%02x", c);
    p->tk = S_TK_ATOM;
    p->tstart = p->pos;
    while (p->pos < p->len && s_atom_byte((unsigned char)p->src[p->pos])) {
        s_step(p);
        if (p->pos - p->tstart > TROUPE_TEXT_MAX_ATOM)
            return s_err_at(p->tline, p->tcol,
                            "expected an atom of at most %d bytes, found a "
                            "longer one",
                            TROUPE_TEXT_MAX_ATOM);
    }
    p->tlen = p->pos - p->tstart;
    return TROUPE_OK;
}

/* ---- token predicates and readers ----------------------------------------------------------- */

static bool s_is(const s_parser_t *p, const char *kw)
{
    size_t n = strlen(kw);
    return p->tk == S_TK_ATOM && p->tlen == n && memcmp(p->src + p->tstart, kw, n) == 0;
}

/* Copies the current atom (NUL-terminated) into buf; false when it does not fit. */
static bool s_atom_copy(const s_parser_t *p, char *buf, size_t cap)
{
    if (p->tk != S_TK_ATOM || p->tlen + 1 > cap)
        return false;
    memcpy(buf, p->src + p->tstart, p->tlen);
    buf[p->tlen] = '\0';
    return true;
}

static troupe_status_t s_lp(s_parser_t *p, const char *what)
{
    if (p->tk != S_TK_LP)
        return s_expected(p, what);
    if (p->depth >= TROUPE_TEXT_MAX_DEPTH)
        return s_err_at(p->tline, p->tcol,
                        "expected lists nested at most %d deep, found "
                        "deeper nesting",
                        TROUPE_TEXT_MAX_DEPTH);
    p->depth++;
    return s_next(p);
}

static troupe_status_t s_rp(s_parser_t *p, const char *closing)
{
    if (p->tk != S_TK_RP) {
        char what[96];
        snprintf(what, sizeof what, "')' closing %s", closing);
        return s_expected(p, what);
    }
    p->depth--;
    return s_next(p);
}

static troupe_status_t s_keyword(s_parser_t *p, const char *kw)
{
    if (!s_is(p, kw)) {
        char what[64];
        snprintf(what, sizeof what, "'%s'", kw);
        return s_expected(p, what);
    }
    return s_next(p);
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

static bool s_atom_int(const s_parser_t *p, int64_t *out)
{
    return p->tk == S_TK_ATOM && s_parse_int_text(p->src + p->tstart, p->tlen, out);
}

/* An integer in [lo, hi]; `what` names it in the error. */
static troupe_status_t s_int(s_parser_t *p, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v;
    if (!s_atom_int(p, &v) || v < lo || v > hi)
        return s_expected(p, what);
    *out = v;
    return s_next(p);
}

static bool s_is_ident(const char *s, size_t n)
{
    if (n == 0 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

static bool s_atom_ident(const s_parser_t *p)
{
    return p->tk == S_TK_ATOM && s_is_ident(p->src + p->tstart, p->tlen);
}

/* BITS: #x and 1..16 hex digits. */
static bool s_atom_bits(const s_parser_t *p, int64_t *out)
{
    if (p->tk != S_TK_ATOM || p->tlen < 3 || p->tlen > 18)
        return false;
    const char *s = p->src + p->tstart;
    if (s[0] != '#' || s[1] != 'x')
        return false;
    uint64_t v = 0;
    for (size_t i = 2; i < p->tlen; i++) {
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
static bool s_atom_number(const s_parser_t *p, double *out)
{
    if (p->tk != S_TK_ATOM)
        return false;
    if (s_is(p, "inf") || s_is(p, "+inf")) {
        *out = INFINITY;
        return true;
    }
    if (s_is(p, "-inf")) {
        *out = -INFINITY;
        return true;
    }
    if (s_is(p, "nan")) {
        *out = s_bits_double(S_CANON_NAN_BITS);
        return true;
    }
    const char *s = p->src + p->tstart;
    if (!s_decimal_syntax(s, p->tlen))
        return false;
    char buf[TROUPE_TEXT_MAX_ATOM + 1];
    memcpy(buf, s, p->tlen);
    buf[p->tlen] = '\0';
    errno = 0;
    double v = strtod(buf, NULL);
    if (errno == ERANGE && isinf(v))
        return false;
    *out = v;
    return true;
}

/* A constant value: NUMBER or (f64 BITS). */
static troupe_status_t s_value(s_parser_t *p, const char *what, double *out)
{
    if (p->tk == S_TK_LP) {
        TROUPE_RETURN_IF_ERROR(s_lp(p, what));
        TROUPE_RETURN_IF_ERROR(s_keyword(p, "f64"));
        int64_t bits = 0;
        if (!s_atom_bits(p, &bits))
            return s_expected(p, "a bit pattern #xHH...");
        *out = s_bits_double((uint64_t)bits);
        TROUPE_RETURN_IF_ERROR(s_next(p));
        return s_rp(p, "f64");
    }
    if (!s_atom_number(p, out))
        return s_expected(p, what);
    return s_next(p);
}

/* ---- node table ------------------------------------------------------------------------------ */

static size_t s_ntab_lower(const s_ntab_t *t, int32_t id)
{
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->nodes[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static troupe_tnode_t *s_ntab_find(const s_ntab_t *t, int32_t id)
{
    size_t i = s_ntab_lower(t, id);
    return i < t->count && t->nodes[i]->id == id ? t->nodes[i] : NULL;
}

/* Inserts (taking over the caller's reference). */
static bool s_ntab_insert(s_ntab_t *t, troupe_tnode_t *tn)
{
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        troupe_tnode_t **n = troupe_realloc(t->nodes, cap * sizeof *n);
        if (n == NULL)
            return false;
        t->nodes = n;
        t->cap = cap;
    }
    size_t i = s_ntab_lower(t, tn->id);
    memmove(t->nodes + i + 1, t->nodes + i, (t->count - i) * sizeof *t->nodes);
    t->nodes[i] = tn;
    t->count++;
    return true;
}

static void s_ntab_free(s_ntab_t *t)
{
    for (size_t i = 0; i < t->count; i++)
        troupe_tnode_release(&t->nodes[i]);
    troupe_free(t->nodes);
    memset(t, 0, sizeof *t);
}

/* ---- symbol table -------------------------------------------------------------------------- */

static uint64_t s_hash(const char *s, size_t n)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* Looks a name up among names[0..]; returns the id or -1. */
static int32_t s_stab_find(const s_stab_t *t, const char *const *names, const char *s, size_t n)
{
    if (t->cap == 0)
        return -1;
    for (size_t i = (size_t)s_hash(s, n) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        int32_t slot = t->slots[i];
        if (slot == 0)
            return -1;
        const char *name = names[slot - 1];
        if (strlen(name) == n && memcmp(name, s, n) == 0)
            return slot - 1;
    }
}

/* Adds id (whose name is names[id]); false on out of memory. */
static bool s_stab_add(s_stab_t *t, const char *const *names, int32_t id)
{
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        int32_t *slots = troupe_calloc(cap, sizeof *slots);
        if (slots == NULL)
            return false;
        for (size_t i = 0; i < t->cap; i++) {
            int32_t slot = t->slots[i];
            if (slot == 0)
                continue;
            const char *nm = names[slot - 1];
            size_t j = (size_t)s_hash(nm, strlen(nm)) & (cap - 1);
            while (slots[j] != 0)
                j = (j + 1) & (cap - 1);
            slots[j] = slot;
        }
        troupe_free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    const char *nm = names[id];
    size_t j = (size_t)s_hash(nm, strlen(nm)) & (t->cap - 1);
    while (t->slots[j] != 0)
        j = (j + 1) & (t->cap - 1);
    t->slots[j] = id + 1;
    t->count++;
    return true;
}

static void s_stab_free(s_stab_t *t)
{
    troupe_free(t->slots);
    memset(t, 0, sizeof *t);
}

static void s_parser_free(s_parser_t *p)
{
    s_ntab_free(&p->nodes);
    s_stab_free(&p->syms);
    troupe_free(p->scopes);
    troupe_free(p->str);
}

/* ---- shared header pieces -------------------------------------------------------------------- */

/* "single 2x3", or with show_padding "single 2x3 padded with 0 (0 1) (1 1)" / "... unpadded" */
static void s_node_desc(char *buf, size_t cap, troupe_prec_t prec, int ndims, const int64_t *dims,
                        bool has_padding, const troupe_axis_padding_t *padding,
                        double padding_value, bool show_padding)
{
    size_t n = (size_t)snprintf(buf, cap, "%s ", troupe_prec_name(prec));
    if (ndims == 0 && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "1");
    for (int a = 0; a < ndims && n < cap; a++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, a ? "x" : "", dims[a]);
    if (has_padding) {
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, " padded with %g", padding_value);
        for (int a = 0; a < ndims && n < cap; a++)
            n += (size_t)snprintf(buf + n, cap - n, " (%" PRId64 " %" PRId64 ")", padding[a].left,
                                  padding[a].right);
    } else if (show_padding && n < cap) {
        snprintf(buf + n, cap - n, " unpadded");
    }
}

static void s_print_node_decl(s_sb_t *sb, const troupe_tnode_t *tn)
{
    s_sb_printf(sb, "(node %" PRId32 " (label", tn->id);
    for (size_t i = 0; i < tn->label_count; i++) {
        s_sb_put(sb, " ");
        s_sb_quoted(sb, tn->label[i]);
    }
    s_sb_printf(sb, ") %s (dims", troupe_prec_name(tn->prec));
    for (int a = 0; a < tn->ndims; a++)
        s_sb_printf(sb, " %" PRId64, tn->dims[a]);
    s_sb_put(sb, ")");
    if (tn->has_padding) {
        s_sb_put(sb, " (padding ");
        s_sb_double(sb, tn->padding_value);
        for (int a = 0; a < tn->ndims; a++)
            s_sb_printf(sb, " (%" PRId64 " %" PRId64 ")", tn->padding[a].left,
                        tn->padding[a].right);
        s_sb_put(sb, ")");
    }
    s_sb_put(sb, ")");
}

/* (node ID (label ...) PREC (dims ...) [(padding V (L R)...)]): declares a node in p->nodes,
 * reusing a matching live node. */
static troupe_status_t s_parse_node_decl(s_parser_t *p)
{
    troupe_status_t st = TROUPE_OK;
    char **labels = NULL;
    size_t nlabels = 0, labels_cap = 0;
    int line = p->tline, col = p->tcol;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(' starting a node declaration"));
    TROUPE_RETURN_IF_ERROR(s_keyword(p, "node"));
    int64_t id = 0;
    TROUPE_RETURN_IF_ERROR(s_int(p, "a node id (1..2147483647)", 1, INT32_MAX, &id));
    if ((st = s_lp(p, "'(label'")) != TROUPE_OK)
        goto done;
    if ((st = s_keyword(p, "label")) != TROUPE_OK)
        goto done;
    while (p->tk == S_TK_ATOM || p->tk == S_TK_STR) {
        if (nlabels == labels_cap) {
            size_t cap = labels_cap ? labels_cap * 2 : 4;
            char **l = troupe_realloc(labels, cap * sizeof *l);
            if (l == NULL) {
                st = s_oom();
                goto done;
            }
            labels = l;
            labels_cap = cap;
        }
        char *s;
        if (p->tk == S_TK_STR) {
            s = troupe_strdup(p->str);
        } else {
            s = troupe_malloc(p->tlen + 1);
            if (s != NULL) {
                memcpy(s, p->src + p->tstart, p->tlen);
                s[p->tlen] = '\0';
            }
        }
        if (s == NULL) {
            st = s_oom();
            goto done;
        }
        labels[nlabels++] = s;
        if ((st = s_next(p)) != TROUPE_OK)
            goto done;
    }
    if ((st = s_rp(p, "the label list")) != TROUPE_OK)
        goto done;
    char pname[32];
    troupe_prec_t prec;
    if (!s_atom_copy(p, pname, sizeof pname) || troupe_prec_of_string(pname, &prec) != TROUPE_OK ||
        prec == TROUPE_PREC_VOID) {
        st = s_expected(p, "a precision (byte uint16 int32 uint32 int64 uint64 uint4x32 half "
                           "bfloat16 fp8 single double)");
        goto done;
    }
    if ((st = s_next(p)) != TROUPE_OK)
        goto done;
    if ((st = s_lp(p, "'(dims'")) != TROUPE_OK || (st = s_keyword(p, "dims")) != TROUPE_OK)
        goto done;
    int64_t dims[TROUPE_MAX_DIMS];
    int ndims = 0;
    while (p->tk != S_TK_RP) {
        if (ndims == TROUPE_MAX_DIMS) {
            st = s_expected(p, "')' (at most 8 dims)");
            goto done;
        }
        if ((st = s_int(p, "a positive dim", 1, INT64_MAX, &dims[ndims])) != TROUPE_OK)
            goto done;
        ndims++;
    }
    if ((st = s_rp(p, "the dims")) != TROUPE_OK)
        goto done;
    troupe_axis_padding_t padding[TROUPE_MAX_DIMS];
    memset(padding, 0, sizeof padding);
    bool has_padding = false;
    double padding_value = 0.0;
    if (p->tk == S_TK_LP) {
        has_padding = true;
        if ((st = s_lp(p, "'(padding'")) != TROUPE_OK ||
            (st = s_keyword(p, "padding")) != TROUPE_OK ||
            (st = s_value(p, "a padding value", &padding_value)) != TROUPE_OK)
            goto done;
        for (int a = 0; a < ndims; a++) {
            if ((st = s_lp(p, "'(' starting an axis padding (left right)")) != TROUPE_OK ||
                (st = s_int(p, "a left padding >= 0", 0, INT64_MAX, &padding[a].left)) !=
                    TROUPE_OK ||
                (st = s_int(p, "a right padding >= 0", 0, INT64_MAX, &padding[a].right)) !=
                    TROUPE_OK ||
                (st = s_rp(p, "the axis padding")) != TROUPE_OK)
                goto done;
        }
        if ((st = s_rp(p, "the padding (one (left right) per dim)")) != TROUPE_OK)
            goto done;
    }
    if ((st = s_rp(p, "the node declaration")) != TROUPE_OK)
        goto done;

    if (s_ntab_find(&p->nodes, (int32_t)id) != NULL) {
        st = s_err_at(line, col, "node %" PRId64 " declared twice", id);
        goto done;
    }
    troupe_tnode_t *tn = NULL;
    if (troupe_tnode_find((int32_t)id, &tn) == TROUPE_OK) {
        bool same = tn->prec == prec && tn->ndims == ndims && tn->has_padding == has_padding;
        for (int a = 0; same && a < ndims; a++)
            same = tn->dims[a] == dims[a] &&
                   (!has_padding || (tn->padding[a].left == padding[a].left &&
                                     tn->padding[a].right == padding[a].right));
        if (same && has_padding)
            same = s_double_bits(tn->padding_value) == s_double_bits(padding_value);
        if (!same) {
            char want[256], have[256];
            bool show = has_padding || tn->has_padding;
            s_node_desc(want, sizeof want, prec, ndims, dims, has_padding, padding, padding_value,
                        show);
            s_node_desc(have, sizeof have, tn->prec, tn->ndims, tn->dims, tn->has_padding,
                        tn->padding, tn->padding_value, show);
            troupe_tnode_release(&tn);
            st = s_err_at(line, col, "node %" PRId64 ": declared %s but the live node is %s", id,
                          want, have);
            goto done;
        }
    } else {
        st =
            troupe_tnode_new_with_id((int32_t)id, (const char *const *)labels, nlabels, prec, ndims,
                                     dims, has_padding ? padding : NULL, padding_value, &tn);
        if (st != TROUPE_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", troupe_last_error());
            if (st == TROUPE_RESOURCE_EXHAUSTED)
                st = troupe__error(st, "%d:%d: node %" PRId64 ": %s", line, col, id, msg);
            else
                st = s_err_at(line, col, "node %" PRId64 ": %s", id, msg);
            goto done;
        }
    }
    if (!s_ntab_insert(&p->nodes, tn)) {
        troupe_tnode_release(&tn);
        st = s_oom();
        goto done;
    }
done:
    for (size_t i = 0; i < nlabels; i++)
        troupe_free(labels[i]);
    troupe_free(labels);
    return st;
}

/* (nodes NODE*) */
static troupe_status_t s_parse_nodes(s_parser_t *p)
{
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(nodes'"));
    TROUPE_RETURN_IF_ERROR(s_keyword(p, "nodes"));
    while (p->tk == S_TK_LP)
        TROUPE_RETURN_IF_ERROR(s_parse_node_decl(p));
    return s_rp(p, "the node list");
}

/* A node id in the body: declared, and returned. */
static troupe_status_t s_node_ref(s_parser_t *p, troupe_tnode_t **out)
{
    int64_t id = 0;
    if (!s_atom_int(p, &id))
        return s_expected(p, "a node id");
    troupe_tnode_t *tn = id >= 1 && id <= INT32_MAX ? s_ntab_find(&p->nodes, (int32_t)id) : NULL;
    if (tn == NULL)
        return s_err_at(p->tline, p->tcol,
                        "expected a declared node id, found %" PRId64 " (not in the node list)",
                        id);
    *out = tn;
    return s_next(p);
}

/* A symbol name in the body: declared; returns its id. */
static troupe_status_t s_sym_ref(s_parser_t *p, const char *what, int32_t *out)
{
    if (!s_atom_ident(p))
        return s_expected(p, what);
    int32_t id = s_stab_find(&p->syms, p->sym_names, p->src + p->tstart, p->tlen);
    if (id < 0) {
        char found[64];
        s_describe(p, found, sizeof found);
        return s_err_at(p->tline, p->tcol,
                        "expected a declared symbol, found %s (not in the "
                        "symbol list)",
                        found);
    }
    *out = id;
    return s_next(p);
}

/* ---- indices -----------------------------------------------------------------------------------
 */

static void s_print_index(s_sb_t *sb, const troupe_axis_index_t *idx, const char *const *names)
{
    if (idx->nterms == 0) {
        s_sb_printf(sb, "%" PRId64, idx->offset);
        return;
    }
    if (idx->nterms == 1 && idx->terms[0].coeff == 1 && idx->offset == 0) {
        s_sb_put(sb, names[idx->terms[0].sym]);
        return;
    }
    s_sb_put(sb, "(+");
    for (int k = 0; k < idx->nterms; k++) {
        if (idx->terms[k].coeff == 1)
            s_sb_printf(sb, " %s", names[idx->terms[k].sym]);
        else {
            s_sb_printf(sb, " (* %" PRId64 " ", idx->terms[k].coeff);
            s_sb_put(sb, names[idx->terms[k].sym]);
            s_sb_put(sb, ")");
        }
    }
    if (idx->offset != 0)
        s_sb_printf(sb, " %" PRId64, idx->offset);
    s_sb_put(sb, ")");
}

/* (* INT NAME) after the '(' and '*' were consumed. */
static troupe_status_t s_parse_scaled_term(s_parser_t *p, troupe_index_term_t *t)
{
    TROUPE_RETURN_IF_ERROR(s_int(p, "a coefficient", INT64_MIN, INT64_MAX, &t->coeff));
    TROUPE_RETURN_IF_ERROR(s_sym_ref(p, "a symbol name", &t->sym));
    return s_rp(p, "the term (* coeff symbol)");
}

static troupe_status_t s_parse_index(s_parser_t *p, troupe_axis_index_t *idx)
{
    memset(idx, 0, sizeof *idx);
    if (p->tk == S_TK_ATOM) {
        if (s_atom_int(p, &idx->offset))
            return s_next(p);
        if (s_atom_ident(p)) {
            idx->nterms = 1;
            idx->terms[0].coeff = 1;
            return s_sym_ref(p, "a symbol name", &idx->terms[0].sym);
        }
        return s_expected(p, "an index (integer, symbol, (+ ...) or (* c s))");
    }
    TROUPE_RETURN_IF_ERROR(s_lp(p, "an index (integer, symbol, (+ ...) or (* c s))"));
    if (s_is(p, "*")) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        idx->nterms = 1;
        return s_parse_scaled_term(p, &idx->terms[0]);
    }
    TROUPE_RETURN_IF_ERROR(s_keyword(p, "+"));
    while (p->tk != S_TK_RP) {
        if (s_atom_int(p, &idx->offset)) {
            TROUPE_RETURN_IF_ERROR(s_next(p));
            break; /* the offset comes last */
        }
        if (idx->nterms == TROUPE_MAX_INDEX_TERMS)
            return s_expected(p, "')' (at most 4 terms in an index)");
        troupe_index_term_t *t = &idx->terms[idx->nterms];
        if (p->tk == S_TK_LP) {
            TROUPE_RETURN_IF_ERROR(s_lp(p, "a term"));
            TROUPE_RETURN_IF_ERROR(s_keyword(p, "*"));
            TROUPE_RETURN_IF_ERROR(s_parse_scaled_term(p, t));
        } else {
            t->coeff = 1;
            TROUPE_RETURN_IF_ERROR(
                s_sym_ref(p, "a term (symbol or (* coeff symbol)) or the offset", &t->sym));
        }
        idx->nterms++;
    }
    return s_rp(p, "the index (+ ...)");
}

static void s_print_idcs(s_sb_t *sb, const troupe_axis_index_t *idcs, int n,
                         const char *const *names)
{
    s_sb_put(sb, "(");
    for (int a = 0; a < n; a++) {
        if (a > 0)
            s_sb_put(sb, " ");
        s_print_index(sb, &idcs[a], names);
    }
    s_sb_put(sb, ")");
}

/* (IDX*) with exactly tn->ndims entries. */
static troupe_status_t s_parse_idcs(s_parser_t *p, const troupe_tnode_t *tn,
                                    troupe_axis_index_t *idcs)
{
    int line = p->tline, col = p->tcol;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(' starting an index list"));
    int n = 0;
    while (p->tk != S_TK_RP) {
        if (n == tn->ndims)
            return s_err_at(p->tline, p->tcol,
                            "expected ')' after %d indices (node %" PRId32
                            " has %d dims), found another index",
                            n, tn->id, tn->ndims);
        TROUPE_RETURN_IF_ERROR(s_parse_index(p, &idcs[n]));
        n++;
    }
    if (n != tn->ndims)
        return s_err_at(line, col, "expected %d indices for node %" PRId32 ", found %d", tn->ndims,
                        tn->id, n);
    return s_rp(p, "the index list");
}

/* ---- low-level printer ----------------------------------------------------------------------- */

typedef struct s_pctx {
    s_sb_t sb;
    const char *const *names; /* symbol names by id */
    int32_t nsyms;
    troupe_status_t st; /* first malformation found */
} s_pctx_t;

static void s_bad(s_pctx_t *c, const char *what)
{
    if (c->st == TROUPE_OK)
        c->st = troupe__error(TROUPE_INVALID_ARGUMENT, "cannot print: %s", what);
}

static bool s_check_idcs(s_pctx_t *c, const troupe_axis_index_t *idcs, int n)
{
    if (n > 0 && idcs == NULL) {
        s_bad(c, "missing index array");
        return false;
    }
    for (int a = 0; a < n; a++) {
        if (idcs[a].nterms < 0 || idcs[a].nterms > TROUPE_MAX_INDEX_TERMS) {
            s_bad(c, "index with a bad number of terms");
            return false;
        }
        for (int k = 0; k < idcs[a].nterms; k++)
            if (idcs[a].terms[k].sym < 0 || idcs[a].terms[k].sym >= c->nsyms) {
                s_bad(c, "index refers to a symbol id outside the symbol table");
                return false;
            }
    }
    return true;
}

static void s_print_stmt(s_pctx_t *c, const troupe_ll_t *s, int indent, int depth);

static void s_print_sc(s_pctx_t *c, const troupe_sc_t *e, int depth)
{
    s_sb_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (e == NULL) {
        s_bad(c, "missing scalar");
        return;
    }
    if (depth > S_MAX_TREE_DEPTH) {
        s_bad(c, "tree nested deeper than the text form allows");
        return;
    }
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        if (e->u.local_scope.tn == NULL ||
            !s_check_idcs(c, e->u.local_scope.orig_indices, e->u.local_scope.tn->ndims))
            return s_bad(c, "malformed local_scope");
        s_sb_printf(sb, "(local_scope %" PRId32 " %" PRId32 " ", e->u.local_scope.id,
                    e->u.local_scope.tn->id);
        s_print_idcs(sb, e->u.local_scope.orig_indices, e->u.local_scope.tn->ndims, c->names);
        s_sb_put(sb, " ");
        s_print_stmt(c, e->u.local_scope.body, -1, depth + 1);
        s_sb_put(sb, ")");
        return;
    case TROUPE_SC_GET_LOCAL:
        s_sb_printf(sb, "(get_local %" PRId32 ")", e->u.get_local.id);
        return;
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        if (e->u.get.tn == NULL || !s_check_idcs(c, e->u.get.idcs, e->u.get.tn->ndims))
            return s_bad(c, "malformed get");
        s_sb_printf(sb, "(%s %" PRId32 " ", e->kind == TROUPE_SC_GET ? "get" : "get_merge_buffer",
                    e->u.get.tn->id);
        s_print_idcs(sb, e->u.get.idcs, e->u.get.tn->ndims, c->names);
        s_sb_put(sb, ")");
        return;
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n;
        const char *name;
        if (e->kind == TROUPE_SC_TERNOP) {
            n = 3;
            name = troupe_ternop_is_valid((troupe_ternop_t)e->u.op.op)
                       ? troupe_ternop_name((troupe_ternop_t)e->u.op.op)
                       : NULL;
        } else if (e->kind == TROUPE_SC_BINOP) {
            n = 2;
            name = troupe_binop_is_valid((troupe_binop_t)e->u.op.op)
                       ? troupe_binop_name((troupe_binop_t)e->u.op.op)
                       : NULL;
        } else {
            n = 1;
            name = troupe_unop_is_valid((troupe_unop_t)e->u.op.op)
                       ? troupe_unop_name((troupe_unop_t)e->u.op.op)
                       : NULL;
        }
        if (name == NULL)
            return s_bad(c, "operation out of range");
        s_sb_printf(sb, "(%s", name);
        for (int i = 0; i < n; i++) {
            s_sb_put(sb, " ");
            s_print_sc(c, e->u.op.args[i], depth + 1);
        }
        s_sb_put(sb, ")");
        return;
    }
    case TROUPE_SC_CONSTANT:
        s_sb_double(sb, e->u.constant);
        return;
    case TROUPE_SC_CONSTANT_BITS:
        s_sb_bits(sb, e->u.constant_bits);
        return;
    case TROUPE_SC_EMBED_INDEX:
        if (!s_check_idcs(c, &e->u.embed_index, 1))
            return;
        s_sb_put(sb, "(embed ");
        s_print_index(sb, &e->u.embed_index, c->names);
        s_sb_put(sb, ")");
        return;
    }
    s_bad(c, "unknown scalar kind");
}

/* indent < 0: everything on one line. */
static void s_print_stmt(s_pctx_t *c, const troupe_ll_t *s, int indent, int depth)
{
    s_sb_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (s == NULL) {
        s_bad(c, "missing statement");
        return;
    }
    if (depth > S_MAX_TREE_DEPTH) {
        s_bad(c, "tree nested deeper than the text form allows");
        return;
    }
    int inner = indent < 0 ? -1 : indent + 2;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
        s_sb_put(sb, "(noop)");
        return;
    case TROUPE_LL_COMMENT:
        s_sb_put(sb, "(comment ");
        s_sb_quoted(sb, s->u.comment ? s->u.comment : "");
        s_sb_put(sb, ")");
        return;
    case TROUPE_LL_SEQ:
        if (s->u.seq.count > 0 && s->u.seq.items == NULL)
            return s_bad(c, "seq without items");
        s_sb_put(sb, "(seq");
        for (size_t i = 0; i < s->u.seq.count; i++) {
            if (inner < 0)
                s_sb_put(sb, " ");
            else
                s_sb_indent(sb, inner);
            s_print_stmt(c, s->u.seq.items[i], inner, depth + 1);
        }
        s_sb_put(sb, ")");
        return;
    case TROUPE_LL_FOR:
        if (s->u.for_loop.sym < 0 || s->u.for_loop.sym >= c->nsyms)
            return s_bad(c, "for loop over a symbol id outside the symbol table");
        s_sb_printf(sb, "(for %s %" PRId64 " %" PRId64 "%s", c->names[s->u.for_loop.sym],
                    s->u.for_loop.from, s->u.for_loop.to,
                    s->u.for_loop.trace_it ? "" : " untraced");
        if (inner < 0)
            s_sb_put(sb, " ");
        else
            s_sb_indent(sb, inner);
        s_print_stmt(c, s->u.for_loop.body, inner, depth + 1);
        s_sb_put(sb, ")");
        return;
    case TROUPE_LL_ZERO_OUT:
        if (s->u.zero_out == NULL)
            return s_bad(c, "zero_out without a node");
        s_sb_printf(sb, "(zero_out %" PRId32 ")", s->u.zero_out->id);
        return;
    case TROUPE_LL_SET:
        if (s->u.set.tn == NULL || !s_check_idcs(c, s->u.set.idcs, s->u.set.tn->ndims))
            return s_bad(c, "malformed set");
        s_sb_printf(sb, "(set %" PRId32 " ", s->u.set.tn->id);
        s_print_idcs(sb, s->u.set.idcs, s->u.set.tn->ndims, c->names);
        s_sb_put(sb, " ");
        s_print_sc(c, s->u.set.value, depth + 1);
        s_sb_put(sb, ")");
        return;
    case TROUPE_LL_SET_FROM_VEC:
        if (s->u.set_from_vec.tn == NULL || !troupe_vec_unop_is_valid(s->u.set_from_vec.op) ||
            !s_check_idcs(c, s->u.set_from_vec.idcs, s->u.set_from_vec.tn->ndims))
            return s_bad(c, "malformed set_from_vec");
        s_sb_printf(sb, "(set_from_vec %" PRId32 " ", s->u.set_from_vec.tn->id);
        s_print_idcs(sb, s->u.set_from_vec.idcs, s->u.set_from_vec.tn->ndims, c->names);
        s_sb_printf(sb, " %d %s ", s->u.set_from_vec.length,
                    troupe_vec_unop_name(s->u.set_from_vec.op));
        s_print_sc(c, s->u.set_from_vec.arg, depth + 1);
        s_sb_put(sb, ")");
        return;
    case TROUPE_LL_SET_LOCAL:
        s_sb_printf(sb, "(set_local %" PRId32 " ", s->u.set_local.id);
        s_print_sc(c, s->u.set_local.value, depth + 1);
        s_sb_put(sb, ")");
        return;
    }
    s_bad(c, "unknown statement kind");
}

/* Fails when two symbols share a name (the text refers to symbols by name). */
static troupe_status_t s_check_unique_names(const char *const *names, int32_t n)
{
    s_stab_t t = {0};
    troupe_status_t st = TROUPE_OK;
    for (int32_t i = 0; i < n && st == TROUPE_OK; i++) {
        if (names[i] == NULL || !s_is_ident(names[i], strlen(names[i])))
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "cannot print: symbol %" PRId32 " has no identifier name", i);
        else if (s_stab_find(&t, names, names[i], strlen(names[i])) >= 0)
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "cannot print: symbols %" PRId32 " and %" PRId32
                               " share the name '%s' (the text refers to symbols by name)",
                               s_stab_find(&t, names, names[i], strlen(names[i])), i, names[i]);
        else if (!s_stab_add(&t, names, i))
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing");
    }
    s_stab_free(&t);
    return st;
}

troupe_status_t troupe_text_print_proc(const troupe_ll_proc_t *proc, char **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_print_proc: out is NULL");
    *out = NULL;
    if (proc == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_print_proc: proc is NULL");
    troupe_status_t st = TROUPE_OK;
    const char **names = troupe_calloc((size_t)(proc->nsyms > 0 ? proc->nsyms : 1), sizeof *names);
    if (names == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing");
    for (int32_t i = 0; i < proc->nsyms; i++)
        names[i] = proc->syms[i].name;
    if ((st = s_check_unique_names(names, proc->nsyms)) != TROUPE_OK) {
        troupe_free(names);
        return st;
    }
    s_cloc_t loc;
    s_cloc_enter(&loc);
    s_pctx_t c = {{NULL, 0, 0, false}, names, proc->nsyms, TROUPE_OK};
    s_sb_t *sb = &c.sb;
    s_sb_printf(sb, "(proc ");
    s_sb_put(sb, proc->name);
    s_sb_put(sb, "\n  (nodes");
    for (size_t i = 0; i < proc->nnodes; i++) {
        s_sb_indent(sb, 4);
        s_print_node_decl(sb, proc->nodes[i]);
    }
    s_sb_put(sb, ")\n  (symbols");
    for (int32_t i = 0; i < proc->nsyms; i++) {
        s_sb_indent(sb, 4);
        if (proc->syms[i].is_static)
            s_sb_printf(sb, "(static %" PRId32 " %s %" PRId64 ")", i, names[i],
                        proc->syms[i].static_range);
        else
            s_sb_printf(sb, "(sym %" PRId32 " %s)", i, names[i]);
    }
    s_sb_put(sb, ")\n  (body");
    s_sb_indent(sb, 4);
    s_print_stmt(&c, proc->body, 4, 0);
    s_sb_put(sb, "))\n");
    s_cloc_leave(&loc);
    troupe_free(names);
    if (c.st != TROUPE_OK) {
        troupe_free(sb->buf);
        return c.st;
    }
    if (sb->oom) {
        troupe_free(sb->buf);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing procedure %s",
                             proc->name);
    }
    *out = sb->buf;
    return TROUPE_OK;
}

/* ---- low-level parser --------------------------------------------------------------------------
 */

static troupe_status_t s_ll_status(s_parser_t *p, const void *built)
{
    if (built != NULL)
        return TROUPE_OK;
    if (troupe_ll_proc_status(p->proc) == TROUPE_RESOURCE_EXHAUSTED)
        return s_oom();
    return troupe__error(troupe_ll_proc_status(p->proc) ? troupe_ll_proc_status(p->proc)
                                                        : TROUPE_INTERNAL,
                         "building the procedure failed");
}

static bool s_scope_open(const s_parser_t *p, int32_t id)
{
    for (size_t i = 0; i < p->nscopes; i++)
        if (p->scopes[i] == id)
            return true;
    return false;
}

static troupe_status_t s_scope_id(s_parser_t *p, bool must_be_open, int32_t *out)
{
    int64_t id = 0;
    int line = p->tline, col = p->tcol;
    TROUPE_RETURN_IF_ERROR(s_int(p, "a scope id (an int32)", INT32_MIN, INT32_MAX, &id));
    if (must_be_open && !s_scope_open(p, (int32_t)id))
        return s_err_at(line, col, "expected the id of an enclosing local_scope, found %" PRId64,
                        id);
    *out = (int32_t)id;
    return TROUPE_OK;
}

static troupe_status_t s_parse_stmt(s_parser_t *p, troupe_ll_t **out);

/* Reads the head atom of a form after its '(' into buf (empty when not an atom). */
static void s_head(const s_parser_t *p, char *buf, size_t cap)
{
    if (!s_atom_copy(p, buf, cap))
        buf[0] = '\0';
}

static troupe_status_t s_parse_sc(s_parser_t *p, troupe_sc_t **out)
{
    troupe_ll_proc_t *proc = p->proc;
    *out = NULL;
    if (p->tk == S_TK_ATOM) {
        int64_t bits = 0;
        double v;
        if (s_atom_bits(p, &bits)) {
            *out = troupe_sc_constant_bits(proc, bits);
        } else if (s_atom_number(p, &v)) {
            *out = troupe_sc_constant(proc, v);
        } else {
            return s_expected(p, "a scalar (number, #x bits or a form)");
        }
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_next(p);
    }
    TROUPE_RETURN_IF_ERROR(s_lp(p, "a scalar (number, #x bits or a form)"));
    char head[48];
    s_head(p, head, sizeof head);
    if (strcmp(head, "f64") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int64_t bits = 0;
        if (!s_atom_bits(p, &bits))
            return s_expected(p, "a bit pattern #xHH...");
        TROUPE_RETURN_IF_ERROR(s_next(p));
        *out = troupe_sc_constant(proc, s_bits_double((uint64_t)bits));
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_rp(p, "f64");
    }
    if (strcmp(head, "get") == 0 || strcmp(head, "get_merge_buffer") == 0) {
        bool merge = head[3] != '\0';
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        *out = merge ? troupe_sc_get_merge_buffer(proc, tn, idcs) : troupe_sc_get(proc, tn, idcs);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_rp(p, head);
    }
    if (strcmp(head, "get_local") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t id = 0;
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, true, &id));
        *out = troupe_sc_get_local(proc, id);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_rp(p, "get_local");
    }
    if (strcmp(head, "local_scope") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t id = 0;
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, false, &id));
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        if (p->nscopes == p->scopes_cap) {
            size_t cap = p->scopes_cap ? p->scopes_cap * 2 : 8;
            int32_t *s = troupe_realloc(p->scopes, cap * sizeof *s);
            if (s == NULL)
                return s_oom();
            p->scopes = s;
            p->scopes_cap = cap;
        }
        p->scopes[p->nscopes++] = id;
        troupe_ll_t *body = NULL;
        troupe_status_t st = s_parse_stmt(p, &body);
        p->nscopes--;
        TROUPE_RETURN_IF_ERROR(st);
        *out = troupe_sc_local_scope(proc, id, tn, body, idcs);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_rp(p, "local_scope");
    }
    if (strcmp(head, "embed") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_axis_index_t idx;
        TROUPE_RETURN_IF_ERROR(s_parse_index(p, &idx));
        *out = troupe_sc_embed_index(proc, idx);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return s_rp(p, "embed");
    }
    troupe_ternop_t top;
    troupe_binop_t bop;
    troupe_unop_t uop;
    int arity = 0, op = 0;
    troupe_sc_kind_t kind = TROUPE_SC_UNOP;
    if (head[0] != '\0' && troupe_ternop_of_string(head, &top) == TROUPE_OK) {
        arity = 3;
        op = (int)top;
        kind = TROUPE_SC_TERNOP;
    } else if (head[0] != '\0' && troupe_binop_of_string(head, &bop) == TROUPE_OK) {
        arity = 2;
        op = (int)bop;
        kind = TROUPE_SC_BINOP;
    } else if (head[0] != '\0' && troupe_unop_of_string(head, &uop) == TROUPE_OK) {
        arity = 1;
        op = (int)uop;
        kind = TROUPE_SC_UNOP;
    } else {
        return s_expected(p, "a scalar form (get get_merge_buffer get_local local_scope embed "
                             "f64 or an operation name of ir/ops.h)");
    }
    TROUPE_RETURN_IF_ERROR(s_next(p));
    troupe_sc_t *args[3] = {NULL, NULL, NULL};
    for (int i = 0; i < arity; i++) {
        if (p->tk == S_TK_RP) {
            char what[96];
            snprintf(what, sizeof what, "argument %d of %s (it takes %d)", i + 1, head, arity);
            return s_expected(p, what);
        }
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &args[i]));
    }
    if (kind == TROUPE_SC_TERNOP)
        *out = troupe_sc_ternop(proc, (troupe_ternop_t)op, args[0], args[1], args[2]);
    else if (kind == TROUPE_SC_BINOP)
        *out = troupe_sc_binop(proc, (troupe_binop_t)op, args[0], args[1]);
    else
        *out = troupe_sc_unop(proc, (troupe_unop_t)op, args[0]);
    TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
    char closing[80];
    snprintf(closing, sizeof closing, "%s (it takes %d argument%s)", head, arity,
             arity > 1 ? "s" : "");
    return s_rp(p, closing);
}

static troupe_status_t s_parse_seq(s_parser_t *p, troupe_ll_t **out)
{
    troupe_ll_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    while (p->tk != S_TK_RP) {
        if (n == cap) {
            size_t c = cap ? cap * 2 : 8;
            troupe_ll_t **it = troupe_realloc(items, c * sizeof *it);
            if (it == NULL) {
                st = s_oom();
                goto done;
            }
            items = it;
            cap = c;
        }
        if ((st = s_parse_stmt(p, &items[n])) != TROUPE_OK)
            goto done;
        n++;
    }
    *out = troupe_ll_seq(p->proc, n, items);
    st = s_ll_status(p, *out);
done:
    troupe_free(items);
    return st;
}

static troupe_status_t s_parse_stmt(s_parser_t *p, troupe_ll_t **out)
{
    troupe_ll_proc_t *proc = p->proc;
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(' starting a statement"));
    char head[32];
    s_head(p, head, sizeof head);
    if (strcmp(head, "noop") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        *out = troupe_ll_noop(proc);
    } else if (strcmp(head, "comment") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        if (p->tk != S_TK_STR)
            return s_expected(p, "a string");
        *out = troupe_ll_comment(proc, p->str);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        TROUPE_RETURN_IF_ERROR(s_next(p));
    } else if (strcmp(head, "seq") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_parse_seq(p, out));
    } else if (strcmp(head, "for") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t sym = 0;
        int line = p->tline, col = p->tcol;
        TROUPE_RETURN_IF_ERROR(s_sym_ref(p, "a loop symbol", &sym));
        if (proc->syms[sym].is_static)
            return s_err_at(line, col, "expected a loop symbol, found static symbol '%s'",
                            proc->syms[sym].name);
        int64_t from = 0, to = 0;
        TROUPE_RETURN_IF_ERROR(s_int(p, "the first value (integer)", INT64_MIN, INT64_MAX, &from));
        TROUPE_RETURN_IF_ERROR(s_int(p, "the last value (integer)", INT64_MIN, INT64_MAX, &to));
        bool trace_it = true;
        if (s_is(p, "untraced")) {
            trace_it = false;
            TROUPE_RETURN_IF_ERROR(s_next(p));
        }
        troupe_ll_t *body;
        TROUPE_RETURN_IF_ERROR(s_parse_stmt(p, &body));
        *out = troupe_ll_for(proc, sym, from, to, body, trace_it);
    } else if (strcmp(head, "zero_out") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_tnode_t *tn;
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
        *out = troupe_ll_zero_out(proc, tn);
    } else if (strcmp(head, "set") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        troupe_sc_t *v;
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set(proc, tn, idcs, v);
    } else if (strcmp(head, "set_from_vec") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        troupe_sc_t *v;
        int64_t length = 0;
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        TROUPE_RETURN_IF_ERROR(s_int(p, "a length (an int)", INT32_MIN, INT32_MAX, &length));
        char opname[48];
        troupe_vec_unop_t op;
        if (!s_atom_copy(p, opname, sizeof opname) ||
            troupe_vec_unop_of_string(opname, &op) != TROUPE_OK)
            return s_expected(p, "a vector operation name (uint4x32_to_prec_uniform)");
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set_from_vec(proc, tn, idcs, (int)length, op, v);
    } else if (strcmp(head, "set_local") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t id = 0;
        troupe_sc_t *v;
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, true, &id));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set_local(proc, id, v);
    } else {
        return s_expected(p, "a statement (noop comment seq for zero_out set set_from_vec "
                             "set_local)");
    }
    TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
    return s_rp(p, head);
}

/* Records symbol `id` (named `name`, a stable string) in the parser's name view and table. */
static troupe_status_t s_declare_sym(s_parser_t *p, int32_t id, const char *name)
{
    const char **view = troupe_realloc((void *)p->sym_names, (size_t)(id + 1) * sizeof *view);
    if (view == NULL)
        return s_oom();
    view[id] = name;
    p->sym_names = view;
    p->nsyms = id + 1;
    if (!s_stab_add(&p->syms, p->sym_names, id))
        return s_oom();
    return TROUPE_OK;
}

/* After '(' and the keyword sym/static: "ID NAME" with ID == expected; copies the name. */
static troupe_status_t s_sym_decl_head(s_parser_t *p, int32_t expected, char *name, size_t cap)
{
    char what[64];
    snprintf(what, sizeof what, "symbol id %" PRId32 " (ids run 0, 1, ...)", expected);
    int64_t id = 0;
    TROUPE_RETURN_IF_ERROR(s_int(p, what, expected, expected, &id));
    if (!s_atom_ident(p))
        return s_expected(p, "a symbol name ([A-Za-z_][A-Za-z0-9_]*)");
    if (s_stab_find(&p->syms, p->sym_names, p->src + p->tstart, p->tlen) >= 0) {
        char found[64];
        s_describe(p, found, sizeof found);
        return s_err_at(p->tline, p->tcol,
                        "expected a new symbol name, found %s (declared "
                        "twice)",
                        found);
    }
    s_atom_copy(p, name, cap);
    return s_next(p);
}

/* (symbols SYM*) for a procedure. */
static troupe_status_t s_parse_ll_symbols(s_parser_t *p)
{
    troupe_ll_proc_t *proc = p->proc;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(symbols'"));
    TROUPE_RETURN_IF_ERROR(s_keyword(p, "symbols"));
    while (p->tk == S_TK_LP) {
        TROUPE_RETURN_IF_ERROR(s_lp(p, "'(sym' or '(static'"));
        bool is_static = s_is(p, "static");
        if (!is_static && !s_is(p, "sym"))
            return s_expected(p, "'sym' or 'static'");
        TROUPE_RETURN_IF_ERROR(s_next(p));
        char name[TROUPE_TEXT_MAX_ATOM + 1];
        TROUPE_RETURN_IF_ERROR(s_sym_decl_head(p, proc->nsyms, name, sizeof name));
        int32_t sid = 0;
        if (is_static) {
            int64_t range = 0;
            TROUPE_RETURN_IF_ERROR(s_int(p, "a range >= 0", 0, INT64_MAX, &range));
            sid = troupe_ll_proc_add_static_symbol(proc, name, range);
        } else {
            sid = troupe_ll_proc_add_symbol(proc, name);
        }
        if (sid < 0)
            return s_oom();
        TROUPE_RETURN_IF_ERROR(s_declare_sym(p, sid, proc->syms[sid].name));
        TROUPE_RETURN_IF_ERROR(s_rp(p, is_static ? "static" : "sym"));
    }
    return s_rp(p, "the symbol list");
}

static troupe_status_t s_parser_init(s_parser_t *p, const char *text, size_t len)
{
    memset(p, 0, sizeof *p);
    p->src = text;
    p->len = len;
    p->line = 1;
    p->col = 1;
    if (len > TROUPE_TEXT_MAX_BYTES)
        return s_err_at(1, 1, "expected at most %zu bytes of input, found %zu",
                        TROUPE_TEXT_MAX_BYTES, len);
    return s_next(p);
}

static void s_parser_fini(s_parser_t *p)
{
    troupe_free((void *)p->sym_names);
    p->sym_names = NULL;
    s_parser_free(p);
}

troupe_status_t troupe_text_parse_proc_n(const char *text, size_t len, troupe_ll_proc_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_proc: out is NULL");
    *out = NULL;
    if (text == NULL && len > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_proc: text is NULL");
    s_parser_t p;
    s_cloc_t loc;
    s_cloc_enter(&loc);
    troupe_status_t st = s_parser_init(&p, text ? text : "", len);
    if (st != TROUPE_OK)
        goto done;
    if ((st = s_lp(&p, "'(proc'")) != TROUPE_OK || (st = s_keyword(&p, "proc")) != TROUPE_OK)
        goto done;
    char name[TROUPE_TEXT_MAX_ATOM + 1];
    if (!s_atom_ident(&p)) {
        st = s_expected(&p, "a procedure name ([A-Za-z_][A-Za-z0-9_]*)");
        goto done;
    }
    s_atom_copy(&p, name, sizeof name);
    if ((st = troupe_ll_proc_new(name, &p.proc)) != TROUPE_OK)
        goto done;
    if ((st = s_next(&p)) != TROUPE_OK || (st = s_parse_nodes(&p)) != TROUPE_OK)
        goto done;
    for (size_t i = 0; i < p.nodes.count; i++)
        if (troupe_ll_proc_add_node(p.proc, p.nodes.nodes[i]) < 0) {
            st = s_oom();
            goto done;
        }
    if ((st = s_parse_ll_symbols(&p)) != TROUPE_OK)
        goto done;
    if ((st = s_lp(&p, "'(body'")) != TROUPE_OK || (st = s_keyword(&p, "body")) != TROUPE_OK)
        goto done;
    troupe_ll_t *body = NULL;
    if ((st = s_parse_stmt(&p, &body)) != TROUPE_OK)
        goto done;
    p.proc->body = body;
    if ((st = s_rp(&p, "the body")) != TROUPE_OK || (st = s_rp(&p, "the procedure")) != TROUPE_OK)
        goto done;
    if (p.tk != S_TK_EOF) {
        st = s_expected(&p, "end of input");
        goto done;
    }
    *out = p.proc;
    p.proc = NULL;
done:
    troupe_ll_proc_destroy(&p.proc);
    s_parser_fini(&p);
    s_cloc_leave(&loc);
    return st;
}

troupe_status_t troupe_text_parse_proc(const char *text, troupe_ll_proc_t **out)
{
    if (text == NULL) {
        if (out != NULL)
            *out = NULL;
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_proc: text is NULL");
    }
    return troupe_text_parse_proc_n(text, strlen(text), out);
}

/* ---- assignment printer ---------------------------------------------------------------------- */

static void s_print_buffer(s_sb_t *sb, const troupe_asgn_buffer_t *b)
{
    if (b->is_merge_buffer)
        s_sb_printf(sb, "(merge %" PRId32 ")", b->tn->id);
    else
        s_sb_printf(sb, "%" PRId32, b->tn->id);
}

static void s_print_asgn(s_pctx_t *c, const troupe_asgn_t *a, int indent, int depth)
{
    s_sb_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (a == NULL)
        return s_bad(c, "missing assignment");
    if (depth > S_MAX_TREE_DEPTH)
        return s_bad(c, "tree nested deeper than the text form allows");
    switch (a->kind) {
    case TROUPE_ASGN_NOOP:
        s_sb_put(sb, "(noop)");
        return;
    case TROUPE_ASGN_SEQ:
        if (a->u.seq.count > 0 && a->u.seq.items == NULL)
            return s_bad(c, "seq without items");
        s_sb_put(sb, "(seq");
        for (size_t i = 0; i < a->u.seq.count; i++) {
            s_sb_indent(sb, indent + 2);
            s_print_asgn(c, a->u.seq.items[i], indent + 2, depth + 1);
        }
        s_sb_put(sb, ")");
        return;
    case TROUPE_ASGN_BLOCK_COMMENT:
        s_sb_put(sb, "(block_comment ");
        s_sb_quoted(sb, a->u.block_comment.text ? a->u.block_comment.text : "");
        s_sb_indent(sb, indent + 2);
        s_print_asgn(c, a->u.block_comment.body, indent + 2, depth + 1);
        s_sb_put(sb, ")");
        return;
    case TROUPE_ASGN_ACCUM_OP: {
        int n = (int)a->u.accum_op.rhs_kind;
        const char *name = NULL;
        if (a->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_UNOP &&
            troupe_unop_is_valid((troupe_unop_t)a->u.accum_op.op))
            name = troupe_unop_name((troupe_unop_t)a->u.accum_op.op);
        else if (a->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_BINOP &&
                 troupe_binop_is_valid((troupe_binop_t)a->u.accum_op.op))
            name = troupe_binop_name((troupe_binop_t)a->u.accum_op.op);
        else if (a->u.accum_op.rhs_kind == TROUPE_ASGN_RHS_TERNOP &&
                 troupe_ternop_is_valid((troupe_ternop_t)a->u.accum_op.op))
            name = troupe_ternop_name((troupe_ternop_t)a->u.accum_op.op);
        if (name == NULL || a->u.accum_op.lhs == NULL || a->u.accum_op.proj == NULL ||
            a->u.accum_op.proj->spec == NULL || !troupe_binop_is_valid(a->u.accum_op.accum))
            return s_bad(c, "malformed accum_op");
        for (int i = 0; i < n; i++)
            if (a->u.accum_op.rhs[i].tn == NULL)
                return s_bad(c, "accum_op without an operand");
        s_sb_printf(sb, "(accum_op %" PRId32 " %s %s (", a->u.accum_op.lhs->id,
                    troupe_binop_name(a->u.accum_op.accum), name);
        for (int i = 0; i < n; i++) {
            if (i > 0)
                s_sb_put(sb, " ");
            s_print_buffer(sb, &a->u.accum_op.rhs[i]);
        }
        s_sb_put(sb, ") ");
        s_sb_quoted(sb, a->u.accum_op.proj->spec);
        if (a->u.accum_op.initialize_neutral)
            s_sb_put(sb, " initialize_neutral");
        s_sb_put(sb, ")");
        return;
    }
    case TROUPE_ASGN_SET_VEC_UNOP:
        if (a->u.set_vec_unop.lhs == NULL || a->u.set_vec_unop.rhs.tn == NULL ||
            a->u.set_vec_unop.proj == NULL || a->u.set_vec_unop.proj->spec == NULL ||
            !troupe_vec_unop_is_valid(a->u.set_vec_unop.op))
            return s_bad(c, "malformed set_vec_unop");
        s_sb_printf(sb, "(set_vec_unop %" PRId32 " %s ", a->u.set_vec_unop.lhs->id,
                    troupe_vec_unop_name(a->u.set_vec_unop.op));
        s_print_buffer(sb, &a->u.set_vec_unop.rhs);
        s_sb_put(sb, " ");
        s_sb_quoted(sb, a->u.set_vec_unop.proj->spec);
        s_sb_put(sb, ")");
        return;
    case TROUPE_ASGN_FETCH: {
        if (a->u.fetch.tn == NULL)
            return s_bad(c, "fetch without a node");
        s_sb_printf(sb, "(fetch %" PRId32 " ", a->u.fetch.tn->id);
        switch (a->u.fetch.kind) {
        case TROUPE_FETCH_CONSTANT:
            s_sb_put(sb, "constant ");
            s_sb_double(sb, a->u.fetch.constant);
            break;
        case TROUPE_FETCH_CONSTANT_BITS:
            s_sb_put(sb, "constant_bits ");
            s_sb_bits(sb, a->u.fetch.constant_bits);
            break;
        case TROUPE_FETCH_CONSTANT_FILL:
            if (a->u.fetch.count > 0 && a->u.fetch.values == NULL)
                return s_bad(c, "constant_fill without values");
            s_sb_put(sb, "constant_fill");
            for (size_t i = 0; i < a->u.fetch.count; i++) {
                s_sb_put(sb, " ");
                s_sb_double(sb, a->u.fetch.values[i]);
            }
            break;
        case TROUPE_FETCH_RANGE_OVER_OFFSETS:
            s_sb_put(sb, "range_over_offsets");
            break;
        case TROUPE_FETCH_SLICE:
            if (a->u.fetch.sliced == NULL || a->u.fetch.static_sym < 0 ||
                a->u.fetch.static_sym >= c->nsyms)
                return s_bad(c, "malformed slice");
            s_sb_printf(sb, "slice %s %" PRId32, c->names[a->u.fetch.static_sym],
                        a->u.fetch.sliced->id);
            break;
        case TROUPE_FETCH_EMBED_SYMBOL:
            if (a->u.fetch.static_sym < 0 || a->u.fetch.static_sym >= c->nsyms)
                return s_bad(c, "malformed embed_symbol");
            s_sb_printf(sb, "embed_symbol %s", c->names[a->u.fetch.static_sym]);
            break;
        case TROUPE_FETCH_EMBED_SELF_ID:
            s_sb_put(sb, "embed_self_id");
            break;
        default:
            return s_bad(c, "unknown fetch kind");
        }
        s_sb_put(sb, ")");
        return;
    }
    }
    s_bad(c, "unknown assignment kind");
}

troupe_status_t troupe_text_print_comp(const troupe_asgn_comp_t *comp, char **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_print_comp: out is NULL");
    *out = NULL;
    if (comp == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_print_comp: comp is NULL");
    troupe_status_t st = TROUPE_OK;
    const char **names = troupe_calloc((size_t)(comp->nsyms > 0 ? comp->nsyms : 1), sizeof *names);
    if (names == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing");
    for (int32_t i = 0; i < comp->nsyms; i++)
        names[i] = comp->syms[i].name;
    if ((st = s_check_unique_names(names, comp->nsyms)) != TROUPE_OK) {
        troupe_free(names);
        return st;
    }
    s_cloc_t loc;
    s_cloc_enter(&loc);
    s_pctx_t c = {{NULL, 0, 0, false}, names, comp->nsyms, TROUPE_OK};
    s_sb_t *sb = &c.sb;
    s_sb_put(sb, "(comp\n  (nodes");
    /* The union of the mentioned and the embedded nodes, both sorted by id. */
    size_t i = 0, j = 0;
    while (i < comp->nnodes || j < comp->nembedded) {
        const troupe_tnode_t *tn;
        if (j >= comp->nembedded ||
            (i < comp->nnodes && comp->nodes[i]->id <= comp->embedded[j]->id)) {
            tn = comp->nodes[i++];
            if (j < comp->nembedded && comp->embedded[j]->id == tn->id)
                j++;
        } else {
            tn = comp->embedded[j++];
        }
        s_sb_indent(sb, 4);
        s_print_node_decl(sb, tn);
    }
    s_sb_put(sb, ")\n  (symbols");
    for (int32_t k = 0; k < comp->nsyms; k++) {
        s_sb_indent(sb, 4);
        s_sb_printf(sb, "(static %" PRId32 " %s %" PRId64 ")", k, names[k], comp->syms[k].range);
    }
    s_sb_put(sb, ")\n  (embedded");
    for (size_t k = 0; k < comp->nembedded; k++)
        s_sb_printf(sb, " %" PRId32, comp->embedded[k]->id);
    s_sb_put(sb, ")\n  (body");
    s_sb_indent(sb, 4);
    s_print_asgn(&c, comp->root, 4, 0);
    s_sb_put(sb, "))\n");
    s_cloc_leave(&loc);
    troupe_free(names);
    if (c.st != TROUPE_OK) {
        troupe_free(sb->buf);
        return c.st;
    }
    if (sb->oom) {
        troupe_free(sb->buf);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing a comp");
    }
    *out = sb->buf;
    return TROUPE_OK;
}

/* ---- assignment parser ----------------------------------------------------------------------- */

/* A builder failure at (line, col): out of memory stays; anything else becomes a positioned
 * INVALID_ARGUMENT carrying the builder's message. */
static troupe_status_t s_builder_err(troupe_status_t st, int line, int col)
{
    char msg[640];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    if (st == TROUPE_RESOURCE_EXHAUSTED)
        return troupe__error(st, "%d:%d: %s", line, col, msg);
    return s_err_at(line, col, "%s", msg);
}

/* BUF: INT | (merge INT) */
static troupe_status_t s_parse_buffer(s_parser_t *p, troupe_asgn_buffer_t *b)
{
    b->is_merge_buffer = false;
    if (p->tk == S_TK_LP) {
        TROUPE_RETURN_IF_ERROR(s_lp(p, "an operand"));
        TROUPE_RETURN_IF_ERROR(s_keyword(p, "merge"));
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &b->tn));
        b->is_merge_buffer = true;
        return s_rp(p, "merge");
    }
    return s_node_ref(p, &b->tn);
}

/* A quoted string copied to a new buffer (troupe_free). */
static troupe_status_t s_string_copy(s_parser_t *p, const char *what, char **out)
{
    if (p->tk != S_TK_STR)
        return s_expected(p, what);
    *out = troupe_strdup(p->str);
    if (*out == NULL)
        return s_oom();
    troupe_status_t st = s_next(p);
    if (st != TROUPE_OK) {
        troupe_free(*out);
        *out = NULL;
    }
    return st;
}

static troupe_status_t s_parse_asgn(s_parser_t *p, troupe_asgn_t **out);

static troupe_status_t s_parse_asgn_seq(s_parser_t *p, troupe_asgn_t **out)
{
    troupe_asgn_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    int line = p->tline, col = p->tcol;
    while (p->tk != S_TK_RP) {
        if (n == cap) {
            size_t c = cap ? cap * 2 : 8;
            troupe_asgn_t **it = troupe_realloc(items, c * sizeof *it);
            if (it == NULL) {
                st = s_oom();
                goto done;
            }
            items = it;
            cap = c;
        }
        if ((st = s_parse_asgn(p, &items[n])) != TROUPE_OK)
            goto done;
        n++;
    }
    if ((st = troupe_asgn_seq(p->comp, n, items, out)) != TROUPE_OK)
        st = s_builder_err(st, line, col);
done:
    troupe_free(items);
    return st;
}

static troupe_status_t s_parse_accum_op(s_parser_t *p, int line, int col, troupe_asgn_t **out)
{
    troupe_tnode_t *lhs;
    TROUPE_RETURN_IF_ERROR(s_node_ref(p, &lhs));
    char name[48];
    troupe_binop_t accum;
    if (!s_atom_copy(p, name, sizeof name) || troupe_binop_of_string(name, &accum) != TROUPE_OK)
        return s_expected(p, "an accumulator (a binop name: add, max, arg2, ...)");
    TROUPE_RETURN_IF_ERROR(s_next(p));
    char opname[48];
    int op_line = p->tline, op_col = p->tcol;
    if (!s_atom_copy(p, opname, sizeof opname))
        return s_expected(p, "an operation name");
    TROUPE_RETURN_IF_ERROR(s_next(p));
    troupe_asgn_buffer_t rhs[3];
    int n = 0;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(' starting the operand list"));
    while (p->tk != S_TK_RP) {
        if (n == 3)
            return s_expected(p, "')' (at most 3 operands)");
        TROUPE_RETURN_IF_ERROR(s_parse_buffer(p, &rhs[n]));
        n++;
    }
    if (n == 0)
        return s_expected(p, "an operand (node id or (merge id))");
    TROUPE_RETURN_IF_ERROR(s_rp(p, "the operand list"));
    int op = 0;
    troupe_status_t st;
    if (n == 1) {
        troupe_unop_t u;
        st = troupe_unop_of_string(opname, &u);
        op = (int)u;
    } else if (n == 2) {
        troupe_binop_t b;
        st = troupe_binop_of_string(opname, &b);
        op = (int)b;
    } else {
        troupe_ternop_t t;
        st = troupe_ternop_of_string(opname, &t);
        op = (int)t;
    }
    if (st != TROUPE_OK)
        return s_err_at(op_line, op_col, "expected a %s name for %d operand%s, found '%s'",
                        n == 1   ? "unop"
                        : n == 2 ? "binop"
                                 : "ternop",
                        n, n > 1 ? "s" : "", opname);
    char *spec = NULL;
    TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a projection spec string", &spec));
    bool init = false;
    if (s_is(p, "initialize_neutral")) {
        init = true;
        if ((st = s_next(p)) != TROUPE_OK) {
            troupe_free(spec);
            return st;
        }
    }
    if (n == 1)
        st =
            troupe_asgn_accum_unop(p->comp, init, accum, lhs, (troupe_unop_t)op, rhs[0], spec, out);
    else if (n == 2)
        st = troupe_asgn_accum_binop(p->comp, init, accum, lhs, (troupe_binop_t)op, rhs[0], rhs[1],
                                     spec, out);
    else
        st = troupe_asgn_accum_ternop(p->comp, init, accum, lhs, (troupe_ternop_t)op, rhs[0],
                                      rhs[1], rhs[2], spec, out);
    troupe_free(spec);
    if (st != TROUPE_OK)
        return s_builder_err(st, line, col);
    return TROUPE_OK;
}

/* Static symbol by name in the comp. */
static troupe_status_t s_static_ref(s_parser_t *p, int32_t *out)
{
    return s_sym_ref(p, "a static symbol name", out);
}

static troupe_status_t s_parse_fetch(s_parser_t *p, int line, int col, troupe_asgn_t **out)
{
    troupe_asgn_comp_t *comp = p->comp;
    troupe_tnode_t *tn;
    troupe_status_t st;
    TROUPE_RETURN_IF_ERROR(s_node_ref(p, &tn));
    char kind[32];
    if (!s_atom_copy(p, kind, sizeof kind))
        kind[0] = '\0';
    if (strcmp(kind, "constant") == 0) {
        double v;
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_value(p, "a constant", &v));
        st = troupe_asgn_fetch_constant(comp, tn, v, out);
    } else if (strcmp(kind, "constant_bits") == 0) {
        int64_t bits = 0;
        TROUPE_RETURN_IF_ERROR(s_next(p));
        if (!s_atom_bits(p, &bits))
            return s_expected(p, "a bit pattern #xHH...");
        TROUPE_RETURN_IF_ERROR(s_next(p));
        st = troupe_asgn_fetch_constant_bits(comp, tn, bits, out);
    } else if (strcmp(kind, "constant_fill") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        double *vals = NULL;
        size_t n = 0, cap = 0;
        st = TROUPE_OK;
        while (p->tk != S_TK_RP && st == TROUPE_OK) {
            if (n == cap) {
                size_t c = cap ? cap * 2 : 16;
                double *v = troupe_realloc(vals, c * sizeof *v);
                if (v == NULL) {
                    st = s_oom();
                    break;
                }
                vals = v;
                cap = c;
            }
            st = s_value(p, "a value or ')'", &vals[n]);
            n++;
        }
        if (st == TROUPE_OK)
            st = troupe_asgn_fetch_constant_fill(comp, tn, vals, n, out);
        else {
            troupe_free(vals);
            return st;
        }
        troupe_free(vals);
    } else if (strcmp(kind, "range_over_offsets") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        st = troupe_asgn_fetch_range_over_offsets(comp, tn, out);
    } else if (strcmp(kind, "slice") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t sym = 0;
        troupe_tnode_t *sliced;
        TROUPE_RETURN_IF_ERROR(s_static_ref(p, &sym));
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &sliced));
        st = troupe_asgn_fetch_slice(comp, tn, sym, sliced, out);
    } else if (strcmp(kind, "embed_symbol") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        int32_t sym = 0;
        TROUPE_RETURN_IF_ERROR(s_static_ref(p, &sym));
        st = troupe_asgn_fetch_embed_symbol(comp, tn, sym, out);
    } else if (strcmp(kind, "embed_self_id") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        st = troupe_asgn_fetch_embed_self_id(comp, tn, out);
    } else {
        return s_expected(p, "a fetch kind (constant constant_bits constant_fill "
                             "range_over_offsets slice embed_symbol embed_self_id)");
    }
    if (st != TROUPE_OK)
        return s_builder_err(st, line, col);
    return TROUPE_OK;
}

static troupe_status_t s_parse_asgn(s_parser_t *p, troupe_asgn_t **out)
{
    troupe_asgn_comp_t *comp = p->comp;
    *out = NULL;
    int line = p->tline, col = p->tcol;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(' starting an assignment"));
    char head[32];
    s_head(p, head, sizeof head);
    troupe_status_t st = TROUPE_OK;
    if (strcmp(head, "noop") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        st = troupe_asgn_noop(comp, out);
        if (st != TROUPE_OK)
            return s_builder_err(st, line, col);
    } else if (strcmp(head, "seq") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_parse_asgn_seq(p, out));
    } else if (strcmp(head, "block_comment") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        char *text = NULL;
        troupe_asgn_t *body = NULL;
        TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a string", &text));
        st = s_parse_asgn(p, &body);
        if (st == TROUPE_OK && (st = troupe_asgn_block_comment(comp, text, body, out)) != TROUPE_OK)
            st = s_builder_err(st, line, col);
        troupe_free(text);
        TROUPE_RETURN_IF_ERROR(st);
    } else if (strcmp(head, "accum_op") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_parse_accum_op(p, line, col, out));
    } else if (strcmp(head, "set_vec_unop") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_tnode_t *lhs;
        TROUPE_RETURN_IF_ERROR(s_node_ref(p, &lhs));
        char opname[48];
        troupe_vec_unop_t op;
        if (!s_atom_copy(p, opname, sizeof opname) ||
            troupe_vec_unop_of_string(opname, &op) != TROUPE_OK)
            return s_expected(p, "a vector operation name (uint4x32_to_prec_uniform)");
        TROUPE_RETURN_IF_ERROR(s_next(p));
        troupe_asgn_buffer_t rhs;
        TROUPE_RETURN_IF_ERROR(s_parse_buffer(p, &rhs));
        char *spec = NULL;
        TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a projection spec string", &spec));
        st = troupe_asgn_set_vec_unop(comp, op, lhs, rhs, spec, out);
        troupe_free(spec);
        if (st != TROUPE_OK)
            return s_builder_err(st, line, col);
    } else if (strcmp(head, "fetch") == 0) {
        TROUPE_RETURN_IF_ERROR(s_next(p));
        TROUPE_RETURN_IF_ERROR(s_parse_fetch(p, line, col, out));
    } else {
        return s_expected(p, "an assignment (noop seq block_comment accum_op set_vec_unop fetch)");
    }
    return s_rp(p, head);
}

/* (symbols (static ID NAME RANGE)*) for a comp. */
static troupe_status_t s_parse_comp_symbols(s_parser_t *p)
{
    troupe_asgn_comp_t *comp = p->comp;
    TROUPE_RETURN_IF_ERROR(s_lp(p, "'(symbols'"));
    TROUPE_RETURN_IF_ERROR(s_keyword(p, "symbols"));
    while (p->tk == S_TK_LP) {
        TROUPE_RETURN_IF_ERROR(s_lp(p, "'(static'"));
        TROUPE_RETURN_IF_ERROR(s_keyword(p, "static"));
        char name[TROUPE_TEXT_MAX_ATOM + 1];
        TROUPE_RETURN_IF_ERROR(s_sym_decl_head(p, comp->nsyms, name, sizeof name));
        int64_t range = 0;
        TROUPE_RETURN_IF_ERROR(s_int(p, "a range >= 0", 0, INT64_MAX, &range));
        int32_t sid = 0;
        troupe_status_t st = troupe_asgn_comp_add_static_symbol(comp, name, range, &sid);
        if (st != TROUPE_OK)
            return s_builder_err(st, p->tline, p->tcol);
        TROUPE_RETURN_IF_ERROR(s_declare_sym(p, sid, comp->syms[sid].name));
        TROUPE_RETURN_IF_ERROR(s_rp(p, "static"));
    }
    return s_rp(p, "the symbol list");
}

troupe_status_t troupe_text_parse_comp_n(const char *text, size_t len, troupe_asgn_comp_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_comp: out is NULL");
    *out = NULL;
    if (text == NULL && len > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_comp: text is NULL");
    s_parser_t p;
    s_cloc_t loc;
    s_cloc_enter(&loc);
    troupe_status_t st = s_parser_init(&p, text ? text : "", len);
    if (st != TROUPE_OK)
        goto done;
    if ((st = s_lp(&p, "'(comp'")) != TROUPE_OK || (st = s_keyword(&p, "comp")) != TROUPE_OK)
        goto done;
    if ((st = troupe_asgn_comp_new(&p.comp)) != TROUPE_OK)
        goto done;
    if ((st = s_parse_nodes(&p)) != TROUPE_OK || (st = s_parse_comp_symbols(&p)) != TROUPE_OK)
        goto done;
    if ((st = s_lp(&p, "'(embedded'")) != TROUPE_OK ||
        (st = s_keyword(&p, "embedded")) != TROUPE_OK)
        goto done;
    while (p.tk != S_TK_RP) {
        troupe_tnode_t *tn;
        int line = p.tline, col = p.tcol;
        if ((st = s_node_ref(&p, &tn)) != TROUPE_OK)
            goto done;
        if ((st = troupe_asgn_comp_add_embedded(p.comp, tn)) != TROUPE_OK) {
            st = s_builder_err(st, line, col);
            goto done;
        }
    }
    if ((st = s_rp(&p, "the embedded list")) != TROUPE_OK)
        goto done;
    if ((st = s_lp(&p, "'(body'")) != TROUPE_OK || (st = s_keyword(&p, "body")) != TROUPE_OK)
        goto done;
    troupe_asgn_t *root = NULL;
    if ((st = s_parse_asgn(&p, &root)) != TROUPE_OK)
        goto done;
    troupe_asgn_comp_set_root(p.comp, root);
    if ((st = s_rp(&p, "the body")) != TROUPE_OK || (st = s_rp(&p, "the comp")) != TROUPE_OK)
        goto done;
    if (p.tk != S_TK_EOF) {
        st = s_expected(&p, "end of input");
        goto done;
    }
    *out = p.comp;
    p.comp = NULL;
done:
    troupe_asgn_comp_destroy(&p.comp);
    s_parser_fini(&p);
    s_cloc_leave(&loc);
    return st;
}

troupe_status_t troupe_text_parse_comp(const char *text, troupe_asgn_comp_t **out)
{
    if (text == NULL) {
        if (out != NULL)
            *out = NULL;
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_comp: text is NULL");
    }
    return troupe_text_parse_comp_n(text, strlen(text), out);
}

/* ---- round-trip entry point (fuzzer and seed corpus) ------------------------------------------
 */

static troupe_status_t s_internal(const char *what, const char *detail)
{
    return troupe__error(TROUPE_INTERNAL, "text round trip broke: %s%s%s", what, detail ? ": " : "",
                         detail ? detail : "");
}

static bool s_procs_equal(const troupe_ll_proc_t *a, const troupe_ll_proc_t *b)
{
    if (strcmp(a->name, b->name) != 0 || a->nsyms != b->nsyms || a->nnodes != b->nnodes)
        return false;
    for (int32_t i = 0; i < a->nsyms; i++)
        if (strcmp(a->syms[i].name, b->syms[i].name) != 0 ||
            a->syms[i].is_static != b->syms[i].is_static ||
            a->syms[i].static_range != b->syms[i].static_range)
            return false;
    for (size_t i = 0; i < a->nnodes; i++)
        if (a->nodes[i] != b->nodes[i])
            return false;
    return troupe_ll_equal(a->body, b->body);
}

static bool s_comps_equal(const troupe_asgn_comp_t *a, const troupe_asgn_comp_t *b)
{
    if (a->nsyms != b->nsyms || a->nembedded != b->nembedded || a->nnodes != b->nnodes)
        return false;
    for (int32_t i = 0; i < a->nsyms; i++)
        if (strcmp(a->syms[i].name, b->syms[i].name) != 0 || a->syms[i].range != b->syms[i].range)
            return false;
    for (size_t i = 0; i < a->nembedded; i++)
        if (a->embedded[i] != b->embedded[i])
            return false;
    for (size_t i = 0; i < a->nnodes; i++)
        if (a->nodes[i] != b->nodes[i])
            return false;
    return troupe_asgn_equal(a->root, b->root);
}

/* A tree under a round trip: a procedure or a comp (the other pointer stays NULL), and the
 * messages of each step that can break. */
typedef enum s_fuzz_kind { S_FUZZ_PROC, S_FUZZ_COMP } s_fuzz_kind_t;

typedef struct s_fuzz_tree {
    troupe_ll_proc_t *proc;
    troupe_asgn_comp_t *comp;
} s_fuzz_tree_t;

static const struct s_fuzz_msgs {
    const char *parse_returned, *print_failed, *reparse_failed, *differs, *print_differs;
} s_fuzz_msgs[] = {
    [S_FUZZ_PROC] = {"a failed parse returned a procedure", "printing a parsed procedure failed",
                     "printed text does not parse", "the reparsed procedure differs",
                     "printing again gave different text"},
    [S_FUZZ_COMP] = {"a failed parse returned a comp", "printing a parsed comp failed",
                     "printed comp text does not parse", "the reparsed comp differs",
                     "printing the comp again gave different text"},
};

static troupe_status_t s_fuzz_parse(s_fuzz_kind_t k, const char *text, size_t len,
                                    s_fuzz_tree_t *out)
{
    return k == S_FUZZ_PROC ? troupe_text_parse_proc_n(text, len, &out->proc)
                            : troupe_text_parse_comp_n(text, len, &out->comp);
}

static troupe_status_t s_fuzz_print(s_fuzz_kind_t k, const s_fuzz_tree_t *t, char **out)
{
    return k == S_FUZZ_PROC ? troupe_text_print_proc(t->proc, out)
                            : troupe_text_print_comp(t->comp, out);
}

/* Parses, prints, parses the print, compares, prints again and compares the texts. A clean
 * rejection of the input is TROUPE_OK; out of memory is passed on; anything else that goes
 * wrong is TROUPE_INTERNAL. */
static troupe_status_t s_fuzz_round_trip(s_fuzz_kind_t k, const char *data, size_t size)
{
    const struct s_fuzz_msgs *m = &s_fuzz_msgs[k];
    s_fuzz_tree_t a = {NULL, NULL}, b = {NULL, NULL};
    char *t1 = NULL, *t2 = NULL;
    troupe_status_t st = s_fuzz_parse(k, data, size, &a);
    if (st != TROUPE_OK) {
        if (a.proc != NULL || a.comp != NULL)
            st = s_internal(m->parse_returned, NULL);
        else if (st != TROUPE_RESOURCE_EXHAUSTED)
            st = TROUPE_OK; /* rejected cleanly */
        goto done;
    }
    if ((st = s_fuzz_print(k, &a, &t1)) != TROUPE_OK) {
        st =
            st == TROUPE_RESOURCE_EXHAUSTED ? st : s_internal(m->print_failed, troupe_last_error());
        goto done;
    }
    if ((st = s_fuzz_parse(k, t1, strlen(t1), &b)) != TROUPE_OK) {
        st = st == TROUPE_RESOURCE_EXHAUSTED ? st
                                             : s_internal(m->reparse_failed, troupe_last_error());
        goto done;
    }
    if (k == S_FUZZ_PROC ? !s_procs_equal(a.proc, b.proc) : !s_comps_equal(a.comp, b.comp)) {
        st = s_internal(m->differs, NULL);
        goto done;
    }
    if ((st = s_fuzz_print(k, &b, &t2)) != TROUPE_OK)
        goto done;
    if (strcmp(t1, t2) != 0)
        st = s_internal(m->print_differs, NULL);
done:
    troupe_free(t1);
    troupe_free(t2);
    troupe_ll_proc_destroy(&a.proc);
    troupe_ll_proc_destroy(&b.proc);
    troupe_asgn_comp_destroy(&a.comp);
    troupe_asgn_comp_destroy(&b.comp);
    return st;
}

troupe_status_t troupe_text_fuzz_one(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    if (data == NULL)
        text = "";
    TROUPE_RETURN_IF_ERROR(s_fuzz_round_trip(S_FUZZ_PROC, text, data ? size : 0));
    return s_fuzz_round_trip(S_FUZZ_COMP, text, data ? size : 0);
}
