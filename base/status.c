#include "base/status.h"

#include <stdio.h>

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

troupe_status_t troupe_error_vset(troupe_status_t status, const char *fmt, va_list ap)
{
    vsnprintf(s_last_error, sizeof s_last_error, fmt, ap);
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
