#!/usr/bin/env bash
# bench/compare.sh: the micro benchmarks of two commits, run interleaved, so
# that a change's before and after are measured on the same machine in the
# same minutes: drift in the load reaches both sides alike.
#
#   bench/compare.sh BASE             # BASE against the working tree
#   bench/compare.sh BASE NEW         # two commits
#   COUNT=10 bench/compare.sh c66cc83
#
# It checks out BASE (and NEW) as worktrees under OUT, builds each side's
# benchmark binary the way run.sh does (with the 10 000 generated sites),
# then runs COUNT rounds; in each round each side runs once, the order
# alternating, the registration benchmarks in one process and the callback
# runs and readers in another (see run.sh). It prints benchstat's comparison
# of the two sides (BASE the base), then each side's ratios to the raw
# runtime calls, from the rounds the two sides ran side by side.
#
# Environment: COUNT (rounds, default 6), MICRO_BENCHTIME (default 1s),
# SITES=1 (each round also measures memory at 10 000 ledger entries, as
# run.sh's sites suite, one process per measurement), OUT (directory for
# the worktrees and raw results; a new temporary one by default). Run it on
# a quiet machine and note the load (`uptime`).
set -euo pipefail

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: bench/compare.sh BASE [NEW]" >&2; exit 2; }
cd "$(dirname "$0")/.."
root=$(pwd)
COUNT=${COUNT:-6}
MICRO_BENCHTIME=${MICRO_BENCHTIME:-1s}
SITES=${SITES:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gcprobe-compare.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

base=$(git rev-parse --short "$1^{commit}")
new=working-tree
[ $# -eq 2 ] && new=$(git rev-parse --short "$2^{commit}")
[ "$base" != "$new" ] || { echo "bench/compare.sh: BASE and NEW are the same commit, $base" >&2; exit 2; }

# The worktrees live under OUT and go when the script ends, however it
# ends.
cleanup() {
  git -C "$root" worktree list --porcelain | sed -n "s|^worktree \($OUT/tree-.*\)|\1|p" |
    while read -r w; do git -C "$root" worktree remove --force "$w" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

# tree_of REV: a directory holding REV's tree, or the working tree itself
# for working-tree.
tree_of() {
  if [ "$1" = working-tree ]; then
    echo "$root"
    return
  fi
  git -C "$root" worktree add --detach --force "$OUT/tree-$1" "$1" >/dev/null 2>&1
  echo "$OUT/tree-$1"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at start)  go: $(go version)  base: $base  new: $new  COUNT=$COUNT" | tee "$OUT/machine.txt"
declare -A dirs label
dirs[base]=$(tree_of "$base")
dirs[new]=$(tree_of "$new")
label[base]=$base
label[new]=$new
[ "$new" = working-tree ] && label[new]="the working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', modified')"
for side in base new; do
  log "building $side: ${label[$side]}"
  build_bench "${dirs[$side]}" "$OUT/$side"
done

# run SIDE ARGS...: SIDE's binary from its bench/, output appended to
# $OUT/SIDE.txt.
run() {
  local side=$1
  shift
  (cd "${dirs[$side]}/bench" && "$OUT/$side/bench.test" -test.run='^$' -test.timeout=0 -test.benchmem -test.count=1 -test.benchtime="$MICRO_BENCHTIME" "$@") >>"$OUT/$side.txt"
  if grep -qE '^(--- FAIL|FAIL|panic)' "$OUT/$side.txt"; then
    echo "benchmark failure, see $OUT/$side.txt" >&2
    exit 1
  fi
}

: >"$OUT/base.txt"
: >"$OUT/new.txt"
for ((r = 0; r < COUNT; r++)); do
  order=(base new)
  ((r % 2)) && order=(new base)
  log "round $((r + 1))/$COUNT: ${order[*]}"
  for side in "${order[@]}"; do
    run "$side" -test.bench="$MICRO_REGISTRATIONS"
    run "$side" -test.bench="$MICRO_CALLBACKS"
    if [ "$SITES" = 1 ]; then
      sites_round run "$side"
    fi
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at end)" | tee -a "$OUT/machine.txt"

benchstat=$(find_benchstat)
echo
if [ -n "$benchstat" ]; then
  echo "### benchstat: base = ${label[base]}, new = ${label[new]}"
  (cd "$OUT" && "$benchstat" base=base.txt new=new.txt)
else
  echo "no benchstat: raw results in $OUT"
fi
for side in base new; do
  echo
  echo "### ratios to the raw runtime calls: $side = ${label[$side]}"
  (cd "$root/bench" && go run ./internal/ratios "$OUT/$side.txt")
done
echo
echo "raw results in $OUT"
