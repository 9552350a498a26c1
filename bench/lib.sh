# bench/lib.sh: what run.sh and compare.sh share; sourced, not run.

# log prints a progress line, timed, on stderr.
log() { printf '== %s  %s\n' "$(date +%T)" "$*" >&2; }

# The benchstat version these scripts were written against; any recent one
# reads the same format.
BENCHSTAT_VERSION=${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}
BENCHSTAT_BIN=${BENCHSTAT_BIN:-$HOME/.cache/gcprobe/bin}

# find_benchstat prints the path of benchstat: on PATH, in the cache, or
# installed into the cache (outside the repository, so go.mod stays as it
# is); nothing if it cannot be installed.
find_benchstat() {
  local b
  b=$(command -v benchstat || true)
  if [ -z "$b" ] && [ -x "$BENCHSTAT_BIN/benchstat" ]; then
    b=$BENCHSTAT_BIN/benchstat
  fi
  if [ -z "$b" ]; then
    log "installing benchstat@$BENCHSTAT_VERSION into $BENCHSTAT_BIN"
    if GOBIN=$BENCHSTAT_BIN go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" >&2; then
      b=$BENCHSTAT_BIN/benchstat
    else
      log "benchstat unavailable"
    fi
  fi
  echo "$b"
}

# build_bench DIR OUT: the benchmark binary of the tree at DIR, built into
# OUT/bench.test, with 10 000 generated registration lines compiled in
# through an overlay (the repository keeps the generator, not the lines).
build_bench() {
  local dir=$1 out=$2
  mkdir -p "$out/gen"
  (cd "$dir/bench" && go run ./internal/gensites -n 10000 -o "$out/gen/sites_gen_test.go")
  printf '{"Replace":{"%s":"%s"}}\n' "$dir/bench/sites_gen_test.go" "$out/gen/sites_gen_test.go" >"$out/gen/overlay.json"
  (cd "$dir/bench" && go test -c -o "$out/bench.test" -tags gcprobe_sites -overlay "$out/gen/overlay.json" .)
}

# The micro suite runs in two processes a round: the registrations, then
# the callback runs and the readers, which in the registrations' process
# inherited a heap of hundreds of thousands of objects and the runtime's
# leftover specials, and came out two to six times slower than alone.
MICRO_REGISTRATIONS='^Benchmark(SetFinalizer|AddCleanup|Overflow)$'
MICRO_CALLBACKS='^Benchmark(FinalizerRun|CleanupRun|SamplerRound|Gather|Collect|Profile)$'

# sites_round CMD ARGS...: one round of the memory suite (10 000 ledger
# entries, sites and stacks, without and with the probe), each measurement
# a process of its own: CMD ARGS and the measurement's flags, four times.
sites_round() {
  local shape m
  for shape in sites stacks; do
    for m in none probe; do
      "$@" -test.bench="^BenchmarkSitesRSS\$/^$shape=10000\$/^mode=$m\$" -test.benchtime=1x
    done
  done
}
