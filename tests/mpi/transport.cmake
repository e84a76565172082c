# Multi-rank tests of transport/mpi (docs/architecture.md §6), label `mpi`, two ranks under mpiexec.

# Collectives: every op and precision, fusion, slicing (64 KiB buckets), broadcast, device level.
troupe_add_mpi_test(test_transport_allreduce SOURCES test_transport_allreduce.c TIMEOUT 180
                    ENV TROUPE_FUSION_BYTES=65536)

# The ring allreduce of large buckets on 2 and 3 ranks (uneven chunks): every op and
# precision, a bucket too small for it, many sliced buckets in flight.
troupe_add_mpi_test(test_transport_ring SOURCES test_transport_ring.c TIMEOUT 120)
troupe_add_mpi_test(test_transport_ring SOURCES test_transport_ring.c NP 3 TIMEOUT 120)

# The intra-node shared-memory allreduce on 2 and 3 ranks (all on this node, so it is on):
# every op, integer and float precision and size through troupe_coll_alloc memory, several
# tensors as one span, bitwise agreement, layouts that disagree, a failed mapping (the MPI path
# from then on); and with TROUPE_COLL_SHM=0 (argument `off`) the same through the MPI paths,
# as when it is 0 on one rank only (`mixed`: its veto holds for every rank).
troupe_add_mpi_test(test_transport_shm SOURCES test_transport_shm.c TIMEOUT 180 LIBS MPI::MPI_C)
troupe_add_mpi_test(test_transport_shm SOURCES test_transport_shm.c NP 3 TIMEOUT 180)
add_test(NAME test_transport_shm_off_np2
         COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                 $<TARGET_FILE:test_transport_shm> off)
set_tests_properties(test_transport_shm_off_np2 PROPERTIES TIMEOUT 180 LABELS mpi PROCESSORS 2
                     ENVIRONMENT "TROUPE_LOG=warn;TROUPE_COLL_SHM=0")
add_test(NAME test_transport_shm_mixed_np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS}
                 -n 1 -x TROUPE_COLL_SHM=1 $<TARGET_FILE:test_transport_shm> mixed
                 : -n 1 -x TROUPE_COLL_SHM=0 $<TARGET_FILE:test_transport_shm> mixed)
set_tests_properties(test_transport_shm_mixed_np2 PROPERTIES TIMEOUT 60 LABELS mpi PROCESSORS 2
                     ENVIRONMENT "TROUPE_LOG=warn")
# The last collective before the ranks stop: the rank that completes it first stops while the
# other still has to read its depart word (TROUPE_FAULT stalls set the order): the other must
# complete it too, not wait for its deadline (TROUPE_TIMEOUT_S=10 here).
add_test(NAME test_transport_shm_teardown_np2
         COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                 $<TARGET_FILE:test_transport_shm> teardown)
set_tests_properties(test_transport_shm_teardown_np2 PROPERTIES TIMEOUT 60 LABELS mpi
                     PROCESSORS 2 ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=10")

# Fingerprint mismatches (dims, precision, kind, fusion bucket size): both ranks fail with FAILED_PRECONDITION naming
# both ranks and the field. TROUPE_TIMEOUT_S=20 turns a hang into a failed check.
troupe_add_mpi_test(test_transport_mismatch SOURCES test_transport_mismatch.c ARGS dims
                    TIMEOUT 60 ENV TROUPE_TIMEOUT_S=20)
foreach(mode prec kind fusion)
  add_test(NAME test_transport_mismatch_${mode}_np2
           COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_transport_mismatch> ${mode})
  set_tests_properties(test_transport_mismatch_${mode}_np2 PROPERTIES TIMEOUT 60 LABELS mpi
                       PROCESSORS 2 ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=20")
endforeach()

# A gated allreduce whose events never complete (a stuck stream's copy to the host): the gated
# rank fails it at its 2 s deadline naming the tensor and the pending event, the other rank at
# once through its notice naming rank 1; both sync with no deadline of their own, so a hang would
# reach this TIMEOUT.
troupe_add_mpi_test(test_transport_gate SOURCES test_transport_gate.c TIMEOUT 60 LIBS MPI::MPI_C)

# Cross-rank device_to_device through the remote transport (COPY into the merge buffer, NO).
troupe_add_mpi_test(test_transport_d2d SOURCES test_transport_d2d.c TIMEOUT 120
                    ENV TROUPE_TIMEOUT_S=30)

# A dead (SIGKILL, before or during a collective's data phase, through MPI or through shared
# memory) or stuck (sleeping) rank 1:
# rank 0 reports it by rank within TROUPE_TIMEOUT_S=5, leaves the cluster and ends the job
# with MPI_Abort(3) (the test program's own call: the library never ends the process).
# Dead: mpirun normally kills the whole job as soon as a rank dies, before rank 0 could
# report; orte_abort_on_non_zero_status=0 lets rank 0 live to report (Open MPI 4.1's
# --enable-recovery does too, but then mpirun exits 0 whatever the ranks' status, so the
# status could not be checked). Stuck: mpirun's default settings, as a user has them.
# transport_death.sh checks status, message and time.
add_executable(test_transport_death test_transport_death.c)
target_link_libraries(test_transport_death PRIVATE troupe::troupe MPI::MPI_C m)
foreach(mode kill stuck finished kill-data kill-shm)
  set(_death_mca --mca orte_abort_on_non_zero_status 0)
  if(mode STREQUAL "stuck")
    set(_death_mca)
  endif()
  add_test(NAME test_transport_death_${mode}_np2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/transport_death.sh 50
                   ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS} ${_death_mca}
                   $<TARGET_FILE:test_transport_death> ${mode})
  set_tests_properties(test_transport_death_${mode}_np2 PROPERTIES TIMEOUT 60 LABELS mpi
                       PROCESSORS 2 ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=10")
endforeach()

# An update fused into a device-level allreduce (troupe_coll_apply_t) on 2 and 3 ranks: through
# shared memory when the side arrays lie as the gradients, through the MPI paths otherwise and
# with TROUPE_COLL_SHM=0 (`off`), exact results on every rank, the refused arguments; and
# (`mismatch`) a rank without the update: every rank fails naming it; (`private`) the state
# private to the rank that updates its chunk, gathered (TROUPE_COLL_UNSHARD), and after a failed
# mapping.
troupe_add_mpi_test(test_transport_apply SOURCES test_transport_apply.c TIMEOUT 120
                    ENV TROUPE_TIMEOUT_S=30)
troupe_add_mpi_test(test_transport_apply SOURCES test_transport_apply.c NP 3 TIMEOUT 120
                    ENV TROUPE_TIMEOUT_S=30)
foreach(mode off mismatch private)
  add_test(NAME test_transport_apply_${mode}_np2
           COMMAND ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_transport_apply> ${mode})
  set_tests_properties(test_transport_apply_${mode}_np2 PROPERTIES TIMEOUT 120 LABELS mpi
                       PROCESSORS 2 ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30")
endforeach()
# private side arrays (ZeRO stage 1's sharded state) on 3 ranks too (three chunks), and on one
foreach(np 1 3)
  add_test(NAME test_transport_apply_private_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} -n ${np} ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_transport_apply> private)
  set_tests_properties(test_transport_apply_private_np${np} PROPERTIES TIMEOUT 120 LABELS mpi
                       PROCESSORS ${np} ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30")
endforeach()
set_tests_properties(test_transport_apply_off_np2 PROPERTIES
                     ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30;TROUPE_COLL_SHM=0")
# the optimizer state sharded (troupe_coll_apply_t shard) on 3 ranks without shared memory: the
# reduce-scatter cut at the shards (ring.c) turns the chunks by one place; each shard right
add_test(NAME test_transport_apply_shard_np3
         COMMAND ${MPIEXEC_EXECUTABLE} -n 3 ${TROUPE_MPI_LAUNCHER_ARGS}
                 $<TARGET_FILE:test_transport_apply> shard)
set_tests_properties(test_transport_apply_shard_np3 PROPERTIES TIMEOUT 120 LABELS mpi
                     PROCESSORS 3 ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30;TROUPE_COLL_SHM=0")
