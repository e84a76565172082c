/* troupe — loading the cuda driver's plugin (devices/plugin_impl.h). */
#define _GNU_SOURCE /* dladdr */
#include "devices/plugin_impl.h"

#include "base/log.h"
#include "base/status.h"
#include "troupe_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if TROUPE_HAVE_CUDA
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static int s_tried; /* under s_lock: 1 once the first load ran */
static const troupe__cuda_plugin_t *s_table;
static troupe_status_t s_status;
static char s_message[1024]; /* why the load failed (s_status != OK) */

/* The directory of the library that holds this function (libtroupe.so), or "" when it cannot
 * be named. */
static void s_library_dir(char *buf, size_t cap)
{
    Dl_info info;
    buf[0] = '\0';
    if (dladdr((void *)&troupe__cuda_plugin_load, &info) == 0 || info.dli_fname == NULL)
        return;
    const char *slash = strrchr(info.dli_fname, '/');
    int n = slash != NULL
                ? snprintf(buf, cap, "%.*s", (int)(slash - info.dli_fname), info.dli_fname)
                : -1;
    if (n < 0 || (size_t)n >= cap)
        buf[0] = '\0';
}

/* The first load: fills s_table, or s_status and s_message. The plugin next to libtroupe.so
 * first, else the loader's search path. */
static void s_load(void)
{
    char dir[768], path[1024] = "";
    s_library_dir(dir, sizeof dir);
    if (dir[0] != '\0') {
        int n = snprintf(path, sizeof path, "%s/%s", dir, TROUPE__CUDA_PLUGIN_FILE);
        if (n < 0 || (size_t)n >= sizeof path || access(path, F_OK) != 0)
            path[0] = '\0';
    }
    const char *what = path[0] != '\0' ? path : TROUPE__CUDA_PLUGIN_FILE;
    void *lib = dlopen(what, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        s_status = TROUPE_NOT_FOUND;
        if (path[0] == '\0')
            snprintf(s_message, sizeof s_message,
                     "the cuda backend's plugin %s is not installed: not in %s, where "
                     "libtroupe is, nor on the library path (dlopen: %s)",
                     TROUPE__CUDA_PLUGIN_FILE, dir[0] != '\0' ? dir : "the directory",
                     why != NULL ? why : "no reason given");
        else
            snprintf(s_message, sizeof s_message,
                     "the cuda backend's plugin %s cannot be loaded: %s (it needs the CUDA "
                     "runtime, NVRTC, nvJitLink and cuBLASLt libraries on the library path)",
                     path, why != NULL ? why : "no reason given");
        return;
    }
    troupe__cuda_plugin_fn entry = NULL;
    void *sym = dlsym(lib, TROUPE__CUDA_PLUGIN_SYMBOL);
    /* POSIX: an object pointer from dlsym converts to a function pointer. */
    memcpy(&entry, &sym, sizeof entry);
    const troupe__cuda_plugin_t *t = entry != NULL ? entry() : NULL;
    if (t == NULL || t->abi != TROUPE__CUDA_PLUGIN_ABI || t->version == NULL ||
        strcmp(t->version, TROUPE_VERSION_STRING) != 0 || t->driver == NULL) {
        s_status = TROUPE_NOT_FOUND;
        snprintf(s_message, sizeof s_message,
                 "the cuda backend's plugin %s is not one this troupe %s can use (%s)", what,
                 TROUPE_VERSION_STRING,
                 t == NULL                           ? "no " TROUPE__CUDA_PLUGIN_SYMBOL " entry"
                 : t->abi != TROUPE__CUDA_PLUGIN_ABI ? "another table layout"
                                                     : "built for another troupe version");
        dlclose(lib);
        return;
    }
    s_table = t; /* the plugin stays loaded until the process ends */
    s_status = TROUPE_OK;
    TROUPE_LOG(TROUPE_LOG_DEBUG, TROUPE_SUB_DEVICES, "cuda plugin: loaded %s", what);
}
#endif

troupe_status_t troupe__cuda_plugin_load(const troupe__cuda_plugin_t **out)
{
    if (out == NULL)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "troupe__cuda_plugin_load: NULL out");
    *out = NULL;
#if TROUPE_HAVE_CUDA
    pthread_mutex_lock(&s_lock);
    if (!s_tried) {
        s_tried = 1;
        s_load();
    }
    const troupe__cuda_plugin_t *t = s_table;
    troupe_status_t st = s_status;
    pthread_mutex_unlock(&s_lock);
    if (st != TROUPE_OK)
        return troupe__error(st, "%s", s_message);
    *out = t;
    return TROUPE_OK;
#else
    return troupe__error(TROUPE_NOT_FOUND, "this troupe was built without CUDA (TROUPE_WITH_CUDA)");
#endif
}
