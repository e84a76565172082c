#define _POSIX_C_SOURCE 200809L
#include "base/clock.h"

#include <time.h>

int64_t troupe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t troupe_deadline_after(int64_t timeout_ns)
{
    if (timeout_ns == TROUPE_TIMEOUT_INFINITE)
        return TROUPE_TIMEOUT_INFINITE;
    if (timeout_ns < 0)
        timeout_ns = 0;
    int64_t now = troupe_now_ns();
    if (timeout_ns > INT64_MAX - now)
        return TROUPE_TIMEOUT_INFINITE;
    return now + timeout_ns;
}

int64_t troupe_deadline_remaining(int64_t deadline_ns)
{
    if (deadline_ns == TROUPE_TIMEOUT_INFINITE)
        return INT64_MAX;
    int64_t left = deadline_ns - troupe_now_ns();
    return left > 0 ? left : 0;
}

void troupe_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
