/* troupe — shareable host memory (base/shared_memory_impl.h). */
#define _GNU_SOURCE
#include "base/shared_memory_impl.h"

#include "base/alloc.h"
#include "base/vec.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

typedef struct s_region {
    char *base;
    size_t len;
    int fd;
    uint64_t id, ino;
} s_region_t;

static struct {
    pthread_mutex_t mu;
    s_region_t *r; /* sorted by base */
    size_t n, cap;
    uint64_t next_id;
    atomic_bool pools;
} s_shm = {.mu = PTHREAD_MUTEX_INITIALIZER};

void troupe__shm_set_pools(bool on)
{
    atomic_store(&s_shm.pools, on);
}

bool troupe__shm_pools(void)
{
    return atomic_load(&s_shm.pools);
}

/* Index of the last region whose base is <= p, or s_shm.n when none (caller holds mu). */
static size_t s_floor(const void *p)
{
    size_t lo = 0, hi = s_shm.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((const char *)p < s_shm.r[mid].base)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo == 0 ? s_shm.n : lo - 1;
}

size_t troupe__shm_count(void)
{
    pthread_mutex_lock(&s_shm.mu);
    size_t n = s_shm.n;
    pthread_mutex_unlock(&s_shm.mu);
    return n;
}

#ifdef __linux__

/* Regions allowed at once: TROUPE__SHM_MAX_REGIONS, and at most a quarter of this process's
 * descriptor limit (each region holds one open; the program and MPI need the rest). */
static size_t s_max_regions(void)
{
    struct rlimit rl;
    size_t max = TROUPE__SHM_MAX_REGIONS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < max)
        max = (size_t)(rl.rlim_cur / 4);
    return max;
}

void *troupe__shm_alloc(size_t size_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    if (size_bytes == 0)
        size_bytes = 1;
    if (size_bytes > SIZE_MAX - pg || size_bytes > (size_t)INT64_MAX / 2)
        return NULL;
    size_t len = (size_bytes + pg - 1) / pg * pg;
    size_t max = s_max_regions();
    pthread_mutex_lock(&s_shm.mu);
    if (s_shm.n >= max) {
        pthread_mutex_unlock(&s_shm.mu);
        return NULL;
    }
    bool room = TROUPE__VEC_RESERVE(s_shm.r, s_shm.cap, s_shm.n + 1);
    pthread_mutex_unlock(&s_shm.mu);
    if (!room)
        return NULL;

    int fd = memfd_create("troupe-pool", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat sb;
    void *base = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0 && fstat(fd, &sb) == 0)
        /* populated now: faulting the pages in one by one on first touch cost the first
         * training step of a 2-rank GPT "small" run 0.55 s more than the others */
        base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    pthread_mutex_lock(&s_shm.mu);
    if (s_shm.n >= max) { /* other threads took the last ones meanwhile */
        pthread_mutex_unlock(&s_shm.mu);
        munmap(base, len);
        close(fd);
        return NULL;
    }
    if (!TROUPE__VEC_RESERVE(s_shm.r, s_shm.cap, s_shm.n + 1)) { /* others took the room */
        pthread_mutex_unlock(&s_shm.mu);
        munmap(base, len);
        close(fd);
        return NULL;
    }
    size_t i = s_floor(base);
    i = i == s_shm.n ? 0 : i + 1; /* after the last region below base */
    memmove(&s_shm.r[i + 1], &s_shm.r[i], (s_shm.n - i) * sizeof *s_shm.r);
    s_shm.r[i] = (s_region_t){
        .base = base, .len = len, .fd = fd, .id = ++s_shm.next_id, .ino = (uint64_t)sb.st_ino};
    s_shm.n++;
    pthread_mutex_unlock(&s_shm.mu);
    return base;
}

/* troupe__shm_free (punch: its pages go back at once) and troupe__shm_free_keep. */
static bool s_free(void *base, bool punch)
{
    if (base == NULL)
        return false;
    pthread_mutex_lock(&s_shm.mu);
    size_t i = s_floor(base);
    if (i == s_shm.n || s_shm.r[i].base != base) {
        pthread_mutex_unlock(&s_shm.mu);
        return false;
    }
    s_region_t g = s_shm.r[i];
    memmove(&s_shm.r[i], &s_shm.r[i + 1], (s_shm.n - i - 1) * sizeof *s_shm.r);
    s_shm.n--;
    pthread_mutex_unlock(&s_shm.mu);
    /* Give the pages back now, though peers may still map the file (their cached mappings):
     * the file keeps its size, so a stale access reads zeros instead of faulting. Kept: the
     * peers' mappings hold the pages, with what was last written, until they unmap them. */
    if (punch)
        (void)fallocate(g.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)g.len);
    munmap(g.base, g.len);
    close(g.fd);
    return true;
}

bool troupe__shm_free(void *base)
{
    return s_free(base, true);
}

bool troupe__shm_free_keep(void *base)
{
    return s_free(base, false);
}

bool troupe__shm_find(const void *p, size_t size_bytes, troupe__shm_ref_t *ref)
{
    bool found = false;
    pthread_mutex_lock(&s_shm.mu);
    size_t i = s_floor(p);
    if (i < s_shm.n) {
        const s_region_t *g = &s_shm.r[i];
        size_t off = (size_t)((const char *)p - g->base);
        if (off <= g->len && size_bytes <= g->len - off) {
            *ref = (troupe__shm_ref_t){.id = g->id,
                                       .ino = g->ino,
                                       .pid = (int64_t)getpid(),
                                       .fd = g->fd,
                                       .len = (int64_t)g->len,
                                       .off = (int64_t)off};
            found = true;
        }
    }
    pthread_mutex_unlock(&s_shm.mu);
    return found;
}

troupe_status_t troupe__shm_map(const troupe__shm_ref_t *ref, void **base_out)
{
    *base_out = NULL;
    if (ref->id == 0 || ref->len <= 0 || ref->pid <= 0 || ref->fd < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "shared memory: bad region reference (id %llu, pid %lld, fd %lld, "
                             "%lld bytes)",
                             (unsigned long long)ref->id, (long long)ref->pid, (long long)ref->fd,
                             (long long)ref->len);
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)ref->pid, (long long)ref->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    char es[128];
    if (fd < 0)
        return troupe__error(TROUPE_UNAVAILABLE,
                             "shared memory: cannot open region %llu of process %lld (%s): %s",
                             (unsigned long long)ref->id, (long long)ref->pid, path,
                             strerror_r(errno, es, sizeof es)); /* GNU: returns the text */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_ino != ref->ino || sb.st_size < ref->len) {
        close(fd);
        return troupe__error(TROUPE_UNAVAILABLE,
                             "shared memory: %s is not region %llu of process %lld (inode or "
                             "size differ)",
                             path, (unsigned long long)ref->id, (long long)ref->pid);
    }
    /* the page tables made now, not by faults in the first reduction */
    void *base =
        mmap(NULL, (size_t)ref->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int err = errno;
    close(fd);
    if (base == MAP_FAILED)
        return troupe__error(
            TROUPE_RESOURCE_EXHAUSTED, "shared memory: cannot map %lld bytes of process %lld: %s",
            (long long)ref->len, (long long)ref->pid, strerror_r(err, es, sizeof es));
    *base_out = base;
    return TROUPE_OK;
}

void troupe__shm_unmap(void *base, int64_t len)
{
    if (base != NULL && len > 0)
        munmap(base, (size_t)len);
}

#else /* not Linux: no shareable memory; callers use ordinary memory and the MPI paths */

void *troupe__shm_alloc(size_t size_bytes)
{
    (void)size_bytes;
    return NULL;
}

bool troupe__shm_free(void *base)
{
    (void)base;
    return false;
}

bool troupe__shm_free_keep(void *base)
{
    (void)base;
    return false;
}

bool troupe__shm_find(const void *p, size_t size_bytes, troupe__shm_ref_t *ref)
{
    (void)p;
    (void)size_bytes;
    (void)ref;
    return false;
}

troupe_status_t troupe__shm_map(const troupe__shm_ref_t *ref, void **base_out)
{
    (void)ref;
    *base_out = NULL;
    return troupe__error(TROUPE_UNAVAILABLE, "shared memory: needs Linux (memfd_create)");
}

void troupe__shm_unmap(void *base, int64_t len)
{
    (void)base;
    (void)len;
}

#endif
