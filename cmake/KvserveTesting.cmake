# kvserve_add_gtest(<name> LABELS unit|integration|slow|gpu SOURCES ... DEPS ... [TIMEOUT s])
# Each gtest binary is discovered test by test so ctest -j spreads them over cores.
function(kvserve_add_gtest name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    KVSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    KVSERVE_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  kvserve_target_warnings(${name})
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()
