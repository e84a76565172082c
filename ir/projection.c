/* troupe — the projection parser: einsum specs checked against their operands (see
 * ir/projection.h). */
#define _POSIX_C_SOURCE 200809L
#include "ir/projection.h"

#include "ir/assign.h"
#include "ir/names_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum { S_RI_ITER, S_RI_FIXED, S_RI_STATIC, S_RI_AFFINE, S_RI_GATHER };

typedef struct s_ridx {
    int kind;
    int start, end; /* byte offsets of the index text, [start, end) */
    char letter;    /* ITER */
    bool mark;      /* ITER: written "^x", a broadcast the caller asked for */
    int64_t value;  /* FIXED value; AFFINE constant offset */
    int32_t sym;    /* STATIC */
    int nterms;     /* AFFINE */
    char letters[TROUPE_MAX_INDEX_TERMS];
    int64_t coeffs[TROUPE_MAX_INDEX_TERMS];
    int gnode;                         /* GATHER: 1-based gather node */
    int gn;                            /* GATHER: indices of the inner term */
    int gstart, gend;                  /* GATHER: the inner term's text, "[...]" */
    char gletters[TROUPE_MAX_DIMS];    /* GATHER: an iterator, or 0 for a fixed index */
    bool gmarks[TROUPE_MAX_DIMS];      /* GATHER: the iterator was written "^x" */
    int64_t gfixed[TROUPE_MAX_DIMS];   /* GATHER: the fixed index where gletters is 0 */
} s_ridx_t;

typedef struct s_rterm {
    int n;
    int start, end;
    s_ridx_t idx[TROUPE_MAX_DIMS];
} s_rterm_t;

typedef struct s_parser {
    const char *spec;
    const troupe_asgn_comp_t *comp;
    size_t pos;
    int ngather;
    bool in_lhs; /* parsing the lhs term: broadcast marks are allowed */
} s_parser_t;

#define S_MAX_NUMBER 1000000000000000LL

static bool s_is_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool s_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int s_letter_slot(char c)
{
    return c >= 'a' && c <= 'z' ? c - 'a' : c - 'A' + 26;
}

static void s_skip_blanks(s_parser_t *p)
{
    while (p->spec[p->pos] == ' ' || p->spec[p->pos] == '\t')
        p->pos++;
}

static troupe_status_t s_unexpected(const s_parser_t *p, size_t at)
{
    unsigned char c = (unsigned char)p->spec[at];
    if (c == '\0')
        return troupe__error(TROUPE_INVALID_ARGUMENT, "projection '%s' col %zu: unexpected end",
                             p->spec, at + 1);
    if (c < 0x20 || c >= 0x7f)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s' col %zu: unexpected byte 0x%02x", p->spec, at + 1, c);
    return troupe__error(TROUPE_INVALID_ARGUMENT, "projection '%s' col %zu: unexpected '%c'",
                         p->spec, at + 1, c);
}

static troupe_status_t s_number(s_parser_t *p, int64_t *out)
{
    size_t at = p->pos;
    int64_t v = 0;
    while (s_is_digit(p->spec[p->pos])) {
        v = v * 10 + (p->spec[p->pos] - '0');
        if (v > S_MAX_NUMBER)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: number too large", p->spec, at + 1);
        p->pos++;
    }
    *out = v;
    return TROUPE_OK;
}

static troupe_status_t s_parse_affine(s_parser_t *p, s_ridx_t *ri)
{
    /* p->pos is just after '(' */
    bool want_term = true, first = true;
    int64_t sign = 1;
    ri->kind = S_RI_AFFINE;
    for (;;) {
        s_skip_blanks(p);
        char c = p->spec[p->pos];
        if (c == ')') {
            if (want_term)
                return s_unexpected(p, p->pos);
            p->pos++;
            return TROUPE_OK;
        }
        if (!want_term) {
            if (c != '+' && c != '-')
                return s_unexpected(p, p->pos);
            sign = c == '-' ? -1 : 1;
            p->pos++;
            want_term = true;
            continue;
        }
        if (first && (c == '+' || c == '-')) {
            sign = c == '-' ? -1 : 1;
            p->pos++;
            first = false;
            continue;
        }
        first = false;
        size_t at = p->pos;
        int64_t coeff = 1;
        bool has_number = false;
        if (s_is_digit(c)) {
            TROUPE_RETURN_IF_ERROR(s_number(p, &coeff));
            has_number = true;
        }
        char l = p->spec[p->pos];
        if (s_is_letter(l)) {
            p->pos++;
            int k;
            for (k = 0; k < ri->nterms; k++)
                if (ri->letters[k] == l)
                    break;
            if (k == ri->nterms) {
                if (ri->nterms == TROUPE_MAX_INDEX_TERMS)
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %zu: more than %d iterators in an "
                                         "affine index",
                                         p->spec, at + 1, TROUPE_MAX_INDEX_TERMS);
                ri->letters[k] = l;
                ri->coeffs[k] = 0;
                ri->nterms++;
            }
            ri->coeffs[k] += sign * coeff;
        } else if (has_number) {
            ri->value += sign * coeff;
        } else {
            return s_unexpected(p, p->pos);
        }
        want_term = false;
    }
}

/* A broadcast mark "^" before an iterator: only in the lhs term, only before a letter. On
 * return p->pos is at the letter. */
static troupe_status_t s_parse_mark(s_parser_t *p)
{
    size_t at = p->pos;
    p->pos++;
    if (!p->in_lhs)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s' col %zu: a broadcast mark '^' belongs in the lhs "
                             "term (after '=>')",
                             p->spec, at + 1);
    if (!s_is_letter(p->spec[p->pos]))
        return s_unexpected(p, p->pos);
    return TROUPE_OK;
}

static troupe_status_t s_parse_index(s_parser_t *p, s_ridx_t *ri)
{
    memset(ri, 0, sizeof *ri);
    ri->start = (int)p->pos;
    char c = p->spec[p->pos];
    if (c == '^') {
        TROUPE_RETURN_IF_ERROR(s_parse_mark(p));
        ri->kind = S_RI_ITER;
        ri->mark = true;
        ri->letter = p->spec[p->pos++];
    } else if (s_is_letter(c)) {
        ri->kind = S_RI_ITER;
        ri->letter = c;
        p->pos++;
    } else if (c == '[') {
        p->pos++;
        s_skip_blanks(p);
        if (!s_is_digit(p->spec[p->pos]))
            return s_unexpected(p, p->pos);
        ri->kind = S_RI_FIXED;
        TROUPE_RETURN_IF_ERROR(s_number(p, &ri->value));
        s_skip_blanks(p);
        if (p->spec[p->pos] != ']')
            return s_unexpected(p, p->pos);
        p->pos++;
    } else if (c == '{') {
        size_t at = p->pos;
        p->pos++;
        s_skip_blanks(p);
        size_t name_at = p->pos;
        while (s_is_letter(p->spec[p->pos]) || s_is_digit(p->spec[p->pos]) ||
               p->spec[p->pos] == '_')
            p->pos++;
        size_t name_end = p->pos;
        s_skip_blanks(p);
        if (p->spec[p->pos] != '}' || name_end == name_at)
            return s_unexpected(p, p->pos);
        p->pos++;
        char name[128];
        size_t len = name_end - name_at;
        if (len >= sizeof name)
            len = sizeof name - 1;
        memcpy(name, p->spec + name_at, len);
        name[len] = '\0';
        int32_t sym = troupe_asgn_comp_find_static_symbol(p->comp, name);
        if (sym < 0 || !troupe__ir_is_identifier(name))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: unknown static symbol '%s'", p->spec,
                                 at + 1, name);
        ri->kind = S_RI_STATIC;
        ri->sym = sym;
    } else if (c == '(') {
        p->pos++;
        TROUPE_RETURN_IF_ERROR(s_parse_affine(p, ri));
    } else if (c == '@') {
        size_t at = p->pos;
        p->pos++;
        if (!s_is_digit(p->spec[p->pos]))
            return s_unexpected(p, p->pos);
        int64_t n;
        TROUPE_RETURN_IF_ERROR(s_number(p, &n));
        if (n < 1 || n > p->ngather)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: gather index @%" PRId64
                                 " but the assignment has %d gather node%s",
                                 p->spec, at + 1, n, p->ngather, p->ngather == 1 ? "" : "s");
        ri->kind = S_RI_GATHER;
        ri->gnode = (int)n;
        s_skip_blanks(p);
        if (p->spec[p->pos] != '[')
            return s_unexpected(p, p->pos);
        ri->gstart = (int)p->pos;
        p->pos++;
        for (;;) {
            s_skip_blanks(p);
            char g = p->spec[p->pos];
            if (g == ']') {
                p->pos++;
                break;
            }
            if (ri->gn == TROUPE_MAX_DIMS)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "projection '%s' col %zu: a gather term has more than %d "
                                     "axes",
                                     p->spec, p->pos + 1, TROUPE_MAX_DIMS);
            if (g == '^') {
                TROUPE_RETURN_IF_ERROR(s_parse_mark(p));
                ri->gmarks[ri->gn] = true;
                ri->gletters[ri->gn++] = p->spec[p->pos++];
            } else if (s_is_letter(g)) {
                ri->gletters[ri->gn++] = g;
                p->pos++;
            } else if (g == '[') {
                p->pos++;
                s_skip_blanks(p);
                if (!s_is_digit(p->spec[p->pos]))
                    return s_unexpected(p, p->pos);
                ri->gletters[ri->gn] = 0;
                TROUPE_RETURN_IF_ERROR(s_number(p, &ri->gfixed[ri->gn]));
                ri->gn++;
                s_skip_blanks(p);
                if (p->spec[p->pos] != ']')
                    return s_unexpected(p, p->pos);
                p->pos++;
            } else {
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "projection '%s' col %zu: a gather term holds only "
                                     "iterators and fixed indices, not '%c'",
                                     p->spec, p->pos + 1, g ? g : ' ');
            }
        }
        ri->gend = (int)p->pos;
    } else {
        return s_unexpected(p, p->pos);
    }
    ri->end = (int)p->pos;
    return TROUPE_OK;
}

static bool s_starts_index(char c)
{
    return s_is_letter(c) || c == '[' || c == '{' || c == '(' || c == '@' || c == '^';
}

static troupe_status_t s_parse_term(s_parser_t *p, s_rterm_t *t)
{
    t->n = 0;
    s_skip_blanks(p);
    t->start = t->end = (int)p->pos;
    for (;;) {
        s_skip_blanks(p);
        if (!s_starts_index(p->spec[p->pos]))
            return TROUPE_OK;
        if (t->n == TROUPE_MAX_DIMS)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: a term has more than %d axes", p->spec,
                                 p->pos + 1, TROUPE_MAX_DIMS);
        TROUPE_RETURN_IF_ERROR(s_parse_index(p, &t->idx[t->n]));
        t->end = t->idx[t->n].end;
        t->n++;
    }
}

/* Parses the whole spec into up to 3 rhs terms and the lhs term. */
static troupe_status_t s_parse_spec(s_parser_t *p, s_rterm_t *rhs, int *nrhs, s_rterm_t *lhs)
{
    *nrhs = 0;
    for (;;) {
        if (*nrhs == 3)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: more than 3 operand terms", p->spec,
                                 p->pos);
        TROUPE_RETURN_IF_ERROR(s_parse_term(p, &rhs[*nrhs]));
        (*nrhs)++;
        s_skip_blanks(p);
        char c = p->spec[p->pos];
        if (c == ',') {
            p->pos++;
            continue;
        }
        if (c == '=' && p->spec[p->pos + 1] == '>') {
            p->pos += 2;
            p->in_lhs = true;
            break;
        }
        if (c == '\0')
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: expected '=>' before the end", p->spec,
                                 p->pos + 1);
        return s_unexpected(p, p->pos);
    }
    TROUPE_RETURN_IF_ERROR(s_parse_term(p, lhs));
    s_skip_blanks(p);
    if (p->spec[p->pos] != '\0')
        return s_unexpected(p, p->pos);
    return TROUPE_OK;
}

/* "operand 2" / "the lhs" */
static void s_operand_name(int t, int nrhs, char *buf, size_t cap)
{
    if (t >= 4)
        snprintf(buf, cap, "gather node @%d", t - 3);
    else if (t == nrhs)
        snprintf(buf, cap, "the lhs");
    else
        snprintf(buf, cap, "operand %d", t + 1);
}

typedef struct s_letter_info {
    bool seen;
    bool has_dim;
    int64_t dim;
    int dim_t, dim_axis; /* where the dim was first fixed */
    bool in_lhs_plain;
    bool in_lhs_any;
    bool in_rhs;  /* indexes an operand (plainly, in an affine index or a gather term) */
    bool marked;  /* written "^x" in the lhs */
    int mark_col; /* 1-based column of the first mark */
    int lhs_col;  /* 1-based column of the first lhs occurrence */
    int lhs_plain_count;
    int first_seen; /* order of first appearance (rhs terms, then lhs) */
    int pos;        /* position in the product space */
} s_letter_info_t;

/* Whether iterator `l` of a gather term was written "^l". */
static bool s_gather_marked(const s_ridx_t *ri, char l)
{
    for (int k = 0; k < ri->gn; k++)
        if (ri->gletters[k] == l && ri->gmarks[k])
            return true;
    return false;
}

/* Broadcasts must be asked for: an lhs iterator that indexes no operand writes the same value
 * along its axis, which is what a typo in the lhs ("ik,kj=>iq") also does, silently. Such an
 * iterator must be written "^x"; a mark on an iterator that indexes an operand is refused
 * too, so that marks stay true. */
static troupe_status_t s_check_broadcasts(const char *spec, const s_letter_info_t *li)
{
    for (int s = 0; s < TROUPE_PROJ_MAX_ITERS; s++) {
        const s_letter_info_t *L = &li[s];
        char c = (char)(s < 26 ? 'a' + s : 'A' + s - 26);
        if (!L->seen)
            continue;
        if (L->marked && L->in_rhs)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %d: '^%c' marks a broadcast but '%c' "
                                 "indexes an operand; drop the '^'",
                                 spec, L->mark_col, c, c);
        if (!L->in_lhs_any || L->in_rhs || L->marked)
            continue;
        char summed[TROUPE_PROJ_MAX_ITERS + 1];
        int ns = 0;
        for (int r = 0; r < TROUPE_PROJ_MAX_ITERS; r++)
            if (li[r].seen && li[r].in_rhs && !li[r].in_lhs_any)
                summed[ns++] = (char)(r < 26 ? 'a' + r : 'A' + r - 26);
        summed[ns] = '\0';
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s' col %d: lhs index '%c' appears in no operand term, "
                             "so the result would be broadcast along it%s%s%s; if that is "
                             "meant, write '^%c'",
                             spec, L->lhs_col, c, ns ? " (and summed over '" : "", summed,
                             ns ? "')" : "", c);
    }
    return TROUPE_OK;
}

/* Records dim d of (t, axis) for iterator `letter`; INVALID_ARGUMENT when it differs. */
static troupe_status_t s_size_letter(const char *spec, s_letter_info_t *li, char letter, int64_t d,
                                     int t, int axis, const troupe_tnode_t *const *nodes, int nrhs)
{
    s_letter_info_t *L = &li[s_letter_slot(letter)];
    if (!L->has_dim) {
        L->has_dim = true;
        L->dim = d;
        L->dim_t = t;
        L->dim_axis = axis;
        return TROUPE_OK;
    }
    if (L->dim == d)
        return TROUPE_OK;
    char who[32], nname[128], who1[32], n1[128];
    s_operand_name(L->dim_t, nrhs, who1, sizeof who1);
    troupe__ir_node_name(nodes[L->dim_t], n1, sizeof n1);
    s_operand_name(t, nrhs, who, sizeof who);
    troupe__ir_node_name(nodes[t], nname, sizeof nname);
    return troupe__error(TROUPE_INVALID_ARGUMENT,
                         "projection '%s': axis '%c' is %" PRId64
                         " in %s (node %s, axis %d) but %" PRId64 " in %s (node %s, axis %d)",
                         spec, letter, L->dim, who1, n1, L->dim_axis, d, who, nname, axis);
}

troupe_status_t troupe_projections_parse(const troupe_asgn_comp_t *comp, const char *spec,
                                         const troupe_tnode_t *lhs, int nrhs,
                                         troupe_tnode_t *const *rhs, int vec_length,
                                         troupe_projections_t *out)
{
    return troupe_projections_parse_gather(comp, spec, lhs, nrhs, rhs, 0, NULL, vec_length, out);
}

troupe_status_t troupe_projections_parse_gather(const troupe_asgn_comp_t *comp, const char *spec,
                                                const troupe_tnode_t *lhs, int nrhs,
                                                troupe_tnode_t *const *rhs, int ngather,
                                                troupe_tnode_t *const *gather, int vec_length,
                                                troupe_projections_t *out)
{
    if (ngather < 0 || ngather > TROUPE_PROJ_MAX_GATHER || (ngather > 0 && gather == NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_projections_parse: bad gather node count %d (at most %d)",
                             ngather, TROUPE_PROJ_MAX_GATHER);
    for (int g = 0; g < ngather; g++)
        if (gather[g] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s': gather node @%d is NULL", spec ? spec : "",
                                 g + 1);
    if (spec == NULL || lhs == NULL || out == NULL || nrhs < 1 || nrhs > 3 || rhs == NULL ||
        vec_length < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_projections_parse: NULL argument or bad operand count %d",
                             nrhs);
    for (int i = 0; i < nrhs; i++)
        if (rhs[i] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "projection '%s': operand %d is NULL",
                                 spec, i + 1);

    s_parser_t p = {spec, comp, 0, ngather, false};
    s_rterm_t terms[4];
    int nterms_rhs = 0;
    TROUPE_RETURN_IF_ERROR(s_parse_spec(&p, terms, &nterms_rhs, &terms[3]));
    if (nterms_rhs != nrhs)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s': %d operand term%s but the operation takes %d", spec,
                             nterms_rhs, nterms_rhs == 1 ? "" : "s", nrhs);
    if (nrhs < 3)
        terms[nrhs] = terms[3];

    const troupe_tnode_t *nodes[4 + TROUPE_PROJ_MAX_GATHER];
    for (int t = 0; t < nrhs; t++)
        nodes[t] = rhs[t];
    nodes[nrhs] = lhs;
    for (int g = 0; g < ngather; g++)
        nodes[4 + g] = gather[g];
    const int nt = nrhs + 1; /* terms 0..nrhs-1 are the operands, nrhs the lhs */

    char who[32], nname[128];
    /* Arity. An empty term also matches a node whose dims are all 1. */
    bool all_fixed_zero[4] = {false, false, false, false};
    for (int t = 0; t < nt; t++) {
        const troupe_tnode_t *tn = nodes[t];
        if (terms[t].n == tn->ndims)
            continue;
        bool ones = terms[t].n == 0;
        for (int a = 0; ones && a < tn->ndims; a++)
            ones = tn->dims[a] == 1;
        if (ones) {
            all_fixed_zero[t] = true;
            continue;
        }
        s_operand_name(t, nrhs, who, sizeof who);
        troupe__ir_node_name(tn, nname, sizeof nname);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s': %s (node %s) has %d ax%s but its term '%.*s' has %d",
                             spec, who, nname, tn->ndims, tn->ndims == 1 ? "is" : "es",
                             terms[t].end - terms[t].start, spec + terms[t].start, terms[t].n);
    }

    /* Gather terms: one index per axis of their gather node. */
    for (int t = 0; t < nt; t++) {
        for (int a = 0; a < terms[t].n; a++) {
            const s_ridx_t *ri = &terms[t].idx[a];
            if (ri->kind != S_RI_GATHER)
                continue;
            const troupe_tnode_t *gn = gather[ri->gnode - 1];
            if (ri->gn != gn->ndims) {
                troupe__ir_node_name(gn, nname, sizeof nname);
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "projection '%s' col %d: gather node @%d (node %s) has %d "
                                     "ax%s but its term '%.*s' has %d",
                                     spec, ri->start + 1, ri->gnode, nname, gn->ndims,
                                     gn->ndims == 1 ? "is" : "es", ri->gend - ri->gstart,
                                     spec + ri->gstart, ri->gn);
            }
            for (int k = 0; k < ri->gn; k++)
                if (ri->gletters[k] == 0 && ri->gfixed[k] >= gn->dims[k]) {
                    troupe__ir_node_name(gn, nname, sizeof nname);
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %d: fixed index %" PRId64
                                         " is outside gather node @%d (node %s, axis %d) of dim "
                                         "%" PRId64,
                                         spec, ri->start + 1, ri->gfixed[k], ri->gnode, nname, k,
                                         gn->dims[k]);
                }
        }
    }

    /* Iterators: sizes from plain positions; first appearance order. */
    s_letter_info_t li[TROUPE_PROJ_MAX_ITERS];
    memset(li, 0, sizeof li);
    int order = 0;
    const bool vec = vec_length > 0;
    if (vec) {
        const s_rterm_t *lt = &terms[nrhs];
        if (lt->n == 0 || lt->idx[lt->n - 1].kind != S_RI_ITER)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s': a vector operation needs a plain iterator on "
                                 "the lhs's last axis",
                                 spec);
    }
    for (int t = 0; t < nt; t++) {
        const s_rterm_t *term = &terms[t];
        for (int a = 0; a < term->n; a++) {
            const s_ridx_t *ri = &term->idx[a];
            char letters[TROUPE_MAX_DIMS];
            int nl = 0;
            if (ri->kind == S_RI_ITER)
                letters[nl++] = ri->letter;
            else if (ri->kind == S_RI_AFFINE)
                for (int k = 0; k < ri->nterms; k++)
                    letters[nl++] = ri->letters[k];
            else if (ri->kind == S_RI_GATHER)
                for (int k = 0; k < ri->gn; k++)
                    if (ri->gletters[k] != 0) {
                        letters[nl++] = ri->gletters[k];
                        TROUPE_RETURN_IF_ERROR(s_size_letter(spec, li, ri->gletters[k],
                                                             gather[ri->gnode - 1]->dims[k],
                                                             3 + ri->gnode, k, nodes, nrhs));
                    }
            for (int k = 0; k < nl; k++) {
                s_letter_info_t *L = &li[s_letter_slot(letters[k])];
                if (!L->seen) {
                    L->seen = true;
                    L->first_seen = order++;
                }
                bool marked = ri->kind == S_RI_ITER     ? ri->mark
                              : ri->kind == S_RI_GATHER ? s_gather_marked(ri, letters[k])
                                                        : false;
                if (marked && !L->marked) {
                    L->marked = true;
                    L->mark_col = ri->start + 1;
                }
                if (t != nrhs)
                    L->in_rhs = true;
                if (t == nrhs) {
                    if (!L->in_lhs_any)
                        L->lhs_col = ri->start + 1;
                    L->in_lhs_any = true;
                    if (ri->kind == S_RI_ITER) {
                        L->in_lhs_plain = true;
                        L->lhs_plain_count++;
                    }
                }
            }
            if (ri->kind != S_RI_ITER)
                continue;
            if (vec && t == nrhs && a == term->n - 1)
                continue; /* its size is length * the rhs's size */
            TROUPE_RETURN_IF_ERROR(
                s_size_letter(spec, li, ri->letter, nodes[t]->dims[a], t, a, nodes, nrhs));
        }
    }
    for (int s = 0; s < TROUPE_PROJ_MAX_ITERS; s++) {
        if (li[s].seen && !li[s].has_dim) {
            char c = (char)(s < 26 ? 'a' + s : 'A' + s - 26);
            if (vec && c == terms[nrhs].idx[terms[nrhs].n - 1].letter)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "projection '%s': iterator '%c' of the lhs's last axis must "
                                     "also index an operand (a vector operation takes its size "
                                     "from the operand)",
                                     spec, c);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s': iterator '%c' appears only inside affine "
                                 "indices, so its size is unknown",
                                 spec, c);
        }
    }
    TROUPE_RETURN_IF_ERROR(s_check_broadcasts(spec, li));
    if (vec) {
        const s_ridx_t *ri = &terms[nrhs].idx[terms[nrhs].n - 1];
        const s_letter_info_t *L = &li[s_letter_slot(ri->letter)];
        int a = lhs->ndims - 1;
        if (lhs->dims[a] != L->dim * vec_length) {
            troupe__ir_node_name(lhs, nname, sizeof nname);
            return troupe__error(
                TROUPE_INVALID_ARGUMENT,
                "projection '%s': the lhs (node %s, axis %d) has dim %" PRId64
                " but a vector operation of length %d over '%c' (size %" PRId64 ") writes %" PRId64,
                spec, nname, a, lhs->dims[a], vec_length, ri->letter, L->dim, L->dim * vec_length);
        }
    }

    /* Product-space order (see the header): lhs plain iterators except the last axis's, then
     * the others by first appearance, then the lhs's last-axis iterator. */
    memset(out, 0, sizeof *out);
    out->spec = spec;
    out->nrhs = nrhs;
    out->ngather = ngather;
    for (int g = 0; g < ngather; g++)
        out->gather_ndims[g] = gather[g]->ndims;
    out->vec_length = vec_length;
    int npos = 0;
    const s_rterm_t *lt = &terms[nrhs];
    char last = 0;
    if (lt->n > 0 && lt->idx[lt->n - 1].kind == S_RI_ITER)
        last = lt->idx[lt->n - 1].letter;
    for (int a = 0; a < lt->n; a++) {
        if (lt->idx[a].kind != S_RI_ITER || lt->idx[a].letter == last)
            continue;
        s_letter_info_t *L = &li[s_letter_slot(lt->idx[a].letter)];
        if (L->pos == 0) {
            L->pos = ++npos; /* 1-based while assigning */
            out->iter_letter[npos - 1] = lt->idx[a].letter;
        }
    }
    for (int o = 0; o < order; o++) {
        for (int s = 0; s < TROUPE_PROJ_MAX_ITERS; s++) {
            char c = (char)(s < 26 ? 'a' + s : 'A' + s - 26);
            if (!li[s].seen || li[s].first_seen != o || li[s].pos != 0 || c == last)
                continue;
            li[s].pos = ++npos;
            out->iter_letter[npos - 1] = c;
        }
    }
    if (last != 0) {
        li[s_letter_slot(last)].pos = ++npos;
        out->iter_letter[npos - 1] = last;
    }
    out->niters = npos;
    /* A row reduction ("bc=>b", "bc,bc=>b"): the lhs's last iterator is the last axis of no
     * operand while the reduced iterator just before it is some operand's last (contiguous)
     * axis. Then the lhs's last iterator goes before the reduced ones, so the innermost loop
     * walks the operands' contiguous axis (not a stride of a whole row). Each lhs cell fixes
     * the lhs's last iterator, so every cell still accumulates in the same order. */
    if (last != 0 && npos >= 2) {
        bool last_is_rhs_last = false, prev_is_rhs_last = false;
        char prev = out->iter_letter[npos - 2];
        for (int t = 0; t < nrhs; t++) {
            const s_rterm_t *rt = &terms[t];
            if (rt->n == 0 || rt->idx[rt->n - 1].kind != S_RI_ITER)
                continue;
            last_is_rhs_last |= rt->idx[rt->n - 1].letter == last;
            prev_is_rhs_last |= rt->idx[rt->n - 1].letter == prev;
        }
        const s_letter_info_t *P = &li[s_letter_slot(prev)];
        if (!last_is_rhs_last && prev_is_rhs_last && !P->in_lhs_any && vec_length == 0) {
            int first_other = 0; /* the lhs's plain iterators come first */
            while (first_other < npos - 1 && li[s_letter_slot(out->iter_letter[first_other])]
                                                 .in_lhs_any)
                first_other++;
            for (int k = npos - 1; k > first_other; k--)
                out->iter_letter[k] = out->iter_letter[k - 1];
            out->iter_letter[first_other] = last;
            for (int k = 0; k < npos; k++)
                li[s_letter_slot(out->iter_letter[k])].pos = k + 1;
        }
    }
    for (int k = 0; k < npos; k++) {
        const s_letter_info_t *L = &li[s_letter_slot(out->iter_letter[k])];
        out->iter_dim[k] = L->dim;
        out->iter_reduced[k] = !L->in_lhs_any;
    }

    /* Indices, with bound checks. */
    bool lhs_gather = false;
    for (int t = 0; t < nt; t++) {
        const troupe_tnode_t *tn = nodes[t];
        troupe_proj_index_t *dst = t == nrhs ? out->lhs : out->rhs[t];
        if (t == nrhs)
            out->lhs_ndims = tn->ndims;
        else
            out->rhs_ndims[t] = tn->ndims;
        if (all_fixed_zero[t]) {
            for (int a = 0; a < tn->ndims; a++)
                dst[a] = (troupe_proj_index_t){.static_sym = -1};
            continue;
        }
        for (int a = 0; a < terms[t].n; a++) {
            const s_ridx_t *ri = &terms[t].idx[a];
            troupe_proj_index_t *pi = &dst[a];
            *pi = (troupe_proj_index_t){.static_sym = -1};
            int64_t d = tn->dims[a];
            switch (ri->kind) {
            case S_RI_ITER:
                pi->nterms = 1;
                pi->terms[0] = (troupe_proj_term_t){1, li[s_letter_slot(ri->letter)].pos - 1};
                break;
            case S_RI_FIXED:
                pi->offset = ri->value;
                if (ri->value >= d) {
                    s_operand_name(t, nrhs, who, sizeof who);
                    troupe__ir_node_name(tn, nname, sizeof nname);
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %d: fixed index %" PRId64
                                         " is outside %s (node %s, axis %d) of dim %" PRId64,
                                         spec, ri->start + 1, ri->value, who, nname, a, d);
                }
                break;
            case S_RI_STATIC: {
                pi->static_sym = ri->sym;
                int64_t range = comp->syms[ri->sym].range;
                if (range > d) {
                    s_operand_name(t, nrhs, who, sizeof who);
                    troupe__ir_node_name(tn, nname, sizeof nname);
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %d: static symbol '%s' ranges over "
                                         "%" PRId64 " values but %s (node %s, axis %d) has dim "
                                         "%" PRId64,
                                         spec, ri->start + 1, comp->syms[ri->sym].name, range, who,
                                         nname, a, d);
                }
                break;
            }
            case S_RI_GATHER:
                pi->gather = ri->gnode;
                pi->gather_n = ri->gn;
                for (int k = 0; k < ri->gn; k++) {
                    pi->gather_iter[k] =
                        ri->gletters[k] != 0 ? li[s_letter_slot(ri->gletters[k])].pos - 1 : -1;
                    pi->gather_fixed[k] = ri->gletters[k] != 0 ? 0 : ri->gfixed[k];
                }
                if (t == nrhs)
                    lhs_gather = true;
                break;
            case S_RI_AFFINE: {
                pi->is_affine = true;
                pi->offset = ri->value;
                int64_t lo = ri->value, hi = ri->value;
                for (int k = 0; k < ri->nterms; k++) {
                    const s_letter_info_t *L = &li[s_letter_slot(ri->letters[k])];
                    pi->terms[pi->nterms++] = (troupe_proj_term_t){ri->coeffs[k], L->pos - 1};
                    int64_t c = ri->coeffs[k], m = L->dim - 1;
                    if (c >= 0)
                        hi += c * m;
                    else
                        lo += c * m;
                }
                if (lo < 0 || hi >= d) {
                    s_operand_name(t, nrhs, who, sizeof who);
                    troupe__ir_node_name(tn, nname, sizeof nname);
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %d: index '%.*s' of %s (node %s, "
                                         "axis %d) ranges over [%" PRId64 ", %" PRId64
                                         "] outside dim %" PRId64,
                                         spec, ri->start + 1, ri->end - ri->start, spec + ri->start,
                                         who, nname, a, lo, hi, d);
                }
                break;
            }
            }
        }
    }

    /* Injective: every iterator of size > 1 is a plain lhs index (repeats are fine: distinct
     * product points still write distinct cells). Surjective: every lhs axis is covered by a
     * distinct plain iterator, or has dim 1 and a fixed/static index. */
    bool inj = true;
    for (int k = 0; k < npos; k++) {
        const s_letter_info_t *L = &li[s_letter_slot(out->iter_letter[k])];
        if (out->iter_dim[k] > 1 && !L->in_lhs_plain)
            inj = false;
    }
    bool sur = true;
    for (int a = 0; a < lhs->ndims; a++) {
        const troupe_proj_index_t *pi = &out->lhs[a];
        if (pi->is_affine && pi->nterms > 0) {
            sur = false;
        } else if (pi->nterms == 1) {
            if (li[s_letter_slot(out->iter_letter[pi->terms[0].iter])].lhs_plain_count > 1)
                sur = false;
        } else if (lhs->dims[a] != 1) {
            sur = false;
        }
    }
    if (lhs_gather && lhs->ndims > 0) {
        /* conservatively: two points may gather the same cell, and some cells none */
        inj = false;
        for (int a = 0; a < lhs->ndims; a++)
            if (out->lhs[a].gather > 0 && lhs->dims[a] != 1)
                sur = false;
    }
    out->injective = inj;
    out->surjective = sur;
    return TROUPE_OK;
}
