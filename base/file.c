/* troupe — opening a file that must be a regular file; checking a place to write (see
 * file_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include "base/file_impl.h"

#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *troupe__file_kind(unsigned mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

troupe_status_t troupe__file_open_regular(const char *path, const char *what, uint64_t max_bytes,
                                          int flags, int *out_fd, struct stat *out_st)
{
    *out_fd = -1;
    /* O_NONBLOCK: opening a FIFO does not wait for a writer; cleared once it is known regular */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (fd < 0) {
        int e = errno;
        return troupe__error(e == ENOENT || e == ENOTDIR ? TROUPE_NOT_FOUND
                                                         : TROUPE_FAILED_PRECONDITION,
                             "%s: cannot open: %s", path, strerror(e));
    }
    troupe_status_t st = TROUPE_OK;
    if (fstat(fd, out_st) != 0) {
        st =
            troupe__error(TROUPE_FAILED_PRECONDITION, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(out_st->st_mode)) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT, "%s: %s, not a regular file: expected %s", path,
                           troupe__file_kind(out_st->st_mode), what);
    } else if (max_bytes > 0 && (uint64_t)out_st->st_size > max_bytes) {
        st = troupe__error(TROUPE_INVALID_ARGUMENT,
                           "%s: %" PRIu64 " bytes, more than the %" PRIu64 " bytes %s may have",
                           path, (uint64_t)out_st->st_size, max_bytes, what);
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            st = troupe__error(TROUPE_FAILED_PRECONDITION, "%s: fcntl: %s", path, strerror(errno));
    }
    if (st != TROUPE_OK) {
        close(fd);
        return st;
    }
    *out_fd = fd;
    return TROUPE_OK;
}

troupe_status_t troupe__file_check_writable(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return troupe__error(TROUPE_INVALID_ARGUMENT, "'%s' is a directory", path);
    /* a temporary beside it, as the writers create theirs */
    size_t cap = strlen(path) + 32;
    char *probe = troupe_malloc(cap);
    if (probe == NULL)
        return troupe__error(TROUPE_RESOURCE_EXHAUSTED, "cannot check '%s': out of memory", path);
    snprintf(probe, cap, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) {
        int e = errno;
        troupe_free(probe);
        return troupe__error(TROUPE_FAILED_PRECONDITION, "cannot write '%s': %s", path,
                             strerror(e));
    }
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    troupe_free(probe);
    return TROUPE_OK;
}
