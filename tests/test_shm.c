/* Tests for base/shared_memory: shareable host memory regions (memfd). Allocation (zero-filled,
 * page-aligned, counted, bounded by TROUPE__SHM_MAX_REGIONS), lookup of addresses and spans
 * (inside, at the end, straddling it, outside, ordinary memory), freeing (only a region's
 * start), mapping a region through its reference as a peer would (own process through
 * /proc/self's pid: a write through one mapping is seen through the other; the pages outlive
 * their owner's free), and the mapping errors (wrong inode or size, gone descriptor: UNAVAILABLE
 * naming the process; a bad reference: INVALID_ARGUMENT). Linux only (memfd_create). */
#define _GNU_SOURCE
#include "base/shared_memory_impl.h"
#include "base/status.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <sys/resource.h>
#include <unistd.h>

static size_t s_page(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

static bool s_all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

Test(shm, alloc_is_zero_filled_page_aligned_and_counted)
{
    size_t page = s_page();
    size_t n0 = troupe__shm_count();
    unsigned char *a = troupe__shm_alloc(3 * page + 5);
    cr_assert_not_null(a);
    cr_expect_eq((uintptr_t)a % page, 0, "region base %p not page-aligned", (void *)a);
    cr_expect_eq(troupe__shm_count(), n0 + 1);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a, 1, &ref));
    cr_expect_eq(ref.len, (int64_t)(4 * page), "3 pages + 5 bytes rounded to %lld bytes",
                 (long long)ref.len);
    cr_expect(s_all_zero(a, (size_t)ref.len), "a new region is not zero-filled");
    memset(a, 0xab, (size_t)ref.len); /* the whole rounded length is writable */

    unsigned char *b = troupe__shm_alloc(0); /* still a region, one page */
    cr_assert_not_null(b);
    cr_expect_eq((uintptr_t)b % page, 0);
    cr_expect_eq(troupe__shm_count(), n0 + 2);
    cr_assert(troupe__shm_find(b, 0, &ref));
    cr_expect_eq(ref.len, (int64_t)page);
    cr_expect(s_all_zero(b, page));

    cr_expect(troupe__shm_free(a));
    cr_expect_eq(troupe__shm_count(), n0 + 1);
    cr_expect(troupe__shm_free(b));
    cr_expect_eq(troupe__shm_count(), n0);
    /* a new region over possibly the same addresses is zero-filled again */
    a = troupe__shm_alloc(page);
    cr_assert_not_null(a);
    cr_expect(s_all_zero(a, page));
    cr_expect(troupe__shm_free(a));
}

Test(shm, alloc_refuses_impossible_sizes)
{
    size_t n0 = troupe__shm_count();
    cr_expect_null(troupe__shm_alloc(SIZE_MAX));
    cr_expect_null(troupe__shm_alloc(SIZE_MAX - 1));
    cr_expect_eq(troupe__shm_count(), n0);
}

Test(shm, find_locates_spans_inside_a_region_only)
{
    size_t page = s_page(), len = 2 * page;
    char *a = troupe__shm_alloc(len);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref, none;
    memset(&none, 0x5a, sizeof none);

    cr_assert(troupe__shm_find(a + 100, 200, &ref), "inside");
    cr_expect_neq(ref.id, 0);
    cr_expect_eq(ref.pid, (int64_t)getpid());
    cr_expect_geq(ref.fd, 0);
    cr_expect_eq(ref.len, (int64_t)len);
    cr_expect_eq(ref.off, 100);
    uint64_t id = ref.id, ino = ref.ino;

    cr_assert(troupe__shm_find(a, len, &ref), "the whole region");
    cr_expect_eq(ref.off, 0);
    cr_expect_eq(ref.id, id);
    cr_expect_eq(ref.ino, ino);
    cr_assert(troupe__shm_find(a + len - 1, 1, &ref), "the last byte");
    cr_expect_eq(ref.off, (int64_t)len - 1);
    cr_assert(troupe__shm_find(a + len - 64, 64, &ref), "ending at the region's end");
    cr_expect_eq(ref.off, (int64_t)len - 64);

    memcpy(&ref, &none, sizeof ref);
    cr_expect_not(troupe__shm_find(a + len - 64, 65, &ref), "straddling the end by one byte");
    cr_expect_not(troupe__shm_find(a, len + 1, &ref), "one byte longer than the region");
    cr_expect_not(troupe__shm_find(a + 1, SIZE_MAX, &ref), "a huge span");
    cr_expect_not(troupe__shm_find(a + len, 1, &ref), "just past the end");
    cr_expect_not(troupe__shm_find(a + len + page, 1, &ref), "a page past the end");
    cr_expect_not(troupe__shm_find(a - 1, 1, &ref), "just before the start");
    cr_expect_not(troupe__shm_find(a - 1, 2, &ref), "straddling the start");
    cr_expect_not(troupe__shm_find(NULL, 1, &ref), "NULL");
    cr_expect_eq(memcmp(&ref, &none, sizeof ref), 0, "a failed lookup wrote *ref");

    char *m = malloc(4096);
    cr_assert_not_null(m);
    cr_expect_not(troupe__shm_find(m, 1, &ref), "ordinary (malloc) memory");
    char stack[64];
    cr_expect_not(troupe__shm_find(stack, sizeof stack, &ref), "the stack");
    free(m);

    cr_expect(troupe__shm_free(a));
    cr_expect_not(troupe__shm_find(a, 1, &ref), "a freed region");
}

Test(shm, find_tells_many_regions_apart)
{
    enum { N = 40 };
    size_t page = s_page();
    char *r[N];
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        r[i] = troupe__shm_alloc((size_t)(1 + i % 3) * page);
        cr_assert_not_null(r[i]);
        r[i][0] = (char)i;
    }
    for (int i = 0; i < N; i++) {
        troupe__shm_ref_t ref;
        cr_assert(troupe__shm_find(r[i] + page / 2, 8, &ref), "region %d", i);
        cr_expect_eq(ref.len, (int64_t)((size_t)(1 + i % 3) * page), "region %d's length", i);
        cr_expect_eq(ref.off, (int64_t)(page / 2));
        ids[i] = ref.id;
        for (int j = 0; j < i; j++)
            cr_expect_neq(ids[j], ids[i], "regions %d and %d share id %llu", j, i,
                          (unsigned long long)ids[i]);
    }
    /* free every other one, out of order: the others are still found, with their ids */
    for (int i = N - 1; i >= 0; i -= 2)
        cr_expect(troupe__shm_free(r[i]));
    for (int i = 0; i < N; i++) {
        troupe__shm_ref_t ref;
        bool found = troupe__shm_find(r[i], 1, &ref);
        if (i % 2 == 0) {
            cr_expect(found, "region %d lost after freeing its neighbours", i);
            cr_expect_eq(ref.id, ids[i]);
            cr_expect_eq(r[i][0], (char)i);
        }
    }
    /* ids are never reused */
    char *x = troupe__shm_alloc(page);
    cr_assert_not_null(x);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(x, 1, &ref));
    for (int i = 0; i < N; i++)
        cr_expect_neq(ref.id, ids[i], "id %llu reused", (unsigned long long)ref.id);
    cr_expect(troupe__shm_free(x));
    for (int i = 0; i < N; i += 2)
        cr_expect(troupe__shm_free(r[i]));
}

Test(shm, free_takes_only_the_start_of_a_region)
{
    size_t page = s_page();
    size_t n0 = troupe__shm_count();
    char *a = troupe__shm_alloc(2 * page);
    cr_assert_not_null(a);
    cr_expect_not(troupe__shm_free(NULL));
    char *m = malloc(64);
    cr_assert_not_null(m);
    cr_expect_not(troupe__shm_free(m), "ordinary memory");
    m[0] = 1; /* untouched: still ours */
    free(m);
    cr_expect_not(troupe__shm_free(a + page), "inside a region");
    cr_expect_not(troupe__shm_free(a + 1), "inside a region");
    cr_expect_eq(troupe__shm_count(), n0 + 1, "a refused free changed the count");
    a[2 * page - 1] = 7; /* still mapped */
    cr_expect(troupe__shm_free(a));
    cr_expect_eq(troupe__shm_count(), n0);
    cr_expect_not(troupe__shm_free(a), "freed twice");
}

Test(shm, own_region_maps_through_its_ref_and_shares_pages)
{
    size_t page = s_page();
    char *a = troupe__shm_alloc(3 * page);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a + page, 16, &ref));
    void *peer = (void *)0x1;
    troupe_status_t st = troupe__shm_map(&ref, &peer);
    cr_assert_eq(st, TROUPE_OK, "troupe__shm_map: %s: %s", troupe_status_str(st),
                 troupe_last_error());
    cr_assert_not_null(peer);
    cr_expect_neq(peer, (void *)a, "a second mapping at the same address");
    char *b = peer;
    /* the mapping covers the whole region (ref.off is ignored) */
    strcpy(a + 10, "owner");
    cr_expect_str_eq(b + 10, "owner");
    strcpy(b + 3 * page - 6, "peer!");
    cr_expect_str_eq(a + 3 * page - 6, "peer!");
    memset(b + page, 0x3c, page);
    cr_expect_eq((unsigned char)a[2 * page - 1], 0x3c);
    cr_expect_eq((unsigned char)a[2 * page], 0);

    /* the owner's free gives the pages back at once: a peer's stale mapping reads zeros (the
     * file keeps its size: no fault) */
    cr_expect(troupe__shm_free(a));
    cr_expect_eq(b[10], 0);
    cr_expect_eq((unsigned char)b[page], 0);
    b[0] = 1;
    troupe__shm_unmap(peer, ref.len);
    troupe__shm_unmap(NULL, ref.len); /* NULL-safe */
}

/* troupe__shm_free_keep: the owner lets go of the region (it is no longer found, and its start
 * no longer frees), but a peer's mapping still reads what was last written there (a control
 * word a slower peer polls after its owner stopped) */
Test(shm, free_keep_leaves_the_last_contents_to_peers)
{
    char *a = troupe__shm_alloc(1);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a, 1, &ref));
    void *peer = NULL;
    troupe_status_t st = troupe__shm_map(&ref, &peer);
    cr_assert_eq(st, TROUPE_OK, "troupe__shm_map: %s: %s", troupe_status_str(st),
                 troupe_last_error());
    strcpy(a + 64, "departed 7");
    cr_expect(troupe__shm_free_keep(a));
    cr_expect_str_eq((char *)peer + 64, "departed 7");
    troupe__shm_ref_t again;
    cr_expect_not(troupe__shm_find(a, 1, &again), "found after free_keep");
    cr_expect_not(troupe__shm_free_keep(a), "freed twice");
    cr_expect_not(troupe__shm_free_keep(NULL));
    troupe__shm_unmap(peer, ref.len);
}

Test(shm, map_refuses_another_inode_naming_the_process)
{
    char *a = troupe__shm_alloc(1);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a, 1, &ref));
    troupe__shm_ref_t bad = ref;
    bad.ino = ref.ino + 1;
    void *p = (void *)0x1;
    troupe_status_t st = troupe__shm_map(&bad, &p);
    cr_expect_eq(st, TROUPE_UNAVAILABLE, "got %s", troupe_status_str(st));
    cr_expect_null(p);
    char want[64];
    snprintf(want, sizeof want, "process %lld", (long long)getpid());
    cr_expect(strstr(troupe_last_error(), want) != NULL, "message '%s' does not name '%s'",
              troupe_last_error(), want);
    cr_expect(strstr(troupe_last_error(), "inode") != NULL, "message '%s'", troupe_last_error());

    /* a descriptor that is not a region at all (stdin's inode differs too) */
    bad = ref;
    bad.fd = 0;
    p = (void *)0x1;
    st = troupe__shm_map(&bad, &p);
    if (st == TROUPE_OK) /* cannot happen unless stdin is this very memfd */
        troupe__shm_unmap(p, bad.len);
    cr_expect_eq(st, TROUPE_UNAVAILABLE, "fd 0: got %s", troupe_status_str(st));

    /* a region larger than described is fine; one smaller is not the region */
    bad = ref;
    bad.len = ref.len + (int64_t)s_page();
    p = (void *)0x1;
    st = troupe__shm_map(&bad, &p);
    cr_expect_eq(st, TROUPE_UNAVAILABLE, "len beyond the file: got %s", troupe_status_str(st));
    cr_expect_null(p);
    cr_expect(strstr(troupe_last_error(), want) != NULL, "message '%s'", troupe_last_error());
    cr_expect(troupe__shm_free(a));
}

Test(shm, map_of_a_gone_region_is_unavailable_naming_the_process)
{
    char *a = troupe__shm_alloc(1);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a, 1, &ref));
    cr_expect(troupe__shm_free(a)); /* its descriptor is closed */
    void *p = (void *)0x1;
    troupe_status_t st = troupe__shm_map(&ref, &p);
    if (st == TROUPE_OK)
        troupe__shm_unmap(p, ref.len);
    cr_expect_eq(st, TROUPE_UNAVAILABLE, "got %s", troupe_status_str(st));
    char want[64];
    snprintf(want, sizeof want, "process %lld", (long long)getpid());
    cr_expect(strstr(troupe_last_error(), want) != NULL, "message '%s' does not name '%s'",
              troupe_last_error(), want);

    /* a process that does not exist (pid_max is at most 2^22) */
    ref.pid = (int64_t)1 << 30;
    p = (void *)0x1;
    st = troupe__shm_map(&ref, &p);
    cr_expect_eq(st, TROUPE_UNAVAILABLE, "got %s", troupe_status_str(st));
    cr_expect_null(p);
    cr_expect(strstr(troupe_last_error(), "process 1073741824") != NULL, "message '%s'",
              troupe_last_error());
}

Test(shm, map_refuses_a_bad_ref)
{
    char *a = troupe__shm_alloc(1);
    cr_assert_not_null(a);
    troupe__shm_ref_t ref;
    cr_assert(troupe__shm_find(a, 1, &ref));
    const struct {
        const char *what;
        troupe__shm_ref_t ref;
    } cases[] = {
        {"id 0 (not shareable)",
         {.id = 0, .ino = ref.ino, .pid = ref.pid, .fd = ref.fd, .len = ref.len}},
        {"len 0", {.id = ref.id, .ino = ref.ino, .pid = ref.pid, .fd = ref.fd, .len = 0}},
        {"len < 0", {.id = ref.id, .ino = ref.ino, .pid = ref.pid, .fd = ref.fd, .len = -4096}},
        {"pid 0", {.id = ref.id, .ino = ref.ino, .pid = 0, .fd = ref.fd, .len = ref.len}},
        {"fd < 0", {.id = ref.id, .ino = ref.ino, .pid = ref.pid, .fd = -1, .len = ref.len}},
        {"all zero", {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        void *p = (void *)0x1;
        troupe_status_t st = troupe__shm_map(&cases[i].ref, &p);
        cr_expect_eq(st, TROUPE_INVALID_ARGUMENT, "%s: got %s", cases[i].what,
                     troupe_status_str(st));
        cr_expect_null(p, "%s", cases[i].what);
        cr_expect(strstr(troupe_last_error(), "bad region reference") != NULL, "%s: '%s'",
                  cases[i].what, troupe_last_error());
    }
    cr_expect(troupe__shm_free(a));
}

Test(shm, at_most_max_regions_at_once)
{
    /* each region holds a descriptor: make room for the table's bound */
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < TROUPE__SHM_MAX_REGIONS + 64 && rl.rlim_max >= TROUPE__SHM_MAX_REGIONS + 64) {
        rl.rlim_cur = TROUPE__SHM_MAX_REGIONS + 64;
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    if (rl.rlim_cur < TROUPE__SHM_MAX_REGIONS + 64)
        cr_skip_test("RLIMIT_NOFILE %llu is below %d descriptors", (unsigned long long)rl.rlim_cur,
                     TROUPE__SHM_MAX_REGIONS + 64);
    size_t n0 = troupe__shm_count();
    size_t room = TROUPE__SHM_MAX_REGIONS - n0;
    void **r = calloc(room, sizeof *r);
    cr_assert_not_null(r);
    for (size_t i = 0; i < room; i++) {
        r[i] = troupe__shm_alloc(1);
        cr_assert_not_null(r[i], "region %zu of %d", n0 + i + 1, TROUPE__SHM_MAX_REGIONS);
    }
    cr_expect_eq(troupe__shm_count(), TROUPE__SHM_MAX_REGIONS);
    cr_expect_null(troupe__shm_alloc(1), "region %d beyond the bound", TROUPE__SHM_MAX_REGIONS + 1);
    cr_expect_eq(troupe__shm_count(), TROUPE__SHM_MAX_REGIONS);
    cr_expect(troupe__shm_free(r[room / 2]));
    r[room / 2] = troupe__shm_alloc(1);
    cr_expect_not_null(r[room / 2], "room after a free");
    for (size_t i = 0; i < room; i++)
        cr_expect(troupe__shm_free(r[i]));
    cr_expect_eq(troupe__shm_count(), n0);
    free(r);
}

Test(shm, pools_switch)
{
    bool was = troupe__shm_pools();
    troupe__shm_set_pools(true);
    cr_expect(troupe__shm_pools());
    troupe__shm_set_pools(false);
    cr_expect_not(troupe__shm_pools());
    troupe__shm_set_pools(was);
}

/* Threads allocating, looking up and freeing at once: every thread always finds its own
 * regions with their own ids, and the count ends where it began. */
static void *s_churn(void *arg)
{
    uintptr_t t = (uintptr_t)arg;
    size_t page = s_page();
    for (int round = 0; round < 200; round++) {
        char *r[4];
        uint64_t id[4];
        for (int i = 0; i < 4; i++) {
            r[i] = troupe__shm_alloc((size_t)(1 + (i + round) % 2) * page);
            if (r[i] == NULL)
                return (void *)"alloc failed";
            r[i][0] = (char)(t * 16 + (uintptr_t)i);
            troupe__shm_ref_t ref;
            if (!troupe__shm_find(r[i], 1, &ref))
                return (void *)"own region not found";
            id[i] = ref.id;
        }
        for (int i = 0; i < 4; i++) {
            troupe__shm_ref_t ref;
            if (!troupe__shm_find(r[i] + 1, 1, &ref) || ref.id != id[i] || ref.off != 1)
                return (void *)"own region found with another id";
            if (r[i][0] != (char)(t * 16 + (uintptr_t)i))
                return (void *)"own region's byte changed";
            if (!troupe__shm_free(r[i]))
                return (void *)"free refused";
        }
    }
    return NULL;
}

Test(shm, thread_safe_table)
{
    enum { T = 4 };
    size_t n0 = troupe__shm_count();
    pthread_t th[T];
    for (uintptr_t t = 0; t < T; t++)
        cr_assert_eq(pthread_create(&th[t], NULL, s_churn, (void *)t), 0);
    for (int t = 0; t < T; t++) {
        void *res = NULL;
        pthread_join(th[t], &res);
        cr_expect_null(res, "thread %d: %s", t, res ? (const char *)res : "");
    }
    cr_expect_eq(troupe__shm_count(), n0);
}

#else

Test(shm, not_linux_has_no_regions)
{
    cr_expect_null(troupe__shm_alloc(64));
    cr_expect_not(troupe__shm_free(NULL));
    troupe__shm_ref_t ref = {.id = 1, .pid = 1, .fd = 3, .len = 4096};
    void *p = NULL;
    cr_expect_eq(troupe__shm_map(&ref, &p), TROUPE_UNAVAILABLE);
}

#endif
