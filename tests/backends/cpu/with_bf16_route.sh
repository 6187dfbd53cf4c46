#!/bin/sh
# Runs a per-level kernel test with DEMI_CPU_BF16_ROUTE=ROUTE, so that the levels with a bf16 tile
# take that route (backends/cpu/isa/select.cpp, set_active_for_testing): e.g. Zen 4's `everything`
# on an Intel CPU, whose own avx512_bf16 route widens. Skipped (exit 77, one line) on a CPU without
# AVX512_BF16: no level there has a tile to route to, and the route would be refused.
# Usage: with_bf16_route.sh ROUTE PROGRAM [ARGS...]
set -u
route=$1
shift
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null ||
  { echo "with_bf16_route: skipped: this CPU lacks AVX512_BF16, so no level has a bf16 tile to route to"; exit 77; }
DEMI_CPU_BF16_ROUTE=$route exec "$@"
