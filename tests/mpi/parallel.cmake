# Multi-rank tests of the data-parallel driver (parallel/dp.h). test_dp_model.c is shared: the
# programs include it.
troupe_add_mpi_test(test_dp_equivalence SOURCES test_dp_equivalence.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
troupe_add_mpi_test(test_dp_repro SOURCES test_dp_repro.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# The optimizer step fused into the allreduce (parallel/dp.h, Fused update): fused equals the
# optimizer routine bit for bit, for SGD and AdamW with and without state and weight decay.
troupe_add_mpi_test(test_dp_fused SOURCES test_dp_fused.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# A save on rank 0 alone while the update is fused and has state to gather: both ranks fail.
add_test(NAME test_dp_fused_save_one_np2
         COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                 $<TARGET_FILE:test_dp_fused> save-one)
set_tests_properties(test_dp_fused_save_one_np2 PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2
  ENVIRONMENT "TROUPE_LOG=error;TROUPE_TIMEOUT_S=30;TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp")
add_executable(test_dp_agree test_dp_agree.c)
target_link_libraries(test_dp_agree PRIVATE troupe::troupe m)
target_include_directories(test_dp_agree PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR})
# Ranks that disagree (parallel/dp.h): rank 1 differs in one setting per mode, and both ranks
# must fail at once naming it (TROUPE_TIMEOUT_S=30: a hang would fail the 10 s check); different
# streams per rank train like one process with as many streams, bit for bit; the fed form
# (a feed_comp) trains like the indexed one, bit for bit.
foreach(mode optimizer lr shape setting count agree form streams fed precision fusedenv)
  add_test(NAME test_dp_agree_${mode}_np2
           COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_dp_agree> ${mode})
  set_tests_properties(test_dp_agree_${mode}_np2 PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2
    ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30;TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp")
endforeach()
# Gradient accumulation across ranks (troupe_dp_config_t.grad_accum): K micro-steps equal one
# replica on the global batch within rounding, bitwise on every rank and run to run; a K that
# differs on one rank fails every rank naming it.
troupe_add_mpi_test(test_dp_accum_ranks SOURCES test_dp_accum_ranks.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# Loss scaling across ranks: an overflow injected on rank 1 only skips the step on every rank,
# the scale and the parameters the same bits everywhere.
troupe_add_mpi_test(test_dp_loss_scale_ranks SOURCES test_dp_loss_scale_ranks.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# The strategies in combination (exchange x overlap x update x streams x grad_accum x
# optimizer): each valid one equals the plain one bit for bit, each invalid one is refused
# naming its conflict; grad_clip on 2 ranks equals 1 replica within rounding.
troupe_add_mpi_test(test_dp_combos_ranks SOURCES test_dp_combos_ranks.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# Devices x streams x ranks with the allreduce staged through host memory (two cpu devices per
# rank; the staged run equals the lent one bit for bit).
troupe_add_mpi_test(test_dp_staged SOURCES test_dp_staged.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# The staged exchange pipelined over two buckets (TROUPE_FUSION_BYTES at its floor), its
# per-step breakdown at debug:parallel, and TROUPE_CUDA_AWARE=on taking the direct path.
troupe_add_mpi_test(test_dp_pipeline SOURCES test_dp_pipeline.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# Each gradient bucket's allreduce overlapping the rest of the backward pass (parallel/dp.h,
# Overlap): overlap on equals off bit for bit (in place and staged), its breakdown's buckets
# follow the segments and its fields add up.
troupe_add_mpi_test(test_dp_overlap SOURCES test_dp_overlap.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
# The overlap shown by the trace: per step, bucket 0's allreduce starts after its segment and
# before the next one (the earlier layer's backward pass), with the update fused into each
# bucket's allreduce; the same parameters and checkpoint as overlap off.
troupe_add_mpi_test(test_dp_overlap_trace SOURCES test_dp_overlap_trace.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp
                        TROUPE_TRACE=${CMAKE_CURRENT_BINARY_DIR}/dp_overlap_trace)
# Data-parallel training on the GPU across ranks (two ranks share a machine's one GPU), staged
# through pinned host memory: equal to one replica within rounding, bitwise on every rank and
# run to run. Without a GPU it prints one SKIP line: skipped.
troupe_add_mpi_test(test_dp_gpu SOURCES test_dp_gpu.c NP 2 TIMEOUT 300
                    LIBS $<$<BOOL:${TROUPE_HAVE_CUDA}>:troupe_cuda>
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
set_tests_properties(test_dp_gpu_np2 PROPERTIES SKIP_REGULAR_EXPRESSION "SKIP: ")
