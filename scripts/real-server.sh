#!/usr/bin/env bash
#
# real-server.sh [DURATION] runs a server gcprobe's authors did not write,
# Caddy v2.11.9 from the module proxy, built unmodified in the runtime
# build mode with gcprobe linked and started by finalizercheck -start (a
# main package of three lines, Caddy's documented way to build it, is all
# there is; no file of it imports gcprobe), serving 220 static files on loopback to 16 clients for
# DURATION (default 120s). It then prints the live page's top sites and
# the probe's Warn lines, and fails if a site was logged growing (the
# server has no leak) or if Caddy's file opens are counted at its one-line
# filesystem wrapper (internal/filesystems/os.go) rather than at the
# fileserver's lines that call it. It prints the GC causes and the top
# allocating lines with their paths, and fails if a runtime frame is named
# as an allocating line or a cause changed state more than once a minute.
# With PLANT=1 a leak is planted (see below) and it fails unless live-heap
# growth is logged at the planted line.
#
# BUILD picks what is built and run (each binary is kept under its own
# name): runtime (the default) as above, into caddy; probe, gcprobe linked
# and started the same way (-start's file and its -modfile) but without
# the runtime patch, the drop-in (overlay.json's entries under GOROOT and
# -tags=gcprobe_runtime left out), into caddy-probe, where data.json must
# say runtime_mode false; stock, Caddy with no gcprobe at all (a plain go
# build of the same main package), into caddy-stock, with the page's
# checks skipped. PORT and PROBE_PORT (8080, 6061) move Caddy's and the
# probe's listeners, both on loopback.
#
# RSS=1 measures memory instead: it builds all three and runs them
# interleaved (the order rotating), ROUNDS (3) rounds of DURATION (30s in
# this mode) each under the same load, with GODEBUG=gctrace=1, reading at
# the end of the load, before any scrape, VmRSS from /proc/PID/status, the
# anonymous and file-backed split from smaps_rollup and the binary's own
# mapped pages from smaps (bin_large: how much of them is in large folios,
# where /proc/kpageflags can be read); then, for probe and runtime, the go_memstats_*
# breakdown from the probe's /metrics (GCPROBE_METRICS=default). It prints
# every round and the medians per build. Figures are under
# GCPROBE_CACHE/real-server/rss/.
#
# In every mode a run starts with its binary out of the page cache (COLD=0
# leaves the cache as it is): a binary the go command has just written is
# cached in large folios, of which a fault maps more than a page, and
# shows 3 to 5 MiB more RSS, all of it the binary's file pages, than the
# same binary read in by exec, as a deployed one is.
#
# Not part of .ci/run: the first build compiles about 830 packages in the
# mode (minutes on 2 cores); later runs reuse the build cache. The module
# and the binary are kept under ${GCPROBE_CACHE:-$HOME/.cache/gcprobe}.
set -euo pipefail
rss=${RSS:-}
if [ "$rss" = 1 ]; then
	duration=${1:-30s}
else
	duration=${1:-120s}
fi
build=${BUILD:-runtime}
case $build in
stock | probe | runtime) ;;
*)
	echo "BUILD=$build: stock, probe or runtime"
	exit 2
	;;
esac
rounds=${ROUNDS:-3}
port=${PORT:-8080}
probe_port=${PROBE_PORT:-6061}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${GCPROBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gcprobe}
dir=$cache/real-server
mkdir -p "$dir/app" "$dir/load" "$dir/site"
export GOWORK=off

cat >"$dir/app/main.go" <<'EOF'
// Caddy, unmodified; finalizercheck -start links and starts gcprobe.
package main

import caddycmd "github.com/caddyserver/caddy/v2/cmd"
import _ "github.com/caddyserver/caddy/v2/modules/standard"

func main() { caddycmd.Main() }
EOF
rm -f "$dir/app/gcprobe_start.go" # what the script wrote before -start
# PLANT=1 plants a leak: a cache that keeps 64 KiB more every 200 ms (19 MiB
# a minute) and never lets go, at one line the probe must name.
if [ "${PLANT:-}" = 1 ]; then
	cat >"$dir/app/plant.go" <<'EOF'
package main

import "time"

var planted = map[int][]byte{}

func init() {
	go func() {
		for i := 0; ; i++ {
			time.Sleep(200 * time.Millisecond)
			planted[i] = make([]byte, 64<<10) // the planted leak
		}
	}()
}
EOF
else
	rm -f "$dir/app/plant.go"
fi
cat >"$dir/app/go.mod" <<EOF
module realserver

go 1.26

require github.com/caddyserver/caddy/v2 v2.11.9
EOF
cat >"$dir/load/main.go" <<'EOF'
// 16 clients GET random files (a tenth of them missing) from host:port
// (the second argument) until the time is up.
package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	d, err := time.ParseDuration(os.Args[1])
	if err != nil {
		panic(err)
	}
	addr := os.Args[2]
	end := time.Now().Add(d)
	var n, errs atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(end) {
				resp, err := http.Get(fmt.Sprintf("http://%s/f%d.bin", addr, rand.IntN(220)+1))
				if err != nil {
					errs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("requests %d, errors %d\n", n.Load(), errs.Load())
}
EOF
printf 'module load\n\ngo 1.26\n' >"$dir/load/go.mod"
for i in $(seq 1 200); do
	[ -f "$dir/site/f$i.bin" ] || head -c $((i * 512)) /dev/urandom >"$dir/site/f$i.bin"
done

(cd "$dir/app" && go mod tidy >/dev/null 2>&1)
(cd "$dir/load" && go build -o "$dir/loadgen" .)

builds=$build
[ "$rss" = 1 ] && builds="stock probe runtime"

# flags are finalizercheck's for the runtime mode; probe_flags the same
# less the runtime's patch: the overlay's entries under GOROOT and the
# gcprobe_runtime tag go, the start file and the -modfile stay.
flags='' probe_flags=''
if [ "$builds" != stock ]; then
	(cd "$repo/cmd/finalizercheck" && go build -o "$dir/finalizercheck" .)
	sums=$(cd "$dir/app" && cat go.mod go.sum | sha256sum)
	flags=$(cd "$dir/app" && "$dir/finalizercheck" -runtime "$dir/rt" -start -gcprobe "$repo" | tail -n 1)
	if [ "$(cd "$dir/app" && cat go.mod go.sum | sha256sum)" != "$sums" ]; then
		echo "FAIL: -start changed the program's go.mod or go.sum"
		exit 1
	fi
	python3 - "$dir/rt/overlay.json" "$(go env GOROOT)" "$dir/rt/probe-overlay.json" <<'EOF'
import json, os, sys
replace = json.load(open(sys.argv[1]))["Replace"]
goroot = os.path.join(sys.argv[2], "")
json.dump({"Replace": {k: v for k, v in replace.items() if not k.startswith(goroot)}}, open(sys.argv[3], "w"), indent="\t")
EOF
	for f in $flags; do
		case $f in
		-overlay=*) probe_flags+=" -overlay=$dir/rt/probe-overlay.json" ;;
		-tags=*)
			tags=$(echo "${f#-tags=}" | tr , '\n' | grep -vx gcprobe_runtime | paste -sd, - || true)
			if [ -n "$tags" ]; then
				probe_flags+=" -tags=$tags"
			fi
			;;
		*) probe_flags+=" $f" ;;
		esac
	done
fi

# binary BUILD is where BUILD's binary is kept.
binary() {
	case $1 in
	stock) echo "$dir/caddy-stock" ;;
	probe) echo "$dir/caddy-probe" ;;
	runtime) echo "$dir/caddy" ;;
	esac
}

for b in $builds; do
	case $b in
	stock)
		echo "building Caddy stock, without gcprobe"
		(cd "$dir/app" && go build -o "$(binary stock)" .)
		;;
	probe)
		echo "building Caddy with gcprobe dropped in, without the runtime patch ($probe_flags)"
		# shellcheck disable=SC2086 # probe_flags holds two or three flags
		(cd "$dir/app" && go build $probe_flags -o "$(binary probe)" .)
		;;
	runtime)
		echo "building Caddy in the runtime build mode, with -start ($flags)"
		# shellcheck disable=SC2086 # flags holds three flags
		(cd "$dir/app" && go build $flags -o "$(binary runtime)" .)
		;;
	esac
done

if curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/" || curl -s -o /dev/null -m 2 "http://127.0.0.1:$probe_port/"; then
	echo "FAIL: something already listens on 127.0.0.1:$port or :$probe_port (PORT, PROBE_PORT move them)"
	exit 1
fi

# serve BUILD DURATION OUT serves the site with BUILD's binary under load
# for DURATION. At the end of the load, before anything else reads it, it
# copies the server's /proc status, smaps_rollup and smaps into OUT; then,
# for probe and runtime, the page's data.json (and with RSS=1 /metrics).
# It leaves the load's result in OUT/load and the server's stderr in
# OUT/caddy.err, and stops the server.
serve() {
	local b=$1 d=$2 out=$3
	mkdir -p "$out"
	local env=(GCPROBE_LISTEN="127.0.0.1:$probe_port" GCPROBE_LOG_FORMAT=text)
	if [ "$rss" = 1 ]; then
		env+=(GCPROBE_METRICS=default GODEBUG=gctrace=1)
	fi
	# The binary's pages in RSS are those its faults map from the page
	# cache, and how many one fault maps depends on how the file came into
	# the cache: a binary just linked is cached in large folios, a fault
	# maps more of one, and the process shows 3 to 5 MiB more RSS than
	# the same binary read in by exec. Every run starts with its binary
	# out of the cache, unless COLD=0.
	if [ "${COLD:-1}" != 0 ]; then
		python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$(binary "$b")"
	fi
	env "${env[@]}" "$(binary "$b")" file-server --root "$dir/site" --listen "127.0.0.1:$port" >"$out/caddy.out" 2>"$out/caddy.err" &
	caddy=$!
	trap 'kill $caddy 2>/dev/null || true' EXIT
	local up=0
	for _ in $(seq 1 100); do
		if curl -fs -o /dev/null "http://127.0.0.1:$port/f1.bin"; then
			up=1
			break
		fi
		sleep 0.1
	done
	if [ $up = 0 ]; then
		echo "FAIL: $b did not serve on 127.0.0.1:$port"
		cat "$out/caddy.err"
		exit 1
	fi
	"$dir/loadgen" "$d" "127.0.0.1:$port" | tee "$out/load"
	for f in status smaps_rollup smaps; do
		cat "/proc/$caddy/$f" >"$out/$f"
	done
	if [ "$rss" = 1 ] && [ -r /proc/kpageflags ]; then
		# How much of the binary's mapped pages are in large folios
		# (compound pages, /proc/kpageflags; root only).
		python3 - "$caddy" "$(binary "$b")" >"$out/folios" <<'EOF'
import struct, sys
pid, exe = sys.argv[1], sys.argv[2]
pfns = []
with open("/proc/%s/maps" % pid) as maps, open("/proc/%s/pagemap" % pid, "rb") as pm:
    for line in maps:
        f = line.split()
        if len(f) < 6 or f[5] != exe:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        pm.seek(lo // 4096 * 8)
        data = pm.read((hi - lo) // 4096 * 8)
        pfns += [v & (1 << 55) - 1 for (v,) in struct.iter_unpack("<Q", data) if v >> 63]
large = 0
with open("/proc/kpageflags", "rb") as kf:
    for pfn in pfns:
        kf.seek(pfn * 8)
        large += struct.unpack("<Q", kf.read(8))[0] >> 15 & 3 != 0  # KPF_COMPOUND_HEAD, _TAIL
print(large * 4096)
EOF
	fi
	if [ "$b" != stock ]; then
		curl -fs "http://127.0.0.1:$probe_port/debug/gcprobe/" -o /dev/null
		curl -fs "http://127.0.0.1:$probe_port/debug/gcprobe/data.json" >"$out/data.json"
		if [ "$rss" = 1 ]; then
			curl -fs "http://127.0.0.1:$probe_port/metrics" >"$out/metrics"
		fi
	fi
	kill $caddy
	wait $caddy 2>/dev/null || true
	trap - EXIT
}

if [ "$rss" = 1 ]; then
	rm -rf "$dir/rss"
	echo "RSS: $rounds rounds of $duration per build; load at start: $(uptime)"
	order=(stock probe runtime)
	for r in $(seq 1 "$rounds"); do
		for i in 0 1 2; do
			b=${order[$(((r - 1 + i) % 3))]}
			echo "round $r: $b"
			serve "$b" "$duration" "$dir/rss/$r-$b"
		done
	done
	echo "load at end: $(uptime)"
	python3 - "$dir/rss" "$dir" <<'EOF'
import json, os, re, statistics, sys
root, cache = sys.argv[1], sys.argv[2]
builds = ["stock", "probe", "runtime"]
bins = {"stock": "caddy-stock", "probe": "caddy-probe", "runtime": "caddy"}
MiB = 1 << 20

def kib(text, key):
    m = re.search(r"^%s:\s+(\d+) kB" % key, text, re.M)
    return int(m.group(1)) * 1024 if m else 0

def figures(run, b):
    d = os.path.join(root, run)
    f = {}
    status = open(os.path.join(d, "status")).read()
    f["VmRSS"] = kib(status, "VmRSS")
    f["RssAnon"] = kib(status, "RssAnon")
    f["RssFile"] = kib(status, "RssFile")
    roll = open(os.path.join(d, "smaps_rollup")).read()
    f["anon"] = kib(roll, "Anonymous")
    f["file"] = kib(roll, "Rss") - f["anon"]
    # The binary's own mappings: its text and read-only data as paged in.
    exe = os.path.join(cache, bins[b])
    binrss, cur = 0, None
    for line in open(os.path.join(d, "smaps")):
        m = re.match(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$", line)
        if m:
            cur = m.group(1)
        elif line.startswith("Rss:") and cur == exe:
            binrss += int(line.split()[1]) * 1024
    f["binary"] = binrss
    fp = os.path.join(d, "folios")
    if os.path.exists(fp) and open(fp).read().strip():
        f["bin_large"] = int(open(fp).read())
    m = re.search(r"requests (\d+)", open(os.path.join(d, "load")).read())
    f["requests"] = int(m.group(1)) if m else 0
    # The last GC's line: live heap after it, goal, stacks, globals.
    gcs = [l for l in open(os.path.join(d, "caddy.err"), errors="replace") if re.match(r"^gc \d+ @", l)]
    f["gcs"] = len(gcs)
    if gcs:
        m = re.search(r"->(\d+) MB, (\d+) MB goal, (\d+) MB stacks, (\d+) MB globals", gcs[-1])
        if m:
            f["gc_live"], f["gc_goal"], f["gc_stacks"], f["gc_globals"] = (int(x) * MiB for x in m.groups())
    mp = os.path.join(d, "metrics")
    if os.path.exists(mp):
        for line in open(mp):
            m = re.match(r"^go_memstats_(\w+)_bytes(?:_total)? (\S+)$", line)
            if m:
                f["ms_" + m.group(1)] = float(m.group(2))
        f["runtime_mode"] = json.load(open(os.path.join(d, "data.json")))["runtime_mode"]
    return f

runs = {b: [] for b in builds}
for run in sorted(os.listdir(root), key=lambda r: int(r.split("-")[0])):
    b = run.split("-", 1)[1]
    runs[b].append((run, figures(run, b)))

cols = ["VmRSS", "anon", "file", "binary", "bin_large", "gc_live", "gc_goal", "gc_stacks", "gcs", "requests"]
ms = ["heap_inuse", "heap_idle", "heap_released", "stack_inuse", "mspan_inuse", "mcache_inuse", "buck_hash_sys", "gc_sys", "other_sys", "next_gc", "sys"]
def fmt(k, v):
    if v is None:
        return "-"
    if k in ("gcs", "requests"):
        return "%d" % v
    return "%.1f" % (v / MiB)
print("per round (MiB; gcs and requests are counts):")
print("%-12s %s" % ("run", " ".join("%9s" % c for c in cols)))
for b in builds:
    for run, f in runs[b]:
        print("%-12s %s" % (run, " ".join("%9s" % fmt(c, f.get(c)) for c in cols)))
print("go_memstats from /metrics (MiB):")
print("%-12s %s" % ("run", " ".join("%9s" % c[:9] for c in ms)))
for b in builds:
    for run, f in runs[b]:
        if "ms_sys" in f:
            print("%-12s %s" % (run, " ".join("%9s" % fmt(c, f.get("ms_" + c)) for c in ms)))
med = {}
for b in builds:
    med[b] = {}
    for c in cols + ["ms_" + c for c in ms]:
        vals = [f[c] for _, f in runs[b] if c in f]
        if vals:
            med[b][c] = statistics.median(vals)
print("medians (MiB):")
print("%-12s %s" % ("build", " ".join("%9s" % c for c in cols)))
for b in builds:
    print("%-12s %s" % (b, " ".join("%9s" % fmt(c, med[b].get(c)) for c in cols)))
print("%-12s %s" % ("", " ".join("%9s" % c[:9] for c in ms)))
for b in builds[1:]:
    print("%-12s %s" % (b, " ".join("%9s" % fmt(c, med[b].get("ms_" + c)) for c in ms)))
for a, b in (("stock", "probe"), ("stock", "runtime"), ("probe", "runtime")):
    print("median VmRSS %s - %s: %+.1f MiB (anon %+.1f, file %+.1f, binary %+.1f)" % (
        b, a, (med[b]["VmRSS"] - med[a]["VmRSS"]) / MiB, (med[b]["anon"] - med[a]["anon"]) / MiB,
        (med[b]["file"] - med[a]["file"]) / MiB, (med[b]["binary"] - med[a]["binary"]) / MiB))
bad = [run for b in ("probe", "runtime") for run, f in runs[b] if f.get("runtime_mode") != (b == "runtime")]
if bad:
    print("FAIL: runtime_mode is not what the build is in", " ".join(bad))
    sys.exit(1)
EOF
	exit
fi

out=$dir/run-$build
serve "$build" "$duration" "$out"
rss=$(awk '/^VmRSS:/ { print $2 }' "$out/status")
if [ "$build" = stock ]; then
	echo "RSS ${rss} KiB (stock: no probe, no page to check)"
	exit 0
fi
cp "$out/caddy.err" "$dir/caddy.err"
cp "$out/data.json" "$dir/data.json"

echo "RSS ${rss} KiB; top sites (class, registered, outstanding, suspect, dropped, resource, site):"
python3 - "$dir/data.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("GC cycles", d["gc"]["cycles"], "runtime mode", d["runtime_mode"])
for s in d["sites"][:10]:
    print(" ", s["verdict"], s["registered"], s["outstanding"], s["suspect"], s["dropped"], s.get("resource", ""), s["function"], "%s:%d" % (s["file"].rsplit("/", 2)[-1], s["line"]))
print("GC causes:")
for c in d["gc_cause"]["causes"]:
    print("  ", c["words"])
    if c.get("fix"):
        print("     fix:", c["fix"])
    for s in c["sites"]:
        print("     look at", s["site"], "(" + s["path"] + ")" if s.get("path") else "")
print("allocating lines over %.0fs:" % d["allocating_sites"]["window_seconds"])
for s in d["allocating_sites"]["allocating"][:6]:
    print("  %8.1f MiB/s %s %s" % (s["alloc_bytes_per_second"] / (1 << 20), s["site"], "(" + s["path"] + ")" if s.get("path") else ""))
EOF
echo "gcprobe Warn lines:"
grep -o 'level=WARN msg="gcprobe: [^"]*' "$dir/caddy.err" | cut -c1-160 | sort | uniq -c || true
fail=0
if ! python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["runtime_mode"] == (sys.argv[2] == "runtime") else 1)' "$dir/data.json" "$build"; then
	echo "FAIL: data.json's runtime_mode is not what BUILD=$build built"
	fail=1
fi
if grep -q '"msg":"WARN gcprobe' "$dir/caddy.err"; then
	echo "FAIL: a gcprobe Warn line went through Caddy's zap logger at another level"
	fail=1
fi
if grep -q 'site growing' "$dir/caddy.err"; then
	echo "FAIL: a site was logged growing on a server with no leak"
	fail=1
fi
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(s["file"].endswith("internal/filesystems/os.go") and s["registered"] > 100 for s in d["sites"]) else 1)' "$dir/data.json"; then
	echo "FAIL: Caddy's file opens are counted at its one-line wrapper, not at its callers"
	fail=1
fi
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(s["site"].startswith(("runtime.", "internal/runtime/")) for s in d["allocating_sites"]["allocating"] + d["allocating_sites"]["growing"]) else 1)' "$dir/data.json"; then
	echo "FAIL: a runtime frame is named as an allocating line"
	fail=1
fi
# Causes change state at most once a minute each: over the run, at most
# one line per started minute per detector.
minutes=$(( ($(echo "$duration" | tr -dc 0-9) + 59) / 60 ))
if grep -o 'detector=[a-z_]*' "$dir/caddy.err" | sort | uniq -c | awk -v m="$minutes" '$1 > m { bad = 1 } END { exit !bad }'; then
	echo "FAIL: a detector changed state more than once a minute"
	fail=1
fi
if [ "${PLANT:-}" = 1 ] && ! grep -q 'detector=live_heap_growth.*line=.*plant.go:11' "$dir/caddy.err"; then
	echo "FAIL: the planted leak was not named live-heap growth at plant.go:11"
	fail=1
fi
exit $fail
