# The trainer (examples/fmnist) under mpiexec, each case a script of its own that says what it
# checks: trainer_<case>.sh FMNIST DATA_DIR WORK_DIR MPIEXEC LAUNCHER_ARGS...
if(TROUPE_BUILD_EXAMPLES)
  set(_trainer_data "/usr/share/datasets/fashion-mnist")
  if(FMNIST_DATA_DIR)
    set(_trainer_data ${FMNIST_DATA_DIR})
  endif()
  # fmnist_<case>_np<np>, running trainer_<case>.sh in trainer-<case>/ with `env` (a list) and
  # the shared compile cache
  function(troupe_add_trainer_test case np timeout env)
    add_test(NAME fmnist_${case}_np${np}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trainer_${case}.sh $<TARGET_FILE:fmnist>
                     ${_trainer_data} ${CMAKE_CURRENT_BINARY_DIR}/trainer-${case}
                     ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS})
    set(_env ${env} "TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-trainer")
    set_tests_properties(fmnist_${case}_np${np} PROPERTIES TIMEOUT ${timeout} LABELS mpi
      PROCESSORS ${np} ENVIRONMENT "${_env}")
  endfunction()
  # Ranks started with different options (an MPMD launch): trainer_disagree.sh says what each
  # must do.
  troupe_add_trainer_test(disagree 3 300 "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30")
  # Overlap on and off: the same checkpoint bytes.
  troupe_add_trainer_test(overlap 2 300 "")
  # The optimizer state sharded through shared memory: the unfused run's checkpoint bytes, for
  # SGD with momentum and for AdamW; AdamW also without shared memory (the reduce-scatter) and on
  # two streams per rank.
  troupe_add_trainer_test(shard 2 400 "TROUPE_TIMEOUT_S=60")
  # The convnet (--model cnn): 2 ranks equal 1 rank within float rounding, and repeat bitwise.
  troupe_add_trainer_test(cnn 2 400 "TROUPE_LOG=warn")
endif()
