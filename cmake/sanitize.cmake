# DEMI_SANITIZE=address,undefined (scripts/sanitize) builds every demi target and test with those
# sanitizers; LeakSanitizer comes with address on Linux. The fuzz build adds fuzzer-no-link.
set(DEMI_SANITIZE "" CACHE STRING "Sanitizers for every demi target and test, e.g. address,undefined ('' = off)")
if(DEMI_SANITIZE)
  if(DEMI_HAVE_CUDA)
    message(FATAL_ERROR "demi: DEMI_SANITIZE needs -DDEMI_CUDA=OFF: nvcc code is not instrumented and ASan's "
                        "shadow memory clashes with the CUDA driver's mappings")
  endif()
  # -O1, not -O0: unoptimised Eigen (its expression templates rely on inlining) runs the gradcheck
  # and amp tests many times slower than Release, too slow for CI; -O1 keeps most of the speed and
  # still reports exact lines. -g1 (line tables) is all a report needs and compiles the Eigen
  # kernels ~30% faster than -g. No frame-pointer omission: full stacks in every report.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-O1> $<$<COMPILE_LANGUAGE:CXX>:-g1>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${DEMI_SANITIZE}>)
  if(DEMI_SANITIZE MATCHES "undefined")
    # Undefined behaviour aborts the test instead of printing a line and carrying on.
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  endif()
  add_link_options(-fsanitize=${DEMI_SANITIZE})
  message(STATUS "demi: sanitizers: ${DEMI_SANITIZE} (-O1 -g1)")
endif()
