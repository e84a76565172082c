/* troupe — device_to_device: validation and dispatch to local copies and merge buffers
 * (merge.c), remote ranks (lend.c) and STREAMING consumers (routine.c) (see transfer.h). */
#include "actors/transfer.h"

#include "actors/lend_impl.h"
#include "actors/merge_impl.h"
#include "actors/runtime_impl.h"
#include "base/status.h"

#include <pthread.h>

troupe_status_t troupe_device_to_device(troupe_tnode_t *n, troupe_merge_use_t use,
                                        troupe_context_t *dst_ctx, troupe_context_t *src_ctx,
                                        troupe_routine_t *consumer, troupe_context_t **out_ctx,
                                        troupe_event_t **out_ev)
{
    if (out_ev)
        *out_ev = NULL;
    if (out_ctx)
        *out_ctx = NULL;
    if (!n || !dst_ctx || !src_ctx)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "device_to_device: NULL argument");
    if (use != TROUPE_MERGE_NO && use != TROUPE_MERGE_COPY && use != TROUPE_MERGE_STREAMING)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "device_to_device: bad merge use %d",
                             (int)use);
    if (dst_ctx->remote_rank >= 0 || src_ctx->remote_rank >= 0)
        return troupe__lend_d2d_remote(n, consumer ? TROUPE_MERGE_STREAMING : use, dst_ctx, src_ctx,
                                       out_ctx, out_ev);
    if ((use == TROUPE_MERGE_STREAMING) != (consumer != NULL))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: a consumer routine is required for STREAMING and "
                             "only for it");
    if (dst_ctx->backend != src_ctx->backend)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "device_to_device: the contexts belong to different backends");
    if (dst_ctx->dev != src_ctx->dev && use == TROUPE_MERGE_STREAMING)
        return troupe__error(TROUPE_FAILED_PRECONDITION,
                             "device_to_device: STREAMING from device %d to device %d: the "
                             "consumer reads the source array in place, so it needs one device "
                             "(use COPY between devices)",
                             src_ctx->dev->ordinal, dst_ctx->dev->ordinal);
    const troupe__carray_t *sa = troupe__context_find(src_ctx, n);
    if (!sa)
        return troupe__context_lacks(src_ctx, n, "device_to_device source");
    troupe_tnode_t *tag = use == TROUPE_MERGE_NO ? dst_ctx->merge_node : n;
    if (use == TROUPE_MERGE_NO) {
        const troupe__carray_t *da = troupe__context_find(dst_ctx, n);
        if (!da)
            return troupe__context_lacks(dst_ctx, n, "device_to_device destination");
        /* one array (pool ids are per device: equal locations on two devices are two arrays) */
        if (dst_ctx->dev == src_ctx->dev && da->loc.pool_id == sa->loc.pool_id &&
            da->loc.offset == sa->loc.offset) {
            if (out_ev)
                TROUPE_RETURN_IF_ERROR(
                    troupe_event_new_completed("d2d-noop", TROUPE_OK, NULL, out_ev));
            if (out_ctx)
                return troupe__context_derive(dst_ctx, NULL, 0, -1, tag, out_ctx);
            return TROUPE_OK;
        }
    }
    if (use == TROUPE_MERGE_STREAMING) {
        if (consumer->ctx->srec != dst_ctx->srec)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "device_to_device STREAMING: the consumer %s runs on stream %s, "
                                 "not on the destination stream %s",
                                 troupe_routine_name(consumer),
                                 troupe_stream_name(consumer->ctx->srec->stream),
                                 troupe_stream_name(dst_ctx->srec->stream));
        TROUPE_RETURN_IF_ERROR(troupe__merge_check_consumer(n, consumer->code->proc->merge_node,
                                                            troupe_routine_name(consumer)));
    }
    troupe_context_t *child = NULL;
    if (out_ctx)
        TROUPE_RETURN_IF_ERROR(troupe__context_derive(dst_ctx, NULL, 0, -1, tag, &child));
    troupe_device_t *dev = dst_ctx->dev, *sdev = src_ctx->dev;
    /* Between two devices both ledgers are touched: lock them lower ordinal first (every
     * path that holds two device locks takes them in that order). */
    troupe_device_t *first = sdev->ordinal < dev->ordinal ? sdev : dev;
    troupe_device_t *second = first == dev ? sdev : dev;
    pthread_mutex_lock(&first->lock);
    if (second != first)
        pthread_mutex_lock(&second->lock);
    troupe_status_t st = troupe__merge_d2d_locked(n, use, dst_ctx, sdev, sa, out_ev);
    if (st == TROUPE_OK && use == TROUPE_MERGE_STREAMING) {
        /* The consumer registers itself as a reader of the source array; its event is ours. */
        st = troupe__routine_run_locked(consumer, out_ev);
        troupe__ledger_tick(&dev->ledger);
    }
    if (second != first)
        pthread_mutex_unlock(&second->lock);
    pthread_mutex_unlock(&first->lock);
    if (st != TROUPE_OK) {
        troupe_context_release(&child);
        return st;
    }
    if (out_ctx)
        *out_ctx = child;
    return TROUPE_OK;
}
