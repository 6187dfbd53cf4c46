# demi_warnings: -Wall -Wextra for demi's own code (third-party headers are SYSTEM), -Werror in CI.
add_library(demi_warnings INTERFACE)
target_compile_options(demi_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DEMI_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DEMI_WERROR}>>:-Xcompiler=-Werror --Werror=all-warnings>)
install(TARGETS demi_warnings EXPORT demiTargets)

# Vector ISA for the CPU kernels: the build machine's own by default (Eigen's GEMM is 2-3x faster
# with AVX2+FMA than with baseline SSE2); set DEMI_MARCH to e.g. x86-64-v3 for portable binaries.
set(DEMI_MARCH native CACHE STRING "Value of -march for the CPU backend ('' to leave the compiler's default)")
set(DEMI_ARCH_FLAGS "")
if(DEMI_MARCH)
  set(DEMI_ARCH_FLAGS -march=${DEMI_MARCH})
  # On an AVX-512 machine GCC 12 reports its own intrinsics (`__m512 __Y = __Y;`, inlined from
  # Eigen) as (maybe) uninitialized (GCC bug 105593, fixed in GCC 13).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND DEMI_ARCH_FLAGS -Wno-uninitialized -Wno-maybe-uninitialized)
  endif()
endif()
