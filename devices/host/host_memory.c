/* troupe — how much host memory a new pool may take (see host_memory_impl.h). */
#define _DEFAULT_SOURCE
#include "devices/host/host_memory_impl.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define S_TEXT_MAX 16384
#define S_PATH_MAX 1024
/* cgroup v1 reports "no limit" as a figure near 2^63. */
#define S_NO_LIMIT ((int64_t)1 << 60)

/* A small file's text, NUL-terminated; false when it cannot be read. */
static bool s_read(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return true;
}

/* The number after `key` at the start of a line ("file 123", "MemAvailable:  12 kB"), times
 * `unit`; -1 when no line starts with `key` followed by blanks and a number >= 0. */
static int64_t s_field(const char *text, const char *key, int64_t unit)
{
    size_t n = strlen(key);
    for (const char *p = text; p != NULL && *p != '\0';) {
        long long v = -1;
        if (strncmp(p, key, n) == 0 && (p[n] == ' ' || p[n] == '\t'))
            return sscanf(p + n, " %lld", &v) == 1 && v >= 0 ? (int64_t)v * unit : -1;
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}

/* A file holding one number ("max", unreadable or malformed: -1). */
static int64_t s_number(const char *path)
{
    char text[64];
    long long v = -1;
    if (!s_read(path, text, sizeof text) || sscanf(text, "%lld", &v) != 1 || v < 0)
        return -1;
    return (int64_t)v;
}

/* Keeps `head` in *best when it is smaller, with its explanation. */
static void s_offer(int64_t head, int64_t *best, const char *what, char *how, size_t cap)
{
    if (*best >= 0 && head >= *best)
        return;
    *best = head;
    snprintf(how, cap, "%s", what);
}

/* The directory of the process's cgroup under `root`, or `root` itself when that path is not
 * there (a cgroup namespace shows the process's cgroup as the mount's root). */
static void s_cgroup_dir(const char *root, const char *rel, char *dir, size_t cap)
{
    struct stat sb;
    snprintf(dir, cap, "%s%s", root, strcmp(rel, "/") == 0 ? "" : rel);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        snprintf(dir, cap, "%s", root);
}

/* cgroup v2: every cgroup with a limit from the process's up to the mount's root. */
static void s_cgroup_v2(const char *root, const char *rel, int64_t *best, char *how, size_t cap)
{
    char dir[S_PATH_MAX], path[S_PATH_MAX + 32], text[S_TEXT_MAX], what[S_PATH_MAX + 160];
    s_cgroup_dir(root, rel, dir, sizeof dir);
    size_t rootlen = strlen(root);
    for (;;) {
        snprintf(path, sizeof path, "%s/memory.max", dir);
        int64_t limit = s_number(path);
        snprintf(path, sizeof path, "%s/memory.current", dir);
        int64_t current = s_number(path);
        if (limit >= 0 && limit < S_NO_LIMIT && current >= 0) {
            int64_t file = 0;
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            if (s_read(path, text, sizeof text) && (file = s_field(text, "file", 1)) < 0)
                file = 0;
            int64_t held = current > file ? current - file : 0;
            snprintf(what, sizeof what,
                     "cgroup %s: memory.max %lld - (memory.current %lld - file %lld)", dir,
                     (long long)limit, (long long)current, (long long)file);
            s_offer(limit > held ? limit - held : 0, best, what, how, cap);
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= rootlen || slash == NULL || (size_t)(slash - dir) < rootlen)
            return;
        *slash = '\0';
    }
}

/* cgroup v1: the memory controller's hierarchical limit (the smallest on the path). */
static void s_cgroup_v1(const char *root, const char *rel, int64_t *best, char *how, size_t cap)
{
    char mroot[S_PATH_MAX], dir[S_PATH_MAX], path[S_PATH_MAX + 32], text[S_TEXT_MAX];
    char what[S_PATH_MAX + 200];
    snprintf(mroot, sizeof mroot, "%s/memory", root);
    s_cgroup_dir(mroot, rel, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if (!s_read(path, text, sizeof text))
        return;
    int64_t limit = s_field(text, "hierarchical_memory_limit", 1);
    int64_t cache = s_field(text, "total_cache", 1);
    if (cache < 0)
        cache = 0;
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    int64_t usage = s_number(path);
    if (limit < 0 || limit >= S_NO_LIMIT || usage < 0)
        return;
    int64_t held = usage > cache ? usage - cache : 0;
    snprintf(what, sizeof what,
             "cgroup %s: hierarchical_memory_limit %lld - (memory.usage_in_bytes %lld - "
             "total_cache %lld)",
             dir, (long long)limit, (long long)usage, (long long)cache);
    s_offer(limit > held ? limit - held : 0, best, what, how, cap);
}

/* Whether the comma-separated controller list [b, e) names `name`. */
static bool s_lists(const char *b, const char *e, const char *name)
{
    size_t n = strlen(name);
    while (b < e) {
        const char *c = memchr(b, ',', (size_t)(e - b));
        if (c == NULL)
            c = e;
        if ((size_t)(c - b) == n && strncmp(b, name, n) == 0)
            return true;
        b = c + 1;
    }
    return false;
}

int64_t troupe__host_memory_free(const char *meminfo, const char *self_cgroup,
                                 const char *cgroup_root, char *how, size_t cap)
{
    char text[S_TEXT_MAX], what[160];
    int64_t best = -1;
    if (cap > 0)
        how[0] = '\0';
    if (s_read(meminfo, text, sizeof text)) {
        int64_t avail = s_field(text, "MemAvailable:", 1024);
        int64_t swap = s_field(text, "SwapFree:", 1024);
        if (swap < 0)
            swap = 0;
        if (avail >= 0) {
            snprintf(what, sizeof what, "MemAvailable %lld + SwapFree %lld in %s", (long long)avail,
                     (long long)swap, meminfo);
            s_offer(avail + swap, &best, what, how, cap);
        }
    }
    if (!s_read(self_cgroup, text, sizeof text))
        return best;
    for (char *line = text; line != NULL && *line != '\0';) {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 != NULL) {
            if (c2 == c1 + 1 && strncmp(line, "0:", 2) == 0)
                s_cgroup_v2(cgroup_root, c2 + 1, &best, how, cap);
            else if (s_lists(c1 + 1, c2, "memory"))
                s_cgroup_v1(cgroup_root, c2 + 1, &best, how, cap);
        }
        line = next;
    }
    return best;
}
