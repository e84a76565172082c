# Elastic runs (docs/cluster.md "Failures and restarts"), label `mpi`: `troupe run` launching the
# Fashion-MNIST trainer on 2 ranks of this machine, one CTest test per case of elastic.sh (each
# a few seconds: 2000 training images, 2 epochs of 20 steps).
if(TROUPE_BUILD_EXAMPLES AND TARGET troupe_cli)
  if(NOT DEFINED FMNIST_DATA_DIR)
    set(FMNIST_DATA_DIR "/usr/share/datasets/fashion-mnist")
  endif()
  foreach(case bitwise stalled other_ranks exhausted min_np tempfail watchdog launch)
    add_test(NAME troupe_run_${case}
             COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/elastic.sh $<TARGET_FILE:troupe_cli>
                     $<TARGET_FILE:fmnist> ${FMNIST_DATA_DIR} ${CMAKE_CURRENT_BINARY_DIR}/elastic
                     ${case})
    set_tests_properties(troupe_run_${case} PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2
      ENVIRONMENT "TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-elastic")
  endforeach()
endif()
