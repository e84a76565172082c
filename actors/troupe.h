/* troupe — the user API in one include (docs/architecture.md §2): backends, devices and streams, contexts,
 * compile/link/run, transfers and merge buffers, events; plus the IR needed to write routines.
 *
 * Seed name -> troupe call:
 *   fresh_backend / close      troupe_backend_open / troupe_backend_close
 *   num_devices, get_device    troupe_num_devices, troupe_get_device
 *   suggested_num_streams      troupe_suggested_num_streams
 *   new_stream                 troupe_new_stream (streams are actors/stream.h streams)
 *   make_context, make_child   troupe_context_new, troupe_context_child, troupe_context_finalize
 *   compile, link              troupe_compile (troupe_compile_proc), troupe_link
 *   routine schedule           troupe_routine_run
 *   from_host, to_host, init_from_host, device_to_device
 *                              troupe_from_host, troupe_to_host, troupe_init_from_host,
 *                              troupe_device_to_device
 *   all_work, sync, is_done    troupe_stream_all_work, troupe_event_sync, troupe_event_is_done
 *   will_wait_for              troupe_will_wait_for
 *   await, is_idle             troupe_stream_await, troupe_stream_is_idle
 *   get_used_memory            troupe_get_used_memory
 *   get_debug_info             troupe_debug_info
 *
 * Thread safety and ownership: see each header.
 */
#ifndef TROUPE_ACTORS_TROUPE_H
#define TROUPE_ACTORS_TROUPE_H

#include "troupe/actors/backend.h"
#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/actors/routine.h"
#include "troupe/actors/stream.h"
#include "troupe/actors/transfer.h"
#include "troupe/base/clock.h"
#include "troupe/base/config.h"
#include "troupe/base/status.h"
#include "troupe/ir/assign.h"
#include "troupe/ir/lowlevel.h"
#include "troupe/ir/tnode.h"

#endif
