#!/usr/bin/env bash
# Builds a profile-guided `jasper` binary. On the 2-core Xeon of session 41 the simulator ran
# 1.2x faster on one thread with it, 1.05-1.08x on two (docs/results/sim-speed.md), with the
# same traces: PGO changes code layout and inlining, never results.
#
#   scripts/pgo-build.sh            -> target/pgo/release/jasper
#
# Steps: an instrumented release build (target/pgo-gen), a training run of the workloads a
# researcher and an operator run (the speed case of `jasper sim run` at N = 1000 on two
# threads and on one, the quick inbound campaign, `jasper up` for a few seconds, so that
# no path the binary serves is laid out as cold), the counts merged by `llvm-profdata`, and
# a release build that uses them (target/pgo). It takes ~6 minutes on 2 cores; the normal
# `target/release` build is left alone.
#
# Needs an `llvm-profdata` of the same LLVM major version as rustc (`rustc -vV` says which):
# rustup's `llvm-tools` component, or the distribution's package (Debian: `llvm-22` for
# LLVM 22). Set LLVM_PROFDATA to choose one, PGO_UP_BASE_PORT if ports 47000-47100 are taken
# (the training run of `jasper up` listens there).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

llvm_major="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
if [ -z "$llvm_major" ]; then
  echo "pgo-build: cannot read rustc's LLVM version from \`rustc -vV\`" >&2
  exit 1
fi

# is_llvm_major TOOL: whether TOOL says it is of rustc's LLVM. (Its output is read whole
# before it is searched: `grep -q` in a pipe may close it early, and under pipefail the
# tool's SIGPIPE would fail the test. An llvm-profdata older than LLVM 15 has no --version:
# it fails, and says no version.)
is_llvm_major() {
  local text
  text="$("$1" --version 2>&1 || true)"
  grep -q "LLVM version $llvm_major\." <<<"$text"
}

find_profdata() {
  if [ -n "${LLVM_PROFDATA:-}" ]; then
    echo "$LLVM_PROFDATA"
    return
  fi
  local sysroot candidate
  sysroot="$(rustc --print sysroot)"
  for candidate in "$sysroot"/lib/rustlib/*/bin/llvm-profdata \
    "$(command -v "llvm-profdata-$llvm_major" || true)" \
    "/usr/lib/llvm-$llvm_major/bin/llvm-profdata" \
    "$(command -v llvm-profdata || true)"; do
    if [ -x "$candidate" ] && is_llvm_major "$candidate"; then
      echo "$candidate"
      return
    fi
  done
}

profdata="$(find_profdata)"
if [ -z "$profdata" ]; then
  echo "pgo-build: no llvm-profdata of LLVM $llvm_major (rustc's); install one:" >&2
  echo "  rustup component add llvm-tools      (rustup toolchains)" >&2
  echo "  apt-get install llvm-$llvm_major                (Debian; LLVM's own apt repository on older releases)" >&2
  echo "or point LLVM_PROFDATA at it" >&2
  exit 1
fi
if [ ! -x "$profdata" ]; then
  echo "pgo-build: $profdata is not an executable file" >&2
  exit 1
fi
if ! is_llvm_major "$profdata"; then
  echo "pgo-build: $profdata is not LLVM $llvm_major (rustc's): its profiles would not load" >&2
  exit 1
fi
echo "pgo-build: rustc's LLVM is $llvm_major; merging with $profdata"

gen_dir="$root/target/pgo-gen"
use_dir="$root/target/pgo"
raw="$gen_dir/profraw"
merged="$gen_dir/jasper.profdata"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "pgo-build: 1/4 instrumented build (target/pgo-gen)"
rm -rf "$raw"
mkdir -p "$raw"
RUSTFLAGS="-Cprofile-generate=$raw" CARGO_TARGET_DIR="$gen_dir" \
  cargo build --release --locked -p jasper
# What the build scripts wrote while they ran is not the binary's profile.
rm -f "$raw"/*.profraw

echo "pgo-build: 2/4 training runs"
bin="$gen_dir/release/jasper"
# train NAME ARGS...: one training run of the instrumented binary; its output is shown only
# if it fails.
train() {
  local name="$1"
  shift
  echo "pgo-build:   jasper $*"
  if ! "$bin" "$@" --out "$work/$name" >"$work/$name.log" 2>&1; then
    echo "pgo-build: training run \`jasper $*\` failed:" >&2
    tail -20 "$work/$name.log" >&2
    exit 1
  fi
}
speed_case=(sim run -n 1000 -H 2 --rate 5000 --model aws_c5 --seed 1)
train run2 "${speed_case[@]}" --duration 0.3 --threads 2
train run1 "${speed_case[@]}" --duration 0.1 --threads 1
train inbound sim paper-inbound --quick
train up up --duration 5 --base-port "${PGO_UP_BASE_PORT:-47000}"
shopt -s nullglob
profiles=("$raw"/*.profraw)
if [ ${#profiles[@]} -eq 0 ]; then
  echo "pgo-build: the training runs wrote no profile to $raw" >&2
  exit 1
fi

echo "pgo-build: 3/4 merging ${#profiles[@]} profile(s)"
"$profdata" merge -o "$merged" "${profiles[@]}"

echo "pgo-build: 4/4 optimised build (target/pgo)"
RUSTFLAGS="-Cprofile-use=$merged -Cllvm-args=-pgo-warn-missing-function=false" \
  CARGO_TARGET_DIR="$use_dir" cargo build --release --locked -p jasper
echo "pgo-build: done: $use_dir/release/jasper"
