/* troupe — the `sync` driver (see sync_impl.h): the shared host driver core with one stream. */
#include "devices/sync/sync_impl.h"

#include "devices/host/host_impl.h"

static troupe_status_t s_sync_open(troupe_driver_t **out)
{
    return troupe__hdrv_open(&troupe__driver_sync, out);
}

/* Everything runs in the caller, so more streams buy nothing: 1 for every config and
 * device (0 for a device that does not exist). */
static int s_sync_suggested_num_streams(troupe_driver_t *drv, int ordinal,
                                        troupe_stream_config_t cfg)
{
    return ordinal >= 0 && ordinal < troupe__hdrv_num_devices(drv) ? 1 : 0;
}

const troupe_driver_vtable_t troupe__driver_sync = {
    .name = "sync",
    .open = s_sync_open,
    .suggested_num_streams = s_sync_suggested_num_streams,
    TROUPE__HDRV_ENTRIES,
};
