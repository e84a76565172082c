/* troupe — ranks that disagree (parallel/dp.h, troupe_dp_agree): the run's settings are
 * fingerprinted on every rank and compared across ranks before any work, so that ranks started
 * with different settings fail at once naming the setting and each rank's value, instead of
 * training silently apart or waiting for each other until a deadline.
 *
 * The exchange is one allreduce (MAX) of unsigned 64-bit words over the transport (whose own
 * collective fingerprint then checks that every rank sent as many): per setting slot, the hash
 * h of "name=value" and its complement ~h (max(~h) = ~min(h), so one MAX gives both the largest
 * and the smallest hash: they differ when some rank disagrees), then one slot per rank where
 * that rank writes its number of local replicas (the others 0): every rank learns every rank's
 * replica count. Only when some slot differs does a second allreduce gather the value texts
 * of (at most S_SHOW) differing settings, each rank writing its text in its own row, so that
 * every rank builds the same message. Slots are fixed in number (the library's, one for the
 * program's setting names, TROUPE_DP_MAX_SETTINGS for their values), so ranks whose programs
 * give different numbers of settings still exchange the same words and fail on the names slot.
 */
#include "parallel/dp_impl.h"

#include "base/alloc.h"
#include "base/config.h"
#include "base/strbuf.h"
#include "transport/mpi/cluster.h"
#include "transport/mpi/collective.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Words of one value text in the gathering allreduce (the text is cut to 8 * S_VAL_WORDS - 1
 * bytes for the message; the hash covers all of it). */
#define S_VAL_WORDS 16
#define S_VAL_MAX (8 * S_VAL_WORDS)
/* Differing settings whose values the message shows. */
#define S_SHOW 3

static uint64_t s_hash(const char *name, const char *value)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a 64 */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
    h = (h ^ (unsigned char)'=') * UINT64_C(0x100000001b3);
    for (const char *p = value; *p; p++)
        h = (h ^ (unsigned char)*p) * UINT64_C(0x100000001b3);
    return h;
}

/* Sets every word of data[n] to its maximum over the ranks (host-level allreduce, synced). */
static troupe_status_t s_max(uint64_t *data, int64_t n, const char *name)
{
    troupe_coll_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.count = n;
    t.prec = TROUPE_PREC_UINT64;
    t.name = name;
    troupe_allreduce_args_t ar = {.op = TROUPE_REDUCE_MAX, .n = 1, .tensors = &t};
    troupe_event_t *ev = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_allreduce(&ar, &ev));
    return troupe__dp_sync_event(&ev, "comparing the run's settings across ranks");
}

/* Appends the ranks of `rows` (R of them, words each) whose text equals `text`, as "rank 0" or
 * "ranks 0, 2-5". */
static void s_put_ranks(troupe__strbuf_t *sb, const uint64_t *rows, int nranks, const char *text)
{
    int count = 0;
    for (int r = 0; r < nranks; r++)
        count += strncmp((const char *)(rows + (size_t)r * S_VAL_WORDS), text, S_VAL_MAX) == 0;
    troupe__strbuf_puts(sb, count == 1 ? "rank " : "ranks ");
    bool first = true;
    for (int r = 0; r < nranks; r++) {
        if (strncmp((const char *)(rows + (size_t)r * S_VAL_WORDS), text, S_VAL_MAX) != 0)
            continue;
        int e = r;
        while (e + 1 < nranks &&
               strncmp((const char *)(rows + (size_t)(e + 1) * S_VAL_WORDS), text, S_VAL_MAX) == 0)
            e++;
        troupe__strbuf_printf(sb, e > r ? "%s%d-%d" : "%s%d", first ? "" : ", ", r, e);
        first = false;
        r = e;
    }
}

/* The message for setting `name`: each distinct value (in the order of its first rank) and the
 * ranks that gave it. */
static void s_put_values(troupe__strbuf_t *sb, const char *name, const uint64_t *rows, int nranks)
{
    troupe__strbuf_printf(sb, "%s: ", name);
    int shown = 0;
    for (int r = 0; r < nranks; r++) {
        const char *text = (const char *)(rows + (size_t)r * S_VAL_WORDS);
        bool seen = false;
        for (int q = 0; q < r && !seen; q++)
            seen = strncmp((const char *)(rows + (size_t)q * S_VAL_WORDS), text, S_VAL_MAX) == 0;
        if (seen)
            continue;
        if (shown++ > 0)
            troupe__strbuf_puts(sb, ", ");
        if (shown > 8) {
            troupe__strbuf_puts(sb, "...");
            break;
        }
        troupe__strbuf_printf(sb, "'%.*s' on ", S_VAL_MAX - 1, text);
        s_put_ranks(sb, rows, nranks, text);
    }
}

troupe_status_t troupe__dp_agree(const troupe_dp_setting_t *lib, size_t nlib,
                                 const troupe_dp_setting_t *prog, size_t nprog, int replicas,
                                 const char *what, int64_t *out_total, int64_t *out_offset)
{
    if (nprog > TROUPE_DP_MAX_SETTINGS)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "%s: %zu settings exceed TROUPE_DP_MAX_SETTINGS (%d)", what, nprog,
                             TROUPE_DP_MAX_SETTINGS);
    for (size_t i = 0; i < nprog; i++)
        if (!prog[i].name || !prog[i].name[0] || !prog[i].value)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "%s: setting %zu has no name or a NULL value", what, i);
    int rank = troupe_cluster_rank(), nranks = troupe_cluster_size();
    if (!troupe_cluster_is_distributed()) {
        *out_total = replicas;
        *out_offset = 0;
        return TROUPE_OK;
    }
    TROUPE_RETURN_IF_ERROR(troupe_cluster_status());
    /* slots: the library's settings, the program's setting names, the program's values */
    size_t nslots = nlib + 1 + TROUPE_DP_MAX_SETTINGS;
    size_t nwords = 2 * nslots + (size_t)nranks;
    uint64_t *w = troupe_calloc(nwords, sizeof *w);
    const char **names = troupe_calloc(nslots, sizeof *names);
    const char **values = troupe_calloc(nslots, sizeof *values);
    uint64_t *rows = NULL;
    troupe__strbuf_t names_text = TROUPE__STRBUF_INIT;
    troupe__strbuf_t msg = TROUPE__STRBUF_INIT;
    troupe_status_t st = TROUPE_OK;
    if (!w || !names || !values) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        goto out_free;
    }
    for (size_t i = 0; i < nlib; i++) {
        names[i] = lib[i].name;
        values[i] = lib[i].value;
    }
    for (size_t i = 0; i < nprog; i++)
        troupe__strbuf_printf(&names_text, "%s%s", i ? " " : "", prog[i].name);
    names[nlib] = "the names of the program's settings";
    values[nlib] = troupe__strbuf_cstr(&names_text);
    for (size_t i = 0; i < TROUPE_DP_MAX_SETTINGS; i++) {
        names[nlib + 1 + i] = i < nprog ? prog[i].name : "";
        values[nlib + 1 + i] = i < nprog ? prog[i].value : "";
    }
    if (names_text.failed) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        goto out_free;
    }
    for (size_t s = 0; s < nslots; s++) {
        uint64_t h = s_hash(names[s], values[s]);
        w[s] = h;
        w[nslots + s] = ~h;
    }
    w[2 * nslots + (size_t)rank] = (uint64_t)(replicas > 0 ? replicas : 0);
    st = s_max(w, (int64_t)nwords, "dp settings");
    if (st != TROUPE_OK)
        goto out_free;
    /* the replicas of every rank */
    int64_t total = 0, offset = 0;
    for (int r = 0; r < nranks; r++) {
        uint64_t n = w[2 * nslots + (size_t)r];
        if (r < rank)
            offset += (int64_t)n;
        total += (int64_t)n;
    }
    /* the settings that differ; when the program's setting names differ, the value slots
     * behind them are named differently on different ranks: only the names are shown */
    size_t differ[S_SHOW], ndiffer = 0;
    bool names_differ = w[nlib] != ~w[nslots + nlib];
    for (size_t s = 0; s < nslots; s++) {
        if (w[s] == ~w[nslots + s]) /* max == min: every rank agrees */
            continue;
        if (names_differ && s > nlib)
            continue;
        if (ndiffer < S_SHOW)
            differ[ndiffer++] = s;
        else {
            troupe__strbuf_printf(&msg, "%s%s", msg.len ? ", " : "; also differ: ", names[s]);
        }
    }
    if (ndiffer == 0) {
        *out_total = total;
        *out_offset = offset;
        goto out_free;
    }
    /* gather the values of the differing settings: rank r writes row r */
    size_t per = (size_t)nranks * S_VAL_WORDS;
    rows = troupe_calloc(ndiffer * per, sizeof *rows);
    if (!rows) {
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", what);
        goto out_free;
    }
    for (size_t d = 0; d < ndiffer; d++) {
        char *row = (char *)(rows + d * per + (size_t)rank * S_VAL_WORDS);
        snprintf(row, S_VAL_MAX, "%s", values[differ[d]]);
    }
    st = s_max(rows, (int64_t)(ndiffer * per), "dp setting values");
    if (st != TROUPE_OK)
        goto out_free;
    troupe__strbuf_t head = TROUPE__STRBUF_INIT;
    troupe__strbuf_printf(&head, "%s: the ranks disagree on the run's settings: ", what);
    for (size_t d = 0; d < ndiffer; d++) {
        if (d > 0)
            troupe__strbuf_puts(&head, "; ");
        s_put_values(&head, names[differ[d]], rows + d * per, nranks);
    }
    if (msg.len > 0) /* the names of the differing settings beyond the first S_SHOW */
        troupe__strbuf_puts(&head, troupe__strbuf_cstr(&msg));
    troupe__strbuf_puts(&head, ". Every rank must run with the same settings");
    st = troupe__error(head.failed ? TROUPE_RESOURCE_EXHAUSTED : TROUPE_FAILED_PRECONDITION, "%s",
                       head.failed ? "out of memory" : troupe__strbuf_cstr(&head));
    troupe__strbuf_reset(&head);
out_free:
    troupe__strbuf_reset(&msg);
    troupe__strbuf_reset(&names_text);
    troupe_free(rows);
    troupe_free(values);
    troupe_free(names);
    troupe_free(w);
    return st;
}

troupe_status_t troupe_dp_agree(const troupe_dp_setting_t *settings, size_t n)
{
    if (n > 0 && !settings)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_agree: NULL settings");
    int64_t total = 0, offset = 0;
    return troupe__dp_agree(NULL, 0, settings, n, 1, "dp_agree", &total, &offset);
}

troupe_status_t troupe_dp_replicas(int streams, int64_t *out_total, int64_t *out_offset)
{
    if (!out_total || !out_offset)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_replicas: NULL output");
    if (streams <= 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_replicas: streams = %d must be > 0",
                             streams);
    return troupe__dp_agree(NULL, 0, NULL, 0, streams, "dp_replicas", out_total, out_offset);
}

/* ---- the data-parallel configuration at troupe_dp_new ------------------------------------- */

/* The shortest %g form of v that reads back as v. */
static void s_num(char *buf, size_t cap, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* "label prec dims" of each node, ", "-separated, after their count. */
static void s_nodes(troupe__strbuf_t *sb, troupe_tnode_t *const *nodes, size_t n)
{
    troupe__strbuf_printf(sb, "%zu:", n);
    for (size_t i = 0; i < n; i++) {
        char label[96], dims[96];
        troupe_tnode_label_string(nodes[i], label, sizeof label);
        troupe_tnode_dims_to_string(nodes[i], false, dims, sizeof dims);
        troupe__strbuf_printf(sb, "%s %s %s %s", i ? "," : "", label,
                              troupe_prec_name(nodes[i]->prec), dims);
    }
}

troupe_status_t troupe__dp_agree_config(troupe_dp_t *dp, const troupe_dp_config_t *cfg,
                                        const troupe_dp_model_t *m)
{
    if (dp->local_only) {
        dp->replicas = dp->n;
        dp->replica_offset = 0;
        return TROUPE_OK;
    }
    enum {
        S_PARAMS,
        S_INPUTS,
        S_NB,
        S_FORM,
        S_KIND,
        S_LR,
        S_MOM,
        S_WD,
        S_B1,
        S_B2,
        S_EPS,
        S_BF16,
        S_ACCUM,
        S_UPDATE,
        S_CLIP,
        S_PREC,
        S_LS,
        S_FUSED_ENV,
        S_N
    };
    char num[S_N][40];
    troupe__strbuf_t params = TROUPE__STRBUF_INIT, inputs = TROUPE__STRBUF_INIT;
    s_nodes(&params, m->params, m->n_params);
    s_nodes(&inputs, m->inputs, m->n_inputs);
    const troupe_optimizer_t *o = &cfg->optimizer;
    bool sgd = o->kind == TROUPE_OPT_SGD;
    snprintf(num[S_NB], sizeof num[S_NB], "%" PRId64, m->num_batches);
    /* the form: which comp's static index selects the minibatch (parallel/dp.h, feed_comp) */
    char form[160];
    snprintf(form, sizeof form, "%s by '%.120s'", m->feed_comp ? "fed" : "indexed", m->batch_index);
    s_num(num[S_LR], sizeof num[S_LR], o->lr);
    s_num(num[S_MOM], sizeof num[S_MOM], o->momentum);
    s_num(num[S_WD], sizeof num[S_WD], o->weight_decay);
    s_num(num[S_B1], sizeof num[S_B1], o->beta1);
    s_num(num[S_B2], sizeof num[S_B2], o->beta2);
    s_num(num[S_EPS], sizeof num[S_EPS], o->eps);
    snprintf(num[S_ACCUM], sizeof num[S_ACCUM], "%d", cfg->grad_accum > 0 ? cfg->grad_accum : 1);
    s_num(num[S_CLIP], sizeof num[S_CLIP], cfg->grad_clip);
    /* loss scaling as given (0 is the default; troupe__dp_loss_scale_config checks them) */
    char ls[160];
    snprintf(ls, sizeof ls, "%d init=%.17g growth=%.17g backoff=%.17g interval=%lld",
             (int)cfg->loss_scaling, cfg->loss_scale_init, cfg->loss_scale_growth,
             cfg->loss_scale_backoff, (long long)cfg->loss_scale_interval);
    /* the fields of troupe_dp_model_t and troupe_dp_config_t that decide the results; an
     * optimizer's field the other optimizer ignores reads "-". Streams per rank are not among
     * them: ranks may run different numbers of replicas (dp.h, Ranks that disagree). */
    troupe_dp_setting_t lib[S_N] = {
        [S_PARAMS] = {"parameters", troupe__strbuf_cstr(&params)},
        [S_INPUTS] = {"inputs", troupe__strbuf_cstr(&inputs)},
        [S_NB] = {"num_batches", num[S_NB]},
        [S_FORM] = {"minibatch form", form},
        [S_KIND] = {"optimizer", troupe_optimizer_name(o->kind)},
        [S_LR] = {"optimizer.lr", num[S_LR]},
        [S_MOM] = {"optimizer.momentum", sgd ? num[S_MOM] : "-"},
        [S_WD] = {"optimizer.weight_decay", num[S_WD]},
        [S_B1] = {"optimizer.beta1", sgd ? "-" : num[S_B1]},
        [S_B2] = {"optimizer.beta2", sgd ? "-" : num[S_B2]},
        [S_EPS] = {"optimizer.eps", sgd ? "-" : num[S_EPS]},
        [S_BF16] = {"compress_bf16", cfg->compress_bf16 ? "true" : "false"},
        [S_ACCUM] = {"grad_accum", num[S_ACCUM]},
        [S_UPDATE] = {"update", troupe_dp_update_name(cfg->update)},
        [S_CLIP] = {"grad_clip", num[S_CLIP]},
        [S_PREC] = {"precision", troupe_dp_precision_name(cfg->precision)},
        [S_LS] = {"loss_scaling", ls},
        /* read per process from the environment, but it decides the update's form (and so
         * the sharded state's layout): every rank must have the same */
        [S_FUSED_ENV] = {"TROUPE_DP_FUSED_UPDATE", troupe_config_dp_fused_update() ? "auto" : "off"},
    };
    troupe_status_t st = TROUPE_OK;
    if (params.failed || inputs.failed)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "dp_new: out of memory");
    int64_t total = 0, offset = 0;
    if (st == TROUPE_OK)
        st = troupe__dp_agree(lib, S_N, cfg->settings, cfg->n_settings, dp->n, "dp_new", &total,
                              &offset);
    troupe__strbuf_reset(&params);
    troupe__strbuf_reset(&inputs);
    if (st == TROUPE_OK) {
        dp->replicas = total;
        dp->replica_offset = offset;
    }
    return st;
}
