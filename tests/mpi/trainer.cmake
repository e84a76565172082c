# The trainer (examples/fmnist) started with different options on its ranks (an MPMD launch):
# tests/mpi/trainer_disagree.sh says what each must do.
if(TROUPE_BUILD_EXAMPLES)
  set(_trainer_data "/usr/share/datasets/fashion-mnist")
  if(FMNIST_DATA_DIR)
    set(_trainer_data ${FMNIST_DATA_DIR})
  endif()
  add_test(NAME fmnist_disagree_np3
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trainer_disagree.sh $<TARGET_FILE:fmnist>
                   ${_trainer_data} ${CMAKE_CURRENT_BINARY_DIR}/trainer-disagree
                   ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS})
  set_tests_properties(fmnist_disagree_np3 PROPERTIES TIMEOUT 300 LABELS mpi PROCESSORS 3
    ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30;TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-trainer")
endif()
# The trainer with overlap on and off (tests/mpi/trainer_overlap.sh): the same checkpoint bytes.
if(TROUPE_BUILD_EXAMPLES)
  add_test(NAME fmnist_overlap_np2
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trainer_overlap.sh $<TARGET_FILE:fmnist>
                   ${_trainer_data} ${CMAKE_CURRENT_BINARY_DIR}/trainer-overlap
                   ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS})
  set_tests_properties(fmnist_overlap_np2 PROPERTIES TIMEOUT 300 LABELS mpi PROCESSORS 2
    ENVIRONMENT "TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-trainer")
endif()
# The trainer with the optimizer state sharded through shared memory (tests/mpi/trainer_shard.sh):
# the unfused run's checkpoint bytes, for SGD with momentum and for AdamW.
if(TROUPE_BUILD_EXAMPLES)
  add_test(NAME fmnist_shard_np2
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trainer_shard.sh $<TARGET_FILE:fmnist>
                   ${_trainer_data} ${CMAKE_CURRENT_BINARY_DIR}/trainer-shard
                   ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS})
  set_tests_properties(fmnist_shard_np2 PROPERTIES TIMEOUT 400 LABELS mpi PROCESSORS 2
    ENVIRONMENT "TROUPE_TIMEOUT_S=60;TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-trainer")
endif()
