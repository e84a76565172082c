/* troupe — collectives across ranks through the transport engine (docs/architecture.md §6): allreduce with
 * fusion buckets (one entry point, troupe_allreduce, for host buffers and a context's device
 * arrays), broadcast.
 *
 * Ordering. Collectives are matched across ranks by order: every rank must issue the same
 * collectives in the same order (issue them from one thread, or from one stream per rank, as
 * parallel/ does). Each request gets a sequence number; the transport engine runs requests in
 * the order they were issued.
 *
 * Fingerprints. Before its data moves, each collective exchanges a fingerprint with every rank:
 * sequence number, kind, op, root, fusion bucket size, bfloat16 compression, and per tensor
 * (node id, precision, dims). A rank whose
 * fingerprint differs makes every rank fail the collective with TROUPE_FAILED_PRECONDITION and
 * a message naming the ranks, the tensor and the differing field, e.g.
 * "allreduce #3: fingerprint mismatch: tensor 0 (node 12 'w1') dims [4;8] on rank 0 but [5;8]
 * on rank 1" — within the deadline, never a hang or wrong numbers.
 *
 * Fusion buckets (Horovod's tensor fusion). An allreduce of many tensors packs them, in order,
 * into buckets of at most troupe_config_fusion_bytes() (TROUPE_FUSION_BYTES, default 64 MiB:
 * large enough that per-message latency is amortised — at the >= 10 GB/s of shared memory or
 * InfiniBand a 64 MiB bucket takes milliseconds while a message costs microseconds — and small
 * enough to bound the staging memory, 2 buckets in flight). Tensors of one reduce type share
 * a bucket (single, half, bfloat16 and fp8 all reduce as single; double; each integer type).
 * A tensor larger than a bucket is reduced in place in slices, and a tensor of at least
 * TROUPE_COLL_INPLACE_BYTES (128 KiB) that reduces in its own type (single, double, integers)
 * gets a bucket of its own reduced in place: copying it into a bucket and back would cost more
 * (two copies at ~10 GB/s: ~25 us per 128 KiB) than one more collective's latency (~5 us on
 * shared memory, a few us on InfiniBand), as with PyTorch DDP's buckets that are views of the
 * gradients. A shared bucket whose tensors lie back to back in this rank's memory, in request
 * order and in their own type, is reduced in place too, as one span: a routine's arrays are
 * packed that way in a context's pool (actors/routine.h), so a model's small gradients fuse
 * without copies (stats.staged counts the bytes that were copied). The buckets are planned from
 * the fingerprinted request and one layout flag per rank, carried by the fingerprint digests,
 * so every rank plans alike whatever its own layout. When every rank's tensors are of one
 * type and form one span in request order (a flat gradient buffer, as DDP's buckets; parallel/
 * issues all gradients in one request in node-id order, the order a routine's pool packs its
 * arrays), the span is cut in order into buckets of the fusion size, all reduced in place
 * (measured: the Fashion-MNIST MLP's 940 KB allreduce went from 3 buckets and ~160 us to 1
 * bucket and ~80 us per step on two ranks). Otherwise the plan is the one above, and only
 * whether a rank copies a bucket depends on its layout. One planner cuts every request
 * (transport/mpi/bucket.c): callers hand over all their tensors at once. Two buckets are in
 * flight at a time: one is reduced while the engine packs the next.
 *
 * Algorithms. An allreduce bucket of at least 64 KiB (and at least one element per rank) is
 * reduced by troupe's own ring over MPI point-to-point messages: reduce-scatter then
 * allgather, each rank moving 2(p-1)/p of the bucket and reducing (p-1)/p of it, like Baidu's
 * ring-allreduce, Horovod and NCCL. Measured with bench/merge.c on two ranks of a 2-core
 * machine (Open MPI 4.1, shared memory), against MPI_Allreduce and against libnbc's
 * MPI_Iallreduce with Rabenseifner's algorithm (troupe_cluster_init's default; libnbc's own
 * default is a binomial tree through rank 0 for in-place buffers or fewer than 4 ranks): the
 * ring is on par at 1 MiB, 5-15% faster at 4-16 MiB and 7-9 times faster at 64 MiB, where both
 * of Open MPI's take ~120 ms. Smaller buckets use MPI_Iallreduce, broadcasts MPI_Ibcast;
 * bfloat16-compressed buckets always use the ring (MPI has no bfloat16 sum). Each chunk is
 * summed along the ring in a fixed order and the result copied to every rank: every rank
 * holds the same bits, and a run is bitwise reproducible for a given number of ranks.
 *
 * Shared memory. When every rank runs on this node (MPI_COMM_TYPE_SHARED) and TROUPE_COLL_SHM
 * is 1 (the default) on every rank, troupe_cluster_init checks that each rank can map every
 * other's memory (memory files opened through /proc/<pid>/fd, a ptrace-read check); then host pools
 * of 64 KiB and more (a routine's arrays, gradients included) and troupe_coll_alloc's memory become
 * shareable (base/shared_memory_impl.h). An allreduce whose tensors form one span in such memory on
 * every rank (the flat plan above) then skips MPI: each rank publishes its arrival in a control
 * page, reduces its 1/p of the span by reading every rank's copy and writes the result into every
 * rank's copy (the ranks' values summed in rank order, so all ranks hold the same bits), and
 * publishes its departure; a rank's allreduce completes once every rank departed. Two waits on
 * shared flags replace the ring's 2(p-1) message rounds through the kernel (process_vm_readv), as
 * NCCL's SHM transport does within a node. Measured on the Fashion-MNIST MLP's 940 KB of gradients
 * on two ranks of a 2-core machine: ~44 us per step against ~150 us for the ring
 * (TROUPE_LOG=debug:transport, the bench_train child). Results differ from the ring's in the last
 * bits (another summation order) but are the same on every rank and reproducible. A rank that
 * cannot map another's memory at a request says so in its arrival; every rank then takes the MPI
 * path for it, and shared memory stays off from then on (logged). stats.shm counts these
 * collectives. An allreduce with a fused update (troupe_coll_apply_t) goes this way when its
 * side arrays lie as its tensors do, in shareable memory, on every rank: rank c then sums chunk
 * c block by block (8 KiB, in L1), runs the update on its own side arrays and copies the shared
 * side values into every other rank's (the private ones, the optimizer state, stay with it);
 * the tensors' arrays are left as they were. Ranks on several nodes use the plan above (the ring
 * from 64 KiB; a hierarchical allreduce is future work).
 *
 * Precisions. single and double reduce in their own precision (MPI_FLOAT, MPI_DOUBLE); half,
 * bfloat16 and fp8 are widened to single, reduced in single, and rounded back to nearest-even
 * once (ir/prec), so the result does not depend on the number of ranks' partial roundings;
 * int32/int64/uint32/uint64 reduce exactly (mean divides with truncation toward zero). Other
 * precisions: INVALID_ARGUMENT naming the tensor. Mean divides the sum by the number of ranks.
 *
 * Events. Every call returns at once with an event (actors/event.h) completing when the
 * collective finished (or failed: its status and message), so streams can wait on it
 * (troupe_stream_wait_for) and hosts sync it (troupe_event_sync with a deadline). A host-level
 * collective (troupe_allreduce of tensors, troupe_broadcast) starts when its event is first
 * consumed —
 * synced, its state queried, or subscribed to (a stream waiting on it) — or when the transport
 * has other work, like MPI's nonblocking collectives, which progress inside MPI calls; a thread
 * that syncs it while the transport is idle runs it itself, without waking the transport
 * thread. A device-level one starts as soon as its stream reaches it.
 *
 * Thread safety: thread-safe (see Ordering). Ownership: the caller owns *out_ev; host buffers
 * are borrowed and must stay valid, unread and unwritten by others, until the event completed.
 */
#ifndef TROUPE_TRANSPORT_MPI_COLLECTIVE_H
#define TROUPE_TRANSPORT_MPI_COLLECTIVE_H

#include "troupe/actors/context.h"
#include "troupe/actors/event.h"
#include "troupe/base/status.h"
#include "troupe/ir/prec.h"
#include "troupe/ir/tnode.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes from which a tensor of a natively reduced precision is reduced in place in a bucket of
 * its own instead of being copied into a shared one (see Fusion buckets above). */
#define TROUPE_COLL_INPLACE_BYTES (128 * 1024)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum troupe_reduce_op {
    TROUPE_REDUCE_SUM = 0,
    TROUPE_REDUCE_MEAN,
    TROUPE_REDUCE_MAX,
    TROUPE_REDUCE_MIN,
} troupe_reduce_op_t;

const char *troupe_reduce_op_name(troupe_reduce_op_t op); /* "sum", "mean", "max", "min" */

/* One tensor of a host-level collective: `count` elements of `prec` at `data`. node_id, ndims
 * and dims enter the fingerprint (node_id 0 and ndims 0 are allowed: then count alone is
 * checked); name (may be NULL, copied) appears in error messages. */
typedef struct troupe_coll_tensor {
    void *data;
    int64_t count;
    troupe_prec_t prec;
    int32_t node_id;
    int ndims;
    int64_t dims[TROUPE_MAX_DIMS];
    const char *name;
} troupe_coll_tensor_t;

/* Fills a troupe_coll_tensor_t from a node: data = `data`, count/prec/id/dims/name from tn. */
troupe_coll_tensor_t troupe_coll_tensor_of(const troupe_tnode_t *tn, void *data);

/* Flags of troupe_allreduce_args_t. */
enum {
    /* Device level: the collective starts when it is first waited for (troupe_will_wait_for
     * on ctx's stream, another stream through the ledger, or a host sync of the event)
     * instead of when ctx's stream reaches it; a stream that waits for it while the transport
     * is idle runs it on its own thread, which saves the hand-off to the transport thread and
     * back (two thread wake-ups, and on a machine with as many busy threads as cores, two
     * preemptions). Use it for the last collective before the stream waits (parallel/ does);
     * earlier ones should start at once, to overlap with the work in between. Host level:
     * accepted and changes nothing (host-level collectives always start lazily). */
    TROUPE_COLL_LAZY = 1u << 0,
    /* Gradient compression (Horovod's Compression.fp16, PyTorch DDP's bf16_compress_hook):
     * single-precision tensors travel between ranks as bfloat16, halving the bytes. Each
     * rank's values are rounded to bfloat16 (nearest even) once; the ring (see Algorithms)
     * adds in single and rounds the partial sums to bfloat16 after each step; the result is
     * widened back to single (mean: divided in single) and is the same bits on every rank.
     * The error is that of bfloat16 (8 significant bits), so it suits gradients, not exact
     * sums. Other precisions, and a single rank, are unaffected. Every rank must pass it alike
     * (fingerprinted: FAILED_PRECONDITION "bfloat16 compression on rank 0 but not on rank
     * 1"). */
    TROUPE_COLL_BF16 = 1u << 1,
    /* Device level only: ctx's stream does not wait for the result; it goes on with the work
     * scheduled after the call (the next step's local work) while the transport reduces
     * (troupe_lend_arrays_deferred). The event (then required) completes when the result is in
     * the arrays; the caller must call troupe_will_wait_for(ctx, event) before any later work
     * of ctx's stream reads or writes them. Other streams wait for it by themselves (ledger). */
    TROUPE_COLL_DEFERRED = 1u << 2,
    /* Device level, with a fused update that has private side arrays (troupe_coll_apply_t
     * n_private) only: no reduction and no update. Each rank's chunk of the private side
     * arrays, which the shared-memory path keeps current only on the rank that owns the chunk,
     * is copied to every rank, so every rank then holds them whole (the same bits). Pass the
     * tensors and the update as the requests that sharded them did (the fingerprint compares
     * them and this flag: a rank that reduces while another gathers fails both with
     * FAILED_PRECONDITION). Where nothing is sharded (the MPI paths) it completes at once
     * after the fingerprints. parallel/ issues it before a checkpoint reads the state. */
    TROUPE_COLL_UNSHARD = 1u << 3,
};

/* An elementwise update fused into a device-level allreduce (parallel/ fuses its optimizer
 * step so: each rank updates 1/p of the parameters where the reduction leaves the sums, instead
 * of every rank updating all of them after it; ZeRO stage 1's sharded update, Rajbhandari et al.
 * 2020).
 *
 * Private side arrays (ZeRO stage 1's sharded optimizer state): the last n_private of the
 * n_side side arrays are state that only fn reads. Through shared memory the rank that updates
 * a chunk keeps their values of that chunk to itself: they are not copied to the other ranks
 * (the copies of the others, n_side - n_private, still are), so each rank's private arrays are
 * current only in its own chunk of the span. The chunks are the same for every request whose
 * tensors lie alike, so the next such request finds them where it left them. Before the values
 * are read whole (a checkpoint), gather them with TROUPE_COLL_UNSHARD. When a request whose
 * private arrays were left sharded next goes another way (shared memory turned off after a
 * failed mapping, below), the transport first gathers them through MPI (MPI_Iallgatherv of
 * each rank's chunk), so that every rank updates every element from whole state.
 *
 * fn(arg, n, sum, side) is called on a run of n consecutive elements: sum[e] is the element's
 * allreduced value (single precision, summed in the transport's order, the same bits on every
 * rank) and side[s] (s < n_side) points at the same element of side array s of that tensor (a
 * run lies in one tensor, or, on the shared-memory path, where tensors and side arrays lie back
 * to back alike, may go on into the next); fn reads and writes side[s][0..n) and nothing else
 * (it may not keep the pointers).
 * The transport calls it exactly once per element of every tensor, on runs of any length and
 * in any order, on its engine thread or on a waiting stream's thread, and delivers the result
 * to every rank's side arrays: through shared memory (collective.h, Algorithms) rank c runs fn
 * on its own chunk and writes the shared side values it computed into every rank's copies (the
 * private ones into its own only, above); on the MPI paths every rank runs fn on every element
 * after the reduction. So fn must be a pure function of (arg, sum[e], side[s][e]) per element,
 * the same on every rank (the same build): then every rank holds the same bits in the shared
 * side arrays whatever the path, and in the private ones once gathered. The tensors' own arrays hold unspecified values
 * afterwards (this rank's, or the sums).
 *
 * Requirements (INVALID_ARGUMENT otherwise, naming the tensor): device level, op SUM, every
 * tensor single precision, 1 <= n_side <= TROUPE_COLL_APPLY_MAX_SIDE, n_private < n_side,
 * TROUPE_COLL_UNSHARD only with n_private > 0 (then fn is not called, on any number of ranks),
 * side[s * n + i] a node of
 * ctx of single precision with tensor i's element count, no node twice among the tensors and
 * side arrays. The side arrays are lent with the
 * tensors (written by the transport). `arg` (arg_bytes, at most TROUPE_COLL_APPLY_MAX_ARG) is
 * copied into the request; `id` names the update and travels in the fingerprint: ranks that
 * pass another id or none fail with FAILED_PRECONDITION ("fused update 0x.. on rank 0 but none
 * on rank 1"). With shared memory, every rank's side arrays of one side index must lie as its
 * tensors do (side s of tensor i at the same offset from side s of tensor 0 as tensor i from
 * tensor 0) in shareable memory; otherwise the sums go through shared memory (or MPI) as
 * without the update, and every rank then updates every element (every rank alike, same bits). */
#define TROUPE_COLL_APPLY_MAX_SIDE 4
#define TROUPE_COLL_APPLY_MAX_ARG 256
typedef void (*troupe_coll_apply_fn)(const void *arg, int64_t n, const float *sum,
                                     float *const *side);
typedef struct troupe_coll_apply {
    troupe_coll_apply_fn fn;
    const void *arg;
    size_t arg_bytes;
    uint64_t id;                /* nonzero */
    size_t n_side;              /* side arrays per tensor */
    size_t n_private;           /* the last n_private of them are private (above); < n_side */
    troupe_tnode_t *const *side; /* n * n_side nodes of ctx, side[s * n + i]; borrowed */
    /* Sharded state (ZeRO stage 1's memory saving), or NULL: shard[k] (k < n_private) is this
     * rank's only copy of private side array k, a host buffer of hi - lo floats holding its
     * elements [lo, hi) (troupe_coll_shard_range over the tensors' elements end to end); the
     * private entries of `side` are then unused (NULL). Every path then updates each element
     * on the rank that holds its shard and copies the parameters (the shared side arrays) to
     * the others: through shared memory directly, else after the reduction through
     * MPI_Iallgatherv (in place where the tensors and each shared side array lie in one span,
     * else through a flat copy). Off shared memory, where every rank's tensors lie in one span,
     * the reduction is a reduce-scatter cut at the shards (troupe's ring, its first half):
     * each rank receives only its shard's sums, so the bytes sent per rank fall from the
     * allreduce's 2(p-1)/p of the tensors to (p-1)/p (plus the gather's (p-1)/p); otherwise
     * the buckets' allreduce. With TROUPE_COLL_UNSHARD nothing moves (the caller holds the
     * shards and gathers them itself); the request only checks that every rank issued it at
     * the same point. Every rank must pass it alike (fingerprinted). Borrowed for the call;
     * written by the transport until the event completes. */
    float *const *shard;
} troupe_coll_apply_t;

/* Rank `rank`'s shard [*lo, *hi) of `count` single-precision elements on `size` ranks: whole
 * cache lines from the start, as the shared-memory path cuts its chunks (troupe_coll_apply_t
 * shard). */
void troupe_coll_shard_range(int64_t count, int rank, int size, int64_t *lo, int64_t *hi);

/* What troupe_allreduce reduces, and how. Zero-initialise, then set `n` and either the host
 * level (`tensors`) or the device level (`ctx` and `nodes`):
 *   - host level: tensors[0..n), reduced in place in the caller's buffers;
 *   - device level: ctx's arrays of nodes[0..n), reduced in place through troupe_lend_arrays
 *     (actors/lend.h): scheduled on ctx's stream, handed to the transport when the stream
 *     reaches it; work scheduled after it on the stream waits for the result (unless
 *     TROUPE_COLL_DEFERRED); the arrays count as written by the stream until then.
 * The tensors or nodes of one call form one request: fingerprinted together and cut into
 * fusion buckets by the transport (see Fusion buckets); a caller with many gradients passes
 * them all in one call, in the order their arrays lie in memory (node-id order for a
 * routine's arrays) so they form one span. */
typedef struct troupe_allreduce_args {
    troupe_reduce_op_t op; /* TROUPE_REDUCE_SUM (0) unless set */
    unsigned flags; /* TROUPE_COLL_LAZY | TROUPE_COLL_BF16 | TROUPE_COLL_DEFERRED |
                       TROUPE_COLL_UNSHARD */
    size_t n;              /* tensors (host level) or nodes (device level), >= 1 */
    const troupe_coll_tensor_t *tensors; /* host level; borrowed for the call */
    troupe_context_t *ctx;               /* device level; borrowed */
    troupe_tnode_t *const *nodes;        /* device level: n nodes of ctx; borrowed */
    /* Host level only: n_after events (borrowed for the call; NULL/0: none) that fill the
     * tensors, such as the to_host copies of device arrays into them (parallel/ stages a
     * backend's gradients so). The request takes its place in the order at the call, but the
     * transport reads the tensors only once every one of these completed, and then starts it
     * without waiting to be consumed (unlike other host-level collectives), so its reduction
     * overlaps whatever the caller scheduled after those events (the copies of the next
     * bucket). Requests issued after it wait for it, as for any collective. A failed event
     * does not hold the ranks up: the collective still runs (the other ranks get this rank's
     * stale values) and its event then fails with that event's status and message. An event
     * that never completes (a stuck stream) does not hold them forever either: the gate has the
     * deadline of every request (TROUPE_TIMEOUT_S), counted from when the request's turn came;
     * past it the request fails with DEADLINE_EXCEEDED, "allreduce #3 of 'g1' (node 12): the
     * events filling this rank's tensors did not complete within 120 s: 'cpu:0:0#41' (1 of 2
     * pending); never started, so the other ranks fail it naming rank 1", and the cluster fails
     * (a deadline). This rank tells the others, which wait for its fingerprint: they fail the
     * request at once with DEADLINE_EXCEEDED, "allreduce #3: rank 1 failed it before sending a
     * fingerprint: ...", instead of after their own deadline and a liveness probe. */
    troupe_event_t *const *after;
    size_t n_after;
    /* Device level only: an update fused into the reduction (troupe_coll_apply_t above;
     * borrowed for the call), or NULL. */
    const troupe_coll_apply_t *apply;
} troupe_allreduce_args_t;

/* Allreduce in place, fused (see above), the one entry point for host buffers and device
 * arrays. *out_ev (the caller owns it) completes when the result is in place (or failed: its
 * status and message); required at the host level and with TROUPE_COLL_DEFERRED, else it may
 * be NULL. Errors now: INVALID_ARGUMENT (NULL args, n == 0, both or neither of tensors and ctx,
 * NULL nodes, a bad op or precision, count < 0, unknown flags, TROUPE_COLL_DEFERRED at the
 * host level, a missing out_ev), the cluster's failure status, RESOURCE_EXHAUSTED; device
 * level: those of troupe_lend_arrays. Errors later, through the event: FAILED_PRECONDITION
 * (fingerprint mismatch), DEADLINE_EXCEEDED (ranks named; or, gated, the events that did not
 * complete, see `after`), TRANSPORT_ERROR (an MPI error string). */
TROUPE_MUST_USE troupe_status_t troupe_allreduce(const troupe_allreduce_args_t *args,
                                                 troupe_event_t **out_ev);

/* Broadcast of tensors[0..n) from rank `root` to every rank, in place; *out_ev (required,
 * the caller owns it) as troupe_allreduce's at the host level. Errors: those of
 * troupe_allreduce's host level, INVALID_ARGUMENT for a root outside 0..size-1. */
TROUPE_MUST_USE troupe_status_t troupe_broadcast(const troupe_coll_tensor_t *tensors, size_t n,
                                                 int root, troupe_event_t **out_ev);

/* Host memory for host-level collectives (like ncclMemAlloc or MPI_Alloc_mem): `size_bytes`
 * zero-filled bytes, aligned to 64 bytes at least. While ranks reduce through shared memory
 * (see Algorithms: all on this node, after troupe_cluster_init), an allocation of 64 KiB or
 * more (TROUPE__SHM_MIN_BYTES; each holds a file descriptor) is memory the other ranks can map, so
 * an allreduce whose tensors lie back to back in it on every rank is reduced through shared memory;
 * otherwise it is ordinary memory and collectives take the MPI paths. NULL when out of memory.
 * Release with troupe_coll_free (not free). Thread-safe. */
void *troupe_coll_alloc(size_t size_bytes);
/* Releases memory from troupe_coll_alloc. NULL-safe. */
void troupe_coll_free(void *p);

/* Broadcast of ctx's arrays of tns[0..n) from rank `root`, scheduled on ctx's stream as
 * troupe_allreduce's device level (the stream waits for the result); *out_ev may be NULL.
 * Errors: those of troupe_broadcast and of troupe_lend_arrays. */
TROUPE_MUST_USE troupe_status_t troupe_broadcast_nodes(troupe_context_t *ctx, size_t n,
                                                       troupe_tnode_t *const *tns, int root,
                                                       troupe_event_t **out_ev);

/* Transport counters for this process (debugging, benchmarks). */
typedef struct troupe_transport_stats {
    uint64_t collectives;  /* collectives issued */
    uint64_t completed;    /* collectives completed successfully */
    uint64_t buckets;      /* fusion buckets posted */
    uint64_t bytes;        /* bytes of the completed collectives' tensors */
    uint64_t failures;     /* requests that failed: mismatches, deadlines, MPI errors */
    uint64_t staged;       /* bytes of buckets copied through a staging buffer (not in place) */
    uint64_t ring_buckets; /* buckets reduced by troupe's ring (see Algorithms above) */
    uint64_t shm;          /* collectives reduced through shared memory (Algorithms above) */
    uint64_t reduce_scatters; /* fused updates with sharded state reduced by a reduce-scatter
                                 (troupe_coll_apply_t shard) */
} troupe_transport_stats_t;
void troupe_transport_get_stats(troupe_transport_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TROUPE_TRANSPORT_MPI_COLLECTIVE_H */
