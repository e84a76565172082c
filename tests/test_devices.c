/* Tests for devices/: the driver table and the conformance cases every host driver (sync, cpu)
 * must pass: pools, host pointers and their bounds, copies, events, compile + launch of
 * generated C, the compile cache and compiler failures. Each compile test uses a fresh cache
 * directory (Criterion runs every test in its own process, so configuration changes stay
 * local to the test). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#include "base/config.h"
#include "base/status.h"
#include "compiler/cgen.h"
#include "devices/device.h"
#include "devices/host/host_memory_impl.h"
#include "ir/lowlevel.h"
#include "ir/tnode.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const s_names[] = {"sync", "cpu"};
#define S_NDRIVERS (sizeof s_names / sizeof s_names[0])
#define S_FOR_EACH_DRIVER(i) for (size_t i = 0; i < S_NDRIVERS; i++)

static troupe_driver_t *s_open(const char *name)
{
    const troupe_driver_vtable_t *vt = NULL;
    cr_assert_eq(troupe_driver_lookup(name, &vt), TROUPE_OK, "%s", troupe_last_error());
    troupe_driver_t *drv = NULL;
    cr_assert_eq(vt->open(&drv), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_not_null(drv);
    cr_assert_eq(drv->vt, vt);
    return drv;
}

static bool s_has(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* ---- temporary cache directories ------------------------------------------------------ */

static char s_tmpdir[256];

static int s_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* A fresh directory; the cache directory is a not-yet-existing subdirectory of it (so
 * mkdir -p is exercised). */
static void s_fresh_cache(void)
{
    snprintf(s_tmpdir, sizeof s_tmpdir, "/tmp/troupe-test-devices-XXXXXX");
    cr_assert_not_null(mkdtemp(s_tmpdir));
    char cache[320];
    snprintf(cache, sizeof cache, "%s/cache/nested", s_tmpdir);
    cr_assert_eq(troupe_config_set_cache_dir(cache), TROUPE_OK);
}

static void s_remove_tmpdir(void)
{
    if (s_tmpdir[0])
        nftw(s_tmpdir, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    s_tmpdir[0] = '\0';
}

/* Writes an executable shell script into the temp dir; returns its path (static buffer). */
static const char *s_script(const char *file, const char *body)
{
    static char path[400];
    snprintf(path, sizeof path, "%s/%s", s_tmpdir, file);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\n%s", body);
    fclose(f);
    cr_assert_eq(chmod(path, 0700), 0);
    return path;
}

/* Lines in a file (0 if absent). */
static int s_count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Number of files in the cache directory whose name ends with `suffix`. */
static int s_count_cache_files(const char *suffix)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/cache/nested | grep -c '%s$'", s_tmpdir, suffix);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = 0;
    if (fscanf(p, "%d", &n) != 1)
        n = 0;
    pclose(p);
    return n;
}

/* ---- lookup -------------------------------------------------------------------------- */

Test(lookup, finds_each_builtin_driver_with_every_entry)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    S_FOR_EACH_DRIVER(d)
    {
        const troupe_driver_vtable_t *vt = NULL;
        cr_assert_eq(troupe_driver_lookup(s_names[d], &vt), TROUPE_OK);
        cr_assert_str_eq(vt->name, s_names[d]);
        cr_assert(vt->open && vt->close && vt->num_devices && vt->suggested_num_streams &&
                      vt->alloc_pool && vt->free_pool && vt->host_ptr && vt->queue_create &&
                      vt->queue_destroy && vt->memset_zero && vt->h2d && vt->d2h && vt->d2d &&
                      vt->compile && vt->code_release && vt->launch && vt->event_record &&
                      vt->event_query && vt->event_wait && vt->event_release,
                  "%s has a NULL entry", s_names[d]);
        troupe_driver_t *drv = s_open(s_names[d]);
        cr_assert_eq(vt->num_devices(drv), 1);
        for (int cfg = TROUPE_ONLY_DEVICES_PARALLEL; cfg <= TROUPE_MOST_PARALLEL_STREAMS; cfg++) {
            int n = vt->suggested_num_streams(drv, 0, (troupe_stream_config_t)cfg);
            if (strcmp(s_names[d], "sync") == 0)
                cr_assert_eq(n, 1, "sync suggests one stream");
            else
                cr_assert_eq(n, cores < 1 ? 1 : (int)cores, "cpu suggests one stream per core");
        }
        cr_assert_eq(vt->suggested_num_streams(drv, 1, TROUPE_ONLY_DEVICES_PARALLEL), 0);
        vt->close(drv);
    }
}

Test(lookup, unknown_name_is_not_found_and_lists_built_drivers)
{
    const troupe_driver_vtable_t *vt = (const troupe_driver_vtable_t *)1;
    cr_assert_eq(troupe_driver_lookup("tpu", &vt), TROUPE_NOT_FOUND);
    cr_assert_null(vt);
    const char *msg = troupe_last_error();
    cr_assert(s_has(msg, "'tpu'") && s_has(msg, "cpu") && s_has(msg, "sync"), "%s", msg);
    cr_assert_eq(troupe_driver_lookup(NULL, &vt), TROUPE_INVALID_ARGUMENT);
}

/* ---- pools and host pointers ---------------------------------------------------------- */

Test(pools, alloc_zero_free)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        cr_assert_eq(vt->alloc_pool(drv, 0, 3, 1000, true), TROUPE_OK, "%s", troupe_last_error());
        void *p = NULL;
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){3, 0, 1000}, &p), TROUPE_OK);
        cr_assert_eq((uintptr_t)p % 64, 0, "pools are 64-byte aligned");
        const unsigned char *b = p;
        for (int i = 0; i < 1000; i++)
            cr_assert_eq(b[i], 0, "zeroed pool byte %d", i);
        void *q = NULL;
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){3, 256, 8}, &q), TROUPE_OK);
        cr_assert_eq((char *)q - (char *)p, 256);

        /* A non-zeroed pool, and a 0-byte pool, are fine too. */
        cr_assert_eq(vt->alloc_pool(drv, 0, 1, 64, false), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 2, 0, false), TROUPE_OK);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){2, 0, 0}, &q), TROUPE_OK);

        cr_assert_eq(vt->alloc_pool(drv, 0, 3, 10, false), TROUPE_ALREADY_EXISTS);
        cr_assert(s_has(troupe_last_error(), "pool 3"), "%s", troupe_last_error());
        cr_assert_eq(vt->alloc_pool(drv, 0, 4, -1, false), TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(vt->alloc_pool(drv, 1, 4, 10, false), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->free_pool(drv, 0, 3), TROUPE_OK);
        cr_assert_eq(vt->free_pool(drv, 0, 3), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){3, 0, 8}, &q), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
        /* Pool 2 is left for close to free. */
        vt->close(drv);
    }
}

Test(pools, host_ptr_checks_bounds_and_names_the_pool)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        cr_assert_eq(vt->alloc_pool(drv, 0, 7, 100, false), TROUPE_OK);
        void *p = NULL;
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, 90, 10}, &p), TROUPE_OK);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, 100, 0}, &p), TROUPE_OK);

        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, 90, 11}, &p),
                     TROUPE_INVALID_ARGUMENT);
        const char *msg = troupe_last_error();
        cr_assert(s_has(msg, "pool 7") && s_has(msg, "offset 90") && s_has(msg, "11 bytes") &&
                      s_has(msg, "100 bytes"),
                  "%s", msg);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, 101, 0}, &p),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, -1, 4}, &p),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){7, INT64_MAX, 2}, &p),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){99, 0, 4}, &p), TROUPE_NOT_FOUND);
        cr_assert(s_has(troupe_last_error(), "pool 99"), "%s", troupe_last_error());
        cr_assert_eq(vt->host_ptr(drv, 1, (troupe_buffer_loc_t){7, 0, 4}, &p), TROUPE_NOT_FOUND);
        cr_assert(s_has(troupe_last_error(), "device 1"), "%s", troupe_last_error());
        vt->close(drv);
    }
}

typedef struct s_pool_worker {
    troupe_driver_t *drv;
    int32_t first_id;
    int failures;
} s_pool_worker_t;

static void *s_pool_worker(void *arg)
{
    s_pool_worker_t *w = arg;
    const troupe_driver_vtable_t *vt = w->drv->vt;
    for (int round = 0; round < 50; round++) {
        for (int32_t k = 0; k < 20; k++)
            if (vt->alloc_pool(w->drv, 0, w->first_id + k, 128 + k, true) != TROUPE_OK)
                w->failures++;
        for (int32_t k = 0; k < 20; k++) {
            void *p = NULL;
            troupe_buffer_loc_t loc = {w->first_id + k, 0, 128 + k};
            if (vt->host_ptr(w->drv, 0, loc, &p) != TROUPE_OK)
                w->failures++;
            else
                memset(p, 0xab, (size_t)(128 + k));
        }
        for (int32_t k = 0; k < 20; k++)
            if (vt->free_pool(w->drv, 0, w->first_id + k) != TROUPE_OK)
                w->failures++;
    }
    return NULL;
}

Test(pools, table_is_thread_safe)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        pthread_t t[4];
        s_pool_worker_t w[4];
        for (int i = 0; i < 4; i++) {
            w[i] = (s_pool_worker_t){drv, i * 1000, 0};
            cr_assert_eq(pthread_create(&t[i], NULL, s_pool_worker, &w[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], NULL);
            cr_assert_eq(w[i].failures, 0, "worker %d", i);
        }
        drv->vt->close(drv);
    }
}

/* A pool of 2 MiB or more is 2 MiB-aligned (the host drivers ask the kernel for huge pages
 * there) and zeroed when asked, also where its memory was used before. */
Test(pools, large_pool_is_2mib_aligned_and_zeroed)
{
    const size_t n = ((size_t)3 << 20) + 5;
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        for (int round = 0; round < 3; round++) {
            cr_assert_eq(vt->alloc_pool(drv, 0, 5, (int64_t)n, true), TROUPE_OK, "%s",
                         troupe_last_error());
            void *p = NULL;
            cr_assert_eq(vt->host_ptr(drv, 0, (troupe_buffer_loc_t){5, 0, (int64_t)n}, &p),
                         TROUPE_OK);
            cr_assert_eq((uintptr_t)p % ((uintptr_t)2 << 20), 0, "%s round %d: %p", s_names[d],
                         round, p);
            const unsigned char *b = p;
            size_t nonzero = 0;
            for (size_t i = 0; i < n; i++)
                nonzero += b[i] != 0;
            cr_assert_eq(nonzero, 0, "%s round %d: %zu bytes not zeroed", s_names[d], round,
                         nonzero);
            memset(p, 0xab, n); /* the next round may get this memory back */
            cr_assert_eq(vt->free_pool(drv, 0, 5), TROUPE_OK);
        }
        vt->close(drv);
    }
}

/* TROUPE_HOST_MEMORY: a pool larger than the host memory free is refused before any memory is
 * taken, naming the bytes and where the figure comes from; a byte count replaces the figure,
 * and off lifts the check. */
Test(pools, past_host_memory_is_refused_naming_the_figures)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        const int64_t huge = (int64_t)1 << 50; /* 1 PiB: more than any machine this runs on */
        cr_assert_eq(troupe_config_host_memory(), TROUPE_HOST_MEMORY_AUTO, "the default");
        cr_assert_eq(vt->alloc_pool(drv, 0, 1, huge, true), TROUPE_RESOURCE_EXHAUSTED);
        const char *msg = troupe_last_error();
        cr_assert(s_has(msg, "pool 1") && s_has(msg, "1125899906842624 bytes") &&
                      (s_has(msg, "MemAvailable") || s_has(msg, "cgroup")) &&
                      s_has(msg, "TROUPE_HOST_MEMORY=off"),
                  "%s: %s", s_names[d], msg);
        cr_assert_eq(troupe_config_set_host_memory(100000), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 2, 100001, true), TROUPE_RESOURCE_EXHAUSTED);
        cr_assert(s_has(troupe_last_error(), "TROUPE_HOST_MEMORY=100000"), "%s",
                  troupe_last_error());
        cr_assert_eq(vt->alloc_pool(drv, 0, 2, 99968, true), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_eq(troupe_config_set_host_memory(TROUPE_HOST_MEMORY_OFF), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 3, 200000, false), TROUPE_OK);
        cr_assert_eq(troupe_config_set_host_memory(TROUPE_HOST_MEMORY_AUTO), TROUPE_OK);
        cr_assert_eq(vt->free_pool(drv, 0, 2), TROUPE_OK);
        cr_assert_eq(vt->free_pool(drv, 0, 3), TROUPE_OK);
        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_NOT_FOUND, "the refused pool is not there");
        vt->close(drv);
    }
}

/* Writes `text` to s_tmpdir/rel, making the directories on the way. */
static void s_put(const char *rel, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", s_tmpdir, rel);
    for (char *p = path + strlen(s_tmpdir) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        (void)mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* The free-memory figure of TROUPE_HOST_MEMORY=auto, on fixture files under s_tmpdir/<dir>. */
static int64_t s_free_in(const char *dir, char *how, size_t cap)
{
    char mi[400], sc[400], root[400];
    snprintf(mi, sizeof mi, "%s/%s/meminfo", s_tmpdir, dir);
    snprintf(sc, sizeof sc, "%s/%s/self_cgroup", s_tmpdir, dir);
    snprintf(root, sizeof root, "%s/%s/cg", s_tmpdir, dir);
    return troupe__host_memory_free(mi, sc, root, how, cap);
}

/* The figure: /proc/meminfo's MemAvailable + SwapFree, capped by each memory cgroup with a
 * limit (v2 up the tree from the process's own, v1 the hierarchical limit; combined v1
 * controllers; a cgroup namespace's root), page cache counted free; -1 when nothing is read. */
Test(pools, host_memory_figure_reads_meminfo_and_cgroups, .fini = s_remove_tmpdir)
{
    snprintf(s_tmpdir, sizeof s_tmpdir, "/tmp/troupe-test-hostmem-XXXXXX");
    cr_assert_not_null(mkdtemp(s_tmpdir));
    const char *mem = "MemTotal:  9000000 kB\nMemFree:  10 kB\nMemAvailable:    8000000 kB\n"
                      "SwapTotal: 2000 kB\nSwapFree:   1000 kB\n";
    char how[600];
    /* v2: the limit on a parent (a Slurm job's), page cache not held against it */
    s_put("a/meminfo", mem);
    s_put("a/self_cgroup", "0::/job_7/step_0/task_1\n");
    s_put("a/cg/job_7/memory.max", "3000000000\n");
    s_put("a/cg/job_7/memory.current", "2000000000\n");
    s_put("a/cg/job_7/memory.stat", "anon 1400000000\nfile 500000000\nfile_mapped 7\n");
    s_put("a/cg/job_7/step_0/memory.max", "max\n");
    s_put("a/cg/job_7/step_0/memory.current", "1900000000\n");
    s_put("a/cg/job_7/step_0/task_1/memory.max", "max\n");
    s_put("a/cg/job_7/step_0/task_1/memory.current", "1800000000\n");
    cr_assert_eq(s_free_in("a", how, sizeof how), 1500000000);
    cr_assert(strstr(how, "job_7: memory.max 3000000000") && !strstr(how, "task_1"), "%s", how);
    /* and a tighter one below it wins */
    s_put("a/cg/job_7/step_0/task_1/memory.max", "2000000000\n");
    cr_assert_eq(s_free_in("a", how, sizeof how), 200000000, "%s", how);
    cr_assert(strstr(how, "task_1"), "%s", how);
    /* usage past the limit: nothing free */
    s_put("a/cg/job_7/memory.current", "9000000000\n");
    s_put("a/cg/job_7/step_0/task_1/memory.max", "max\n");
    cr_assert_eq(s_free_in("a", how, sizeof how), 0, "%s", how);

    /* v1, memory among combined controllers: the hierarchical limit less usage held */
    s_put("b/meminfo", mem);
    s_put("b/self_cgroup", "6:pids:/\n5:cpu,memory:/x\n0::/\n");
    s_put("b/cg/memory/x/memory.stat",
          "cache 1\nhierarchical_memory_limit 4000000000\ntotal_cache 1000000000\n");
    s_put("b/cg/memory/x/memory.usage_in_bytes", "2500000000\n");
    cr_assert_eq(s_free_in("b", how, sizeof how), 2500000000);
    cr_assert(strstr(how, "hierarchical_memory_limit 4000000000"), "%s", how);
    /* v1 without a limit (reported as about 2^63): meminfo's figure */
    s_put("b/cg/memory/x/memory.stat",
          "hierarchical_memory_limit 9223372036854771712\ntotal_cache 5\n");
    cr_assert_eq(s_free_in("b", how, sizeof how), (int64_t)8001000 * 1024);
    cr_assert(strstr(how, "MemAvailable 8192000000 + SwapFree 1024000"), "%s", how);

    /* a cgroup namespace: the process's path is not under the mount, its root holds the limit */
    s_put("c/meminfo", mem);
    s_put("c/self_cgroup", "0::/not/here\n");
    s_put("c/cg/memory.max", "1000000000\n");
    s_put("c/cg/memory.current", "100000000\n");
    cr_assert_eq(s_free_in("c", how, sizeof how), 900000000, "%s", how);

    /* nothing readable: no figure, so no check */
    cr_assert_eq(s_free_in("nothing", how, sizeof how), -1);
    /* meminfo only */
    s_put("d/meminfo", "MemAvailable: 5 kB\n");
    cr_assert_eq(s_free_in("d", how, sizeof how), 5120);
}

typedef struct s_twin {
    troupe_driver_t *drv;
    troupe_status_t st;
} s_twin_t;

static void *s_twin_alloc(void *arg)
{
    s_twin_t *w = arg;
    w->st = w->drv->vt->alloc_pool(w->drv, 0, 9, (int64_t)4 << 20, true);
    return NULL;
}

/* Two threads allocating the same pool id at once: the memory is found and zeroed outside the
 * table's lock, so both may get that far; exactly one pool results, the other call is refused
 * with ALREADY_EXISTS and its memory freed (the ASan run checks that nothing leaks). */
Test(pools, racing_twins_make_one_pool)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        for (int round = 0; round < 20; round++) {
            pthread_t t[2];
            s_twin_t w[2] = {{drv, TROUPE_OK}, {drv, TROUPE_OK}};
            for (int i = 0; i < 2; i++)
                cr_assert_eq(pthread_create(&t[i], NULL, s_twin_alloc, &w[i]), 0);
            for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
            int ok = (w[0].st == TROUPE_OK) + (w[1].st == TROUPE_OK);
            int dup = (w[0].st == TROUPE_ALREADY_EXISTS) + (w[1].st == TROUPE_ALREADY_EXISTS);
            cr_assert(ok == 1 && dup == 1, "%s round %d: statuses %d and %d", s_names[d], round,
                      (int)w[0].st, (int)w[1].st);
            cr_assert_eq(drv->vt->free_pool(drv, 0, 9), TROUPE_OK);
            cr_assert_eq(drv->vt->free_pool(drv, 0, 9), TROUPE_NOT_FOUND);
        }
        drv->vt->close(drv);
    }
}

/* ---- copies ------------------------------------------------------------------------------ */

Test(copies, h2d_d2h_d2d_round_trips)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        troupe_dqueue_t *q = NULL;
        cr_assert_eq(vt->queue_create(drv, 0, &q), TROUPE_OK);
        cr_assert_eq(vt->queue_create(drv, 1, &(troupe_dqueue_t *){NULL}), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->alloc_pool(drv, 0, 1, 4096, false), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 2, 4096, true), TROUPE_OK);

        int32_t src[256], back[256];
        for (int i = 0; i < 256; i++)
            src[i] = i * 7 - 100;
        troupe_buffer_loc_t a = {1, 128, sizeof src};
        troupe_buffer_loc_t b = {2, 1024, sizeof src};
        troupe_buffer_loc_t c = {1, 2048, sizeof src}; /* same pool as a */
        cr_assert_eq(vt->h2d(drv, q, a, src, sizeof src), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_eq(vt->d2d(drv, q, 0, b, 0, a, sizeof src), TROUPE_OK);
        cr_assert_eq(vt->d2d(drv, q, 0, c, 0, b, sizeof src), TROUPE_OK);
        memset(back, 0, sizeof back);
        cr_assert_eq(vt->d2h(drv, q, back, c, sizeof back), TROUPE_OK);
        cr_assert_arr_eq(back, src, sizeof src);

        /* A partial copy touches only its prefix. */
        cr_assert_eq(vt->memset_zero(drv, q, b), TROUPE_OK);
        cr_assert_eq(vt->h2d(drv, q, b, src, 16), TROUPE_OK);
        cr_assert_eq(vt->d2h(drv, q, back, b, sizeof back), TROUPE_OK);
        cr_assert_arr_eq(back, src, 16);
        for (int i = 4; i < 256; i++)
            cr_assert_eq(back[i], 0, "element %d after memset_zero", i);

        /* Errors. */
        cr_assert_eq(vt->h2d(drv, q, a, src, sizeof src + 4), TROUPE_INVALID_ARGUMENT);
        cr_assert_eq(vt->d2h(drv, q, back, (troupe_buffer_loc_t){1, 4000, 1024}, 1024),
                     TROUPE_INVALID_ARGUMENT);
        cr_assert(s_has(troupe_last_error(), "pool 1"), "%s", troupe_last_error());
        cr_assert_eq(vt->d2h(drv, q, back, (troupe_buffer_loc_t){5, 0, 4}, 4), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->d2d(drv, q, 1, b, 0, a, 16), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->d2d(drv, q, 0, b, 2, a, 16), TROUPE_NOT_FOUND);
        cr_assert_eq(vt->memset_zero(drv, q, (troupe_buffer_loc_t){2, 4000, 200}),
                     TROUPE_INVALID_ARGUMENT);

        vt->queue_destroy(drv, q);
        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
        cr_assert_eq(vt->free_pool(drv, 0, 2), TROUPE_OK);
        vt->close(drv);
    }
}

/* ---- events ------------------------------------------------------------------------------ */

Test(events, complete_when_recorded)
{
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        troupe_dqueue_t *q1 = NULL, *q2 = NULL;
        cr_assert_eq(vt->queue_create(drv, 0, &q1), TROUPE_OK);
        cr_assert_eq(vt->queue_create(drv, 0, &q2), TROUPE_OK);
        troupe_devent_t *e1 = NULL, *e2 = NULL;
        cr_assert_eq(vt->event_record(drv, q1, &e1), TROUPE_OK);
        cr_assert_eq(vt->event_record(drv, q1, &e2), TROUPE_OK);
        cr_assert_not_null(e1);
        cr_assert_neq(e1, e2, "each record is its own event");
        bool done = false;
        cr_assert_eq(vt->event_query(drv, e1, &done), TROUPE_OK);
        cr_assert(done);
        cr_assert_eq(vt->event_wait(drv, q2, e1), TROUPE_OK);
        vt->event_release(drv, e1);
        vt->event_release(drv, e2);
        vt->queue_destroy(drv, q1);
        vt->queue_destroy(drv, q2);
        vt->close(drv);
    }
}

/* ---- compile and launch ------------------------------------------------------------------ */

#define S_N 37

/* A hand-built procedure: out[i] = a[i] * 2 + b[i] over S_N floats. */
typedef struct s_axpb {
    troupe_tnode_t *a, *b, *out;
    troupe_ll_proc_t *proc;
} s_axpb_t;

static troupe_tnode_t *s_node(const char *label, int ndims, const int64_t *dims)
{
    troupe_tnode_t *tn = NULL;
    cr_assert_eq(troupe_tnode_new(&label, 1, TROUPE_PREC_SINGLE, ndims, dims, NULL, 0.0, &tn),
                 TROUPE_OK, "%s", troupe_last_error());
    return tn;
}

static s_axpb_t s_axpb_new(const char *name)
{
    s_axpb_t x;
    int64_t dims[1] = {S_N};
    x.a = s_node("a", 1, dims);
    x.b = s_node("b", 1, dims);
    x.out = s_node("out", 1, dims);
    cr_assert_eq(troupe_ll_proc_new(name, &x.proc), TROUPE_OK);
    troupe_ll_proc_t *p = x.proc;
    int32_t i = troupe_ll_proc_add_symbol(p, NULL);
    troupe_axis_index_t idx = troupe_idx_sym(i);
    troupe_sc_t *v =
        troupe_sc_binop(p, TROUPE_BINOP_ADD,
                        troupe_sc_binop(p, TROUPE_BINOP_MUL, troupe_sc_get(p, x.a, &idx),
                                        troupe_sc_constant(p, 2.0)),
                        troupe_sc_get(p, x.b, &idx));
    p->body = troupe_ll_for(p, i, 0, S_N - 1, troupe_ll_set(p, x.out, &idx, v), false);
    cr_assert_eq(troupe_ll_proc_status(p), TROUPE_OK);
    cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());
    return x;
}

static void s_axpb_destroy(s_axpb_t *x)
{
    troupe_ll_proc_destroy(&x->proc);
    troupe_tnode_release(&x->a);
    troupe_tnode_release(&x->b);
    troupe_tnode_release(&x->out);
}

/* Kernel arguments in the code's parameter order (from the deterministic emitter), with
 * node n in pool 1 at offset n*256. */
static size_t s_axpb_args(const s_axpb_t *x, troupe_karg_t *args)
{
    troupe_cgen_result_t *gen = NULL;
    cr_assert_eq(troupe_cgen_emit(x->proc, TROUPE_CGEN_C, &gen), TROUPE_OK, "%s",
                 troupe_last_error());
    cr_assert_eq(gen->nparams, 3);
    troupe_tnode_t *nodes[3] = {x->a, x->b, x->out};
    for (int n = 0; n < 3; n++) {
        ptrdiff_t k = troupe_cgen_find_node_param(gen, nodes[n]);
        cr_assert(k >= 0 && k < 3);
        args[k] = (troupe_karg_t){.kind = TROUPE_KARG_BUFFER,
                                  .ordinal = 0,
                                  .buf = {1, n * 256, S_N * (int64_t)sizeof(float)}};
    }
    size_t nparams = gen->nparams;
    troupe_cgen_result_destroy(&gen);
    return nparams;
}

static void s_check_axpb(troupe_driver_t *drv, troupe_dcode_t *code, const s_axpb_t *x)
{
    const troupe_driver_vtable_t *vt = drv->vt;
    troupe_dqueue_t *q = NULL;
    cr_assert_eq(vt->queue_create(drv, 0, &q), TROUPE_OK);
    cr_assert_eq(vt->alloc_pool(drv, 0, 1, 1024, true), TROUPE_OK);
    float a[S_N], b[S_N], out[S_N];
    for (int i = 0; i < S_N; i++) {
        a[i] = (float)i * 0.5f - 3.0f;
        b[i] = (float)(i % 5) + 0.25f;
    }
    troupe_karg_t args[3];
    size_t nargs = s_axpb_args(x, args);
    cr_assert_eq(vt->h2d(drv, q, (troupe_buffer_loc_t){1, 0, sizeof a}, a, sizeof a), TROUPE_OK);
    cr_assert_eq(vt->h2d(drv, q, (troupe_buffer_loc_t){1, 256, sizeof b}, b, sizeof b), TROUPE_OK);
    cr_assert_eq(vt->launch(drv, q, code, args, nargs), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(vt->d2h(drv, q, out, (troupe_buffer_loc_t){1, 512, sizeof out}, sizeof out),
                 TROUPE_OK);
    for (int i = 0; i < S_N; i++)
        cr_assert_float_eq(out[i], a[i] * 2.0f + b[i], 0.0f, "out[%d] = %g", i, out[i]);
    cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
    vt->queue_destroy(drv, q);
}

Test(compile, launch_computes_out_eq_a_times_2_plus_b, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        s_axpb_t x = s_axpb_new("axpb");
        troupe_dcode_t *code = NULL;
        cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_not_null(code);
        s_check_axpb(drv, code, &x);
        drv->vt->code_release(drv, code);
        s_axpb_destroy(&x);
        drv->vt->close(drv);
    }
    cr_assert_geq(s_count_cache_files(".so"), 1, "the object is in the cache directory");
    cr_assert_geq(s_count_cache_files(".c"), 1, "the source is kept beside it");
    cr_assert_eq(s_count_cache_files("tmp.*"), 0, "no temporary files are left");
}

Test(compile, launch_validates_arguments, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        s_axpb_t x = s_axpb_new("axpb_checked");
        troupe_dcode_t *code = NULL;
        cr_assert_eq(vt->compile(drv, x.proc, &code), TROUPE_OK, "%s", troupe_last_error());
        troupe_dqueue_t *q = NULL;
        cr_assert_eq(vt->queue_create(drv, 0, &q), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 1, 1024, true), TROUPE_OK);
        troupe_karg_t args[3];
        s_axpb_args(&x, args);

        cr_assert_eq(vt->launch(drv, q, code, args, 2), TROUPE_INVALID_ARGUMENT);
        cr_assert(s_has(troupe_last_error(), "3 parameters"), "%s", troupe_last_error());

        troupe_karg_t bad[3];
        memcpy(bad, args, sizeof bad);
        bad[1] = (troupe_karg_t){.kind = TROUPE_KARG_STATIC_IDX, .value = 0};
        cr_assert_eq(vt->launch(drv, q, code, bad, 3), TROUPE_INVALID_ARGUMENT);
        const char *msg = troupe_last_error();
        cr_assert(s_has(msg, "argument 1") && s_has(msg, "parameter 1") && s_has(msg, "buffer"),
                  "%s", msg);

        memcpy(bad, args, sizeof bad);
        bad[2].buf.size_bytes = 8; /* smaller than the node */
        cr_assert_eq(vt->launch(drv, q, code, bad, 3), TROUPE_INVALID_ARGUMENT);
        cr_assert(s_has(troupe_last_error(), "parameter 2"), "%s", troupe_last_error());

        memcpy(bad, args, sizeof bad);
        bad[0].buf.offset = 1000; /* beyond the pool */
        cr_assert_eq(vt->launch(drv, q, code, bad, 3), TROUPE_INVALID_ARGUMENT);
        memcpy(bad, args, sizeof bad);
        bad[0].buf.pool_id = 42;
        cr_assert_eq(vt->launch(drv, q, code, bad, 3), TROUPE_NOT_FOUND);
        memcpy(bad, args, sizeof bad);
        bad[0].ordinal = 3;
        cr_assert_eq(vt->launch(drv, q, code, bad, 3), TROUPE_NOT_FOUND);

        cr_assert_eq(vt->launch(drv, q, code, args, 3), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
        vt->queue_destroy(drv, q);
        vt->code_release(drv, code);
        s_axpb_destroy(&x);
        vt->close(drv);
    }
}

/* row[j] = m[s, j] for a static index s in 0..2 over a 3x4 matrix. */
Test(compile, static_index_is_read_at_each_launch, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        const troupe_driver_vtable_t *vt = drv->vt;
        int64_t mdims[2] = {3, 4}, rdims[1] = {4};
        troupe_tnode_t *m = s_node("m", 2, mdims), *row = s_node("row", 1, rdims);
        troupe_ll_proc_t *p = NULL;
        cr_assert_eq(troupe_ll_proc_new("pick_row", &p), TROUPE_OK);
        int32_t s = troupe_ll_proc_add_static_symbol(p, "s", 3);
        int32_t j = troupe_ll_proc_add_symbol(p, NULL);
        troupe_axis_index_t mi[2] = {troupe_idx_sym(s), troupe_idx_sym(j)};
        troupe_axis_index_t ri[1] = {troupe_idx_sym(j)};
        p->body =
            troupe_ll_for(p, j, 0, 3, troupe_ll_set(p, row, ri, troupe_sc_get(p, m, mi)), false);
        cr_assert_eq(troupe_ll_proc_validate(p), TROUPE_OK, "%s", troupe_last_error());

        troupe_cgen_result_t *gen = NULL;
        cr_assert_eq(troupe_cgen_emit(p, TROUPE_CGEN_C, &gen), TROUPE_OK, "%s",
                     troupe_last_error());
        cr_assert_eq(gen->nparams, 3);
        troupe_karg_t args[3];
        ptrdiff_t km = troupe_cgen_find_node_param(gen, m);
        ptrdiff_t kr = troupe_cgen_find_node_param(gen, row);
        ptrdiff_t ks = troupe_cgen_find_static_param(gen, "s");
        cr_assert(km >= 0 && kr >= 0 && ks >= 0);
        troupe_cgen_result_destroy(&gen);
        args[km] = (troupe_karg_t){.kind = TROUPE_KARG_BUFFER, .buf = {1, 0, 48}};
        args[kr] = (troupe_karg_t){.kind = TROUPE_KARG_BUFFER, .buf = {1, 64, 16}};

        troupe_dcode_t *code = NULL;
        cr_assert_eq(vt->compile(drv, p, &code), TROUPE_OK, "%s", troupe_last_error());
        troupe_dqueue_t *q = NULL;
        cr_assert_eq(vt->queue_create(drv, 0, &q), TROUPE_OK);
        cr_assert_eq(vt->alloc_pool(drv, 0, 1, 128, true), TROUPE_OK);
        float mv[12], rv[4];
        for (int k = 0; k < 12; k++)
            mv[k] = (float)(k * k);
        cr_assert_eq(vt->h2d(drv, q, args[km].buf, mv, sizeof mv), TROUPE_OK);
        for (int64_t sv = 0; sv < 3; sv++) {
            args[ks] = (troupe_karg_t){.kind = TROUPE_KARG_STATIC_IDX, .value = sv};
            cr_assert_eq(vt->launch(drv, q, code, args, 3), TROUPE_OK, "%s", troupe_last_error());
            cr_assert_eq(vt->d2h(drv, q, rv, args[kr].buf, sizeof rv), TROUPE_OK);
            for (int k = 0; k < 4; k++)
                cr_assert_float_eq(rv[k], mv[sv * 4 + k], 0.0f, "s=%d row[%d]", (int)sv, k);
        }
        args[ks].value = 3;
        cr_assert_eq(vt->launch(drv, q, code, args, 3), TROUPE_INVALID_ARGUMENT);
        cr_assert(s_has(troupe_last_error(), "static index"), "%s", troupe_last_error());
        args[ks].value = -1;
        cr_assert_eq(vt->launch(drv, q, code, args, 3), TROUPE_INVALID_ARGUMENT);

        cr_assert_eq(vt->free_pool(drv, 0, 1), TROUPE_OK);
        vt->queue_destroy(drv, q);
        vt->code_release(drv, code);
        troupe_ll_proc_destroy(&p);
        troupe_tnode_release(&m);
        troupe_tnode_release(&row);
        vt->close(drv);
    }
}

/* CC is a wrapper that counts its runs, then runs the real compiler. */
static char s_count_file[400];
static void s_counting_cc(void)
{
    snprintf(s_count_file, sizeof s_count_file, "%s/cc-runs", s_tmpdir);
    char body[1024];
    snprintf(body, sizeof body, "echo run >> '%s'\nexec cc \"$@\"\n", s_count_file);
    cr_assert_eq(troupe_config_set_cc(s_script("counting-cc", body)), TROUPE_OK);
}

Test(compile, cache_hit_does_not_run_the_compiler, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    s_counting_cc();
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        s_axpb_t x = s_axpb_new("axpb_cached");
        troupe_dcode_t *c1 = NULL, *c2 = NULL;
        int before = s_count_lines(s_count_file);
        cr_assert_eq(drv->vt->compile(drv, x.proc, &c1), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_eq(drv->vt->compile(drv, x.proc, &c2), TROUPE_OK, "%s", troupe_last_error());
        cr_assert_eq(s_count_lines(s_count_file), before + 1,
                     "%s: one compiler run for two compiles", s_names[d]);
        s_check_axpb(drv, c2, &x);
        drv->vt->code_release(drv, c1);
        s_check_axpb(drv, c2, &x); /* still loaded after the first release */
        drv->vt->code_release(drv, c2);
        s_axpb_destroy(&x);
        drv->vt->close(drv);
    }
    /* Each driver above built its own nodes (new ids, so another source): one run each. */
    int sources = s_count_cache_files(".c");
    cr_assert_eq(s_count_lines(s_count_file), sources);

    /* Other flags are another cache entry. */
    cr_assert_eq(troupe_config_set_cc_flags("-O1 -shared -fPIC"), TROUPE_OK);
    troupe_driver_t *drv = s_open("cpu");
    s_axpb_t x = s_axpb_new("axpb_cached");
    troupe_dcode_t *c = NULL;
    cr_assert_eq(drv->vt->compile(drv, x.proc, &c), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(s_count_lines(s_count_file), sources + 1);
    drv->vt->code_release(drv, c);
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}

typedef struct s_compile_worker {
    troupe_driver_t *drv;
    const troupe_ll_proc_t *proc;
    troupe_dcode_t *code;
    troupe_status_t st;
} s_compile_worker_t;

static void *s_compile_worker(void *arg)
{
    s_compile_worker_t *w = arg;
    w->st = w->drv->vt->compile(w->drv, w->proc, &w->code);
    return NULL;
}

/* Four threads compile one procedure at once: the key's compile lock lets one of them run the
 * compiler (slowed so that the others arrive while it runs) and the others load its object.
 * The lock is a file lock, so processes (the ranks of a run) share it the same way. */
Test(compile, concurrent_compiles_of_one_procedure, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    snprintf(s_count_file, sizeof s_count_file, "%s/cc-runs", s_tmpdir);
    char body[1024];
    snprintf(body, sizeof body, "echo run >> '%s'\nsleep 0.5\nexec cc \"$@\"\n", s_count_file);
    cr_assert_eq(troupe_config_set_cc(s_script("slow-counting-cc", body)), TROUPE_OK);
    troupe_driver_t *drv = s_open("cpu");
    s_axpb_t x = s_axpb_new("axpb_racing");
    pthread_t t[4];
    s_compile_worker_t w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (s_compile_worker_t){drv, x.proc, NULL, TROUPE_INTERNAL};
        cr_assert_eq(pthread_create(&t[i], NULL, s_compile_worker, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(w[i].st, TROUPE_OK, "worker %d", i);
        s_check_axpb(drv, w[i].code, &x);
        drv->vt->code_release(drv, w[i].code);
    }
    cr_assert_eq(s_count_cache_files(".so"), 1);
    cr_assert_eq(s_count_cache_files("tmp.*"), 0, "no temporary files are left");
    cr_assert_eq(s_count_lines(s_count_file), 1, "one compiler run for four concurrent compiles");
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}

Test(compile, compiler_error_is_device_error_with_its_message, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    cr_assert_eq(troupe_config_set_cc(s_script("failing-cc",
                                               "echo 'kernel.c:3:1: error: synthetic failure' >&2\n"
                                               "echo 'second line of output' >&2\n"
                                               "exit 1\n")),
                 TROUPE_OK);
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        s_axpb_t x = s_axpb_new("axpb_failing");
        troupe_dcode_t *code = (troupe_dcode_t *)1;
        cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_DEVICE_ERROR);
        cr_assert_null(code);
        const char *msg = troupe_last_error();
        cr_assert(s_has(msg, "synthetic failure") && s_has(msg, "second line of output") &&
                      s_has(msg, "exit 1") && s_has(msg, "axpb_failing"),
                  "%s", msg);
        s_axpb_destroy(&x);
        drv->vt->close(drv);
    }
    cr_assert_eq(s_count_cache_files(".so"), 0, "nothing is cached from a failed compile");
}

Test(compile, bogus_flag_is_device_error, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    cr_assert_eq(troupe_config_set_cc_flags("-O1 -shared -fPIC --troupe-bogus-flag"), TROUPE_OK);
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        s_axpb_t x = s_axpb_new("axpb_bogus");
        troupe_dcode_t *code = NULL;
        cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_DEVICE_ERROR);
        cr_assert(s_has(troupe_last_error(), "troupe-bogus-flag"), "%s", troupe_last_error());
        s_axpb_destroy(&x);
        drv->vt->close(drv);
    }
}

/* A compiler that hangs (and leaves a child of its own sleeping) is killed with its process
 * group at TROUPE_CC_TIMEOUT_S; the error names the command and the time. */
Test(compile, hung_compiler_is_killed_at_the_deadline, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    char pid_file[400], body[1024];
    snprintf(pid_file, sizeof pid_file, "%s/grandchild.pid", s_tmpdir);
    snprintf(body, sizeof body, "sleep 300 &\necho $! > '%s'\nsleep 300\n", pid_file);
    cr_assert_eq(troupe_config_set_cc(s_script("hanging-cc", body)), TROUPE_OK);
    cr_assert_eq(setenv("TROUPE_CC_TIMEOUT_S", "1", 1), 0);
    troupe_driver_t *drv = s_open("cpu");
    s_axpb_t x = s_axpb_new("axpb_hanging");
    troupe_dcode_t *code = NULL;
    troupe_status_t st = drv->vt->compile(drv, x.proc, &code);
    const char *msg = troupe_last_error();
    cr_assert_eq(st, TROUPE_DEVICE_ERROR, "%s", msg);
    cr_assert_null(code);
    cr_assert(s_has(msg, "did not finish within 1 s") && s_has(msg, "hanging-cc") &&
                  s_has(msg, "axpb_hanging") && s_has(msg, "TROUPE_CC_TIMEOUT_S"),
              "%s", msg);
    /* the compiler's own child went with it (killed; reaped by init, so wait for that: up to a
     * minute, as below, for a loaded machine) */
    FILE *f = fopen(pid_file, "r");
    cr_assert_not_null(f);
    int gc = 0;
    cr_assert_eq(fscanf(f, "%d", &gc), 1);
    fclose(f);
    bool gone = false;
    for (int i = 0; i < 6000 && !gone; i++) {
        char stat_path[64], state = 0;
        snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", gc);
        FILE *sf = fopen(stat_path, "r");
        gone = !sf || (fscanf(sf, "%*d %*s %c", &state) == 1 && state == 'Z');
        if (sf)
            fclose(sf);
        if (!gone)
            nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    if (!gone)
        kill(gc, SIGKILL);
    cr_assert(gone, "the hung compiler's child %d still runs", gc);

    /* a malformed deadline is refused by name */
    cr_assert_eq(setenv("TROUPE_CC_TIMEOUT_S", "soon", 1), 0);
    cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_INVALID_ARGUMENT);
    cr_assert(s_has(troupe_last_error(), "TROUPE_CC_TIMEOUT_S='soon'"), "%s", troupe_last_error());
    unsetenv("TROUPE_CC_TIMEOUT_S");
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}

/* Whether process `pid` has ended (no such process, or a zombie nobody reaped yet), polled
 * every 10 ms for up to `ms` milliseconds. */
static bool s_process_gone(int pid, int ms)
{
    for (int waited = 0;; waited += 10) {
        char stat_path[64], state = 0;
        snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", pid);
        FILE *sf = fopen(stat_path, "r");
        bool gone = !sf || (fscanf(sf, "%*d %*s %c", &state) == 1 && state == 'Z');
        if (sf)
            fclose(sf);
        if (gone)
            return true;
        if (waited >= ms)
            return false;
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
}

static int s_read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

/* A process killed with SIGKILL while it compiles takes its compiler with it: the compiler
 * (here a script that sleeps, and a child of its own standing for cc1) is gone soon after. */
Test(compile, a_killed_process_leaves_no_compiler_running, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    char cc_pid[400], gc_pid[400], body[2048];
    snprintf(cc_pid, sizeof cc_pid, "%s/cc.pid", s_tmpdir);
    snprintf(gc_pid, sizeof gc_pid, "%s/grandchild.pid", s_tmpdir);
    snprintf(body, sizeof body,
             "sleep 300 &\necho $! > '%s'\necho $$ > '%s.tmp' && mv '%s.tmp' '%s'\nwait\n",
             gc_pid, cc_pid, cc_pid, cc_pid);
    cr_assert_eq(troupe_config_set_cc(s_script("sleeping-cc", body)), TROUPE_OK);
    troupe_driver_t *drv = s_open("sync");
    s_axpb_t x = s_axpb_new("axpb_orphaned");
    pid_t child = fork();
    cr_assert(child >= 0);
    if (child == 0) { /* the "trainer": compiles until it is killed */
        troupe_dcode_t *code = NULL;
        (void)drv->vt->compile(drv, x.proc, &code);
        _exit(0);
    }
    int cc = 0, gc = 0;
    for (int i = 0; i < 6000 && cc == 0; i++) { /* up to a minute for the compiler to start */
        cc = s_read_pid(cc_pid);
        if (cc == 0)
            nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    gc = s_read_pid(gc_pid);
    kill(child, SIGKILL);
    int ws = 0;
    cr_assert_eq(waitpid(child, &ws, 0), child);
    cr_assert(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "the compiling process ended first");
    cr_assert(cc > 0 && gc > 0, "the compiler never started (%d, %d)", cc, gc);
    bool cc_gone = s_process_gone(cc, 60000), gc_gone = s_process_gone(gc, 60000);
    if (!cc_gone)
        kill(cc, SIGKILL);
    if (!gc_gone)
        kill(gc, SIGKILL);
    cr_assert(cc_gone, "the compiler %d outlived the process that ran it", cc);
    cr_assert(gc_gone, "the compiler's child %d outlived the process that ran it", gc);
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}

/* A malformed split size or job count is refused by name (the compile cache's knobs are read at
 * each compile). */
Test(compile, malformed_split_knobs_are_refused_by_name, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    troupe_driver_t *drv = s_open("sync");
    s_axpb_t x = s_axpb_new("axpb_knobs");
    troupe_dcode_t *code = NULL;
    cr_assert_eq(setenv("TROUPE_CC_SPLIT_BYTES", "lots", 1), 0);
    cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_INVALID_ARGUMENT);
    cr_assert(s_has(troupe_last_error(), "TROUPE_CC_SPLIT_BYTES='lots'"), "%s",
              troupe_last_error());
    unsetenv("TROUPE_CC_SPLIT_BYTES");
    cr_assert_eq(setenv("TROUPE_CC_JOBS", "0", 1), 0);
    cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_INVALID_ARGUMENT);
    cr_assert(s_has(troupe_last_error(), "TROUPE_CC_JOBS='0'"), "%s", troupe_last_error());
    unsetenv("TROUPE_CC_JOBS");
    cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_OK, "%s", troupe_last_error());
    drv->vt->code_release(drv, code);
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}

Test(compile, missing_compiler_is_device_error_naming_it, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    cr_assert_eq(troupe_config_set_cc("troupe-no-such-compiler-xyz"), TROUPE_OK);
    S_FOR_EACH_DRIVER(d)
    {
        troupe_driver_t *drv = s_open(s_names[d]);
        s_axpb_t x = s_axpb_new("axpb_nocc");
        troupe_dcode_t *code = NULL;
        cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_DEVICE_ERROR);
        cr_assert(s_has(troupe_last_error(), "troupe-no-such-compiler-xyz") &&
                      s_has(troupe_last_error(), "not found"),
                  "%s", troupe_last_error());
        s_axpb_destroy(&x);
        drv->vt->close(drv);
    }
}

Test(compile, unwritable_cache_dir_is_device_error, .fini = s_remove_tmpdir)
{
    s_fresh_cache();
    /* A regular file where a directory component should be. */
    char file[400], dir[500];
    snprintf(file, sizeof file, "%s/plainfile", s_tmpdir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    cr_assert_eq(troupe_config_set_cache_dir(dir), TROUPE_OK);
    troupe_driver_t *drv = s_open("sync");
    s_axpb_t x = s_axpb_new("axpb_nodir");
    troupe_dcode_t *code = NULL;
    cr_assert_eq(drv->vt->compile(drv, x.proc, &code), TROUPE_DEVICE_ERROR);
    cr_assert(s_has(troupe_last_error(), "cache directory"), "%s", troupe_last_error());
    s_axpb_destroy(&x);
    drv->vt->close(drv);
}
