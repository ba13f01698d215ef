#!/usr/bin/env bash
# Runs every cargo-fuzz target of the `wire` crate for a set time and reports how many inputs
# each tried.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s each, all targets)
#
# Needs `cargo install cargo-fuzz` and a C++ compiler (libFuzzer). Works on a stable
# toolchain through RUSTC_BOOTSTRAP=1 (cargo-fuzz passes nightly -Z flags). Corpora go to
# fuzz/corpus/<target> (kept between runs, git-ignored), crashes to fuzz/artifacts/<target>.
# Each corpus is seeded from fuzz/seeds/<target> (valid encodings of every message type, made
# with the crate's own encoders, and real MoldUDP64 payloads) and the pcap target with the
# real captures in ../shared/data/itch.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
logs="$CARGO_TARGET_DIR/fuzz-logs"
mkdir -p "$logs"

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  if [ -d "seeds/$t" ]; then cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true; fi
done
data=../../shared/data/itch
if [ -d "$data" ]; then
  mkdir -p corpus/pcap
  cp -n "$data"/*.pcap corpus/pcap/ 2>/dev/null || true
fi

if ! cargo fuzz build -O >"$logs/build.log" 2>&1; then
  tail -30 "$logs/build.log" >&2
  exit 1
fi

status=0
printf '%-12s %8s %14s %10s %s\n' target seconds inputs exec/s result
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  mkdir -p "corpus/$t"
  if cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 \
    >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log and fuzz/artifacts/$t)"
    status=1
  fi
  runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
  rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
  printf '%-12s %8s %14s %10s %s\n' "$t" "$secs" "$runs" "$rate" "$result"
done
exit $status
