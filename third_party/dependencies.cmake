# Finds demi's dependencies among the system's (Debian) packages; nothing is vendored.
# Prints one line per optional dependency: found, or not found and what is disabled.
find_package(Eigen3 3.3 REQUIRED NO_MODULE)        # libeigen3-dev: the CPU backend
find_package(OpenMP REQUIRED COMPONENTS CXX)      # gcc's libgomp: CPU backend threads
find_package(Threads REQUIRED)

function(demi_report name found disabled)
  if(${found})
    message(STATUS "demi: ${name}: found")
  else()
    message(STATUS "demi: ${name}: not found, ${disabled} disabled")
  endif()
endfunction()

# CUDA backend: AUTO builds it when nvcc is found; ON requires it.
set(DEMI_HAVE_CUDA OFF)
if(NOT DEMI_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # A100 and H100/H200 machine code, plus PTX of sm_90 for newer GPUs to JIT.
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(DEMI_HAVE_CUDA ON)
  elseif(DEMI_CUDA STREQUAL "ON")
    message(FATAL_ERROR "demi: DEMI_CUDA=ON but no CUDA compiler (nvcc) was found; install the CUDA toolkit or configure with -DDEMI_CUDA=OFF")
  endif()
endif()
if(DEMI_CUDA STREQUAL "OFF")
  message(STATUS "demi: CUDA backend: off (DEMI_CUDA=OFF)")
else()
  demi_report("CUDA toolkit (nvcc)" DEMI_HAVE_CUDA "the CUDA backend")
endif()

if(DEMI_HAVE_CUDA)
  find_library(DEMI_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  find_path(DEMI_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(DEMI_CUDNN_LIBRARY AND DEMI_CUDNN_INCLUDE_DIR)
    set(DEMI_HAVE_CUDNN ON)
  else()
    set(DEMI_HAVE_CUDNN OFF)
  endif()
  demi_report("cuDNN" DEMI_HAVE_CUDNN "cuDNN convolutions")
  # NCCL ships with the CUDA toolkit (or in the nvidia-nccl wheel): the GPU process group.
  find_library(DEMI_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  find_path(DEMI_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(DEMI_NCCL_LIBRARY AND DEMI_NCCL_INCLUDE_DIR)
    set(DEMI_HAVE_NCCL ON)
  else()
    set(DEMI_HAVE_NCCL OFF)
  endif()
  demi_report("NCCL" DEMI_HAVE_NCCL "the nccl process group")
endif()

# Data-parallel training across CPU processes (libopenmpi-dev, openmpi-bin); AUTO uses it when found.
set(DEMI_HAVE_MPI OFF)
if(NOT DEMI_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API from C++; not the deprecated C++ bindings
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(DEMI_HAVE_MPI ON)
  elseif(DEMI_MPI STREQUAL "ON")
    message(FATAL_ERROR "demi: DEMI_MPI=ON but MPI was not found; install libopenmpi-dev openmpi-bin or configure with -DDEMI_MPI=OFF")
  endif()
endif()
demi_report("MPI" DEMI_HAVE_MPI "dist::init_process_group(\"mpi\") and the dist tests")

find_package(GTest QUIET)                           # libgtest-dev
set(DEMI_HAVE_GTEST ${GTest_FOUND})
demi_report("GoogleTest" DEMI_HAVE_GTEST "the test suite")
if(DEMI_BUILD_TESTS AND NOT DEMI_HAVE_GTEST)
  message(FATAL_ERROR "demi: tests requested but GoogleTest was not found; run scripts/test (installs libgtest-dev) or configure with -DDEMI_BUILD_TESTS=OFF")
endif()

find_package(benchmark QUIET)                       # libbenchmark-dev
set(DEMI_HAVE_BENCHMARK ${benchmark_FOUND})
demi_report("Google Benchmark" DEMI_HAVE_BENCHMARK "bench_kernels")

# The safetensors header of demi::save / demi::load is JSON: header-only, needed to build only.
find_package(nlohmann_json 3 REQUIRED)              # nlohmann-json3-dev
set(DEMI_HAVE_JSON ON)

find_package(CLI11 QUIET)                           # libcli11-dev
set(DEMI_HAVE_CLI11 ${CLI11_FOUND})
demi_report("CLI11" DEMI_HAVE_CLI11 "the train_cifar and bench_train_step command lines")

find_path(DEMI_STB_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb)   # libstb-dev
find_library(DEMI_STB_LIBRARY stb)
if(DEMI_STB_INCLUDE_DIR AND DEMI_STB_LIBRARY)
  set(DEMI_HAVE_STB ON)
else()
  set(DEMI_HAVE_STB OFF)
endif()
demi_report("stb_image" DEMI_HAVE_STB "the image-folder dataset reader")
