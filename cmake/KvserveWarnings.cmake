# Warnings apply to our own targets only (generated protobuf code gets none).
function(kvserve_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor>
    # -Wshadow=local is GCC's spelling; clang (sanitizer and fuzz presets) rejects it.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>)
  if(KVSERVE_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
option(KVSERVE_WERROR "Treat warnings in kvserve code as errors" OFF)

# kvserve_library(<name> SOURCES ... DEPS ...): one static library per folder.
function(kvserve_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  kvserve_target_warnings(${name})
endfunction()
