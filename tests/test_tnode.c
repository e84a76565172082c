/* Tests for ir/tnode: registry, creation checks, the memory-mode lattice of OCANNL_NOTES §5.2,
 * sharing updates, default_to_most_local and the force/known predicates, host values with
 * precision conversion and hooks, points, text forms, concurrent creation. */
#define _POSIX_C_SOURCE 200809L
#include "base/config.h"
#include "base/status.h"
#include "ir/tnode.h"
#include "ir/tnode_impl.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static troupe_memory_mode_t MM(troupe_memory_mode_kind_t k, troupe_memory_type_t t,
                               troupe_sharing_t s)
{
    troupe_memory_mode_t m = {k, t, s};
    return m;
}

#define M_EC MM(TROUPE_MM_EFFECTIVELY_CONSTANT, 0, 0)
#define M_VIRT MM(TROUPE_MM_VIRTUAL, 0, 0)
#define M_NV MM(TROUPE_MM_NEVER_VIRTUAL, 0, 0)
#define M_LOCAL MM(TROUPE_MM_LOCAL, 0, 0)
#define M_DEV MM(TROUPE_MM_DEVICE_ONLY, 0, 0)
#define M_ONDEV(s) MM(TROUPE_MM_ON_DEVICE, 0, TROUPE_SHARING_##s)
#define M_MAT MM(TROUPE_MM_MATERIALIZED, 0, 0)
#define M_HOST(t) MM(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_##t, 0)
#define M_COD(s) MM(TROUPE_MM_HOSTED, TROUPE_MEMTYPE_CHANGED_ON_DEVICES, TROUPE_SHARING_##s)

static troupe_tnode_t *s_new(const char *label, troupe_prec_t prec, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    const char *labels[1] = {label};
    troupe_status_t st =
        troupe_tnode_new(label ? labels : NULL, label ? 1 : 0, prec, ndims, dims, NULL, 0.0, &tn);
    cr_assert_eq(st, TROUPE_OK, "troupe_tnode_new: %s", troupe_last_error());
    cr_assert_not_null(tn);
    return tn;
}

static troupe_tnode_t *s_new23(troupe_prec_t prec)
{
    static const int64_t dims[2] = {2, 3};
    return s_new("w1", prec, 2, dims);
}

static void s_mode_str(troupe_memory_mode_t m, char *buf, size_t cap)
{
    troupe_memory_mode_to_string(m, buf, cap);
}

static bool s_mode_eq(troupe_memory_mode_t a, troupe_memory_mode_t b)
{
    return a.kind == b.kind && a.memtype == b.memtype && a.sharing == b.sharing;
}

static void s_expect_mode(troupe_tnode_t *tn, troupe_memory_mode_t want, int32_t want_prov,
                          const char *ctx)
{
    troupe_memory_mode_t got;
    int32_t prov = -1;
    cr_assert(troupe_tnode_get_memory_mode(tn, &got, &prov), "%s: mode unset", ctx);
    char g[96], w[96];
    s_mode_str(got, g, sizeof g);
    s_mode_str(want, w, sizeof w);
    cr_assert(s_mode_eq(got, want), "%s: mode %s, want %s", ctx, g, w);
    cr_assert_eq(prov, want_prov, "%s: provenance %d, want %d", ctx, (int)prov, (int)want_prov);
}

static void s_set_mode(troupe_tnode_t *tn, troupe_memory_mode_t m, int32_t prov)
{
    troupe_status_t st = troupe_tnode_update_memory_mode(tn, m, prov);
    cr_assert_eq(st, TROUPE_OK, "initial mode: %s", troupe_last_error());
}

/* ---- registry ------------------------------------------------------------------------------ */

Test(tnode_registry, find_returns_a_new_reference)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    int32_t id = tn->id;
    troupe_tnode_t *found = NULL;
    cr_assert_eq(troupe_tnode_find(id, &found), TROUPE_OK);
    cr_assert_eq(found, tn);
    troupe_tnode_release(&tn);
    cr_assert_null(tn);
    /* The found reference keeps the node alive and registered. */
    troupe_tnode_t *again = NULL;
    cr_assert_eq(troupe_tnode_find(id, &again), TROUPE_OK);
    cr_assert_eq(again, found);
    troupe_tnode_release(&again);
    troupe_tnode_release(&found);
}

Test(tnode_registry, ids_are_unique_and_positive)
{
    troupe_tnode_t *a = s_new23(TROUPE_PREC_SINGLE);
    troupe_tnode_t *b = s_new23(TROUPE_PREC_SINGLE);
    troupe_tnode_t *c = s_new23(TROUPE_PREC_SINGLE);
    cr_assert_gt(a->id, 0);
    cr_assert_neq(a->id, b->id);
    cr_assert_neq(b->id, c->id);
    cr_assert_neq(a->id, c->id);
    troupe_tnode_release(&a);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
}

Test(tnode_registry, last_release_removes_from_registry)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    int32_t id = tn->id;
    troupe_tnode_retain(tn);
    troupe_tnode_t *second = tn;
    troupe_tnode_release(&tn);
    troupe_tnode_t *found = NULL;
    cr_assert_eq(troupe_tnode_find(id, &found), TROUPE_OK, "still referenced");
    troupe_tnode_release(&found);
    troupe_tnode_release(&second);
    cr_assert_eq(troupe_tnode_find(id, &found), TROUPE_NOT_FOUND);
    cr_assert_null(found);
    char want[32];
    snprintf(want, sizeof want, "%d", (int)id);
    cr_assert(strstr(troupe_last_error(), want), "message names the id: %s", troupe_last_error());
    troupe_tnode_release(&second); /* NULL: no-op */
    troupe_tnode_release(NULL);
}

Test(tnode_registry, new_with_id_collision_is_already_exists)
{
    int64_t dims[1] = {4};
    troupe_tnode_t *a = NULL, *b = NULL;
    cr_assert_eq(
        troupe_tnode_new_with_id(1000, NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &a),
        TROUPE_OK);
    cr_assert_eq(a->id, 1000);
    cr_assert_eq(
        troupe_tnode_new_with_id(1000, NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &b),
        TROUPE_ALREADY_EXISTS);
    cr_assert_null(b);
    cr_assert(strstr(troupe_last_error(), "1000"), "%s", troupe_last_error());
    /* Fresh ids continue above the largest id seen. */
    troupe_tnode_t *c = s_new23(TROUPE_PREC_SINGLE);
    cr_assert_gt(c->id, 1000);
    /* Once released, the id can be used again. */
    troupe_tnode_release(&a);
    cr_assert_eq(
        troupe_tnode_new_with_id(1000, NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &b),
        TROUPE_OK);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
}

Test(tnode_registry, new_with_id_rejects_nonpositive_id)
{
    int64_t dims[1] = {4};
    troupe_tnode_t *a = NULL;
    cr_assert_eq(troupe_tnode_new_with_id(0, NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &a),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(troupe_tnode_new_with_id(-5, NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &a),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_null(a);
}

Test(tnode_registry, find_of_unknown_id_is_not_found)
{
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_find(987654, &tn), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "987654"));
}

#define N_THREADS 4
#define N_PER_THREAD 250

typedef struct s_create_arg {
    int32_t ids[N_PER_THREAD];
    troupe_tnode_t *nodes[N_PER_THREAD];
    int failures;
} s_create_arg_t;

static void *s_create_thread(void *p)
{
    s_create_arg_t *a = p;
    int64_t dims[1] = {3};
    for (int i = 0; i < N_PER_THREAD; i++) {
        if (troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &a->nodes[i]) !=
            TROUPE_OK) {
            a->failures++;
            continue;
        }
        a->ids[i] = a->nodes[i]->id;
    }
    return NULL;
}

static int s_cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

Test(tnode_registry, concurrent_creation_gives_unique_findable_ids)
{
    static s_create_arg_t args[N_THREADS];
    pthread_t th[N_THREADS];
    memset(args, 0, sizeof args);
    for (int t = 0; t < N_THREADS; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, s_create_thread, &args[t]), 0);
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    static int32_t all[N_THREADS * N_PER_THREAD];
    size_t n = 0;
    for (int t = 0; t < N_THREADS; t++) {
        cr_assert_eq(args[t].failures, 0);
        for (int i = 0; i < N_PER_THREAD; i++)
            all[n++] = args[t].ids[i];
    }
    qsort(all, n, sizeof all[0], s_cmp_i32);
    for (size_t i = 1; i < n; i++)
        cr_assert_neq(all[i], all[i - 1], "duplicate id %d", (int)all[i]);
    for (int t = 0; t < N_THREADS; t++)
        for (int i = 0; i < N_PER_THREAD; i++) {
            troupe_tnode_t *f = NULL;
            cr_assert_eq(troupe_tnode_find(args[t].ids[i], &f), TROUPE_OK);
            cr_assert_eq(f, args[t].nodes[i]);
            troupe_tnode_release(&f);
            troupe_tnode_release(&args[t].nodes[i]);
        }
}

/* Finders race with creators/releasers: a find either fails or returns the live node with
 * that id, never a node being destroyed. */
static void *s_churn_thread(void *p)
{
    (void)p;
    int64_t dims[1] = {2};
    for (int i = 0; i < 2000; i++) {
        troupe_tnode_t *tn = NULL;
        if (troupe_tnode_new(NULL, 0, TROUPE_PREC_SINGLE, 1, dims, NULL, 0.0, &tn) == TROUPE_OK)
            troupe_tnode_release(&tn);
    }
    return NULL;
}

static void *s_find_thread(void *p)
{
    int *bad = p;
    for (int i = 0; i < 20000; i++) {
        troupe_tnode_t *tn = NULL;
        int32_t id = 1 + (int32_t)(i % 4000);
        if (troupe_tnode_find(id, &tn) == TROUPE_OK) {
            if (tn->id != id || troupe_refcount_get(&tn->refs) < 1)
                (*bad)++;
            troupe_tnode_release(&tn);
        }
    }
    return NULL;
}

Test(tnode_registry, find_races_with_last_release_safely)
{
    pthread_t th[4];
    int bad[2] = {0, 0};
    pthread_create(&th[0], NULL, s_churn_thread, NULL);
    pthread_create(&th[1], NULL, s_churn_thread, NULL);
    pthread_create(&th[2], NULL, s_find_thread, &bad[0]);
    pthread_create(&th[3], NULL, s_find_thread, &bad[1]);
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    cr_assert_eq(bad[0] + bad[1], 0);
}

/* ---- creation checks ---------------------------------------------------------------------- */

static troupe_status_t s_try_new(troupe_prec_t prec, int ndims, const int64_t *dims,
                                 const troupe_axis_padding_t *pad)
{
    troupe_tnode_t *tn = (troupe_tnode_t *)(uintptr_t)1;
    troupe_status_t st = troupe_tnode_new(NULL, 0, prec, ndims, dims, pad, 0.0, &tn);
    if (st == TROUPE_OK)
        troupe_tnode_release(&tn);
    else
        cr_assert_null(tn, "out is NULL on failure");
    return st;
}

Test(tnode_new, nonpositive_dim_is_rejected_naming_the_axis)
{
    int64_t dims[3] = {2, 0, 4};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 3, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 1: dim 0 must be positive"), "%s",
              troupe_last_error());
    int64_t neg[1] = {-3};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 1, neg, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 0: dim -3"), "%s", troupe_last_error());
}

Test(tnode_new, bad_precision_is_rejected)
{
    int64_t dims[1] = {2};
    cr_assert_eq(s_try_new(TROUPE_PREC_VOID, 1, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "void"), "%s", troupe_last_error());
    cr_assert_eq(s_try_new((troupe_prec_t)99, 1, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "99"), "%s", troupe_last_error());
}

Test(tnode_new, ndims_out_of_range_is_rejected)
{
    int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 9, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, -1, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 8, dims, NULL), TROUPE_OK);
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 0, NULL, NULL), TROUPE_OK, "scalar");
}

Test(tnode_new, bad_padding_is_rejected_naming_the_axis)
{
    int64_t dims[2] = {4, 5};
    troupe_axis_padding_t neg[2] = {{0, 0}, {-1, 1}};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 2, dims, neg), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 1: padding"), "%s", troupe_last_error());
    troupe_axis_padding_t big[2] = {{2, 2}, {0, 0}};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 2, dims, big), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 0: padding 2+2"), "%s", troupe_last_error());
    troupe_axis_padding_t ok[2] = {{1, 2}, {0, 4}};
    cr_assert_eq(s_try_new(TROUPE_PREC_SINGLE, 2, dims, ok), TROUPE_OK);
}

Test(tnode_new, size_overflow_is_rejected)
{
    int64_t dims[3] = {INT64_C(1) << 30, INT64_C(1) << 30, INT64_C(1) << 30};
    cr_assert_eq(s_try_new(TROUPE_PREC_DOUBLE, 3, dims, NULL), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis"), "%s", troupe_last_error());
}

Test(tnode_new, fields_labels_and_padding_are_stored)
{
    const char *labels[2] = {"w1", "grad"};
    int64_t dims[2] = {6, 5};
    troupe_axis_padding_t pad[2] = {{1, 1}, {0, 2}};
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(labels, 2, TROUPE_PREC_HALF, 2, dims, pad, -1.5, &tn), TROUPE_OK);
    cr_assert_eq(tn->label_count, 2);
    cr_assert_neq((const void *)tn->label[0], (const void *)labels[0], "copied");
    cr_assert_str_eq(tn->label[1], "grad");
    cr_assert_eq(troupe_tnode_num_elems(tn), 30);
    cr_assert_eq(tn->size_bytes, 60);
    cr_assert(tn->has_padding);
    cr_assert_eq(tn->padding_value, -1.5);
    int64_t wo[TROUPE_MAX_DIMS];
    troupe_tnode_dims_without_padding(tn, wo);
    cr_assert_eq(wo[0], 4);
    cr_assert_eq(wo[1], 3);
    cr_assert_not(troupe_tnode_get_memory_mode(tn, NULL, NULL), "mode starts unset");
    troupe_tnode_release(&tn);
}

/* ---- update_memory_mode: the lattice ----------------------------------------------------- */

typedef struct s_rule {
    const char *name;
    bool has_from;
    troupe_memory_mode_t from;
    int32_t from_prov;
    troupe_memory_mode_t req;
    int32_t prov;
    bool ok;
    troupe_memory_mode_t want; /* when ok */
    int32_t want_prov;
    const char *reason; /* when !ok: a piece of the message */
} s_rule_t;

static void s_run_rules(const s_rule_t *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const s_rule_t *r = &rules[i];
        troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
        if (r->has_from)
            s_set_mode(tn, r->from, r->from_prov);
        troupe_clear_error();
        troupe_status_t st = troupe_tnode_update_memory_mode(tn, r->req, r->prov);
        if (r->ok) {
            cr_assert_eq(st, TROUPE_OK, "%s: %s", r->name, troupe_last_error());
            s_expect_mode(tn, r->want, r->want_prov, r->name);
        } else {
            cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s: status %d", r->name, (int)st);
            const char *msg = troupe_last_error();
            char name[64], from[96], req[96], p1[128], p2[32];
            troupe_tnode_debug_name(tn, name, sizeof name);
            s_mode_str(r->from, from, sizeof from);
            s_mode_str(r->req, req, sizeof req);
            snprintf(p1, sizeof p1, "%s/%d", from, (int)r->from_prov);
            snprintf(p2, sizeof p2, "/%d", (int)r->prov);
            cr_assert(strstr(msg, name), "%s: node named: %s", r->name, msg);
            cr_assert(strstr(msg, p1), "%s: current mode/provenance: %s", r->name, msg);
            cr_assert(strstr(msg, req), "%s: requested mode: %s", r->name, msg);
            cr_assert(strstr(msg, p2), "%s: requested provenance: %s", r->name, msg);
            if (r->reason)
                cr_assert(strstr(msg, r->reason), "%s: reason: %s", r->name, msg);
            s_expect_mode(tn, r->from, r->from_prov, r->name); /* unchanged */
        }
        troupe_tnode_release(&tn);
    }
}

#define OK_RULE(nm, f, fp, rq, p, w, wp)                                                           \
    {                                                                                              \
        nm, true, f, fp, rq, p, true, w, wp, NULL                                                  \
    }
#define BAD_RULE(nm, f, fp, rq, p, why)                                                            \
    {                                                                                              \
        nm, true, f, fp, rq, p, false, f, 0, why                                                   \
    }

Test(tnode_mode, unset_takes_any_mode_and_equal_is_noop)
{
    s_rule_t rules[] = {
        {"unset->Virtual", false, M_VIRT, 0, M_VIRT, 29, true, M_VIRT, 29, NULL},
        {"unset->Hosted(COD Per)", false, M_VIRT, 0, M_COD(PER_STREAM), 410, true,
         M_COD(PER_STREAM), 410, NULL},
        OK_RULE("equal Virtual", M_VIRT, 29, M_VIRT, 40, M_VIRT, 29),
        OK_RULE("equal On_device(Shared)", M_ONDEV(SHARED_CROSS_STREAMS), 39,
                M_ONDEV(SHARED_CROSS_STREAMS), 7, M_ONDEV(SHARED_CROSS_STREAMS), 39),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, virtual_vs_never_virtual_are_errors)
{
    s_rule_t rules[] = {
        BAD_RULE("Never_virtual then Virtual", M_NV, 26, M_VIRT, 29, "cannot be virtual"),
        BAD_RULE("Virtual then Never_virtual", M_VIRT, 152, M_NV, 17, "already virtual"),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, effectively_constant_rules)
{
    s_rule_t rules[] = {
        OK_RULE("Virtual + EC", M_VIRT, 40, M_EC, 24, M_VIRT, 40),
        OK_RULE("Hosted Constant + EC", M_HOST(CONSTANT), 412, M_EC, 24, M_HOST(CONSTANT), 412),
        OK_RULE("Never_virtual + EC", M_NV, 26, M_EC, 24, M_HOST(CONSTANT), 24),
        OK_RULE("Materialized + EC", M_MAT, 28, M_EC, 24, M_HOST(CONSTANT), 24),
        OK_RULE("EC + Never_virtual", M_EC, 24, M_NV, 26, M_HOST(CONSTANT), 26),
        OK_RULE("EC + Materialized", M_EC, 24, M_MAT, 28, M_HOST(CONSTANT), 28),
        OK_RULE("EC + Hosted Constant", M_EC, 24, M_HOST(CONSTANT), 412, M_HOST(CONSTANT), 412),
        OK_RULE("EC + Virtual", M_EC, 24, M_VIRT, 40, M_VIRT, 40),
        OK_RULE("Hosted Unset_hosted + EC chains", M_HOST(UNSET_HOSTED), 37, M_EC, 24,
                M_HOST(CONSTANT), 37024),
        OK_RULE("EC + Hosted Unset_hosted chains", M_EC, 24, M_HOST(UNSET_HOSTED), 37,
                M_HOST(CONSTANT), 24037),
        BAD_RULE("EC + Local", M_EC, 24, M_LOCAL, 333, "inconsistent"),
        BAD_RULE("EC + Hosted Nonconstant", M_EC, 24, M_HOST(NONCONSTANT), 411, "inconsistent"),
        BAD_RULE("Hosted Nonconstant + EC", M_HOST(NONCONSTANT), 411, M_EC, 24, "inconsistent"),
        BAD_RULE("Local + EC", M_LOCAL, 333, M_EC, 24, "inconsistent"),
        BAD_RULE("On_device + EC", M_ONDEV(PER_STREAM), 410, M_EC, 24, "inconsistent"),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, hosted_memory_type_rules)
{
    s_rule_t rules[] = {
        OK_RULE("Nonconstant + COD Per", M_HOST(NONCONSTANT), 24, M_COD(PER_STREAM), 410,
                M_COD(PER_STREAM), 410),
        OK_RULE("Nonconstant + Volatile", M_HOST(NONCONSTANT), 24, M_HOST(VOLATILE), 27,
                M_HOST(VOLATILE), 27),
        OK_RULE("Unset_hosted + COD Shared", M_HOST(UNSET_HOSTED), 37, M_COD(SHARED_CROSS_STREAMS),
                39, M_COD(SHARED_CROSS_STREAMS), 39),
        OK_RULE("Unset_hosted + Volatile", M_HOST(UNSET_HOSTED), 37, M_HOST(VOLATILE), 27,
                M_HOST(VOLATILE), 27),
        OK_RULE("COD Unset + COD Per", M_COD(UNSET), 411, M_COD(PER_STREAM), 410, M_COD(PER_STREAM),
                410),
        OK_RULE("COD Unset + Volatile", M_COD(UNSET), 411, M_HOST(VOLATILE), 27, M_HOST(VOLATILE),
                27),
        OK_RULE("Unset_hosted + Constant", M_HOST(UNSET_HOSTED), 37, M_HOST(CONSTANT), 412,
                M_HOST(CONSTANT), 412),
        OK_RULE("Unset_hosted + Nonconstant", M_HOST(UNSET_HOSTED), 37, M_HOST(NONCONSTANT), 24,
                M_HOST(NONCONSTANT), 24),
        OK_RULE("COD Per + Nonconstant", M_COD(PER_STREAM), 410, M_HOST(NONCONSTANT), 24,
                M_COD(PER_STREAM), 410),
        OK_RULE("Volatile + Nonconstant", M_HOST(VOLATILE), 27, M_HOST(NONCONSTANT), 24,
                M_HOST(VOLATILE), 27),
        OK_RULE("Constant + Unset_hosted", M_HOST(CONSTANT), 412, M_HOST(UNSET_HOSTED), 37,
                M_HOST(CONSTANT), 412),
        OK_RULE("COD Per + COD Unset", M_COD(PER_STREAM), 410, M_COD(UNSET), 411, M_COD(PER_STREAM),
                410),
        BAD_RULE("Constant + Nonconstant", M_HOST(CONSTANT), 412, M_HOST(NONCONSTANT), 24,
                 "inconsistent"),
        BAD_RULE("Volatile + COD Per", M_HOST(VOLATILE), 27, M_COD(PER_STREAM), 410,
                 "inconsistent"),
        BAD_RULE("COD Per + COD Shared", M_COD(PER_STREAM), 410, M_COD(SHARED_CROSS_STREAMS), 39,
                 "inconsistent"),
        BAD_RULE("Nonconstant + Constant", M_HOST(NONCONSTANT), 24, M_HOST(CONSTANT), 412,
                 "inconsistent"),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, placeholder_rules)
{
    s_rule_t rules[] = {
        OK_RULE("Never_virtual + Local", M_NV, 26, M_LOCAL, 333, M_LOCAL, 333),
        OK_RULE("Never_virtual + Hosted Nonconstant", M_NV, 26, M_HOST(NONCONSTANT), 24,
                M_HOST(NONCONSTANT), 24),
        OK_RULE("Never_virtual + Device_only", M_NV, 26, M_DEV, 8, M_DEV, 8),
        OK_RULE("Never_virtual + Materialized", M_NV, 26, M_MAT, 28, M_MAT, 28),
        OK_RULE("Local + Never_virtual", M_LOCAL, 333, M_NV, 17, M_LOCAL, 333),
        OK_RULE("Hosted + Never_virtual", M_HOST(NONCONSTANT), 24, M_NV, 17, M_HOST(NONCONSTANT),
                24),
        OK_RULE("Device_only + Local", M_DEV, 8, M_LOCAL, 333, M_LOCAL, 333),
        OK_RULE("Device_only + On_device Per", M_DEV, 8, M_ONDEV(PER_STREAM), 410,
                M_ONDEV(PER_STREAM), 410),
        OK_RULE("Materialized + On_device Shared", M_MAT, 35, M_ONDEV(SHARED_CROSS_STREAMS), 39,
                M_ONDEV(SHARED_CROSS_STREAMS), 39),
        OK_RULE("Materialized + Hosted Volatile", M_MAT, 35, M_HOST(VOLATILE), 27, M_HOST(VOLATILE),
                27),
        OK_RULE("Local + Device_only", M_LOCAL, 333, M_DEV, 8, M_LOCAL, 333),
        OK_RULE("On_device + Device_only", M_ONDEV(PER_STREAM), 410, M_DEV, 8, M_ONDEV(PER_STREAM),
                410),
        OK_RULE("On_device + Materialized", M_ONDEV(UNSET), 333, M_MAT, 35, M_ONDEV(UNSET), 333),
        OK_RULE("Hosted + Materialized", M_HOST(CONSTANT), 412, M_MAT, 35, M_HOST(CONSTANT), 412),
        OK_RULE("Device_only meet Materialized", M_DEV, 8, M_MAT, 36, M_ONDEV(UNSET), 36),
        OK_RULE("Materialized meet Device_only", M_MAT, 36, M_DEV, 8, M_ONDEV(UNSET), 8),
        OK_RULE("On_device Unset + On_device Per", M_ONDEV(UNSET), 333, M_ONDEV(PER_STREAM), 410,
                M_ONDEV(PER_STREAM), 410),
        OK_RULE("On_device Per + On_device Unset", M_ONDEV(PER_STREAM), 410, M_ONDEV(UNSET), 333,
                M_ONDEV(PER_STREAM), 410),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, inconsistent_updates_fail_with_both_provenances)
{
    s_rule_t rules[] = {
        BAD_RULE("Virtual + Hosted Constant", M_VIRT, 29, M_HOST(CONSTANT), 24, "inconsistent"),
        BAD_RULE("Virtual + Local", M_VIRT, 29, M_LOCAL, 333, "inconsistent"),
        BAD_RULE("Local + On_device", M_LOCAL, 333, M_ONDEV(PER_STREAM), 410, "inconsistent"),
        BAD_RULE("On_device Per + On_device Shared", M_ONDEV(PER_STREAM), 410,
                 M_ONDEV(SHARED_CROSS_STREAMS), 39, "inconsistent"),
        BAD_RULE("Device_only + Hosted", M_DEV, 8, M_HOST(NONCONSTANT), 24, "inconsistent"),
        BAD_RULE("Materialized + Local", M_MAT, 35, M_LOCAL, 333, "inconsistent"),
        BAD_RULE("On_device + Hosted", M_ONDEV(PER_STREAM), 410, M_HOST(NONCONSTANT), 24,
                 "inconsistent"),
        BAD_RULE("Hosted + Local", M_HOST(VOLATILE), 27, M_LOCAL, 333, "inconsistent"),
        BAD_RULE("Hosted + Device_only", M_HOST(VOLATILE), 27, M_DEV, 8, "inconsistent"),
    };
    s_run_rules(rules, sizeof rules / sizeof rules[0]);
}

Test(tnode_mode, message_has_the_documented_shape)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(tn, M_VIRT, 29);
    cr_assert_eq(troupe_tnode_update_memory_mode(tn, M_HOST(CONSTANT), 24),
                 TROUPE_FAILED_PRECONDITION);
    char want[128];
    snprintf(want, sizeof want, "n%d_w1: memory mode Virtual/29 cannot become Hosted(Constant)/24",
             (int)tn->id);
    cr_assert(strstr(troupe_last_error(), want), "%s", troupe_last_error());
    troupe_tnode_release(&tn);
}

/* Reading a node that lives only on the devices says what to do about it. */
Test(tnode_mode, host_read_of_a_device_node_says_what_to_do)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(tn, M_ONDEV(PER_STREAM), 410);
    double v[6];
    cr_assert_eq(troupe_tnode_get_values(tn, v, 6), TROUPE_FAILED_PRECONDITION);
    const char *m = troupe_last_error();
    cr_assert(strstr(m, "On_device(Per_stream)/410 cannot become Hosted(Unset_hosted)/30"), "%s",
              m);
    cr_assert(strstr(m, "; the host reads only hosted nodes: make it hosted before compiling the "
                        "code that writes it (troupe_tnode_update_memory_mode with "
                        "TROUPE_MM_HOSTED), or copy it into a hosted node (troupe_asgn_copy) and "
                        "read that one after troupe_to_host"),
              "%s", m);
    troupe_tnode_release(&tn);
}

Test(tnode_mode, invalid_mode_is_invalid_argument)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    cr_assert_eq(troupe_tnode_update_memory_mode(tn, MM((troupe_memory_mode_kind_t)42, 0, 0), 1),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(
        troupe_tnode_update_memory_mode(tn, MM(TROUPE_MM_HOSTED, (troupe_memory_type_t)9, 0), 1),
        TROUPE_INVALID_ARGUMENT);
    cr_assert_not(troupe_tnode_get_memory_mode(tn, NULL, NULL));
    /* Fields a kind ignores are normalised away. */
    cr_assert_eq(
        troupe_tnode_update_memory_mode(
            tn, MM(TROUPE_MM_VIRTUAL, TROUPE_MEMTYPE_VOLATILE, TROUPE_SHARING_PER_STREAM), 3),
        TROUPE_OK);
    s_expect_mode(tn, M_VIRT, 3, "normalised");
    troupe_tnode_release(&tn);
}

/* ---- update_memory_sharing ----------------------------------------------------------------- */

typedef struct s_srule {
    const char *name;
    bool has_from;
    troupe_memory_mode_t from;
    int32_t from_prov;
    troupe_sharing_t sharing;
    int32_t prov;
    bool ok;
    troupe_memory_mode_t want;
    int32_t want_prov;
    const char *reason;
} s_srule_t;

#define SH(x) TROUPE_SHARING_##x
#define OK_S(nm, f, fp, s, p, w, wp)                                                               \
    {                                                                                              \
        nm, true, f, fp, SH(s), p, true, w, wp, NULL                                               \
    }
#define BAD_S(nm, f, fp, s, p, why)                                                                \
    {                                                                                              \
        nm, true, f, fp, SH(s), p, false, f, 0, why                                                \
    }

Test(tnode_sharing, sharing_rules)
{
    s_srule_t rules[] = {
        {"unset + Per", false, M_VIRT, 0, SH(PER_STREAM), 410, true, M_ONDEV(PER_STREAM), 410,
         NULL},
        OK_S("On_device Shared + Shared", M_ONDEV(SHARED_CROSS_STREAMS), 39, SHARED_CROSS_STREAMS,
             40, M_ONDEV(SHARED_CROSS_STREAMS), 39),
        OK_S("On_device Per + Per", M_ONDEV(PER_STREAM), 410, PER_STREAM, 5, M_ONDEV(PER_STREAM),
             410),
        OK_S("On_device Unset + Shared", M_ONDEV(UNSET), 333, SHARED_CROSS_STREAMS, 39,
             M_ONDEV(SHARED_CROSS_STREAMS), 39),
        OK_S("Device_only + Per", M_DEV, 8, PER_STREAM, 410, M_ONDEV(PER_STREAM), 410),
        OK_S("Materialized + Shared", M_MAT, 35, SHARED_CROSS_STREAMS, 39,
             M_ONDEV(SHARED_CROSS_STREAMS), 39),
        OK_S("COD Shared + Shared", M_COD(SHARED_CROSS_STREAMS), 39, SHARED_CROSS_STREAMS, 40,
             M_COD(SHARED_CROSS_STREAMS), 39),
        OK_S("COD Per + Per", M_COD(PER_STREAM), 410, PER_STREAM, 5, M_COD(PER_STREAM), 410),
        OK_S("Constant + Shared", M_HOST(CONSTANT), 24, SHARED_CROSS_STREAMS, 39, M_HOST(CONSTANT),
             24),
        OK_S("Volatile + Shared", M_HOST(VOLATILE), 27, SHARED_CROSS_STREAMS, 39, M_HOST(VOLATILE),
             27),
        OK_S("Nonconstant + Per specialises, chained", M_HOST(NONCONSTANT), 24, PER_STREAM, 410,
             M_COD(PER_STREAM), 24410),
        OK_S("Unset_hosted + Shared specialises", M_HOST(UNSET_HOSTED), 37, SHARED_CROSS_STREAMS,
             39, M_COD(SHARED_CROSS_STREAMS), 37039),
        OK_S("COD Unset + Per", M_COD(UNSET), 411, PER_STREAM, 410, M_COD(PER_STREAM), 411410),
        OK_S("chain overflow keeps the new code", M_HOST(NONCONSTANT), 3000000, PER_STREAM, 410,
             M_COD(PER_STREAM), 410),
        BAD_S("Constant + Per", M_HOST(CONSTANT), 24, PER_STREAM, 410, "shared cross-stream"),
        BAD_S("Volatile + Per", M_HOST(VOLATILE), 27, PER_STREAM, 410, "shared cross-stream"),
        BAD_S("On_device Per + Unset", M_ONDEV(PER_STREAM), 410, UNSET, 5, "un-setting"),
        BAD_S("COD Per + Unset", M_COD(PER_STREAM), 410, UNSET, 5, "un-setting"),
        BAD_S("On_device Per + Shared", M_ONDEV(PER_STREAM), 410, SHARED_CROSS_STREAMS, 39,
              "inconsistent"),
        BAD_S("COD Per + Shared", M_COD(PER_STREAM), 410, SHARED_CROSS_STREAMS, 39, "inconsistent"),
        BAD_S("Virtual + Shared", M_VIRT, 29, SHARED_CROSS_STREAMS, 39, "inconsistent"),
        BAD_S("Local + Per", M_LOCAL, 333, PER_STREAM, 410, "inconsistent"),
        BAD_S("Never_virtual + Per", M_NV, 26, PER_STREAM, 410, "inconsistent"),
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const s_srule_t *r = &rules[i];
        troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
        if (r->has_from)
            s_set_mode(tn, r->from, r->from_prov);
        troupe_status_t st = troupe_tnode_update_memory_sharing(tn, r->sharing, r->prov);
        if (r->ok) {
            cr_assert_eq(st, TROUPE_OK, "%s: %s", r->name, troupe_last_error());
            s_expect_mode(tn, r->want, r->want_prov, r->name);
        } else {
            cr_assert_eq(st, TROUPE_FAILED_PRECONDITION, "%s", r->name);
            const char *msg = troupe_last_error();
            char from[96], p1[128], p2[32], name[64];
            s_mode_str(r->from, from, sizeof from);
            snprintf(p1, sizeof p1, "%s/%d", from, (int)r->from_prov);
            snprintf(p2, sizeof p2, "/%d", (int)r->prov);
            troupe_tnode_debug_name(tn, name, sizeof name);
            cr_assert(strstr(msg, name), "%s: %s", r->name, msg);
            cr_assert(strstr(msg, p1), "%s: %s", r->name, msg);
            cr_assert(strstr(msg, p2), "%s: %s", r->name, msg);
            cr_assert(strstr(msg, r->reason), "%s: %s", r->name, msg);
            s_expect_mode(tn, r->from, r->from_prov, r->name);
        }
        troupe_tnode_release(&tn);
    }
}

Test(tnode_sharing, invalid_sharing_is_invalid_argument)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    cr_assert_eq(troupe_tnode_update_memory_sharing(tn, (troupe_sharing_t)7, 1),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert_not(troupe_tnode_get_memory_mode(tn, NULL, NULL));
    troupe_tnode_release(&tn);
}

/* ---- default_to_most_local, force and known predicates ----------------------------------- */

Test(tnode_resolve, default_to_most_local_uses_the_stack_threshold)
{
    /* single 2x3 = 24 bytes */
    cr_assert_eq(troupe_config_set_stack_threshold_bytes(24), TROUPE_OK);
    troupe_tnode_t *a = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(a, M_NV, 26);
    troupe_tnode_default_to_most_local(a, 333);
    s_expect_mode(a, M_LOCAL, 333, "Never_virtual at threshold");
    troupe_tnode_t *b = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(b, M_DEV, 8);
    troupe_tnode_default_to_most_local(b, 334);
    s_expect_mode(b, M_LOCAL, 334, "Device_only at threshold");

    cr_assert_eq(troupe_config_set_stack_threshold_bytes(23), TROUPE_OK);
    troupe_tnode_t *c = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(c, M_NV, 26);
    troupe_tnode_default_to_most_local(c, 335);
    s_expect_mode(c, M_ONDEV(UNSET), 335, "Never_virtual above threshold");
    troupe_tnode_t *d = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(d, M_DEV, 8);
    troupe_tnode_default_to_most_local(d, 336);
    s_expect_mode(d, M_ONDEV(UNSET), 336, "Device_only above threshold");
    troupe_tnode_release(&a);
    troupe_tnode_release(&b);
    troupe_tnode_release(&c);
    troupe_tnode_release(&d);
}

Test(tnode_resolve, default_to_most_local_other_modes)
{
    troupe_tnode_t *u = s_new23(TROUPE_PREC_SINGLE);
    troupe_tnode_default_to_most_local(u, 40);
    s_expect_mode(u, M_VIRT, 40, "unset");
    troupe_tnode_t *ec = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(ec, M_EC, 24);
    troupe_tnode_default_to_most_local(ec, 41);
    s_expect_mode(ec, M_VIRT, 41, "Effectively_constant");
    troupe_tnode_t *m = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(m, M_MAT, 35);
    troupe_tnode_default_to_most_local(m, 42);
    s_expect_mode(m, M_ONDEV(UNSET), 42, "Materialized");
    troupe_tnode_t *h = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(h, M_HOST(CONSTANT), 412);
    troupe_tnode_default_to_most_local(h, 43);
    s_expect_mode(h, M_HOST(CONSTANT), 412, "Hosted unchanged");
    troupe_tnode_t *l = s_new23(TROUPE_PREC_SINGLE);
    s_set_mode(l, M_ONDEV(PER_STREAM), 410);
    troupe_tnode_default_to_most_local(l, 44);
    s_expect_mode(l, M_ONDEV(PER_STREAM), 410, "On_device unchanged");
    troupe_tnode_release(&u);
    troupe_tnode_release(&ec);
    troupe_tnode_release(&m);
    troupe_tnode_release(&h);
    troupe_tnode_release(&l);
}

static troupe_tnode_t *s_with_mode(bool has, troupe_memory_mode_t m)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    if (has)
        s_set_mode(tn, m, 1);
    return tn;
}

Test(tnode_resolve, force_predicates_resolve_placeholders_first)
{
    cr_assert_eq(troupe_config_set_stack_threshold_bytes(16384), TROUPE_OK);
    troupe_tnode_t *tn = s_with_mode(false, M_VIRT);
    cr_assert(troupe_tnode_is_virtual_force(tn, 50));
    s_expect_mode(tn, M_VIRT, 50, "unset forced virtual");
    troupe_tnode_release(&tn);

    tn = s_with_mode(true, M_NV);
    cr_assert_not(troupe_tnode_is_virtual_force(tn, 51));
    s_expect_mode(tn, M_LOCAL, 51, "Never_virtual resolved to Local");
    cr_assert_not(troupe_tnode_is_hosted_force(tn, 52));
    cr_assert_not(troupe_tnode_is_materialized_force(tn, 52));
    troupe_tnode_release(&tn);

    tn = s_with_mode(true, M_MAT);
    cr_assert(troupe_tnode_is_materialized_force(tn, 53));
    s_expect_mode(tn, M_ONDEV(UNSET), 53, "Materialized resolved");
    cr_assert_not(troupe_tnode_is_hosted_force(tn, 54));
    troupe_tnode_release(&tn);

    tn = s_with_mode(true, M_HOST(VOLATILE));
    cr_assert(troupe_tnode_is_hosted_force(tn, 55));
    cr_assert(troupe_tnode_is_materialized_force(tn, 55));
    cr_assert_not(troupe_tnode_is_virtual_force(tn, 55));
    s_expect_mode(tn, M_HOST(VOLATILE), 1, "hosted unchanged");
    troupe_tnode_release(&tn);
}

Test(tnode_resolve, is_in_context_force_cases)
{
    struct {
        const char *name;
        bool has;
        troupe_memory_mode_t m;
        bool host_mem, want;
    } cases[] = {
        {"Hosted Constant, unified", true, M_HOST(CONSTANT), true, false},
        {"Hosted Constant, device", true, M_HOST(CONSTANT), false, true},
        {"Hosted Volatile, unified", true, M_HOST(VOLATILE), true, false},
        {"Hosted COD Per, unified", true, M_COD(PER_STREAM), true, true},
        {"Hosted COD Shared, unified", true, M_COD(SHARED_CROSS_STREAMS), true, true},
        {"Hosted Nonconstant, unified", true, M_HOST(NONCONSTANT), true, true},
        {"Hosted Nonconstant, device", true, M_HOST(NONCONSTANT), false, true},
        {"On_device", true, M_ONDEV(PER_STREAM), false, true},
        {"Materialized", true, M_MAT, false, true},
        {"Virtual", true, M_VIRT, false, false},
        {"Local", true, M_LOCAL, false, false},
        {"unset (-> Virtual)", false, M_VIRT, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        troupe_tnode_t *tn = s_with_mode(cases[i].has, cases[i].m);
        cr_assert_eq(troupe_tnode_is_in_context_force(tn, cases[i].host_mem, 60), cases[i].want,
                     "%s", cases[i].name);
        troupe_tnode_release(&tn);
    }
}

Test(tnode_resolve, known_predicates)
{
    struct {
        const char *name;
        bool has;
        troupe_memory_mode_t m;
        /* not_mat, constant, volatile, non_virtual, virtual, non_cross, shared, potentially,
         * unspecified, hosted */
        bool w[10];
    } cases[] = {
        {"unset", false, M_VIRT, {0, 0, 0, 0, 0, 0, 0, 1, 1, 0}},
        {"EC", true, M_EC, {0, 1, 0, 0, 0, 0, 0, 1, 1, 0}},
        {"Virtual", true, M_VIRT, {1, 0, 0, 0, 1, 0, 0, 0, 0, 0}},
        {"Never_virtual", true, M_NV, {0, 0, 0, 1, 0, 0, 0, 1, 1, 0}},
        {"Local", true, M_LOCAL, {1, 0, 0, 1, 0, 0, 0, 0, 0, 0}},
        {"Device_only", true, M_DEV, {0, 0, 0, 1, 0, 0, 0, 1, 0, 0}},
        {"On_device Per", true, M_ONDEV(PER_STREAM), {0, 0, 0, 1, 0, 1, 0, 0, 0, 0}},
        {"On_device Shared", true, M_ONDEV(SHARED_CROSS_STREAMS), {0, 0, 0, 1, 0, 0, 1, 1, 0, 0}},
        {"Materialized", true, M_MAT, {0, 0, 0, 1, 0, 0, 0, 1, 0, 0}},
        {"Hosted Constant", true, M_HOST(CONSTANT), {0, 1, 0, 1, 0, 0, 1, 1, 0, 1}},
        {"Hosted Volatile", true, M_HOST(VOLATILE), {0, 0, 1, 1, 0, 0, 1, 1, 0, 1}},
        {"Hosted Nonconstant", true, M_HOST(NONCONSTANT), {0, 0, 0, 1, 0, 0, 0, 1, 0, 1}},
        {"Hosted COD Per", true, M_COD(PER_STREAM), {0, 0, 0, 1, 0, 1, 0, 0, 0, 1}},
        {"Hosted COD Shared", true, M_COD(SHARED_CROSS_STREAMS), {0, 0, 0, 1, 0, 0, 1, 1, 0, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        troupe_tnode_t *tn = s_with_mode(cases[i].has, cases[i].m);
        const bool *w = cases[i].w;
        const char *n = cases[i].name;
        cr_assert_eq(troupe_tnode_known_not_materialized(tn), w[0], "%s not_materialized", n);
        cr_assert_eq(troupe_tnode_known_constant(tn), w[1], "%s constant", n);
        cr_assert_eq(troupe_tnode_known_volatile(tn), w[2], "%s volatile", n);
        cr_assert_eq(troupe_tnode_known_non_virtual(tn), w[3], "%s non_virtual", n);
        cr_assert_eq(troupe_tnode_known_virtual(tn), w[4], "%s virtual", n);
        cr_assert_eq(troupe_tnode_known_non_cross_stream(tn), w[5], "%s non_cross", n);
        cr_assert_eq(troupe_tnode_known_shared_cross_streams(tn), w[6], "%s shared", n);
        cr_assert_eq(troupe_tnode_potentially_cross_stream(tn), w[7], "%s potentially", n);
        cr_assert_eq(troupe_tnode_mode_is_unspecified(tn), w[8], "%s unspecified", n);
        cr_assert_eq(troupe_tnode_known_hosted(tn), w[9], "%s hosted", n);
        troupe_tnode_release(&tn);
    }
}

/* ---- devices not lagging host ----------------------------------------------------------- */

Test(tnode_lagging, mark_is_a_set_and_clear_empties_it)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    for (int32_t d = 0; d < 10; d++)
        cr_assert_eq(troupe_tnode_mark_not_lagging(tn, d % 5), TROUPE_OK);
    cr_assert_eq(tn->devices_not_lagging_count, 5);
    cr_assert(troupe_tnode_is_not_lagging(tn, 3));
    cr_assert_not(troupe_tnode_is_not_lagging(tn, 7));
    troupe_tnode_clear_not_lagging(tn);
    cr_assert_not(troupe_tnode_is_not_lagging(tn, 3));
    troupe_tnode_release(&tn);
}

/* ---- host values -------------------------------------------------------------------------- */

Test(tnode_values, host_array_is_zeroed_stable_and_makes_the_node_hosted)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_DOUBLE);
    void *p = NULL, *q = NULL;
    cr_assert_eq(troupe_tnode_host_array(tn, &p), TROUPE_OK);
    cr_assert_not_null(p);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(((double *)p)[i], 0.0);
    cr_assert_eq(troupe_tnode_host_array(tn, &q), TROUPE_OK);
    cr_assert_eq(p, q);
    s_expect_mode(tn, M_HOST(UNSET_HOSTED), 30, "host array forces hosted");
    troupe_tnode_release(&tn);
}

Test(tnode_values, host_array_of_non_hosted_node_fails)
{
    troupe_memory_mode_t modes[] = {M_VIRT, M_LOCAL, M_ONDEV(PER_STREAM), M_DEV};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        troupe_tnode_t *tn = s_with_mode(true, modes[i]);
        void *p = (void *)1;
        cr_assert_eq(troupe_tnode_host_array(tn, &p), TROUPE_FAILED_PRECONDITION, "mode %zu", i);
        cr_assert_null(p);
        s_expect_mode(tn, modes[i], 1, "unchanged");
        troupe_tnode_release(&tn);
    }
}

Test(tnode_values, single_round_trip)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    double in[6] = {1.5, -2.25, 3.0, 0.1, 1e30, -0.0};
    double out[6];
    cr_assert_eq(troupe_tnode_set_values(tn, in, 6), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(troupe_tnode_get_values(tn, out, 6), TROUPE_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], (double)(float)in[i], "element %d", i);
    s_expect_mode(tn, M_HOST(NONCONSTANT), 31, "set_values makes Hosted(Nonconstant)");
    troupe_tnode_release(&tn);
}

Test(tnode_values, half_rounds_on_store)
{
    int64_t dims[1] = {3};
    troupe_tnode_t *tn = s_new("h", TROUPE_PREC_HALF, 1, dims);
    double in[3] = {0.1, 1.0, 65504.0};
    double out[3];
    cr_assert_eq(troupe_tnode_set_values(tn, in, 3), TROUPE_OK);
    cr_assert_eq(troupe_tnode_get_values(tn, out, 3), TROUPE_OK);
    cr_assert_eq(out[0], 0.0999755859375);
    cr_assert_eq(out[1], 1.0);
    cr_assert_eq(out[2], 65504.0);
    troupe_tnode_release(&tn);
}

Test(tnode_values, int32_saturates_and_truncates)
{
    int64_t dims[1] = {4};
    troupe_tnode_t *tn = s_new("i", TROUPE_PREC_INT32, 1, dims);
    double in[4] = {3e10, -3e10, 2.7, -2.7};
    double out[4];
    cr_assert_eq(troupe_tnode_set_values(tn, in, 4), TROUPE_OK);
    cr_assert_eq(troupe_tnode_get_values(tn, out, 4), TROUPE_OK);
    cr_assert_eq(out[0], 2147483647.0);
    cr_assert_eq(out[1], -2147483648.0);
    cr_assert_eq(out[2], 2.0);
    cr_assert_eq(out[3], -2.0);
    troupe_tnode_release(&tn);
}

Test(tnode_values, count_mismatch_gives_both_counts)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    double v[5] = {0};
    cr_assert_eq(troupe_tnode_set_values(tn, v, 5), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "5") && strstr(troupe_last_error(), "6"), "%s",
              troupe_last_error());
    cr_assert_eq(troupe_tnode_get_values(tn, v, 5), TROUPE_INVALID_ARGUMENT);
    cr_assert_not(troupe_tnode_get_memory_mode(tn, NULL, NULL), "mode untouched");
    troupe_tnode_release(&tn);
}

Test(tnode_values, get_set_value_and_bounds_error_names_axis)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_DOUBLE);
    int64_t idx[2] = {1, 2};
    double x = 0;
    cr_assert_eq(troupe_tnode_set_value(tn, idx, 4.25), TROUPE_OK);
    cr_assert_eq(troupe_tnode_get_value(tn, idx, &x), TROUPE_OK);
    cr_assert_eq(x, 4.25);
    double all[6];
    cr_assert_eq(troupe_tnode_get_values(tn, all, 6), TROUPE_OK);
    cr_assert_eq(all[5], 4.25, "row-major: [1][2] is element 5");
    int64_t bad[2] = {0, 3};
    cr_assert_eq(troupe_tnode_set_value(tn, bad, 1.0), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 1"), "%s", troupe_last_error());
    int64_t neg[2] = {-1, 0};
    cr_assert_eq(troupe_tnode_get_value(tn, neg, &x), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "axis 0"), "%s", troupe_last_error());
    troupe_tnode_release(&tn);
}

Test(tnode_values, set_values_mode_rules)
{
    double v[6] = {1, 2, 3, 4, 5, 6};
    /* Incompatible: error, mode unchanged, nothing allocated. */
    troupe_tnode_t *tn = s_with_mode(true, M_VIRT);
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_FAILED_PRECONDITION);
    cr_assert(strstr(troupe_last_error(), "Hosted(Nonconstant)/31"), "%s", troupe_last_error());
    s_expect_mode(tn, M_VIRT, 1, "Virtual unchanged");
    cr_assert_null(tn->host);
    troupe_tnode_release(&tn);
    /* A hosted constant is initialised, and stays constant. */
    tn = s_with_mode(true, M_HOST(CONSTANT));
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    s_expect_mode(tn, M_HOST(CONSTANT), 1, "constant stays");
    troupe_tnode_release(&tn);
    /* Effectively_constant written on host is a hosted constant. */
    tn = s_with_mode(true, M_EC);
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    s_expect_mode(tn, M_HOST(CONSTANT), 1031, "EC becomes Hosted Constant");
    troupe_tnode_release(&tn);
    /* Already more specific: unchanged. */
    tn = s_with_mode(true, M_COD(PER_STREAM));
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    s_expect_mode(tn, M_COD(PER_STREAM), 1, "COD stays");
    troupe_tnode_release(&tn);
}

Test(tnode_values, set_values_clears_not_lagging)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    double v[6] = {0};
    cr_assert_eq(troupe_tnode_mark_not_lagging(tn, 1), TROUPE_OK);
    cr_assert_eq(troupe_tnode_mark_not_lagging(tn, 2), TROUPE_OK);
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    cr_assert_not(troupe_tnode_is_not_lagging(tn, 1));
    cr_assert_not(troupe_tnode_is_not_lagging(tn, 2));
    cr_assert_eq(troupe_tnode_mark_not_lagging(tn, 3), TROUPE_OK);
    int64_t idx[2] = {0, 0};
    cr_assert_eq(troupe_tnode_set_value(tn, idx, 1.0), TROUPE_OK);
    cr_assert_not(troupe_tnode_is_not_lagging(tn, 3));
    troupe_tnode_release(&tn);
}

typedef struct s_hook_counts {
    int reads, writes;
    troupe_status_t read_status, write_status;
} s_hook_counts_t;

static troupe_status_t s_prep_read(troupe_tnode_t *tn, void *user)
{
    (void)tn;
    s_hook_counts_t *c = user;
    c->reads++;
    return c->read_status;
}

static troupe_status_t s_prep_write(troupe_tnode_t *tn, void *user)
{
    (void)tn;
    s_hook_counts_t *c = user;
    c->writes++;
    return c->write_status;
}

Test(tnode_values, hooks_are_called_per_access)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    s_hook_counts_t c = {0, 0, TROUPE_OK, TROUPE_OK};
    troupe_tnode_hooks_t h = {s_prep_read, s_prep_write, &c};
    troupe_tnode_set_hooks(tn, &h);
    double v[6] = {1, 2, 3, 4, 5, 6}, out[6];
    int64_t idx[2] = {0, 1};
    double x;
    size_t n;
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    cr_assert_eq(troupe_tnode_set_value(tn, idx, 9), TROUPE_OK);
    cr_assert_eq(c.writes, 2);
    cr_assert_eq(c.reads, 0);
    cr_assert_eq(troupe_tnode_get_values(tn, out, 6), TROUPE_OK);
    cr_assert_eq(troupe_tnode_get_value(tn, idx, &x), TROUPE_OK);
    cr_assert_eq(troupe_tnode_points_1d(tn, out, 6, &n), TROUPE_OK);
    cr_assert_eq(troupe_tnode_points_2d(tn, 0, 1, out, 3, &n), TROUPE_OK);
    cr_assert_eq(c.reads, 4);
    cr_assert_eq(c.writes, 2);
    troupe_tnode_set_hooks(tn, NULL);
    cr_assert_eq(troupe_tnode_get_values(tn, out, 6), TROUPE_OK);
    cr_assert_eq(c.reads, 4, "hooks removed");
    troupe_tnode_release(&tn);
}

Test(tnode_values, failing_hooks_stop_the_access)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    double v[6] = {1, 2, 3, 4, 5, 6};
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    s_hook_counts_t c = {0, 0, TROUPE_DEADLINE_EXCEEDED, TROUPE_CANCELLED};
    troupe_tnode_hooks_t h = {s_prep_read, s_prep_write, &c};
    troupe_tnode_set_hooks(tn, &h);

    double out[6] = {-7, -7, -7, -7, -7, -7};
    cr_assert_eq(troupe_tnode_get_values(tn, out, 6), TROUPE_DEADLINE_EXCEEDED);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], -7, "values not read");
    double x = -7;
    int64_t idx[2] = {0, 0};
    cr_assert_eq(troupe_tnode_get_value(tn, idx, &x), TROUPE_DEADLINE_EXCEEDED);
    cr_assert_eq(x, -7);

    double w[6] = {9, 9, 9, 9, 9, 9};
    cr_assert_eq(troupe_tnode_set_values(tn, w, 6), TROUPE_CANCELLED);
    cr_assert_eq(troupe_tnode_set_value(tn, idx, 9), TROUPE_CANCELLED);
    troupe_tnode_set_hooks(tn, NULL);
    cr_assert_eq(troupe_tnode_get_values(tn, out, 6), TROUPE_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], v[i], "values not written");
    troupe_tnode_release(&tn);
}

Test(tnode_values, points_1d_and_2d)
{
    int64_t dims[2] = {3, 2};
    troupe_tnode_t *tn = s_new("p", TROUPE_PREC_SINGLE, 2, dims);
    double v[6] = {0, 1, 2, 3, 4, 5};
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    double out[12];
    size_t n = 99;
    cr_assert_eq(troupe_tnode_points_1d(tn, out, 4, &n), TROUPE_OK);
    cr_assert_eq(n, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], i);
    cr_assert_eq(troupe_tnode_points_1d(tn, out, 12, &n), TROUPE_OK);
    cr_assert_eq(n, 6);
    cr_assert_eq(troupe_tnode_points_2d(tn, 0, 1, out, 6, &n), TROUPE_OK);
    cr_assert_eq(n, 3);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(out[2 * r], 2 * r);
        cr_assert_eq(out[2 * r + 1], 2 * r + 1);
    }
    cr_assert_eq(troupe_tnode_points_2d(tn, 1, 0, out, 2, &n), TROUPE_OK);
    cr_assert_eq(n, 2, "capped");
    cr_assert_eq(out[0], 1);
    cr_assert_eq(out[1], 0);
    cr_assert_eq(troupe_tnode_points_2d(tn, 0, 2, out, 6, &n), TROUPE_INVALID_ARGUMENT);
    cr_assert_eq(n, 0);
    cr_assert_eq(troupe_tnode_points_2d(tn, -1, 0, out, 6, &n), TROUPE_INVALID_ARGUMENT);
    troupe_tnode_release(&tn);
}

/* ---- text forms ---------------------------------------------------------------------------- */

Test(tnode_text, dims_to_string)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    char buf[64];
    cr_assert_eq(troupe_tnode_dims_to_string(tn, false, buf, sizeof buf), 3);
    cr_assert_str_eq(buf, "2x3");
    cr_assert_eq(troupe_tnode_dims_to_string(tn, true, buf, sizeof buf), 7);
    cr_assert_str_eq(buf, "0:2x1:3");
    char small[3];
    cr_assert_eq(troupe_tnode_dims_to_string(tn, false, small, sizeof small), 3, "needed");
    cr_assert_str_eq(small, "2x", "truncated, terminated");
    cr_assert_eq(troupe_tnode_dims_to_string(tn, false, NULL, 0), 3);
    troupe_tnode_t *s = s_new("s", TROUPE_PREC_SINGLE, 0, NULL);
    troupe_tnode_dims_to_string(s, false, buf, sizeof buf);
    cr_assert_str_eq(buf, "1");
    cr_assert_eq(troupe_tnode_num_elems(s), 1);
    troupe_tnode_release(&s);
    troupe_tnode_release(&tn);
}

Test(tnode_text, label_and_debug_name)
{
    const char *labels[2] = {"w1", "grad"};
    int64_t dims[1] = {2};
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(labels, 2, TROUPE_PREC_SINGLE, 1, dims, NULL, 0, &tn), TROUPE_OK);
    char buf[64], want[64];
    troupe_tnode_label_string(tn, buf, sizeof buf);
    cr_assert_str_eq(buf, "w1_grad");
    troupe_tnode_debug_name(tn, buf, sizeof buf);
    snprintf(want, sizeof want, "n%d_w1_grad", (int)tn->id);
    cr_assert_str_eq(buf, want);
    troupe_tnode_t *anon = s_new(NULL, TROUPE_PREC_SINGLE, 1, dims);
    troupe_tnode_label_string(anon, buf, sizeof buf);
    snprintf(want, sizeof want, "n%d", (int)anon->id);
    cr_assert_str_eq(buf, want);
    troupe_tnode_debug_name(anon, buf, sizeof buf);
    cr_assert_str_eq(buf, want);
    troupe_tnode_release(&anon);
    troupe_tnode_release(&tn);
}

Test(tnode_text, header_has_id_prec_dims_mode)
{
    troupe_tnode_t *tn = s_new23(TROUPE_PREC_SINGLE);
    char buf[160], want[160];
    troupe_tnode_header(tn, buf, sizeof buf);
    snprintf(want, sizeof want, "#%d w1 single 2x3 unknown", (int)tn->id);
    cr_assert_str_eq(buf, want);
    double v[6] = {0};
    cr_assert_eq(troupe_tnode_set_values(tn, v, 6), TROUPE_OK);
    size_t need = troupe_tnode_header(tn, buf, sizeof buf);
    snprintf(want, sizeof want, "#%d w1 single 2x3 Hosted(Nonconstant)/31", (int)tn->id);
    cr_assert_str_eq(buf, want);
    cr_assert_eq(need, strlen(want));
    troupe_tnode_release(&tn);
}

Test(tnode_text, memory_mode_to_string)
{
    char buf[96];
    troupe_memory_mode_to_string(M_VIRT, buf, sizeof buf);
    cr_assert_str_eq(buf, "Virtual");
    troupe_memory_mode_to_string(M_ONDEV(PER_STREAM), buf, sizeof buf);
    cr_assert_str_eq(buf, "On_device(Per_stream)");
    troupe_memory_mode_to_string(M_ONDEV(UNSET), buf, sizeof buf);
    cr_assert_str_eq(buf, "On_device(Unset)");
    troupe_memory_mode_to_string(M_COD(SHARED_CROSS_STREAMS), buf, sizeof buf);
    cr_assert_str_eq(buf, "Hosted(Changed_on_devices(Shared_cross_streams))");
    troupe_memory_mode_to_string(M_HOST(UNSET_HOSTED), buf, sizeof buf);
    cr_assert_str_eq(buf, "Hosted(Unset_hosted)");
    troupe_memory_mode_to_string(M_EC, buf, sizeof buf);
    cr_assert_str_eq(buf, "Effectively_constant");
    size_t n = troupe_memory_mode_to_string(M_HOST(VOLATILE), buf, 4);
    cr_assert_eq(n, strlen("Hosted(Volatile)"));
    cr_assert_str_eq(buf, "Hos");
}

/* ir/tnode_impl.h: host arrays of at least min_bytes come from the installed allocator,
 * zero-filled, and go back to it (also after it is uninstalled); smaller ones do not. */
static int s_allocs, s_frees;
static unsigned char s_arena[1 << 16];

static void *s_test_alloc(size_t n)
{
    s_allocs++;
    memset(s_arena, 0xab, n); /* the node must zero it */
    return s_arena;
}

static void s_test_free(void *p)
{
    cr_assert_eq(p, (void *)s_arena);
    s_frees++;
}

Test(tnode, host_arrays_come_from_the_installed_allocator)
{
    troupe__tnode_set_host_allocator(s_test_alloc, s_test_free, 4096);
    troupe_tnode_t *big = NULL, *small = NULL;
    const char *l[1] = {"big"};
    cr_assert_eq(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){2048}, NULL, 0, &big),
                 TROUPE_OK);
    cr_assert_eq(troupe_tnode_new(l, 1, TROUPE_PREC_SINGLE, 1, (int64_t[]){16}, NULL, 0, &small),
                 TROUPE_OK);
    void *h = NULL;
    cr_assert_eq(troupe_tnode_host_array(big, &h), TROUPE_OK);
    cr_assert_eq(h, (void *)s_arena);
    cr_assert_eq(s_allocs, 1);
    for (size_t i = 0; i < big->size_bytes; i++)
        cr_assert_eq(((unsigned char *)h)[i], 0, "byte %zu is not zeroed", i);
    cr_assert_eq(troupe_tnode_host_array(small, &h), TROUPE_OK);
    cr_assert_neq(h, (void *)s_arena, "64 bytes is below the allocator's minimum");
    troupe__tnode_set_host_allocator(NULL, NULL, 0);
    troupe_tnode_release(&small);
    cr_assert_eq(s_frees, 0);
    troupe_tnode_release(&big);
    cr_assert_eq(s_frees, 1, "freed with the allocator that made it");
}
