/* troupe — the CUDA target of the code generator (compiler/cgen.h, "CUDA dialect"): the routine
 * becomes `extern "C" __global__` kernels, one per top-level statement (consecutive sequential
 * ones share a one-thread kernel), whose loops over independent iterations are mapped onto the
 * grid; top-level matrix products become GEMM steps with their kernels as the fallback. A
 * prelude section's CUDA text replaces its C text where it has one.
 *
 * The mapping rule (cgen.h) is checked on the statement's accesses alone: loop i is mapped
 * when every node the nest writes is only ever accessed at `c*i + o` (one c != 0, one o) on
 * some axis, and every write lies inside loop i. Distinct values of i then touch disjoint
 * elements of every written node and read nothing another value of i writes, so running the
 * values of i in any order or at once gives what the sequential nest gives, operation for
 * operation. */
#include "compiler/cgen_impl.h"

#include "base/alloc.h"
#include "base/vec.h"
#include "compiler/gemm.h"

#include <inttypes.h>
#include <string.h>

#define S_BLOCK_THREADS 256 /* threads per block */
#define S_BLOCK_X_2D 32     /* block x of a 2D kernel (a warp along x) */
#define S_GRID_MAX 65535    /* blocks per grid axis (the grid-stride loops do the rest) */
#define S_MAX_MAPPED 16     /* loops of one nest mapped onto the grid, at most */

/* ---- accesses ----------------------------------------------------------------------------- */

typedef struct s_access {
    const troupe_tnode_t *tn;
    const troupe_axis_index_t *idcs; /* NULL for a ZERO_OUT (the whole node) */
    bool write;
    int vec_len; /* elements a SET_FROM_VEC writes along the last axis; else 1 */
} s_access_t;

typedef struct s_accesses {
    s_access_t *v;
    size_t n, cap;
    bool oom;
} s_accesses_t;

static void s_add(s_accesses_t *a, const troupe_tnode_t *tn, const troupe_axis_index_t *idcs,
                  bool write, int vec_len)
{
    s_access_t x = {tn, idcs, write, vec_len};
    if (!TROUPE__VEC_PUSH(a->v, a->n, a->cap, x))
        a->oom = true;
}

static void s_collect_ll(s_accesses_t *a, const troupe_ll_t *s);

static void s_collect_sc(s_accesses_t *a, const troupe_sc_t *e)
{
    switch (e->kind) {
    case TROUPE_SC_LOCAL_SCOPE:
        s_collect_ll(a, e->u.local_scope.body);
        break;
    case TROUPE_SC_GET:
        s_add(a, e->u.get.tn, e->u.get.idcs, false, 1);
        break;
    case TROUPE_SC_TERNOP:
        for (int i = 0; i < 3; i++)
            s_collect_sc(a, e->u.op.args[i]);
        break;
    case TROUPE_SC_BINOP:
        for (int i = 0; i < 2; i++)
            s_collect_sc(a, e->u.op.args[i]);
        break;
    case TROUPE_SC_UNOP:
        s_collect_sc(a, e->u.op.args[0]);
        break;
    default: /* constants, indices, local variables, the (read-only) merge buffer */
        break;
    }
}

static void s_collect_ll(s_accesses_t *a, const troupe_ll_t *s)
{
    switch (s->kind) {
    case TROUPE_LL_SEQ:
        for (size_t i = 0; i < s->u.seq.count; i++)
            s_collect_ll(a, s->u.seq.items[i]);
        break;
    case TROUPE_LL_FOR:
        s_collect_ll(a, s->u.for_loop.body);
        break;
    case TROUPE_LL_ZERO_OUT:
        s_add(a, s->u.zero_out, NULL, true, 1);
        break;
    case TROUPE_LL_SET:
        s_add(a, s->u.set.tn, s->u.set.idcs, true, 1);
        s_collect_sc(a, s->u.set.value);
        break;
    case TROUPE_LL_SET_FROM_VEC:
        s_add(a, s->u.set_from_vec.tn, s->u.set_from_vec.idcs, true, s->u.set_from_vec.length);
        s_collect_sc(a, s->u.set_from_vec.arg);
        break;
    case TROUPE_LL_SET_LOCAL: /* a thread's own variable */
        s_collect_sc(a, s->u.set_local.value);
        break;
    default:
        break;
    }
}

/* Whether every access of `tn` in `a` is at c*sym + o on axis `ax`, with one c != 0 and one o,
 * and no vector write along it overlaps the next slice. */
static bool s_axis_slices(const s_accesses_t *a, const troupe_tnode_t *tn, int ax, int32_t sym)
{
    bool first = true;
    int64_t c = 0, o = 0;
    for (size_t i = 0; i < a->n; i++) {
        const s_access_t *x = &a->v[i];
        if (x->tn != tn)
            continue;
        if (x->idcs == NULL)
            return false;
        const troupe_axis_index_t *idx = &x->idcs[ax];
        if (idx->nterms != 1 || idx->terms[0].sym != sym || idx->terms[0].coeff == 0)
            return false;
        if (first) {
            c = idx->terms[0].coeff;
            o = idx->offset;
            first = false;
        } else if (idx->terms[0].coeff != c || idx->offset != o) {
            return false;
        }
        int64_t mag = c < 0 ? -c : c;
        if (x->write && x->vec_len > 1 && ax == tn->ndims - 1 && mag < x->vec_len)
            return false;
    }
    return !first;
}

/* Whether the iterations of loop `sym` touch disjoint data (see the file comment); `a` holds
 * the accesses of the whole nest, which lies inside the loop. */
static bool s_loop_independent(const s_accesses_t *a, int32_t sym)
{
    for (size_t i = 0; i < a->n; i++) {
        const s_access_t *x = &a->v[i];
        if (!x->write)
            continue;
        bool found = false;
        for (int ax = 0; ax < x->tn->ndims && !found; ax++)
            found = s_axis_slices(a, x->tn, ax, sym);
        if (!found)
            return false;
    }
    return true;
}

/* The loop that is the only statement of `body` (comments aside), or NULL. */
static const troupe_ll_t *s_only_loop(const troupe_ll_t *body)
{
    if (body->kind == TROUPE_LL_FOR)
        return body;
    if (body->kind != TROUPE_LL_SEQ)
        return NULL;
    const troupe_ll_t *loop = NULL;
    for (size_t i = 0; i < body->u.seq.count; i++) {
        const troupe_ll_t *it = body->u.seq.items[i];
        if (it->kind == TROUPE_LL_COMMENT || it->kind == TROUPE_LL_NOOP)
            continue;
        if (it->kind != TROUPE_LL_FOR || loop != NULL)
            return NULL;
        loop = it;
    }
    return loop;
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* A kernel being planned: its mapped loops (outermost first; the last is x). */
typedef struct s_map {
    int nmapped;
    const troupe_ll_t *loops[S_MAX_MAPPED];
} s_map_t;

/* The mapped loops of nest `s` (a FOR), in nest order; nmapped 0 when none can be. */
static troupe_status_t s_plan_nest(const troupe_ll_t *s, s_map_t *map)
{
    map->nmapped = 0;
    s_accesses_t a = {NULL, 0, 0, false};
    s_collect_ll(&a, s);
    troupe_status_t st = TROUPE_OK;
    if (a.oom) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    for (const troupe_ll_t *l = s; l != NULL && map->nmapped < S_MAX_MAPPED;
         l = s_only_loop(l->u.for_loop.body))
        if (s_loop_independent(&a, l->u.for_loop.sym))
            map->loops[map->nmapped++] = l;
out:
    troupe_free(a.v);
    return st;
}

static int64_t s_extent(const troupe_ll_t *loop)
{
    return loop->u.for_loop.to - loop->u.for_loop.from + 1;
}

static uint32_t s_grid(int64_t extent, uint32_t block)
{
    int64_t g = (extent + block - 1) / block;
    return (uint32_t)(g < 1 ? 1 : g > S_GRID_MAX ? S_GRID_MAX : g);
}

static uint32_t s_round32(int64_t extent, uint32_t cap)
{
    int64_t r = (extent + 31) / 32 * 32;
    return (uint32_t)(r > cap ? cap : r < 32 ? 32 : r);
}

/* The launch shape of a kernel covering ex x ey iterations (ey 1: 1D); cgen.h's rule. */
static void s_shape(troupe_cgen_kernel_t *k, int64_t ex, int64_t ey)
{
    k->extent[0] = ex;
    k->extent[1] = ey;
    if (ey <= 1) {
        k->block[0] = s_round32(ex, S_BLOCK_THREADS);
        k->block[1] = 1;
    } else {
        k->block[0] = s_round32(ex, S_BLOCK_X_2D);
        int64_t by = S_BLOCK_THREADS / k->block[0];
        k->block[1] = (uint32_t)(by > ey ? ey : by);
    }
    k->grid[0] = s_grid(ex, k->block[0]);
    k->grid[1] = s_grid(ey, k->block[1]);
}

/* Appends a kernel "<name>_k<i>" to r and writes its signature and opening brace. */
static troupe_status_t s_open_kernel(troupe_cgen_result_t *r, troupe__strbuf_t *b,
                                     troupe_cgen_kernel_t **out)
{
    troupe_cgen_kernel_t *k = troupe_realloc(r->kernels, (r->nkernels + 1) * sizeof *k);
    if (k == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->kernels = k;
    k = &r->kernels[r->nkernels];
    memset(k, 0, sizeof *k);
    k->name = troupe_strdup_printf("%s_k%zu", r->name, r->nkernels);
    if (k->name == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->nkernels++;
    troupe__strbuf_puts(b, "\nextern \"C\" __global__ void ");
    troupe__strbuf_puts(b, k->name);
    troupe__strbuf_puts(b, "(");
    for (size_t i = 0; i < r->nparams; i++)
        troupe__strbuf_printf(b, "%s%s", i ? ", " : "", r->params[i].decl);
    troupe__strbuf_puts(b, ")\n{\n");
    *out = k;
    return TROUPE_OK;
}

static troupe_status_t s_add_step(troupe_cgen_result_t *r, const troupe_cgen_step_t *step)
{
    troupe_cgen_step_t *v = troupe_realloc(r->steps, (r->nsteps + 1) * sizeof *v);
    if (v == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    r->steps = v;
    r->steps[r->nsteps++] = *step;
    return TROUPE_OK;
}

/* A one-thread kernel running the `count` statements at `items`, with the Local arrays when
 * `locals`. */
static troupe_status_t s_put_one_thread_kernel(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                               const troupe_ll_t *const *items, size_t count,
                                               bool locals, troupe__strbuf_t *b)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    s_shape(k, 1, 1);
    k->block[0] = 1;
    k->one_thread = true;
    troupe__strbuf_puts(b, "    /* Sequential code: thread 0 of block 0 runs it. */\n"
                           "    if (threadIdx.x != 0 || threadIdx.y != 0 || blockIdx.x != 0 || "
                           "blockIdx.y != 0) return;\n");
    if (locals)
        troupe__cgen_put_local_arrays(g, b);
    for (size_t i = 0; i < count; i++)
        TROUPE_RETURN_IF_ERROR(troupe__cgen_emit_stmt(g, items[i], 1, b));
    troupe__strbuf_puts(b, "}\n");
    return TROUPE_OK;
}

/* The same as a step of its own. */
static troupe_status_t s_put_one_thread(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                        const troupe_ll_t *const *items, size_t count, bool locals,
                                        troupe__strbuf_t *b)
{
    if (count == 0)
        return TROUPE_OK;
    TROUPE_RETURN_IF_ERROR(s_put_one_thread_kernel(g, r, items, count, locals, b));
    troupe_cgen_step_t step = {TROUPE_CGEN_STEP_KERNEL, r->nkernels - 1, 1, {0}};
    return s_add_step(r, &step);
}

/* The grid-stride loop over `extent` along axis 'x' or 'y', at `indent`. */
static void s_put_stride_loop(troupe__strbuf_t *b, char axis, int64_t extent, int indent)
{
    troupe__strbuf_repeat(b, "    ", indent);
    troupe__strbuf_printf(b,
                          "for (int64_t t_%c = (int64_t)blockIdx.%c * blockDim.%c + threadIdx.%c; "
                          "t_%c < %" PRId64 "LL; t_%c += (int64_t)gridDim.%c * blockDim.%c) {\n",
                          axis, axis, axis, axis, axis, extent, axis, axis, axis);
}

/* A kernel of nest `s` with its mapped loops on the grid; `label` names what it computes. */
static troupe_status_t s_put_mapped(troupe__cgen_t *g, troupe_cgen_result_t *r, const s_map_t *m,
                                    const troupe_ll_t *s, troupe__strbuf_t *b, size_t *out_kernel)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    const troupe_ll_t *xl = m->loops[m->nmapped - 1];
    int64_t ex = s_extent(xl), ey = 1;
    for (int i = 0; i < m->nmapped - 1; i++)
        ey *= s_extent(m->loops[i]);
    s_shape(k, ex, m->nmapped > 1 ? ey : 1);
    /* Both loops always: threads outside the planned shape's y (any launch) find no work. */
    int in = 1;
    s_put_stride_loop(b, 'y', ey, in++);
    s_put_stride_loop(b, 'x', ex, in++);
    /* The mapped loops' values: x directly, the y loops decomposed from t_y (innermost
     * varying fastest). */
    int64_t below = 1;
    for (int i = m->nmapped - 1; i >= 0; i--) {
        const troupe_ll_t *l = m->loops[i];
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_printf(b, "const int64_t %s = %" PRId64 "LL + ",
                              troupe__cgen_sym_ident(g, l->u.for_loop.sym), l->u.for_loop.from);
        if (i == m->nmapped - 1)
            troupe__strbuf_puts(b, "t_x;\n");
        else
            troupe__strbuf_printf(b, "t_y / %" PRId64 "LL %% %" PRId64 "LL;\n", below,
                                  s_extent(l));
        if (i < m->nmapped - 1)
            below *= s_extent(l);
        troupe__cgen_bind_sym(g, l->u.for_loop.sym, true, l->u.for_loop.from, l->u.for_loop.to);
    }
    troupe_status_t st = troupe__cgen_emit_stmt(g, s, in, b);
    for (int i = 0; i < m->nmapped; i++)
        troupe__cgen_bind_sym(g, m->loops[i]->u.for_loop.sym, false, 0, 0);
    while (in-- > 1) {
        troupe__strbuf_repeat(b, "    ", in);
        troupe__strbuf_puts(b, "}\n");
    }
    troupe__strbuf_puts(b, "}\n");
    return st;
}

/* A kernel zeroing node tn (grid-stride over its elements). */
static troupe_status_t s_put_zero(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                  const troupe_tnode_t *tn, troupe__strbuf_t *b,
                                  size_t *out_kernel)
{
    troupe_cgen_kernel_t *k = NULL;
    TROUPE_RETURN_IF_ERROR(s_open_kernel(r, b, &k));
    *out_kernel = r->nkernels - 1;
    int64_t n = troupe_tnode_num_elems(tn);
    s_shape(k, n, 1);
    const char *id = troupe__cgen_node_ident(g, tn);
    s_put_stride_loop(b, 'y', 1, 1);
    s_put_stride_loop(b, 'x', n, 2);
    if (tn->prec == TROUPE_PREC_UINT4X32)
        troupe__strbuf_printf(b,
                              "            %s[t_x].v[0] = 0u; %s[t_x].v[1] = 0u; %s[t_x].v[2] = "
                              "0u; %s[t_x].v[3] = 0u;\n",
                              id, id, id, id);
    else
        troupe__strbuf_printf(b, "            %s[t_x] = 0;\n", id);
    troupe__strbuf_puts(b, "        }\n    }\n}\n");
    return TROUPE_OK;
}

/* ---- GEMM steps --------------------------------------------------------------------------- */

/* The call's operand for o: the node's parameter and its base offset over static indices.
 * false when some other symbol moves the base (then the product is no GEMM step). */
static bool s_gemm_operand(const troupe_cgen_result_t *r, const troupe_ll_proc_t *proc,
                           const troupe_gemm_t *gm, const troupe_gemm_operand_t *o,
                           troupe_cgen_gemm_operand_t *out)
{
    memset(out, 0, sizeof *out);
    ptrdiff_t p = troupe_cgen_find_node_param(r, o->tn);
    if (p < 0)
        return false;
    out->param = (size_t)p;
    out->trans = o->trans;
    out->ld = o->ld;
    int64_t stride = 1;
    for (int ax = o->tn->ndims - 1; ax >= 0; ax--) {
        const troupe_axis_index_t *idx = &o->idcs[ax];
        out->offset += idx->offset * stride;
        for (int t = 0; t < idx->nterms; t++) {
            int32_t sym = idx->terms[t].sym;
            if (sym == gm->sym_m || sym == gm->sym_n || sym == gm->sym_k)
                continue;
            if (!proc->syms[sym].is_static)
                return false;
            size_t sp = 0;
            while (sp < r->nparams && !(r->params[sp].kind == TROUPE_CGEN_PARAM_STATIC_IDX &&
                                        r->params[sp].sym == sym))
                sp++;
            if (sp == r->nparams || out->nterms == TROUPE_CGEN_GEMM_MAX_TERMS)
                return false;
            out->static_param[out->nterms] = sp;
            out->coeff[out->nterms++] = idx->terms[t].coeff * stride;
        }
        stride *= o->tn->dims[ax];
    }
    return true;
}

/* Whether the top-level statements from items[at] are a product the GEMM step takes, with the
 * parts of its epilogue (compiler/gemm.h) cuBLASLt takes: a zeroing (beta = 0), an initial bias
 * b[j] (beta = 0 and the bias epilogue) and a post pass in place (relu, bias b[j]). A bias b[i]
 * or a post pass into another node stays kernels of its own (cuBLASLt's bias runs along the
 * rows of its column-major output, which are troupe's columns j, and it writes one output).
 * Fills the step's call and ep with the parts taken; *used: the statements they are. */
static bool s_gemm_step(troupe__cgen_t *g, const troupe_cgen_result_t *r,
                        const troupe_ll_t *const *items, size_t n, size_t at, troupe_gemm_t *gm,
                        troupe_gemm_epilogue_t *ep, size_t *used, troupe_cgen_step_t *step)
{
    const char *why = NULL;
    if (troupe_gemm_match_window(items, n, at, gm, ep, used, &why) != TROUPE_GEMM_YES)
        return false;
    if (ep->init != NULL && ep->bias_axis != TROUPE_GEMM_BIAS_N)
        return false; /* the init runs as a kernel; the product matches at at + 1 */
    bool pre = ep->beta_zero || ep->init != NULL;
    if (ep->post != NULL && (ep->d != gm->c.tn || (!ep->bias_in_init && ep->bias != NULL &&
                                                    ep->bias_axis != TROUPE_GEMM_BIAS_N))) {
        if (!ep->bias_in_init)
            ep->bias = NULL;
        ep->post = NULL;
        ep->relu = false;
    }
    *used = 1 + (pre ? 1 : 0) + (ep->post != NULL ? 1 : 0);
    memset(step, 0, sizeof *step);
    step->kind = TROUPE_CGEN_STEP_GEMM;
    troupe_cgen_gemm_call_t *c = &step->gemm;
    const troupe_ll_proc_t *proc = troupe__cgen_proc(g);
    if (!s_gemm_operand(r, proc, gm, &gm->a, &c->a) || !s_gemm_operand(r, proc, gm, &gm->b, &c->b) ||
        !s_gemm_operand(r, proc, gm, &gm->c, &c->c))
        return false;
    if (ep->bias != NULL) { /* read at j from element 0: no other term (compiler/gemm.h) */
        ptrdiff_t p = troupe_cgen_find_node_param(r, ep->bias);
        if (p < 0)
            return false;
        c->bias.param = (size_t)p;
    }
    c->prec = gm->prec;
    c->m = gm->m;
    c->n = gm->n;
    c->k = gm->k;
    c->beta_zero = pre;
    c->epilogue = ep->relu ? (ep->bias ? TROUPE_CGEN_GEMM_EPI_RELU_BIAS : TROUPE_CGEN_GEMM_EPI_RELU)
                           : (ep->bias ? TROUPE_CGEN_GEMM_EPI_BIAS : TROUPE_CGEN_GEMM_EPI_NONE);
    return true;
}

/* Kernels for one nest: its mapped loops on the grid, else one thread. */
static troupe_status_t s_put_nest(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                  const troupe_ll_t *s, troupe__strbuf_t *b)
{
    s_map_t map;
    size_t kernel = 0;
    TROUPE_RETURN_IF_ERROR(s_plan_nest(s, &map));
    if (map.nmapped > 0)
        return s_put_mapped(g, r, &map, s, b, &kernel);
    return s_put_one_thread_kernel(g, r, &s, 1, false, b);
}

/* Emits the GEMM step's fallback kernels (the zeroing or initial bias, the product, the post
 * pass: the statements as written) and adds the step. */
static troupe_status_t s_put_gemm(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                  const troupe_ll_t *s, const troupe_gemm_t *gm,
                                  const troupe_gemm_epilogue_t *ep, troupe_cgen_step_t *step,
                                  troupe__strbuf_t *b)
{
    static const char *const epi[] = {"", ", then + bias", ", then relu", ", then relu(+ bias)"};
    troupe__strbuf_printf(b,
                          "\n/* GEMM step: %s = %s%s x %s%s + %s (m %" PRId64 ", n %" PRId64
                          ", k %" PRId64 ")%s; the kernels below are its fallback. */\n",
                          troupe__cgen_node_ident(g, gm->c.tn), troupe__cgen_node_ident(g, gm->a.tn),
                          gm->a.trans ? "^T" : "", troupe__cgen_node_ident(g, gm->b.tn),
                          gm->b.trans ? "^T" : "", step->gemm.beta_zero ? "0" : "itself", gm->m,
                          gm->n, gm->k, epi[step->gemm.epilogue]);
    step->first_kernel = r->nkernels;
    size_t kernel = 0;
    if (ep->beta_zero)
        TROUPE_RETURN_IF_ERROR(s_put_zero(g, r, gm->c.tn, b, &kernel));
    if (ep->init != NULL)
        TROUPE_RETURN_IF_ERROR(s_put_nest(g, r, ep->init, b));
    TROUPE_RETURN_IF_ERROR(s_put_nest(g, r, s, b));
    if (ep->post != NULL)
        TROUPE_RETURN_IF_ERROR(s_put_nest(g, r, ep->post, b));
    step->nkernels = r->nkernels - step->first_kernel;
    return s_add_step(r, step);
}

/* ---- the routine -------------------------------------------------------------------------- */

/* Top-level statements: the body with its SEQs flattened, NOOPs dropped. */
static void s_flatten(const troupe_ll_t *s, const troupe_ll_t ***v, size_t *n, size_t *cap,
                      bool *oom)
{
    if (s->kind == TROUPE_LL_NOOP)
        return;
    if (s->kind == TROUPE_LL_SEQ) {
        for (size_t i = 0; i < s->u.seq.count; i++)
            s_flatten(s->u.seq.items[i], v, n, cap, oom);
        return;
    }
    if (!TROUPE__VEC_PUSH(*v, *n, *cap, s))
        *oom = true;
}

static troupe_status_t s_put_routine(troupe__cgen_t *g, troupe_cgen_result_t *r,
                                     troupe__strbuf_t *b)
{
    const troupe_ll_proc_t *proc = troupe__cgen_proc(g);
    const troupe_ll_t **items = NULL;
    size_t n = 0, cap = 0;
    bool oom = false;
    s_flatten(proc->body, &items, &n, &cap, &oom);
    troupe_status_t st = TROUPE_OK;
    if (oom) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
        goto out;
    }
    if (troupe__cgen_has_local_arrays(g)) { /* one thread holds the Local arrays */
        st = s_put_one_thread(g, r, items, n, true, b);
        goto out;
    }
    size_t seq_from = 0, seq_n = 0; /* sequential statements not emitted yet */
    for (size_t i = 0; i < n && st == TROUPE_OK; i++) {
        const troupe_ll_t *s = items[i];
        troupe_gemm_t gm;
        troupe_gemm_epilogue_t ep;
        troupe_cgen_step_t step;
        size_t used = 0;
        if ((s->kind == TROUPE_LL_FOR || s->kind == TROUPE_LL_ZERO_OUT) &&
            s_gemm_step(g, r, items, n, i, &gm, &ep, &used, &step)) {
            st = s_put_one_thread(g, r, &items[seq_from], seq_n, false, b);
            seq_n = 0;
            if (st == TROUPE_OK)
                st = s_put_gemm(g, r, items[i + (step.gemm.beta_zero ? 1 : 0)], &gm, &ep, &step, b);
            i += used - 1;
            continue;
        }
        if (s->kind == TROUPE_LL_COMMENT && seq_n == 0) {
            st = troupe__cgen_emit_stmt(g, s, 0, b);
            continue;
        }
        s_map_t map = {0, {NULL}};
        if (s->kind == TROUPE_LL_FOR && (st = s_plan_nest(s, &map)) != TROUPE_OK)
            break;
        if (s->kind != TROUPE_LL_ZERO_OUT && map.nmapped == 0) {
            if (seq_n++ == 0)
                seq_from = i;
            continue;
        }
        st = s_put_one_thread(g, r, &items[seq_from], seq_n, false, b);
        seq_n = 0;
        size_t kernel = 0;
        if (st == TROUPE_OK && s->kind == TROUPE_LL_FOR)
            st = s_put_mapped(g, r, &map, s, b, &kernel);
        else if (st == TROUPE_OK)
            st = s_put_zero(g, r, s->u.zero_out, b, &kernel);
        if (st == TROUPE_OK) {
            troupe_cgen_step_t ks = {TROUPE_CGEN_STEP_KERNEL, kernel, 1, {0}};
            st = s_add_step(r, &ks);
        }
    }
    if (st == TROUPE_OK)
        st = s_put_one_thread(g, r, &items[seq_from], seq_n, false, b);
out:
    troupe_free(items);
    if (st == TROUPE_OK && b->failed)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cgen: out of memory");
    return st;
}

static void s_put_calling(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    troupe__strbuf_puts(b, " * Kernels (launch argument k points to parameter k), by step:\n");
    if (r->nsteps == 0)
        troupe__strbuf_puts(b, " *   (none: the routine does nothing)\n");
    for (size_t i = 0; i < r->nsteps; i++) {
        const troupe_cgen_step_t *s = &r->steps[i];
        troupe__strbuf_printf(b, " *   step %zu: %s", i,
                              s->kind == TROUPE_CGEN_STEP_GEMM ? "GEMM, else" : "kernel");
        for (size_t k = s->first_kernel; k < s->first_kernel + s->nkernels; k++) {
            const troupe_cgen_kernel_t *kn = &r->kernels[k];
            troupe__strbuf_printf(b, " %s grid %ux%u block %ux%u", kn->name, kn->grid[0],
                                  kn->grid[1], kn->block[0], kn->block[1]);
            if (kn->one_thread)
                troupe__strbuf_puts(b, " (one thread)");
        }
        troupe__strbuf_puts(b, "\n");
    }
}

static void s_put_open(troupe__strbuf_t *b, const troupe_cgen_result_t *r)
{
    (void)b;
    (void)r; /* put_routine writes the kernels */
}

static const char *s_section_text(const troupe__cgen_section_t *s)
{
    return s->text_cuda != NULL ? s->text_cuda : s->text_c;
}

const troupe__cgen_target_t troupe__cgen_target_cuda = {
    .dialect = TROUPE_CGEN_CUDA,
    .name = "cuda",
    .restrict_kw = "__restrict__",
    .has_entry = false,
    .gemm_library = false,
    .put_calling = s_put_calling,
    .put_open = s_put_open,
    .put_routine = s_put_routine,
    .put_after = NULL,
    .section_text = s_section_text,
};
