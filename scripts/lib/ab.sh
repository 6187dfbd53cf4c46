# What scripts/ab-kernels and scripts/ab-train-step share: the median of their runs, and their
# --env-a / --env-b NAME=VALUE options (a variable for one side only), collected in the caller's
# arrays env_a and env_b.

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# ab_env_option SCRIPT OPTION VALUE: appends VALUE to env_a (--env-a) or env_b (--env-b), or exits 2
# naming the script, the option and the value.
ab_env_option() {
  [[ ${3:-} =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "$1: $2 needs NAME=VALUE, got '${3:-}'" >&2; exit 2; }
  if [[ $2 == --env-a ]]; then env_a+=("$3"); else env_b+=("$3"); fi
}
