#!/bin/sh
# Fails when an object of the CPU backend other than the AVX-512 / AMX variants of backends/cpu/isa/
# holds AVX-512 or AMX code: such code would run on every CPU and die with SIGILL on an AVX2-only one. Usage: check_isa_objects.sh
# libdemi_backend_cpu.a (objdump -d prints each member as "<name>.o:  file format ...").
set -eu
lib=$1
command -v objdump > /dev/null || { echo "check_isa_objects: objdump not found (binutils)"; exit 1; }
# zmm / opmask / tile registers, EVEX-only xmm/ymm 16-31, and AVX-512 / AMX-only mnemonics.
pattern='%zmm|%tmm|%k[0-7]([^0-9]|$)|mm(1[6-9]|2[0-9]|3[01])([^0-9]|$)|ldtilecfg|tdpbf16|vdpbf16|vcvtne2?ps2bf16|vpternlog|vperm[it]2|vpcompress|vexpand|[ \t]k(mov|and|or|xor|xnor|not|shift|test|ortest|unpck|add)[bwdq]'
objdump -d --no-show-raw-insn "$lib" | awk -v pattern="$pattern" '
  /file format/ { member = $1; sub(/:$/, "", member); next }
  member !~ /_(avx512|avx512bf16|amx)\.cpp\.o$/ && $0 ~ pattern { bad[member] = bad[member] "\n    " $0; count[member]++ }
  END {
    n = 0
    for (m in bad) { printf "check_isa_objects: %s (baseline code) has %d AVX-512/AMX instructions, e.g.:%s\n", m, count[m], substr(bad[m], 1, 400); n++ }
    if (n) exit 1
    print "check_isa_objects: no AVX-512 or AMX instructions outside backends/cpu/isa/"
  }'
# An inline function or template instantiated in an AVX-512 / AMX variant is a weak symbol the linker
# may pick for baseline callers too: those variants must define none. (DW.ref.__gxx_personality_v0,
# which builds with exceptions in unwind tables emit, is a data pointer for the unwinder, not code.)
command -v nm > /dev/null || { echo "check_isa_objects: nm not found (binutils)"; exit 1; }
nm --defined-only "$lib" | awk '
  /:$/ { member = $1; sub(/:$/, "", member); next }
  member ~ /_(avx512|avx512bf16|amx)\.cpp\.o$/ && ($2 == "W" || $2 == "V" || $2 == "u") && $3 !~ /^DW\.ref\./ { print "check_isa_objects: " member " defines weak symbol " $3; n++ }
  END { if (n) exit 1; print "check_isa_objects: no weak symbols in the AVX-512 and AMX variants" }'
