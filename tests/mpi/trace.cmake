# Traces (base/trace.h) of a 2-rank run and `troupe trace merge` (tools/troupe/cmd_trace.c):
# trace.sh checks both ranks' files, the merged file and the straggler report (rank 1 sleeps
# before a collective). trace_check reads the files with libjansson, so both need it.
if(JANSSON_FOUND AND TARGET troupe_cli)
  add_executable(trace_check trace_check.c)
  target_link_libraries(trace_check PRIVATE PkgConfig::JANSSON)
  add_executable(test_trace_ranks test_trace_ranks.c)
  target_link_libraries(test_trace_ranks PRIVATE troupe::troupe m)
  target_include_directories(test_trace_ranks PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  add_test(NAME test_trace_ranks_np2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trace.sh ${CMAKE_CURRENT_BINARY_DIR}/trace
                   $<TARGET_FILE:trace_check> $<TARGET_FILE:troupe_cli>
                   ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_trace_ranks>)
  set_tests_properties(test_trace_ranks_np2 PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2
                       ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=30")
endif()
