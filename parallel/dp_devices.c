/* troupe — which devices this rank replicates on (parallel/dp.h: troupe_dp_pick_devices,
 * troupe_dp_suggested_streams): TROUPE_DEVICE, else the node-local rank's share of the
 * backend's devices (one rank per GPU under mpirun or srun). */
#define _POSIX_C_SOURCE 200809L
#include "parallel/dp_impl.h"

#include "base/config.h"
#include "base/log.h"
#include "transport/mpi/cluster.h"

#include <stdio.h>
#include <string.h>

/* This rank's place on its node and where it was found. */
static void s_local_rank(int *l, int *size, const char **src)
{
    *l = 0;
    *size = 1;
    *src = "no launcher: one rank";
    if (troupe_cluster_is_initialized() && troupe_cluster_is_distributed()) {
        *l = troupe_cluster_local_rank();
        *size = troupe_cluster_local_size();
        *src = "the cluster's node-local rank";
        return;
    }
    (void)troupe__cluster_env_local_rank(l, size, src); /* else one rank, as set above */
}

static void s_list(const troupe_dp_devices_t *d, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < d->n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%d", i ? "," : "", d->ordinals[i]);
}

/* troupe_dp_pick_devices, logging its choice when `log`. */
static troupe_status_t s_pick(troupe_backend_t *b, troupe_dp_devices_t *out, bool log)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "pick_devices: NULL argument");
    memset(out, 0, sizeof *out);
    int ndev = 0;
    TROUPE_RETURN_IF_ERROR(troupe_num_devices(b, &ndev));
    const char *name = troupe_backend_name(b);
    if (ndev <= 0)
        return troupe__error(TROUPE_FAILED_PRECONDITION, "backend %s has no device", name);
    const char *src = NULL;
    s_local_rank(&out->local_rank, &out->local_size, &src);
    const char *spec = troupe_config_device();
    if (spec[0] != '\0') {
        TROUPE_RETURN_IF_ERROR(troupe_config_parse_device_list(spec, out->ordinals,
                                                               TROUPE_DP_MAX_DEVICES, &out->n));
        for (int i = 0; i < out->n; i++)
            if (out->ordinals[i] >= ndev)
                return troupe__error(TROUPE_NOT_FOUND,
                                     "TROUPE_DEVICE=%s: backend %s has no device %d (it has %d: "
                                     "ordinals 0 to %d)",
                                     spec, name, out->ordinals[i], ndev, ndev - 1);
        out->from_env = true;
        snprintf(out->why, sizeof out->why, "TROUPE_DEVICE=%s", spec);
    } else {
        int l = out->local_rank, L = out->local_size;
        if (l < ndev) {
            for (int d = l; d < ndev && out->n < TROUPE_DP_MAX_DEVICES; d += L)
                out->ordinals[out->n++] = d;
            snprintf(out->why, sizeof out->why,
                     "local rank %d of %d (%s): devices %d, %d + %d, ... of the %d of backend %s",
                     l, L, src, l, l, L, ndev, name);
        } else {
            out->ordinals[out->n++] = l % ndev;
            snprintf(out->why, sizeof out->why,
                     "local rank %d of %d (%s) modulo the %d device%s of backend %s (ranks share "
                     "devices)",
                     l, L, src, ndev, ndev == 1 ? "" : "s", name);
        }
    }
    if (!log)
        return TROUPE_OK;
    char list[TROUPE_DP_MAX_DEVICES * 4];
    s_list(out, list, sizeof list);
    TROUPE_LOG(TROUPE_LOG_INFO, TROUPE_SUB_PARALLEL, "dp: %s device%s %s: %s", name,
               out->n == 1 ? "" : "s", list, out->why);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_pick_devices(troupe_backend_t *b, troupe_dp_devices_t *out)
{
    return s_pick(b, out, true);
}

int troupe__dp_device_streams(bool host, int suggested, int sharers)
{
    if (!host)
        return 1;
    int per = suggested > 0 ? suggested : 1;
    per = sharers > 1 ? per / sharers : per;
    return per > 0 ? per : 1;
}

troupe_status_t troupe__dp_suggested_streams_on(troupe_backend_t *b, const int *ordinals, int n,
                                                bool from_env, int *out)
{
    *out = 1;
    int ndev = 0;
    TROUPE_RETURN_IF_ERROR(troupe_num_devices(b, &ndev));
    const char *name = troupe_backend_name(b);
    bool host = strcmp(name, "cpu") == 0 || strcmp(name, "sync") == 0;
    int L = 1, l = 0;
    const char *src = NULL;
    s_local_rank(&l, &L, &src);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        troupe_device_t *d = NULL;
        int per = 1;
        TROUPE_RETURN_IF_ERROR(troupe_get_device(b, ordinals[i], &d));
        TROUPE_RETURN_IF_ERROR(troupe_suggested_num_streams(d, &per));
        /* the local ranks that use this device share its cores: every rank with
         * TROUPE_DEVICE, else those whose share holds it (troupe_dp_pick_devices) */
        int sharers = L <= 1                     ? 1
                      : from_env || ndev == 0 ? L
                      : L <= ndev             ? 1
                                              : (L - 1 - ordinals[i]) / ndev + 1;
        total += troupe__dp_device_streams(host, per, sharers);
    }
    *out = total > INT32_MAX ? INT32_MAX : (int)(total > 0 ? total : 1);
    return TROUPE_OK;
}

troupe_status_t troupe_dp_suggested_streams(troupe_backend_t *b, int *out)
{
    if (!b || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "dp_suggested_streams: NULL argument");
    *out = 1;
    troupe_dp_devices_t dv;
    TROUPE_RETURN_IF_ERROR(s_pick(b, &dv, false));
    return troupe__dp_suggested_streams_on(b, dv.ordinals, dv.n, dv.from_env, out);
}
