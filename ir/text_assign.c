/* troupe — the S-expression text of assignment comps (ir/text.h, "Assignment comps"): the printer
 * and the parser, which rebuilds trees with the ir/assign.h builders. The pieces both text
 * forms use are ir/text.c. */
#define _POSIX_C_SOURCE 200809L
#include "ir/text.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/text_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- printer --------------------------------------------------------------------------------- */

static void s_print_buffer(troupe__strbuf_t *sb, const troupe_asgn_buffer_t *b)
{
    if (b->is_merge_buffer)
        troupe__strbuf_printf(sb, "(merge %" PRId32 ")", b->tn->id);
    else
        troupe__strbuf_printf(sb, "%" PRId32, b->tn->id);
}

static void s_print_asgn(troupe__text_printer_t *c, const troupe_asgn_t *a, int indent, int depth)
{
    troupe__strbuf_t *sb = &c->sb;
    if (c->st != TROUPE_OK)
        return;
    if (a == NULL)
        return troupe__text_bad(c, "missing assignment");
    if (depth > TROUPE__TEXT_MAX_TREE_DEPTH)
        return troupe__text_bad(c, "tree nested deeper than the text form allows");
    switch (a->kind) {
    case TROUPE_ASGN_NOOP:
        troupe__strbuf_puts(sb, "(noop)");
        return;
    case TROUPE_ASGN_SEQ:
        if (a->u.seq.count > 0 && a->u.seq.items == NULL)
            return troupe__text_bad(c, "seq without items");
        troupe__strbuf_puts(sb, "(seq");
        for (size_t i = 0; i < a->u.seq.count; i++) {
            troupe__text_newline(c, indent + 2);
            s_print_asgn(c, a->u.seq.items[i], indent + 2, depth + 1);
        }
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_ASGN_BLOCK_COMMENT:
        troupe__strbuf_puts(sb, "(block_comment ");
        troupe__sexp_put_quoted(sb, a->u.block_comment.text ? a->u.block_comment.text : "");
        troupe__text_newline(c, indent + 2);
        s_print_asgn(c, a->u.block_comment.body, indent + 2, depth + 1);
        troupe__strbuf_puts(sb, ")");
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
            return troupe__text_bad(c, "malformed accum_op");
        for (int i = 0; i < n; i++)
            if (a->u.accum_op.rhs[i].tn == NULL)
                return troupe__text_bad(c, "accum_op without an operand");
        troupe__strbuf_printf(sb, "(accum_op %" PRId32 " %s %s (", a->u.accum_op.lhs->id,
                              troupe_binop_name(a->u.accum_op.accum), name);
        for (int i = 0; i < n; i++) {
            if (i > 0)
                troupe__strbuf_puts(sb, " ");
            s_print_buffer(sb, &a->u.accum_op.rhs[i]);
        }
        troupe__strbuf_puts(sb, ") ");
        troupe__sexp_put_quoted(sb, a->u.accum_op.proj->spec);
        if (a->u.accum_op.ngather > 0) {
            troupe__strbuf_puts(sb, " (gather");
            for (int g = 0; g < a->u.accum_op.ngather; g++) {
                if (a->u.accum_op.gather[g] == NULL)
                    return troupe__text_bad(c, "accum_op with a NULL gather node");
                troupe__strbuf_printf(sb, " %" PRId32, a->u.accum_op.gather[g]->id);
            }
            troupe__strbuf_puts(sb, ")");
        }
        if (a->u.accum_op.initialize_neutral)
            troupe__strbuf_puts(sb, " initialize_neutral");
        troupe__strbuf_puts(sb, ")");
        return;
    }
    case TROUPE_ASGN_SET_VEC_UNOP:
        if (a->u.set_vec_unop.lhs == NULL || a->u.set_vec_unop.rhs.tn == NULL ||
            a->u.set_vec_unop.proj == NULL || a->u.set_vec_unop.proj->spec == NULL ||
            !troupe_vec_unop_is_valid(a->u.set_vec_unop.op))
            return troupe__text_bad(c, "malformed set_vec_unop");
        troupe__strbuf_printf(sb, "(set_vec_unop %" PRId32 " %s ", a->u.set_vec_unop.lhs->id,
                              troupe_vec_unop_name(a->u.set_vec_unop.op));
        s_print_buffer(sb, &a->u.set_vec_unop.rhs);
        troupe__strbuf_puts(sb, " ");
        troupe__sexp_put_quoted(sb, a->u.set_vec_unop.proj->spec);
        troupe__strbuf_puts(sb, ")");
        return;
    case TROUPE_ASGN_FETCH: {
        if (a->u.fetch.tn == NULL)
            return troupe__text_bad(c, "fetch without a node");
        troupe__strbuf_printf(sb, "(fetch %" PRId32 " ", a->u.fetch.tn->id);
        switch (a->u.fetch.kind) {
        case TROUPE_FETCH_CONSTANT:
            troupe__strbuf_puts(sb, "constant ");
            troupe__sexp_put_double(sb, a->u.fetch.constant);
            break;
        case TROUPE_FETCH_CONSTANT_BITS:
            troupe__strbuf_puts(sb, "constant_bits ");
            troupe__sexp_put_bits(sb, a->u.fetch.constant_bits);
            break;
        case TROUPE_FETCH_CONSTANT_FILL:
            if (a->u.fetch.count > 0 && a->u.fetch.values == NULL)
                return troupe__text_bad(c, "constant_fill without values");
            troupe__strbuf_puts(sb, "constant_fill");
            for (size_t i = 0; i < a->u.fetch.count; i++) {
                troupe__strbuf_puts(sb, " ");
                troupe__sexp_put_double(sb, a->u.fetch.values[i]);
            }
            break;
        case TROUPE_FETCH_RANGE_OVER_OFFSETS:
            troupe__strbuf_puts(sb, "range_over_offsets");
            break;
        case TROUPE_FETCH_SLICE:
            if (a->u.fetch.sliced == NULL || a->u.fetch.static_sym < 0 ||
                a->u.fetch.static_sym >= c->nsyms)
                return troupe__text_bad(c, "malformed slice");
            troupe__strbuf_printf(sb, "slice %s %" PRId32, c->names[a->u.fetch.static_sym],
                                  a->u.fetch.sliced->id);
            break;
        case TROUPE_FETCH_EMBED_SYMBOL:
            if (a->u.fetch.static_sym < 0 || a->u.fetch.static_sym >= c->nsyms)
                return troupe__text_bad(c, "malformed embed_symbol");
            troupe__strbuf_printf(sb, "embed_symbol %s", c->names[a->u.fetch.static_sym]);
            break;
        case TROUPE_FETCH_EMBED_SELF_ID:
            troupe__strbuf_puts(sb, "embed_self_id");
            break;
        default:
            return troupe__text_bad(c, "unknown fetch kind");
        }
        troupe__strbuf_puts(sb, ")");
        return;
    }
    }
    troupe__text_bad(c, "unknown assignment kind");
}

troupe_status_t troupe_text_print_comp(const troupe_asgn_comp_t *comp, char **out)
{
    troupe__text_printer_t c;
    TROUPE_RETURN_IF_ERROR(troupe__text_printer_open_comp(&c, comp, out));
    const char *const *names = c.names;
    troupe__strbuf_t *sb = &c.sb;
    troupe__strbuf_puts(sb, "(comp\n  (nodes");
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
        troupe__text_newline(&c, 4);
        troupe__text_print_node_decl(&c, tn);
    }
    troupe__strbuf_puts(sb, ")\n  (symbols");
    for (int32_t k = 0; k < comp->nsyms; k++) {
        troupe__text_newline(&c, 4);
        troupe__strbuf_printf(sb, "(static %" PRId32 " %s %" PRId64 ")", k, names[k],
                              comp->syms[k].range);
    }
    troupe__strbuf_puts(sb, ")\n  (embedded");
    for (size_t k = 0; k < comp->nembedded; k++)
        troupe__strbuf_printf(sb, " %" PRId32, comp->embedded[k]->id);
    troupe__strbuf_puts(sb, ")\n  (body");
    troupe__text_newline(&c, 4);
    s_print_asgn(&c, comp->root, 4, 0);
    troupe__strbuf_puts(sb, "))\n");
    return troupe__text_printer_close(&c, "a comp", out);
}

/* ---- parser ---------------------------------------------------------------------------------- */

/* A builder failure at (line, col): out of memory stays; anything else becomes a positioned
 * INVALID_ARGUMENT carrying the builder's message. */
static troupe_status_t s_builder_err(troupe_status_t st, int line, int col)
{
    char msg[640];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    if (st == TROUPE_RESOURCE_EXHAUSTED)
        return troupe__error(st, "%d:%d: %s", line, col, msg);
    return troupe__sexp_err_at(line, col, "%s", msg);
}

/* BUF: INT | (merge INT) */
static troupe_status_t s_parse_buffer(troupe__text_parser_t *p, troupe_asgn_buffer_t *b)
{
    b->is_merge_buffer = false;
    if (p->r.tk == TROUPE__SEXP_LP) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "an operand"));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "merge"));
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &b->tn));
        b->is_merge_buffer = true;
        return troupe__sexp_rp(&p->r, "merge");
    }
    return troupe__text_node_ref(p, &b->tn);
}

/* A quoted string copied to a new buffer (troupe_free). */
static troupe_status_t s_string_copy(troupe__text_parser_t *p, const char *what, char **out)
{
    if (p->r.tk != TROUPE__SEXP_STR)
        return troupe__sexp_expected(&p->r, what);
    *out = troupe_strdup(p->r.str);
    if (*out == NULL)
        return troupe__sexp_oom();
    troupe_status_t st = troupe__sexp_next(&p->r);
    if (st != TROUPE_OK) {
        troupe_free(*out);
        *out = NULL;
    }
    return st;
}

static troupe_status_t s_parse_asgn(troupe__text_parser_t *p, troupe_asgn_t **out);

static troupe_status_t s_parse_asgn_seq(troupe__text_parser_t *p, troupe_asgn_t **out)
{
    troupe_asgn_t **items = NULL;
    size_t n = 0, cap = 0;
    troupe_status_t st = TROUPE_OK;
    int line = p->r.tline, col = p->r.tcol;
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (!TROUPE__VEC_RESERVE(items, cap, n + 1)) {
            st = troupe__sexp_oom();
            goto done;
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

static troupe_status_t s_parse_accum_op(troupe__text_parser_t *p, int line, int col,
                                        troupe_asgn_t **out)
{
    troupe_tnode_t *lhs;
    TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &lhs));
    char name[48];
    troupe_binop_t accum;
    if (!troupe__sexp_atom_copy(&p->r, name, sizeof name) ||
        troupe_binop_of_string(name, &accum) != TROUPE_OK)
        return troupe__sexp_expected(&p->r, "an accumulator (a binop name: add, max, arg2, ...)");
    TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
    char opname[48];
    int op_line = p->r.tline, op_col = p->r.tcol;
    if (!troupe__sexp_atom_copy(&p->r, opname, sizeof opname))
        return troupe__sexp_expected(&p->r, "an operation name");
    TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
    troupe_asgn_buffer_t rhs[3];
    int n = 0;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(' starting the operand list"));
    while (p->r.tk != TROUPE__SEXP_RP) {
        if (n == 3)
            return troupe__sexp_expected(&p->r, "')' (at most 3 operands)");
        TROUPE_RETURN_IF_ERROR(s_parse_buffer(p, &rhs[n]));
        n++;
    }
    if (n == 0)
        return troupe__sexp_expected(&p->r, "an operand (node id or (merge id))");
    TROUPE_RETURN_IF_ERROR(troupe__sexp_rp(&p->r, "the operand list"));
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
        return troupe__sexp_err_at(op_line, op_col,
                                   "expected a %s name for %d operand%s, found '%s'",
                                   n == 1   ? "unop"
                                   : n == 2 ? "binop"
                                            : "ternop",
                                   n, n > 1 ? "s" : "", opname);
    char *spec = NULL;
    TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a projection spec string", &spec));
    troupe_tnode_t *gather[TROUPE_ASGN_MAX_GATHER] = {NULL, NULL};
    int ngather = 0;
    if (p->r.tk == TROUPE__SEXP_LP) {
        /* (gather ID [ID]) */
        st = troupe__sexp_lp(&p->r, "'(gather'");
        if (st == TROUPE_OK && !troupe__sexp_is(&p->r, "gather"))
            st = troupe__sexp_expected(&p->r, "'gather' (the gather nodes of the spec's @N)");
        if (st == TROUPE_OK)
            st = troupe__sexp_next(&p->r);
        while (st == TROUPE_OK && p->r.tk != TROUPE__SEXP_RP) {
            if (ngather == TROUPE_ASGN_MAX_GATHER) {
                st = troupe__sexp_expected(&p->r, "')' (at most 2 gather nodes)");
                break;
            }
            st = troupe__text_node_ref(p, &gather[ngather]);
            if (st == TROUPE_OK)
                ngather++;
        }
        if (st == TROUPE_OK && ngather == 0)
            st = troupe__sexp_expected(&p->r, "a gather node id");
        if (st == TROUPE_OK)
            st = troupe__sexp_rp(&p->r, "gather");
        if (st != TROUPE_OK) {
            troupe_free(spec);
            return st;
        }
    }
    bool init = false;
    if (troupe__sexp_is(&p->r, "initialize_neutral")) {
        init = true;
        if ((st = troupe__sexp_next(&p->r)) != TROUPE_OK) {
            troupe_free(spec);
            return st;
        }
    }
    if (ngather > 0)
        st = troupe_asgn_accum_gather(p->comp, init, accum, lhs, (troupe_asgn_rhs_kind_t)n, op, rhs,
                                      ngather, gather, spec, out);
    else if (n == 1)
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
static troupe_status_t s_static_ref(troupe__text_parser_t *p, int32_t *out)
{
    return troupe__text_sym_ref(p, "a static symbol name", out);
}

static troupe_status_t s_parse_fetch(troupe__text_parser_t *p, int line, int col,
                                     troupe_asgn_t **out)
{
    troupe_asgn_comp_t *comp = p->comp;
    troupe_tnode_t *tn;
    troupe_status_t st;
    TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &tn));
    char kind[32];
    if (!troupe__sexp_atom_copy(&p->r, kind, sizeof kind))
        kind[0] = '\0';
    if (strcmp(kind, "constant") == 0) {
        double v;
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_value(&p->r, "a constant", &v));
        st = troupe_asgn_fetch_constant(comp, tn, v, out);
    } else if (strcmp(kind, "constant_bits") == 0) {
        int64_t bits = 0;
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        if (!troupe__sexp_atom_bits(&p->r, &bits))
            return troupe__sexp_expected(&p->r, "a bit pattern #xHH...");
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        st = troupe_asgn_fetch_constant_bits(comp, tn, bits, out);
    } else if (strcmp(kind, "constant_fill") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        double *vals = NULL;
        size_t n = 0, cap = 0;
        st = TROUPE_OK;
        while (p->r.tk != TROUPE__SEXP_RP && st == TROUPE_OK) {
            if (!TROUPE__VEC_RESERVE(vals, cap, n + 1)) {
                st = troupe__sexp_oom();
                break;
            }
            st = troupe__sexp_value(&p->r, "a value or ')'", &vals[n]);
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
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        st = troupe_asgn_fetch_range_over_offsets(comp, tn, out);
    } else if (strcmp(kind, "slice") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t sym = 0;
        troupe_tnode_t *sliced;
        TROUPE_RETURN_IF_ERROR(s_static_ref(p, &sym));
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &sliced));
        st = troupe_asgn_fetch_slice(comp, tn, sym, sliced, out);
    } else if (strcmp(kind, "embed_symbol") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        int32_t sym = 0;
        TROUPE_RETURN_IF_ERROR(s_static_ref(p, &sym));
        st = troupe_asgn_fetch_embed_symbol(comp, tn, sym, out);
    } else if (strcmp(kind, "embed_self_id") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        st = troupe_asgn_fetch_embed_self_id(comp, tn, out);
    } else {
        return troupe__sexp_expected(&p->r, "a fetch kind (constant constant_bits constant_fill "
                                            "range_over_offsets slice embed_symbol embed_self_id)");
    }
    if (st != TROUPE_OK)
        return s_builder_err(st, line, col);
    return TROUPE_OK;
}

static troupe_status_t s_parse_asgn(troupe__text_parser_t *p, troupe_asgn_t **out)
{
    troupe_asgn_comp_t *comp = p->comp;
    *out = NULL;
    int line = p->r.tline, col = p->r.tcol;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(' starting an assignment"));
    char head[32];
    troupe__text_head(p, head, sizeof head);
    troupe_status_t st = TROUPE_OK;
    if (strcmp(head, "noop") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        st = troupe_asgn_noop(comp, out);
        if (st != TROUPE_OK)
            return s_builder_err(st, line, col);
    } else if (strcmp(head, "seq") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(s_parse_asgn_seq(p, out));
    } else if (strcmp(head, "block_comment") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        char *text = NULL;
        troupe_asgn_t *body = NULL;
        TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a string", &text));
        st = s_parse_asgn(p, &body);
        if (st == TROUPE_OK && (st = troupe_asgn_block_comment(comp, text, body, out)) != TROUPE_OK)
            st = s_builder_err(st, line, col);
        troupe_free(text);
        TROUPE_RETURN_IF_ERROR(st);
    } else if (strcmp(head, "accum_op") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(s_parse_accum_op(p, line, col, out));
    } else if (strcmp(head, "set_vec_unop") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_tnode_t *lhs;
        TROUPE_RETURN_IF_ERROR(troupe__text_node_ref(p, &lhs));
        char opname[48];
        troupe_vec_unop_t op;
        if (!troupe__sexp_atom_copy(&p->r, opname, sizeof opname) ||
            troupe_vec_unop_of_string(opname, &op) != TROUPE_OK)
            return troupe__sexp_expected(&p->r,
                                         "a vector operation name (uint4x32_to_prec_uniform)");
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        troupe_asgn_buffer_t rhs;
        TROUPE_RETURN_IF_ERROR(s_parse_buffer(p, &rhs));
        char *spec = NULL;
        TROUPE_RETURN_IF_ERROR(s_string_copy(p, "a projection spec string", &spec));
        st = troupe_asgn_set_vec_unop(comp, op, lhs, rhs, spec, out);
        troupe_free(spec);
        if (st != TROUPE_OK)
            return s_builder_err(st, line, col);
    } else if (strcmp(head, "fetch") == 0) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_next(&p->r));
        TROUPE_RETURN_IF_ERROR(s_parse_fetch(p, line, col, out));
    } else {
        return troupe__sexp_expected(
            &p->r, "an assignment (noop seq block_comment accum_op set_vec_unop fetch)");
    }
    return troupe__sexp_rp(&p->r, head);
}

/* (symbols (static ID NAME RANGE)*) for a comp. */
static troupe_status_t s_parse_comp_symbols(troupe__text_parser_t *p)
{
    troupe_asgn_comp_t *comp = p->comp;
    TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(symbols'"));
    TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "symbols"));
    while (p->r.tk == TROUPE__SEXP_LP) {
        TROUPE_RETURN_IF_ERROR(troupe__sexp_lp(&p->r, "'(static'"));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_keyword(&p->r, "static"));
        char name[TROUPE_TEXT_MAX_ATOM + 1];
        TROUPE_RETURN_IF_ERROR(troupe__text_sym_decl_head(p, comp->nsyms, name, sizeof name));
        int64_t range = 0;
        TROUPE_RETURN_IF_ERROR(troupe__sexp_int(&p->r, "a range >= 0", 0, INT64_MAX, &range));
        int32_t sid = 0;
        troupe_status_t st = troupe_asgn_comp_add_static_symbol(comp, name, range, &sid);
        if (st != TROUPE_OK)
            return s_builder_err(st, p->r.tline, p->r.tcol);
        TROUPE_RETURN_IF_ERROR(troupe__text_declare_sym(p, sid, comp->syms[sid].name));
        TROUPE_RETURN_IF_ERROR(troupe__sexp_rp(&p->r, "static"));
    }
    return troupe__sexp_rp(&p->r, "the symbol list");
}

troupe_status_t troupe_text_parse_comp_n(const char *text, size_t len, troupe_asgn_comp_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_text_parse_comp: out is NULL");
    *out = NULL;
    troupe__text_parser_t p;
    troupe_status_t st = troupe__text_parser_open(&p, "troupe_text_parse_comp", text, len, "comp");
    if (st != TROUPE_OK)
        goto done;
    if ((st = troupe_asgn_comp_new(&p.comp)) != TROUPE_OK)
        goto done;
    if ((st = troupe__text_parse_nodes(&p)) != TROUPE_OK ||
        (st = s_parse_comp_symbols(&p)) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_lp(&p.r, "'(embedded'")) != TROUPE_OK ||
        (st = troupe__sexp_keyword(&p.r, "embedded")) != TROUPE_OK)
        goto done;
    while (p.r.tk != TROUPE__SEXP_RP) {
        troupe_tnode_t *tn;
        int line = p.r.tline, col = p.r.tcol;
        if ((st = troupe__text_node_ref(&p, &tn)) != TROUPE_OK)
            goto done;
        if ((st = troupe_asgn_comp_add_embedded(p.comp, tn)) != TROUPE_OK) {
            st = s_builder_err(st, line, col);
            goto done;
        }
    }
    if ((st = troupe__sexp_rp(&p.r, "the embedded list")) != TROUPE_OK)
        goto done;
    if ((st = troupe__sexp_lp(&p.r, "'(body'")) != TROUPE_OK ||
        (st = troupe__sexp_keyword(&p.r, "body")) != TROUPE_OK)
        goto done;
    troupe_asgn_t *root = NULL;
    if ((st = s_parse_asgn(&p, &root)) != TROUPE_OK)
        goto done;
    troupe_asgn_comp_set_root(p.comp, root);
    if ((st = troupe__text_parse_end(&p, "the comp")) != TROUPE_OK)
        goto done;
    *out = p.comp;
    p.comp = NULL;
done:
    troupe_asgn_comp_destroy(&p.comp);
    troupe__text_parser_close(&p);
    return st;
}

troupe_status_t troupe_text_parse_comp(const char *text, troupe_asgn_comp_t **out)
{
    /* A NULL text gets _n's "text is NULL" (a length > 0 with no bytes). */
    return troupe_text_parse_comp_n(text, text != NULL ? strlen(text) : 1, out);
}
