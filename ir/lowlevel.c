/* troupe — low-level IR: procedures, builders, validation, equality, copy. */
#define _POSIX_C_SOURCE 200809L
#include "ir/lowlevel.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "ir/arena_impl.h"
#include "ir/equal_impl.h"
#include "ir/names_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Statements and copies of a procedure are carved from chunks of this size. */
#define S_ARENA_CHUNK_BYTES 16384

/* ---- procedures --------------------------------------------------------------------------- */

static void s_fail(troupe_ll_proc_t *proc, troupe_status_t s)
{
    if (proc->sticky == TROUPE_OK)
        proc->sticky = s;
}

troupe_status_t troupe_ll_proc_new(const char *name, troupe_ll_proc_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_ll_proc_new: out is NULL");
    *out = NULL;
    if (!troupe__ir_is_identifier(name))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "procedure name '%s' is not a C identifier",
                             name ? name : "(null)");
    troupe_ll_proc_t *p = troupe_calloc(1, sizeof *p);
    if (p == NULL)
        goto fail_proc;
    p->arena = troupe__arena_new(S_ARENA_CHUNK_BYTES);
    if (p->arena == NULL)
        goto fail_arena;
    p->name = troupe_strdup(name);
    if (p->name == NULL)
        goto fail_name;
    p->body = troupe_ll_noop(p);
    if (p->body == NULL)
        goto fail_body;
    *out = p;
    return TROUPE_OK;
fail_body:
    troupe_free(p->name);
fail_name:
    troupe__arena_destroy(&p->arena);
fail_arena:
    troupe_free(p);
fail_proc:
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory creating procedure '%s'", name);
}

void troupe_ll_proc_destroy(troupe_ll_proc_t **proc_p)
{
    if (proc_p == NULL || *proc_p == NULL)
        return;
    troupe_ll_proc_t *p = *proc_p;
    for (size_t i = 0; i < p->nnodes; i++)
        troupe_tnode_release(&p->nodes[i]);
    troupe_free(p->nodes);
    for (int32_t i = 0; i < p->nsyms; i++)
        troupe_free(p->syms[i].name);
    troupe_free(p->syms);
    troupe_free(p->traced);
    troupe_free(p->inputs);
    troupe_free(p->outputs);
    troupe_free(p->name);
    troupe__arena_destroy(&p->arena);
    troupe_free(p);
    *proc_p = NULL;
}

troupe_status_t troupe_ll_proc_status(const troupe_ll_proc_t *proc)
{
    return proc->sticky;
}

void *troupe_ll_alloc(troupe_ll_proc_t *proc, size_t size_bytes)
{
    void *p = troupe__arena_alloc(proc->arena, size_bytes);
    if (p == NULL)
        s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
    return p;
}

char *troupe_ll_strdup(troupe_ll_proc_t *proc, const char *s)
{
    char *d = troupe__arena_strdup(proc->arena, s);
    if (d == NULL)
        s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
    return d;
}

static int32_t s_add_symbol(troupe_ll_proc_t *proc, const char *name, bool is_static, int64_t range)
{
    if (!TROUPE__VEC_RESERVE(proc->syms, proc->syms_cap, (size_t)proc->nsyms + 1)) {
        s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
        return -1;
    }
    int32_t id = proc->nsyms;
    char buf[32];
    if (name == NULL) {
        snprintf(buf, sizeof buf, "i%" PRId32, id);
        name = buf;
    }
    char *copy = troupe_strdup(name);
    if (copy == NULL) {
        s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
        return -1;
    }
    proc->syms[id] = (troupe_ll_symbol_t){copy, is_static, range};
    proc->nsyms++;
    return id;
}

int32_t troupe_ll_proc_add_symbol(troupe_ll_proc_t *proc, const char *name)
{
    if (name != NULL && !troupe__ir_is_identifier(name)) {
        troupe__error(TROUPE_INVALID_ARGUMENT, "symbol name '%s' is not an identifier", name);
        s_fail(proc, TROUPE_INVALID_ARGUMENT);
        return -1;
    }
    return s_add_symbol(proc, name, false, 0);
}

int32_t troupe_ll_proc_add_static_symbol(troupe_ll_proc_t *proc, const char *name, int64_t range)
{
    if (!troupe__ir_is_identifier(name) || range < 0) {
        troupe__error(TROUPE_INVALID_ARGUMENT, "static symbol '%s' with range %" PRId64 " invalid",
                      name ? name : "(null)", range);
        s_fail(proc, TROUPE_INVALID_ARGUMENT);
        return -1;
    }
    if (troupe_ll_proc_find_symbol(proc, name) >= 0) {
        troupe__error(TROUPE_ALREADY_EXISTS, "static symbol '%s' already defined", name);
        s_fail(proc, TROUPE_ALREADY_EXISTS);
        return -1;
    }
    return s_add_symbol(proc, name, true, range);
}

int32_t troupe_ll_proc_find_symbol(const troupe_ll_proc_t *proc, const char *name)
{
    for (int32_t i = 0; i < proc->nsyms; i++)
        if (strcmp(proc->syms[i].name, name) == 0)
            return i;
    return -1;
}

int32_t troupe_ll_proc_new_scope_id(troupe_ll_proc_t *proc)
{
    return proc->next_scope_id++;
}

ptrdiff_t troupe_ll_proc_node_index(const troupe_ll_proc_t *proc, const troupe_tnode_t *tn)
{
    size_t lo = 0, hi = proc->nnodes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (proc->nodes[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < proc->nnodes && proc->nodes[lo] == tn)
        return (ptrdiff_t)lo;
    return -1;
}

ptrdiff_t troupe_ll_proc_add_node(troupe_ll_proc_t *proc, troupe_tnode_t *tn)
{
    if (tn == NULL) {
        s_fail(proc, TROUPE_INVALID_ARGUMENT);
        return -1;
    }
    size_t lo = 0, hi = proc->nnodes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (proc->nodes[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < proc->nnodes && proc->nodes[lo]->id == tn->id)
        return (ptrdiff_t)lo;
    if (!TROUPE__VEC_RESERVE(proc->nodes, proc->nodes_cap, proc->nnodes + 1)) {
        s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
        return -1;
    }
    memmove(proc->nodes + lo + 1, proc->nodes + lo, (proc->nnodes - lo) * sizeof *proc->nodes);
    troupe_tnode_retain(tn);
    proc->nodes[lo] = tn;
    proc->nnodes++;
    return (ptrdiff_t)lo;
}

/* ---- builders ----------------------------------------------------------------------------- */

static troupe_ll_t *s_ll(troupe_ll_proc_t *proc, troupe_ll_kind_t kind)
{
    troupe_ll_t *s = troupe_ll_alloc(proc, sizeof *s);
    if (s != NULL)
        s->kind = kind;
    return s;
}

static troupe_sc_t *s_sc(troupe_ll_proc_t *proc, troupe_sc_kind_t kind)
{
    troupe_sc_t *s = troupe_ll_alloc(proc, sizeof *s);
    if (s != NULL)
        s->kind = kind;
    return s;
}

static troupe_axis_index_t *s_copy_idcs(troupe_ll_proc_t *proc, const troupe_axis_index_t *idcs,
                                        int n)
{
    troupe_axis_index_t *d = troupe_ll_alloc(proc, sizeof *d * (size_t)(n > 0 ? n : 1));
    if (d != NULL && n > 0) {
        if (idcs == NULL) {
            s_fail(proc, TROUPE_INVALID_ARGUMENT);
            return NULL;
        }
        memcpy(d, idcs, sizeof *d * (size_t)n);
    }
    return d;
}

troupe_ll_t *troupe_ll_noop(troupe_ll_proc_t *proc)
{
    return s_ll(proc, TROUPE_LL_NOOP);
}

troupe_ll_t *troupe_ll_comment(troupe_ll_proc_t *proc, const char *text)
{
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_COMMENT);
    if (s != NULL && (s->u.comment = troupe_ll_strdup(proc, text ? text : "")) == NULL)
        return NULL;
    return s;
}

static size_t s_seq_count(troupe_ll_t *const *items, size_t count)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (items[i] == NULL || items[i]->kind == TROUPE_LL_NOOP)
            continue;
        n += items[i]->kind == TROUPE_LL_SEQ ? items[i]->u.seq.count : 1;
    }
    return n;
}

troupe_ll_t *troupe_ll_seq(troupe_ll_proc_t *proc, size_t count, troupe_ll_t *const *items)
{
    for (size_t i = 0; i < count; i++)
        if (items[i] == NULL) {
            s_fail(proc, TROUPE_RESOURCE_EXHAUSTED);
            return NULL;
        }
    size_t n = s_seq_count(items, count);
    if (n == 0)
        return troupe_ll_noop(proc);
    if (n == 1)
        for (size_t i = 0; i < count; i++)
            if (items[i]->kind != TROUPE_LL_NOOP)
                return items[i]->kind == TROUPE_LL_SEQ ? items[i]->u.seq.items[0] : items[i];
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_SEQ);
    if (s == NULL)
        return NULL;
    s->u.seq.items = troupe_ll_alloc(proc, n * sizeof *s->u.seq.items);
    if (s->u.seq.items == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        if (items[i]->kind == TROUPE_LL_NOOP)
            continue;
        if (items[i]->kind == TROUPE_LL_SEQ) {
            memcpy(s->u.seq.items + k, items[i]->u.seq.items,
                   items[i]->u.seq.count * sizeof *s->u.seq.items);
            k += items[i]->u.seq.count;
        } else {
            s->u.seq.items[k++] = items[i];
        }
    }
    s->u.seq.count = n;
    return s;
}

troupe_ll_t *troupe_ll_seq2(troupe_ll_proc_t *proc, troupe_ll_t *a, troupe_ll_t *b)
{
    troupe_ll_t *items[2] = {a, b};
    return troupe_ll_seq(proc, 2, items);
}

troupe_ll_t *troupe_ll_for(troupe_ll_proc_t *proc, int32_t sym, int64_t from, int64_t to,
                           troupe_ll_t *body, bool trace_it)
{
    if (body == NULL)
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_FOR);
    if (s != NULL) {
        s->u.for_loop.sym = sym;
        s->u.for_loop.from = from;
        s->u.for_loop.to = to;
        s->u.for_loop.body = body;
        s->u.for_loop.trace_it = trace_it;
    }
    return s;
}

troupe_ll_t *troupe_ll_zero_out(troupe_ll_proc_t *proc, troupe_tnode_t *tn)
{
    if (troupe_ll_proc_add_node(proc, tn) < 0)
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_ZERO_OUT);
    if (s != NULL)
        s->u.zero_out = tn;
    return s;
}

troupe_ll_t *troupe_ll_set(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                           const troupe_axis_index_t *idcs, troupe_sc_t *value)
{
    if (value == NULL || troupe_ll_proc_add_node(proc, tn) < 0)
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_SET);
    if (s == NULL)
        return NULL;
    s->u.set.tn = tn;
    s->u.set.value = value;
    if ((s->u.set.idcs = s_copy_idcs(proc, idcs, tn->ndims)) == NULL)
        return NULL;
    return s;
}

troupe_ll_t *troupe_ll_set_from_vec(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                                    const troupe_axis_index_t *idcs, int length,
                                    troupe_vec_unop_t op, troupe_sc_t *arg)
{
    if (arg == NULL || troupe_ll_proc_add_node(proc, tn) < 0)
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_SET_FROM_VEC);
    if (s == NULL)
        return NULL;
    s->u.set_from_vec.tn = tn;
    s->u.set_from_vec.length = length;
    s->u.set_from_vec.op = op;
    s->u.set_from_vec.arg = arg;
    if ((s->u.set_from_vec.idcs = s_copy_idcs(proc, idcs, tn->ndims)) == NULL)
        return NULL;
    return s;
}

troupe_ll_t *troupe_ll_set_local(troupe_ll_proc_t *proc, int32_t scope_id, troupe_sc_t *value)
{
    if (value == NULL)
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_SET_LOCAL);
    if (s != NULL) {
        s->u.set_local.id = scope_id;
        s->u.set_local.value = value;
    }
    return s;
}

troupe_ll_t *troupe_ll_bind_index(troupe_ll_proc_t *proc, int32_t sym, troupe_tnode_t *tn,
                                  const troupe_axis_index_t *idcs, int64_t range,
                                  troupe_tnode_t *table, int axis, troupe_ll_t *body)
{
    if (body == NULL || troupe_ll_proc_add_node(proc, tn) < 0 ||
        (table != NULL && troupe_ll_proc_add_node(proc, table) < 0))
        return NULL;
    troupe_ll_t *s = s_ll(proc, TROUPE_LL_BIND_INDEX);
    if (s == NULL)
        return NULL;
    s->u.bind_index.sym = sym;
    s->u.bind_index.tn = tn;
    s->u.bind_index.range = range;
    s->u.bind_index.table = table;
    s->u.bind_index.axis = axis;
    s->u.bind_index.body = body;
    if ((s->u.bind_index.idcs = s_copy_idcs(proc, idcs, tn->ndims)) == NULL)
        return NULL;
    return s;
}

troupe_sc_t *troupe_sc_local_scope(troupe_ll_proc_t *proc, int32_t scope_id, troupe_tnode_t *tn,
                                   troupe_ll_t *body, const troupe_axis_index_t *orig_indices)
{
    if (body == NULL || troupe_ll_proc_add_node(proc, tn) < 0)
        return NULL;
    troupe_sc_t *s = s_sc(proc, TROUPE_SC_LOCAL_SCOPE);
    if (s == NULL)
        return NULL;
    s->u.local_scope.id = scope_id;
    s->u.local_scope.tn = tn;
    s->u.local_scope.body = body;
    if ((s->u.local_scope.orig_indices = s_copy_idcs(proc, orig_indices, tn->ndims)) == NULL)
        return NULL;
    if (scope_id >= proc->next_scope_id)
        proc->next_scope_id = scope_id + 1;
    return s;
}

troupe_sc_t *troupe_sc_get_local(troupe_ll_proc_t *proc, int32_t scope_id)
{
    troupe_sc_t *s = s_sc(proc, TROUPE_SC_GET_LOCAL);
    if (s != NULL)
        s->u.get_local.id = scope_id;
    return s;
}

static troupe_sc_t *s_get(troupe_ll_proc_t *proc, troupe_sc_kind_t kind, troupe_tnode_t *tn,
                          const troupe_axis_index_t *idcs)
{
    if (troupe_ll_proc_add_node(proc, tn) < 0)
        return NULL;
    troupe_sc_t *s = s_sc(proc, kind);
    if (s == NULL)
        return NULL;
    s->u.get.tn = tn;
    if ((s->u.get.idcs = s_copy_idcs(proc, idcs, tn->ndims)) == NULL)
        return NULL;
    return s;
}

troupe_sc_t *troupe_sc_get(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                           const troupe_axis_index_t *idcs)
{
    return s_get(proc, TROUPE_SC_GET, tn, idcs);
}

troupe_sc_t *troupe_sc_get_merge_buffer(troupe_ll_proc_t *proc, troupe_tnode_t *tn,
                                        const troupe_axis_index_t *idcs)
{
    return s_get(proc, TROUPE_SC_GET_MERGE_BUFFER, tn, idcs);
}

static troupe_sc_t *s_op(troupe_ll_proc_t *proc, troupe_sc_kind_t kind, int op, troupe_sc_t *a,
                         troupe_sc_t *b, troupe_sc_t *c, int nargs)
{
    troupe_sc_t *args[3] = {a, b, c};
    for (int i = 0; i < nargs; i++)
        if (args[i] == NULL)
            return NULL;
    troupe_sc_t *s = s_sc(proc, kind);
    if (s == NULL)
        return NULL;
    s->u.op.op = op;
    for (int i = 0; i < nargs; i++)
        s->u.op.args[i] = args[i];
    return s;
}

troupe_sc_t *troupe_sc_ternop(troupe_ll_proc_t *proc, troupe_ternop_t op, troupe_sc_t *a,
                              troupe_sc_t *b, troupe_sc_t *c)
{
    return s_op(proc, TROUPE_SC_TERNOP, (int)op, a, b, c, 3);
}

troupe_sc_t *troupe_sc_binop(troupe_ll_proc_t *proc, troupe_binop_t op, troupe_sc_t *a,
                             troupe_sc_t *b)
{
    return s_op(proc, TROUPE_SC_BINOP, (int)op, a, b, NULL, 2);
}

troupe_sc_t *troupe_sc_unop(troupe_ll_proc_t *proc, troupe_unop_t op, troupe_sc_t *a)
{
    return s_op(proc, TROUPE_SC_UNOP, (int)op, a, NULL, NULL, 1);
}

troupe_sc_t *troupe_sc_constant(troupe_ll_proc_t *proc, double c)
{
    troupe_sc_t *s = s_sc(proc, TROUPE_SC_CONSTANT);
    if (s != NULL)
        s->u.constant = c;
    return s;
}

troupe_sc_t *troupe_sc_constant_bits(troupe_ll_proc_t *proc, int64_t bits)
{
    troupe_sc_t *s = s_sc(proc, TROUPE_SC_CONSTANT_BITS);
    if (s != NULL)
        s->u.constant_bits = bits;
    return s;
}

troupe_sc_t *troupe_sc_embed_index(troupe_ll_proc_t *proc, troupe_axis_index_t idx)
{
    troupe_sc_t *s = s_sc(proc, TROUPE_SC_EMBED_INDEX);
    if (s != NULL)
        s->u.embed_index = idx;
    return s;
}

static bool s_sc_has_bind(const troupe_sc_t *e)
{
    if (e == NULL)
        return false;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return troupe_ll_has_bind_index(e->u.local_scope.body);
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP:
        for (int i = 0; i < 3; i++)
            if (s_sc_has_bind(e->u.op.args[i]))
                return true;
        return false;
    default:
        return false;
    }
}

bool troupe_ll_has_bind_index(const troupe_ll_t *s)
{
    if (s == NULL)
        return false;
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            if (troupe_ll_has_bind_index(s->u.seq.items[i]))
                return true;
        return false;
    case TROUPE_LL_FOR:
        return troupe_ll_has_bind_index(s->u.for_loop.body);
    case TROUPE_LL_SET:
        return s_sc_has_bind(s->u.set.value);
    case TROUPE_LL_SET_FROM_VEC:
        return s_sc_has_bind(s->u.set_from_vec.arg);
    case TROUPE_LL_SET_LOCAL:
        return s_sc_has_bind(s->u.set_local.value);
    case TROUPE_LL_BIND_INDEX:
        return true;
    default:
        return false;
    }
}

static bool s_sc_writes(const troupe_sc_t *e, const troupe_tnode_t *tn)
{
    if (e == NULL)
        return false;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return troupe_ll_writes(e->u.local_scope.body, tn);
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP:
        for (int i = 0; i < 3; i++)
            if (s_sc_writes(e->u.op.args[i], tn))
                return true;
        return false;
    default:
        return false;
    }
}

bool troupe_ll_writes(const troupe_ll_t *s, const troupe_tnode_t *tn)
{
    if (s == NULL)
        return false;
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            if (troupe_ll_writes(s->u.seq.items[i], tn))
                return true;
        return false;
    case TROUPE_LL_FOR:
        return troupe_ll_writes(s->u.for_loop.body, tn);
    case TROUPE_LL_ZERO_OUT:
        return s->u.zero_out == tn;
    case TROUPE_LL_SET:
        return s->u.set.tn == tn || s_sc_writes(s->u.set.value, tn);
    case TROUPE_LL_SET_FROM_VEC:
        return s->u.set_from_vec.tn == tn || s_sc_writes(s->u.set_from_vec.arg, tn);
    case TROUPE_LL_SET_LOCAL:
        return s_sc_writes(s->u.set_local.value, tn);
    case TROUPE_LL_BIND_INDEX:
        return troupe_ll_writes(s->u.bind_index.body, tn);
    default:
        return false;
    }
}

troupe_status_t troupe_ll_gather_failure(const char *index_name, int ndims, const int64_t *cell,
                                        double value, int64_t range, const char *table_name,
                                        int axis)
{
    char at[TROUPE_MAX_DIMS * 24 + 2];
    size_t n = 0;
    at[0] = '\0';
    for (int a = 0; a < ndims && a < TROUPE_MAX_DIMS; a++)
        n += (size_t)snprintf(at + n, sizeof at - n, "%s%" PRId64, a ? "," : "", cell[a]);
    char where[160];
    if (table_name != NULL)
        snprintf(where, sizeof where, "%s's axis %d", table_name, axis);
    else
        snprintf(where, sizeof where, "the gathered axis");
    return troupe__error(TROUPE_INVALID_ARGUMENT,
                         "gather: %s[%s] = %.17g is outside 0..%" PRId64 " of %s",
                         index_name ? index_name : "?", at, value, range - 1, where);
}

/* ---- validation --------------------------------------------------------------------------- */

typedef struct s_range {
    bool bound;     /* symbol currently has a known range */
    int64_t lo, hi; /* inclusive */
} s_range_t;

typedef struct s_vctx {
    const troupe_ll_proc_t *proc;
    s_range_t *ranges; /* per symbol */
    int32_t *scopes;   /* open local scope ids */
    size_t nscopes, scopes_cap;
    const troupe_tnode_t *merge;
} s_vctx_t;

static troupe_status_t s_check_index(s_vctx_t *v, const troupe_tnode_t *tn,
                                     const troupe_axis_index_t *idx, int axis, const char *what)
{
    int64_t lo = idx->offset, hi = idx->offset;
    if (idx->nterms < 0 || idx->nterms > TROUPE_MAX_INDEX_TERMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s of node #%d axis %d: %d index terms",
                             what, tn->id, axis, idx->nterms);
    for (int k = 0; k < idx->nterms; k++) {
        int32_t sym = idx->terms[k].sym;
        if (sym < 0 || sym >= v->proc->nsyms)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s of node #%d axis %d: undefined symbol %d", what, tn->id, axis,
                                 sym);
        const troupe_ll_symbol_t *s = &v->proc->syms[sym];
        int64_t slo, shi;
        if (s->is_static) {
            if (s->static_range <= 0)
                return TROUPE_OK; /* unbounded static symbol: checked at call time */
            slo = 0;
            shi = s->static_range - 1;
        } else {
            if (!v->ranges[sym].bound)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "%s of node #%d axis %d: symbol %s used outside its loop",
                                     what, tn->id, axis, s->name);
            slo = v->ranges[sym].lo;
            shi = v->ranges[sym].hi;
        }
        int64_t c = idx->terms[k].coeff;
        lo += c >= 0 ? c * slo : c * shi;
        hi += c >= 0 ? c * shi : c * slo;
    }
    if (lo < 0 || hi >= tn->dims[axis]) {
        char name[64];
        troupe_tnode_debug_name(tn, name, sizeof name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s of %s axis %d: index range [%" PRId64 ", %" PRId64
                             "] outside dim %" PRId64,
                             what, name, axis, lo, hi, tn->dims[axis]);
    }
    return TROUPE_OK;
}

static troupe_status_t s_check_access(s_vctx_t *v, const troupe_tnode_t *tn,
                                      const troupe_axis_index_t *idcs, const char *what)
{
    for (int a = 0; a < tn->ndims; a++)
        TROUPE_RETURN_IF_ERROR(s_check_index(v, tn, &idcs[a], a, what));
    return TROUPE_OK;
}

static troupe_status_t s_validate_ll(s_vctx_t *v, const troupe_ll_t *s);

static bool s_scope_open(const s_vctx_t *v, int32_t id)
{
    for (size_t i = 0; i < v->nscopes; i++)
        if (v->scopes[i] == id)
            return true;
    return false;
}

static troupe_status_t s_validate_sc(s_vctx_t *v, const troupe_sc_t *e)
{
    if (e == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "missing scalar expression");
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE: {
        if (!TROUPE__VEC_PUSH(v->scopes, v->nscopes, v->scopes_cap, e->u.local_scope.id))
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory validating");
        troupe_status_t st = s_validate_ll(v, e->u.local_scope.body);
        v->nscopes--;
        return st;
    }
    case TROUPE_SC_GET_LOCAL:
        if (!s_scope_open(v, e->u.get_local.id))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "get_local of scope %d outside that scope", e->u.get_local.id);
        return TROUPE_OK;
    case TROUPE_SC_GET_MERGE_BUFFER:
        if (v->merge != NULL && v->merge != e->u.get.tn)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "procedure reads two merge-buffer nodes #%d and #%d (at most one "
                                 "merge buffer per routine)",
                                 v->merge->id, e->u.get.tn->id);
        v->merge = e->u.get.tn;
        return s_check_access(v, e->u.get.tn, e->u.get.idcs, "merge-buffer read");
    case TROUPE_SC_GET:
        return s_check_access(v, e->u.get.tn, e->u.get.idcs, "read");
    case TROUPE_SC_TERNOP:
        if (e->u.op.op < 0 || e->u.op.op >= TROUPE_TERNOP_COUNT)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bad ternop %d", e->u.op.op);
        for (int i = 0; i < 3; i++)
            TROUPE_RETURN_IF_ERROR(s_validate_sc(v, e->u.op.args[i]));
        return TROUPE_OK;
    case TROUPE_SC_BINOP:
        if (e->u.op.op < 0 || e->u.op.op >= TROUPE_BINOP_COUNT)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bad binop %d", e->u.op.op);
        for (int i = 0; i < 2; i++)
            TROUPE_RETURN_IF_ERROR(s_validate_sc(v, e->u.op.args[i]));
        return TROUPE_OK;
    case TROUPE_SC_UNOP:
        if (e->u.op.op < 0 || e->u.op.op >= TROUPE_UNOP_COUNT)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bad unop %d", e->u.op.op);
        return s_validate_sc(v, e->u.op.args[0]);
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
        return TROUPE_OK;
    case TROUPE_SC_EMBED_INDEX:
        for (int k = 0; k < e->u.embed_index.nterms; k++) {
            int32_t sym = e->u.embed_index.terms[k].sym;
            if (sym < 0 || sym >= v->proc->nsyms ||
                (!v->proc->syms[sym].is_static && !v->ranges[sym].bound))
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "embedded index uses symbol %d outside its scope", sym);
        }
        return TROUPE_OK;
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown scalar kind %d", (int)e->kind);
}

static troupe_status_t s_validate_ll(s_vctx_t *v, const troupe_ll_t *s)
{
    if (s == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "missing statement");
    switch (s->kind) {
    case TROUPE_LL_NOOP:
    case TROUPE_LL_COMMENT:
        return TROUPE_OK;
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            TROUPE_RETURN_IF_ERROR(s_validate_ll(v, s->u.seq.items[i]));
        return TROUPE_OK;
    case TROUPE_LL_FOR: {
        int32_t sym = s->u.for_loop.sym;
        if (sym < 0 || sym >= v->proc->nsyms || v->proc->syms[sym].is_static)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "for loop over invalid symbol %d", sym);
        if (v->ranges[sym].bound)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "loop symbol %s reused in a nested loop",
                                 v->proc->syms[sym].name);
        if (s->u.for_loop.from > s->u.for_loop.to)
            return TROUPE_OK; /* empty loop: body never runs */
        v->ranges[sym] = (s_range_t){true, s->u.for_loop.from, s->u.for_loop.to};
        troupe_status_t st = s_validate_ll(v, s->u.for_loop.body);
        v->ranges[sym].bound = false;
        return st;
    }
    case TROUPE_LL_ZERO_OUT:
        return s->u.zero_out != NULL ? TROUPE_OK
                                     : troupe__error(TROUPE_INVALID_ARGUMENT, "zero_out of NULL");
    case TROUPE_LL_SET:
        TROUPE_RETURN_IF_ERROR(s_check_access(v, s->u.set.tn, s->u.set.idcs, "write"));
        return s_validate_sc(v, s->u.set.value);
    case TROUPE_LL_SET_FROM_VEC: {
        const troupe_tnode_t *tn = s->u.set_from_vec.tn;
        TROUPE_RETURN_IF_ERROR(s_check_access(v, tn, s->u.set_from_vec.idcs, "vector write"));
        if (tn->ndims == 0 || s->u.set_from_vec.length <= 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "vector write of node #%d: bad length",
                                 tn->id);
        troupe_axis_index_t last = s->u.set_from_vec.idcs[tn->ndims - 1];
        last.offset += s->u.set_from_vec.length - 1;
        TROUPE_RETURN_IF_ERROR(s_check_index(v, tn, &last, tn->ndims - 1, "vector write end"));
        return s_validate_sc(v, s->u.set_from_vec.arg);
    }
    case TROUPE_LL_SET_LOCAL:
        if (!s_scope_open(v, s->u.set_local.id))
            return troupe__error(TROUPE_INVALID_ARGUMENT, "set_local of scope %d outside it",
                                 s->u.set_local.id);
        return s_validate_sc(v, s->u.set_local.value);
    case TROUPE_LL_BIND_INDEX: {
        int32_t sym = s->u.bind_index.sym;
        const troupe_tnode_t *tn = s->u.bind_index.tn;
        if (sym < 0 || sym >= v->proc->nsyms || v->proc->syms[sym].is_static)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bind_index of invalid symbol %d", sym);
        if (v->ranges[sym].bound)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "bind_index symbol %s is already bound by an enclosing statement",
                                 v->proc->syms[sym].name);
        if (tn == NULL || s->u.bind_index.range < 1)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bind_index of %s: %s",
                                 v->proc->syms[sym].name,
                                 tn == NULL ? "no index node" : "range below 1");
        if (s->u.bind_index.table != NULL &&
            (s->u.bind_index.axis < 0 || s->u.bind_index.axis >= s->u.bind_index.table->ndims))
            return troupe__error(TROUPE_INVALID_ARGUMENT, "bind_index of %s: bad axis %d",
                                 v->proc->syms[sym].name, s->u.bind_index.axis);
        if (troupe_ll_writes(v->proc->body, tn)) {
            char name[64];
            troupe_tnode_debug_name(tn, name, sizeof name);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "gather index node %s is written by procedure %s: index nodes "
                                 "must be inputs of the routine that gathers with them",
                                 name, v->proc->name);
        }
        TROUPE_RETURN_IF_ERROR(s_check_access(v, tn, s->u.bind_index.idcs, "gather index read"));
        v->ranges[sym] = (s_range_t){true, 0, s->u.bind_index.range - 1};
        troupe_status_t st = s_validate_ll(v, s->u.bind_index.body);
        v->ranges[sym].bound = false;
        return st;
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "unknown statement kind %d", (int)s->kind);
}

troupe_status_t troupe_ll_proc_validate(const troupe_ll_proc_t *proc)
{
    if (proc->sticky != TROUPE_OK)
        return troupe__error(proc->sticky, "procedure %s: a builder failed (%s)", proc->name,
                             troupe_status_str(proc->sticky));
    s_vctx_t v = {proc, NULL, NULL, 0, 0, NULL};
    v.ranges = troupe_calloc((size_t)(proc->nsyms > 0 ? proc->nsyms : 1), sizeof *v.ranges);
    if (v.ranges == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory validating");
    troupe_status_t st = s_validate_ll(&v, proc->body);
    troupe_free(v.ranges);
    troupe_free(v.scopes);
    return st;
}

/* ---- equality and copy -------------------------------------------------------------------- */

bool troupe_axis_index_equal(const troupe_axis_index_t *a, const troupe_axis_index_t *b)
{
    if (a->nterms != b->nterms || a->offset != b->offset)
        return false;
    for (int k = 0; k < a->nterms; k++)
        if (a->terms[k].coeff != b->terms[k].coeff || a->terms[k].sym != b->terms[k].sym)
            return false;
    return true;
}

bool troupe_axis_indices_equal(const troupe_axis_index_t *a, const troupe_axis_index_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!troupe_axis_index_equal(&a[i], &b[i]))
            return false;
    return true;
}

bool troupe_axis_indices_use(const troupe_axis_index_t *idcs, int n, int32_t sym)
{
    for (int ax = 0; ax < n; ax++)
        for (int t = 0; t < idcs[ax].nterms; t++)
            if (idcs[ax].terms[t].sym == sym && idcs[ax].terms[t].coeff != 0)
                return true;
    return false;
}

bool troupe_sc_equal(const troupe_sc_t *a, const troupe_sc_t *b)
{
    TROUPE__IR_EQUAL_START(a, b);
    switch (a->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return a->u.local_scope.id == b->u.local_scope.id &&
               troupe__ir_same_node(a->u.local_scope.tn, b->u.local_scope.tn) &&
               troupe_axis_indices_equal(a->u.local_scope.orig_indices, b->u.local_scope.orig_indices,
                            a->u.local_scope.tn->ndims) &&
               troupe_ll_equal(a->u.local_scope.body, b->u.local_scope.body);
    case TROUPE_SC_GET_LOCAL:
        return a->u.get_local.id == b->u.get_local.id;
    case TROUPE_SC_GET:
    case TROUPE_SC_GET_MERGE_BUFFER:
        return troupe__ir_same_node(a->u.get.tn, b->u.get.tn) &&
               troupe_axis_indices_equal(a->u.get.idcs, b->u.get.idcs, a->u.get.tn->ndims);
    case TROUPE_SC_TERNOP:
    case TROUPE_SC_BINOP:
    case TROUPE_SC_UNOP: {
        int n = a->kind == TROUPE_SC_TERNOP ? 3 : a->kind == TROUPE_SC_BINOP ? 2 : 1;
        if (a->u.op.op != b->u.op.op)
            return false;
        for (int i = 0; i < n; i++)
            if (!troupe_sc_equal(a->u.op.args[i], b->u.op.args[i]))
                return false;
        return true;
    }
    case TROUPE_SC_CONSTANT:
        return troupe__ir_same_bits(&a->u.constant, &b->u.constant, 1);
    case TROUPE_SC_CONSTANT_BITS:
        return a->u.constant_bits == b->u.constant_bits;
    case TROUPE_SC_EMBED_INDEX:
        return troupe_axis_index_equal(&a->u.embed_index, &b->u.embed_index);
    }
    return false;
}

static bool s_item_equal(const void *a, const void *b)
{
    return troupe_ll_equal(a, b);
}

bool troupe_ll_equal(const troupe_ll_t *a, const troupe_ll_t *b)
{
    TROUPE__IR_EQUAL_START(a, b);
    switch (a->kind) {
    case TROUPE_LL_NOOP:
        return true;
    case TROUPE_LL_COMMENT:
        return strcmp(a->u.comment, b->u.comment) == 0;
    case TROUPE_LL_SEQ:
        return troupe__ir_items_equal((const void *const *)a->u.seq.items, a->u.seq.count,
                                      (const void *const *)b->u.seq.items, b->u.seq.count,
                                      s_item_equal);
    case TROUPE_LL_FOR:
        return a->u.for_loop.sym == b->u.for_loop.sym && a->u.for_loop.from == b->u.for_loop.from &&
               a->u.for_loop.to == b->u.for_loop.to &&
               a->u.for_loop.trace_it == b->u.for_loop.trace_it &&
               troupe_ll_equal(a->u.for_loop.body, b->u.for_loop.body);
    case TROUPE_LL_ZERO_OUT:
        return troupe__ir_same_node(a->u.zero_out, b->u.zero_out);
    case TROUPE_LL_SET:
        return troupe__ir_same_node(a->u.set.tn, b->u.set.tn) &&
               troupe_axis_indices_equal(a->u.set.idcs, b->u.set.idcs, a->u.set.tn->ndims) &&
               troupe_sc_equal(a->u.set.value, b->u.set.value);
    case TROUPE_LL_SET_FROM_VEC:
        return troupe__ir_same_node(a->u.set_from_vec.tn, b->u.set_from_vec.tn) &&
               a->u.set_from_vec.length == b->u.set_from_vec.length &&
               a->u.set_from_vec.op == b->u.set_from_vec.op &&
               troupe_axis_indices_equal(a->u.set_from_vec.idcs, b->u.set_from_vec.idcs,
                            a->u.set_from_vec.tn->ndims) &&
               troupe_sc_equal(a->u.set_from_vec.arg, b->u.set_from_vec.arg);
    case TROUPE_LL_SET_LOCAL:
        return a->u.set_local.id == b->u.set_local.id &&
               troupe_sc_equal(a->u.set_local.value, b->u.set_local.value);
    case TROUPE_LL_BIND_INDEX:
        return a->u.bind_index.sym == b->u.bind_index.sym &&
               troupe__ir_same_node(a->u.bind_index.tn, b->u.bind_index.tn) &&
               troupe_axis_indices_equal(a->u.bind_index.idcs, b->u.bind_index.idcs,
                                         a->u.bind_index.tn->ndims) &&
               a->u.bind_index.range == b->u.bind_index.range &&
               (a->u.bind_index.table == NULL) == (b->u.bind_index.table == NULL) &&
               (a->u.bind_index.table == NULL ||
                troupe__ir_same_node(a->u.bind_index.table, b->u.bind_index.table)) &&
               a->u.bind_index.axis == b->u.bind_index.axis &&
               troupe_ll_equal(a->u.bind_index.body, b->u.bind_index.body);
    }
    return false;
}

troupe_sc_t *troupe_sc_copy(troupe_ll_proc_t *dst, const troupe_sc_t *e)
{
    if (e == NULL)
        return NULL;
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        return troupe_sc_local_scope(dst, e->u.local_scope.id, e->u.local_scope.tn,
                                     troupe_ll_copy(dst, e->u.local_scope.body),
                                     e->u.local_scope.orig_indices);
    case TROUPE_SC_GET_LOCAL:
        return troupe_sc_get_local(dst, e->u.get_local.id);
    case TROUPE_SC_GET:
        return troupe_sc_get(dst, e->u.get.tn, e->u.get.idcs);
    case TROUPE_SC_GET_MERGE_BUFFER:
        return troupe_sc_get_merge_buffer(dst, e->u.get.tn, e->u.get.idcs);
    case TROUPE_SC_TERNOP:
        return troupe_sc_ternop(
            dst, (troupe_ternop_t)e->u.op.op, troupe_sc_copy(dst, e->u.op.args[0]),
            troupe_sc_copy(dst, e->u.op.args[1]), troupe_sc_copy(dst, e->u.op.args[2]));
    case TROUPE_SC_BINOP:
        return troupe_sc_binop(dst, (troupe_binop_t)e->u.op.op,
                               troupe_sc_copy(dst, e->u.op.args[0]),
                               troupe_sc_copy(dst, e->u.op.args[1]));
    case TROUPE_SC_UNOP:
        return troupe_sc_unop(dst, (troupe_unop_t)e->u.op.op, troupe_sc_copy(dst, e->u.op.args[0]));
    case TROUPE_SC_CONSTANT:
        return troupe_sc_constant(dst, e->u.constant);
    case TROUPE_SC_CONSTANT_BITS:
        return troupe_sc_constant_bits(dst, e->u.constant_bits);
    case TROUPE_SC_EMBED_INDEX:
        return troupe_sc_embed_index(dst, e->u.embed_index);
    }
    return NULL;
}

troupe_ll_t *troupe_ll_copy(troupe_ll_proc_t *dst, const troupe_ll_t *s)
{
    if (s == NULL)
        return NULL;
    switch (s->kind) {
    case TROUPE_LL_NOOP:
        return troupe_ll_noop(dst);
    case TROUPE_LL_COMMENT:
        return troupe_ll_comment(dst, s->u.comment);
    case TROUPE_LL_SEQ: {
        troupe_ll_t **items = troupe_ll_alloc(dst, (s->u.seq.count + 1) * sizeof *items);
        if (items == NULL)
            return NULL;
        for (size_t i = 0; i < s->u.seq.count; i++)
            if ((items[i] = troupe_ll_copy(dst, s->u.seq.items[i])) == NULL)
                return NULL;
        return troupe_ll_seq(dst, s->u.seq.count, items);
    }
    case TROUPE_LL_FOR:
        return troupe_ll_for(dst, s->u.for_loop.sym, s->u.for_loop.from, s->u.for_loop.to,
                             troupe_ll_copy(dst, s->u.for_loop.body), s->u.for_loop.trace_it);
    case TROUPE_LL_ZERO_OUT:
        return troupe_ll_zero_out(dst, s->u.zero_out);
    case TROUPE_LL_SET:
        return troupe_ll_set(dst, s->u.set.tn, s->u.set.idcs, troupe_sc_copy(dst, s->u.set.value));
    case TROUPE_LL_SET_FROM_VEC:
        return troupe_ll_set_from_vec(dst, s->u.set_from_vec.tn, s->u.set_from_vec.idcs,
                                      s->u.set_from_vec.length, s->u.set_from_vec.op,
                                      troupe_sc_copy(dst, s->u.set_from_vec.arg));
    case TROUPE_LL_SET_LOCAL:
        return troupe_ll_set_local(dst, s->u.set_local.id,
                                   troupe_sc_copy(dst, s->u.set_local.value));
    case TROUPE_LL_BIND_INDEX:
        return troupe_ll_bind_index(dst, s->u.bind_index.sym, s->u.bind_index.tn,
                                    s->u.bind_index.idcs, s->u.bind_index.range,
                                    s->u.bind_index.table, s->u.bind_index.axis,
                                    troupe_ll_copy(dst, s->u.bind_index.body));
    }
    return NULL;
}
