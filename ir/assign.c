/* troupe — high-level assignments: container, projection parser, builders, lowering.
 * Rules: OCANNL_NOTES §6.1 and the header comment of ir/assign.h. */
#define _POSIX_C_SOURCE 200809L
#include "ir/assign.h"

#include "base/alloc.h"
#include "ir/arena.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- arena -------------------------------------------------------------------------------- */

/* Trees and copies of a comp are carved from chunks of this size. */
#define S_ARENA_CHUNK_BYTES 8192

static void *s_alloc(troupe_asgn_comp_t *comp, size_t n)
{
    return troupe__arena_alloc(comp->arena, n);
}

static char *s_strdup(troupe_asgn_comp_t *comp, const char *s)
{
    return troupe__arena_strdup(comp->arena, s);
}

static troupe_status_t s_oom(const char *what)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory %s", what);
}

/* ---- container ---------------------------------------------------------------------------- */

static bool s_is_identifier(const char *s)
{
    if (s == NULL || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

troupe_status_t troupe_asgn_comp_new(troupe_asgn_comp_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_comp_new: out is NULL");
    *out = NULL;
    troupe_asgn_comp_t *c = troupe_calloc(1, sizeof *c);
    if (c == NULL)
        goto fail_comp;
    c->arena = troupe__arena_new(S_ARENA_CHUNK_BYTES);
    if (c->arena == NULL)
        goto fail_arena;
    c->root = s_alloc(c, sizeof *c->root);
    if (c->root == NULL)
        goto fail_root;
    c->root->kind = TROUPE_ASGN_NOOP;
    *out = c;
    return TROUPE_OK;
fail_root:
    troupe__arena_destroy(&c->arena);
fail_arena:
    troupe_free(c);
fail_comp:
    return s_oom("creating an assignment comp");
}

void troupe_asgn_comp_destroy(troupe_asgn_comp_t **comp_p)
{
    if (comp_p == NULL || *comp_p == NULL)
        return;
    troupe_asgn_comp_t *c = *comp_p;
    for (size_t i = 0; i < c->nnodes; i++)
        troupe_tnode_release(&c->nodes[i]);
    troupe_free(c->nodes);
    for (size_t i = 0; i < c->nembedded; i++)
        troupe_tnode_release(&c->embedded[i]);
    troupe_free(c->embedded);
    troupe_free(c->syms);
    troupe__arena_destroy(&c->arena);
    troupe_free(c);
    *comp_p = NULL;
}

void troupe_asgn_comp_set_root(troupe_asgn_comp_t *comp, troupe_asgn_t *root)
{
    static troupe_asgn_t s_noop = {TROUPE_ASGN_NOOP, {{0, NULL}}};
    comp->root = root != NULL ? root : &s_noop;
}

troupe_status_t troupe_asgn_comp_add_static_symbol(troupe_asgn_comp_t *comp, const char *name,
                                                   int64_t range, int32_t *out_id)
{
    if (comp == NULL || !s_is_identifier(name) || range < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "static symbol '%s' with range %" PRId64 " is invalid (the name must "
                             "be an identifier, the range >= 0)",
                             name ? name : "(null)", range);
    if (troupe_asgn_comp_find_static_symbol(comp, name) >= 0)
        return troupe__error(TROUPE_ALREADY_EXISTS, "static symbol '%s' already declared", name);
    if (comp->nsyms == comp->syms_cap) {
        int32_t cap = comp->syms_cap ? comp->syms_cap * 2 : 8;
        troupe_asgn_static_symbol_t *s = troupe_realloc(comp->syms, (size_t)cap * sizeof *s);
        if (s == NULL)
            return s_oom("declaring a static symbol");
        comp->syms = s;
        comp->syms_cap = cap;
    }
    char *copy = s_strdup(comp, name);
    if (copy == NULL)
        return s_oom("declaring a static symbol");
    comp->syms[comp->nsyms] = (troupe_asgn_static_symbol_t){copy, range};
    if (out_id != NULL)
        *out_id = comp->nsyms;
    comp->nsyms++;
    return TROUPE_OK;
}

int32_t troupe_asgn_comp_find_static_symbol(const troupe_asgn_comp_t *comp, const char *name)
{
    if (comp == NULL || name == NULL)
        return -1;
    for (int32_t i = 0; i < comp->nsyms; i++)
        if (strcmp(comp->syms[i].name, name) == 0)
            return i;
    return -1;
}

/* Sorted insert of a retained node into a set; no-op if present. */
static troupe_status_t s_node_set_add(troupe_tnode_t ***arr, size_t *n, size_t *cap,
                                      troupe_tnode_t *tn)
{
    size_t lo = 0, hi = *n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((*arr)[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < *n && (*arr)[lo]->id == tn->id)
        return TROUPE_OK;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        troupe_tnode_t **a = troupe_realloc(*arr, c * sizeof *a);
        if (a == NULL)
            return s_oom("recording a node");
        *arr = a;
        *cap = c;
    }
    memmove(*arr + lo + 1, *arr + lo, (*n - lo) * sizeof **arr);
    troupe_tnode_retain(tn);
    (*arr)[lo] = tn;
    (*n)++;
    return TROUPE_OK;
}

static bool s_node_set_has(troupe_tnode_t *const *arr, size_t n, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (arr[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && arr[lo] == tn;
}

static troupe_status_t s_add_node(troupe_asgn_comp_t *comp, troupe_tnode_t *tn)
{
    return s_node_set_add(&comp->nodes, &comp->nnodes, &comp->nodes_cap, tn);
}

troupe_status_t troupe_asgn_comp_add_embedded(troupe_asgn_comp_t *comp, troupe_tnode_t *tn)
{
    if (comp == NULL || tn == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_comp_add_embedded: NULL");
    return s_node_set_add(&comp->embedded, &comp->nembedded, &comp->embedded_cap, tn);
}

bool troupe_asgn_comp_is_embedded(const troupe_asgn_comp_t *comp, const troupe_tnode_t *tn)
{
    if (comp == NULL || tn == NULL)
        return false;
    return s_node_set_has(comp->embedded, comp->nembedded, tn);
}

/* ---- projection parser -------------------------------------------------------------------- */

enum { S_RI_ITER, S_RI_FIXED, S_RI_STATIC, S_RI_AFFINE };

typedef struct s_ridx {
    int kind;
    int start, end; /* byte offsets of the index text, [start, end) */
    char letter;    /* ITER */
    int64_t value;  /* FIXED value; AFFINE constant offset */
    int32_t sym;    /* STATIC */
    int nterms;     /* AFFINE */
    char letters[TROUPE_MAX_INDEX_TERMS];
    int64_t coeffs[TROUPE_MAX_INDEX_TERMS];
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

static troupe_status_t s_parse_index(s_parser_t *p, s_ridx_t *ri)
{
    memset(ri, 0, sizeof *ri);
    ri->start = (int)p->pos;
    char c = p->spec[p->pos];
    if (s_is_letter(c)) {
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
        if (sym < 0 || !s_is_identifier(name))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "projection '%s' col %zu: unknown static symbol '%s'", p->spec,
                                 at + 1, name);
        ri->kind = S_RI_STATIC;
        ri->sym = sym;
    } else if (c == '(') {
        p->pos++;
        TROUPE_RETURN_IF_ERROR(s_parse_affine(p, ri));
    } else {
        return s_unexpected(p, p->pos);
    }
    ri->end = (int)p->pos;
    return TROUPE_OK;
}

static bool s_starts_index(char c)
{
    return s_is_letter(c) || c == '[' || c == '{' || c == '(';
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
    if (t == nrhs)
        snprintf(buf, cap, "the lhs");
    else
        snprintf(buf, cap, "operand %d", t + 1);
}

/* "#3 x" */
static void s_node_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    char label[96];
    troupe_tnode_label_string(tn, label, sizeof label);
    snprintf(buf, cap, "#%" PRId32 " %s", tn->id, label);
}

typedef struct s_letter_info {
    bool seen;
    bool has_dim;
    int64_t dim;
    int dim_t, dim_axis; /* where the dim was first fixed */
    bool in_lhs_plain;
    bool in_lhs_any;
    int lhs_plain_count;
    int first_seen; /* order of first appearance (rhs terms, then lhs) */
    int pos;        /* position in the product space */
} s_letter_info_t;

troupe_status_t troupe_projections_parse(const troupe_asgn_comp_t *comp, const char *spec,
                                         const troupe_tnode_t *lhs, int nrhs,
                                         troupe_tnode_t *const *rhs, int vec_length,
                                         troupe_projections_t *out)
{
    if (spec == NULL || lhs == NULL || out == NULL || nrhs < 1 || nrhs > 3 || rhs == NULL ||
        vec_length < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_projections_parse: NULL argument or bad operand count %d",
                             nrhs);
    for (int i = 0; i < nrhs; i++)
        if (rhs[i] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "projection '%s': operand %d is NULL",
                                 spec, i + 1);

    s_parser_t p = {spec, comp, 0};
    s_rterm_t terms[4];
    int nterms_rhs = 0;
    TROUPE_RETURN_IF_ERROR(s_parse_spec(&p, terms, &nterms_rhs, &terms[3]));
    if (nterms_rhs != nrhs)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s': %d operand term%s but the operation takes %d", spec,
                             nterms_rhs, nterms_rhs == 1 ? "" : "s", nrhs);
    if (nrhs < 3)
        terms[nrhs] = terms[3];

    const troupe_tnode_t *nodes[4];
    for (int t = 0; t < nrhs; t++)
        nodes[t] = rhs[t];
    nodes[nrhs] = lhs;
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
        s_node_name(tn, nname, sizeof nname);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "projection '%s': %s (node %s) has %d ax%s but its term '%.*s' has %d",
                             spec, who, nname, tn->ndims, tn->ndims == 1 ? "is" : "es",
                             terms[t].end - terms[t].start, spec + terms[t].start, terms[t].n);
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
            char letters[TROUPE_MAX_INDEX_TERMS];
            int nl = 0;
            if (ri->kind == S_RI_ITER)
                letters[nl++] = ri->letter;
            else if (ri->kind == S_RI_AFFINE)
                for (int k = 0; k < ri->nterms; k++)
                    letters[nl++] = ri->letters[k];
            for (int k = 0; k < nl; k++) {
                s_letter_info_t *L = &li[s_letter_slot(letters[k])];
                if (!L->seen) {
                    L->seen = true;
                    L->first_seen = order++;
                }
                if (t == nrhs) {
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
            s_letter_info_t *L = &li[s_letter_slot(ri->letter)];
            int64_t d = nodes[t]->dims[a];
            if (!L->has_dim) {
                L->has_dim = true;
                L->dim = d;
                L->dim_t = t;
                L->dim_axis = a;
            } else if (L->dim != d) {
                char who1[32], n1[128];
                s_operand_name(L->dim_t, nrhs, who1, sizeof who1);
                s_node_name(nodes[L->dim_t], n1, sizeof n1);
                s_operand_name(t, nrhs, who, sizeof who);
                s_node_name(nodes[t], nname, sizeof nname);
                return troupe__error(
                    TROUPE_INVALID_ARGUMENT,
                    "projection '%s': axis '%c' is %" PRId64
                    " in %s (node %s, axis %d) but %" PRId64 " in %s (node %s, axis %d)",
                    spec, ri->letter, L->dim, who1, n1, L->dim_axis, d, who, nname, a);
            }
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
    if (vec) {
        const s_ridx_t *ri = &terms[nrhs].idx[terms[nrhs].n - 1];
        const s_letter_info_t *L = &li[s_letter_slot(ri->letter)];
        int a = lhs->ndims - 1;
        if (lhs->dims[a] != L->dim * vec_length) {
            s_node_name(lhs, nname, sizeof nname);
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
    for (int k = 0; k < npos; k++) {
        const s_letter_info_t *L = &li[s_letter_slot(out->iter_letter[k])];
        out->iter_dim[k] = L->dim;
        out->iter_reduced[k] = !L->in_lhs_any;
    }

    /* Indices, with bound checks. */
    for (int t = 0; t < nt; t++) {
        const troupe_tnode_t *tn = nodes[t];
        troupe_proj_index_t *dst = t == nrhs ? out->lhs : out->rhs[t];
        if (t == nrhs)
            out->lhs_ndims = tn->ndims;
        else
            out->rhs_ndims[t] = tn->ndims;
        if (all_fixed_zero[t]) {
            for (int a = 0; a < tn->ndims; a++)
                dst[a] = (troupe_proj_index_t){0, {{0, 0}}, -1, 0, false};
            continue;
        }
        for (int a = 0; a < terms[t].n; a++) {
            const s_ridx_t *ri = &terms[t].idx[a];
            troupe_proj_index_t *pi = &dst[a];
            *pi = (troupe_proj_index_t){0, {{0, 0}}, -1, 0, false};
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
                    s_node_name(tn, nname, sizeof nname);
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
                    s_node_name(tn, nname, sizeof nname);
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "projection '%s' col %d: static symbol '%s' ranges over "
                                         "%" PRId64 " values but %s (node %s, axis %d) has dim "
                                         "%" PRId64,
                                         spec, ri->start + 1, comp->syms[ri->sym].name, range, who,
                                         nname, a, d);
                }
                break;
            }
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
                    s_node_name(tn, nname, sizeof nname);
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
    out->injective = inj;
    out->surjective = sur;
    return TROUPE_OK;
}

/* ---- builders ----------------------------------------------------------------------------- */

static troupe_asgn_t *s_node(troupe_asgn_comp_t *comp, troupe_asgn_kind_t kind)
{
    troupe_asgn_t *t = s_alloc(comp, sizeof *t);
    if (t != NULL)
        t->kind = kind;
    return t;
}

static troupe_status_t s_check_out(troupe_asgn_comp_t *comp, troupe_asgn_t **out, const char *what)
{
    if (out != NULL)
        *out = NULL;
    if (comp == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: comp or out is NULL", what);
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_noop(troupe_asgn_comp_t *comp, troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "troupe_asgn_noop"));
    *out = s_node(comp, TROUPE_ASGN_NOOP);
    return *out != NULL ? TROUPE_OK : s_oom("building an assignment");
}

static size_t s_seq_count(troupe_asgn_t *const *items, size_t count)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (items[i] == NULL || items[i]->kind == TROUPE_ASGN_NOOP)
            continue;
        if (items[i]->kind == TROUPE_ASGN_SEQ)
            n += items[i]->u.seq.count;
        else
            n++;
    }
    return n;
}

troupe_status_t troupe_asgn_seq(troupe_asgn_comp_t *comp, size_t count, troupe_asgn_t *const *items,
                                troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "troupe_asgn_seq"));
    if (count > 0 && items == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_seq: items is NULL");
    size_t n = s_seq_count(items, count);
    if (n == 0)
        return troupe_asgn_noop(comp, out);
    if (n == 1) {
        for (size_t i = 0; i < count; i++) {
            if (items[i] == NULL || items[i]->kind == TROUPE_ASGN_NOOP)
                continue;
            *out = items[i]->kind == TROUPE_ASGN_SEQ ? items[i]->u.seq.items[0] : items[i];
            return TROUPE_OK;
        }
    }
    troupe_asgn_t *t = s_node(comp, TROUPE_ASGN_SEQ);
    troupe_asgn_t **arr = s_alloc(comp, n * sizeof *arr);
    if (t == NULL || arr == NULL)
        return s_oom("building a sequence");
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        if (items[i] == NULL || items[i]->kind == TROUPE_ASGN_NOOP)
            continue;
        if (items[i]->kind == TROUPE_ASGN_SEQ) {
            for (size_t j = 0; j < items[i]->u.seq.count; j++)
                arr[k++] = items[i]->u.seq.items[j];
        } else {
            arr[k++] = items[i];
        }
    }
    t->u.seq.count = n;
    t->u.seq.items = arr;
    *out = t;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_seq2(troupe_asgn_comp_t *comp, troupe_asgn_t *a, troupe_asgn_t *b,
                                 troupe_asgn_t **out)
{
    troupe_asgn_t *items[2] = {a, b};
    return troupe_asgn_seq(comp, 2, items, out);
}

troupe_status_t troupe_asgn_block_comment(troupe_asgn_comp_t *comp, const char *text,
                                          troupe_asgn_t *body, troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "troupe_asgn_block_comment"));
    if (text == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_block_comment: text is NULL");
    troupe_asgn_t *t = s_node(comp, TROUPE_ASGN_BLOCK_COMMENT);
    const char *copy = s_strdup(comp, text);
    if (body == NULL)
        body = s_node(comp, TROUPE_ASGN_NOOP);
    if (t == NULL || copy == NULL || body == NULL)
        return s_oom("building a block comment");
    t->u.block_comment.text = copy;
    t->u.block_comment.body = body;
    *out = t;
    return TROUPE_OK;
}

/* Parses spec into an arena copy and records the nodes. */
static troupe_status_t s_make_proj(troupe_asgn_comp_t *comp, const char *spec, troupe_tnode_t *lhs,
                                   int nrhs, const troupe_asgn_buffer_t *rhs, int vec_length,
                                   troupe_projections_t **out)
{
    troupe_tnode_t *rn[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nrhs; i++)
        rn[i] = rhs[i].tn;
    troupe_projections_t tmp;
    TROUPE_RETURN_IF_ERROR(troupe_projections_parse(comp, spec, lhs, nrhs, rn, vec_length, &tmp));
    troupe_projections_t *pr = s_alloc(comp, sizeof *pr);
    char *copy = s_strdup(comp, spec);
    if (pr == NULL || copy == NULL)
        return s_oom("storing a projection");
    *pr = tmp;
    pr->spec = copy;
    TROUPE_RETURN_IF_ERROR(s_add_node(comp, lhs));
    for (int i = 0; i < nrhs; i++)
        TROUPE_RETURN_IF_ERROR(s_add_node(comp, rn[i]));
    *out = pr;
    return TROUPE_OK;
}

static troupe_status_t s_accum(troupe_asgn_comp_t *comp, bool initialize_neutral,
                               troupe_binop_t accum, troupe_tnode_t *lhs,
                               troupe_asgn_rhs_kind_t kind, int op, int nrhs,
                               const troupe_asgn_buffer_t *rhs, const char *spec,
                               troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "accumulating assignment"));
    if (lhs == NULL || spec == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "accumulating assignment: lhs or spec is NULL");
    for (int i = 0; i < nrhs; i++)
        if (rhs[i].tn == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "accumulating assignment '%s': operand %d is NULL", spec, i + 1);
    if (!troupe_binop_is_valid(accum))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "accumulating assignment '%s': bad accum %d",
                             spec, (int)accum);
    bool op_ok = kind == TROUPE_ASGN_RHS_UNOP    ? troupe_unop_is_valid((troupe_unop_t)op)
                 : kind == TROUPE_ASGN_RHS_BINOP ? troupe_binop_is_valid((troupe_binop_t)op)
                                                 : troupe_ternop_is_valid((troupe_ternop_t)op);
    if (!op_ok)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "accumulating assignment '%s': bad op %d",
                             spec, op);
    if (initialize_neutral) {
        double neutral;
        if (troupe_binop_neutral(accum, &neutral) != TROUPE_OK)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "accumulating assignment '%s': initialize_neutral with "
                                 "accumulator '%s', which has no neutral element",
                                 spec, troupe_binop_name(accum));
    }
    troupe_projections_t *pr;
    TROUPE_RETURN_IF_ERROR(s_make_proj(comp, spec, lhs, nrhs, rhs, 0, &pr));
    troupe_asgn_t *t = s_node(comp, TROUPE_ASGN_ACCUM_OP);
    if (t == NULL)
        return s_oom("building an assignment");
    t->u.accum_op.initialize_neutral = initialize_neutral;
    t->u.accum_op.accum = accum;
    t->u.accum_op.lhs = lhs;
    t->u.accum_op.rhs_kind = kind;
    t->u.accum_op.op = op;
    for (int i = 0; i < nrhs; i++)
        t->u.accum_op.rhs[i] = rhs[i];
    t->u.accum_op.proj = pr;
    *out = t;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_accum_unop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                       troupe_binop_t accum, troupe_tnode_t *lhs, troupe_unop_t op,
                                       troupe_asgn_buffer_t rhs, const char *spec,
                                       troupe_asgn_t **out)
{
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_UNOP, (int)op, 1, &rhs,
                   spec, out);
}

troupe_status_t troupe_asgn_accum_binop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                        troupe_binop_t accum, troupe_tnode_t *lhs,
                                        troupe_binop_t op, troupe_asgn_buffer_t rhs1,
                                        troupe_asgn_buffer_t rhs2, const char *spec,
                                        troupe_asgn_t **out)
{
    troupe_asgn_buffer_t rhs[2] = {rhs1, rhs2};
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_BINOP, (int)op, 2, rhs,
                   spec, out);
}

troupe_status_t troupe_asgn_accum_ternop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                         troupe_binop_t accum, troupe_tnode_t *lhs,
                                         troupe_ternop_t op, troupe_asgn_buffer_t rhs1,
                                         troupe_asgn_buffer_t rhs2, troupe_asgn_buffer_t rhs3,
                                         const char *spec, troupe_asgn_t **out)
{
    troupe_asgn_buffer_t rhs[3] = {rhs1, rhs2, rhs3};
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_TERNOP, (int)op, 3, rhs,
                   spec, out);
}

troupe_status_t troupe_asgn_set_vec_unop(troupe_asgn_comp_t *comp, troupe_vec_unop_t op,
                                         troupe_tnode_t *lhs, troupe_asgn_buffer_t rhs,
                                         const char *spec, troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "troupe_asgn_set_vec_unop"));
    if (lhs == NULL || rhs.tn == NULL || spec == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_set_vec_unop: NULL argument");
    if (!troupe_vec_unop_is_valid(op))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "vector assignment '%s': bad op %d", spec,
                             (int)op);
    size_t length = troupe_vec_unop_output_count(op, lhs->prec);
    if (length == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "vector assignment '%s': %s has no vector form in precision %s", spec,
                             troupe_vec_unop_name(op), troupe_prec_name(lhs->prec));
    troupe_projections_t *pr;
    TROUPE_RETURN_IF_ERROR(s_make_proj(comp, spec, lhs, 1, &rhs, (int)length, &pr));
    troupe_asgn_t *t = s_node(comp, TROUPE_ASGN_SET_VEC_UNOP);
    if (t == NULL)
        return s_oom("building an assignment");
    t->u.set_vec_unop.op = op;
    t->u.set_vec_unop.lhs = lhs;
    t->u.set_vec_unop.rhs = rhs;
    t->u.set_vec_unop.proj = pr;
    *out = t;
    return TROUPE_OK;
}

static troupe_status_t s_fetch(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                               troupe_fetch_kind_t kind, troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "fetch"));
    if (tn == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "fetch: node is NULL");
    TROUPE_RETURN_IF_ERROR(s_add_node(comp, tn));
    troupe_asgn_t *t = s_node(comp, TROUPE_ASGN_FETCH);
    if (t == NULL)
        return s_oom("building a fetch");
    t->u.fetch.tn = tn;
    t->u.fetch.kind = kind;
    t->u.fetch.static_sym = -1;
    *out = t;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_constant(troupe_asgn_comp_t *comp, troupe_tnode_t *tn, double c,
                                           troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_fetch(comp, tn, TROUPE_FETCH_CONSTANT, out));
    (*out)->u.fetch.constant = c;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_constant_bits(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                                int64_t bits, troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_fetch(comp, tn, TROUPE_FETCH_CONSTANT_BITS, out));
    (*out)->u.fetch.constant_bits = bits;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_constant_fill(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                                const double *values, size_t count,
                                                troupe_asgn_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (tn != NULL) {
        int64_t n = troupe_tnode_num_elems(tn);
        if ((int64_t)count != n || (count > 0 && values == NULL)) {
            char nname[128];
            s_node_name(tn, nname, sizeof nname);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "constant fill of node %s: %zu values given but the node has "
                                 "%" PRId64 " elements",
                                 nname, count, n);
        }
    }
    troupe_asgn_t *t;
    TROUPE_RETURN_IF_ERROR(s_fetch(comp, tn, TROUPE_FETCH_CONSTANT_FILL, &t));
    double *copy = s_alloc(comp, count * sizeof *copy);
    if (copy == NULL)
        return s_oom("copying constant-fill values");
    if (count > 0)
        memcpy(copy, values, count * sizeof *copy);
    t->u.fetch.values = copy;
    t->u.fetch.count = count;
    *out = t;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_range_over_offsets(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                                     troupe_asgn_t **out)
{
    return s_fetch(comp, tn, TROUPE_FETCH_RANGE_OVER_OFFSETS, out);
}

static troupe_status_t s_check_sym(const troupe_asgn_comp_t *comp, int32_t sym, const char *what)
{
    if (comp == NULL || sym < 0 || sym >= comp->nsyms)
        return troupe__error(TROUPE_NOT_FOUND,
                             "%s: no static symbol with id %" PRId32 " (%" PRId32 " declared)",
                             what, sym, comp ? comp->nsyms : 0);
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_slice(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                        int32_t static_sym, troupe_tnode_t *sliced,
                                        troupe_asgn_t **out)
{
    if (out != NULL)
        *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_sym(comp, static_sym, "slice"));
    if (tn == NULL || sliced == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "slice: NULL argument");
    char n1[128], n2[128];
    s_node_name(tn, n1, sizeof n1);
    s_node_name(sliced, n2, sizeof n2);
    if (sliced->ndims != tn->ndims + 1)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "slice of node %s into node %s: the sliced node needs %d axes, it "
                             "has %d",
                             n2, n1, tn->ndims + 1, sliced->ndims);
    for (int a = 0; a < tn->ndims; a++)
        if (sliced->dims[a + 1] != tn->dims[a])
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "slice of node %s into node %s: axis %d of the sliced node is "
                                 "%" PRId64 " but axis %d of the result is %" PRId64,
                                 n2, n1, a + 1, sliced->dims[a + 1], a, tn->dims[a]);
    const troupe_asgn_static_symbol_t *s = &comp->syms[static_sym];
    if (s->range > sliced->dims[0])
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "slice of node %s: static symbol '%s' ranges over %" PRId64
                             " values but axis 0 has dim %" PRId64,
                             n2, s->name, s->range, sliced->dims[0]);
    TROUPE_RETURN_IF_ERROR(s_add_node(comp, sliced));
    TROUPE_RETURN_IF_ERROR(s_fetch(comp, tn, TROUPE_FETCH_SLICE, out));
    (*out)->u.fetch.static_sym = static_sym;
    (*out)->u.fetch.sliced = sliced;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_embed_symbol(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                               int32_t static_sym, troupe_asgn_t **out)
{
    if (out != NULL)
        *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_sym(comp, static_sym, "embed symbol"));
    TROUPE_RETURN_IF_ERROR(s_fetch(comp, tn, TROUPE_FETCH_EMBED_SYMBOL, out));
    (*out)->u.fetch.static_sym = static_sym;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_fetch_embed_self_id(troupe_asgn_comp_t *comp, troupe_tnode_t *tn,
                                                troupe_asgn_t **out)
{
    return s_fetch(comp, tn, TROUPE_FETCH_EMBED_SELF_ID, out);
}

/* "abc..=>abc.." over ndims axes (also the rhs terms, `nrhs` of them). */
static void s_pointwise_spec(int ndims, int nrhs, char *buf)
{
    char term[TROUPE_MAX_DIMS + 1];
    for (int a = 0; a < ndims; a++)
        term[a] = (char)('a' + a);
    term[ndims] = '\0';
    buf[0] = '\0';
    for (int i = 0; i < nrhs; i++) {
        strcat(buf, term);
        strcat(buf, i + 1 < nrhs ? "," : "=>");
    }
    strcat(buf, term);
}

troupe_status_t troupe_asgn_copy(troupe_asgn_comp_t *comp, troupe_tnode_t *lhs,
                                 troupe_asgn_buffer_t rhs, troupe_asgn_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (lhs == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_copy: lhs is NULL");
    char spec[4 * (TROUPE_MAX_DIMS + 2)];
    s_pointwise_spec(lhs->ndims, 1, spec);
    return troupe_asgn_accum_unop(comp, true, TROUPE_BINOP_ARG2, lhs, TROUPE_UNOP_IDENTITY, rhs,
                                  spec, out);
}

troupe_status_t troupe_asgn_pointwise_binop(troupe_asgn_comp_t *comp, troupe_tnode_t *lhs,
                                            troupe_binop_t op, troupe_asgn_buffer_t rhs1,
                                            troupe_asgn_buffer_t rhs2, troupe_asgn_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (lhs == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_pointwise_binop: lhs is NULL");
    char spec[4 * (TROUPE_MAX_DIMS + 2)];
    s_pointwise_spec(lhs->ndims, 2, spec);
    return troupe_asgn_accum_binop(comp, true, TROUPE_BINOP_ARG2, lhs, op, rhs1, rhs2, spec, out);
}

/* ---- equality ----------------------------------------------------------------------------- */

static bool s_buf_equal(const troupe_asgn_buffer_t *a, const troupe_asgn_buffer_t *b)
{
    return a->is_merge_buffer == b->is_merge_buffer && a->tn != NULL && b->tn != NULL &&
           a->tn->id == b->tn->id;
}

static bool s_proj_equal(const troupe_projections_t *a, const troupe_projections_t *b)
{
    return a->vec_length == b->vec_length && strcmp(a->spec, b->spec) == 0;
}

static bool s_fetch_equal(const troupe_asgn_t *a, const troupe_asgn_t *b)
{
    const troupe_asgn_t *xa = a, *ya = b;
    if (xa->u.fetch.tn->id != ya->u.fetch.tn->id || xa->u.fetch.kind != ya->u.fetch.kind)
        return false;
    switch (xa->u.fetch.kind) {
    case TROUPE_FETCH_CONSTANT:
        return memcmp(&xa->u.fetch.constant, &ya->u.fetch.constant, sizeof(double)) == 0;
    case TROUPE_FETCH_CONSTANT_BITS:
        return xa->u.fetch.constant_bits == ya->u.fetch.constant_bits;
    case TROUPE_FETCH_CONSTANT_FILL:
        return xa->u.fetch.count == ya->u.fetch.count &&
               (xa->u.fetch.count == 0 || memcmp(xa->u.fetch.values, ya->u.fetch.values,
                                                 xa->u.fetch.count * sizeof(double)) == 0);
    case TROUPE_FETCH_SLICE:
        return xa->u.fetch.static_sym == ya->u.fetch.static_sym &&
               xa->u.fetch.sliced->id == ya->u.fetch.sliced->id;
    case TROUPE_FETCH_EMBED_SYMBOL:
        return xa->u.fetch.static_sym == ya->u.fetch.static_sym;
    case TROUPE_FETCH_RANGE_OVER_OFFSETS:
    case TROUPE_FETCH_EMBED_SELF_ID:
        return true;
    }
    return false;
}

bool troupe_asgn_equal(const troupe_asgn_t *a, const troupe_asgn_t *b)
{
    if (a == b)
        return true;
    if (a == NULL || b == NULL || a->kind != b->kind)
        return false;
    switch (a->kind) {
    case TROUPE_ASGN_NOOP:
        return true;
    case TROUPE_ASGN_SEQ:
        if (a->u.seq.count != b->u.seq.count)
            return false;
        for (size_t i = 0; i < a->u.seq.count; i++)
            if (!troupe_asgn_equal(a->u.seq.items[i], b->u.seq.items[i]))
                return false;
        return true;
    case TROUPE_ASGN_BLOCK_COMMENT:
        return strcmp(a->u.block_comment.text, b->u.block_comment.text) == 0 &&
               troupe_asgn_equal(a->u.block_comment.body, b->u.block_comment.body);
    case TROUPE_ASGN_ACCUM_OP:
        if (a->u.accum_op.initialize_neutral != b->u.accum_op.initialize_neutral ||
            a->u.accum_op.accum != b->u.accum_op.accum ||
            a->u.accum_op.lhs->id != b->u.accum_op.lhs->id ||
            a->u.accum_op.rhs_kind != b->u.accum_op.rhs_kind ||
            a->u.accum_op.op != b->u.accum_op.op ||
            !s_proj_equal(a->u.accum_op.proj, b->u.accum_op.proj))
            return false;
        for (int i = 0; i < (int)a->u.accum_op.rhs_kind; i++)
            if (!s_buf_equal(&a->u.accum_op.rhs[i], &b->u.accum_op.rhs[i]))
                return false;
        return true;
    case TROUPE_ASGN_SET_VEC_UNOP:
        return a->u.set_vec_unop.op == b->u.set_vec_unop.op &&
               a->u.set_vec_unop.lhs->id == b->u.set_vec_unop.lhs->id &&
               s_buf_equal(&a->u.set_vec_unop.rhs, &b->u.set_vec_unop.rhs) &&
               s_proj_equal(a->u.set_vec_unop.proj, b->u.set_vec_unop.proj);
    case TROUPE_ASGN_FETCH:
        return s_fetch_equal(a, b);
    }
    return false;
}

/* ---- lowering ----------------------------------------------------------------------------- */

typedef struct s_lower {
    const troupe_asgn_comp_t *comp;
    troupe_ll_proc_t *proc;
    int32_t *static_map; /* comp static symbol id -> proc symbol id */
} s_lower_t;

static troupe_status_t s_proc_status(const s_lower_t *L)
{
    troupe_status_t st = troupe_ll_proc_status(L->proc);
    if (st == TROUPE_OK)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "lowering assignments: a builder failed");
    return st;
}

static troupe_axis_index_t s_axis(const s_lower_t *L, const troupe_proj_index_t *pi,
                                  const int32_t *loop_syms, int64_t scale)
{
    troupe_axis_index_t x = troupe_idx_fixed(pi->offset * scale);
    for (int k = 0; k < pi->nterms; k++) {
        x.terms[x.nterms].coeff = pi->terms[k].coeff * scale;
        x.terms[x.nterms].sym = loop_syms[pi->terms[k].iter];
        x.nterms++;
    }
    if (pi->static_sym >= 0 && x.nterms < TROUPE_MAX_INDEX_TERMS) {
        x.terms[x.nterms].coeff = scale;
        x.terms[x.nterms].sym = L->static_map[pi->static_sym];
        x.nterms++;
    }
    return x;
}

/* Wraps `body` in loops over the product space (loop_syms[k] from 0 to iter_dim[k]-1,
 * iterator 0 outermost). */
static troupe_ll_t *s_wrap_loops(s_lower_t *L, const troupe_projections_t *pr,
                                 const int32_t *loop_syms, troupe_ll_t *body)
{
    for (int k = pr->niters - 1; k >= 0 && body != NULL; k--)
        body = troupe_ll_for(L->proc, loop_syms[k], 0, pr->iter_dim[k] - 1, body, true);
    return body;
}

static troupe_status_t s_new_loop_syms(s_lower_t *L, int n, int32_t *syms)
{
    for (int k = 0; k < n; k++) {
        syms[k] = troupe_ll_proc_add_symbol(L->proc, NULL);
        if (syms[k] < 0)
            return s_proc_status(L);
    }
    return TROUPE_OK;
}

typedef troupe_sc_t *(*s_cell_fn)(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg);

/* Loops over every cell of tn (axes of dim 1 get the fixed index 0, no loop), setting each
 * to fn(idcs). */
static troupe_status_t s_loop_over_dims(s_lower_t *L, troupe_tnode_t *tn, s_cell_fn fn,
                                        const void *arg, troupe_ll_t **out)
{
    int32_t syms[TROUPE_MAX_DIMS];
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    for (int a = 0; a < tn->ndims; a++) {
        syms[a] = -1;
        idcs[a] = troupe_idx_fixed(0);
        if (tn->dims[a] > 1) {
            syms[a] = troupe_ll_proc_add_symbol(L->proc, NULL);
            if (syms[a] < 0)
                return s_proc_status(L);
            idcs[a] = troupe_idx_sym(syms[a]);
        }
    }
    troupe_sc_t *v = fn(L, tn, idcs, syms, arg);
    troupe_ll_t *body = v != NULL ? troupe_ll_set(L->proc, tn, idcs, v) : NULL;
    for (int a = tn->ndims - 1; a >= 0 && body != NULL; a--)
        if (syms[a] >= 0)
            body = troupe_ll_for(L->proc, syms[a], 0, tn->dims[a] - 1, body, true);
    if (body == NULL)
        return s_proc_status(L);
    *out = body;
    return TROUPE_OK;
}

static troupe_sc_t *s_cell_constant(s_lower_t *L, const troupe_tnode_t *tn,
                                    const troupe_axis_index_t *idcs, const int32_t *syms,
                                    const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    return troupe_sc_constant(L->proc, *(const double *)arg);
}

static troupe_sc_t *s_cell_bits(s_lower_t *L, const troupe_tnode_t *tn,
                                const troupe_axis_index_t *idcs, const int32_t *syms,
                                const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    return troupe_sc_constant_bits(L->proc, *(const int64_t *)arg);
}

static troupe_sc_t *s_cell_offset(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg)
{
    (void)idcs, (void)arg;
    /* Row-major flat offset sum(stride_a * i_a), in chunks of TROUPE_MAX_INDEX_TERMS terms
     * added together when the node has more looped axes than one index can hold. */
    troupe_sc_t *acc = NULL;
    troupe_axis_index_t x = troupe_idx_fixed(0);
    int64_t stride = 1;
    for (int a = tn->ndims - 1; a >= 0; a--) {
        if (syms[a] >= 0) {
            if (x.nterms == TROUPE_MAX_INDEX_TERMS) {
                troupe_sc_t *e = troupe_sc_embed_index(L->proc, x);
                acc = acc == NULL ? e : troupe_sc_binop(L->proc, TROUPE_BINOP_ADD, acc, e);
                x = troupe_idx_fixed(0);
            }
            x.terms[x.nterms++] = (troupe_index_term_t){stride, syms[a]};
        }
        stride *= tn->dims[a];
    }
    troupe_sc_t *e = troupe_sc_embed_index(L->proc, x);
    return acc == NULL ? e : troupe_sc_binop(L->proc, TROUPE_BINOP_ADD, acc, e);
}

static troupe_sc_t *s_cell_slice(s_lower_t *L, const troupe_tnode_t *tn,
                                 const troupe_axis_index_t *idcs, const int32_t *syms,
                                 const void *arg)
{
    (void)syms;
    const troupe_asgn_t *t = arg;
    troupe_axis_index_t src[TROUPE_MAX_DIMS];
    src[0] = troupe_idx_sym(L->static_map[t->u.fetch.static_sym]);
    for (int a = 0; a < tn->ndims; a++)
        src[a + 1] = idcs[a];
    return troupe_sc_get(L->proc, t->u.fetch.sliced, src);
}

static troupe_sc_t *s_cell_symbol(s_lower_t *L, const troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, const int32_t *syms,
                                  const void *arg)
{
    (void)tn, (void)idcs, (void)syms;
    const troupe_asgn_t *t = arg;
    return troupe_sc_embed_index(L->proc, troupe_idx_sym(L->static_map[t->u.fetch.static_sym]));
}

/* OCANNL Fetch Constant: ZERO_OUT for 0.0, else loops of SET. */
static troupe_status_t s_fill_constant(s_lower_t *L, troupe_tnode_t *tn, double c,
                                       troupe_ll_t **out)
{
    if (c == 0.0 && !signbit(c)) {
        *out = troupe_ll_zero_out(L->proc, tn);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    return s_loop_over_dims(L, tn, s_cell_constant, &c, out);
}

static troupe_sc_t *s_read(s_lower_t *L, const troupe_asgn_buffer_t *b,
                           const troupe_axis_index_t *idcs)
{
    return b->is_merge_buffer ? troupe_sc_get_merge_buffer(L->proc, b->tn, idcs)
                              : troupe_sc_get(L->proc, b->tn, idcs);
}

static troupe_status_t s_lower_accum(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    const troupe_projections_t *pr = t->u.accum_op.proj;
    troupe_tnode_t *lhs = t->u.accum_op.lhs;
    int32_t syms[TROUPE_PROJ_MAX_ITERS];
    TROUPE_RETURN_IF_ERROR(s_new_loop_syms(L, pr->niters, syms));

    troupe_axis_index_t lidx[TROUPE_MAX_DIMS], ridx[3][TROUPE_MAX_DIMS];
    for (int a = 0; a < pr->lhs_ndims; a++)
        lidx[a] = s_axis(L, &pr->lhs[a], syms, 1);
    troupe_sc_t *args[3] = {NULL, NULL, NULL};
    for (int i = 0; i < pr->nrhs; i++) {
        for (int a = 0; a < pr->rhs_ndims[i]; a++)
            ridx[i][a] = s_axis(L, &pr->rhs[i][a], syms, 1);
        args[i] = s_read(L, &t->u.accum_op.rhs[i], ridx[i]);
    }
    troupe_sc_t *v;
    switch (t->u.accum_op.rhs_kind) {
    case TROUPE_ASGN_RHS_UNOP:
        v = troupe_sc_unop(L->proc, (troupe_unop_t)t->u.accum_op.op, args[0]);
        break;
    case TROUPE_ASGN_RHS_BINOP:
        v = troupe_sc_binop(L->proc, (troupe_binop_t)t->u.accum_op.op, args[0], args[1]);
        break;
    default:
        v = troupe_sc_ternop(L->proc, (troupe_ternop_t)t->u.accum_op.op, args[0], args[1], args[2]);
        break;
    }
    const bool init = t->u.accum_op.initialize_neutral;
    if (!(init && pr->injective))
        v = troupe_sc_binop(L->proc, t->u.accum_op.accum, troupe_sc_get(L->proc, lhs, lidx), v);
    troupe_ll_t *body = v != NULL ? troupe_ll_set(L->proc, lhs, lidx, v) : NULL;
    troupe_ll_t *loops = body != NULL ? s_wrap_loops(L, pr, syms, body) : NULL;
    if (loops == NULL)
        return s_proc_status(L);
    if (init && !(pr->injective && pr->surjective)) {
        double neutral;
        troupe_status_t st = troupe_binop_neutral(t->u.accum_op.accum, &neutral);
        if (st != TROUPE_OK)
            return troupe__error(TROUPE_FAILED_PRECONDITION,
                                 "lowering '%s': accumulator '%s' has no neutral element", pr->spec,
                                 troupe_binop_name(t->u.accum_op.accum));
        troupe_ll_t *fill;
        TROUPE_RETURN_IF_ERROR(s_fill_constant(L, lhs, neutral, &fill));
        loops = troupe_ll_seq2(L->proc, fill, loops);
        if (loops == NULL)
            return s_proc_status(L);
    }
    *out = loops;
    return TROUPE_OK;
}

static troupe_status_t s_lower_vec(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    const troupe_projections_t *pr = t->u.set_vec_unop.proj;
    troupe_tnode_t *lhs = t->u.set_vec_unop.lhs;
    int32_t syms[TROUPE_PROJ_MAX_ITERS];
    TROUPE_RETURN_IF_ERROR(s_new_loop_syms(L, pr->niters, syms));
    troupe_axis_index_t lidx[TROUPE_MAX_DIMS], ridx[TROUPE_MAX_DIMS];
    for (int a = 0; a < pr->lhs_ndims; a++)
        lidx[a] = s_axis(L, &pr->lhs[a], syms, a == pr->lhs_ndims - 1 ? pr->vec_length : 1);
    for (int a = 0; a < pr->rhs_ndims[0]; a++)
        ridx[a] = s_axis(L, &pr->rhs[0][a], syms, 1);
    troupe_sc_t *arg = s_read(L, &t->u.set_vec_unop.rhs, ridx);
    troupe_ll_t *body = arg != NULL ? troupe_ll_set_from_vec(L->proc, lhs, lidx, pr->vec_length,
                                                             t->u.set_vec_unop.op, arg)
                                    : NULL;
    troupe_ll_t *loops = body != NULL ? s_wrap_loops(L, pr, syms, body) : NULL;
    if (loops == NULL)
        return s_proc_status(L);
    *out = loops;
    return TROUPE_OK;
}

static troupe_status_t s_lower_fill(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    troupe_tnode_t *tn = t->u.fetch.tn;
    size_t n = t->u.fetch.count;
    troupe_ll_t **items = troupe_ll_alloc(L->proc, (n > 0 ? n : 1) * sizeof *items);
    if (items == NULL)
        return s_proc_status(L);
    troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
    int64_t pos[TROUPE_MAX_DIMS] = {0};
    for (size_t k = 0; k < n; k++) {
        for (int a = 0; a < tn->ndims; a++)
            idcs[a] = troupe_idx_fixed(pos[a]);
        items[k] =
            troupe_ll_set(L->proc, tn, idcs, troupe_sc_constant(L->proc, t->u.fetch.values[k]));
        if (items[k] == NULL)
            return s_proc_status(L);
        for (int a = tn->ndims - 1; a >= 0; a--) {
            if (++pos[a] < tn->dims[a])
                break;
            pos[a] = 0;
        }
    }
    *out = troupe_ll_seq(L->proc, n, items);
    return *out != NULL ? TROUPE_OK : s_proc_status(L);
}

static troupe_status_t s_lower_fetch(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    troupe_tnode_t *tn = t->u.fetch.tn;
    switch (t->u.fetch.kind) {
    case TROUPE_FETCH_CONSTANT:
        return s_fill_constant(L, tn, t->u.fetch.constant, out);
    case TROUPE_FETCH_CONSTANT_BITS:
        return s_loop_over_dims(L, tn, s_cell_bits, &t->u.fetch.constant_bits, out);
    case TROUPE_FETCH_CONSTANT_FILL:
        return s_lower_fill(L, t, out);
    case TROUPE_FETCH_RANGE_OVER_OFFSETS:
        return s_loop_over_dims(L, tn, s_cell_offset, NULL, out);
    case TROUPE_FETCH_SLICE:
        return s_loop_over_dims(L, tn, s_cell_slice, t, out);
    case TROUPE_FETCH_EMBED_SYMBOL:
        return s_loop_over_dims(L, tn, s_cell_symbol, t, out);
    case TROUPE_FETCH_EMBED_SELF_ID: {
        int64_t id = tn->id;
        return s_loop_over_dims(L, tn, s_cell_bits, &id, out);
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown fetch kind %d", (int)t->u.fetch.kind);
}

static troupe_status_t s_lower(s_lower_t *L, const troupe_asgn_t *t, troupe_ll_t **out)
{
    if (t == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "lowering: missing assignment");
    switch (t->kind) {
    case TROUPE_ASGN_NOOP:
        *out = troupe_ll_noop(L->proc);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    case TROUPE_ASGN_SEQ: {
        size_t n = t->u.seq.count;
        troupe_ll_t **items = troupe_ll_alloc(L->proc, (n > 0 ? n : 1) * sizeof *items);
        if (items == NULL)
            return s_proc_status(L);
        for (size_t i = 0; i < n; i++)
            TROUPE_RETURN_IF_ERROR(s_lower(L, t->u.seq.items[i], &items[i]));
        *out = troupe_ll_seq(L->proc, n, items);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    case TROUPE_ASGN_BLOCK_COMMENT: {
        troupe_ll_t *items[3];
        items[0] = troupe_ll_comment(L->proc, t->u.block_comment.text);
        TROUPE_RETURN_IF_ERROR(s_lower(L, t->u.block_comment.body, &items[1]));
        items[2] = troupe_ll_comment(L->proc, "end");
        if (items[0] == NULL || items[2] == NULL)
            return s_proc_status(L);
        *out = troupe_ll_seq(L->proc, 3, items);
        return *out != NULL ? TROUPE_OK : s_proc_status(L);
    }
    case TROUPE_ASGN_ACCUM_OP:
        return s_lower_accum(L, t, out);
    case TROUPE_ASGN_SET_VEC_UNOP:
        return s_lower_vec(L, t, out);
    case TROUPE_ASGN_FETCH:
        return s_lower_fetch(L, t, out);
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown assignment kind %d", (int)t->kind);
}

troupe_status_t troupe_asgn_lower_into(const troupe_asgn_comp_t *comp, const troupe_asgn_t *tree,
                                       troupe_ll_proc_t *proc, troupe_ll_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (comp == NULL || tree == NULL || proc == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_lower_into: NULL argument");
    s_lower_t L = {comp, proc, NULL};
    L.static_map = troupe_calloc((size_t)(comp->nsyms > 0 ? comp->nsyms : 1), sizeof(int32_t));
    if (L.static_map == NULL)
        return s_oom("lowering assignments");
    troupe_status_t st = TROUPE_OK;
    for (int32_t i = 0; i < comp->nsyms && st == TROUPE_OK; i++) {
        int32_t s = troupe_ll_proc_find_symbol(proc, comp->syms[i].name);
        if (s >= 0 && !proc->syms[s].is_static) {
            st = troupe__error(TROUPE_INVALID_ARGUMENT,
                               "lowering: procedure %s has a loop symbol named like static "
                               "symbol '%s'",
                               proc->name, comp->syms[i].name);
        } else if (s < 0) {
            s = troupe_ll_proc_add_static_symbol(proc, comp->syms[i].name, comp->syms[i].range);
            if (s < 0)
                st = s_proc_status(&L);
        }
        L.static_map[i] = s;
    }
    troupe_ll_t *res = NULL;
    if (st == TROUPE_OK)
        st = s_lower(&L, tree, &res);
    if (st == TROUPE_OK && troupe_ll_proc_status(proc) != TROUPE_OK)
        st = s_proc_status(&L);
    troupe_free(L.static_map);
    if (st == TROUPE_OK)
        *out = res;
    return st;
}

troupe_status_t troupe_asgn_lower(const troupe_asgn_comp_t *comp, const char *name,
                                  troupe_ll_proc_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (comp == NULL || out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_asgn_lower: NULL argument");
    troupe_ll_proc_t *proc;
    TROUPE_RETURN_IF_ERROR(troupe_ll_proc_new(name, &proc));
    troupe_ll_t *body;
    troupe_status_t st = troupe_asgn_lower_into(comp, comp->root, proc, &body);
    if (st != TROUPE_OK) {
        troupe_ll_proc_destroy(&proc);
        return st;
    }
    proc->body = body;
    *out = proc;
    return TROUPE_OK;
}
