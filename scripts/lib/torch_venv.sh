# PyTorch for side-by-side runs (scripts/bench-vs-pytorch, scripts/crosscheck-pytorch), never for
# building or testing demi: a venv made once under the user's cache. Source this file, then
# `demi_torch_python NAME` sets py to the venv's python (NAME prefixes the messages).
# env: DEMI_TORCH_VENV (default $XDG_CACHE_HOME/demi/torch-venv)
demi_torch_python() {
  local name=$1
  local venv=${DEMI_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/demi/torch-venv}
  py=$venv/bin/python
  if ! "$py" -c 'import torch, numpy' 2>/dev/null; then  # numpy: torch warns at import without it
    echo "$name: installing torch and numpy into $venv (once)"
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv"; then
      echo "$name: 'python3 -m venv' failed; install python3-venv (Debian) and retry" >&2
      return 1
    fi
    # The CPU-only wheel is a fraction of the default one's size.
    if "$py" -m pip install -q torch numpy --index-url https://download.pytorch.org/whl/cpu; then
      echo "$name: installed the CPU-only torch wheel from download.pytorch.org"
    else
      echo "$name: the CPU-only wheel failed; trying torch from PyPI (a larger download)"
      if "$py" -m pip install -q torch numpy; then
        echo "$name: installed torch from PyPI"
      else
        echo "$name: could not install torch: both https://download.pytorch.org/whl/cpu and PyPI" >&2
        echo "  failed (see pip's messages above: no network, a proxy, or no wheel for $(python3 --version))." >&2
        echo "  Point DEMI_TORCH_VENV at a venv that has torch, or fix the network and rerun." >&2
        return 1
      fi
    fi
  fi
  echo "$name: $("$py" -c 'import torch; print("torch", torch.__version__)') in $venv"
}
