# `troupe status` against live two-rank jobs (issue 17; tests/mpi/status.sh), label `mpi`: a rank
# stalled before a collective is named by the verdict (and by the SIGUSR1 report), a killed rank
# is reported as not answering, and the trainer with a SIGSTOPped rank is named by `troupe
# status`, by its deadline error (once) and by the hang report, with a quiet teardown.
add_executable(test_status_ranks test_status_ranks.c)
target_link_libraries(test_status_ranks PRIVATE troupe::troupe m)
add_dependencies(test_status_ranks troupe_cli)
foreach(mode stall kill)
  set(_status_mca)
  if(mode STREQUAL "kill")
    set(_status_mca --mca orte_abort_on_non_zero_status 0)
  endif()
  add_test(NAME test_status_${mode}_np2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/status.sh ${mode} $<TARGET_FILE:troupe_cli>
                   ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS} ${_status_mca}
                   $<TARGET_FILE:test_status_ranks>)
  set_tests_properties(test_status_${mode}_np2 PROPERTIES TIMEOUT 90 LABELS mpi PROCESSORS 2
                       ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=60")
endforeach()
if(TROUPE_BUILD_EXAMPLES)
  add_test(NAME test_status_trainer_np2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/status.sh trainer $<TARGET_FILE:troupe_cli>
                   ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS} $<TARGET_FILE:fmnist>)
  set_tests_properties(test_status_trainer_np2 PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2
                       ENVIRONMENT "TROUPE_LOG=warn")
endif()
