/* troupe — compile, link and run (see routine.h). */
#include "actors/routine.h"

#include "actors/host_impl.h"
#include "actors/merge_impl.h"
#include "actors/runtime_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/trace_impl.h"
#include "base/config.h"
#include "base/fault_impl.h"
#include "base/status.h"
#include "compiler/lower.h"
#include "compiler/optimize.h"
#include "devices/host/host_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_ALIGN 64
#define S_PROV_PER_STREAM 410

static size_t s_name_of(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    return troupe_tnode_debug_name(tn, buf, cap);
}

/* ---- code ---------------------------------------------------------------------------------- */

void troupe__routine_optimize_opts(const troupe_driver_vtable_t *vt, troupe_optimize_opts_t *o)
{
    troupe_optimize_opts_default(o);
    if (vt != NULL && vt->no_local_arrays)
        o->local_max_bytes = 0;
    /* iteration scalars (compiler/optimize.h step 4c): the C dialect's; a cuda kernel keeps
     * its temporaries on the grid (no_local_arrays) */
    o->iteration_scalars =
        !(vt != NULL && vt->no_local_arrays) && troupe_config_iteration_scalars();
    if ((vt != NULL && vt->no_outer_fusion) || !troupe_config_loop_fusion_outer())
        o->fuse_outer = false;
}

static troupe_status_t s_compile(troupe_backend_t *b, troupe_ll_proc_t **proc_p,
                                 const troupe_asgn_comp_t *comp, bool fuse_fma, troupe_code_t **out)
{
    troupe_ll_proc_t *proc = *proc_p;
    *proc_p = NULL;
    troupe_status_t st = TROUPE_OK;
    troupe_code_t *code = troupe_calloc(1, sizeof *code);
    if (!code) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile: out of memory");
        goto out_destroy_proc;
    }
    troupe_refcount_init(&code->refs);
    troupe_refcount_retain(&b->dref->refs);
    code->dref = b->dref;
    code->proc = proc;
    proc = NULL;
    if (!code->proc->optimized) {
        troupe_optimize_opts_t o;
        troupe__routine_optimize_opts(b->drv->vt, &o);
        o.fuse_fma = o.fuse_fma && fuse_fma;
        st = troupe_ll_optimize(code->proc, &o);
        if (st != TROUPE_OK)
            goto out_release_code;
    }
    troupe_cgen_options_t copts;
    troupe__hdrv_cgen_options(b->drv->vt, &copts);
    st = troupe_cgen_emit_with(code->proc, TROUPE_CGEN_C, &copts, &code->gen);
    if (st != TROUPE_OK)
        goto out_release_code;
    st = troupe_driver_require(b->drv, "compile");
    if (st == TROUPE_OK)
        st = troupe_driver_require(b->drv, "launch");
    if (st != TROUPE_OK)
        goto out_release_code;
    /* the host drivers reuse the C generated above instead of generating it again */
    troupe__hdrv_offer_gen(code->proc, code->gen);
    st = troupe_driver_compile(b->drv, code->proc, &code->dcode);
    troupe__hdrv_offer_gen(NULL, NULL);
    if (st != TROUPE_OK)
        goto out_release_code;
    if (comp && comp->nembedded) {
        code->embedded = troupe_calloc(comp->nembedded, sizeof *code->embedded);
        if (!code->embedded) {
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "compile: out of memory");
            goto out_release_code;
        }
        for (size_t i = 0; i < comp->nembedded; i++) {
            troupe_tnode_retain(comp->embedded[i]);
            code->embedded[code->nembedded++] = comp->embedded[i];
        }
    }
    *out = code;
    return TROUPE_OK;
out_release_code:
    troupe_code_release(&code);
out_destroy_proc:
    troupe_ll_proc_destroy(&proc);
    return st;
}

/* troupe_compile and troupe_compile_unfused (`what` names the call in errors). */
static troupe_status_t s_compile_comp(troupe_backend_t *b, const troupe_asgn_comp_t *comp,
                                      const char *name, bool fuse_fma, troupe_code_t **out,
                                      const char *what)
{
    if (!b || !comp || !name || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "%s: NULL argument", what);
    *out = NULL;
    troupe_ll_proc_t *proc = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_asgn_lower(comp, name, &proc));
    return s_compile(b, &proc, comp, fuse_fma, out);
}

troupe_status_t troupe_compile(troupe_backend_t *b, const troupe_asgn_comp_t *comp,
                               const char *name, troupe_code_t **out)
{
    return s_compile_comp(b, comp, name, true, out, "compile");
}

troupe_status_t troupe_compile_unfused(troupe_backend_t *b, const troupe_asgn_comp_t *comp,
                                       const char *name, troupe_code_t **out)
{
    return s_compile_comp(b, comp, name, false, out, "compile_unfused");
}

troupe_status_t troupe_compile_proc(troupe_backend_t *b, troupe_ll_proc_t **proc_p,
                                    troupe_code_t **out)
{
    if (!proc_p || !*proc_p)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "compile_proc: NULL procedure");
    if (!b || !out) {
        troupe_ll_proc_destroy(proc_p);
        return troupe__error(TROUPE_INVALID_ARGUMENT, "compile_proc: NULL argument");
    }
    *out = NULL;
    return s_compile(b, proc_p, NULL, true, out);
}

void troupe_code_retain(troupe_code_t *code)
{
    if (code)
        troupe_refcount_retain(&code->refs);
}

void troupe_code_release(troupe_code_t **code_p)
{
    if (!code_p || !*code_p)
        return;
    troupe_code_t *c = *code_p;
    *code_p = NULL;
    if (!troupe_refcount_release(&c->refs))
        return;
    troupe_driver_code_release(c->dref->drv, c->dcode);
    troupe_cgen_result_destroy(&c->gen);
    troupe_ll_proc_destroy(&c->proc);
    for (size_t i = 0; i < c->nembedded; i++)
        troupe_tnode_release(&c->embedded[i]);
    troupe_free(c->embedded);
    troupe__dref_release(&c->dref);
    troupe_free(c);
}

const troupe_ll_proc_t *troupe_code_proc(const troupe_code_t *code)
{
    return code ? code->proc : NULL;
}

/* ---- link ---------------------------------------------------------------------------------- */

static bool s_is_embedded(const troupe_code_t *code, const troupe_tnode_t *tn)
{
    for (size_t i = 0; i < code->nembedded; i++)
        if (code->embedded[i] == tn)
            return true;
    return false;
}

static int s_cmp_tn(const void *a, const void *b)
{
    int32_t x = (*(troupe_tnode_t *const *)a)->id, y = (*(troupe_tnode_t *const *)b)->id;
    return (x > y) - (x < y);
}

troupe_status_t troupe_link(troupe_context_t *ctx, troupe_code_t *code, troupe_routine_t **out)
{
    if (!ctx || !code || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "link: NULL argument");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__context_check_local(ctx, "link"));
    const troupe_ll_proc_t *proc = code->proc;
    const troupe_cgen_result_t *gen = code->gen;
    char n1[64];
    if (ctx->backend->dref != code->dref)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "link %s: the code was compiled for another backend than the "
                             "context's (%s)",
                             proc->name, troupe_driver_name(ctx->backend->drv));
    /* verify_prior_context */
    for (size_t i = 0; i <= proc->ninputs; i++) {
        troupe_tnode_t *tn = i < proc->ninputs ? proc->inputs[i] : proc->merge_node;
        if (!tn || s_is_embedded(code, tn) || troupe__context_find(ctx, tn))
            continue;
        s_name_of(tn, n1, sizeof n1);
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "link %s: the linked context lacks node %s (on stream %s)", proc->name,
                             n1, troupe_stream_name(ctx->srec->stream));
    }
    TROUPE_RETURN_IF_ERROR(troupe__merge_check_link(proc, ctx));

    troupe_status_t st = TROUPE_OK;
    troupe_device_t *dev = ctx->dev;
    troupe__srec_t *self = ctx->srec;
    troupe_routine_t *r = NULL;
    troupe_context_t *child = NULL;
    size_t np = gen->nparams;
    troupe_tnode_t **fresh = np ? troupe_calloc(np, sizeof *fresh) : NULL;
    troupe__carray_t *extra = np ? troupe_calloc(np, sizeof *extra) : NULL;
    size_t nfresh = 0, nextra = 0;
    int32_t pool = -1;
    if (np && (!fresh || !extra)) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "link: out of memory");
        goto out_free_scratch;
    }
    pthread_mutex_lock(&dev->lock);
    /* WAW: owners of written shared arrays; sharing decisions for missing nodes. */
    for (size_t i = 0; i < np; i++) {
        const troupe_cgen_param_t *p = &gen->params[i];
        if (p->kind != TROUPE_CGEN_PARAM_NODE_PTR)
            continue;
        const troupe__carray_t *a = troupe__context_find(ctx, p->tn);
        bool shared = a ? a->shared : troupe_tnode_known_shared_cross_streams(p->tn);
        if (shared && p->is_written) {
            troupe__entry_t *e = troupe__shared_entry(dev, p->tn);
            if (e && e->owner && e->owner != self->stream) {
                s_name_of(p->tn, n1, sizeof n1);
                st = troupe__error(TROUPE_FAILED_PRECONDITION,
                                   "link %s: node %s is shared across streams and written by "
                                   "stream %s; stream %s cannot write it too",
                                   proc->name, n1, troupe_stream_name(e->owner),
                                   troupe_stream_name(self->stream));
                goto out_unlock;
            }
        }
        if (a)
            continue;
        if (!shared && !troupe_tnode_known_non_cross_stream(p->tn)) {
            st = troupe_tnode_update_memory_sharing(p->tn, TROUPE_SHARING_PER_STREAM,
                                                    S_PROV_PER_STREAM);
            if (st != TROUPE_OK)
                goto out_unlock;
        }
        if (shared) {
            troupe_buffer_loc_t loc;
            st = troupe__shared_array(dev, p->tn, &loc);
            if (st != TROUPE_OK)
                goto out_unlock;
            extra[nextra++] = (troupe__carray_t){p->tn, loc, true};
        } else {
            fresh[nfresh++] = p->tn;
        }
    }
    /* Deterministic packing of the per-stream arrays into one zero-filled pool. */
    if (nfresh) {
        qsort(fresh, nfresh, sizeof *fresh, s_cmp_tn);
        int64_t off = 0;
        for (size_t i = 0; i < nfresh; i++) {
            off = (off + S_ALIGN - 1) / S_ALIGN * S_ALIGN;
            extra[nextra + i] =
                (troupe__carray_t){fresh[i], {0, off, (int64_t)fresh[i]->size_bytes}, false};
            off += (int64_t)fresh[i]->size_bytes;
        }
        st = troupe__pool_alloc(dev, off, &pool);
        if (st == TROUPE_RESOURCE_EXHAUSTED) {
            /* name what asks for the memory: the routine, its arrays, the largest ones */
            char why[1024], list[256] = "";
            size_t top[3];
            int ntop = 0;
            snprintf(why, sizeof why, "%s", troupe_last_error());
            for (size_t i = 0; i < nfresh; i++) {
                int k = ntop < 3 ? ntop++ : 3;
                while (k > 0 && fresh[top[k - 1]]->size_bytes < fresh[i]->size_bytes) {
                    if (k < 3)
                        top[k] = top[k - 1];
                    k--;
                }
                if (k < 3)
                    top[k] = i;
            }
            for (int k = 0; k < ntop; k++) {
                char nm[64];
                size_t used = strlen(list);
                s_name_of(fresh[top[k]], nm, sizeof nm);
                snprintf(list + used, sizeof list - used, "%s%s %zu", k ? ", " : "", nm,
                         fresh[top[k]]->size_bytes);
            }
            st = troupe__error(TROUPE_RESOURCE_EXHAUSTED,
                               "link %s on stream %s: its %zu per-stream arrays take %lld bytes "
                               "(%.2f GiB; the largest: %s): %s",
                               proc->name, troupe_stream_name(self->stream), nfresh, (long long)off,
                               (double)off / (1 << 30), list, why);
        }
        if (st != TROUPE_OK)
            goto out_unlock;
        for (size_t i = 0; i < nfresh && st == TROUPE_OK; i++) {
            troupe__entry_t *e = NULL;
            extra[nextra + i].loc.pool_id = pool;
            st = troupe__ledger_add(&dev->ledger, fresh[i], extra[nextra + i].loc, false, &e);
        }
        if (st != TROUPE_OK) {
            troupe__pool_free(dev, pool);
            goto out_unlock;
        }
        nextra += nfresh;
    }
    st = troupe__context_derive(ctx, extra, nextra, pool, ctx->merge_node, &child);
    if (st != TROUPE_OK) {
        if (pool >= 0)
            troupe__pool_free(dev, pool);
        goto out_unlock;
    }
    /* Owners of the shared arrays this code writes. */
    for (size_t i = 0; i < np; i++) {
        const troupe_cgen_param_t *p = &gen->params[i];
        if (p->kind != TROUPE_CGEN_PARAM_NODE_PTR || !p->is_written)
            continue;
        const troupe__carray_t *a = troupe__context_find(child, p->tn);
        if (a && a->shared) {
            troupe__entry_t *e = troupe__ledger_find(&dev->ledger, troupe__key_of(a->loc));
            if (e && !e->owner)
                e->owner = self->stream;
        }
    }
out_unlock:
    pthread_mutex_unlock(&dev->lock);
    if (st != TROUPE_OK)
        goto out_free_scratch;
    for (size_t i = 0; i < np; i++)
        if (gen->params[i].kind == TROUPE_CGEN_PARAM_NODE_PTR &&
            troupe_tnode_known_hosted(gen->params[i].tn))
            troupe__host_array_install_hooks(gen->params[i].tn);
    r = troupe_calloc(1, sizeof *r);
    if (r && np)
        r->static_values = troupe_calloc(np, sizeof *r->static_values);
    if (!r || (np && !r->static_values)) {
        if (r)
            troupe_free(r);
        r = NULL;
        troupe_context_release(&child);
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "link: out of memory");
        goto out_free_scratch;
    }
    troupe_refcount_init(&r->refs);
    r->ctx = child;
    child = NULL;
    troupe_code_retain(code);
    r->code = code;
    *out = r;
out_free_scratch:
    troupe_free(fresh);
    troupe_free(extra);
    return st;
}

void troupe_routine_retain(troupe_routine_t *r)
{
    if (r)
        troupe_refcount_retain(&r->refs);
}

void troupe_routine_release(troupe_routine_t **r_p)
{
    if (!r_p || !*r_p)
        return;
    troupe_routine_t *r = *r_p;
    *r_p = NULL;
    if (!troupe_refcount_release(&r->refs))
        return;
    troupe_context_release(&r->ctx);
    troupe_code_release(&r->code);
    troupe_free(r->static_values);
    troupe_free(r);
}

troupe_context_t *troupe_routine_context(const troupe_routine_t *r)
{
    return r ? r->ctx : NULL;
}

const char *troupe_routine_name(const troupe_routine_t *r)
{
    return r ? r->code->proc->name : "nil";
}

static troupe_status_t s_find_static(const troupe_routine_t *r, const char *name, ptrdiff_t *out)
{
    if (!r || !name)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "routine static index: NULL argument");
    ptrdiff_t i = troupe_cgen_find_static_param(r->code->gen, name);
    if (i < 0)
        return troupe__error(TROUPE_NOT_FOUND, "routine %s has no static index '%s'",
                             r->code->proc->name, name);
    *out = i;
    return TROUPE_OK;
}

troupe_status_t troupe_routine_set_index(troupe_routine_t *r, const char *name, int64_t value)
{
    ptrdiff_t i = -1;
    TROUPE_RETURN_IF_ERROR(s_find_static(r, name, &i));
    int64_t range = r->code->gen->params[i].static_range;
    if (value < 0 || (range > 0 && value >= range))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "routine %s: static index '%s' = %lld outside its range 0..%lld",
                             r->code->proc->name, name, (long long)value,
                             (long long)(range > 0 ? range - 1 : INT64_MAX));
    r->static_values[i] = value;
    return TROUPE_OK;
}

troupe_status_t troupe_routine_get_index(const troupe_routine_t *r, const char *name,
                                         int64_t *out_value)
{
    ptrdiff_t i = -1;
    TROUPE_RETURN_IF_ERROR(s_find_static(r, name, &i));
    if (!out_value)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "routine_get_index: NULL output");
    *out_value = r->static_values[i];
    return TROUPE_OK;
}

/* ---- run ----------------------------------------------------------------------------------- */

typedef struct s_launch {
    troupe_code_t *code; /* retained */
    troupe__srec_t *srec;
    ptrdiff_t merge_idx;
    size_t nargs;
    troupe_karg_t args[];
} s_launch_t;

static troupe_status_t s_launch_work(void *arg, troupe_dqueue_t *q)
{
    s_launch_t *l = arg;
    troupe_code_t *c = l->code;
    if (troupe__fault_armed(TROUPE__FAULT_KERNEL))
        TROUPE_RETURN_IF_ERROR(troupe__fault_kernel(c->proc->name));
    if (l->merge_idx >= 0) /* resolved at launch */
        TROUPE_RETURN_IF_ERROR(
            troupe__merge_resolve(l->srec, c->proc->name, &l->args[l->merge_idx]));
    int64_t t0 = troupe__trace_on() ? troupe_now_ns() : 0;
    troupe_status_t st = troupe_driver_launch(c->dref->drv, q, c->dcode, l->args, l->nargs);
    if (t0 != 0) {
        troupe__trace_arg_t a[] = {TROUPE__TRACE_STR("status", troupe_status_str(st)),
                                   TROUPE__TRACE_NUM("merge_buffer", l->merge_idx >= 0)};
        troupe__trace_emit(TROUPE__TRACK_THREAD, "routine", c->proc->name, t0, troupe_now_ns(), a,
                           2);
    }
    return st;
}

static void s_launch_dtor(void *arg)
{
    s_launch_t *l = arg;
    troupe_code_release(&l->code);
    troupe_free(l);
}

troupe_status_t troupe__routine_run_locked(troupe_routine_t *r, troupe_event_t **out_ev)
{
    troupe_context_t *ctx = r->ctx;
    troupe_device_t *dev = ctx->dev;
    troupe__srec_t *s = ctx->srec;
    const troupe_ll_proc_t *proc = r->code->proc;
    const troupe_cgen_result_t *gen = r->code->gen;
    char n1[64];
    TROUPE_RETURN_IF_ERROR(troupe_stream_status(s->stream));
    /* the run-time merge-buffer check (the static one ran at link) */
    troupe__entry_t *merge_src = NULL;
    TROUPE_RETURN_IF_ERROR(troupe__merge_check_run(proc, s, &merge_src));
    size_t np = gen->nparams;
    troupe__entry_t **ent = np ? troupe_calloc(np, sizeof *ent) : NULL;
    s_launch_t *l = troupe_calloc(1, sizeof *l + np * sizeof(troupe_karg_t));
    troupe_status_t st = TROUPE_OK;
    troupe_event_t *ev = NULL;
    if (!l || (np && !ent)) {
        troupe_free(l);
        troupe_free(ent);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "run %s: out of memory", proc->name);
    }
    l->srec = s;
    l->nargs = np;
    l->merge_idx = -1;
    for (size_t i = 0; i < np; i++) {
        const troupe_cgen_param_t *p = &gen->params[i];
        troupe_karg_t *a = &l->args[i];
        a->ordinal = dev->ordinal;
        if (p->kind == TROUPE_CGEN_PARAM_STATIC_IDX) {
            a->kind = TROUPE_KARG_STATIC_IDX;
            a->value = r->static_values[i];
        } else if (p->kind == TROUPE_CGEN_PARAM_MERGE_BUFFER) {
            a->kind = TROUPE_KARG_MERGE_BUFFER;
            l->merge_idx = (ptrdiff_t)i;
        } else {
            const troupe__carray_t *ca = troupe__context_find(ctx, p->tn);
            if (!ca) {
                s_name_of(p->tn, n1, sizeof n1);
                st = troupe__error(TROUPE_INTERNAL, "run %s: the context lacks node %s", proc->name,
                                   n1);
                goto out_release_launch;
            }
            a->kind = TROUPE_KARG_BUFFER;
            a->buf = ca->loc;
            ent[i] = troupe__ledger_find(&dev->ledger, troupe__key_of(ca->loc));
            /* 1. automatic host transfers of read hosted nodes lagging their host array */
            if (p->is_read && ent[i] && troupe_config_auto_host_transfers() &&
                troupe_tnode_known_hosted(p->tn) && troupe__host_array_lagging(p->tn, ent[i])) {
                const troupe_ll_traced_t *t = troupe_optimize_traced(proc, p->tn);
                if (!t || t->read_only || t->read_before_write) {
                    st = troupe__from_host_locked(ctx, p->tn, false, NULL);
                    if (st != TROUPE_OK)
                        goto out_release_launch;
                }
            }
        }
    }
    /* 2. RAW, WAR, WAW */
    if (merge_src)
        st = troupe__ledger_before_read(s->stream, merge_src);
    for (size_t i = 0; i < np && st == TROUPE_OK; i++) {
        if (!ent[i])
            continue;
        if (gen->params[i].is_read)
            st = troupe__ledger_before_read(s->stream, ent[i]);
        if (st == TROUPE_OK && gen->params[i].is_written)
            st = troupe__ledger_before_write(s->stream, ent[i]);
    }
    if (st != TROUPE_OK)
        goto out_release_launch;
    /* 3. the launch */
    troupe_code_retain(r->code);
    l->code = r->code;
    st = troupe_stream_schedule(s->stream, s_launch_work, l, s_launch_dtor);
    l = NULL;
    if (st != TROUPE_OK)
        goto out_release_launch;
    /* 4. its event */
    st = troupe_stream_record(s->stream, &ev);
    if (st != TROUPE_OK)
        goto out_release_launch;
    if (merge_src)
        st = troupe__ledger_note_read(merge_src, s->stream, ev);
    for (size_t i = 0; i < np && st == TROUPE_OK; i++) {
        troupe_tnode_t *tn = gen->params[i].tn;
        if (!ent[i])
            continue;
        if (gen->params[i].is_written) {
            troupe__ledger_note_write(ent[i], s->stream, ev);
            troupe__host_array_note_written(ent[i], troupe__host_array_gen(tn));
            if (troupe_tnode_known_hosted(tn))
                st = troupe__host_array_note_device_write(tn, s, ent[i]->key, ev);
        } else if (gen->params[i].is_read) {
            st = troupe__ledger_note_read(ent[i], s->stream, ev);
        }
    }
    troupe__ledger_tick(&dev->ledger);
    if (st == TROUPE_OK && out_ev) {
        *out_ev = ev;
        ev = NULL;
    }
out_release_launch:
    troupe_event_release(&ev);
    if (l)
        troupe_free(l);
    troupe_free(ent);
    return st;
}

troupe_status_t troupe_routine_run(troupe_routine_t *r, troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (!r)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "routine_run: NULL routine");
    troupe_device_t *dev = r->ctx->dev;
    pthread_mutex_lock(&dev->lock);
    troupe_status_t st = troupe__routine_run_locked(r, out_ev);
    pthread_mutex_unlock(&dev->lock);
    return st;
}
