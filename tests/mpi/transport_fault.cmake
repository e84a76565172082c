# (After transport.cmake, which builds test_transport_death: the parts are included in name order.)
# TROUPE_FAULT at a collective (base/fault_impl.h), 2 ranks: rank 1 is killed (SIGKILL) or
# stalled (30 s) by the fault, not by the program, when its 4th allreduce's data moves (256 MiB,
# through the MPI ring or through shared memory). Expected: rank 0 reports DEADLINE_EXCEEDED
# naming rank 1 ("did not answer") within TROUPE_TIMEOUT_S=5 and the job ends within 50 s
# (tests/mpi/transport_death.sh checks status, message and time); a kill also leaves rank 1's
# own line naming the fault and the collective. Kill: orte_abort_on_non_zero_status=0 lets rank
# 0 live to report (see transport.cmake); stall: mpiexec's defaults.
if(TARGET test_transport_death)
  foreach(mode fault fault-shm)
    add_test(NAME test_fault_kill_collective_${mode}_np2
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/transport_death.sh 50
                     ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                     --mca orte_abort_on_non_zero_status 0
                     $<TARGET_FILE:test_transport_death> ${mode})
    set_tests_properties(test_fault_kill_collective_${mode}_np2 PROPERTIES TIMEOUT 60
      LABELS mpi PROCESSORS 2
      ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=5;TROUPE_FAULT=kill:rank=1:collective=4;TROUPE_DEATH_EXPECT=TROUPE_FAULT 'kill:rank=1:collective=4': killing this process (SIGKILL) at collective allreduce #4")
  endforeach()
  add_test(NAME test_fault_stall_collective_np2
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/transport_death.sh 50
                   ${MPIEXEC_EXECUTABLE} -n 2 ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:test_transport_death> fault)
  set_tests_properties(test_fault_stall_collective_np2 PROPERTIES TIMEOUT 60 LABELS mpi
    PROCESSORS 2
    ENVIRONMENT "TROUPE_LOG=warn;TROUPE_TIMEOUT_S=5;TROUPE_FAULT=stall:rank=1:collective=4:ms=30000;TROUPE_DEATH_EXPECT=TROUPE_FAULT 'stall:rank=1:collective=4:ms=30000': stalling 30000 ms at collective allreduce #4")
endif()
