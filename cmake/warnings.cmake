# demi_warnings: -Wall -Wextra for demi's own code (third-party headers are SYSTEM), -Werror in CI.
add_library(demi_warnings INTERFACE)
target_compile_options(demi_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${DEMI_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DEMI_WERROR}>>:-Xcompiler=-Werror --Werror=all-warnings>)
install(TARGETS demi_warnings EXPORT demiTargets)

# Baseline ISA of the CPU backend: x86-64-v3 (AVX2 + FMA + F16C; Eigen's GEMM is 2-3x faster with
# them than with SSE2), so that a build runs on any CPU since Haswell / Zen 1. The fast kernels go
# further at run time (backends/cpu/isa/: AVX-512, AVX512_BF16, AMX variants, chosen by cpuid).
# -DDEMI_MARCH=native ties the binary to the build machine's CPU; '' leaves the compiler's default.
set(DEMI_MARCH x86-64-v3 CACHE STRING "Value of -march for the CPU backend's baseline ('' for the compiler's default)")
set(DEMI_ARCH_FLAGS "")
if(DEMI_MARCH)
  set(DEMI_ARCH_FLAGS -march=${DEMI_MARCH})
  # On an AVX-512 machine GCC 12 reports its own intrinsics (`__m512 __Y = __Y;`, inlined from
  # Eigen) as (maybe) uninitialized (GCC bug 105593, fixed in GCC 13).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND DEMI_ARCH_FLAGS -Wno-uninitialized -Wno-maybe-uninitialized)
  endif()
endif()
