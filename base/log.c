#define _POSIX_C_SOURCE 200809L
#include "base/log.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/config_impl.h"
#include "base/trace_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static atomic_int s_level = TROUPE_LOG_WARN;
static atomic_uint s_mask = TROUPE_SUB_ALL;
static atomic_int s_rank = -1;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *s_file; /* NULL = stderr; guarded by s_lock */
static int64_t s_start_ns;
static _Thread_local char s_tag[48];

static const char *const s_level_names[] = {"error", "warn", "info", "debug", "trace"};
static const struct {
    const char *name;
    unsigned bit;
} s_subs[] = {
    {"base", TROUPE_SUB_BASE},           {"ir", TROUPE_SUB_IR},
    {"devices", TROUPE_SUB_DEVICES},     {"actors", TROUPE_SUB_ACTORS},
    {"transport", TROUPE_SUB_TRANSPORT}, {"parallel", TROUPE_SUB_PARALLEL},
    {"tools", TROUPE_SUB_TOOLS},         {"all", TROUPE_SUB_ALL},
};

bool troupe_log_enabled(troupe_log_level_t level, unsigned subsystem)
{
    troupe__config_ensure_loaded();
    return (int)level <= atomic_load_explicit(&s_level, memory_order_relaxed) &&
           (subsystem & atomic_load_explicit(&s_mask, memory_order_relaxed)) != 0;
}

static const char *s_sub_name(unsigned subsystem)
{
    for (size_t i = 0; i < sizeof s_subs / sizeof s_subs[0]; i++)
        if (s_subs[i].bit == subsystem)
            return s_subs[i].name;
    return "multi";
}

void troupe_log_write(troupe_log_level_t level, unsigned subsystem, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char rank[16] = "";
    int r = atomic_load(&s_rank);
    if (r >= 0)
        snprintf(rank, sizeof rank, " r%d", r);
    double t = (double)(troupe_now_ns() - s_start_ns) / 1e9;
    const char *lv = (unsigned)level < 5 ? s_level_names[level] : "?";
    pthread_mutex_lock(&s_lock);
    FILE *f = s_file != NULL ? s_file : stderr;
    fprintf(f, "troupe %.6f %-5s %-9s%s%s%s | %s\n", t, lv, s_sub_name(subsystem), rank,
            s_tag[0] ? " " : "", s_tag, msg);
    fflush(f);
    pthread_mutex_unlock(&s_lock);
}

/* The setters below load the configuration first, so that a program's own settings win over
 * TROUPE_LOG and TROUPE_LOG_FILE whatever call happens to load it later; the loader itself uses
 * the troupe__ forms, which do not (pthread_once cannot be re-entered). */
void troupe_log_set_level(troupe_log_level_t level)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_level, (int)level);
}

troupe_log_level_t troupe_log_get_level(void)
{
    return (troupe_log_level_t)atomic_load(&s_level);
}

void troupe_log_set_mask(unsigned mask)
{
    troupe__config_ensure_loaded();
    atomic_store(&s_mask, mask & TROUPE_SUB_ALL);
}

unsigned troupe_log_get_mask(void)
{
    return atomic_load_explicit(&s_mask, memory_order_relaxed);
}

troupe_status_t troupe_log_set_file(const char *path)
{
    troupe__config_ensure_loaded();
    return troupe__log_set_file(path);
}

troupe_status_t troupe__log_set_file(const char *path)
{
    FILE *f = NULL;
    if (path != NULL && path[0] != '\0') {
        f = fopen(path, "a");
        if (f == NULL)
            return troupe__error(TROUPE_NOT_FOUND, "log file '%s': %s", path, strerror(errno));
    }
    pthread_mutex_lock(&s_lock);
    if (s_file != NULL)
        fclose(s_file);
    s_file = f;
    pthread_mutex_unlock(&s_lock);
    return TROUPE_OK;
}

troupe_status_t troupe_log_configure(const char *spec)
{
    troupe__config_ensure_loaded();
    return troupe__log_configure(spec);
}

troupe_status_t troupe__log_configure(const char *spec)
{
    if (spec == NULL || spec[0] == '\0')
        return TROUPE_OK;
    char buf[256];
    if (strlen(spec) >= sizeof buf)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "TROUPE_LOG: specification too long");
    strcpy(buf, spec);
    char *colon = strchr(buf, ':');
    if (colon != NULL)
        *colon = '\0';
    int level = -1;
    for (int i = 0; i < 5; i++)
        if (strcasecmp(buf, s_level_names[i]) == 0)
            level = i;
    if (level < 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "TROUPE_LOG: unknown level '%s' (expected error|warn|info|debug|trace)",
                             buf);
    unsigned mask = TROUPE_SUB_ALL;
    if (colon != NULL) {
        mask = 0;
        char *save = NULL;
        for (char *tok = strtok_r(colon + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            unsigned bit = 0;
            for (size_t i = 0; i < sizeof s_subs / sizeof s_subs[0]; i++)
                if (strcasecmp(tok, s_subs[i].name) == 0)
                    bit = s_subs[i].bit;
            if (bit == 0)
                return troupe__error(TROUPE_INVALID_ARGUMENT,
                                     "TROUPE_LOG: unknown subsystem '%s' (expected base|ir|devices|"
                                     "actors|transport|parallel|tools|all)",
                                     tok);
            mask |= bit;
        }
    }
    atomic_store(&s_level, level);
    atomic_store(&s_mask, mask & TROUPE_SUB_ALL);
    return TROUPE_OK;
}

void troupe_log_set_thread_tag(const char *tag)
{
    troupe__trace_name_thread(tag);
    if (tag == NULL) {
        s_tag[0] = '\0';
        return;
    }
    snprintf(s_tag, sizeof s_tag, "%s", tag);
}

void troupe_log_set_rank(int rank)
{
    atomic_store(&s_rank, rank);
}

void troupe__log_init_clock(void)
{
    s_start_ns = troupe_now_ns();
}
