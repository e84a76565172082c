# Multi-rank tests of the data-parallel driver (parallel/dp.h). test_dp_model.c is shared: the
# programs include it.
troupe_add_mpi_test(test_dp_equivalence SOURCES test_dp_equivalence.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
troupe_add_mpi_test(test_dp_repro SOURCES test_dp_repro.c NP 2 TIMEOUT 300
                    ENV TROUPE_CACHE_DIR=${CMAKE_CURRENT_BINARY_DIR}/troupe-cache-dp)
