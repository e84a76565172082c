/* troupe — the low-level optimiser (OCANNL `optimize_proc`): the driver and step 2 (memory-mode
 * inference) and step 5 (placeholders, inputs, outputs); the passes are compiler/trace.c,
 * compiler/virtualize.c, compiler/simplify.c and compiler/fuse.c. See compiler/optimize.h for
 * the rules and their OCANNL sources, compiler/optimize_impl.h for the context the passes
 * share. */
#include "compiler/optimize.h"

#include "base/alloc.h"
#include "base/clock.h"
#include "compiler/fuse.h"
#include "compiler/optimize_impl.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* ---- shared helpers ----------------------------------------------------------------------- */

troupe_status_t troupe__opt_oom(void)
{
    return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "out of memory optimizing a procedure");
}

troupe_status_t troupe__opt_proc_oom(const troupe_ll_proc_t *proc)
{
    return troupe__error(
        proc->sticky != TROUPE_OK ? proc->sticky : TROUPE_RESOURCE_EXHAUSTED,
        "procedure %s: building optimized code failed (%s)", proc->name,
        troupe_status_str(proc->sticky != TROUPE_OK ? proc->sticky : TROUPE_RESOURCE_EXHAUSTED));
}

static atomic_bool s_reference;
static _Thread_local troupe__opt_times_t s_times;

bool troupe__opt_set_reference(bool on)
{
    return atomic_exchange(&s_reference, on);
}

void troupe__opt_last_times(troupe__opt_times_t *out)
{
    *out = s_times;
}

ptrdiff_t troupe__opt_node_of(const troupe__opt_ctx_t *c, const troupe_tnode_t *tn)
{
    if (c->by_id != NULL) {
        uint64_t k = (uint64_t)((int64_t)tn->id - c->id_lo);
        if (k >= c->id_span)
            return -1;
        int32_t i = c->by_id[k];
        return i >= 0 && c->tns[i] == tn ? (ptrdiff_t)i : -1;
    }
    size_t lo = 0, hi = c->nn;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->tns[mid]->id < tn->id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nn && c->tns[lo] == tn ? (ptrdiff_t)lo : -1;
}

troupe_memory_mode_t troupe__opt_mode(troupe_memory_mode_kind_t kind, troupe_memory_type_t memtype)
{
    troupe_memory_mode_t m = {kind, memtype, TROUPE_SHARING_UNSET};
    return m;
}

/* Updates tn's mode; on an inconsistency re-records the tnode's message with context. */
troupe_status_t troupe__opt_update(const troupe__opt_ctx_t *c, troupe_tnode_t *tn,
                                   troupe_memory_mode_t m, int32_t prov, const char *why)
{
    troupe_status_t st = troupe_tnode_update_memory_mode(tn, m, prov);
    if (st == TROUPE_OK)
        return st;
    char msg[768];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    return troupe__error(st, "optimizing %s (%s): %s", c->proc->name, why, msg);
}

/* Rebuilding after a rewrite (steps 3c and 4): for loop s with body b, or set, set_from_vec or
 * set_local s with value v. s itself when the part is unchanged, NULL when it is NULL (a
 * failure). */
troupe_ll_t *troupe__opt_with_body(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_ll_t *b)
{
    if (b == NULL || b == s->u.for_loop.body)
        return b == NULL ? NULL : s;
    return troupe_ll_for(proc, s->u.for_loop.sym, s->u.for_loop.from, s->u.for_loop.to, b,
                         s->u.for_loop.trace_it);
}

troupe_ll_t *troupe__opt_with_bind_body(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_ll_t *b)
{
    if (b == NULL || b == s->u.bind_index.body)
        return b == NULL ? NULL : s;
    return troupe_ll_bind_index(proc, s->u.bind_index.sym, s->u.bind_index.tn,
                                s->u.bind_index.idcs, s->u.bind_index.range,
                                s->u.bind_index.table, s->u.bind_index.axis, b);
}

troupe_ll_t *troupe__opt_with_value(troupe_ll_proc_t *proc, troupe_ll_t *s, troupe_sc_t *v)
{
    if (v == NULL)
        return NULL;
    switch (s->kind) {
    case TROUPE_LL_SET:
        return v == s->u.set.value ? s : troupe_ll_set(proc, s->u.set.tn, s->u.set.idcs, v);
    case TROUPE_LL_SET_FROM_VEC:
        if (v == s->u.set_from_vec.arg)
            return s;
        return troupe_ll_set_from_vec(proc, s->u.set_from_vec.tn, s->u.set_from_vec.idcs,
                                      s->u.set_from_vec.length, s->u.set_from_vec.op, v);
    case TROUPE_LL_SET_LOCAL:
        return v == s->u.set_local.value ? s : troupe_ll_set_local(proc, s->u.set_local.id, v);
    default:
        return s;
    }
}

/* ---- step 2: memory-mode inference (OCANNL visit_llc epilogue) ------------------------------ */

/* ---- step 0: sole accumulations (troupe's) ------------------------------------------------ */

#define S_SOLE_MAX_DEPTH 16
#define S_SOLE_MAX_NESTS 8

/* Whether v reads tn (a local scope or a merge-buffer read: assumed to). */
static bool s_sc_reads(const troupe_sc_t *v, const troupe_tnode_t *tn)
{
    switch (v->kind) {
    case TROUPE_SC_GET:
        return v->u.get.tn == tn;
    case TROUPE_SC_TERNOP:
        return s_sc_reads(v->u.op.args[0], tn) || s_sc_reads(v->u.op.args[1], tn) ||
               s_sc_reads(v->u.op.args[2], tn);
    case TROUPE_SC_BINOP:
        return s_sc_reads(v->u.op.args[0], tn) || s_sc_reads(v->u.op.args[1], tn);
    case TROUPE_SC_UNOP:
        return s_sc_reads(v->u.op.args[0], tn);
    case TROUPE_SC_CONSTANT:
    case TROUPE_SC_CONSTANT_BITS:
    case TROUPE_SC_EMBED_INDEX:
        return false;
    default:
        return true;
    }
}

/* Whether `nest` is loops from 0 around one SET tn[I] = tn[I] + e (e not reading tn) whose
 * iterators each appear once in I, every axis of I an offset plus a mixed-radix sum of its
 * iterators (coefficients 1, e0, e0*e1, ...): the nest adds e into each cell of the box
 * lo + [0, len) exactly once. *e_out is e. */
static bool s_sole_box(const troupe_ll_t *nest, const troupe_tnode_t *tn, int64_t *lo,
                       int64_t *len, const troupe_sc_t **e_out)
{
    const troupe_ll_t *s = nest;
    int32_t sym[S_SOLE_MAX_DEPTH];
    int64_t ext[S_SOLE_MAX_DEPTH];
    bool used[S_SOLE_MAX_DEPTH] = {false};
    int depth = 0;
    while (s->kind == TROUPE_LL_FOR) {
        if (depth == S_SOLE_MAX_DEPTH || s->u.for_loop.from != 0 || s->u.for_loop.to < 0)
            return false;
        sym[depth] = s->u.for_loop.sym;
        ext[depth++] = s->u.for_loop.to + 1;
        s = s->u.for_loop.body;
    }
    if (depth == 0 || s->kind != TROUPE_LL_SET || s->u.set.tn != tn)
        return false;
    const troupe_sc_t *v = s->u.set.value, *e = NULL;
    if (v->kind != TROUPE_SC_BINOP || v->u.op.op != TROUPE_BINOP_ADD)
        return false;
    for (int a = 0; a < 2 && e == NULL; a++) {
        const troupe_sc_t *g = v->u.op.args[a];
        if (g->kind == TROUPE_SC_GET && g->u.get.tn == tn &&
            troupe_axis_indices_equal(g->u.get.idcs, s->u.set.idcs, tn->ndims))
            e = v->u.op.args[1 - a];
    }
    if (e == NULL || s_sc_reads(e, tn))
        return false;
    for (int ax = 0; ax < tn->ndims; ax++) {
        const troupe_axis_index_t *x = &s->u.set.idcs[ax];
        int lv[TROUPE_MAX_INDEX_TERMS];
        for (int t = 0; t < x->nterms; t++) {
            lv[t] = -1;
            for (int d = 0; d < depth; d++)
                if (sym[d] == x->terms[t].sym)
                    lv[t] = d;
            if (lv[t] < 0 || used[lv[t]] || x->terms[t].coeff <= 0)
                return false;
            used[lv[t]] = true;
        }
        int64_t span = 1; /* the terms by increasing coefficient: each the span below it */
        for (int placed = 0; placed < x->nterms; placed++) {
            int next = -1;
            for (int t = 0; t < x->nterms && next < 0; t++)
                if (x->terms[t].coeff == span)
                    next = t;
            if (next < 0)
                return false;
            span *= ext[lv[next]];
        }
        if (x->offset < 0 || x->offset + span > tn->dims[ax])
            return false;
        lo[ax] = x->offset;
        len[ax] = span;
    }
    for (int d = 0; d < depth; d++)
        if (!used[d])
            return false; /* a reduction loop adds into a cell more than once */
    *e_out = e;
    return true;
}

/* The nest with its SET's value replaced by e (same loops, same index). */
static troupe_ll_t *s_sole_rebuild(troupe_ll_proc_t *p, const troupe_ll_t *nest,
                                   const troupe_sc_t *e)
{
    if (nest->kind == TROUPE_LL_SET)
        return troupe_ll_set(p, nest->u.set.tn, nest->u.set.idcs, (troupe_sc_t *)e);
    troupe_ll_t *body = s_sole_rebuild(p, nest->u.for_loop.body, e);
    return body ? troupe_ll_for(p, nest->u.for_loop.sym, nest->u.for_loop.from,
                                nest->u.for_loop.to, body, nest->u.for_loop.trace_it)
                : NULL;
}

/* Step 0: a ZERO_OUT of a node followed, among the body's top-level items, by nests that each
 * add into their own box of it once per cell, the boxes partitioning the node (a permuted copy:
 * attention's concatenation of heads, the q/k/v gradients into the qkv gradient), becomes
 * those nests setting their values: the zeroing and the reads of the zeros go. The values are
 * those of 0 + e, except that a -0 stays -0. */
static troupe_status_t s_sole_accumulations(troupe_ll_proc_t *proc, size_t *out_count)
{
    *out_count = 0;
    troupe_ll_t *body = proc->body;
    if (body->kind != TROUPE_LL_SEQ)
        return TROUPE_OK;
    size_t n = body->u.seq.count;
    troupe_ll_t **items = troupe_calloc(n + 1, sizeof *items);
    if (items == NULL)
        return troupe__opt_oom();
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        troupe_ll_t *z = body->u.seq.items[i];
        items[k++] = z;
        if (z->kind != TROUPE_LL_ZERO_OUT)
            continue;
        const troupe_tnode_t *tn = z->u.zero_out;
        int64_t lo[S_SOLE_MAX_NESTS][TROUPE_MAX_DIMS], len[S_SOLE_MAX_NESTS][TROUPE_MAX_DIMS];
        const troupe_sc_t *e[S_SOLE_MAX_NESTS];
        int64_t volume = 0;
        size_t nn = 0;
        while (nn < S_SOLE_MAX_NESTS && i + 1 + nn < n && volume < troupe_tnode_num_elems(tn) &&
               s_sole_box(body->u.seq.items[i + 1 + nn], tn, lo[nn], len[nn], &e[nn])) {
            int64_t v = 1;
            for (int ax = 0; ax < tn->ndims; ax++)
                v *= len[nn][ax];
            bool disjoint = true;
            for (size_t q = 0; q < nn && disjoint; q++) {
                bool apart = false;
                for (int ax = 0; ax < tn->ndims && !apart; ax++)
                    apart = lo[nn][ax] + len[nn][ax] <= lo[q][ax] ||
                            lo[q][ax] + len[q][ax] <= lo[nn][ax];
                disjoint = apart;
            }
            if (!disjoint)
                break;
            volume += v;
            nn++;
        }
        if (nn == 0 || volume != troupe_tnode_num_elems(tn))
            continue;
        k--; /* the zeroing goes */
        for (size_t q = 0; q < nn; q++) {
            items[k] = s_sole_rebuild(proc, body->u.seq.items[i + 1 + q], e[q]);
            if (items[k++] == NULL) {
                troupe_free(items);
                return troupe__opt_proc_oom(proc);
            }
        }
        i += nn;
        (*out_count)++;
    }
    troupe_status_t st = TROUPE_OK;
    if (*out_count > 0) {
        troupe_ll_t *seq = troupe_ll_seq(proc, k, items);
        if (seq == NULL)
            st = troupe__opt_proc_oom(proc);
        else
            proc->body = seq;
    }
    troupe_free(items);
    return st;
}

static troupe_status_t s_infer_modes(troupe__opt_ctx_t *c)
{
    for (size_t i = 0; i < c->nn; i++) {
        troupe_tnode_t *tn = c->tns[i];
        troupe_ll_traced_t *tr = &c->traced[i];
        troupe__opt_node_t *nd = &c->nd[i];
        if (!tr->is_accessing && tr->assignments == 0)
            continue; /* mentioned only as a local scope's node */
        /* troupe addition: a cheap definition read a few times is recomputed at each read
         * rather than stored and loaded (the loads and stores cost more than the operations,
         * which the C compiler shares where the reads sit in one loop after fusion) */
        bool cheap = nd->chain_cost <= TROUPE__OPT_CHEAP_OPS &&
                     tr->max_visits <= c->o.virtualize_max_cheap_visits;
        bool too_many =
            (tr->max_visits > c->o.virtualize_max_visits && !cheap) || tr->read_before_write;
        nd->constexpr_wanted = c->o.inline_scalar_constexprs && c->o.virtualize &&
                               tr->is_scalar_constexpr && nd->external_read &&
                               !troupe_tnode_known_non_virtual(tn);
        bool skip_simple = c->o.inline_simple_computations && !tr->is_complex &&
                           !troupe_tnode_known_non_virtual(tn);
        if (!nd->constexpr_wanted && !skip_simple && too_many &&
            !troupe_tnode_get_memory_mode(tn, NULL, NULL))
            TROUPE_RETURN_IF_ERROR(
                troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_NEVER_VIRTUAL, 0),
                                   TROUPE_PROV_TOO_MANY_VISITS, "cell read repeatedly"));
        if (tr->read_only && tr->is_accessing) {
            if (troupe_tnode_mode_is_unspecified(tn)) {
                TROUPE_RETURN_IF_ERROR(troupe__opt_update(
                    c, tn, troupe__opt_mode(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_UNSET_HOSTED),
                    TROUPE_PROV_READ_ONLY_HOSTED, "read-only"));
            } else if (troupe_tnode_known_not_materialized(tn)) {
                char name[96], mode[96];
                troupe_memory_mode_t m;
                int32_t prov = 0;
                troupe_tnode_debug_name(tn, name, sizeof name);
                troupe_tnode_get_memory_mode(tn, &m, &prov);
                troupe_memory_mode_to_string(m, mode, sizeof mode);
                return troupe__error(TROUPE_FAILED_PRECONDITION,
                                     "optimizing %s: %s is read but not computed here, and its "
                                     "memory mode %s/%" PRId32
                                     " keeps no data between routines: mark it materialized "
                                     "before the first routine using it is optimized",
                                     c->proc->name, name, mode, prov);
            } else if (troupe_tnode_known_non_virtual(tn)) {
                TROUPE_RETURN_IF_ERROR(
                    troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_MATERIALIZED, 0),
                                       TROUPE_PROV_READ_ONLY_MATERIALIZED, "read-only"));
            }
        }
        if (tr->read_before_write && !troupe_tnode_known_virtual(tn))
            TROUPE_RETURN_IF_ERROR(
                troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_MATERIALIZED, 0),
                                   TROUPE_PROV_RECURRENT, "read before written"));
        if (nd->merge_read)
            TROUPE_RETURN_IF_ERROR(
                troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_MATERIALIZED, 0),
                                   TROUPE_PROV_MERGE_SOURCE, "read through a merge buffer"));
        if (tr->assignments > 0 && !nd->external_read) {
            troupe_memory_mode_t m;
            bool has = troupe_tnode_get_memory_mode(tn, &m, NULL);
            if (!has || m.kind == TROUPE_MM_NEVER_VIRTUAL ||
                m.kind == TROUPE_MM_EFFECTIVELY_CONSTANT)
                TROUPE_RETURN_IF_ERROR(
                    troupe__opt_update(c, tn, troupe__opt_mode(TROUPE_MM_MATERIALIZED, 0),
                                       TROUPE_PROV_RESULT, "result of the procedure"));
        }
    }
    return TROUPE_OK;
}

/* ---- step 5 and the driver ---------------------------------------------------------------- */

void troupe_optimize_opts_default(troupe_optimize_opts_t *opts)
{
    opts->virtualize_max_visits = 1;
    opts->virtualize_max_cheap_visits = 3;
    opts->virtualize_max_tracing_dim = 5;
    opts->max_trace_steps = (int64_t)1 << 20;
    opts->inline_scalar_constexprs = true;
    opts->inline_simple_computations = true;
    opts->inline_complex_computations = false;
    opts->inline_narrow_precisions = false;
    opts->virtualize = true;
    opts->simplify = true;
    opts->fuse_loops = true;
    opts->fuse_outer = true;
    opts->sole_accumulations = true;
    opts->fuse_fma = true;
    opts->expand_integer_pow = true;
    opts->fold_mul_by_zero = false;
    opts->iteration_scalars = false;
    opts->local_max_bytes = -1;
}

const troupe_ll_traced_t *troupe_optimize_traced(const troupe_ll_proc_t *proc,
                                                 const troupe_tnode_t *tn)
{
    if (proc == NULL || tn == NULL || !proc->optimized || proc->traced == NULL)
        return NULL;
    ptrdiff_t i = troupe_ll_proc_node_index(proc, tn);
    return i < 0 ? NULL : &proc->traced[i];
}

static void s_ctx_free(troupe__opt_ctx_t *c)
{
    if (c->nd != NULL)
        for (size_t i = 0; i < c->nn; i++) {
            troupe__opt_node_t *nd = &c->nd[i];
            TROUPE__OPT_VEC_FREE(nd->wpos);
            TROUPE__OPT_VEC_FREE(nd->rpos);
            TROUPE__OPT_VEC_FREE(nd->unit_I);
            TROUPE__OPT_VEC_FREE(nd->R);
            TROUPE__OPT_VEC_FREE(nd->stored);
            troupe_free(nd->elems.slots);
            troupe_free(nd->dense);
        }
    if (c->item_reads != NULL)
        for (size_t q = 0; q < c->nitems; q++)
            TROUPE__OPT_VEC_FREE(c->item_reads[q]);
    troupe_free(c->item_reads);
    troupe_free(c->item_nwriters);
    troupe_free(c->item_writer);
    troupe_free(c->nd);
    troupe_free(c->traced);
    troupe_free(c->tns);
    troupe_free(c->by_id);
    troupe_free(c->env);
}

/* The direct node table (troupe__opt_node_of) when the procedure's ids are dense enough
 * (node ids are process-wide, so a procedure's ids can be far apart; then the search stays).
 * false: out of memory. */
static bool s_index_nodes(troupe__opt_ctx_t *c)
{
    if (c->reference || c->nn == 0)
        return true;
    int64_t span = (int64_t)c->tns[c->nn - 1]->id - c->tns[0]->id + 1;
    if (span > (int64_t)(8 * c->nn + 1024))
        return true;
    c->by_id = troupe_malloc((size_t)span * sizeof *c->by_id);
    if (c->by_id == NULL)
        return false;
    c->id_lo = c->tns[0]->id;
    c->id_span = (size_t)span;
    for (size_t k = 0; k < (size_t)span; k++)
        c->by_id[k] = -1;
    for (size_t i = 0; i < c->nn; i++)
        c->by_id[c->tns[i]->id - c->id_lo] = (int32_t)i;
    return true;
}

/* Resolves placeholders, chaining the provenance so the reason that chose the placeholder
 * stays visible (e.g. 1703: Never_virtual for repeated reads, then Local). */
static void s_resolve(troupe_tnode_t *tn, int64_t local_max_bytes)
{
    troupe_memory_mode_t m;
    int32_t prov = 0;
    bool has = troupe_tnode_get_memory_mode(tn, &m, &prov);
    if (has && (m.kind == TROUPE_MM_VIRTUAL || m.kind == TROUPE_MM_LOCAL ||
                m.kind == TROUPE_MM_ON_DEVICE || m.kind == TROUPE_MM_HOSTED))
        return;
    int64_t chained = has ? (int64_t)prov * 1000 + TROUPE_PROV_RESOLVED : TROUPE_PROV_RESOLVED;
    if (chained > INT32_MAX || chained < INT32_MIN)
        chained = TROUPE_PROV_RESOLVED;
    troupe_tnode_default_to_most_local_within(tn, (int32_t)chained, local_max_bytes);
}

static troupe_status_t s_finish(troupe__opt_ctx_t *c)
{
    troupe_ll_proc_t *proc = c->proc;
    troupe_ll_traced_t *traced = troupe_calloc(proc->nnodes + 1, sizeof *traced);
    troupe_tnode_t **ins = troupe_calloc(proc->nnodes + 1, sizeof *ins);
    troupe_tnode_t **outs = troupe_calloc(proc->nnodes + 1, sizeof *outs);
    if (traced == NULL || ins == NULL || outs == NULL) {
        troupe_free(traced);
        troupe_free(ins);
        troupe_free(outs);
        return troupe__opt_oom();
    }
    size_t nin = 0, nout = 0;
    for (size_t k = 0; k < proc->nnodes; k++) {
        troupe_tnode_t *tn = proc->nodes[k];
        ptrdiff_t i = troupe__opt_node_of(c, tn);
        if (i >= 0)
            traced[k] = c->traced[i];
        traced[k].tn = tn;
        s_resolve(tn, c->o.local_max_bytes);
        if (!troupe_tnode_is_materialized_force(tn, TROUPE_PROV_RESOLVED))
            continue;
        const troupe_ll_traced_t *tr = &traced[k];
        if (!troupe_tnode_known_constant(tn) &&
            ((tr->read_only && tr->is_accessing) || tr->read_before_write))
            ins[nin++] = tn;
        if (tr->assignments > 0)
            outs[nout++] = tn;
    }
    troupe_free(proc->traced);
    troupe_free(proc->inputs);
    troupe_free(proc->outputs);
    proc->traced = traced;
    proc->inputs = ins;
    proc->ninputs = nin;
    proc->outputs = outs;
    proc->noutputs = nout;
    proc->merge_node = c->merge;
    return TROUPE_OK;
}

troupe_status_t troupe_ll_optimize(troupe_ll_proc_t *proc, const troupe_optimize_opts_t *opts)
{
    if (proc == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe_ll_optimize: proc is NULL");
    troupe__opt_ctx_t c;
    memset(&c, 0, sizeof c);
    c.proc = proc;
    if (opts != NULL)
        c.o = *opts;
    else
        troupe_optimize_opts_default(&c.o);
    if (c.o.virtualize_max_visits < 0 || c.o.virtualize_max_cheap_visits < 0 ||
        c.o.virtualize_max_tracing_dim < 0 ||
        c.o.max_trace_steps < 0 || c.o.local_max_bytes < -1)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "troupe_ll_optimize: negative limit in the options");
    memset(&s_times, 0, sizeof s_times);
    int64_t t0 = troupe_now_ns(), t = t0, now;
#define S_LAP(field) (now = troupe_now_ns(), s_times.field += now - t, t = now)
    c.reference = atomic_load(&s_reference);
    troupe_status_t st = troupe_ll_proc_validate(proc);
    if (st != TROUPE_OK)
        return st;
    proc->optimized = false;

    if (c.o.sole_accumulations) {
        size_t sole = 0;
        if ((st = s_sole_accumulations(proc, &sole)) != TROUPE_OK)
            return st;
    }
    /* Context: node snapshot, items. */
    c.nn = proc->nnodes;
    c.tns = troupe_calloc(c.nn + 1, sizeof *c.tns);
    c.traced = troupe_calloc(c.nn + 1, sizeof *c.traced);
    c.nd = troupe_calloc(c.nn + 1, sizeof *c.nd);
    c.env_syms = proc->nsyms;
    c.env = troupe_calloc((size_t)proc->nsyms + 1, sizeof *c.env);
    if (c.tns == NULL || c.traced == NULL || c.nd == NULL || c.env == NULL) {
        st = troupe__opt_oom();
        goto out;
    }
    if (c.nn > 0)
        memcpy(c.tns, proc->nodes, c.nn * sizeof *c.tns);
    if (!s_index_nodes(&c)) {
        st = troupe__opt_oom();
        goto out;
    }
    for (size_t i = 0; i < c.nn; i++)
        c.traced[i].tn = c.tns[i];
    if (proc->body->kind == TROUPE_LL_SEQ) {
        c.items = proc->body->u.seq.items;
        c.nitems = proc->body->u.seq.count;
    } else {
        c.items = &proc->body;
        c.nitems = 1;
    }
    c.item_reads = troupe_calloc(c.nitems + 1, sizeof *c.item_reads);
    c.item_nwriters = troupe_calloc(c.nitems + 1, sizeof *c.item_nwriters);
    c.item_writer = troupe_calloc(c.nitems + 1, sizeof *c.item_writer);
    if (c.item_reads == NULL || c.item_nwriters == NULL || c.item_writer == NULL) {
        st = troupe__opt_oom();
        goto out;
    }

    S_LAP(setup_ns);
    /* Step 1: scan, trace, derive; the definition units of step 3 (a reduction around a
     * definition makes a computation complex, which step 2 uses). */
    st = troupe__opt_trace(&c);
    S_LAP(trace_ns);
    if (st != TROUPE_OK || (st = troupe__opt_find_units(&c)) != TROUPE_OK)
        goto out;
    S_LAP(units_ns);
    /* Step 2. */
    if ((st = s_infer_modes(&c)) != TROUPE_OK)
        goto out;
    S_LAP(infer_ns);
    /* Step 3. */
    if ((st = troupe__opt_virtualize(&c)) != TROUPE_OK)
        goto out;
    S_LAP(virtualize_ns);
    /* Step 4. */
    if (c.o.simplify) {
        troupe_ll_t *b = NULL;
        if ((st = troupe__opt_simplify(proc, &c.o, &b)) != TROUPE_OK)
            goto out;
        proc->body = b;
    }
    if (proc->sticky != TROUPE_OK) {
        st = troupe__opt_proc_oom(proc);
        goto out;
    }
    S_LAP(simplify_ns);
    /* Step 4b: loop fusion (fuse.h). */
    if (c.o.fuse_loops &&
        (st = troupe_ll_fuse_loops_outer(proc, c.o.fuse_outer, NULL)) != TROUPE_OK)
        goto out;
    S_LAP(fuse_ns);
    /* Step 4c: iteration scalars (scalars.c; its refusal runs with the option off too). */
    if ((st = troupe__opt_iteration_scalars(&c)) != TROUPE_OK)
        goto out;
    /* Step 5. */
    if ((st = s_finish(&c)) != TROUPE_OK)
        goto out;
    st = troupe_ll_proc_validate(proc);
    if (st != TROUPE_OK) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        st = troupe__error(TROUPE_INTERNAL, "optimizer bug: %s no longer validates: %s", proc->name,
                           msg);
        goto out;
    }
    proc->optimized = true;
out:
    s_ctx_free(&c);
    S_LAP(finish_ns);
    s_times.total_ns = t - t0;
#undef S_LAP
    return st;
}
