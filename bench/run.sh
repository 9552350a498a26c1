#!/usr/bin/env bash
# bench/run.sh: gcprobe's overhead benchmarks, compared with benchstat and
# summed up as a table of ratios to the run without the probe. See
# bench/README.md for what each figure means and how long this takes.
#
#   bench/run.sh                      # everything, COUNT=6
#   COUNT=10 bench/run.sh             # more samples
#   ONLY=operator bench/run.sh        # micro, operator or sites
#   OUT=/tmp/results bench/run.sh     # keep the raw results there
#
# Environment:
#   COUNT                samples per benchmark (default 6; benchstat wants >= 6)
#   MICRO_BENCHTIME      -benchtime of the micro benchmarks (default 1s)
#   OPERATOR_RECONCILES  reconciles per operator run (default 30000, about
#                        10 s per run on an idle 2-core machine)
#   WORKERS              reconcile workers of the operator workload (default 4)
#   ONLY                 run one suite: micro, operator or sites
#   OUT                  directory for the raw results (default: a new
#                        temporary directory, printed at the end)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

COUNT=${COUNT:-6}
MICRO_BENCHTIME=${MICRO_BENCHTIME:-1s}
OPERATOR_RECONCILES=${OPERATOR_RECONCILES:-30000}
WORKERS=${WORKERS:-4}
ONLY=${ONLY:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gcprobe-bench.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) # the go commands below run in bench/, a module of its own

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

start=$(date +%s)
{
  echo "date:     $(date -u +%FT%TZ)"
  echo "go:       $(go version)"
  echo "kernel:   $(uname -srm)"
  echo "cpus:     $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')  $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
  echo "load:     $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at start)"
  echo "commit:   $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "settings: COUNT=$COUNT MICRO_BENCHTIME=$MICRO_BENCHTIME OPERATOR_RECONCILES=$OPERATOR_RECONCILES WORKERS=$WORKERS"
} | tee "$OUT/machine.txt"

# One test binary for every suite.
log "generating 10 000 registration sites and building the benchmark binary"
build_bench "$root" "$OUT"

# run_bench FILE ARGS...: runs the binary from bench/ and appends its
# output to FILE.
run_bench() {
  local file=$1
  shift
  (cd "$root/bench" && "$OUT/bench.test" -test.run='^$' -test.timeout=0 "$@") | tee -a "$file" | grep -E '^(Benchmark|--- FAIL|FAIL|panic)' >&2 || true
  if grep -qE '^(--- FAIL|FAIL|panic)' "$file"; then
    echo "benchmark failure, see $file" >&2
    exit 1
  fi
}

if want micro; then
  log "micro benchmarks, -count=$COUNT -benchtime=$MICRO_BENCHTIME"
  : >"$OUT/micro.txt"
  run_bench "$OUT/micro.txt" -test.bench="$MICRO_REGISTRATIONS" \
    -test.benchmem -test.count="$COUNT" -test.benchtime="$MICRO_BENCHTIME"
  # The callback runs and the readers, one process per round (lib.sh).
  for ((r = 0; r < COUNT; r++)); do
    run_bench "$OUT/micro.txt" -test.bench="$MICRO_CALLBACKS" \
      -test.benchmem -test.count=1 -test.benchtime="$MICRO_BENCHTIME"
  done
fi

# The operator workload: each run in a fresh process (so RSS compares, and
# nothing a mode leaves behind, such as finalizerwatch.Default's tables,
# reaches another), the modes interleaved round by round with the order
# rotated, so that drift in the machine's load spreads over all of them.
if want operator; then
  log "operator workload, $COUNT rounds x 3 modes x $OPERATOR_RECONCILES reconciles"
  : >"$OUT/operator.txt"
  modes=(raw default full)
  for ((r = 0; r < COUNT; r++)); do
    for ((i = 0; i < 3; i++)); do
      m=${modes[$(((r + i) % 3))]}
      run_bench "$OUT/operator.txt" -test.bench="^BenchmarkOperator\$/^mode=$m\$" -test.benchtime="${OPERATOR_RECONCILES}x" -workers="$WORKERS"
    done
  done
fi

# Memory at 10 000 ledger entries: one process per measurement.
if want sites; then
  log "memory at 10 000 sites, $COUNT rounds"
  : >"$OUT/sites.txt"
  for ((r = 0; r < COUNT; r++)); do
    sites_round run_bench "$OUT/sites.txt"
  done
fi

echo "load:     $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at end)" | tee -a "$OUT/machine.txt"

# benchstat (lib.sh); without it the raw results and the ratio table
# still print.
benchstat=$(find_benchstat)

results=()
for f in micro operator sites; do
  [ -s "$OUT/$f.txt" ] && results+=("$OUT/$f.txt")
done
[ ${#results[@]} -gt 0 ] || { echo "no results" >&2; exit 1; }

echo
if [ -n "$benchstat" ]; then
  if [ -s "$OUT/micro.txt" ]; then
    echo "### benchstat: registration and callbacks, by mode (raw is the base)"
    "$benchstat" -col /mode -filter '.name:(SetFinalizer OR AddCleanup OR FinalizerRun OR CleanupRun)' "$OUT/micro.txt"
    echo
    echo "### benchstat: registration at the overflow site (intable is the base)"
    "$benchstat" -col /site -filter '.name:Overflow' "$OUT/micro.txt"
    echo
    echo "### benchstat: readers"
    "$benchstat" -filter '.name:(SamplerRound OR Gather OR Collect OR Profile)' "$OUT/micro.txt"
    echo
  fi
  if [ -s "$OUT/operator.txt" ]; then
    # "~" in the vs base column: no significant difference (p >= 0.05).
    # The same verdicts, as CSV, go to the ratio table, which says "not
    # resolved (p=...)" for those rows rather than met or missed.
    echo "### benchstat: operator workload, by mode (raw is the base; ~ = not significant)"
    "$benchstat" -col /mode "$OUT/operator.txt"
    "$benchstat" -format csv -col /mode "$OUT/operator.txt" >"$OUT/operator-benchstat.csv" 2>/dev/null || rm -f "$OUT/operator-benchstat.csv"
    echo
  fi
  if [ -s "$OUT/sites.txt" ]; then
    echo "### benchstat: memory at 10 000 ledger entries (none is the base)"
    "$benchstat" -col /mode "$OUT/sites.txt"
    echo
  fi
else
  cat "${results[@]}"
fi

ratio_flags=()
[ -s "$OUT/operator-benchstat.csv" ] && ratio_flags+=(-benchstat "$OUT/operator-benchstat.csv")
echo "### ratios (medians; goals from the overhead issue)"
(cd "$root/bench" && go run ./internal/ratios "${ratio_flags[@]}" "${results[@]}") | tee "$OUT/ratios.txt"
echo
echo "raw results in $OUT; took $(( $(date +%s) - start ))s"
