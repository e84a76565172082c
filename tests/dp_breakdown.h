/* troupe tests — reading the data-parallel driver's per-step breakdown lines (parallel/dp.h,
 * Step breakdown) from a log file, and checking that their fields are sane: every time is
 * >= 0, the phases add up to the wall time (they end where the next begins), the staging
 * figures fit in the exchange. Header-only; used by tests/test_dp.c and tests/mpi/. */
#ifndef TROUPE_TESTS_DP_BREAKDOWN_H
#define TROUPE_TESTS_DP_BREAKDOWN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpb_line {
    long long step;
    double wall, compute, merge, exchange, optimizer, host, d2h, reduce, h2d, overlap, cover;
    char exchange_kind[16];
    char update[16]; /* "routine" or "fused" */
    int buckets;
} dpb_line_t;

/* The value after "key=" in line, or -1 when missing. */
static double dpb_num(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, " %s=", key);
    const char *p = strstr(line, k);
    return p != NULL ? strtod(p + strlen(k), NULL) : -1.0;
}

/* Reads up to cap breakdown lines of `path` into out; returns how many, or -1 (no file). */
static int dpb_read(const char *path, dpb_line_t *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[2048];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "dp step ");
        if (p == NULL || strstr(p, " breakdown: ") == NULL)
            continue;
        dpb_line_t *l = &out[n++];
        memset(l, 0, sizeof *l);
        l->step = strtoll(p + 8, NULL, 10);
        l->wall = dpb_num(p, "wall_us");
        l->compute = dpb_num(p, "compute_us");
        l->merge = dpb_num(p, "merge_us");
        l->exchange = dpb_num(p, "exchange_us");
        l->optimizer = dpb_num(p, "optimizer_us");
        l->host = dpb_num(p, "host_us");
        l->d2h = dpb_num(p, "d2h_us");
        l->reduce = dpb_num(p, "reduce_us");
        l->h2d = dpb_num(p, "h2d_us");
        l->overlap = dpb_num(p, "overlap_us");
        l->cover = dpb_num(p, "compute_overlap_us");
        l->buckets = (int)dpb_num(p, "buckets");
        const char *x = strstr(p, " exchange=");
        if (x != NULL)
            sscanf(x + 10, "%15s", l->exchange_kind);
        const char *u = strstr(p, " update=");
        if (u != NULL)
            sscanf(u + 8, "%15s", l->update);
    }
    fclose(f);
    return n;
}

/* NULL when l is sane, else what is wrong (a static string). */
static const char *dpb_insane(const dpb_line_t *l)
{
    const double t[] = {l->wall,  l->compute, l->merge, l->exchange, l->optimizer, l->host,
                        l->d2h,   l->reduce,  l->h2d,   l->overlap,  l->cover};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!(t[i] >= 0))
            return "a field is missing or negative";
    if (!(l->wall > 0))
        return "wall_us is 0";
    double sum = l->compute + l->merge + l->exchange + l->optimizer;
    if (sum > l->wall + 0.5 || sum < l->wall - 0.5) /* printed to 0.1 us each */
        return "the phases do not add up to the wall time";
    if (l->d2h + l->h2d > l->exchange + 0.5)
        return "the staging copies exceed the exchange";
    if (l->overlap > l->d2h + l->reduce + l->h2d + 0.5)
        return "the overlap exceeds the copies and reductions";
    if (l->cover > l->compute + 0.5)
        return "the compute overlap exceeds the compute";
    return NULL;
}

#endif /* TROUPE_TESTS_DP_BREAKDOWN_H */
