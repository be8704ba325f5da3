#!/usr/bin/env bash
# Fuzzes the parsers of ralph-core that read outside input (the hook's stdin,
# the transcript, the agent's message) with cargo-fuzz (libFuzzer + ASan) on
# the stable toolchain, each target for SECONDS (default 60).
#
#   fuzz/run.sh [SECONDS]     every target for SECONDS
#   fuzz/run.sh --smoke       every target for 5 s (CI)
#   FUZZ_TARGETS="signals" fuzz/run.sh 300
#
# Installs the pinned cargo-fuzz when missing. Corpora grow in fuzz/corpus/
# (kept between runs, not committed); a crash is saved in fuzz/artifacts/
# and fails the run. Ends with one line per target (runs, corpus size)
# and the time spent installing, building and fuzzing.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")"

CARGO_FUZZ_VERSION=0.13.2

seconds=60
case "${1:-}" in
  "") ;;
  --smoke) seconds=5 ;;
  -h | --help)
    sed -n '2,13p' "$self" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *[!0-9]* | 0*)
    echo "usage: fuzz/run.sh [SECONDS | --smoke]" >&2
    exit 2
    ;;
  *) seconds=$1 ;;
esac
read -r -a targets <<<"${FUZZ_TARGETS:-hook_input transcript signals usage}"

started=$SECONDS
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
installed=$SECONDS

# cargo-fuzz passes nightly-only flags (-Zsanitizer=address, ...) to rustc;
# RUSTC_BOOTSTRAP=1 lets the stable compiler accept them.
export RUSTC_BOOTSTRAP=1

seeds_of() {
  case "$1" in
    hook_input) echo ../tests/fixtures ;;
    *) echo "seeds/$1" ;;
  esac
}

# Extra libFuzzer options. The transcript target reads each input several
# times, byte by byte under instrumentation; inputs of 4 KiB already span
# many of its small chunks, and keep it at about 2000 runs/s instead of 300.
options_of() {
  case "$1" in
    transcript) echo -max_len=4096 ;;
  esac
}

summary=()
for target in "${targets[@]}"; do
  cargo fuzz build "$target"
done
built=$SECONDS
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  log=$(mktemp)
  echo "== $target: ${seconds}s"
  status=0
  read -r -a extra <<<"$(options_of "$target")"
  cargo fuzz run "$target" "corpus/$target" "$(seeds_of "$target")" -- \
    -max_total_time="$seconds" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
  fi
  runs=$(awk '/^stat::number_of_executed_units/ { print $NF }' "$log")
  rm -f "$log"
  summary+=("$(printf '%-11s %10s runs in %3ss, corpus %4s inputs, exit %s' \
    "$target" "${runs:-?}" "$seconds" "$(find "corpus/$target" -type f | wc -l)" "$status")")
  if [ "$status" -ne 0 ]; then
    printf '%s\n' "${summary[@]}"
    echo "fuzz/run.sh: $target failed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
printf '%s\n' "${summary[@]}"
echo "time: install $((installed - started))s, build $((built - installed))s, fuzzing $((SECONDS - built))s"
