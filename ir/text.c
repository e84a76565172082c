/* troupe — what the two text forms of ir/text.h share (ir/text_impl.h): node declarations,
 * symbol names, the printer's and the parser's frames, and the round-trip entry point of the
 * fuzzer. The low-level form is ir/text_lowlevel.c, the assignment form ir/text_assign.c, the
 * lexical level ir/sexp.c. */
#define _POSIX_C_SOURCE 200809L
#include "ir/text.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/names_impl.h"
#include "ir/text_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- C locale -------------------------------------------------------------------------------- */

/* Switches this thread to the C numeric locale (printf/strtod use '.'); best effort. */
void troupe__text_locale_enter(troupe__text_locale_t *l)
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

void troupe__text_locale_leave(troupe__text_locale_t *l)
{
    if (l->active) {
        uselocale(l->old);
        freelocale(l->c);
        l->active = false;
    }
}

/* ---- node table ------------------------------------------------------------------------------ */

static size_t s_ntab_lower(const troupe__text_ntab_t *t, int32_t id)
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

static troupe_tnode_t *s_ntab_find(const troupe__text_ntab_t *t, int32_t id)
{
    size_t i = s_ntab_lower(t, id);
    return i < t->count && t->nodes[i]->id == id ? t->nodes[i] : NULL;
}

/* Inserts (taking over the caller's reference). */
static bool s_ntab_insert(troupe__text_ntab_t *t, troupe_tnode_t *tn)
{
    if (!TROUPE__VEC_RESERVE(t->nodes, t->cap, t->count + 1))
        return false;
    size_t i = s_ntab_lower(t, tn->id);
    memmove(t->nodes + i + 1, t->nodes + i, (t->count - i) * sizeof *t->nodes);
    t->nodes[i] = tn;
    t->count++;
    return true;
}

static void s_ntab_free(troupe__text_ntab_t *t)
{
    for (size_t i = 0; i < t->count; i++)
        troupe_tnode_release(&t->nodes[i]);
    troupe_free(t->nodes);
    memset(t, 0, sizeof *t);
}

/* ---- symbol table ---------------------------------------------------------------------------- */

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
static int32_t s_stab_find(const troupe__text_stab_t *t, const char *const *names, const char *s,
                           size_t n)
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
static bool s_stab_add(troupe__text_stab_t *t, const char *const *names, int32_t id)
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

static void s_stab_free(troupe__text_stab_t *t)
{
    troupe_free(t->slots);
    memset(t, 0, sizeof *t);
}

/* ---- printing -------------------------------------------------------------------------------- */

/* Fails when two symbols share a name (the text refers to symbols by name). */
static troupe_status_t s_check_unique_names(const char *const *names, int32_t n)
{
    troupe__text_stab_t t = {0};
    troupe_status_t st = TROUPE_OK;
    for (int32_t i = 0; i < n && st == TROUPE_OK; i++) {
        if (!troupe__ir_is_identifier(names[i]))
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

/* The name of symbol i of the tree being printed. */
typedef const char *(*s_name_fn)(const void *tree, int32_t i);

static troupe_status_t s_printer_open(troupe__text_printer_t *c, const char *fn, const char *arg,
                                      const void *tree, int32_t nsyms, s_name_fn name_of,
                                      char **out)
{
    memset(c, 0, sizeof *c);
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (tree == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: %s is NULL", fn, arg);
    const char **names = troupe_calloc((size_t)(nsyms > 0 ? nsyms : 1), sizeof *names);
    if (names == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing");
    for (int32_t i = 0; i < nsyms; i++)
        names[i] = name_of(tree, i);
    troupe_status_t st = s_check_unique_names(names, nsyms);
    if (st != TROUPE_OK) {
        troupe_free(names);
        return st;
    }
    c->names = names;
    c->nsyms = nsyms;
    troupe__text_locale_enter(&c->loc);
    return TROUPE_OK;
}

static const char *s_proc_sym(const void *tree, int32_t i)
{
    return ((const troupe_ll_proc_t *)tree)->syms[i].name;
}

static const char *s_comp_sym(const void *tree, int32_t i)
{
    return ((const troupe_asgn_comp_t *)tree)->syms[i].name;
}

troupe_status_t troupe__text_printer_open_proc(troupe__text_printer_t *c,
                                               const troupe_ll_proc_t *proc, char **out)
{
    return s_printer_open(c, "troupe_text_print_proc", "proc", proc, proc ? proc->nsyms : 0,
                          s_proc_sym, out);
}

troupe_status_t troupe__text_printer_open_comp(troupe__text_printer_t *c,
                                               const troupe_asgn_comp_t *comp, char **out)
{
    return s_printer_open(c, "troupe_text_print_comp", "comp", comp, comp ? comp->nsyms : 0,
                          s_comp_sym, out);
}

troupe_status_t troupe__text_printer_close(troupe__text_printer_t *c, const char *what, char **out)
{
    troupe__text_locale_leave(&c->loc);
    troupe_free(c->names);
    c->names = NULL;
    *out = NULL;
    if (c->st != TROUPE_OK) {
        troupe__strbuf_reset(&c->sb);
        return c->st;
    }
    if (c->sb.failed) {
        troupe__strbuf_reset(&c->sb);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory printing %s", what);
    }
    return troupe__strbuf_finish(&c->sb, what, out, NULL);
}

void troupe__text_bad(troupe__text_printer_t *c, const char *what)
{
    if (c->st == TROUPE_OK)
        c->st = troupe__error(TROUPE_INVALID_ARGUMENT, "cannot print: %s", what);
}

void troupe__text_newline(troupe__text_printer_t *c, int indent)
{
    troupe__strbuf_putc(&c->sb, '\n');
    troupe__strbuf_repeat(&c->sb, " ", indent);
}

/* ---- parsing --------------------------------------------------------------------------------- */

troupe_status_t troupe__text_parser_open(troupe__text_parser_t *p, const char *fn, const char *text,
                                         size_t len, const char *form)
{
    memset(p, 0, sizeof *p);
    troupe__text_locale_enter(&p->loc);
    if (text == NULL && len > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: text is NULL", fn);
    char what[48];
    snprintf(what, sizeof what, "'(%s'", form);
    TROUPE_RETURN_IF_ERROR(troupe__sexp_reader_init(&p->r, text ? text : "", len));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, what));
    return troupe__sexp_keyword(&p->r, form);
}

troupe_status_t troupe__text_parse_end(troupe__text_parser_t *p, const char *form_name)
{
    TROUPE_RETURN_IF_ERROR(troupe__sexp_rp(&p->r, "the body"));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_rp(&p->r, form_name));
    if (p->r.tk != TROUPE__SEXP_EOF)
        return troupe__sexp_expected(&p->r, "end of input");
    return TROUPE_OK;
}

void troupe__text_parser_close(troupe__text_parser_t *p)
{
    s_ntab_free(&p->nodes);
    s_stab_free(&p->syms);
    troupe_free(p->sym_names);
    troupe_free(p->scopes);
    troupe__sexp_reader_fini(&p->r);
    troupe__text_locale_leave(&p->loc);
    p->sym_names = NULL;
    p->scopes = NULL;
}

void troupe__text_head(const troupe__text_parser_t *p, char *buf, size_t cap)
{
    if (!troupe__sexp_atom_copy(&p->r, buf, cap))
        buf[0] = '\0';
}

/* ---- node declarations and symbol references ------------------------------------------------- */

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

void troupe__text_print_node_decl(troupe__text_printer_t *c, const troupe_tnode_t *tn)
{
    troupe__strbuf_t *sb = &c->sb;
    troupe__strbuf_printf(sb, "(node %" PRId32 " (label", tn->id);
    for (size_t i = 0; i < tn->label_count; i++) {
        troupe__strbuf_puts(sb, " ");
        troupe__sexp_put_quoted(sb, tn->label[i]);
    }
    troupe__strbuf_printf(sb, ") %s (dims", troupe_prec_name(tn->prec));
    for (int a = 0; a < tn->ndims; a++)
        troupe__strbuf_printf(sb, " %" PRId64, tn->dims[a]);
    troupe__strbuf_puts(sb, ")");
    if (tn->has_padding) {
        troupe__strbuf_puts(sb, " (padding ");
        troupe__sexp_put_double(sb, tn->padding_value);
        for (int a = 0; a < tn->ndims; a++)
            troupe__strbuf_printf(sb, " (%" PRId64 " %" PRId64 ")", tn->padding[a].left,
                                  tn->padding[a].right);
        troupe__strbuf_puts(sb, ")");
    }
    troupe__strbuf_puts(sb, ")");
}

/* (node ID (label ...) PREC (dims ...) [(padding V (L R)...)]): declares a node in p->nodes,
 * reusing a matching live node. */
static troupe_status_t s_parse_node_decl(troupe__text_parser_t *p)
{
    troupe_status_t st = TROUPE_OK;
    char **labels = NULL;
    size_t nlabels = 0, labels_cap = 0;
    int line = p->r.tline, col = p->r.tcol;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(' starting a node declaration"));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "node"));
    int64_t id = 0;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_int(&p->r, "a node id (1..2147483647)", 1, INT32_MAX, &id));
    if ((st = troupe__sexp_lp(&p->r, "'(label'")) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_keyword(&p->r, "label")) != TROUPE_OK)
        goto done;
    while (p->r.tk == TROUPE__SEXP_ATOM || p->r.tk == TROUPE__SEXP_STR) {
        if (!TROUPE__VEC_RESERVE(labels, labels_cap, nlabels + 1)) {
            st = troupe__sexp_oom();
            goto done;
        }
        char *s;
        if (p->r.tk == TROUPE__SEXP_STR) {
            s = troupe_strdup(p->r.str);
        } else {
            s = troupe_malloc(p->r.tlen + 1);
            if (s != NULL) {
                memcpy(s, p->r.src + p->r.tstart, p->r.tlen);
                s[p->r.tlen] = '\0';
            }
        }
        if (s == NULL) {
            st = troupe__sexp_oom();
            goto done;
        }
        labels[nlabels++] = s;
        if ((st = troupe__sexp_next(&p->r)) != TROUPE_OK)
            goto done;
    }
    if ((st = troupe__sexp_rp(&p->r, "the label list")) != TROUPE_OK)
        goto done;
    char pname[32];
    troupe_prec_t prec;
    if (!troupe__sexp_atom_copy(&p->r, pname, sizeof pname) ||
        troupe_prec_of_string(pname, &prec) != TROUPE_OK || prec == TROUPE_PREC_VOID) {
        st = troupe__sexp_expected(
            &p->r, "a precision (byte uint16 int32 uint32 int64 uint64 uint4x32 half "
                   "bfloat16 fp8 single double)");
        goto done;
    }
    if ((st = troupe__sexp_next(&p->r)) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_lp(&p->r, "'(dims'")) != TROUPE_OK ||
        (st = troupe__sexp_keyword(&p->r, "dims")) != TROUPE_OK)
        goto done;
    int64_t dims[TROUPE_MAX_DIMS];
    int ndims = 0;
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (ndims == TROUPE_MAX_DIMS) {
            st = troupe__sexp_expected(&p->r, "')' (at most 8 dims)");
            goto done;
        }
        if ((st = troupe__sexp_int(&p->r, "a positive dim", 1, INT64_MAX, &dims[ndims])) !=
            TROUPE_OK)
            goto done;
        ndims++;
    }
    if ((st = troupe__sexp_rp(&p->r, "the dims")) != TROUPE_OK)
        goto done;
    troupe_axis_padding_t padding[TROUPE_MAX_DIMS];
    memset(padding, 0, sizeof padding);
    bool has_padding = false;
    double padding_value = 0.0;
    if (p->r.tk == TROUPE__SEXP_LP) {
        has_padding = true;
        if ((st = troupe__sexp_lp(&p->r, "'(padding'")) != TROUPE_OK ||
            (st = troupe__sexp_keyword(&p->r, "padding")) != TROUPE_OK ||
            (st = troupe__sexp_value(&p->r, "a padding value", &padding_value)) != TROUPE_OK)
            goto done;
        for (int a = 0; a < ndims; a++) {
            if ((st = troupe__sexp_lp(&p->r, "'(' starting an axis padding (left right)")) !=
                    TROUPE_OK ||
                (st = troupe__sexp_int(&p->r, "a left padding >= 0", 0, INT64_MAX,
                                       &padding[a].left)) != TROUPE_OK ||
                (st = troupe__sexp_int(&p->r, "a right padding >= 0", 0, INT64_MAX,
                                       &padding[a].right)) != TROUPE_OK ||
                (st = troupe__sexp_rp(&p->r, "the axis padding")) != TROUPE_OK)
                goto done;
        }
        if ((st = troupe__sexp_rp(&p->r, "the padding (one (left right) per dim)")) != TROUPE_OK)
            goto done;
    }
    if ((st = troupe__sexp_rp(&p->r, "the node declaration")) != TROUPE_OK)
        goto done;

    if (s_ntab_find(&p->nodes, (int32_t)id) != NULL) {
        st = troupe__sexp_err_at(line, col, "node %" PRId64 " declared twice", id);
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
            same = troupe__sexp_double_bits(tn->padding_value) ==
                   troupe__sexp_double_bits(padding_value);
        if (!same) {
            char want[256], have[256];
            bool show = has_padding || tn->has_padding;
            s_node_desc(want, sizeof want, prec, ndims, dims, has_padding, padding, padding_value,
                        show);
            s_node_desc(have, sizeof have, tn->prec, tn->ndims, tn->dims, tn->has_padding,
                        tn->padding, tn->padding_value, show);
            troupe_tnode_release(&tn);
            st = troupe__sexp_err_at(
                line, col, "node %" PRId64 ": declared %s but the live node is %s", id, want, have);
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
                st = troupe__sexp_err_at(line, col, "node %" PRId64 ": %s", id, msg);
            goto done;
        }
    }
    if (!s_ntab_insert(&p->nodes, tn)) {
        troupe_tnode_release(&tn);
        st = troupe__sexp_oom();
        goto done;
    }
done:
    for (size_t i = 0; i < nlabels; i++)
        troupe_free(labels[i]);
    troupe_free(labels);
    return st;
}

/* (nodes NODE*) */
troupe_status_t troupe__text_parse_nodes(troupe__text_parser_t *p)
{
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(nodes'"));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "nodes"));
    while (p->r.tk == TROUPE__SEXP_LP)
        TROUPE_RETURN_IF_ERROR(s_parse_node_decl(p));
    return troupe__sexp_rp(&p->r, "the node list");
}

/* A node id in the body: declared, and returned. */
troupe_status_t troupe__text_node_ref(troupe__text_parser_t *p, troupe_tnode_t **out)
{
    int64_t id = 0;
    if (!troupe__sexp_atom_int(&p->r, &id))
        return troupe__sexp_expected(&p->r, "a node id");
    troupe_tnode_t *tn = id >= 1 && id <= INT32_MAX ? s_ntab_find(&p->nodes, (int32_t)id) : NULL;
    if (tn == NULL)
        return troupe__sexp_err_at(
            p->r.tline, p->r.tcol,
            "expected a declared node id, found %" PRId64 " (not in the node list)", id);
    *out = tn;
    return troupe__sexp_next(&p->r);
}

/* A symbol name in the body: declared; returns its id. */
troupe_status_t troupe__text_sym_ref(troupe__text_parser_t *p, const char *what, int32_t *out)
{
    if (!troupe__sexp_atom_ident(&p->r))
        return troupe__sexp_expected(&p->r, what);
    int32_t id = s_stab_find(&p->syms, p->sym_names, p->r.src + p->r.tstart, p->r.tlen);
    if (id < 0) {
        char found[64];
        troupe__sexp_describe(&p->r, found, sizeof found);
        return troupe__sexp_err_at(p->r.tline, p->r.tcol,
                                   "expected a declared symbol, found %s (not in the "
                                   "symbol list)",
                                   found);
    }
    *out = id;
    return troupe__sexp_next(&p->r);
}

troupe_status_t troupe__text_declare_sym(troupe__text_parser_t *p, int32_t id, const char *name)
{
    if (!TROUPE__VEC_RESERVE(p->sym_names, p->sym_names_cap, (size_t)id + 1))
        return troupe__sexp_oom();
    p->sym_names[id] = name;
    p->nsyms = id + 1;
    if (!s_stab_add(&p->syms, p->sym_names, id))
        return troupe__sexp_oom();
    return TROUPE_OK;
}

troupe_status_t troupe__text_sym_decl_head(troupe__text_parser_t *p, int32_t expected, char *name,
                                           size_t cap)
{
    char what[64];
    snprintf(what, sizeof what, "symbol id %" PRId32 " (ids run 0, 1, ...)", expected);
    int64_t id = 0;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_int(&p->r, what, expected, expected, &id));
    if (!troupe__sexp_atom_ident(&p->r))
        return troupe__sexp_expected(&p->r, "a symbol name ([A-Za-z_][A-Za-z0-9_]*)");
    if (s_stab_find(&p->syms, p->sym_names, p->r.src + p->r.tstart, p->r.tlen) >= 0) {
        char found[64];
        troupe__sexp_describe(&p->r, found, sizeof found);
        return troupe__sexp_err_at(p->r.tline, p->r.tcol,
                                   "expected a new symbol name, found %s (declared "
                                   "twice)",
                                   found);
    }
    troupe__sexp_atom_copy(&p->r, name, cap);
    return troupe__sexp_next(&p->r);
}

/* ---- round-trip entry point (fuzzer and seed corpus) ----------------------------------------- */

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
