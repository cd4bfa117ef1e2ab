# kvserve_grpc_proto_library(<target> <proto-root> <proto-file>...)
# Generates *.pb.{h,cc} and *.grpc.pb.{h,cc} under ${CMAKE_CURRENT_BINARY_DIR}/gen keeping
# the proto's path relative to <proto-root> (so includes read "kvserve/v1/kvserve.pb.h"),
# and builds them into a static library that links gRPC and protobuf. An explicit custom
# command rather than protobuf_generate(): on CMake 3.25 the latter mis-places outputs and
# misses the plugin dependency.
function(kvserve_grpc_proto_library target proto_root)
  set(gen_dir "${CMAKE_CURRENT_BINARY_DIR}/gen")
  set(srcs)
  foreach(proto IN LISTS ARGN)
    get_filename_component(abs "${proto}" ABSOLUTE)
    file(RELATIVE_PATH rel "${proto_root}" "${abs}")
    get_filename_component(rel_dir "${rel}" DIRECTORY)
    get_filename_component(stem "${rel}" NAME_WE)
    set(out "${gen_dir}/${rel_dir}/${stem}")
    file(MAKE_DIRECTORY "${gen_dir}/${rel_dir}")
    add_custom_command(
      OUTPUT "${out}.pb.cc" "${out}.pb.h" "${out}.grpc.pb.cc" "${out}.grpc.pb.h"
      COMMAND protobuf::protoc
        --proto_path=${proto_root}
        --cpp_out=${gen_dir}
        --grpc_out=${gen_dir}
        --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
        ${abs}
      DEPENDS "${abs}" protobuf::protoc gRPC::grpc_cpp_plugin
      COMMENT "protoc ${rel}"
      VERBATIM)
    list(APPEND srcs "${out}.pb.cc" "${out}.grpc.pb.cc")
  endforeach()
  add_library(${target} STATIC ${srcs})
  target_include_directories(${target} PUBLIC "${gen_dir}")
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf gRPC::grpc++)
endfunction()
