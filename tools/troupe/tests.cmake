# Tests of the `troupe` command's subcommands (included by tests/CMakeLists.txt, after
# enable_testing and the Criterion binaries): one CTest test per case of test_doctor.sh and
# test_plot.sh, and the libraries tests/test_curve_plot.c needs. Cases named *_np2 run under
# `mpiexec -n 2` (label mpi); the doctor's cases skip (77) where the machine cannot make the
# failure (no PID namespaces, no GPU).
set(_troupe_tools_src ${PROJECT_SOURCE_DIR}/tools/troupe)
set(_troupe_tools_bin ${PROJECT_BINARY_DIR}/tools/troupe)
set(_troupe_doctor_data "/usr/share/datasets/fashion-mnist") # Debian's dataset-fashion-mnist
set(_troupe_tools_env "TROUPE_LOG=warn;TROUPE_CACHE_DIR=${_troupe_tools_bin}/troupe-cache")
foreach(case pass usage compiler_fails compiler_missing compiler_hangs cache_unwritable
        data_missing data_corrupt)
  add_test(NAME troupe_doctor_${case}
           COMMAND ${_troupe_tools_src}/test_doctor.sh $<TARGET_FILE:troupe_cli>
                   ${_troupe_doctor_data} ${_troupe_tools_bin}/test-doctor ${case})
  set_tests_properties(troupe_doctor_${case} PROPERTIES TIMEOUT 60 LABELS unit
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_troupe_tools_env}")
endforeach()
if(TROUPE_HAVE_MPI)
  if(NOT DEFINED TROUPE_MPI_LAUNCHER_ARGS)
    include(${PROJECT_SOURCE_DIR}/cmake/troupe_mpi_test.cmake)
  endif()
  foreach(case pass_np2 fusion_np2 compiler_np2 hung_rank_np2 mpi_init_np2 shm_np2 gpu_np2)
    add_test(NAME troupe_doctor_${case}
             COMMAND ${_troupe_tools_src}/test_doctor.sh $<TARGET_FILE:troupe_cli>
                     ${_troupe_doctor_data} ${_troupe_tools_bin}/test-doctor ${case}
                     ${MPIEXEC_EXECUTABLE} ${TROUPE_MPI_LAUNCHER_ARGS})
    set_tests_properties(troupe_doctor_${case} PROPERTIES TIMEOUT 90 LABELS mpi PROCESSORS 2
                         SKIP_RETURN_CODE 77 ENVIRONMENT "${_troupe_tools_env}")
  endforeach()
endif()

foreach(case png malformed usage not_regular)
  add_test(NAME troupe_plot_${case}
           COMMAND ${_troupe_tools_src}/test_plot.sh $<TARGET_FILE:troupe_cli>
                   ${_troupe_tools_bin}/test-plot ${case})
  set_tests_properties(troupe_plot_${case} PROPERTIES TIMEOUT 60 LABELS unit
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_troupe_tools_env}")
endforeach()

# docs/configuration.md against the registry of environment variables (troupe info --env).
add_test(NAME config_docs
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/config_docs.sh ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:troupe_cli>)
set_tests_properties(config_docs PROPERTIES TIMEOUT 60 LABELS unit)

# test_curve_plot tests the learning-curve library (and reads its PNGs back with cairo when the
# build draws them).
if(TARGET test_curve_plot)
  target_link_libraries(test_curve_plot PRIVATE troupe_curve_plot
                        $<$<TARGET_EXISTS:PkgConfig::CAIRO>:PkgConfig::CAIRO>)
  target_compile_definitions(test_curve_plot PRIVATE
                             TROUPE_TEST_HAVE_CAIRO=$<TARGET_EXISTS:PkgConfig::CAIRO>)
endif()
