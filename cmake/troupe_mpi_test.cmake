# troupe_add_mpi_test(<name> SOURCES <files...> [NP <n>] [TIMEOUT <s>] [ARGS <args...>]
#                     [LIBS <libs...>] [ENV <VAR=value...>] [WILL_FAIL] [REUSE])
# builds <name> (once: calls for several NP with the same SOURCES share it; REUSE runs a target
# of that name made elsewhere, such as an example's) and registers a CTest test (label `mpi`) running
# `mpiexec -n <NP> ${TROUPE_MPI_LAUNCHER_ARGS} <name> <ARGS>`: on one machine MPI stays on
# shared memory and loopback (developers' guide). Scripts use ${TROUPE_MPI_LAUNCHER_ARGS}.
set(TROUPE_MPI_LAUNCHER_ARGS --mca btl self,vader --mca oob_tcp_if_include lo --oversubscribe
    --bind-to none)
execute_process(COMMAND id -u OUTPUT_VARIABLE _troupe_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_troupe_uid STREQUAL "0")
  list(APPEND TROUPE_MPI_LAUNCHER_ARGS --allow-run-as-root)
endif()

function(troupe_add_mpi_test name)
  cmake_parse_arguments(T "WILL_FAIL;REUSE" "NP;TIMEOUT" "SOURCES;ARGS;LIBS;ENV" ${ARGN})
  if(NOT T_NP)
    set(T_NP 2)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(NOT TARGET ${name})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE troupe::troupe m ${T_LIBS})
    target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    set_property(TARGET ${name} PROPERTY TROUPE_MPI_SOURCES "${T_SOURCES}")
  elseif(NOT T_REUSE)
    # A target of the same name made elsewhere (a unit test's) would silently run instead of
    # these sources: refuse it.
    get_property(_made TARGET ${name} PROPERTY TROUPE_MPI_SOURCES)
    if(NOT _made STREQUAL "${T_SOURCES}")
      message(FATAL_ERROR "troupe_add_mpi_test(${name}): a target named '${name}' already "
              "exists with other sources ('${_made}' against '${T_SOURCES}'); give the mpi "
              "test a name of its own, or say REUSE to run that target")
    endif()
  endif()
  add_test(NAME ${name}_np${T_NP}
           COMMAND ${MPIEXEC_EXECUTABLE} -n ${T_NP} ${TROUPE_MPI_LAUNCHER_ARGS}
                   $<TARGET_FILE:${name}> ${T_ARGS})
  set_tests_properties(${name}_np${T_NP} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS mpi
                       PROCESSORS ${T_NP} ENVIRONMENT "TROUPE_LOG=warn;${T_ENV}")
  if(T_WILL_FAIL)
    set_tests_properties(${name}_np${T_NP} PROPERTIES WILL_FAIL TRUE)
  endif()
endfunction()

