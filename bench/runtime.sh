#!/usr/bin/env bash
# bench/runtime.sh: what the runtime build mode costs a program, as ratios
# to a stock build of the same benchmarks.
#
# It builds finalizerwatch's BenchmarkRuntimeMode* twice, stock and with
# the flags `finalizercheck -runtime` prints (in that build the benchmarks
# attach finalizerwatch.Default to the runtime, so every raw
# runtime.SetFinalizer, AddCleanup, Stop and os.Open in them is counted),
# runs the two binaries in alternation, COUNT rounds, and prints for each
# benchmark the ns/op of both and the median of the per-round ratios.
#
#   bench/runtime.sh              # COUNT=6 rounds of 1s per benchmark
#   COUNT=10 BENCHTIME=2s bench/runtime.sh
#   BASE=d0e103c bench/runtime.sh # also the mode as BASE built it, interleaved
#
# With BASE (a commit), a third binary is built from BASE's tree with BASE's
# own finalizercheck -runtime, and each round runs all three: a change to
# the mode is measured before and after in the same minutes, each against
# the same stock build.
#
# Run it on a quiet machine, and note the load (`uptime`) with the figures.
set -euo pipefail

cd "$(dirname "$0")/.."
COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-1s}
BASE=${BASE:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gcprobe-rtbench.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at start)  go: $(go version)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')${BASE:+  base: $BASE}"
# modeTest DIR NAME builds DIR's finalizerwatch tests in DIR's runtime mode.
modeTest() {
	local flags
	flags=$(cd "$1/cmd/finalizercheck" && GOWORK=off go run . -runtime "$OUT/rt-$2" | tail -n 1)
	# shellcheck disable=SC2086 # the printed flags are two words
	(cd "$1" && go test -c $flags -o "$OUT/$2.test" ./finalizerwatch)
}
go test -c -o "$OUT/stock.test" ./finalizerwatch
modeTest . runtime
builds="stock runtime"
if [ -n "$BASE" ]; then
	rm -rf "$OUT/base-tree"
	git worktree add -q --detach "$OUT/base-tree" "$BASE"
	trap 'git worktree remove --force "$OUT/base-tree"' EXIT
	modeTest "$OUT/base-tree" base
	builds="stock base runtime"
fi

for i in $(seq "$COUNT"); do
	for build in $builds; do
		"$OUT/$build.test" -test.run '^$' -test.bench '^BenchmarkRuntimeMode' \
			-test.benchtime "$BENCHTIME" -test.count 1 |
			awk -v b="$build" -v r="$i" '/^BenchmarkRuntimeMode/ {sub(/-[0-9]+$/, "", $1); print r, b, $1, $3}'
	done
done >"$OUT/rounds.txt"

# Per round, each mode build / stock; then the medians over the rounds.
printf "%-34s %-8s %12s %12s %8s  %s\n" benchmark build "stock ns/op" "mode ns/op" ratio "(medians over the rounds; ratio range)"
awk '
	{ ns[$1, $2, $3] = $4; names[$3] = 1; rounds[$1] = 1; if ($2 != "stock") builds[$2] = 1 }
	END {
		for (n in names) for (bd in builds) {
			k = 0
			delete r; delete s; delete m
			for (i in rounds) {
				if ((i, "stock", n) in ns && (i, bd, n) in ns) {
					k++
					r[k] = ns[i, bd, n] / ns[i, "stock", n]
					s[k] = ns[i, "stock", n]; m[k] = ns[i, bd, n]
				}
			}
			if (k == 0) continue
			# insertion sorts: k is a handful
			for (a = 2; a <= k; a++) for (b = a; b > 1 && r[b-1] > r[b]; b--) { t = r[b]; r[b] = r[b-1]; r[b-1] = t }
			for (a = 2; a <= k; a++) for (b = a; b > 1 && s[b-1] > s[b]; b--) { t = s[b]; s[b] = s[b-1]; s[b-1] = t }
			for (a = 2; a <= k; a++) for (b = a; b > 1 && m[b-1] > m[b]; b--) { t = m[b]; m[b] = m[b-1]; m[b-1] = t }
			lo = int((k + 1) / 2); hi = int(k / 2) + 1
			printf "%-34s %-8s %12.1f %12.1f %7.2fx  (%.2f-%.2f)\n", n, bd, (s[lo] + s[hi]) / 2, (m[lo] + m[hi]) / 2, (r[lo] + r[hi]) / 2, r[1], r[k]
		}
	}' "$OUT/rounds.txt" | sort
echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (at end)  raw rounds: $OUT/rounds.txt"
