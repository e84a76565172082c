#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char s_last_error[1024];

static const char *const s_names[TROUPE_STATUS_COUNT] = {
    "OK",          "INVALID_ARGUMENT", "NOT_FOUND",  "ALREADY_EXISTS",    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNIMPLEMENTED",
    "INTERNAL",    "DEVICE_ERROR",     "TRANSPORT_ERROR",
};

const char *troupe_status_str(troupe_status_t status)
{
    if ((int)status < 0 || (int)status >= TROUPE_STATUS_COUNT)
        return "UNKNOWN_STATUS";
    return s_names[status];
}

const char *troupe_last_error(void)
{
    return s_last_error;
}

void troupe_clear_error(void)
{
    s_last_error[0] = '\0';
}

void troupe__vformat_fit(char *dst, size_t cap, const char *fmt, va_list ap)
{
    if (cap == 0)
        return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(dst, cap, fmt, ap);
    static const char cut[] = " ... ";
    size_t head = cap / 3;
    if (n < 0 || (size_t)n < cap || cap < 2 * sizeof cut) {
        va_end(ap2);
        return;
    }
    /* too long: keep the start (what failed) and the end (why), drop the middle (a long path) */
    char *full = malloc((size_t)n + 1);
    if (full != NULL) {
        vsnprintf(full, (size_t)n + 1, fmt, ap2);
        size_t tail = cap - 1 - head - (sizeof cut - 1);
        memcpy(dst + head, cut, sizeof cut - 1);
        memcpy(dst + head + sizeof cut - 1, full + (size_t)n - tail, tail);
        dst[cap - 1] = '\0';
        free(full);
    }
    va_end(ap2);
}

void troupe__format_fit(char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    troupe__vformat_fit(dst, cap, fmt, ap);
    va_end(ap);
}

troupe_status_t troupe_error_vset(troupe_status_t status, const char *fmt, va_list ap)
{
    troupe__vformat_fit(s_last_error, sizeof s_last_error, fmt, ap);
    return status;
}

troupe_status_t troupe_error_set(troupe_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    troupe_error_vset(status, fmt, ap);
    va_end(ap);
    return status;
}
