/* troupe — configuration internals shared by base/ (not installed).
 * Thread safety: as base/config.h. */
#ifndef TROUPE_BASE_CONFIG_IMPL_H
#define TROUPE_BASE_CONFIG_IMPL_H

#include "base/status.h"

/* Loads the configuration if not yet loaded (pthread_once; cheap after the first call). */
void troupe__config_ensure_loaded(void);

/* troupe_log_configure and troupe_log_set_file without loading the configuration first: for the
 * loader (TROUPE_LOG, TROUPE_LOG_FILE), which the public forms would re-enter. */
troupe_status_t troupe__log_configure(const char *spec);
troupe_status_t troupe__log_set_file(const char *path);

#endif
