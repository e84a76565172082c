/* troupe — the S-expression text of low-level procedures (ir/text.h, "Low-level procedures"):
 * indices, the printer and the parser. The pieces both text forms use are ir/text.c. */
#define _POSIX_C_SOURCE 200809L
#include "ir/text.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/text_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- indices --------------------------------------------------------------------------------- */

static void s_print_index(troupe__strbuf_t *sb, const troupe_axis_index_t *idx,
                          const char *const *names)
{
    if (idx->nterms == 0) {
        troupe__strbuf_printf(sb, "%" PRId64, idx->offset);
        return;
    }
    if (idx->nterms == 1 && idx->terms[0].coeff == 1 && idx->offset == 0) {
        troupe__strbuf_puts(sb, names[idx->terms[0].sym]);
        return;
    }
    troupe__strbuf_puts(sb, "(+");
    for (int k = 0; k < idx->nterms; k++) {
        if (idx->terms[k].coeff == 1)
            troupe__strbuf_printf(sb, " %s", names[idx->terms[k].sym]);
        else {
            troupe__strbuf_printf(sb, " (* %" PRId64 " ", idx->terms[k].coeff);
            troupe__strbuf_puts(sb, names[idx->terms[k].sym]);
            troupe__strbuf_puts(sb, ")");
        }
    }
    if (idx->offset != 0)
        troupe__strbuf_printf(sb, " %" PRId64, idx->offset);
    troupe__strbuf_puts(sb, ")");
}

/* (* INT NAME) after the '(' and '*' were consumed. */
static troupe_status_t s_parse_scaled_term(troupe__text_parser_t *p, troupe_index_term_t *t)
{
    TROUPE_RETURN_IF_ERROR(
        troupe__sexp_int(&p->r, "a coefficient", INT64_MIN, INT64_MAX, &t->coeff));
    TROUPE_RETURN_IF_ERROR(troupe__text_sym_ref(p, "a symbol name", &t->sym));
    return troupe__sexp_rp(&p->r, "the term (* coeff symbol)");
}

static troupe_status_t s_parse_index(troupe__text_parser_t *p, troupe_axis_index_t *idx)
{
    memset(idx, 0, sizeof *idx);
    if (p->r.tk == TROUPE__SEXP_ATOM) {
        if (troupe__sexp_atom_int(&p->r, &idx->offset))
            return troupe__sexp_next(&p->r);
        if (troupe__sexp_atom_ident(&p->r)) {
            idx->nterms = 1;
            idx->terms[0].coeff = 1;
            return troupe__text_sym_ref(p, "a symbol name", &idx->terms[0].sym);
        }
        return troupe__sexp_expected(&p->r, "an index (integer, symbol, (+ ...) or (* c s))");
    }
    TROUPE_RETURN_IF_ERROR(
        troupe__sexp_lp(&p->r, "an index (integer, symbol, (+ ...) or (* c s))"));
    if (troupe__sexp_is(&p->r, "*")) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        idx->nterms = 1;
        return s_parse_scaled_term(p, &idx->terms[0]);
    }
    TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "+"));
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (troupe__sexp_atom_int(&p->r, &idx->offset)) {
            TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
            break; /* the offset comes last */
        }
        if (idx->nterms == TROUPE_MAX_INDEX_TERMS)
            return troupe__sexp_expected(&p->r, "')' (at most 4 terms in an index)");
        troupe_index_term_t *t = &idx->terms[idx->nterms];
        if (p->r.tk == TROUPE__SEXP_LP) {
            TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "a term"));
            TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "*"));
            TROUPE_RETURN_IF_ERROR(s_parse_scaled_term(p, t));
        } else {
            t->coeff = 1;
            TROUPE_RETURN_IF_ERROR(troupe__text_sym_ref(
                p, "a term (symbol or (* coeff symbol)) or the offset", &t->sym));
        }
        idx->nterms++;
    }
    return troupe__sexp_rp(&p->r, "the index (+ ...)");
}

static void s_print_idcs(troupe__strbuf_t *sb, const troupe_axis_index_t *idcs, int n,
                         const char *const *names)
{
    troupe__strbuf_puts(sb, "(");
    for (int a = 0; a < n; a++) {
        if (a > 0)
            troupe__strbuf_puts(sb, " ");
        s_print_index(sb, &idcs[a], names);
    }
    troupe__strbuf_puts(sb, ")");
}

/* (IDX*) with exactly tn->ndims entries. */
static troupe_status_t s_parse_idcs(troupe__text_parser_t *p, const troupe_tnode_t *tn,
                                    troupe_axis_index_t *idcs)
{
    int line = p->r.tline, col = p->r.tcol;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(' starting an index list"));
    int n = 0;
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (n == tn->ndims)
            return troupe__sexp_err_at(p->r.tline, p->r.tcol,
                                       "expected ')' after %d indices (node %" PRId32
                                       " has %d dims), found another index",
                                       n, tn->id, tn->ndims);
        TROUPE_RETURN_IF_ERROR(s_parse_index(p, &idcs[n]));
        n++;
    }
    if (n != tn->ndims)
        return troupe__sexp_err_at(line, col, "expected %d indices for node %" PRId32 ", found %d",
                                   tn->ndims, tn->id, n);
    return troupe__sexp_rp(&p->r, "the index list");
}

/* ---- printer --------------------------------------------------------------------------------- */

static bool s_check_idcs(troupe__text_printer_t *c, const troupe_axis_index_t *idcs, int n)
{
    if (n > 0 && idcs == NULL) {
        troupe__text_bad(c, "missing index array");
        return false;
    }
    for (int a = 0; a < n; a++) {
        if (idcs[a].nterms < 0 || idcs[a].nterms > TROUPE_MAX_INDEX_TERMS) {
            troupe__text_bad(c, "index with a bad number of terms");
            return false;
        }
        for (int k = 0; k < idcs[a].nterms; k++)
            if (idcs[a].terms[k].sym < 0 || idcs[a].terms[k].sym >= c->nsyms) {
                troupe__text_bad(c, "index refers to a symbol id outside the symbol table");
                return false;
            }
    }
    return true;
}

static void s_print_stmt(troupe__text_printer_t *c, const troupe_ll_t *s, int indent, int depth);

static void s_print_sc(troupe__text_printer_t *c, const troupe_sc_t *e, int depth)
{
    troupe__strbuf_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (e == NULL) {
        troupe__text_bad(c, "missing scalar");
        return;
    }
    if (depth > TROUPE__TEXT_MAX_TREE_DEPTH) {
        troupe__text_bad(c, "tree nested deeper than the text form allows");
        return;
    }
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        if (e->u.local_scope.tn == NULL ||
            !s_check_idcs(c, e->u.local_scope.orig_indices, e->u.local_scope.tn->ndims))
            return troupe__text_bad(c, "malformed local_scope");
        troupe__strbuf_printf(sb, "(local_scope %" PRId32 " %" PRId32 " ", e->u.local_scope.id,
                              e->u.local_scope.tn->id);
        s_print_idcs(sb, e->u.local_scope.orig_indices, e->u.local_scope.tn->ndims, c->names);
        troupe__strbuf_puts(sb, " ");
        s_print_stmt(c, e->u.local_scope.body, -1, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_SC_GET_LOCAL:
        troupe__strbuf_printf(sb, "(get_local %" PRId32 ")", e->u.get_local.id);
        return;
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        if (e->u.get.tn == NULL || !s_check_idcs(c, e->u.get.idcs, e->u.get.tn->ndims))
            return troupe__text_bad(c, "malformed get");
        troupe__strbuf_printf(sb, "(%s %" PRId32 " ",
                              e->kind == TROUPE_SC_GET ? "get" : "get_merge_buffer",
                              e->u.get.tn->id);
        s_print_idcs(sb, e->u.get.idcs, e->u.get.tn->ndims, c->names);
        troupe__strbuf_puts(sb, ")");
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
            return troupe__text_bad(c, "operation out of range");
        troupe__strbuf_printf(sb, "(%s", name);
        for (int i = 0; i < n; i++) {
            troupe__strbuf_puts(sb, " ");
            s_print_sc(c, e->u.op.args[i], depth + 1);
        }
        troupe__strbuf_puts(sb, ")");
        return;
    }
    case TROUPE_SC_CONSTANT:
        troupe__sexp_put_double(sb, e->u.constant);
        return;
    case TROUPE_SC_CONSTANT_BITS:
        troupe__sexp_put_bits(sb, e->u.constant_bits);
        return;
    case TROUPE_SC_EMBED_INDEX:
        if (!s_check_idcs(c, &e->u.embed_index, 1))
            return;
        troupe__strbuf_puts(sb, "(embed ");
        s_print_index(sb, &e->u.embed_index, c->names);
        troupe__strbuf_puts(sb, ")");
        return;
    }
    troupe__text_bad(c, "unknown scalar kind");
}

/* indent < 0: everything on one line. */
static void s_print_stmt(troupe__text_printer_t *c, const troupe_ll_t *s, int indent, int depth)
{
    troupe__strbuf_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (s == NULL) {
        troupe__text_bad(c, "missing statement");
        return;
    }
    if (depth > TROUPE__TEXT_MAX_TREE_DEPTH) {
        troupe__text_bad(c, "tree nested deeper than the text form allows");
        return;
    }
    int inner = indent < 0 ? -1 : indent + 2;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
        troupe__strbuf_puts(sb, "(noop)");
        return;
    case TROUPE_LL_COMMENT:
        troupe__strbuf_puts(sb, "(comment ");
        troupe__sexp_put_quoted(sb, s->u.comment ? s->u.comment : "");
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_SEQ:
        if (s->u.seq.count > 0 && s->u.seq.items == NULL)
            return troupe__text_bad(c, "seq without items");
        troupe__strbuf_puts(sb, "(seq");
        for (size_t i = 0; i < s->u.seq.count; i++) {
            if (inner < 0)
                troupe__strbuf_puts(sb, " ");
            else
                troupe__text_newline(c, inner);
            s_print_stmt(c, s->u.seq.items[i], inner, depth + 1);
        }
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_FOR:
        if (s->u.for_loop.sym < 0 || s->u.for_loop.sym >= c->nsyms)
            return troupe__text_bad(c, "for loop over a symbol id outside the symbol table");
        troupe__strbuf_printf(sb, "(for %s %" PRId64 " %" PRId64 "%s", c->names[s->u.for_loop.sym],
                              s->u.for_loop.from, s->u.for_loop.to,
                              s->u.for_loop.trace_it ? "" : " untraced");
        if (inner < 0)
            troupe__strbuf_puts(sb, " ");
        else
            troupe__text_newline(c, inner);
        s_print_stmt(c, s->u.for_loop.body, inner, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_ZERO_OUT:
        if (s->u.zero_out == NULL)
            return troupe__text_bad(c, "zero_out without a node");
        troupe__strbuf_printf(sb, "(zero_out %" PRId32 ")", s->u.zero_out->id);
        return;
    case TROUPE_LL_SET:
        if (s->u.set.tn == NULL || !s_check_idcs(c, s->u.set.idcs, s->u.set.tn->ndims))
            return troupe__text_bad(c, "malformed set");
        troupe__strbuf_printf(sb, "(set %" PRId32 " ", s->u.set.tn->id);
        s_print_idcs(sb, s->u.set.idcs, s->u.set.tn->ndims, c->names);
        troupe__strbuf_puts(sb, " ");
        s_print_sc(c, s->u.set.value, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_SET_FROM_VEC:
        if (s->u.set_from_vec.tn == NULL || !troupe_vec_unop_is_valid(s->u.set_from_vec.op) ||
            !s_check_idcs(c, s->u.set_from_vec.idcs, s->u.set_from_vec.tn->ndims))
            return troupe__text_bad(c, "malformed set_from_vec");
        troupe__strbuf_printf(sb, "(set_from_vec %" PRId32 " ", s->u.set_from_vec.tn->id);
        s_print_idcs(sb, s->u.set_from_vec.idcs, s->u.set_from_vec.tn->ndims, c->names);
        troupe__strbuf_printf(sb, " %d %s ", s->u.set_from_vec.length,
                              troupe_vec_unop_name(s->u.set_from_vec.op));
        s_print_sc(c, s->u.set_from_vec.arg, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_SET_LOCAL:
        troupe__strbuf_printf(sb, "(set_local %" PRId32 " ", s->u.set_local.id);
        s_print_sc(c, s->u.set_local.value, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_LL_BIND_INDEX:
        if (s->u.bind_index.sym < 0 || s->u.bind_index.sym >= c->nsyms ||
            s->u.bind_index.tn == NULL ||
            !s_check_idcs(c, s->u.bind_index.idcs, s->u.bind_index.tn->ndims))
            return troupe__text_bad(c, "malformed bind_index");
        troupe__strbuf_printf(sb, "(bind_index %s %" PRId32 " ", c->names[s->u.bind_index.sym],
                              s->u.bind_index.tn->id);
        s_print_idcs(sb, s->u.bind_index.idcs, s->u.bind_index.tn->ndims, c->names);
        troupe__strbuf_printf(sb, " %" PRId64 " ", s->u.bind_index.range);
        if (s->u.bind_index.table != NULL)
            troupe__strbuf_printf(sb, "%" PRId32, s->u.bind_index.table->id);
        else
            troupe__strbuf_puts(sb, "none");
        troupe__strbuf_printf(sb, " %d", s->u.bind_index.axis);
        if (inner < 0)
            troupe__strbuf_puts(sb, " ");
        else
            troupe__text_newline(c, inner);
        s_print_stmt(c, s->u.bind_index.body, inner, depth + 1);
        troupe__strbuf_puts(sb, ")");
        return;
    }
    troupe__text_bad(c, "unknown statement kind");
}

troupe_status_t troupe_text_print_proc(const troupe_ll_proc_t *proc, char **out)
{
    troupe__text_printer_t c;
    TROUPE_RETURN_IF_ERROR(troupe__text_printer_open_proc(&c, proc, out));
    const char *const *names = c.names;
    troupe__strbuf_t *sb = &c.sb;
    troupe__strbuf_puts(sb, "(proc ");
    troupe__strbuf_puts(sb, proc->name);
    troupe__strbuf_puts(sb, "\n  (nodes");
    for (size_t i = 0; i < proc->nnodes; i++) {
        troupe__text_newline(&c, 4);
        troupe__text_print_node_decl(&c, proc->nodes[i]);
    }
    troupe__strbuf_puts(sb, ")\n  (symbols");
    for (int32_t i = 0; i < proc->nsyms; i++) {
        troupe__text_newline(&c, 4);
        if (proc->syms[i].is_static)
            troupe__strbuf_printf(sb, "(static %" PRId32 " %s %" PRId64 ")", i, names[i],
                                  proc->syms[i].static_range);
        else
            troupe__strbuf_printf(sb, "(sym %" PRId32 " %s)", i, names[i]);
    }
    troupe__strbuf_puts(sb, ")\n  (body");
    troupe__text_newline(&c, 4);
    s_print_stmt(&c, proc->body, 4, 0);
    troupe__strbuf_puts(sb, "))\n");
    char what[160];
    snprintf(what, sizeof what, "procedure %s", proc->name);
    return troupe__text_printer_close(&c, what, out);
}

/* ---- parser ---------------------------------------------------------------------------------- */

static troupe_status_t s_ll_status(troupe__text_parser_t *p, const void *built)
{
    if (built != NULL)
        return TROUPE_OK;
    if (troupe_ll_proc_status(p->proc) == TROUPE_RESOURCE_EXHAUSTED)
        return troupe__sexp_oom();
    return troupe__error(troupe_ll_proc_status(p->proc) ? troupe_ll_proc_status(p->proc)
                                                        : TROUPE_INTERNAL,
                         "building the procedure failed");
}

static bool s_scope_open(const troupe__text_parser_t *p, int32_t id)
{
    for (size_t i = 0; i < p->nscopes; i++)
        if (p->scopes[i] == id)
            return true;
    return false;
}

static troupe_status_t s_scope_id(troupe__text_parser_t *p, bool must_be_open, int32_t *out)
{
    int64_t id = 0;
    int line = p->r.tline, col = p->r.tcol;
    TROUPE_RETURN_IF_ERROR(
        troupe__sexp_int(&p->r, "a scope id (an int32)", INT32_MIN, INT32_MAX, &id));
    if (must_be_open && !s_scope_open(p, (int32_t)id))
        return troupe__sexp_err_at(
            line, col, "expected the id of an enclosing local_scope, found %" PRId64, id);
    *out = (int32_t)id;
    return TROUPE_OK;
}

static troupe_status_t s_parse_stmt(troupe__text_parser_t *p, troupe_ll_t **out);

static troupe_status_t s_parse_sc(troupe__text_parser_t *p, troupe_sc_t **out)
{
    troupe_ll_proc_t *proc = p->proc;
    *out = NULL;
    if (p->r.tk == TROUPE__SEXP_ATOM) {
        int64_t bits = 0;
        double v;
        if (troupe__sexp_atom_bits(&p->r, &bits)) {
            *out = troupe_sc_constant_bits(proc, bits);
        } else if (troupe__sexp_atom_number(&p->r, &v)) {
            *out = troupe_sc_constant(proc, v);
        } else {
            return troupe__sexp_expected(&p->r, "a scalar (number, #x bits or a form)");
        }
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_next(&p->r);
    }
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "a scalar (number, #x bits or a form)"));
    char head[48];
    troupe__text_head(p, head, sizeof head);
    if (strcmp(head, "f64") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int64_t bits = 0;
        if (!troupe__sexp_atom_bits(&p->r, &bits))
            return troupe__sexp_expected(&p->r, "a bit pattern #xHH...");
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        *out = troupe_sc_constant(proc, troupe__sexp_bits_double((uint64_t)bits));
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_rp(&p->r, "f64");
    }
    if (strcmp(head, "get") == 0 || strcmp(head, "get_merge_buffer") == 0) {
        bool merge = head[3] != '\0';
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        *out = merge ? troupe_sc_get_merge_buffer(proc, tn, idcs) : troupe_sc_get(proc, tn, idcs);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_rp(&p->r, head);
    }
    if (strcmp(head, "get_local") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t id = 0;
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, true, &id));
        *out = troupe_sc_get_local(proc, id);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_rp(&p->r, "get_local");
    }
    if (strcmp(head, "local_scope") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t id = 0;
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, false, &id));
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        if (!TROUPE__VEC_PUSH(p->scopes, p->nscopes, p->scopes_cap, id))
            return troupe__sexp_oom();
        troupe_ll_t *body = NULL;
        troupe_status_t st = s_parse_stmt(p, &body);
        p->nscopes--;
        TROUPE_RETURN_IF_ERROR(st);
        *out = troupe_sc_local_scope(proc, id, tn, body, idcs);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_rp(&p->r, "local_scope");
    }
    if (strcmp(head, "embed") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_axis_index_t idx;
        TROUPE_RETURN_IF_ERROR(s_parse_index(p, &idx));
        *out = troupe_sc_embed_index(proc, idx);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        return troupe__sexp_rp(&p->r, "embed");
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
        return troupe__sexp_expected(
            &p->r, "a scalar form (get get_merge_buffer get_local local_scope embed "
                   "f64 or an operation name of ir/ops.h)");
    }
    TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
    troupe_sc_t *args[3] = {NULL, NULL, NULL};
    for (int i = 0; i < arity; i++) {
        if (p->r.tk == TROUPE__SEXP_RP) {
            char what[96];
            snprintf(what, sizeof what, "argument %d of %s (it takes %d)", i + 1, head, arity);
            return troupe__sexp_expected(&p->r, what);
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
    return troupe__sexp_rp(&p->r, closing);
}

static troupe_status_t s_parse_seq(troupe__text_parser_t *p, troupe_ll_t **out)
{
    troupe_ll_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (!TROUPE__VEC_RESERVE(items, cap, n + 1)) {
            st = troupe__sexp_oom();
            goto done;
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

static troupe_status_t s_parse_stmt(troupe__text_parser_t *p, troupe_ll_t **out)
{
    troupe_ll_proc_t *proc = p->proc;
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(' starting a statement"));
    char head[32];
    troupe__text_head(p, head, sizeof head);
    if (strcmp(head, "noop") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        *out = troupe_ll_noop(proc);
    } else if (strcmp(head, "comment") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        if (p->r.tk != TROUPE__SEXP_STR)
            return troupe__sexp_expected(&p->r, "a string");
        *out = troupe_ll_comment(proc, p->r.str);
        TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
    } else if (strcmp(head, "seq") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(s_parse_seq(p, out));
    } else if (strcmp(head, "for") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t sym = 0;
        int line = p->r.tline, col = p->r.tcol;
        TROUPE_RETURN_IF_ERROR(troupe__text_sym_ref(p, "a loop symbol", &sym));
        if (proc->syms[sym].is_static)
            return troupe__sexp_err_at(line, col,
                                       "expected a loop symbol, found static symbol '%s'",
                                       proc->syms[sym].name);
        int64_t from = 0, to = 0;
        TROUPE_RETURN_IF_ERROR(
            troupe__sexp_int(&p->r, "the first value (integer)", INT64_MIN, INT64_MAX, &from));
        TROUPE_RETURN_IF_ERROR(
            troupe__sexp_int(&p->r, "the last value (integer)", INT64_MIN, INT64_MAX, &to));
        bool trace_it = true;
        if (troupe__sexp_is(&p->r, "untraced")) {
            trace_it = false;
            TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        }
        troupe_ll_t *body;
        TROUPE_RETURN_IF_ERROR(s_parse_stmt(p, &body));
        *out = troupe_ll_for(proc, sym, from, to, body, trace_it);
    } else if (strcmp(head, "zero_out") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_tnode_t *tn;
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        *out = troupe_ll_zero_out(proc, tn);
    } else if (strcmp(head, "set") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        troupe_sc_t *v;
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set(proc, tn, idcs, v);
    } else if (strcmp(head, "set_from_vec") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_tnode_t *tn;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        troupe_sc_t *v;
        int64_t length = 0;
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        TROUPE_RETURN_IF_ERROR(
            troupe__sexp_int(&p->r, "a length (an int)", INT32_MIN, INT32_MAX, &length));
        char opname[48];
        troupe_vec_unop_t op;
        if (!troupe__sexp_atom_copy(&p->r, opname, sizeof opname) ||
            troupe_vec_unop_of_string(opname, &op) != TROUPE_OK)
            return troupe__sexp_expected(&p->r,
                                         "a vector operation name (uint4x32_to_prec_uniform)");
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set_from_vec(proc, tn, idcs, (int)length, op, v);
    } else if (strcmp(head, "set_local") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t id = 0;
        troupe_sc_t *v;
        TROUPE_RETURN_IF_ERROR(s_scope_id(p, true, &id));
        TROUPE_RETURN_IF_ERROR(s_parse_sc(p, &v));
        *out = troupe_ll_set_local(proc, id, v);
    } else if (strcmp(head, "bind_index") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t sym = 0;
        int line = p->r.tline, col = p->r.tcol;
        TROUPE_RETURN_IF_ERROR(troupe__text_sym_ref(p, "a loop symbol", &sym));
        if (proc->syms[sym].is_static)
            return troupe__sexp_err_at(line, col,
                                       "expected a loop symbol, found static symbol '%s'",
                                       proc->syms[sym].name);
        troupe_tnode_t *tn, *table = NULL;
        troupe_axis_index_t idcs[TROUPE_MAX_DIMS];
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
        TROUPE_RETURN_IF_ERROR(s_parse_idcs(p, tn, idcs));
        int64_t range = 0, axis = 0;
        TROUPE_RETURN_IF_ERROR(
            troupe__sexp_int(&p->r, "the index range (an integer >= 1)", 1, INT64_MAX, &range));
        if (troupe__sexp_is(&p->r, "none"))
            TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        else
            TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &table));
        TROUPE_RETURN_IF_ERROR(
            troupe__sexp_int(&p->r, "the table's axis (an int)", 0, TROUPE_MAX_DIMS - 1, &axis));
        troupe_ll_t *body;
        TROUPE_RETURN_IF_ERROR(s_parse_stmt(p, &body));
        *out = troupe_ll_bind_index(proc, sym, tn, idcs, range, table, (int)axis, body);
    } else {
        return troupe__sexp_expected(&p->r,
                                     "a statement (noop comment seq for zero_out set set_from_vec "
                                     "set_local bind_index)");
    }
    TROUPE_RETURN_IF_ERROR(s_ll_status(p, *out));
    return troupe__sexp_rp(&p->r, head);
}

/* (symbols SYM*) for a procedure. */
static troupe_status_t s_parse_ll_symbols(troupe__text_parser_t *p)
{
    troupe_ll_proc_t *proc = p->proc;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(symbols'"));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "symbols"));
    while (p->r.tk == TROUPE__SEXP_LP) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(sym' or '(static'"));
        bool is_static = troupe__sexp_is(&p->r, "static");
        if (!is_static && !troupe__sexp_is(&p->r, "sym"))
            return troupe__sexp_expected(&p->r, "'sym' or 'static'");
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        char name[TROUPE_TEXT_MAX_ATOM + 1];
        TROUPE_RETURN_IF_ERROR(troupe__text_sym_decl_head(p, proc->nsyms, name, sizeof name));
        int32_t sid = 0;
        if (is_static) {
            int64_t range = 0;
            TROUPE_RETURN_IF_ERROR(troupe__sexp_int(&p->r, "a range >= 0", 0, INT64_MAX, &range));
            sid = troupe_ll_proc_add_static_symbol(proc, name, range);
        } else {
            sid = troupe_ll_proc_add_symbol(proc, name);
        }
        if (sid < 0)
            return troupe__sexp_oom();
        TROUPE_RETURN_IF_ERROR(troupe__text_declare_sym(p, sid, proc->syms[sid].name));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_rp(&p->r, is_static ? "static" : "sym"));
    }
    return troupe__sexp_rp(&p->r, "the symbol list");
}

troupe_status_t troupe_text_parse_proc_n(const char *text, size_t len, troupe_ll_proc_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_proc: out is NULL");
    *out = NULL;
    troupe__text_parser_t p;
    troupe_status_t st = troupe__text_parser_open(&p, "troupe_text_parse_proc", text, len, "proc");
    if (st != TROUPE_OK)
        goto done;
    char name[TROUPE_TEXT_MAX_ATOM + 1];
    if (!troupe__sexp_atom_ident(&p.r)) {
        st = troupe__sexp_expected(&p.r, "a procedure name ([A-Za-z_][A-Za-z0-9_]*)");
        goto done;
    }
    troupe__sexp_atom_copy(&p.r, name, sizeof name);
    if ((st = troupe_ll_proc_new(name, &p.proc)) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_next(&p.r)) != TROUPE_OK ||
        (st = troupe__text_parse_nodes(&p)) != TROUPE_OK)
        goto done;
    for (size_t i = 0; i < p.nodes.count; i++)
        if (troupe_ll_proc_add_node(p.proc, p.nodes.nodes[i]) < 0) {
            st = troupe__sexp_oom();
            goto done;
        }
    if ((st = s_parse_ll_symbols(&p)) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_lp(&p.r, "'(body'")) != TROUPE_OK ||
        (st = troupe__sexp_keyword(&p.r, "body")) != TROUPE_OK)
        goto done;
    troupe_ll_t *body = NULL;
    if ((st = s_parse_stmt(&p, &body)) != TROUPE_OK)
        goto done;
    p.proc->body = body;
    if ((st = troupe__text_parse_end(&p, "the procedure")) != TROUPE_OK)
        goto done;
    *out = p.proc;
    p.proc = NULL;
done:
    troupe_ll_proc_destroy(&p.proc);
    troupe__text_parser_close(&p);
    return st;
}

troupe_status_t troupe_text_parse_proc(const char *text, troupe_ll_proc_t **out)
{
    /* A NULL text gets _n's "text is NULL" (a length > 0 with no bytes). */
    return troupe_text_parse_proc_n(text, text != NULL ? strlen(text) : 1, out);
}
