/* troupe — C and CUDA source generation from the low-level IR (OCANNL `C_syntax`,
 * OCANNL_NOTES §6.4–6.7; docs/architecture.md §1 (the IR and compiler) `cgen`).
 *
 * One emitter, two dialects. troupe_cgen_emit turns a procedure (ir/lowlevel.h, optimized or
 * not) into a self-contained translation unit: a prelude holding only the helpers the routine
 * uses (small-float codecs, Threefry4x32, counter spreading, uint4x32 uniforms, typed
 * integer max/min, ...), then the routine. The helpers compute bit for bit what ir/prec.c and
 * ir/ops.c compute on the host, and the arithmetic follows ir/ops.h's C syntax, so generated
 * code, the interpreter and the host functions are references for one another.
 *
 * ---- Calling convention -----------------------------------------------------------------
 *
 * Parameters (troupe_cgen_result_t.params, in call order) are sorted by their C declaration
 * string (strcmp), as OCANNL sorts them, so the order depends only on the procedure:
 *   NODE_PTR      one per node the code reads or writes directly whose memory mode is not
 *                 known Local or Virtual (for an unoptimized procedure: every such node).
 *                 Declared `const T *restrict n<id>_<label>` when the routine only reads the
 *                 node, `T *restrict ...` when it writes it (`T *...` when it reads and
 *                 writes it and the routine takes a merge buffer, which may be that node's
 *                 array); distinct nodes never share an array
 *                 (CUDA: `__restrict__`). T is the storage type of the node's precision
 *                 (troupe_prec_c_type: half and bfloat16 are uint16_t bits, fp8 uint8_t bits,
 *                 uint4x32 a struct of four uint32_t). The array is dense row-major over the
 *                 node's stored dims.
 *   STATIC_IDX    one per static index symbol of the procedure (used or not), declared
 *                 `const int64_t <ident>`; its value is read at each call. The routine does not
 *                 check it: the caller keeps it within 0..static_range-1 (when the range is
 *                 nonzero), as OCANNL's CUDA backend checks before a launch.
 *   MERGE_BUFFER  at most one, when the code reads GET_MERGE_BUFFER: `const T *merge_buffer`,
 *                 T the storage type of the merge node, laid out like that node; passed at
 *                 each call (the stream's current merge buffer). Not restrict-qualified.
 * Nodes in Local memory mode are arrays declared (zero-filled) inside the routine; Virtual
 * nodes appear only as local-scope variables. A procedure that reads or writes a known-Virtual
 * node directly is rejected. An iteration scalar (a Local node with traced->iteration_scalar,
 * compiler/optimize.h step 4c) has no array: the C dialect declares `T <ident> = 0;` in a block
 * around the loop whose body first writes it and reads and writes `<ident>` there; the CUDA
 * dialect refuses it (FAILED_PRECONDITION: optimize with iteration_scalars false, as routines
 * for the cuda driver are).
 *
 * C dialect (TROUPE_CGEN_C): the unit defines, with external linkage,
 *     void <name>(<params>);            the routine itself, for a typed trampoline;
 *     void <name>_entry(void **args);   the uniform entry: args[k] is the k-th parameter's
 *                                       pointer for NODE_PTR and MERGE_BUFFER, and a pointer
 *                                       to an int64_t holding the value for STATIC_IDX,
 * and everything else `static`. A driver dlopens the shared object, dlsyms `<name>_entry` and
 * calls it with an array of nparams pointers: no libffi needed. It includes <math.h>,
 * <stdint.h> and <string.h>, is C11, and turns floating-point contraction off in the source
 * (GCC `optimize("fp-contract=off")`, clang `STDC FP_CONTRACT OFF`) so `-O3 -march=native`
 * gives the same bits as the interpreter (GCC also gets `optimize("wrapv")`). Compile with e.g.
 * `cc -O3 -shared -fPIC`; link with -lm.
 *
 * CUDA dialect (TROUPE_CGEN_CUDA): CUDA C++ for NVRTC (devices/cuda/nvrtc.h) defining
 *     extern "C" __global__ void <name>_k<i>(<params>);     i = 0 .. nkernels-1
 * kernels that all take the routine's parameters (same order as in C), launched with the CUDA
 * convention: kernel argument k points to the k-th parameter's value (for NODE_PTR the
 * address of the device pointer, for STATIC_IDX the address of an int64_t). One call of the
 * routine runs result->steps in order on one stream (stream order separates the kernels, so
 * no grid-wide barrier is needed). The plan, per top-level statement of the body:
 *   - ZERO_OUT: a kernel whose threads zero the node's elements (grid-stride, 1D); none when
 *     the node is global and its next accesses are nests (outside segments) whose loops all map
 *     and whose output index is a bijection of them onto a box of it (each axis a constant or
 *     a dense mixed radix: coefficients 1, ext, ext*ext', ...), the boxes disjoint and together
 *     the whole node (an im2col copy and its bias row): those nests read the node as 0 (0 + t,
 *     the bits the zeroed element gave);
 *   - a loop nest: the loops of its perfectly nested head (each loop the only statement of
 *     the previous one's body, or of the body of a gather index bound as that body's only
 *     statement: a scatter's channels) whose iterations touch disjoint data are mapped onto
 *     the grid.
 *     Loop i is mapped when every statement of the nest that writes memory lies inside it and
 *     every node the nest writes is accessed (read or written) on some axis only at one index
 *     (the same sum of terms and offset in every access) that holds a term c*i and whose terms
 *     make a mixed radix: taken by increasing |coefficient|, each exceeds the span of those
 *     before it (the sum of |c'| (extent - 1), each such term's symbol a loop of the nest;
 *     along the last axis a SET_FROM_VEC's length - 1 counts first, so one term c*i + o needs
 *     |c| >= that length). The index's value then determines i (and every other term's
 *     symbol), so distinct values of i touch distinct slices whatever the other loops do: a
 *     max pool's gradient at 2*oh + kh maps oh and kh, an im2col copy at 9*c + 3*kh + kw maps
 *     all three; a transposed convolution's oh + kh maps neither (its windows overlap). Such
 *     loops pair instead (skew pairs): when the nest is perfect, its one statement a SET of the
 *     only node it writes (at that one index everywhere), and every loop left unmapped is one
 *     of two terms a + b of one coefficient on an axis that holds no other symbol of theirs,
 *     each pair maps as its sum u = a + b (the thread's index, extent ext(a) + ext(b) - 1) and
 *     the outer of the two runs in the thread over the values that keep the inner one, u - a,
 *     in its range, in increasing order: every element's iterations run in one thread in the
 *     nest's order, bit for bit (an im2col's gradient, one thread per input cell, was one
 *     thread per image and channel over all its windows). The
 *     innermost mapped loop becomes x, the others (outermost most significant) are flattened
 *     into y; each is a grid-stride loop over its extent. Unmapped loops (reductions) stay in
 *     each thread in their original order, so every output element is computed by the same
 *     operations in the same order as the interpreter: results are bit for bit the C
 *     dialect's and the interpreter's, run to run. A loop in a thread whose body is one SET of
 *     a single or double node at indices that do not use the loop, reading that node only at
 *     that element, keeps the element in a register (loaded before the loop, stored after:
 *     the same bits; the node's pointer may alias the loop's reads, so the compiler cannot);
 *   - a block-level reduction (kernels[i].reassociates and .fixed_block): a perfect nest whose body
 *     is one SET `O[idx] = O[idx] + t` (or `t + O[idx]`, `O[idx] - t`, or `fma(x, y, O[idx])`), O
 *     single or double, where t (x, y) neither reads O nor writes any node, the unmapped loops'
 *     symbols are absent from idx, the reduction loops (the unmapped ones) cover R >= 256
 *     iterations in all and the mapped ones at most 16384 outputs (more outputs fill a GPU at one
 *     per thread). Each output is one block of 256 threads (grid-stride over the outputs, blocks
 *     flattened y-major); the reduction loops are flattened into r = 0..R-1 (innermost fastest) and
 *     thread t computes partial_t = 0 + t(r = t) + t(r = t+256) + ... (fma(x, y, partial_t) for the
 *     fma form; partial_t = 0 - t(r = t) - ... for `O - t`, the same terms negated, which is exact)
 *     in increasing r, in O's precision; then a tree in shared memory: for s = 128, 64, ..., 1,
 *     partial_t = partial_t + partial_{t+s} for t < s (a barrier between levels); thread 0 stores
 *     O[idx] + partial_0. No atomics: the result depends only on R and the 256-thread block, so it
 *     is bitwise the same run to run and for any grid, but NOT bit for bit the interpreter's (which
 *     adds t(0), t(1), ... to O[idx] in turn): the two differ by reassociation only, within about 2
 *     R u sum|t| (u the precision's unit roundoff). The same nest with O int32, uint32, int64 or
 *     uint64 (a sum `+`, wrapping) takes the same kernel and is exact (integer addition is
 *     associative), so not flagged. A max/min nest `O[idx] = max(O[idx], t)` or `max(t, O[idx])`
 *     (min alike), O single, double or one of those integers, under the same extents, is a
 *     block-level reduction bit for bit the interpreter's (not flagged): thread t takes the
 *     contiguous r in [t*R/256, (t+1)*R/256) (never empty, R >= 256) in increasing r starting from
 *     its first term, then the tree combines adjacent slots (for s = 1, 2, ..., 128: slot t with
 *     slot t+s for t a multiple of 2s), and thread 0 stores op(O[idx], total) in the nest's operand
 *     order. Every combination keeps the earlier terms in O's operand position, and troupe_fmax,
 *     troupe_fmin and their f forms (ir/ops.h: a NaN operand ignored, equal operands give the
 *     second) then pick one operand by a total order on (value, position), which is associative:
 *     the result is the sequential loop's, signed zeros and NaN payloads included;
 *   - a warp-level reduction (.fixed_block; .reassociates for a float sum): the same nests
 *     (sum, fma, max/min; the same precisions) into more than 16384 outputs, with R >= 32
 *     (every lane has a term; 32 single floats are one 128-byte line), whose term's reads
 *     step by one element along the innermost reduction loop in more of them than along the
 *     innermost mapped loop (a row's terms side by side, as attention's softmax rows: a
 *     thread per output would read rows apart, where a warp's lanes read side by side; a
 *     column sum keeps its threads). Each output is one warp: blocks of 256 threads take
 *     groups of 8 outputs (grid-stride over ceil(outputs / 8) groups), thread t computing
 *     output 8 g + t / 32 as lane l = t mod 32; a warp past the last output takes no terms
 *     but meets every barrier. A sum: lane l computes partial_l = 0 + t(r = l) +
 *     t(r = l+32) + ... (fma alike) in increasing r, in O's precision; then for s = 16, 8,
 *     ..., 1, partial_l = partial_l + partial_{l+s} for l < s in shared memory (a barrier
 *     between levels); lane 0 stores O[idx] + partial_0. As the block form, it depends only on
 *     R: bitwise the same run to run and for any grid, within about 2 R u sum|t| of the
 *     interpreter (flagged); integers exact (not flagged). A max/min: lane l takes the
 *     contiguous r in [l*R/32, (l+1)*R/32) (never empty) in increasing r from its first term,
 *     the tree combines adjacent slots (s = 1, 2, ..., 16: slot l with slot l+s for l a
 *     multiple of 2s) and lane 0 stores op(O[idx], total) in the nest's operand order: bit for
 *     bit the interpreter's by the block form's argument (not flagged). Strided terms would
 *     lose the order that argument needs (two slots' equal values would need their terms'
 *     positions), so a max/min's lanes read 32 contiguous pieces of the row: a request spans
 *     several lines, all of that one row. No warp shuffles (shared memory and __syncthreads
 *     only). Other reductions (shorter, half/bfloat16/fp8 or byte/uint16 outputs, into many
 *     outputs below 32 terms or not along rows) keep the in-thread path and its bit-for-bit
 *     contract;
 *   - a matrix product compiler/gemm.h recognises at top level, whose operands' base offsets
 *     depend only on static indices (a ZERO_OUT of the output just before it fuses as
 *     beta = 0): a GEMM step whose fallback is one kernel (.fixed_block) of shared-memory tiles:
 *     a block of 256 threads computes a 128x128 tile of C (double, and single with fewer
 *     than 128 such tiles: 64x64), each thread an 8x8 (4x4) micro-tile of rows ty + 16*r
 *     and columns tx + 16*c in registers, with 8-deep (16-deep) slices of op(A) and op(B)
 *     staged in shared memory between barriers (zero outside the matrix; the last slice runs
 *     only its k steps); tiles grid-stride over the blocks. Each element starts from 0
 *     (beta = 0) or its C value and adds k = 0, 1, ... in
 *     order with the nest's own operation (fma, or c + a*b rounded twice), so the fallback is
 *     bit for bit the interpreter's (cuBLASLt, when it runs the step, is not). A product
 *     below up to TROUPE_CGEN_GEMM_MAX_BATCH loops that the matcher does not take (a loop
 *     nest from 0 with one statement a level: attention's "bhtd,bhsd=>bhts" under b and h),
 *     or with its own merged outer loops, is a batched step (troupe_cgen_gemm_call_t.nbatch):
 *     its tiles grid-stride over the batch points whose C blocks are disjoint, and run the
 *     points that accumulate into one block in the nest's order inside each tile, so it too is
 *     bit for bit the nest; the cuda driver runs a batched step on these tiles (its cuBLASLt
 *     form is not written);
 *   - a product compiler/gemm.h refuses for its precisions alone (troupe_gemm_t.shape_ok:
 *     half, bfloat16 or fp8 operands or output, or mixed precisions, all floats) of at least
 *     TROUPE_GEMM_MIN_MACS multiply-adds, its bases as above: the same tiled kernel as a plain
 *     kernel step (no GEMM step). Shared slices and accumulators hold the output's computation
 *     type (single for a small-float output, else the output's), so the tile is single's
 *     128x128 (8.25 KiB of shared memory) or double's 64x64 (17 KiB); each operand element is
 *     converted into that type when staged, as the nest's GET converts it, and a small-float
 *     output is rounded to its format after every k step and widened back (the value the nest
 *     stores and reads at the next k; NaN by troupe's rule): bit for bit the interpreter's.
 *     A zeroing before it stays a kernel of its own;
 *   - anything else (a top-level SET, a nest with no mappable loop): consecutive ones are
 *     grouped into one one-thread kernel (thread 0 of block 0 runs it; the others return);
 *   - Local arrays: the top-level statements from the first that touches some Local array to
 *     the last (ranges that overlap merged) form a segment, planned before the rest (no GEMM
 *     step inside it). One block of 256 threads runs a segment (fixed_block) with its Local
 *     arrays in shared memory, zeroed first: its statements in order, a barrier after each; a
 *     nest's mapped iterations (the rule above, flattened) spread over the threads with the
 *     unmapped loops in each thread in order, a ZERO_OUT's elements likewise, any other
 *     statement on thread 0: bit for bit the interpreter's. A segment alone in its launch may
 *     hold 48 KiB; one whose Local arrays pass that side by side but share one precision packs
 *     them in one pool by their uses (arrays whose first-to-last statements do not overlap share
 *     elements; each zeroed just before its first statement). Past 48 KiB even so (packed, or
 *     side by side at multiples of 16 bytes when the precisions differ) the arrays go to the
 *     launch's dynamic shared memory when the target's blocks may opt into that much
 *     (troupe_cgen_options_t.cuda_shared_max_bytes; troupe_cgen_kernel_t.dynamic_shared_bytes).
 *     The main job's loss segment, when its temporaries are Local (the cuda backend asks the
 *     optimizer for none: devices/device.h no_local_arrays), packs from 256 to 396 rows per
 *     replica and takes dynamic shared memory from 397 to 409. A segment runs on one thread,
 *     with its arrays as arrays of that thread, only when that too is too little. A segment
 *     is wide when a
 *     statement of it writing a non-Local array has more than 64 x 256 mapped iterations, the
 *     statements writing only its Local arrays have at most 16 x 256 iterations in all, every
 *     statement writing a non-Local array is a nest with mapped loops writing no Local array,
 *     and no other statement of the segment touches what it writes (zeroings of non-Local
 *     arrays move before the segment first when nothing before them in it touches the
 *     array): a wide segment runs on min(1024, ceil(iterations / 256)) blocks of 256 threads
 *     (fixed_block, a launch of its own), each block building the Local arrays in its shared
 *     memory and running the Local statements, all blocks sharing the other statements'
 *     iterations (grid-stride): still bit for bit the interpreter's (the main job's
 *     da2 = dz3 x w3_t, w3_t Local, at large batches). Statements outside segments never
 *     touch a Local array.
 * Then launches are shared. Each planned piece except a GEMM step and a refused product's
 * tiles, in order, looks back to the last launch holding a piece it conflicts with (one of the
 * two writes a node the other reads or writes) and (horizontal fusion) joins the earliest
 * kernel after that launch, within 44 KiB of shared memory per kernel; else, when it is small
 * (a map of at most 64 x 256 iterations, a ZERO_OUT of as many elements, sequential code),
 * it goes to the end of the earliest one-block launch (a segment) from that conflicting
 * launch on, which then runs it after what it holds (a barrier between); else a segment takes
 * the conflicting launch into its block when all of its pieces are small, running them
 * first; else the piece opens a launch. Each piece still runs after all it depends on and
 * before all that depends on it. Pieces of one kernel's parts touch no node in conflict, so
 * they run in any order or at once, and each element is computed by the same operations as
 * alone: sharing changes no result (the kernel reassociates exactly when a piece does). Such a
 * kernel (several pieces, or a segment) is 1D with 256 threads per block
 * (1 when all pieces are sequential: one_thread when there is one) and V virtual blocks, the
 * sum of its parts' (a map or ZERO_OUT ceil(iterations / 256), or past 1024 of those
 * max(1024, ceil(iterations / 2048)), a block-level reduction its
 * outputs, a warp-level one its groups of 8 outputs, each at most 65535; a one-block launch or
 * sequential piece 1); its blocks grid-stride over the virtual blocks, and virtual block v
 * runs the piece whose range holds v (with 4 or more pieces found by a binary search of a
 * __constant__ table of the ranges' ends, then a switch) as that piece's block v - start: a
 * map's iterations
 * flattened and strided over the piece's blocks and the block's threads, a reduction's outputs
 * (warp form: groups of 8) over its blocks. grid x = V (at most 65535), extent {V, 1};
 * fixed_block when a piece is a reduction or a segment. A piece alone keeps its own kernel as
 * above. The routine logs one line at debug:ir: its launches per call, kernels,
 * one-thread kernels and GEMM steps.
 * Launch shape (kernels[i].grid, .block): one-thread: 1x1 blocks of 1x1 threads; 1D: block
 * x = the extent rounded up to a multiple of 32, at most 256; 2D: block x likewise at most 32,
 * block y = min(256 / block x, extent y), except that an x extent below 256 and not a multiple
 * of 32 (a convnet's image row) is flattened with y into 1D (extent {x * y, 1}; iteration
 * t_f is t_y = t_f / x, t_x = t_f mod x), which keeps every lane busy; grid = ceil(extent /
 * block) per axis, at most 65535
 * (the grid-stride loops cover the rest; each is under `#pragma unroll 1`). A block-level
 * reduction: 256x1 threads, grid x = the
 * outputs (at most 65535), extent {R, outputs}; a warp-level one likewise with grid x =
 * ceil(outputs / 8) (at most 65535); a GEMM tile kernel: 256x1 threads, grid x =
 * the tiles (at most 65535), extent {n, m}. A fixed_block kernel must be launched with its
 * planned block (its code splits work by threadIdx.x); any grid is correct.
 Fixed-width integer types are typedef'd in the prelude. half, bfloat16 and fp8 (E5M2) are
 * stored as the same bits as on the host and converted through CUDA's own types where a
 * routine uses them (the prelude then includes cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, which
 * NVRTC finds on the toolkit include path troupe_nvrtc_compile passes): single -> small by
 * __float2half_rn, __float2bfloat16_rn and __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2),
 * small -> single by __half2float, __bfloat162float and __nv_cvt_fp8_to_halfraw. Each rounds
 * to nearest even with subnormals and overflows to infinity, as ir/prec.c's plain encoders
 * (fp8 with __NV_NOSAT does not saturate); the widening ones are exact. They differ from
 * ir/prec.c on NaN only (CUDA returns the canonical NaN 0x7FFF / 0x7F, troupe keeps the sign
 * and the payload's top bits and sets the quiet bit), so a NaN input takes troupe's software
 * rule in both directions and the two dialects round identically. Which instruction runs is
 * CUDA's choice per architecture (cvt.rn.f16.f32 everywhere, bf16 cvt from sm_80, fp8 cvt
 * from sm_89; the headers' software paths below). Compile without
 * --use_fast_math and with --fmad=false (troupe_nvrtc_compile does) for IEEE results;
 * single exp and tanh_approx are the prelude's troupe_expf and troupe_tanhf in both dialects
 * (ir/ops.h's code, which the interpreter runs: the same bits everywhere); the other
 * transcendental functions (logf, sinf, ...) are CUDA's and may differ from glibc's by an
 * ulp or two.
 *
 * ---- Lane sums and lane max/min (C dialect) ----------------------------------------------
 *
 * A loop of N >= TROUPE_CGEN_LANES_MIN_TRIP iterations whose body is one SET of a single or
 * double node O at indices that do not use the loop, of value O + t, t + O, O - t or
 * fma(x, y, O), where t (x, y) reads O nowhere and holds no local scope, is a lane sum: L =
 * TROUPE_CGEN_LANES lanes start at 0 and iteration j (0-based) updates lane j mod L by the
 * SET's own expression with the lane in O's place (lane + t, t + lane, lane - t,
 * fma(x, y, lane)), in increasing j; then for w = L/2, ..., 2, 1, lane k = lane k + lane k+w
 * (k < w); then O = O + lane 0. GCC vectorises the lanes (one vector loop), so the sums of a
 * softmax, a layer norm or a loss run at vector speed. The order depends only on N and L:
 * bitwise the same run to run and on every machine, but NOT bit for bit the interpreter's
 * (which adds t(0), t(1), ... to O in turn): the two differ by reassociation only, within
 * about 2 N u sum|t| (u the precision's unit roundoff). troupe_cgen_result_t.reassociates
 * flags a unit holding one. A perfect nest of k >= 2 loops (each body exactly the next loop,
 * the innermost body such a SET, O's indices using none of its loops) whose N, the product
 * of the extents, is >= TROUPE_CGEN_LANES_MIN_TRIP is one lane sum over its flattened
 * iteration j (the nest's own order, 0-based) when every access of the SET collapses: in its
 * row-major offset each loop's coefficient is the next inner loop's times that inner loop's
 * extent, so the nest steps it like one loop of N (printed as the innermost coefficient
 * times the flat index; loop bounds need not start at 0). The order is then the lane sum's
 * above, a function of N and L only: bitwise the same run to run, not the interpreter's,
 * flagged. A nest that does not collapse, or embeds one of its indices as a value, keeps
 * its loops (its innermost loop may be a lane sum alone). A loop or nest of the same shape
 * with value max(O, t), max(t, O) or min alike (troupe_fmax(f), troupe_fmin(f)) runs in
 * lanes too, each starting at -inf (min: +inf), combined by the same tree with the op, then
 * O = op(O, lane 0) in the SET's operand order: a NaN term is ignored and a result other
 * than 0 and the start value is the same bits in any order, so that is bit for bit the
 * sequential loop's; when lane 0 is 0 or the start value (signed zeros, all terms NaN or
 * infinite) the loop reruns in order. Not flagged. Integer sums and shorter loops keep the
 * sequential order.
 *
 * ---- Semantics of the generated code ----------------------------------------------------
 *
 * The generated code follows the evaluation rules of the reference interpreter
 * (compiler/interp.c), so that the two agree bit for bit (up to libm for transcendental functions;
 * except the CUDA dialect's block- and warp-level sums and the C dialect's lane sums, which
 * reassociate sums, see above):
 * every scalar expression computes in the precision of the node it is stored into (SET), of
 * its local scope's node (SET_LOCAL), or uint4x32 (the argument of SET_FROM_VEC and of
 * uint4x32_to_prec_uniform1); operands of binops, unops and fma compute in that same
 * precision (ops.h homogeneity rule); where's condition computes in its own precision (a
 * GET's or local scope's node precision, otherwise the context's, or int64 under a uint4x32
 * context; a uint4x32 condition is rejected). half, bfloat16 and fp8 compute in float and
 * are rounded to the format (RNE, overflow to infinity) once per SET; integers compute in C's
 * promoted type with wrapping signed arithmetic. A GET converts the stored value into the
 * computation precision (ops.h troupe_c_convert_precision; into uint4x32 the counter
 * construction). A local scope is a variable of its node's computation type (float for
 * half/bfloat16/fp8), zero-initialised; SET_LOCAL does not round it to the node's format.
 * CONSTANT c: (float)c, c, or the integer truncated and saturated (troupe_prec_store_double),
 * in uint4x32 as an int64 {lo, hi, 0, 0}; CONSTANT_BITS b is the int64 b converted like a GET
 * of an int64 node (a key becomes {lo(b), hi(b), 0, 0}); EMBED_INDEX is the int64 index value,
 * except that into uint4x32 its low 32 bits are spread like a uint32 counter (OCANNL's index
 * precision is uint32).
 * Where C leaves behaviour undefined the generated code does too, unlike the interpreter
 * (which reports an error or saturates): integer division or remainder by zero, a float
 * converted into an integer type outside its range. Signed overflow wraps under GCC (the unit
 * sets `optimize("wrapv")`); clang and NVRTC have no such switch in the source.
 * Loops are `for (int64_t i = from; i <= to; ++i)` in the IR's order; array offsets are the
 * row-major combination of the affine indices, printed as `c*sym + ... + offset`.
 * Identifiers: nodes `n<id>_<label>` (label sanitised to [A-Za-z0-9_], at most 40 chars),
 * local-scope variables `v<scope>_<label>`, loop symbols named `i<id>` as themselves, other
 * symbols `s<id>_<name>`.
 *
 * Thread safety: troupe_cgen_emit only reads the procedure (and the nodes' memory modes,
 * under their locks), so several threads may emit from one finished procedure at once.
 * Ownership: the caller owns the result and frees it with troupe_cgen_result_destroy; the
 * result holds one reference to each node named in its parameters.
 */
#ifndef TROUPE_COMPILER_CGEN_H
#define TROUPE_COMPILER_CGEN_H

/* Lanes of a C-dialect lane sum, and the fewest iterations a loop needs to become one. */
#define TROUPE_CGEN_LANES 16
#define TROUPE_CGEN_LANES_MIN_TRIP 32

#include "troupe/base/status.h"
#include "troupe/ir/lowlevel.h"
#include "troupe/ir/tnode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The two dialects (values are stable). */
typedef enum troupe_cgen_dialect {
    TROUPE_CGEN_C = 0,    /* C11 for the CPU driver: compiled by the system C compiler */
    TROUPE_CGEN_CUDA = 1, /* CUDA C++ for NVRTC */
} troupe_cgen_dialect_t;

/* "c" or "cuda"; "invalid" out of range. */
const char *troupe_cgen_dialect_name(troupe_cgen_dialect_t dialect);

/* Where a parameter's value comes from (OCANNL `param_source`, OCANNL_NOTES §6.7). */
typedef enum troupe_cgen_param_kind {
    TROUPE_CGEN_PARAM_NODE_PTR = 0, /* the node's array in the linked context */
    TROUPE_CGEN_PARAM_STATIC_IDX,   /* a static index symbol's value, read at each call */
    TROUPE_CGEN_PARAM_MERGE_BUFFER, /* the stream's merge buffer, read at each call */
} troupe_cgen_param_kind_t;

typedef struct troupe_cgen_param {
    troupe_cgen_param_kind_t kind;
    char *decl;  /* the C declaration, e.g. "const float *restrict n3_w"; the sort key */
    char *ident; /* the identifier in the generated code, e.g. "n3_w", "s1_batch", "merge_buffer" */
    /* NODE_PTR: the node; MERGE_BUFFER: the merge node (one reference each, owned by the
     * result); STATIC_IDX: NULL. */
    troupe_tnode_t *tn;
    bool is_read;    /* NODE_PTR: the routine reads the node (MERGE_BUFFER: always true) */
    bool is_written; /* NODE_PTR: the routine writes the node */
    /* STATIC_IDX: the symbol's id in the procedure, its name there and its range (values
     * 0..static_range-1; 0 = unbounded). Other kinds: -1, NULL, 0. */
    int32_t sym;
    char *sym_name;
    int64_t static_range;
} troupe_cgen_param_t;

/* ---- CUDA: kernels and the steps of a call (troupe_cgen_result_t.kernels, .steps) ------------ */

/* One `extern "C" __global__` kernel of a CUDA unit and the launch shape it was planned for.
 * Its thread-mapped loops are grid-stride loops over `extent`, so any grid is correct; `grid`
 * and `block` are the planned shape (see "CUDA dialect" above for the rule). */
typedef struct troupe_cgen_kernel {
    char *name;        /* "<routine>_k<index>" */
    int64_t extent[2]; /* iterations covered in x and y (1 and 1 for a one-thread kernel) */
    uint32_t grid[2];  /* blocks in x, y */
    uint32_t block[2]; /* threads per block in x, y */
    bool one_thread;   /* sequential code: only thread 0 of block 0 works (the others return) */
    /* The code assumes exactly block[0] x block[1] threads per block (it splits work by
     * threadIdx and meets at __syncthreads: a block- or warp-level reduction, a GEMM tile);
     * any grid is still correct. Launch it with `block` as planned. */
    bool fixed_block;
    /* The kernel sums in another order than the interpreter (a block- or warp-level sum): what
     * it writes agrees with the interpreter within rounding, not bit for bit (it is bitwise
     * the same run to run and for any grid). */
    bool reassociates;
    /* Bytes of dynamic shared memory every launch must give it (cudaLaunchKernel's sharedMem),
     * 0 for none: a segment whose Local arrays need more than the 48 KiB of static shared
     * memory any block gets, and at most troupe_cgen_options_t.cuda_shared_max_bytes, holds
     * them there (TROUPE_DYN_SHARED in the prelude). Over 48 KiB the kernel's
     * cudaFuncAttributeMaxDynamicSharedMemorySize must be raised to it first. */
    uint32_t dynamic_shared_bytes;
    /* The kernel's launch arguments, in its signature's order: indices into the routine's
     * parameters (troupe_cgen_result_t.params, ascending), only those its text names, then
     * nparams (the routine's gather error words) when the routine has gathers. A launch passes
     * argument j as the value of routine parameter args[j]: a routine of many nodes (GPT-2:
     * over 500 parameters) would otherwise give every kernel every node, which made NVRTC's
     * input 13 times larger and could pass CUDA's limit on a kernel's parameter bytes. */
    size_t *args;
    size_t nargs;
} troupe_cgen_kernel_t;

typedef enum troupe_cgen_step_kind {
    TROUPE_CGEN_STEP_KERNEL = 0, /* launch kernels[first_kernel] */
    TROUPE_CGEN_STEP_GEMM,       /* a matrix product for a GEMM library (cuBLASLt), else the
                                  * kernels first_kernel.. first_kernel+nkernels-1 in order */
} troupe_cgen_step_kind_t;

/* Most terms a GEMM operand's base offset has (static indices; compiler/gemm.h). */
#define TROUPE_CGEN_GEMM_MAX_TERMS 8
/* Most batch loops a GEMM step runs its product over (troupe_cgen_gemm_call_t.nbatch). */
#define TROUPE_CGEN_GEMM_MAX_BATCH 3

/* A GEMM operand: the node's array (parameter `param`, a NODE_PTR) at element offset
 *     offset + sum_t coeff[t] * value(static index parameter static_param[t])
 * read at each call; op(A)[i,k] = A[i*ld + k] (trans false) or A[k*ld + i] (trans true). */
typedef struct troupe_cgen_gemm_operand {
    size_t param;
    int64_t offset;
    int nterms;
    size_t static_param[TROUPE_CGEN_GEMM_MAX_TERMS];
    int64_t coeff[TROUPE_CGEN_GEMM_MAX_TERMS];
    bool trans;
    int64_t ld;
    int64_t batch_stride[TROUPE_CGEN_GEMM_MAX_BATCH]; /* elements per step of batch loop b */
} troupe_cgen_gemm_operand_t;

/* What a GEMM step applies to each output element x = sum + (beta_zero ? 0 : C) after the
 * product (compiler/gemm.h's epilogues that cuBLASLt takes: CUBLASLT_EPILOGUE_BIAS, _RELU,
 * _RELU_BIAS). */
typedef enum troupe_cgen_gemm_epilogue {
    TROUPE_CGEN_GEMM_EPI_NONE = 0, /* x */
    TROUPE_CGEN_GEMM_EPI_BIAS,     /* x + bias[j] */
    TROUPE_CGEN_GEMM_EPI_RELU,     /* max(x, 0) */
    TROUPE_CGEN_GEMM_EPI_RELU_BIAS /* max(x + bias[j], 0) */
} troupe_cgen_gemm_epilogue_t;

/* Row-major C[i*ldc + j] = epilogue(sum_k op(A)[i,k] * op(B)[k,j] + (beta_zero ? 0 :
 * C[i*ldc + j])), i < m, j < n, k < k; prec TROUPE_PREC_SINGLE or _DOUBLE (compiler/gemm.h's
 * normal form). The bias is a vector of n elements, bias[j] at the operand's offset + j (its
 * trans and ld unused): one value per column j of row-major C, which is one per row of the
 * column-major C^T (n x m) cuBLASLt computes, the orientation its bias has. The epilogue comes
 * from statements beside the product (an initial bias becomes beta = 0 plus the bias, added
 * after the sum: equal to the fallback kernels within float rounding; relu here gives 0 for
 * NaN and may differ in the sign of zero). */
/* Batched (nbatch > 0): the product runs once per point of the batch loops (the nest's loops
 * around it, compiler/gemm.h's outer loops), each operand's base moved by batch_stride[b] per
 * step of loop b. A loop along which C does not move (its stride 0) accumulates into the same
 * block: those run in order, outermost first, each summing into what the one before left (the
 * nest's order, which puts them outside the product's k loops); the others write disjoint
 * blocks. Such a step has no epilogue, and beta_zero only when its points' blocks tile C
 * exactly and a zeroing of C came before with no access of C between (the zeroing then
 * dropped: attention's q k^T). The cuda driver runs the inner batch
 * loops that fold into one stride as a cuBLASLt strided batch and the outer ones as calls in
 * order (devices/cuda/gemm_lt.c); a step with an accumulating loop runs its fallback kernels
 * (tiles that loop over the batch). */
typedef struct troupe_cgen_gemm_call {
    troupe_prec_t prec;
    int64_t m, n, k;
    int nbatch;
    int64_t batch_ext[TROUPE_CGEN_GEMM_MAX_BATCH];
    bool beta_zero;
    troupe_cgen_gemm_operand_t a, b, c;
    troupe_cgen_gemm_epilogue_t epilogue;
    troupe_cgen_gemm_operand_t bias; /* EPI_BIAS and EPI_RELU_BIAS */
} troupe_cgen_gemm_call_t;

typedef struct troupe_cgen_step {
    troupe_cgen_step_kind_t kind;
    size_t first_kernel;          /* KERNEL: the kernel; GEMM: the first kernel of the fallback */
    size_t nkernels;              /* KERNEL: 1; GEMM: the fallback's kernels */
    troupe_cgen_gemm_call_t gemm; /* GEMM only */
} troupe_cgen_step_t;

/* A generated translation unit. */
/* One gather index of the routine (a BIND_INDEX of the procedure), for its failure message. */
typedef struct troupe_cgen_gather {
    char *index_name; /* the index node's debug name ("n3_tokens") */
    char *table_name; /* the node it selects in, or NULL */
    int ndims;        /* the index node's */
    int axis;
    int64_t range; /* valid values 0..range-1 */
} troupe_cgen_gather_t;

/* int64 words of a routine's gather error block: [0] 0 = no failure, else the 1-based gather
 * (troupe_cgen_result_t.gathers); [1] the value as double bits; [2..] the index node's cell. */
#define TROUPE_CGEN_GATHER_ERR_WORDS (2 + TROUPE_MAX_DIMS)

typedef struct troupe_cgen_result {
    troupe_cgen_dialect_t dialect;
    char *source;      /* NUL-terminated source text */
    size_t source_len; /* strlen(source) */
    char *name;        /* the routine's (kernel's) name: the procedure's name */
    char *entry_name;  /* C: "<name>_entry"; CUDA: NULL */
    /* C: "<name>_gemm_hooks" when the code calls a GEMM library for some contraction
     * (compiler/gemm.h), else NULL. The loader passes it the library's entries
     * (devices/host/gemm_library.h): void <name>_gemm_hooks(troupe_sgemm_fn, troupe_dgemm_fn);
     * until then, or given NULLs, the code runs its own loops, unless gemm_library_only. */
    char *gemm_hooks_name;
    /* C: the code calls the GEMM library and has no loops of its own for a NULL hook
     * (troupe_cgen_options_t.c_gemm_library_only): with NULL sgemm, dgemm, bgemm or hgemm
     * hooks its contractions would write nothing, so a loader must refuse to run it without
     * them. */
    bool gemm_library_only;
    /* C: "<name>_gemm_bf16_hooks" when some contraction has bfloat16 factors, else NULL:
     * void <name>_gemm_bf16_hooks(troupe_bgemm_fn) (devices/host/gemm_library.h). */
    char *gemm_bf16_hooks_name;
    /* C: "<name>_gemm_half_hooks" when some contraction has half factors, else NULL:
     * void <name>_gemm_half_hooks(troupe_hgemm_fn) (devices/host/gemm_library.h). */
    char *gemm_half_hooks_name;
    /* C: "<name>_gemm_pack_hooks" when some loop of A B^T calls packs B^T once for the calls
     * (compiler/cgen.c, s_bt_pack), else NULL: void <name>_gemm_pack_hooks(troupe_spack_bt_fn)
     * (devices/host/gemm_library.h); until then, or given NULL, each call is made as it is. */
    char *gemm_pack_hooks_name;
    /* C: "<name>_gemm_brgemm_hooks" when some loop of calls accumulating into one block runs
     * as one batch-reduce call (compiler/cgen.c, s_brgemm_t), else NULL:
     * void <name>_gemm_brgemm_hooks(troupe_sbrgemm_fn) (devices/host/gemm_library.h); until
     * then, or given NULL, each call is made as it is. */
    char *gemm_brgemm_hooks_name;
    troupe_cgen_param_t *params; /* nparams entries, in call order */
    size_t nparams;
    /* CUDA: the unit's kernels, and the steps one call of the routine runs, in order, on one
     * stream (every kernel takes all the parameters). C: none (0, NULL). */
    troupe_cgen_kernel_t *kernels;
    size_t nkernels;
    troupe_cgen_step_t *steps;
    size_t nsteps;
    /* Gather indices (ngathers > 0): the routine (every CUDA kernel) takes one more parameter
     * after the others, `int64_t *troupe_err`, TROUPE_CGEN_GATHER_ERR_WORDS zeroed words; C's
     * entry reads it from args[nparams]. Before its first write the routine checks every
     * gather index and, on one out of range, fills the words and writes nothing. */
    troupe_cgen_gather_t *gathers;
    size_t ngathers;
    /* C: some loop is a lane sum ("Lane sums" above): what it writes agrees with the
     * interpreter within rounding, not bit for bit (it is bitwise the same run to run and on
     * every machine). CUDA: false (see troupe_cgen_kernel_t.reassociates). */
    bool reassociates;
} troupe_cgen_result_t;

/* The failure that a routine's filled gather error block `err` reports (INVALID_ARGUMENT
 * naming the index node, its cell, the value and the range, troupe_ll_gather_failure), or OK
 * when err[0] is 0. */
TROUPE_MUST_USE troupe_status_t troupe_cgen_gather_failure(const troupe_cgen_result_t *result,
                                                           const int64_t *err);

/* Generates `dialect` source for `proc` (see the header comment for the calling convention
 * and semantics) into a new result *out (NULL on failure).
 * Errors:
 *   INVALID_ARGUMENT — NULL arguments, an unknown dialect, a procedure that fails
 *     troupe_ll_proc_validate or is sticky-failed, a procedure name that would collide with
 *     generated identifiers (starting "troupe", `n<digit>`, `v<digit>`, `s<digit>`,
 *     `i<digit>`, a C/C++ keyword or a libm function name), an operation that the dialect
 *     cannot express in the precision it computes in (the message names the op, the precision
 *     and the dialect, e.g. "binop add is not defined in precision uint4x32"), a
 *     SET_FROM_VEC whose length is not the vec_unop's output count for the node's precision
 *     or that writes past the last axis;
 *   FAILED_PRECONDITION — the code reads or writes a node whose memory mode is Virtual;
 *   RESOURCE_EXHAUSTED — out of memory;
 *   INTERNAL — the generated code references a helper the prelude lacks (a bug).
 * Deterministic: equal procedures (same ids, labels, modes) give byte-identical results. */
TROUPE_MUST_USE troupe_status_t troupe_cgen_emit(const troupe_ll_proc_t *proc,
                                                 troupe_cgen_dialect_t dialect,
                                                 troupe_cgen_result_t **out);

/* What a target can take beyond what every target of a dialect can (troupe_cgen_emit_with).
 * Zero-initialise, then set what is known; zero fields mean the portable default. */
typedef struct troupe_cgen_options {
    /* CUDA: bytes of shared memory one block may use on every device the code will run on
     * (devices/cuda/module.c: the least cudaDevAttrMaxSharedMemoryPerBlockOptin of them, less
     * 1 KiB kept for what a kernel declares statically besides); 0 or anything below 48 KiB
     * means 48 KiB, what every block gets without opting in; above INT32_MAX, INT32_MAX. A
     * segment whose Local arrays need more than 48 KiB and at most this runs on one block with
     * them in dynamic shared memory (troupe_cgen_kernel_t.dynamic_shared_bytes); past it, on
     * one thread. */
    int64_t cuda_shared_max_bytes;
    /* C: the loader always hands the code the GEMM library's sgemm, dgemm, bgemm and hgemm
     * (devices/host does when a library is in use: troupe__hdrv_cgen_options). The
     * contractions that call the library then keep no loops of their own for NULL hooks: about
     * half of a convnet's or a GPT's gradient routine, and of its compile time, is those loops.
     * The result's gemm_library_only says so. */
    bool c_gemm_library_only;
} troupe_cgen_options_t;

/* troupe_cgen_emit for a known target: `opts` (NULL: all defaults, as troupe_cgen_emit)
 * is part of what the result depends on; the same errors. */
TROUPE_MUST_USE troupe_status_t troupe_cgen_emit_with(const troupe_ll_proc_t *proc,
                                                      troupe_cgen_dialect_t dialect,
                                                      const troupe_cgen_options_t *opts,
                                                      troupe_cgen_result_t **out);

/* Frees a result and releases its node references. Accepts NULL; sets *result_p to NULL. */
void troupe_cgen_result_destroy(troupe_cgen_result_t **result_p);

/* Index in result->params of the NODE_PTR parameter of `tn`, or -1 if it has none. */
ptrdiff_t troupe_cgen_find_node_param(const troupe_cgen_result_t *result, const troupe_tnode_t *tn);

/* Index in result->params of the STATIC_IDX parameter of the symbol named `sym_name` (the
 * procedure's name for it), or -1. */
ptrdiff_t troupe_cgen_find_static_param(const troupe_cgen_result_t *result, const char *sym_name);

/* Index of the MERGE_BUFFER parameter, or -1. */
ptrdiff_t troupe_cgen_find_merge_param(const troupe_cgen_result_t *result);

/* Writes the identifier generated code uses for `tn` ("n<id>_<sanitised label>", or "n<id>"
 * without a label) into buf (capacity cap, always NUL-terminated when cap > 0) and returns the
 * length it needed (snprintf convention). */
size_t troupe_cgen_node_ident(const troupe_tnode_t *tn, char *buf, size_t cap);

/* The complete C-dialect prelude (static, NUL-terminated): C source defining, as static inline
 * functions, every helper the C syntax of ir/ops.h references besides libm: `uint4x32_t`
 * (guarded by TROUPE_UINT4X32_T_DEFINED), troupe_threefry4x32_crypto/_light,
 * troupe_<prec>_to_uint4x32, troupe_uint4x32_to_<prec>_uniform and _uniform_vec,
 * troupe_satur01_gate_f/_d, troupe_max_<int prec>/troupe_min_<int prec>, troupe_expf and
 * troupe_tanhf (ir/ops.h's, so a unit using it must not include ir/ops.h), and prec.h's
 * conversions troupe_<fmt>_to_single/troupe_single_to_<fmt> with prec.h's semantics (so a unit
 * using it must not also declare prec.h's). troupe_cgen_emit writes only the parts a routine
 * uses; this is all of them, in order, each after the comment line naming it. It includes
 * <math.h>, <stdint.h>, <string.h>, turns off floating-point contraction and makes signed
 * overflow wrap (GCC, clang), and needs nothing else. Its functions compute bit for bit what
 * ir/ops.h's and ir/prec.h's host functions compute (tests/test_ops.c and tests/test_cgen.c
 * compile them and compare). Thread-safe; built on the first call. */
const char *troupe_cgen_c_prelude(void);

/* A C-dialect result's unit split into several that compile separately (in parallel) and link
 * into one shared object with the same entry points and, statement for statement, the same
 * code: unit 0 holds the routine (its Local arrays, the gather checks), the entry and the GEMM
 * hooks, and calls units 1..count-1 in order, each a hidden function over a run of the body's
 * top-level statements (about `unit_bytes` of source each, at most 64 of them) taking the
 * routine's parameters and its Local arrays as restrict pointers (devices/host's compile
 * cache, docs/configuration.md TROUPE_CC_SPLIT_BYTES). *out_count is 0 and *out_units NULL when
 * the unit stays whole (fewer than two runs, or a body whose top level declares something).
 * The caller frees the units with troupe_cgen_c_units_free. Errors: INVALID_ARGUMENT (no C
 * result, NULL outputs), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_cgen_c_split(const troupe_cgen_result_t *result,
                                                    size_t unit_bytes, char ***out_units,
                                                    size_t *out_count);
/* Frees `count` units from troupe_cgen_c_split and NULLs *units_p (NULL accepted). */
void troupe_cgen_c_units_free(char ***units_p, size_t count);

#ifdef __cplusplus
}
#endif
#endif
