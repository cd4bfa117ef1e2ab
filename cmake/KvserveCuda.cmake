# Optional CUDA: KVSERVE_CUDA=AUTO|ON|OFF.
# AUTO builds the CUDA targets when nvcc is found. The resulting binary still starts on
# machines with no GPU or no driver (cudart loads libcuda lazily; we never link
# CUDA::cuda_driver, see docs/architecture.md).
set(KVSERVE_CUDA "AUTO" CACHE STRING "Build CUDA targets: AUTO (if nvcc is found), ON or OFF")
set_property(CACHE KVSERVE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KVSERVE_HAVE_CUDA OFF)
string(TOUPPER "${KVSERVE_CUDA}" _kvs_cuda)
if(_kvs_cuda STREQUAL "AUTO" OR _kvs_cuda STREQUAL "ON")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # SASS for H100/H200 (with the arch-specific wgmma/TMA features) plus compute_90
      # PTX so newer GPUs can JIT it. Must be set before enable_language(CUDA).
      set(CMAKE_CUDA_ARCHITECTURES "90a-real;90-virtual")
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # one cudart for every target
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know CUDA20; teach it the flag (nvcc 13 + g++ 12 accept it).
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(KVSERVE_HAVE_CUDA ON)
  elseif(_kvs_cuda STREQUAL "ON")
    message(FATAL_ERROR "KVSERVE_CUDA=ON but no CUDA compiler was found "
                        "(put nvcc on PATH or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)")
  else()
    message(STATUS "kvserve: no nvcc found, building without CUDA")
  endif()
endif()
message(STATUS "kvserve: CUDA targets: ${KVSERVE_HAVE_CUDA}")
