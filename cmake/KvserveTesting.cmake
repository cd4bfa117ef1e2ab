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
  # gtest_discover_tests passes PROPERTIES through several flattening layers, so a label list
  # cannot go there: the first label does, and an include file that ctest reads after the
  # discovered list (<name>_TESTS) sets the whole list on every discovered test.
  list(GET ARG_LABELS 0 first_label)
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS ${first_label} TIMEOUT ${ARG_TIMEOUT})
  set(extra_labels ${ARG_LABELS})
  list(REMOVE_AT extra_labels 0)
  if(extra_labels)
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_extra_labels.cmake)
    file(WRITE ${labels_file}
         "foreach(t IN LISTS ${name}_TESTS)\n"
         "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARG_LABELS}\")\n"
         "endforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
  foreach(label IN LISTS ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TEST_LABELS ${label})
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TESTS_${label} ${name})
  endforeach()
endfunction()
