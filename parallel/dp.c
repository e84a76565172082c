/* troupe — the data-parallel driver (parallel/dp.h; docs/architecture.md §5; OCANNL_NOTES §7.1 for the
 * stream pairing of the tree merge).
 *
 * Layout on each local stream k (a chain of contexts, each a child of the previous one):
 *   root -> init_from_host_packed(params, one pool in the gradients' order) -> init_from_host(inputs)
 *   [-> link(feed)] -> link(grad segment 0) [-> link(grad segment 1) ...] [-> link(merge_i)]
 * and on the owner stream 0, after those: -> init_from_host_packed(state m) [->
 * init_from_host_packed(state v)] -> init_from_host(hyper)
 * -> for each staging node j: init_from_host(hyper stage j) -> link(hyper := stage j)
 * -> link(optimizer). Every routine is compiled once and linked once per stream in
 * troupe_dp_new; a step only binds the batch index (on the feed routine in the fed form,
 * which then runs just before the gradient routine), schedules runs and transfers.
 *
 * Merge routines read the gradient through the stream's merge buffer (`g =+ g.merge`); they
 * are linked against the untagged context (the static link check only rejects a context tagged
 * with another node) and each run follows a COPY device_to_device of that gradient, which the
 * run-time check verifies.
 *
 * Cross-rank fast path: with one rank (or local_only) the allreduce is skipped: the mean over
 * one rank is the identity. With several ranks a step issues one fused allreduce (sum) of all
 * gradients after the local merges, or with the gradient routine split into segments
 * (docs/parallel.md, Overlap; dp_split.c) one per segment's bucket as soon as that segment and
 * its merges are done; the optimizer waits for all and scales by 1 / (N * R).
 *
 * Host cost per step: hyper-parameters are uploaded only when they changed, through a ring of
 * staging nodes so that the host write never waits for the previous step's upload.
 */
#include "parallel/dp_impl.h"

#include "base/config.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/fault_impl.h"
#include "base/log.h"
#include "base/trace_impl.h"
#include "base/vec.h"
#include "devices/device.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The environment variables this layer reads (base/config.h registry; docs/configuration.md). */
static const troupe_config_var_t s_env_vars[] = {
    {"TROUPE_DP_OVERLAP", "parallel", "choice", "auto", "auto|on|off",
     "troupe_config_set_dp_overlap",
     "overlap each gradient bucket's allreduce with the backward pass"},
    {"TROUPE_DP_BUCKET_BYTES", "parallel", "bytes", "26214400", ">= 1",
     "troupe_config_set_dp_bucket_bytes",
     "with overlap, the gradient bytes after which a segment closes its bucket (DDP's 25 MiB)"},
    {"TROUPE_DP_FUSED_UPDATE", "parallel", "choice", "auto", "auto|off",
     "troupe_config_set_dp_fused_update",
     "reduce-scatter, update a share, allgather the parameters"},
    {"TROUPE_RESUME", "parallel", "path", "none", "-", "troupe_config_set_resume",
     "set by troupe run: the checkpoint to resume from"},
    {"TROUPE_PROGRESS_FILE", "parallel", "path", "none", "-", "troupe_config_set_progress_file",
     "set by troupe run: where rank 0 keeps its step count"},
};
TROUPE_CONFIG_VARS(parallel, s_env_vars)

/* Most local replicas accepted (a sanity bound on a config value). */
#define S_MAX_STREAMS 4096

/* ---- shared helpers (dp_impl.h) ------------------------------------------------------------- */

void troupe__dp_node_name(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_debug_name(tn, buf, cap);
}

static void s_dims(const troupe_tnode_t *tn, char *buf, size_t cap)
{
    troupe_tnode_dims_to_string(tn, false, buf, cap);
}

/* Re-records `st` with "<prefix>: <the current last error>". */
troupe_status_t troupe__dp_wrap(troupe_status_t st, const char *prefix)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", troupe_last_error());
    return troupe__error(st, "%s: %s", prefix, msg);
}

troupe_status_t troupe__dp_sync_event(troupe_event_t **ev_p, const char *what)
{
    troupe_status_t st = TROUPE_OK;
    if (*ev_p)
        st = troupe_event_sync(*ev_p, troupe_config_timeout_ns());
    troupe_event_release(ev_p);
    if (st != TROUPE_OK)
        return troupe__dp_wrap(st, what);
    return TROUPE_OK;
}

/* Adopts the caller's reference to ctx as replica r's new last context. */
static troupe_status_t s_push(troupe__dp_replica_t *r, troupe_context_t *ctx)
{
    if (!TROUPE__VEC_PUSH(r->ctxs, r->nctxs, r->ctxs_cap, ctx)) {
        troupe_context_release(&ctx);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    return TROUPE_OK;
}

static troupe_context_t *s_tail(troupe__dp_replica_t *r)
{
    return r->nctxs ? r->ctxs[r->nctxs - 1] : NULL;
}

troupe_context_t *troupe__dp_tail(troupe_dp_t *dp, int k)
{
    return s_tail(&dp->rep[k]);
}

/* Links code on replica r's last context; the routine's context becomes the last one. */
troupe_status_t troupe__dp_link(troupe__dp_replica_t *r, troupe_code_t *code, troupe_routine_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_link(s_tail(r), code, out));
    troupe_context_t *c = troupe_routine_context(*out);
    troupe_context_retain(c);
    return s_push(r, c);
}

/* init_from_host of tn on replica r's last context. */
troupe_status_t troupe__dp_upload(troupe__dp_replica_t *r, troupe_tnode_t *tn)
{
    troupe_context_t *c = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_init_from_host(s_tail(r), tn, &c, NULL));
    return s_push(r, c);
}

/* The parameter index of grads_by_id[j] (a permutation of grads: always found). */
size_t troupe__dp_param_of(const troupe_dp_t *dp, size_t j)
{
    size_t i = 0;
    while (i + 1 < dp->n_params && dp->grads[i] != dp->grads_by_id[j])
        i++;
    return i;
}

/* Uploads, into one pool on r (troupe_init_from_host_packed), the node of each parameter
 * (per_param[i * stride + at] for parameter i) in the order of the gradients (grads_by_id):
 * each the size of its gradient, they lie as the gradients do in the gradient routine's pool,
 * which the fused update needs (Fused update). `what` prefixes an error. */
troupe_status_t troupe__dp_upload_by_grad(troupe_dp_t *dp, troupe__dp_replica_t *r,
                                        troupe_tnode_t *const *per_param, size_t stride,
                                        size_t at, const char *what)
{
    troupe_tnode_t **by_grad = troupe_calloc(dp->n_params, sizeof *by_grad);
    if (by_grad == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
    for (size_t j = 0; j < dp->n_params; j++)
        by_grad[j] = per_param[troupe__dp_param_of(dp, j) * stride + at];
    troupe_context_t *c = NULL;
    troupe_status_t st = troupe_init_from_host_packed(s_tail(r), dp->n_params, by_grad, &c);
    troupe_free(by_grad);
    if (st == TROUPE_OK)
        st = s_push(r, c);
    return st == TROUPE_OK ? TROUPE_OK : troupe__dp_wrap(st, what);
}

troupe_status_t troupe__dp_await(troupe_dp_t *dp, const char *what)
{
    for (int k = 0; k < dp->n; k++) {
        troupe_status_t st = troupe_stream_await(dp->rep[k].stream, troupe_config_timeout_ns());
        if (st != TROUPE_OK) {
            /* a stream cancelled because another failed first (the pass across the streams
             * gives up when a stream drops its part): name the one that failed first */
            if (st == TROUPE_CANCELLED) {
                char mine[1024];
                snprintf(mine, sizeof mine, "%s", troupe_last_error());
                int root = -1;
                for (int j = 0; j < dp->n && root < 0; j++) {
                    troupe_status_t sj = j != k ? troupe_stream_status(dp->rep[j].stream)
                                                : TROUPE_OK;
                    if (sj != TROUPE_OK && sj != TROUPE_CANCELLED) { /* its message is set */
                        st = sj;
                        root = j;
                    }
                }
                if (root >= 0)
                    k = root;
                else /* another stream's status replaced this one's message */
                    st = troupe__error(st, "%s", mine);
            }
            char prefix[160];
            snprintf(prefix, sizeof prefix, "%s: replica %d (stream %s)", what, k,
                     troupe_stream_name(dp->rep[k].stream));
            return troupe__dp_wrap(st, prefix);
        }
    }
    return TROUPE_OK;
}

/* ---- validation ----------------------------------------------------------------------------- */

/* A feed writes the minibatch's nodes only: never a parameter, a gradient or the loss (which
 * it would overwrite on every replica behind the optimizer's back). */
static troupe_status_t s_check_feed_nodes(const troupe_dp_model_t *m)
{
    if (!m->feed_comp)
        return TROUPE_OK;
    for (size_t i = 0; i < 2 * m->n_params + 1; i++) {
        const char *what = i < m->n_params       ? "parameter"
                           : i < 2 * m->n_params ? "gradient"
                                                 : "loss";
        troupe_tnode_t *tn = i < m->n_params       ? m->params[i]
                             : i < 2 * m->n_params ? m->grads[i - m->n_params]
                                                   : m->loss;
        if (tn && troupe_asgn_comp_node_index(m->feed_comp, tn) != SIZE_MAX) {
            char nm[64];
            troupe__dp_node_name(tn, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: feed_comp mentions the %s %s: a feed only writes the "
                                 "minibatch's nodes that grad_comp reads",
                                 what, nm);
        }
    }
    return TROUPE_OK;
}

static troupe_status_t s_check_model(const troupe_dp_config_t *cfg, const troupe_dp_model_t *m)
{
    if (!cfg)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL config");
    if (!m)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL model");
    if (!m->grad_comp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: the model has no grad_comp");
    if (!m->batch_index)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: the model has no batch_index");
    if (m->n_params == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: n_params is 0: nothing to train");
    if (!m->params || !m->grads)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL %s with n_params = %zu",
                             !m->params ? "params" : "grads", m->n_params);
    if (m->n_inputs > 0 && !m->inputs)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL inputs with n_inputs = %zu",
                             m->n_inputs);
    if (cfg->n_devices < 0 || cfg->n_devices > TROUPE_DP_MAX_DEVICES ||
        (cfg->n_devices > 0 && !cfg->devices))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: n_devices = %d with devices %s: expected 0 to %d entries",
                             cfg->n_devices, cfg->devices ? "set" : "NULL", TROUPE_DP_MAX_DEVICES);
    if (cfg->streams > S_MAX_STREAMS)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: streams = %d exceeds the limit of %d local replicas",
                             cfg->streams, S_MAX_STREAMS);
    /* the comp whose static index selects the minibatch: the feed's, else grad_comp's */
    const troupe_asgn_comp_t *sel = m->feed_comp ? m->feed_comp : m->grad_comp;
    const char *sel_name = m->feed_comp ? "feed_comp" : "grad_comp";
    if (m->feed_comp == m->grad_comp)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: feed_comp is grad_comp: the feed is a computation of its "
                             "own that writes the minibatch's nodes");
    int32_t sym = troupe_asgn_comp_find_static_symbol(sel, m->batch_index);
    if (sym < 0) {
        char have[256] = "";
        size_t used = 0;
        for (int32_t s = 0; s < sel->nsyms && used < sizeof have; s++)
            used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", s ? ", " : "",
                                     sel->syms[s].name);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: batch_index '%s' is not a static index of %s "
                             "(its static indices: %s)",
                             m->batch_index, sel_name, sel->nsyms ? have : "none");
    }
    if (m->feed_comp && troupe_asgn_comp_find_static_symbol(m->grad_comp, m->batch_index) >= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_comp has the static index batch_index '%s' although a "
                             "feed_comp is given: with a feed, the feed selects the minibatch and "
                             "grad_comp reads the fed nodes (drop the index from grad_comp, or "
                             "give no feed_comp)",
                             m->batch_index);
    TROUPE_RETURN_IF_ERROR(s_check_feed_nodes(m));
    if (m->num_batches <= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: num_batches = %lld must be > 0",
                             (long long)m->num_batches);
    int64_t range = sel->syms[sym].range;
    if (range > 0 && m->num_batches > range)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: num_batches = %lld exceeds the range %lld of batch_index "
                             "'%s'",
                             (long long)m->num_batches, (long long)range, m->batch_index);
    char n1[64], n2[64], d1[64], d2[64];
    for (size_t i = 0; i < m->n_params; i++) {
        troupe_tnode_t *p = m->params[i], *g = m->grads[i];
        if (!p || !g)
            return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: %s[%zu] is NULL",
                                 !p ? "params" : "grads", i);
        troupe__dp_node_name(p, n1, sizeof n1);
        troupe__dp_node_name(g, n2, sizeof n2);
        if (p == g)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] is the parameter %s itself", i, n1);
        for (size_t j = 0; j < i; j++) {
            if (m->params[j] == p || m->grads[j] == g || m->params[j] == g || m->grads[j] == p)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "dp_new: entries %zu and %zu of params/grads share a node "
                                     "(%s or %s)",
                                     j, i, n1, n2);
        }
        if (!troupe_prec_is_float(p->prec))
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: params[%zu] %s has precision %s: only floating-point "
                                 "parameters are trained",
                                 i, n1, troupe_prec_name(p->prec));
        if (g->prec != p->prec)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] %s has precision %s but params[%zu] %s has "
                                 "%s",
                                 i, n2, troupe_prec_name(g->prec), i, n1,
                                 troupe_prec_name(p->prec));
        bool same = g->ndims == p->ndims;
        for (int a = 0; same && a < p->ndims; a++)
            same = g->dims[a] == p->dims[a];
        if (!same) {
            s_dims(p, d1, sizeof d1);
            s_dims(g, d2, sizeof d2);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: grads[%zu] %s has dims %s but params[%zu] %s has dims "
                                 "%s",
                                 i, n2, d2, i, n1, d1);
        }
    }
    if (m->loss && troupe_tnode_num_elems(m->loss) != 1) {
        troupe__dp_node_name(m->loss, n1, sizeof n1);
        s_dims(m->loss, d1, sizeof d1);
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: loss %s has dims %s: it must be a scalar", n1, d1);
    }
    for (size_t i = 0; i < m->n_inputs; i++)
        if (!m->inputs[i])
            return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: inputs[%zu] is NULL", i);
    int accum = 1;
    TROUPE_RETURN_IF_ERROR(troupe__dp_strategy_accum(cfg, &accum));
    if (!(cfg->grad_clip >= 0.0) || !isfinite(cfg->grad_clip))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_clip = %g: the largest gradient norm must be finite "
                             "and > 0 (0: no clipping)",
                             cfg->grad_clip);
    return troupe__dp_check_optimizer(&cfg->optimizer);
}

/* ---- construction --------------------------------------------------------------------------- */

troupe_status_t troupe__dp_new_hosted(const char *label, const char *suffix, troupe_prec_t prec,
                                    int ndims, const int64_t *dims, troupe_tnode_t **out)
{
    char text[160];
    snprintf(text, sizeof text, "%s%s%s", label, suffix ? "_" : "", suffix ? suffix : "");
    const char *l[1] = {text};
    TROUPE_RETURN_IF_ERROR(troupe_tnode_new(l, 1, prec, ndims, dims, NULL, 0.0, out));
    size_t n = (size_t)troupe_tnode_num_elems(*out);
    double *zeros = troupe_calloc(n, sizeof *zeros);
    if (!zeros) {
        troupe_tnode_release(out);
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    troupe_status_t st = troupe_tnode_set_values(*out, zeros, n);
    troupe_free(zeros);
    if (st != TROUPE_OK)
        troupe_tnode_release(out);
    return st;
}

static troupe_status_t s_open(troupe_dp_t *dp, const troupe_dp_config_t *cfg)
{
    TROUPE_RETURN_IF_ERROR(
        troupe_backend_open(cfg->backend, TROUPE_MOST_PARALLEL_STREAMS, &dp->backend));
    int ndev = 0;
    TROUPE_RETURN_IF_ERROR(troupe_num_devices(dp->backend, &ndev));
    if (ndev <= 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "dp_new: backend %s has no device",
                             troupe_backend_name(dp->backend));
    /* this rank's devices: the config's, else TROUPE_DEVICE or the local rank's share */
    troupe_dp_devices_t dv;
    memset(&dv, 0, sizeof dv);
    if (cfg->n_devices > 0) {
        for (int i = 0; i < cfg->n_devices; i++) {
            int o = cfg->devices[i];
            if (o < 0 || o >= ndev)
                return troupe__error(TROUPE_NOT_FOUND,
                                     "dp_new: devices[%d] = %d: backend %s has no device %d (it "
                                     "has %d)",
                                     i, o, troupe_backend_name(dp->backend), o, ndev);
            for (int j = 0; j < i; j++)
                if (cfg->devices[j] == o)
                    return troupe__error(TROUPE_INVALID_ARGUMENT,
                                         "dp_new: device %d is listed twice (devices[%d] and "
                                         "devices[%d])",
                                         o, j, i);
            dv.ordinals[dv.n++] = o;
        }
    } else {
        TROUPE_RETURN_IF_ERROR(troupe_dp_pick_devices(dp->backend, &dv));
    }
    int n = cfg->streams;
    if (n <= 0) {
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_suggested_streams_on(dp->backend, dv.ordinals, dv.n, dv.from_env, &n));
        if (n > S_MAX_STREAMS)
            n = S_MAX_STREAMS;
    }
    dp->n = n;
    dp->rep = troupe_calloc((size_t)n, sizeof *dp->rep);
    dp->dev_of = troupe_calloc((size_t)n, sizeof *dp->dev_of);
    if (!dp->rep || !dp->dev_of)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    /* consecutive replicas on one device, so the first merge rounds stay on a device */
    int per_dev = (n + dv.n - 1) / dv.n;
    for (int k = 0; k < n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        troupe_device_t *d = NULL;
        dp->dev_of[k] = dv.ordinals[k / per_dev];
        TROUPE_RETURN_IF_ERROR(troupe_get_device(dp->backend, dp->dev_of[k], &d));
        TROUPE_RETURN_IF_ERROR(troupe_new_stream(d, &r->stream));
        troupe_context_t *root = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_context_new(r->stream, &root));
        TROUPE_RETURN_IF_ERROR(s_push(r, root));
        r->merge = troupe_calloc(dp->n_params, sizeof *r->merge);
        if (!r->merge)
            return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    }
    return TROUPE_OK;
}

/* qsort order of node pointers by node id. */
static int s_by_id(const void *a, const void *b)
{
    int32_t x = (*(troupe_tnode_t *const *)a)->id, y = (*(troupe_tnode_t *const *)b)->id;
    return (x > y) - (x < y);
}

static troupe_status_t s_copy_model(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    dp->n_params = m->n_params;
    dp->params = troupe_calloc(m->n_params, sizeof *dp->params);
    dp->grads = troupe_calloc(m->n_params, sizeof *dp->grads);
    dp->grads_by_id = troupe_calloc(m->n_params, sizeof *dp->grads_by_id);
    dp->batch_index = troupe_strdup(m->batch_index);
    if (!dp->params || !dp->grads || !dp->grads_by_id || !dp->batch_index)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t i = 0; i < m->n_params; i++) {
        troupe_tnode_retain(m->params[i]);
        dp->params[i] = m->params[i];
        troupe_tnode_retain(m->grads[i]);
        dp->grads[i] = m->grads[i];
        dp->grads_by_id[i] = m->grads[i];
    }
    qsort(dp->grads_by_id, m->n_params, sizeof *dp->grads_by_id, s_by_id);
    if (m->loss) {
        troupe_tnode_retain(m->loss);
        dp->loss = m->loss;
        /* the loss is read back per replica with to_host: it must be hosted */
        void *host = NULL;
        troupe_status_t st = troupe_tnode_host_array(dp->loss, &host);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: the loss node cannot be hosted");
    }
    dp->num_batches = m->num_batches;
    return TROUPE_OK;
}

static troupe_status_t s_build_feed(troupe_dp_t *dp, const troupe_dp_model_t *m)
{
    if (!m->feed_comp)
        return TROUPE_OK;
    troupe_status_t st = troupe_compile(dp->backend, m->feed_comp, "dp_feed", &dp->feed_code);
    if (st != TROUPE_OK)
        return troupe__dp_wrap(st, "dp_new: compiling feed_comp");
    for (int k = 0; k < dp->n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        st = troupe__dp_link(r, dp->feed_code, &r->feed);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: linking feed_comp");
        st = troupe_routine_set_index(r->feed, dp->batch_index, 0);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: binding batch_index on the feed");
    }
    size_t shared = 0;
    for (size_t i = 0; i < m->feed_comp->nnodes; i++) {
        troupe_tnode_t *tn = m->feed_comp->nodes[i];
        bool input = false;
        for (size_t j = 0; j < m->n_inputs && !input; j++)
            input = m->inputs[j] == tn;
        if (input || troupe_asgn_comp_node_index(m->grad_comp, tn) == SIZE_MAX)
            continue;
        shared++;
        if (!troupe_context_has_node(troupe__dp_tail(dp, 0), tn)) {
            char nm[64];
            troupe__dp_node_name(tn, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: node %s, which feed_comp writes and grad_comp reads, is "
                                 "not materialized by the feed routine (a virtual or local node "
                                 "does not outlive its routine: make it materialized)",
                                 nm);
        }
    }
    if (shared == 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_new: grad_comp reads none of the nodes feed_comp writes (the "
                             "inputs aside): the feed would feed nothing");
    return TROUPE_OK;
}

/* The debug line naming the model's form and whether its routines are graph candidates. */
static void s_log_form(const troupe_dp_t *dp)
{
    bool graphs = troupe_backend_has_graphs(troupe_backend_name(dp->backend));
    bool on = graphs && troupe_driver_graphs() == TROUPE_GRAPHS_AUTO;
    bool fed = dp->feed_code != NULL;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_PARALLEL,
               "dp: minibatches %s (batch_index '%s'); backend %s %s: %s",
               fed ? "fed into fixed nodes by feed_comp" : "indexed in grad_comp", dp->batch_index,
               troupe_backend_name(dp->backend),
               !graphs ? "has no graph entries"
               : on    ? "replays graphs (TROUPE_CUDA_GRAPHS=auto)"
                       : "has graphs off (TROUPE_CUDA_GRAPHS=off)",
               !on   ? "every routine launches plainly"
               : fed ? "the gradient, merge and optimizer routines launch with one binding each "
                       "and are graph candidates (the feed gets a new binding per minibatch)"
                     : "the merge and optimizer routines are graph candidates, the gradient "
                       "routine is not (a new binding per minibatch: give a feed_comp)");
}

/* ---- merge routines ---------------------------------------------------------------------- */

/* Merge routine i, g =+ g.merge over the gradient's own axes, into dp->merge_code[i]. */
static troupe_status_t s_compile_merge(troupe_dp_t *dp, size_t i)
{
    troupe_tnode_t *g = dp->grads[i];
    troupe_asgn_comp_t *comp = NULL;
    troupe_asgn_t *t = NULL;
    char axes[TROUPE_MAX_DIMS + 1], spec[2 * TROUPE_MAX_DIMS + 4], name[48];
    int nd = g->ndims;
    for (int a = 0; a < nd; a++)
        axes[a] = (char)('a' + a);
    axes[nd] = '\0';
    snprintf(spec, sizeof spec, "%s=>%s", axes, axes); /* identity: "ab=>ab" */
    snprintf(name, sizeof name, "dp_merge_%zu", i);
    troupe_status_t st = troupe_asgn_comp_new(&comp);
    if (st == TROUPE_OK)
        st = troupe_asgn_accum_unop(comp, false, TROUPE_BINOP_ADD, g, TROUPE_UNOP_IDENTITY,
                                    troupe_asgn_merge(g), spec, &t);
    if (st == TROUPE_OK) {
        troupe_asgn_comp_set_root(comp, t);
        st = troupe_compile(dp->backend, comp, name, &dp->merge_code[i]);
    }
    troupe_asgn_comp_destroy(&comp);
    return st;
}

/* Every merge routine, in order; a failure names the routine's compile. */
static troupe_status_t s_compile_merges(troupe_dp_t *dp)
{
    dp->merge_code = troupe_calloc(dp->n_params, sizeof *dp->merge_code);
    if (!dp->merge_code)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    for (size_t i = 0; i < dp->n_params; i++) {
        troupe_status_t st = s_compile_merge(dp, i);
        if (st != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: compiling a merge routine");
    }
    return TROUPE_OK;
}

static troupe_status_t s_build(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                               const troupe_dp_model_t *m)
{
    char nm[64];
    dp->opt = cfg->optimizer;
    dp->grad_clip = cfg->grad_clip;
    dp->local_only = cfg->local_only;
    dp->coll_flags = cfg->compress_bf16 ? TROUPE_COLL_BF16 : 0u;
    dp->rank = 0;
    dp->nranks = 1;
    if (!dp->local_only) {
        TROUPE_RETURN_IF_ERROR(troupe_cluster_status());
        dp->rank = troupe_cluster_rank();
        dp->nranks = troupe_cluster_size();
    }
    TROUPE_RETURN_IF_ERROR(s_copy_model(dp, m));
    TROUPE_RETURN_IF_ERROR(s_open(dp, cfg));
    TROUPE_RETURN_IF_ERROR(troupe__dp_agree_config(dp, cfg, m)); /* before any long work */
    TROUPE_RETURN_IF_ERROR(troupe__dp_loss_scale_config(dp, cfg, m));
    TROUPE_RETURN_IF_ERROR(troupe__dp_strategy_resolve(dp, cfg, m));
    TROUPE_RETURN_IF_ERROR(troupe__dp_exchange_setup(dp));

    /* parameters and inputs on every replica; the parameters packed in one pool in the order
     * of their gradients (grads_by_id), so that they lie as the gradients do (each the size of
     * its gradient): the fused update then reaches them through shared memory (Fused update) */
    for (int k = 0; k < dp->n; k++) {
        troupe__dp_replica_t *r = &dp->rep[k];
        TROUPE_RETURN_IF_ERROR(
            troupe__dp_upload_by_grad(dp, r, dp->params, 1, 0, "dp_new: uploading the parameters"));
        troupe_status_t st = TROUPE_OK;
        if (dp->ls_node != NULL && !troupe_context_has_node(s_tail(r), dp->ls_node) &&
            (st = troupe__dp_upload(r, dp->ls_node)) != TROUPE_OK)
            return troupe__dp_wrap(st, "dp_new: uploading the loss scale");
        for (size_t i = 0; i < m->n_inputs; i++) {
            if (troupe_context_has_node(s_tail(r), m->inputs[i]))
                continue;
            st = troupe__dp_upload(r, m->inputs[i]);
            if (st != TROUPE_OK) {
                troupe__dp_node_name(m->inputs[i], nm, sizeof nm);
                char prefix[128];
                snprintf(prefix, sizeof prefix, "dp_new: uploading input %s", nm);
                return troupe__dp_wrap(st, prefix);
            }
        }
    }

    /* the feed (fed form) and the gradient routine, one routine per segment (Overlap), compiled once, linked on every
     * replica in order */
    TROUPE_RETURN_IF_ERROR(s_build_feed(dp, m));
    TROUPE_RETURN_IF_ERROR(troupe__dp_split_build(dp, m));
    /* merge routines g =+ g.merge, on the replicas that receive (even k with a k+1): compiled
     * here, before the gradient routine's contexts exist, since each compile forks the
     * process (devices/host/cc_cache.c) and a fork's cost grows with the memory mapped */
    if (dp->n > 1)
        TROUPE_RETURN_IF_ERROR(s_compile_merges(dp));

    for (int k = 0; k < dp->n; k++) {
        for (size_t g = 0; g < dp->nseg; g++) {
            troupe_status_t st = troupe__dp_link(&dp->rep[k], dp->seg_code[g], &dp->rep[k].seg[g]);
            if (st != TROUPE_OK)
                return troupe__dp_wrap(st, "dp_new: linking grad_comp");
            if (!dp->rep[k].feed) /* the fed form's segments have no batch index */
                st = troupe_routine_set_index(dp->rep[k].seg[g], dp->batch_index, 0);
            if (st != TROUPE_OK)
                return troupe__dp_wrap(st, "dp_new: binding batch_index");
        }
        for (size_t i = 0; i < dp->n_params; i++) {
            if (!troupe_context_has_node(troupe__dp_tail(dp, k), dp->grads[i])) {
                troupe__dp_node_name(dp->grads[i], nm, sizeof nm);
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "dp_new: grads[%zu] %s is not materialized by grad_comp "
                                     "(it must write it)",
                                     i, nm);
            }
        }
        if (dp->loss && !troupe_context_has_node(troupe__dp_tail(dp, k), dp->loss)) {
            troupe__dp_node_name(dp->loss, nm, sizeof nm);
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "dp_new: loss %s is not written by grad_comp", nm);
        }
    }

    /* the merge routines linked on the replicas that receive */
    troupe_status_t st = TROUPE_OK;
    for (size_t i = 0; dp->merge_code != NULL && i < dp->n_params; i++)
        for (int k = 0; k + 1 < dp->n; k += 2) {
            st = troupe__dp_link(&dp->rep[k], dp->merge_code[i], &dp->rep[k].merge[i]);
            if (st != TROUPE_OK)
                return troupe__dp_wrap(st, "dp_new: linking a merge routine");
        }

    /* the update (optimizer state and hyper-parameters on the owner stream) and the sums
     * of the micro-steps; then every rank starts from rank 0's parameters */
    TROUPE_RETURN_IF_ERROR(troupe__dp_update_build(dp));
    TROUPE_RETURN_IF_ERROR(troupe__dp_accum_build(dp));
    TROUPE_RETURN_IF_ERROR(troupe__dp_exchange_broadcast(dp));
    TROUPE_RETURN_IF_ERROR(troupe__dp_await(dp, "dp_new"));
    s_log_form(dp);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL,
               "dp: %d local replicas on %s (devices %d to %d), rank %d of %d, %zu parameters, "
               "optimizer %s%s, allreduce %s (%zu buckets), CUDA-aware MPI %s "
               "(TROUPE_CUDA_AWARE=%s)",
               dp->n, troupe_backend_name(dp->backend), dp->dev_of[0], dp->dev_of[dp->n - 1],
               dp->rank, dp->nranks, dp->n_params, troupe_optimizer_name(dp->opt.kind),
               (dp->strat.update == TROUPE__DP_UPDATE_FUSED) ? " (fused into the allreduce)" : "",
               dp->nranks == 1                            ? "none (one rank)"
               : troupe__dp_staged(dp)                               ? "pipelined through host memory"
               : dp->strat.exchange == TROUPE__DP_EXCHANGE_DIRECT ? "direct on device memory"
                                                          : "in place on the devices",
               troupe__dp_staged(dp) ? dp->nbk : dp->nranks > 1 ? dp->nseg : 0,
               troupe_cluster_cuda_aware() ? "detected" : "not detected",
               troupe_config_cuda_aware_name(troupe_config_cuda_aware()));
    return TROUPE_OK;
}

troupe_status_t troupe_dp_new(const troupe_dp_config_t *cfg, const troupe_dp_model_t *model,
                              troupe_dp_t **out)
{
    if (!out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_new: NULL out");
    *out = NULL;
    TROUPE_RETURN_IF_ERROR(s_check_model(cfg, model));
    troupe_dp_t *dp = troupe_calloc(1, sizeof *dp);
    if (!dp)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp: out of memory");
    troupe_status_t st = s_build(dp, cfg, model);
    if (st != TROUPE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", troupe_last_error());
        troupe_dp_destroy(&dp);
        return troupe__error(st, "%s", msg);
    }
    *out = dp;
    return TROUPE_OK;
}

/* Teardown after a failure stays quiet: a replica whose stream failed had its failure
 * reported by the call that met it (dp_step, dp_sync), so what it leaves behind is logged at
 * debug level; anything else (a stream that did not drain in time) is a warning. */
static troupe_log_level_t s_teardown_level(troupe_stream_t *s)
{
    return s != NULL && troupe_stream_status(s) != TROUPE_OK ? TROUPE_LOG_DEBUG : TROUPE_LOG_WARN;
}

void troupe_dp_destroy(troupe_dp_t **dp_p)
{
    if (!dp_p || !*dp_p)
        return;
    troupe_dp_t *dp = *dp_p;
    *dp_p = NULL;
    if (dp->rep) {
        for (int k = 0; k < dp->n; k++)
            if (dp->rep[k].stream) {
                troupe_status_t st =
                    troupe_stream_await(dp->rep[k].stream, troupe_config_timeout_ns());
                if (st != TROUPE_OK)
                    TROUPE_LOG(s_teardown_level(dp->rep[k].stream), TROUPE_SUB_PARALLEL,
                               "dp_destroy: replica %d: %s", k, troupe_last_error());
            }
    }
    troupe_free(dp->ckpt_note);
    troupe_tnode_release(&dp->ls_node);
    troupe_tnode_release(&dp->ls_finite);
    troupe__dp_close_progress(dp);
    troupe_routine_release(&dp->opt_routine);
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++)
        troupe_routine_release(&dp->hyper_copy[j]);
    if (dp->rep) {
        for (int k = 0; k < dp->n; k++) {
            troupe__dp_replica_t *r = &dp->rep[k];
            troupe_routine_release(&r->feed);
            for (size_t g = 0; r->seg && g < dp->nseg; g++)
                troupe_routine_release(&r->seg[g]);
            troupe_free(r->seg);
            for (size_t i = 0; r->merge && i < dp->n_params; i++)
                troupe_routine_release(&r->merge[i]);
            troupe_free(r->merge);
        }
        for (int k = 0; k < dp->n; k++) {
            troupe__dp_replica_t *r = &dp->rep[k];
            for (size_t c = r->nctxs; c-- > 0;) {
                if (troupe_context_finalize(r->ctxs[c]) != TROUPE_OK)
                    TROUPE_LOG(s_teardown_level(r->stream), TROUPE_SUB_PARALLEL,
                               "dp_destroy: finalizing a context of replica %d: %s", k,
                               troupe_last_error());
                troupe_context_release(&r->ctxs[c]);
            }
            troupe_free(r->ctxs);
            troupe_stream_release(&r->stream);
        }
        troupe_free(dp->rep);
    }
    troupe_free(dp->dev_of);
    troupe_code_release(&dp->feed_code);
    for (size_t g = 0; dp->seg_code && g < dp->nseg; g++)
        troupe_code_release(&dp->seg_code[g]);
    troupe_free(dp->seg_code);
    troupe_free(dp->seg_first);
    troupe_free(dp->seg_of_grad);
    troupe_free(dp->seg_bk);
    troupe_code_release(&dp->opt_code);
    troupe_free(dp->fused_side);
    troupe__dp_local_free(&dp->local);
    troupe__dp_accum_free(&dp->accum);
    for (size_t i = 0; dp->merge_code && i < dp->n_params; i++)
        troupe_code_release(&dp->merge_code[i]);
    troupe_free(dp->merge_code);
    for (size_t i = 0; dp->state && i < dp->n_params * (size_t)dp->nstate; i++)
        troupe_tnode_release(&dp->state[i]);
    troupe_free(dp->state);
    troupe__dp_zero_free(&dp->zero);
    for (size_t i = 0; i < dp->ntemps; i++)
        troupe_tnode_release(&dp->temps[i]);
    troupe_free(dp->temps);
    troupe_tnode_release(&dp->hyper);
    for (int j = 0; j < TROUPE__DP_HYPER_STAGES; j++) {
        troupe_code_release(&dp->hyper_copy_code[j]);
        troupe_tnode_release(&dp->hyper_stage[j]);
    }
    for (size_t i = 0; i < dp->n_params; i++) {
        if (dp->params)
            troupe_tnode_release(&dp->params[i]);
        if (dp->grads)
            troupe_tnode_release(&dp->grads[i]);
    }
    troupe_free(dp->params);
    troupe_free(dp->grads);
    troupe_free(dp->grads_by_id);
    troupe_free(dp->bk_first);
    troupe_free(dp->host_t);
    troupe_tnode_release(&dp->loss);
    troupe_free(dp->batch_index);
    troupe_backend_close(&dp->backend);
    troupe_free(dp);
}

troupe_status_t troupe_dp_params_to_host(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_params_to_host: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe_dp_sync(dp));
    for (size_t i = 0; i < dp->n_params; i++) {
        troupe_event_t *ev = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_to_host(troupe__dp_tail(dp, 0), dp->params[i], &ev));
        TROUPE_RETURN_IF_ERROR(troupe__dp_sync_event(&ev, "dp_params_to_host"));
    }
    return TROUPE_OK;
}

troupe_status_t troupe_dp_params_from_host(troupe_dp_t *dp)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_params_from_host: NULL dp");
    TROUPE_RETURN_IF_ERROR(troupe__dp_refuse_if_failed(dp, "dp_params_from_host"));
    for (int k = 0; k < dp->n; k++)
        for (size_t i = 0; i < dp->n_params; i++)
            TROUPE_RETURN_IF_ERROR(troupe_from_host(troupe__dp_tail(dp, k), dp->params[i], NULL));
    return TROUPE_OK;
}

troupe_status_t troupe_dp_set_lr(troupe_dp_t *dp, double lr)
{
    if (!dp)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_set_lr: NULL dp");
    if (!(lr > 0.0) || !isfinite(lr))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "dp_set_lr: learning rate %g must be finite and > 0", lr);
    dp->opt.lr = lr;
    return TROUPE_OK;
}

int troupe_dp_num_streams(const troupe_dp_t *dp)
{
    return dp ? dp->n : 0;
}

int troupe_dp_replica_device(const troupe_dp_t *dp, int k)
{
    return dp && k >= 0 && k < dp->n ? dp->dev_of[k] : -1;
}

bool troupe_dp_staged(const troupe_dp_t *dp)
{
    return dp && troupe__dp_staged(dp);
}

bool troupe_dp_fused_streams(const troupe_dp_t *dp)
{
    return dp != NULL && dp->local != NULL;
}

bool troupe_dp_fused_update(const troupe_dp_t *dp)
{
    return dp && (dp->strat.update == TROUPE__DP_UPDATE_FUSED);
}

int64_t troupe_dp_device_bytes(troupe_dp_t *dp)
{
    int64_t total = 0;
    for (int k = 0; dp != NULL && k < dp->n; k++) {
        bool seen = false;
        for (int j = 0; j < k && !seen; j++)
            seen = dp->dev_of[j] == dp->dev_of[k];
        troupe_device_t *d = NULL;
        int64_t used = 0;
        if (!seen && troupe_get_device(dp->backend, dp->dev_of[k], &d) == TROUPE_OK &&
            troupe_get_used_memory(d, &used) == TROUPE_OK)
            total += used;
    }
    return total;
}

int64_t troupe_dp_steps_done(const troupe_dp_t *dp)
{
    return dp ? dp->steps : 0;
}

troupe_context_t *troupe_dp_owner_context(troupe_dp_t *dp)
{
    return dp ? troupe__dp_tail(dp, 0) : NULL;
}

troupe_backend_t *troupe_dp_backend(troupe_dp_t *dp)
{
    return dp ? dp->backend : NULL;
}
