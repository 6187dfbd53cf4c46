#!/bin/sh
# Runs a program on a CPU that QEMU emulates (qemu-x86_64 -cpu CPU), to check the binaries a default
# build makes on this machine on the CPUs users have:
# - "max,-avx512f", an AVX2-only CPU like most laptops and desktops: Debian 12's QEMU 7.2 emulates
#   AVX2, FMA and F16C but no AVX-512, and an AVX-512 instruction there is SIGILL. So the dispatch
#   reads a cpuid without AVX-512 and picks avx2, and no AVX-512 code outside backends/cpu/isa/ (in
#   any library or the program, Eigen's inlined code included) may run: what check_isa_objects.sh
#   checks statically in one library, here at run time in the whole program.
# - "Nehalem", older than the x86-64-v3 baseline: the program must stop with baseline.cpp's message,
#   not SIGILL.
# The program must exit with STATUS and its output contain EXPECT (the proof of which CPU it saw).
# Skipped (exit 77, one line) without qemu-x86_64 (Debian package qemu-user).
# Usage: on_emulated_cpu.sh CPU STATUS EXPECT PROGRAM [ARGS...]
set -u
cpu=$1 status=$2 expect=$3
shift 3
qemu=$(command -v qemu-x86_64) || { echo "on_emulated_cpu: skipped: qemu-x86_64 not found (apt-get install qemu-user)"; exit 77; }
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$qemu" -cpu "$cpu" "$@" > "$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne "$status" ]; then
  [ "$rc" -eq 132 ] && echo "on_emulated_cpu: $1 died with SIGILL: it ran an instruction the emulated CPU ($cpu) lacks"
  echo "on_emulated_cpu: $1 exited with status $rc on the emulated CPU ($cpu), not $status"
  exit 1
fi
grep -q -- "$expect" "$out" || { echo "on_emulated_cpu: the output does not contain '$expect': did the program see the emulated CPU ($cpu)?"; exit 1; }
echo "on_emulated_cpu: $1 exited with status $status on the emulated CPU ($cpu), as it should"
