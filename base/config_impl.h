/* troupe — configuration internals shared by base/ (not installed).
 * Thread safety: as base/config.h. */
#ifndef TROUPE_BASE_CONFIG_IMPL_H
#define TROUPE_BASE_CONFIG_IMPL_H

/* Loads the configuration if not yet loaded (pthread_once; cheap after the first call). */
void troupe__config_ensure_loaded(void);

#endif
