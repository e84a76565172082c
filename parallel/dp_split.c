/* troupe — the segmented gradient routine of the data-parallel driver (docs/parallel.md, Overlap;
 * parallel/dp_impl.h): cuts a gradient comp's top-level sequence where groups of gradients are
 * last used, so that each group's allreduce can start while the later segments compute (the
 * buckets of Horovod and PyTorch DDP, which start as soon as backprop produced them).
 *
 * A segment ends after the last top-level item that reads or writes any gradient of its bucket;
 * the last segment runs to the end of the comp. When every gradient is last used by the last
 * item and that item is itself a sequence (a comp built as Seq(forward, backprop), or the
 * backward pass under block comments), it is opened into its items and the cut is tried again. Nodes the comp writes that two segments touch
 * must live in the context between the segments' routines: they are refined to Materialized
 * before the segments are compiled (the caller's nodes: dp.h says so).
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/log.h"
#include "ir/memory_mode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Provenance of the refinement to Materialized (ir/memory_mode.h): parallel/, the splitter. */
#define S_PROV_SPLIT 5101

void troupe__dp_split_free(troupe__dp_split_t *s)
{
    if (s == NULL)
        return;
    troupe_free(s->items);
    troupe_free(s->seg_end);
    troupe_free(s->seg_of_grad);
    troupe_free(s->crossing);
    memset(s, 0, sizeof *s);
}

/* The comp's top-level items: the root SEQ's items (a root block comment around a SEQ is
 * opened), else the root alone. */
static troupe_status_t s_items(const troupe_asgn_comp_t *comp, troupe__dp_split_t *s)
{
    const troupe_asgn_t *t = comp->root;
    if (t != NULL && t->kind == TROUPE_ASGN_BLOCK_COMMENT && t->u.block_comment.body != NULL &&
        t->u.block_comment.body->kind == TROUPE_ASGN_SEQ)
        t = t->u.block_comment.body;
    size_t n = t != NULL && t->kind == TROUPE_ASGN_SEQ ? t->u.seq.count : 1;
    s->items = troupe_calloc(n, sizeof *s->items);
    if (s->items == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t j = 0; j < n; j++)
        s->items[j] = t != NULL && t->kind == TROUPE_ASGN_SEQ ? t->u.seq.items[j] : t;
    s->nitems = n;
    return TROUPE_OK;
}

/* The SEQ an item opens into: a SEQ of 2 or more items, or block comments around one (the
 * comments are dropped from the segment comps: they only annotate generated code); else NULL. */
static const troupe_asgn_t *s_openable(const troupe_asgn_t *t)
{
    while (t != NULL && t->kind == TROUPE_ASGN_BLOCK_COMMENT)
        t = t->u.block_comment.body;
    return t != NULL && t->kind == TROUPE_ASGN_SEQ && t->u.seq.count >= 2 ? t : NULL;
}

/* Replaces the last item by its own items when it opens (s_openable): a comp built as
 * Seq(forward, backprop), or with the backward pass in a block, is cut inside it. False when
 * it does not open (*st OK) or on an allocation failure (*st says so). */
static bool s_open_last(troupe__dp_split_t *s, troupe_status_t *st)
{
    *st = TROUPE_OK;
    const troupe_asgn_t *seq = s->nitems > 0 ? s_openable(s->items[s->nitems - 1]) : NULL;
    if (seq == NULL)
        return false;
    size_t n = s->nitems - 1 + seq->u.seq.count;
    const troupe_asgn_t **items = troupe_realloc(s->items, n * sizeof *items);
    if (items == NULL) {
        *st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
        return false;
    }
    for (size_t j = 0; j < seq->u.seq.count; j++)
        items[s->nitems - 1 + j] = seq->u.seq.items[j];
    s->items = items;
    s->nitems = n;
    return true;
}

/* Per node of the comp (comp->nodes, by index): the first and last item touching it, and
 * whether some item writes it. */
typedef struct s_use {
    size_t first, last; /* SIZE_MAX when untouched */
    bool written;
} s_use_t;

static void s_touch(const troupe_asgn_comp_t *comp, s_use_t *use, const troupe_tnode_t *tn,
                    size_t item, bool write)
{
    size_t k = troupe_asgn_comp_node_index(comp, tn);
    if (k == SIZE_MAX)
        return;
    s_use_t *u = &use[k];
    if (u->first == SIZE_MAX || item < u->first)
        u->first = item;
    if (u->last == SIZE_MAX || item > u->last)
        u->last = item;
    u->written = u->written || write;
}

static void s_walk(const troupe_asgn_comp_t *comp, s_use_t *use, const troupe_asgn_t *t,
                   size_t item)
{
    if (t == NULL)
        return;
    switch (t->kind) {
    case TROUPE_ASGN_NOOP:
        break;
    case TROUPE_ASGN_SEQ:
        for (size_t j = 0; j < t->u.seq.count; j++)
            s_walk(comp, use, t->u.seq.items[j], item);
        break;
    case TROUPE_ASGN_BLOCK_COMMENT:
        s_walk(comp, use, t->u.block_comment.body, item);
        break;
    case TROUPE_ASGN_ACCUM_OP: {
        int nrhs = (int)t->u.accum_op.rhs_kind;
        s_touch(comp, use, t->u.accum_op.lhs, item, true);
        for (int r = 0; r < nrhs && r < 3; r++)
            s_touch(comp, use, t->u.accum_op.rhs[r].tn, item, false);
        for (int g = 0; g < t->u.accum_op.ngather; g++)
            s_touch(comp, use, t->u.accum_op.gather[g], item, false);
        break;
    }
    case TROUPE_ASGN_SET_VEC_UNOP:
        s_touch(comp, use, t->u.set_vec_unop.lhs, item, true);
        s_touch(comp, use, t->u.set_vec_unop.rhs.tn, item, false);
        break;
    case TROUPE_ASGN_FETCH:
        s_touch(comp, use, t->u.fetch.tn, item, true);
        s_touch(comp, use, t->u.fetch.sliced, item, false);
        break;
    }
}

/* The segment holding item j. */
static size_t s_seg_of_item(const troupe__dp_split_t *s, size_t j)
{
    size_t g = 0;
    while (s->seg_end[g] <= j)
        g++;
    return g;
}

/* One segment: a plan that does not split (why says why). */
static troupe_status_t s_whole(troupe__dp_split_t *s, size_t n_grads, const char *why)
{
    s->nseg = 1;
    troupe_free(s->seg_end);
    s->seg_end = troupe_calloc(1, sizeof *s->seg_end);
    if (s->seg_end == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    s->seg_end[0] = s->nitems;
    for (size_t i = 0; i < n_grads; i++)
        s->seg_of_grad[i] = 0;
    s->ncrossing = 0;
    snprintf(s->why, sizeof s->why, "%s", why);
    return TROUPE_OK;
}

troupe_status_t troupe__dp_split_plan(const troupe_asgn_comp_t *comp, troupe_tnode_t *const *grads,
                                      size_t n_grads, troupe__dp_split_t *out)
{
    return troupe__dp_split_plan_buckets(comp, grads, n_grads, 0, 0, out);
}

troupe_status_t troupe__dp_split_plan_buckets(const troupe_asgn_comp_t *comp,
                                              troupe_tnode_t *const *grads, size_t n_grads,
                                              size_t first_bytes, size_t bucket_bytes,
                                              troupe__dp_split_t *out)
{
    memset(out, 0, sizeof *out);
    troupe_status_t st = s_items(comp, out);
    s_use_t *use = NULL;
    size_t *last = NULL;
    if (st != TROUPE_OK)
        goto fail;
    out->seg_of_grad = troupe_calloc(n_grads ? n_grads : 1, sizeof *out->seg_of_grad);
    use = troupe_calloc(comp->nnodes ? comp->nnodes : 1, sizeof *use);
    last = troupe_calloc(n_grads ? n_grads : 1, sizeof *last);
    if (out->seg_of_grad == NULL || use == NULL || last == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
        goto fail;
    }
    /* Cut the top-level items; while every gradient is last used by the last item and that
     * item is a sequence of its own (Seq(forward, backprop), a block around the backward
     * pass), open it and cut again. */
    size_t nseg = 1;
    for (;;) {
        if (out->nitems >= 2) {
            for (size_t i = 0; i < comp->nnodes; i++) {
                use[i].first = use[i].last = SIZE_MAX;
                use[i].written = false;
            }
            for (size_t j = 0; j < out->nitems; j++)
                s_walk(comp, use, out->items[j], j);
            /* each gradient's last use ends its bucket's segment */
            for (size_t i = 0; i < n_grads; i++) {
                size_t k = troupe_asgn_comp_node_index(comp, grads[i]);
                if (k == SIZE_MAX || use[k].last == SIZE_MAX) {
                    st = s_whole(out, n_grads, "a gradient is not used by the gradient computation");
                    goto done;
                }
                last[i] = use[k].last;
            }
            troupe_free(out->seg_end);
            out->seg_end = troupe_calloc(out->nitems, sizeof *out->seg_end);
            if (out->seg_end == NULL) {
                st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
                goto fail;
            }
            /* a place to cut: after an item (not the last) where a gradient is last used; a
             * bucket closes there once it holds its cap (DDP's buckets: the first smaller) */
            nseg = 0;
            size_t places = 0, bytes = 0;
            for (size_t j = 0; j + 1 < out->nitems; j++) {
                bool place = false;
                for (size_t i = 0; i < n_grads; i++) {
                    if (last[i] != j)
                        continue;
                    place = true;
                    bytes += (size_t)troupe_tnode_num_elems(grads[i]) *
                             troupe_prec_size_bytes(grads[i]->prec);
                }
                places += place;
                if (place && bytes >= (nseg == 0 ? first_bytes : bucket_bytes)) {
                    out->seg_end[nseg++] = j + 1;
                    bytes = 0;
                }
            }
            out->seg_end[nseg++] = out->nitems; /* the last segment runs to the end */
            out->nseg = nseg;
            if (nseg > 1)
                break;
            if (places > 0) { /* places to cut, but no bucket filled before the last item */
                char why[sizeof out->why];
                snprintf(why, sizeof why,
                         "the gradients finished before the last item hold %zu bytes, under the "
                         "first bucket's %zu",
                         bytes, first_bytes);
                st = s_whole(out, n_grads, why);
                goto done;
            }
        }
        size_t before = out->nitems;
        if (!s_open_last(out, &st)) {
            if (st != TROUPE_OK)
                goto fail;
            st = s_whole(out, n_grads,
                         before < 2 ? "the gradient computation has one top-level item"
                                    : "every gradient is last used by the last top-level item");
            goto done;
        }
    }
    for (size_t i = 0; i < n_grads; i++)
        out->seg_of_grad[i] = s_seg_of_item(out, last[i]);
    /* the nodes the comp writes that more than one segment touches */
    out->crossing = troupe_calloc(comp->nnodes, sizeof *out->crossing);
    if (out->crossing == NULL) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
        goto fail;
    }
    for (size_t k = 0; k < comp->nnodes; k++) {
        if (!use[k].written || use[k].first == SIZE_MAX ||
            s_seg_of_item(out, use[k].first) == s_seg_of_item(out, use[k].last))
            continue;
        troupe_tnode_t *tn = comp->nodes[k];
        troupe_memory_mode_t mm;
        int32_t prov = 0;
        if (troupe_tnode_get_memory_mode(tn, &mm, &prov) &&
            (mm.kind == TROUPE_MM_VIRTUAL || mm.kind == TROUPE_MM_LOCAL)) {
            char nm[64], why[sizeof out->why];
            troupe_tnode_debug_name(tn, nm, sizeof nm);
            snprintf(why, sizeof why, "node %s crosses segments but is already %s", nm,
                     mm.kind == TROUPE_MM_VIRTUAL ? "Virtual" : "Local");
            st = s_whole(out, n_grads, why);
            goto done;
        }
        out->crossing[out->ncrossing++] = tn;
    }
done:
    troupe_free(use);
    troupe_free(last);
    return st;
fail:
    troupe_free(use);
    troupe_free(last);
    troupe__dp_split_free(out);
    return st;
}

troupe_status_t troupe__dp_split_late_param(const troupe_asgn_comp_t *comp,
                                            const troupe__dp_split_t *s,
                                            troupe_tnode_t *const *params, size_t n_params,
                                            size_t *out_late)
{
    *out_late = SIZE_MAX;
    if (s->nseg <= 1)
        return TROUPE_OK;
    s_use_t *use = troupe_calloc(comp->nnodes ? comp->nnodes : 1, sizeof *use);
    if (use == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t i = 0; i < comp->nnodes; i++) {
        use[i].first = use[i].last = SIZE_MAX;
        use[i].written = false;
    }
    for (size_t j = 0; j < s->nitems; j++)
        s_walk(comp, use, s->items[j], j);
    for (size_t i = 0; i < n_params && *out_late == SIZE_MAX; i++) {
        size_t k = troupe_asgn_comp_node_index(comp, params[i]);
        if (k != SIZE_MAX && use[k].last != SIZE_MAX &&
            s_seg_of_item(s, use[k].last) > s->seg_of_grad[i])
            *out_late = i;
    }
    troupe_free(use);
    return TROUPE_OK;
}

troupe_status_t troupe__dp_split_materialize(const troupe__dp_split_t *s)
{
    const troupe_memory_mode_t mat = {TROUPE_MM_MATERIALIZED, TROUPE_MEMTYPE_UNSET_HOSTED,
                                      TROUPE_SHARING_UNSET};
    for (size_t i = 0; i < s->ncrossing; i++) {
        troupe_status_t st = troupe_tnode_update_memory_mode(s->crossing[i], mat, S_PROV_SPLIT);
        if (st != TROUPE_OK)
            return st;
    }
    return TROUPE_OK;
}

/* Operands of the tree being copied (the union's members have no type names). */
#define A (t->u.accum_op)
#define F (t->u.fetch)

/* Rebuilds tree t of comp `from` in comp `to` (whose static symbols are from's, in order) with
 * the public builders. */
static troupe_status_t s_copy(troupe_asgn_comp_t *to, const troupe_asgn_t *t, troupe_asgn_t **out)
{
    *out = NULL;
    if (t == NULL)
        return troupe_asgn_noop(to, out);
    switch (t->kind) {
    case TROUPE_ASGN_NOOP:
        return troupe_asgn_noop(to, out);
    case TROUPE_ASGN_SEQ: {
        size_t n = t->u.seq.count;
        troupe_asgn_t **v = troupe_calloc(n ? n : 1, sizeof *v);
        if (v == NULL)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
        troupe_status_t st = TROUPE_OK;
        for (size_t j = 0; j < n && st == TROUPE_OK; j++)
            st = s_copy(to, t->u.seq.items[j], &v[j]);
        if (st == TROUPE_OK)
            st = troupe_asgn_seq(to, n, v, out);
        troupe_free(v);
        return st;
    }
    case TROUPE_ASGN_BLOCK_COMMENT: {
        troupe_asgn_t *body = NULL;
        TROUPE_RETURN_IF_ERROR(s_copy(to, t->u.block_comment.body, &body));
        return troupe_asgn_block_comment(to, t->u.block_comment.text, body, out);
    }
    case TROUPE_ASGN_ACCUM_OP: {
        if (A.ngather > 0) /* the gather nodes go with it (ir/assign.h) */
            return troupe_asgn_accum_gather(to, A.initialize_neutral, A.accum, A.lhs, A.rhs_kind,
                                            A.op, A.rhs, A.ngather, A.gather, A.proj->spec, out);
        switch (A.rhs_kind) {
        case TROUPE_ASGN_RHS_UNOP:
            return troupe_asgn_accum_unop(to, A.initialize_neutral, A.accum, A.lhs,
                                          (troupe_unop_t)A.op, A.rhs[0], A.proj->spec, out);
        case TROUPE_ASGN_RHS_BINOP:
            return troupe_asgn_accum_binop(to, A.initialize_neutral, A.accum, A.lhs,
                                           (troupe_binop_t)A.op, A.rhs[0], A.rhs[1], A.proj->spec,
                                           out);
        case TROUPE_ASGN_RHS_TERNOP:
            return troupe_asgn_accum_ternop(to, A.initialize_neutral, A.accum, A.lhs,
                                            (troupe_ternop_t)A.op, A.rhs[0], A.rhs[1], A.rhs[2],
                                            A.proj->spec, out);
        }
        break;
    }
    case TROUPE_ASGN_SET_VEC_UNOP:
        return troupe_asgn_set_vec_unop(to, t->u.set_vec_unop.op, t->u.set_vec_unop.lhs,
                                        t->u.set_vec_unop.rhs, t->u.set_vec_unop.proj->spec, out);
    case TROUPE_ASGN_FETCH: {
        switch (F.kind) {
        case TROUPE_FETCH_CONSTANT:
            return troupe_asgn_fetch_constant(to, F.tn, F.constant, out);
        case TROUPE_FETCH_CONSTANT_BITS:
            return troupe_asgn_fetch_constant_bits(to, F.tn, F.constant_bits, out);
        case TROUPE_FETCH_CONSTANT_FILL:
            return troupe_asgn_fetch_constant_fill(to, F.tn, F.values, F.count, out);
        case TROUPE_FETCH_RANGE_OVER_OFFSETS:
            return troupe_asgn_fetch_range_over_offsets(to, F.tn, out);
        case TROUPE_FETCH_SLICE:
            return troupe_asgn_fetch_slice(to, F.tn, F.static_sym, F.sliced, out);
        case TROUPE_FETCH_EMBED_SYMBOL:
            return troupe_asgn_fetch_embed_symbol(to, F.tn, F.static_sym, out);
        case TROUPE_FETCH_EMBED_SELF_ID:
            return troupe_asgn_fetch_embed_self_id(to, F.tn, out);
        }
        break;
    }
    }
    return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: unknown assignment kind %d",
                         (int)t->kind);
}
#undef A
#undef F

troupe_status_t troupe__dp_split_comp(const troupe_asgn_comp_t *comp, const troupe__dp_split_t *s,
                                      size_t seg, troupe_asgn_comp_t **out)
{
    *out = NULL;
    size_t from = seg == 0 ? 0 : s->seg_end[seg - 1], to = s->seg_end[seg];
    troupe_asgn_comp_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_comp_new(&c));
    troupe_status_t st = TROUPE_OK;
    for (int32_t i = 0; i < comp->nsyms && st == TROUPE_OK; i++) /* the same ids */
        st = troupe_asgn_comp_add_static_symbol(c, comp->syms[i].name, comp->syms[i].range, NULL);
    troupe_asgn_t **v = troupe_calloc(to - from, sizeof *v);
    if (st == TROUPE_OK && v == NULL)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    for (size_t j = from; j < to && st == TROUPE_OK; j++)
        st = s_copy(c, s->items[j], &v[j - from]);
    troupe_asgn_t *root = NULL;
    if (st == TROUPE_OK)
        st = troupe_asgn_seq(c, to - from, v, &root);
    troupe_free(v);
    if (st == TROUPE_OK)
        troupe_asgn_comp_set_root(c, root);
    /* the embedded nodes the segment mentions stay embedded */
    for (size_t i = 0; i < comp->nembedded && st == TROUPE_OK; i++) {
        troupe_tnode_t *e = comp->embedded[i];
        bool mentioned = false;
        for (size_t k = 0; k < c->nnodes && !mentioned; k++)
            mentioned = c->nodes[k] == e;
        if (mentioned)
            st = troupe_asgn_comp_add_embedded(c, e);
    }
    if (st != TROUPE_OK)
        troupe_asgn_comp_destroy(&c);
    *out = c;
    return st;
}

/* The segments compiled, one routine each (dp_impl.h). */
troupe_status_t troupe__dp_split_build(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    if (dp->nseg <= 1) {
        troupe_status_t st =
            troupe_compile(dp->backend, m->grad_comp, "dp_grad", &dp->seg_code[0]);
        return st == TROUPE_OK ? st : troupe__dp_wrap(st, "dp_new: compiling grad_comp");
    }
    troupe__dp_split_t sp;
    memset(&sp, 0, sizeof sp);
    TROUPE_RETURN_IF_ERROR(troupe__dp_split_plan_buckets(m->grad_comp, dp->grads, dp->n_params,
                                                         dp->bucket_first, dp->bucket_bytes,
                                                         &sp));
    troupe_status_t st = TROUPE_OK;
    if (sp.nseg != dp->nseg)
        st = troupe__error(TROUPE_INTERNAL, "dp_new: grad_comp split into %zu segments, then %zu",
                           dp->nseg, sp.nseg);
    for (size_t g = 0; g < dp->nseg && st == TROUPE_OK; g++) {
        troupe_asgn_comp_t *c = NULL;
        char name[32], prefix[96];
        snprintf(name, sizeof name, "dp_grad_s%zu", g);
        st = troupe__dp_split_comp(m->grad_comp, &sp, g, &c);
        if (st == TROUPE_OK)
            st = troupe_compile(dp->backend, c, name, &dp->seg_code[g]);
        troupe_asgn_comp_destroy(&c);
        if (st != TROUPE_OK) {
            snprintf(prefix, sizeof prefix, "dp_new: compiling segment %zu of %zu of grad_comp",
                     g, dp->nseg);
            st = troupe__dp_wrap(st, prefix);
        }
    }
    troupe__dp_split_free(&sp);
    return st;
}

/* The fed form (troupe_dp_model_t.feed_comp): the feed routine, compiled once and linked on
 * every replica before the gradient routine, so that the nodes it writes are in the context
 * the gradient routine links on. Every node both comps mention (the fixed nodes; the inputs
 * aside) must be an array of the feed routine's context: a virtual or local node would not
 * outlive the feed, and grad_comp would read an array nobody writes. */
