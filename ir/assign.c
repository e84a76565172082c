/* troupe — high-level assignments: container, builders, structural equality (the projection
 * parser is ir/projection.c, lowering compiler/lower.c). Rules: OCANNL_NOTES §6.1 and ir/assign.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "ir/assign.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/arena_impl.h"
#include "ir/equal_impl.h"
#include "ir/names_impl.h"

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
    if (comp == NULL || !troupe__ir_is_identifier(name) || range < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "static symbol '%s' with range %" PRId64 " is invalid (the name must "
                             "be an identifier, the range >= 0)",
                             name ? name : "(null)", range);
    if (troupe_asgn_comp_find_static_symbol(comp, name) >= 0)
        return troupe__error(TROUPE_ALREADY_EXISTS, "static symbol '%s' already declared", name);
    if (!TROUPE__VEC_RESERVE(comp->syms, comp->syms_cap, (size_t)comp->nsyms + 1))
        return s_oom("declaring a static symbol");
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
    if (!TROUPE__VEC_RESERVE(*arr, *cap, *n + 1))
        return s_oom("recording a node");
    memmove(*arr + lo + 1, *arr + lo, (*n - lo) * sizeof **arr);
    troupe_tnode_retain(tn);
    (*arr)[lo] = tn;
    (*n)++;
    return TROUPE_OK;
}

/* The index of tn in the id-sorted set arr[0..n), or n when it is not there. */
static size_t s_node_set_find(troupe_tnode_t *const *arr, size_t n, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (arr[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && arr[lo] == tn ? lo : n;
}

static bool s_node_set_has(troupe_tnode_t *const *arr, size_t n, const troupe_tnode_t *tn)
{
    return s_node_set_find(arr, n, tn) < n;
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

size_t troupe_asgn_comp_node_index(const troupe_asgn_comp_t *comp, const troupe_tnode_t *tn)
{
    if (comp == NULL || tn == NULL)
        return SIZE_MAX;
    size_t i = s_node_set_find(comp->nodes, comp->nnodes, tn);
    return i < comp->nnodes ? i : SIZE_MAX;
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
                                   int nrhs, const troupe_asgn_buffer_t *rhs, int ngather,
                                   troupe_tnode_t *const *gather, int vec_length,
                                   troupe_projections_t **out)
{
    troupe_tnode_t *rn[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nrhs; i++)
        rn[i] = rhs[i].tn;
    troupe_projections_t tmp;
    TROUPE_RETURN_IF_ERROR(troupe_projections_parse_gather(comp, spec, lhs, nrhs, rn, ngather,
                                                           gather, vec_length, &tmp));
    troupe_projections_t *pr = s_alloc(comp, sizeof *pr);
    char *copy = s_strdup(comp, spec);
    if (pr == NULL || copy == NULL)
        return s_oom("storing a projection");
    *pr = tmp;
    pr->spec = copy;
    TROUPE_RETURN_IF_ERROR(s_add_node(comp, lhs));
    for (int i = 0; i < nrhs; i++)
        TROUPE_RETURN_IF_ERROR(s_add_node(comp, rn[i]));
    for (int g = 0; g < ngather; g++)
        TROUPE_RETURN_IF_ERROR(s_add_node(comp, gather[g]));
    *out = pr;
    return TROUPE_OK;
}

static troupe_status_t s_accum(troupe_asgn_comp_t *comp, bool initialize_neutral,
                               troupe_binop_t accum, troupe_tnode_t *lhs,
                               troupe_asgn_rhs_kind_t kind, int op, int nrhs,
                               const troupe_asgn_buffer_t *rhs, int ngather,
                               troupe_tnode_t *const *gather, const char *spec,
                               troupe_asgn_t **out)
{
    TROUPE_RETURN_IF_ERROR(s_check_out(comp, out, "accumulating assignment"));
    if (ngather < 0 || ngather > TROUPE_ASGN_MAX_GATHER || (ngather > 0 && gather == NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "accumulating assignment '%s': %d gather nodes (at most %d)",
                             spec ? spec : "", ngather, TROUPE_ASGN_MAX_GATHER);
    for (int g = 0; g < ngather; g++) {
        if (gather[g] == NULL)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "accumulating assignment '%s': gather node @%d is NULL",
                                 spec ? spec : "", g + 1);
        troupe_prec_t gp = gather[g]->prec;
        bool ok = gp == TROUPE_PREC_BYTE || gp == TROUPE_PREC_UINT16 || gp == TROUPE_PREC_INT32 ||
                  gp == TROUPE_PREC_UINT32 || gp == TROUPE_PREC_INT64 ||
                  gp == TROUPE_PREC_UINT64 || gp == TROUPE_PREC_SINGLE ||
                  gp == TROUPE_PREC_DOUBLE;
        if (!ok) {
            char name[128];
            troupe__ir_node_name(gather[g], name, sizeof name);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "accumulating assignment '%s': gather node @%d (node %s) has "
                                 "precision %s; a gather index needs an integer precision (or "
                                 "single/double holding integers)",
                                 spec ? spec : "", g + 1, name, troupe_prec_name(gp));
        }
    }
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
    TROUPE_RETURN_IF_ERROR(s_make_proj(comp, spec, lhs, nrhs, rhs, ngather, gather, 0, &pr));
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
    for (int g = 0; g < ngather; g++)
        t->u.accum_op.gather[g] = gather[g];
    t->u.accum_op.ngather = ngather;
    *out = t;
    return TROUPE_OK;
}

troupe_status_t troupe_asgn_accum_unop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                       troupe_binop_t accum, troupe_tnode_t *lhs, troupe_unop_t op,
                                       troupe_asgn_buffer_t rhs, const char *spec,
                                       troupe_asgn_t **out)
{
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_UNOP, (int)op, 1, &rhs,
                   0, NULL, spec, out);
}

troupe_status_t troupe_asgn_accum_binop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                        troupe_binop_t accum, troupe_tnode_t *lhs,
                                        troupe_binop_t op, troupe_asgn_buffer_t rhs1,
                                        troupe_asgn_buffer_t rhs2, const char *spec,
                                        troupe_asgn_t **out)
{
    troupe_asgn_buffer_t rhs[2] = {rhs1, rhs2};
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_BINOP, (int)op, 2, rhs,
                   0, NULL, spec, out);
}

troupe_status_t troupe_asgn_accum_ternop(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                         troupe_binop_t accum, troupe_tnode_t *lhs,
                                         troupe_ternop_t op, troupe_asgn_buffer_t rhs1,
                                         troupe_asgn_buffer_t rhs2, troupe_asgn_buffer_t rhs3,
                                         const char *spec, troupe_asgn_t **out)
{
    troupe_asgn_buffer_t rhs[3] = {rhs1, rhs2, rhs3};
    return s_accum(comp, initialize_neutral, accum, lhs, TROUPE_ASGN_RHS_TERNOP, (int)op, 3, rhs,
                   0, NULL, spec, out);
}

troupe_status_t troupe_asgn_accum_gather(troupe_asgn_comp_t *comp, bool initialize_neutral,
                                         troupe_binop_t accum, troupe_tnode_t *lhs,
                                         troupe_asgn_rhs_kind_t rhs_kind, int op,
                                         const troupe_asgn_buffer_t *rhs, int ngather,
                                         troupe_tnode_t *const *gather, const char *spec,
                                         troupe_asgn_t **out)
{
    int nrhs = rhs_kind == TROUPE_ASGN_RHS_UNOP     ? 1
               : rhs_kind == TROUPE_ASGN_RHS_BINOP  ? 2
               : rhs_kind == TROUPE_ASGN_RHS_TERNOP ? 3
                                                    : 0;
    if (out != NULL)
        *out = NULL;
    if (nrhs == 0 || rhs == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "accumulating assignment '%s': bad rhs kind %d or NULL operands",
                             spec ? spec : "", (int)rhs_kind);
    return s_accum(comp, initialize_neutral, accum, lhs, rhs_kind, op, nrhs, rhs, ngather, gather,
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
    TROUPE_RETURN_IF_ERROR(s_make_proj(comp, spec, lhs, 1, &rhs, 0, NULL, (int)length, &pr));
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
            troupe__ir_node_name(tn, nname, sizeof nname);
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
    troupe__ir_node_name(tn, n1, sizeof n1);
    troupe__ir_node_name(sliced, n2, sizeof n2);
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
    return a->is_merge_buffer == b->is_merge_buffer && troupe__ir_same_node(a->tn, b->tn);
}

static bool s_proj_equal(const troupe_projections_t *a, const troupe_projections_t *b)
{
    return a->vec_length == b->vec_length && strcmp(a->spec, b->spec) == 0;
}

static bool s_fetch_equal(const troupe_asgn_t *a, const troupe_asgn_t *b)
{
    if (!troupe__ir_same_node(a->u.fetch.tn, b->u.fetch.tn) || a->u.fetch.kind != b->u.fetch.kind)
        return false;
    switch (a->u.fetch.kind) {
    case TROUPE_FETCH_CONSTANT:
        return troupe__ir_same_bits(&a->u.fetch.constant, &b->u.fetch.constant, 1);
    case TROUPE_FETCH_CONSTANT_BITS:
        return a->u.fetch.constant_bits == b->u.fetch.constant_bits;
    case TROUPE_FETCH_CONSTANT_FILL:
        return a->u.fetch.count == b->u.fetch.count &&
               troupe__ir_same_bits(a->u.fetch.values, b->u.fetch.values, a->u.fetch.count);
    case TROUPE_FETCH_SLICE:
        return a->u.fetch.static_sym == b->u.fetch.static_sym &&
               troupe__ir_same_node(a->u.fetch.sliced, b->u.fetch.sliced);
    case TROUPE_FETCH_EMBED_SYMBOL:
        return a->u.fetch.static_sym == b->u.fetch.static_sym;
    case TROUPE_FETCH_RANGE_OVER_OFFSETS:
    case TROUPE_FETCH_EMBED_SELF_ID:
        return true;
    }
    return false;
}

static bool s_item_equal(const void *a, const void *b)
{
    return troupe_asgn_equal(a, b);
}

bool troupe_asgn_equal(const troupe_asgn_t *a, const troupe_asgn_t *b)
{
    TROUPE__IR_EQUAL_START(a, b);
    switch (a->kind) {
    case TROUPE_ASGN_NOOP:
        return true;
    case TROUPE_ASGN_SEQ:
        return troupe__ir_items_equal((const void *const *)a->u.seq.items, a->u.seq.count,
                                      (const void *const *)b->u.seq.items, b->u.seq.count,
                                      s_item_equal);
    case TROUPE_ASGN_BLOCK_COMMENT:
        return strcmp(a->u.block_comment.text, b->u.block_comment.text) == 0 &&
               troupe_asgn_equal(a->u.block_comment.body, b->u.block_comment.body);
    case TROUPE_ASGN_ACCUM_OP:
        if (a->u.accum_op.initialize_neutral != b->u.accum_op.initialize_neutral ||
            a->u.accum_op.accum != b->u.accum_op.accum ||
            !troupe__ir_same_node(a->u.accum_op.lhs, b->u.accum_op.lhs) ||
            a->u.accum_op.rhs_kind != b->u.accum_op.rhs_kind ||
            a->u.accum_op.op != b->u.accum_op.op ||
            !s_proj_equal(a->u.accum_op.proj, b->u.accum_op.proj) ||
            a->u.accum_op.ngather != b->u.accum_op.ngather)
            return false;
        for (int g = 0; g < a->u.accum_op.ngather; g++)
            if (!troupe__ir_same_node(a->u.accum_op.gather[g], b->u.accum_op.gather[g]))
                return false;
        for (int i = 0; i < (int)a->u.accum_op.rhs_kind; i++)
            if (!s_buf_equal(&a->u.accum_op.rhs[i], &b->u.accum_op.rhs[i]))
                return false;
        return true;
    case TROUPE_ASGN_SET_VEC_UNOP:
        return a->u.set_vec_unop.op == b->u.set_vec_unop.op &&
               troupe__ir_same_node(a->u.set_vec_unop.lhs, b->u.set_vec_unop.lhs) &&
               s_buf_equal(&a->u.set_vec_unop.rhs, &b->u.set_vec_unop.rhs) &&
               s_proj_equal(a->u.set_vec_unop.proj, b->u.set_vec_unop.proj);
    case TROUPE_ASGN_FETCH:
        return s_fetch_equal(a, b);
    }
    return false;
}
