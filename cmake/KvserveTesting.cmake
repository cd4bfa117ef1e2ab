# kvserve_add_gtest(<name> LABELS unit|integration|slow|gpu [concurrency] SOURCES ... DEPS ...
#                   [TIMEOUT s])
# Each gtest binary is discovered test by test so ctest -j spreads them over cores.
# Labels: unit, integration, slow, gpu say what a test is; `concurrency` marks binaries whose
# tests drive several threads (engine, scheduler, front ends): tools/sanitize.sh runs them
# under ThreadSanitizer. Every label also gets a build target tests_<label> (tests/CMakeLists.txt)
# that builds just its binaries.
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
  # PROPERTIES is a flat key/value list: a label list must keep its semicolons escaped.
  string(REPLACE ";" "\\;" labels "${ARG_LABELS}")
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${labels}" TIMEOUT ${ARG_TIMEOUT})
  foreach(label IN LISTS ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TEST_LABELS ${label})
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TESTS_${label} ${name})
  endforeach()
endfunction()
