#!/bin/sh
# Runs a program on an emulated AVX2-only x86-64 CPU, the way most laptops and desktops run the
# binary a default build makes on an AVX-512 machine: qemu-x86_64 -cpu max,-avx512f. Debian 12's
# QEMU 7.2 emulates AVX2, FMA and F16C but no AVX-512, and an AVX-512 instruction there is SIGILL,
# so this checks at run time what check_isa_objects.sh checks in one library's code: the dispatch
# reads a cpuid without AVX-512 and picks avx2, and no AVX-512 code outside backends/cpu/isa/ (in
# any library or the program, Eigen's inlined code included) runs. The output must match EXPECT, the
# proof that the program saw an AVX2-only CPU.
# Skipped (exit 77, one line) without qemu-x86_64 (Debian package qemu-user), and on a CPU without
# AVX-512, where the native tests already run the way an AVX2-only CPU does.
# Usage: on_avx2_cpu.sh EXPECT PROGRAM [ARGS...]
set -u
expect=$1
shift
qemu=$(command -v qemu-x86_64) || { echo "on_avx2_cpu: skipped: qemu-x86_64 not found (apt-get install qemu-user)"; exit 77; }
grep -qw avx512f /proc/cpuinfo || { echo "on_avx2_cpu: skipped: this CPU has no AVX-512, so the native tests ran as on an AVX2-only one"; exit 77; }
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$qemu" -cpu max,-avx512f "$@" > "$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 132 ] && echo "on_avx2_cpu: $1 died with SIGILL: an instruction this AVX2-only CPU lacks ran"
  echo "on_avx2_cpu: $1 exited with status $rc on the emulated AVX2-only CPU"
  exit 1
fi
grep -q -- "$expect" "$out" || { echo "on_avx2_cpu: the output does not contain '$expect': did the program see an AVX2-only CPU?"; exit 1; }
echo "on_avx2_cpu: $1 ran on the emulated AVX2-only CPU"
