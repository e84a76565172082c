/* troupe — the registry of environment variables (see base/config.h). */
#include "base/config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const troupe_config_var_t *vars;
    size_t count;
} s_tables[TROUPE_CONFIG_MAX_TABLES]; /* s_mu */
static size_t s_ntables;              /* s_mu */

static const troupe_config_var_t *s_find_locked(const char *name)
{
    for (size_t t = 0; t < s_ntables; t++)
        for (size_t i = 0; i < s_tables[t].count; i++)
            if (strcmp(s_tables[t].vars[i].name, name) == 0)
                return &s_tables[t].vars[i];
    return NULL;
}

troupe_status_t troupe_config_register(const troupe_config_var_t *vars, size_t count)
{
    if (vars == NULL && count > 0)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "config_register: NULL table");
    for (size_t i = 0; i < count; i++) {
        const troupe_config_var_t *v = &vars[i];
        if (!v->name || !v->layer || !v->type || !v->def || !v->range || !v->api || !v->help)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "config_register: entry %zu (%s) has a NULL field", i,
                                 v->name ? v->name : "unnamed");
    }
    troupe_status_t st = TROUPE_OK;
    pthread_mutex_lock(&s_mu);
    for (size_t i = 0; i < count && st == TROUPE_OK; i++) {
        bool twice = s_find_locked(vars[i].name) != NULL;
        for (size_t j = 0; j < i && !twice; j++)
            twice = strcmp(vars[j].name, vars[i].name) == 0;
        if (twice)
            st = troupe__error(TROUPE_INVALID_ARGUMENT, "config_register: %s is registered twice",
                               vars[i].name);
    }
    if (st == TROUPE_OK && s_ntables == TROUPE_CONFIG_MAX_TABLES)
        st = troupe__error(TROUPE_RESOURCE_EXHAUSTED, "config_register: more than %d tables",
                           TROUPE_CONFIG_MAX_TABLES);
    if (st == TROUPE_OK) {
        s_tables[s_ntables].vars = vars;
        s_tables[s_ntables].count = count;
        s_ntables++;
    }
    pthread_mutex_unlock(&s_mu);
    return st;
}

size_t troupe_config_var_count(void)
{
    size_t n = 0;
    pthread_mutex_lock(&s_mu);
    for (size_t t = 0; t < s_ntables; t++)
        n += s_tables[t].count;
    pthread_mutex_unlock(&s_mu);
    return n;
}

const troupe_config_var_t *troupe_config_var_at(size_t i)
{
    /* the i-th by name: the one with exactly i names before it (tables are small) */
    const troupe_config_var_t *found = NULL;
    pthread_mutex_lock(&s_mu);
    for (size_t t = 0; t < s_ntables && !found; t++)
        for (size_t k = 0; k < s_tables[t].count && !found; k++) {
            const char *name = s_tables[t].vars[k].name;
            size_t before = 0;
            for (size_t u = 0; u < s_ntables; u++)
                for (size_t m = 0; m < s_tables[u].count; m++)
                    before += strcmp(s_tables[u].vars[m].name, name) < 0;
            if (before == i)
                found = &s_tables[t].vars[k];
        }
    pthread_mutex_unlock(&s_mu);
    return found;
}

const troupe_config_var_t *troupe_config_var_find(const char *name)
{
    if (name == NULL)
        return NULL;
    pthread_mutex_lock(&s_mu);
    const troupe_config_var_t *v = s_find_locked(name);
    pthread_mutex_unlock(&s_mu);
    return v;
}
