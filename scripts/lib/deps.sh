# Sourced by scripts/test, scripts/train, scripts/sanitize and scripts/fuzz: installs the Debian
# packages demi builds with (as root), or prints the exact apt-get line and exits non-zero.
# Extra arguments are further packages a script needs (scripts/fuzz: clang and its runtimes).
demi_install_deps() {
  local packages=(cmake ninja-build g++ libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
                  nlohmann-json3-dev libcli11-dev libstb-dev libopenmpi-dev openmpi-bin "$@")
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -eq 0 ]]; then
    # One line per package; apt's own output goes to a log that is shown only if it fails.
    local log
    log=$(mktemp -t demi-apt.XXXXXX)
    for p in "${missing[@]}"; do echo "demi: installing $p"; done
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           "${missing[@]}"; } > "$log" 2>&1; then
      echo "demi: apt-get failed; its last lines (all of them in $log):" >&2
      tail -n 30 "$log" >&2
      exit 1
    fi
    rm -f "$log"
  else
    echo "demi: missing Debian packages; install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

# Configures Release with all cores into $1 (default build).
demi_configure() {
  local build=${1:-build} werror=OFF
  [[ ${CI:-} == true ]] && werror=ON
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEMI_CUDA="${DEMI_CUDA:-AUTO}" -DDEMI_WERROR=$werror
}
