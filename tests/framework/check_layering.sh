#!/usr/bin/env bash
# The layering rules that keep framework/ readable from the bottom up, as include rules:
# - framework/ reaches a device only through backends/kernels.h (and the backend-neutral
#   backends/device_communicator.h and backends/host_reads.h), never a file of backends/cpu or
#   backends/cuda;
# - amp/ (autocast, GradScaler) and dist/ (process groups, DDP) do not know each other: the scaler
#   learns about other ranks through Options::reduce_found_inf, supplied by the caller;
# - training/ (TrainStep) sits on top: nothing else in framework/ includes it.
# Usage: check_layering.sh <repository root>. Prints each violation; exits 1 if there is one.
set -uo pipefail
cd "${1:?usage: check_layering.sh <repository root>}"
status=0
violation() {  # <grep -rn output>, <rule>
  [[ -z $1 ]] && return
  while IFS= read -r line; do echo "layering: $line   <- $2"; done <<< "$1"
  status=1
}
violation "$(grep -rnE '#include "backends/(cpu|cuda)/' framework)" \
  "framework/ includes a backend's own header; go through backends/kernels.h"
violation "$(grep -rnE '#include "framework/(dist|training)/' framework/amp)" \
  "amp/ must not depend on dist/ or training/"
violation "$(grep -rnE '#include "framework/(amp|training)/' framework/dist)" \
  "dist/ must not depend on amp/ or training/"
violation "$(grep -rnE '#include "framework/training/' framework --exclude-dir=training --exclude-dir=demi)" \
  "training/ is the top layer; only demi/demi.h includes it"
[[ $status == 0 ]] && echo "layering: framework/ keeps its include rules"
exit $status
