# shellcheck shell=bash
#
# testenv.sh makes the servers and tools that gcprobe's tests run against
# available on this machine and exports their paths. Source it, don't run it:
#
#	source scripts/testenv.sh
#
# .ci/run sources it from a `set -euo pipefail` shell, so everything here
# lives in functions that return a status instead of exiting, guards every
# command that may fail, and leaves the caller's shell options alone. A tool
# that cannot be provided is reported and its variable left unset; the Go
# tests that need it then skip with a message pointing back here.
#
# Exports:
#
#	GCPROBE_CACHE       build outputs kept outside the repository, keyed by
#	                    version (default $HOME/.cache/gcprobe)
#	GCPROBE_PROMETHEUS  path of the prometheus server binary
#	GCPROBE_PROMTOOL    path of promtool
#	GCPROBE_OTELCOL     path of an OpenTelemetry Collector built for the tests
#	KUBEBUILDER_ASSETS  folder with etcd, kube-apiserver and kubectl (envtest)
#	GCPROBE_CHROMIUM    path of a headless-capable Chromium (Debian's chromium),
#	                    for the live page's browser test (browsertest)
#
# Each tool has its own gcprobe_testenv_* function; gcprobe_testenv_main runs
# them in order. To add a tool, write a function next to the others and
# call it from gcprobe_testenv_main.

# Build outputs (collector, envtest binaries) go here, never into the repo.
GCPROBE_CACHE="${GCPROBE_CACHE:-${HOME:-/tmp}/.cache/gcprobe}"
export GCPROBE_CACHE

# gcprobe_testenv_log prints one line prefixed so that it stands out in CI
# logs among go test's output.
gcprobe_testenv_log() {
	printf 'testenv: %s\n' "$*"
}

# gcprobe_testenv_first_line prints the first line of a command's combined
# output. The output is captured before it is cut so that no pipe can hand
# the command a SIGPIPE, which pipefail would turn into a failure.
gcprobe_testenv_first_line() {
	local out
	out=$("$@" 2>&1) || true
	printf '%s\n' "${out%%$'\n'*}"
}

# gcprobe_testenv_step says what is about to be built or installed, which
# tests need it, and how long it takes on a cold machine, so that a long
# silence is never a mystery: gcprobe_testenv_step WHAT NEEDED_BY COLD.
gcprobe_testenv_step() {
	gcprobe_testenv_log "$1; needed by $2; cold: $3"
}

# gcprobe_testenv_lock takes the lock on FILE, already open (for append,
# so that opening it keeps the holder's note) on file descriptor FD, for
# building WHAT: gcprobe_testenv_lock FD FILE WHAT [TIMEOUT]. Two shells
# sourcing this script at once (CI and a developer, two engineers) then
# build once: the second waits, then finds the binaries. A shell that
# waits says so at once, with who holds the lock (the note its holder
# wrote into FILE), and again every GCPROBE_TESTENV_LOCK_EVERY seconds
# (30) while it waits. With TIMEOUT (seconds) it gives up after that long
# and returns 1; without, it waits as long as the holder builds. Without
# flock it builds unlocked, and says so.
gcprobe_testenv_lock() {
	local fd=$1 file=$2 what=$3 timeout=${4:-0}
	local every=${GCPROBE_TESTENV_LOCK_EVERY:-30} start=$SECONDS slice
	if ! command -v flock >/dev/null 2>&1; then
		gcprobe_testenv_log "flock not on PATH: building $what without a lock (two shells at once would both build)"
		return 0
	fi
	if ! flock -n "$fd"; then
		gcprobe_testenv_log "waiting for the lock $file: $(gcprobe_testenv_lock_holder "$file"); saying so every $every s"
		while :; do
			slice=$every
			if [ "$timeout" -gt 0 ] && [ $((timeout - (SECONDS - start))) -lt "$slice" ]; then
				slice=$((timeout - (SECONDS - start)))
			fi
			if [ "$slice" -gt 0 ] && flock -w "$slice" "$fd"; then
				break
			fi
			if [ "$timeout" -gt 0 ] && [ $((SECONDS - start)) -ge "$timeout" ]; then
				gcprobe_testenv_log "gave up waiting for the lock $file after $((SECONDS - start)) s: $(gcprobe_testenv_lock_holder "$file")"
				return 1
			fi
			gcprobe_testenv_log "still waiting for the lock $file ($((SECONDS - start)) s): $(gcprobe_testenv_lock_holder "$file")"
		done
		gcprobe_testenv_log "got the lock $file after waiting $((SECONDS - start)) s"
	fi
	# The note for the next shell that waits: this (sub)shell's pid, when,
	# what, and the command that sourced this script.
	local cmd
	cmd=$(tr '\0' ' ' <"/proc/$$/cmdline" 2>/dev/null) || cmd=$(ps -o args= -p "$$" 2>/dev/null) || cmd=
	printf 'pid %s\nsince %s\nwhat %s\ncmd %s\n' "${BASHPID:-$$}" "$(date +%s)" "$what" "${cmd% }" >"$file" 2>/dev/null || true
}

# gcprobe_testenv_lock_holder describes the holder of the lock FILE from
# the note gcprobe_testenv_lock wrote there.
gcprobe_testenv_lock_holder() {
	local k v pid="" since="" what="" cmd=""
	while IFS=' ' read -r k v; do
		case $k in
		pid) pid=$v ;;
		since) since=$v ;;
		what) what=$v ;;
		cmd) cmd=$v ;;
		esac
	done <"$1" 2>/dev/null
	if [ -z "$pid" ]; then
		printf 'another shell holds it and left no note (a testenv.sh older than the note)'
		return
	fi
	if ! kill -0 "$pid" 2>/dev/null && [ ! -d "/proc/$pid" ]; then
		printf 'its note names pid %s (%s), no longer running; a process it started may hold it still' "$pid" "$cmd"
		return
	fi
	printf 'pid %s (%s) has been building %s for %s s' "$pid" "$cmd" "$what" "$(($(date +%s) - ${since:-0}))"
}

# gcprobe_testenv_apt_install installs Debian packages. It needs root; other
# engineers (or the package manager's own timers) may hold the dpkg lock, so
# it waits for the lock and retries the index update a few times.
gcprobe_testenv_apt_install() {
	if [ "$(id -u)" -ne 0 ]; then
		gcprobe_testenv_log "not root: cannot install $*; install it yourself (apt-get install $*) and source this script again"
		return 1
	fi
	local try
	for try in 1 2 3; do
		if DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 update; then
			break
		fi
		if [ "$try" -eq 3 ]; then
			gcprobe_testenv_log "apt-get update failed 3 times"
			return 1
		fi
		sleep 5
	done
	DEBIAN_FRONTEND=noninteractive apt-get install -q -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 "$@"
}

# gcprobe_testenv_prometheus provides prometheus and promtool from Debian's
# prometheus package (2.42 on Debian 12). The package starts no daemon on
# these machines; tests start their own server on 127.0.0.1 when they need
# one. promtool lints exposition and checks and unit-tests alerting rules.
gcprobe_testenv_prometheus() {
	local prom tool
	prom=$(command -v prometheus || true)
	tool=$(command -v promtool || true)
	if [ -z "$prom" ] || [ -z "$tool" ]; then
		gcprobe_testenv_step "prometheus/promtool not on PATH: installing Debian's prometheus package" \
			"deploy's alerting-rule tests and examples/leakdemo's Prometheus tests (GCPROBE_PROMTOOL, GCPROBE_PROMETHEUS)" \
			"about a minute (the package index and 22 MB)"
		if ! gcprobe_testenv_apt_install prometheus; then
			gcprobe_testenv_log "could not install prometheus: tests that need promtool or prometheus cannot run"
			return 1
		fi
		prom=$(command -v prometheus || true)
		tool=$(command -v promtool || true)
	fi
	if [ -z "$prom" ] || [ -z "$tool" ]; then
		gcprobe_testenv_log "prometheus package installed but prometheus/promtool still not on PATH"
		return 1
	fi
	GCPROBE_PROMETHEUS=$prom
	GCPROBE_PROMTOOL=$tool
	export GCPROBE_PROMETHEUS GCPROBE_PROMTOOL
	gcprobe_testenv_log "GCPROBE_PROMETHEUS=$prom ($(gcprobe_testenv_first_line "$prom" --version))"
	gcprobe_testenv_log "GCPROBE_PROMTOOL=$tool ($(gcprobe_testenv_first_line "$tool" --version))"
}

# gcprobe_testenv_cc provides a C compiler, so that go builds with cgo and
# the tests of stack capture and registration across cgo callbacks run
# (internal/cgocall; without a compiler the go command turns cgo off and
# they skip).
gcprobe_testenv_cc() {
	local cc
	cc=$(command -v "$(go env CC)" || true)
	if [ -z "$cc" ]; then
		gcprobe_testenv_step "no C compiler ($(go env CC)) on PATH: installing Debian's gcc package" \
			"the cgo callback tests of stackcapture and finalizerwatch (internal/cgocall)" "about a minute"
		if ! gcprobe_testenv_apt_install gcc libc6-dev; then
			gcprobe_testenv_log "could not install gcc: the cgo callback tests cannot run"
			return 1
		fi
		cc=$(command -v "$(go env CC)" || true)
	fi
	if [ -z "$cc" ]; then
		gcprobe_testenv_log "gcc installed but $(go env CC) still not on PATH"
		return 1
	fi
	gcprobe_testenv_log "C compiler for cgo: $cc ($(gcprobe_testenv_first_line "$cc" --version))"
}

# gcprobe_testenv_otelcol provides the OpenTelemetry Collector.
gcprobe_testenv_otelcol() {
	# Builds a collector with the OTLP receiver, the debug exporter and the
	# contrib file exporter using the collector builder (nothing serves a
	# prebuilt collector here, and contrib releases after v0.161.0 do not
	# build), into "$GCPROBE_CACHE/otelcol-v0.161.0/". A finished build is
	# reused (0 s). A cold one: the builder ~0.5 min, the collector's
	# modules ~0.5 min, its compile 3.5 min on 2 cores shared with other
	# builds (4.5 min in all). exporters/otlp's OTLP end-to-end tests read
	# GCPROBE_OTELCOL and skip without it.
	local version=0.161.0
	local dir="$GCPROBE_CACHE/otelcol-v$version"
	local bin="$dir/otelcol-gcprobe"
	if [ ! -x "$bin" ]; then
		if ! command -v go >/dev/null 2>&1; then
			gcprobe_testenv_log "go not on PATH: cannot build the collector"
			return 1
		fi
		if ! mkdir -p "$dir/build"; then
			gcprobe_testenv_log "cannot create $dir"
			return 1
		fi
		gcprobe_testenv_step "building the OpenTelemetry Collector v$version into $dir" \
			"exporters/otlp's OTLP end-to-end tests, TestCollectorEndToEnd and TestCollectorKilledAndRestarted (GCPROBE_OTELCOL)" \
			"~5 min on 2 cores (builder, modules, compile), then reused"
		# In a subshell holding the lock: two shells build into one
		# build directory only one at a time (see gcprobe_testenv_lock).
		(
			gcprobe_testenv_lock 9 "$dir/build.lock" "the OpenTelemetry Collector v$version" || exit 1
			if [ -x "$bin" ]; then
				gcprobe_testenv_log "the collector was built meanwhile by the shell this one waited for"
				exit 0
			fi
			# The builder is a Go program of its own; it lives beside its
			# output so that one version never builds with another's
			# builder.
			if [ ! -x "$dir/builder" ]; then
				gcprobe_testenv_log "installing the collector builder v$version (~0.5 min)"
				if ! GOBIN="$dir" go install "go.opentelemetry.io/collector/cmd/builder@v$version"; then
					gcprobe_testenv_log "go install of the collector builder v$version failed"
					exit 1
				fi
			fi
			if ! cat >"$dir/manifest.yaml" <<EOF_MANIFEST
dist:
  name: otelcol-gcprobe
  description: OpenTelemetry Collector for gcprobe's end-to-end tests
  version: $version
  output_path: $dir/build
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$version
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$version
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v$version
EOF_MANIFEST
			then
				gcprobe_testenv_log "cannot write $dir/manifest.yaml"
				exit 1
			fi
			t=$SECONDS
			gcprobe_testenv_log "the collector builder: its modules, then its compile (~4 min)"
			if ! "$dir/builder" --config="$dir/manifest.yaml"; then
				gcprobe_testenv_log "the collector builder failed; see its output above"
				exit 1
			fi
			# Copy then rename, so that a build interrupted half-way
			# never leaves a truncated binary that the check above
			# would reuse.
			if ! cp "$dir/build/otelcol-gcprobe" "$bin.tmp" || ! mv "$bin.tmp" "$bin"; then
				gcprobe_testenv_log "cannot install the built collector at $bin"
				exit 1
			fi
			gcprobe_testenv_log "the collector built in $((SECONDS - t)) s"
		) 9>>"$dir/build.lock" || return 1
	fi
	GCPROBE_OTELCOL=$bin
	export GCPROBE_OTELCOL
	gcprobe_testenv_log "GCPROBE_OTELCOL=$bin ($(gcprobe_testenv_first_line "$bin" --version))"
}

# gcprobe_testenv_envtest provides the envtest control plane.
gcprobe_testenv_envtest() {
	# Builds the envtest control plane from source, since setup-envtest
	# cannot download here: etcd and kube-apiserver, each in a scratch
	# module of its own under "$GCPROBE_CACHE/envtest-src/", into
	# "$GCPROBE_CACHE/envtest-<kube version>/bin/", next to a link to the
	# image's kubectl; then exports KUBEBUILDER_ASSETS with that folder.
	# Binaries already there are reused: a warm run takes 0.1 s. A cold
	# run compiles ~0.5 min (etcd) + ~7 min (kube-apiserver) on 2 idle
	# cores; on 2 cores shared with other builds 3.6 + 13.7 min were
	# measured once, 2.6 + 31 min another time (load average 8 to 16);
	# plus the first download of the modules (a few hundred MB). The
	# envtest-based tests of k8sfinalizers and examples/operator read
	# KUBEBUILDER_ASSETS and skip without it.
	local etcd_version=3.7.3
	local kube_version=1.37.2
	local bin="$GCPROBE_CACHE/envtest-$kube_version/bin"
	local t0=$SECONDS
	if ! command -v go >/dev/null 2>&1; then
		gcprobe_testenv_log "go not on PATH: cannot build the envtest control plane"
		return 1
	fi
	if ! mkdir -p "$bin" "$GCPROBE_CACHE/envtest-src"; then
		gcprobe_testenv_log "cannot create $bin or $GCPROBE_CACHE/envtest-src"
		return 1
	fi

	if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/kube-apiserver" ]; then
		gcprobe_testenv_step "building the envtest control plane (etcd v$etcd_version, kube-apiserver v$kube_version) into $bin" \
			"the tests against a real API server: examples/operator's TestE2E and k8sfinalizers' TestEnvtestStuckFinalizer (KUBEBUILDER_ASSETS)" \
			"~8 min on 2 idle cores, 15-35 min on busy ones, then reused"
		# The builds run in a subshell holding a lock (gcprobe_testenv_lock:
		# two shells build once, the second says that it waits and for
		# whom). The subshell also keeps cd-free go -C calls and its
		# variables away from the caller's shell; exit leaves the
		# subshell only.
		(
			gcprobe_testenv_lock 9 "$GCPROBE_CACHE/envtest-$kube_version/build.lock" "etcd v$etcd_version and kube-apiserver v$kube_version" || exit 1
			if [ -x "$bin/etcd" ] && [ -x "$bin/kube-apiserver" ]; then
				gcprobe_testenv_log "etcd and kube-apiserver were built meanwhile by the shell this one waited for"
				exit 0
			fi
			src="$GCPROBE_CACHE/envtest-src"
			# The scratch modules must not see a go.work of an enclosing
			# folder, nor the caller's GOFLAGS (e.g. -mod=vendor). Builds
			# are trimmed and stripped: smaller binaries, less to link.
			goenv=(env GOWORK=off GOFLAGS=-buildvcs=false)

			if [ ! -x "$bin/etcd" ]; then
				t=$SECONDS
				gcprobe_testenv_log "building etcd v$etcd_version into $bin (its modules, then its compile: ~0.5 min on 2 idle cores, 2.6 min measured on busy ones)"
				edir="$src/etcd-$etcd_version"
				# etcd's server module has replace directives, so go
				# install refuses it; a scratch module requiring it builds.
				if ! mkdir -p "$edir" ||
					! { [ -f "$edir/go.mod" ] || "${goenv[@]}" go -C "$edir" mod init gcprobe.invalid/envtest-etcd; } ||
					! "${goenv[@]}" go -C "$edir" get "go.etcd.io/etcd/server/v3@v$etcd_version" ||
					! "${goenv[@]}" go -C "$edir" build -trimpath -ldflags="-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3 ||
					! mv "$bin/etcd.tmp" "$bin/etcd"; then
					rm -f "$bin/etcd.tmp"
					gcprobe_testenv_log "building etcd v$etcd_version failed; see the output above"
					exit 1
				fi
				gcprobe_testenv_log "etcd built in $((SECONDS - t)) s"
			fi

			if [ ! -x "$bin/kube-apiserver" ]; then
				t=$SECONDS
				gcprobe_testenv_log "building kube-apiserver v$kube_version into $bin (its modules, then its compile: ~7 min on 2 idle cores, 13-31 min measured on busy ones; go build prints nothing meanwhile)"
				kdir="$src/kube-apiserver-$kube_version"
				if ! mkdir -p "$kdir" ||
					! { [ -f "$kdir/go.mod" ] || "${goenv[@]}" go -C "$kdir" mod init gcprobe.invalid/envtest-kube-apiserver; }; then
					gcprobe_testenv_log "cannot create the scratch module $kdir"
					exit 1
				fi
				# k8s.io/kubernetes requires its staging modules at v0.0.0
				# and replaces them with ./staging/...: a module requiring
				# it must point each at its published version, v0.x.y for
				# Kubernetes 1.x.y.
				kmod=$("${goenv[@]}" go -C "$kdir" mod download -json "k8s.io/kubernetes@v$kube_version" |
					sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
				if [ -z "$kmod" ] || [ ! -f "$kmod" ]; then
					gcprobe_testenv_log "cannot download k8s.io/kubernetes@v$kube_version's go.mod"
					exit 1
				fi
				replaces=()
				while IFS= read -r m; do
					replaces+=("-replace=$m=$m@v0.${kube_version#1.}")
				done < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*$|\1|p' "$kmod")
				if [ "${#replaces[@]}" -eq 0 ]; then
					gcprobe_testenv_log "found no staging replace directives in $kmod"
					exit 1
				fi
				# The -X flags give the binary its release version (what
				# /version reports), as release builds do.
				vpkg=k8s.io/component-base/version
				minor=${kube_version#*.}
				ldflags="-s -w -X $vpkg.gitVersion=v$kube_version -X $vpkg.gitMajor=${kube_version%%.*}"
				ldflags="$ldflags -X $vpkg.gitMinor=${minor%%.*} -X $vpkg.gitTreeState=clean"
				if ! "${goenv[@]}" go -C "$kdir" mod edit "${replaces[@]}" ||
					! "${goenv[@]}" go -C "$kdir" get "k8s.io/kubernetes/cmd/kube-apiserver@v$kube_version" ||
					! "${goenv[@]}" go -C "$kdir" build -trimpath -ldflags="$ldflags" \
						-o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver ||
					! mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"; then
					rm -f "$bin/kube-apiserver.tmp"
					gcprobe_testenv_log "building kube-apiserver v$kube_version failed; see the output above"
					exit 1
				fi
				gcprobe_testenv_log "kube-apiserver built in $((SECONDS - t)) s"
			fi
		) 9>>"$GCPROBE_CACHE/envtest-$kube_version/build.lock" || return 1
	fi

	# envtest looks for kubectl in the same folder. The image's kubectl is
	# linked, not copied, and re-linked every time in case it moved.
	local kubectl
	kubectl=$(command -v kubectl || true)
	if [ -n "$kubectl" ]; then
		if ! ln -sfn "$kubectl" "$bin/kubectl"; then
			gcprobe_testenv_log "cannot link $kubectl into $bin"
			return 1
		fi
	else
		gcprobe_testenv_log "kubectl not on PATH: envtest starts without it, but ControlPlane.KubeCtl will not work"
	fi

	KUBEBUILDER_ASSETS=$bin
	export KUBEBUILDER_ASSETS
	gcprobe_testenv_log "KUBEBUILDER_ASSETS=$bin (etcd v$etcd_version, kube-apiserver v$kube_version; ready in $((SECONDS - t0)) s)"
}

# gcprobe_testenv_chromium provides Chromium from Debian's chromium package
# (installed once; apt keeps it), for browsertest, which drives the live
# page (/debug/gcprobe/) in headless Chromium over the DevTools protocol.
# As root the test passes --no-sandbox itself.
gcprobe_testenv_chromium() {
	local bin="${GCPROBE_CHROMIUM:-}"
	if [ -n "$bin" ] && [ -x "$bin" ]; then
		export GCPROBE_CHROMIUM="$bin"
		return 0
	fi
	bin=$(command -v chromium || true)
	if [ -z "$bin" ]; then
		gcprobe_testenv_step "chromium not on PATH: installing Debian's chromium package" \
			"browsertest, the live page in headless Chromium (GCPROBE_CHROMIUM)" "about a minute"
		if ! gcprobe_testenv_apt_install chromium; then
			gcprobe_testenv_log "could not install chromium: the live page's browser test cannot run"
			return 1
		fi
		bin=$(command -v chromium || true)
		if [ -z "$bin" ]; then
			gcprobe_testenv_log "chromium installed but not on PATH"
			return 1
		fi
	fi
	export GCPROBE_CHROMIUM="$bin"
	# Debian's launcher script may complain on standard error before the
	# version line: print the version line.
	local version
	version=$("$bin" --version 2>/dev/null) || true
	gcprobe_testenv_log "GCPROBE_CHROMIUM=$bin (${version%%$'\n'*})"
	return 0
}

# gcprobe_testenv_main runs every provider, or, given tool names
# (prometheus cc otelcol envtest chromium), those alone, in that order: .ci/run
# builds envtest in the background meanwhile. In CI (CI=true) a tool that could
# not be provided fails the run, because CI must never skip those tests;
# elsewhere it is a warning and the tests skip.
gcprobe_testenv_main() {
	local failed="" tool tools=("$@")
	[ "${#tools[@]}" -gt 0 ] || tools=(prometheus cc otelcol envtest chromium)
	if ! mkdir -p "$GCPROBE_CACHE"; then
		gcprobe_testenv_log "cannot create GCPROBE_CACHE=$GCPROBE_CACHE"
		failed="$failed cache"
	fi
	gcprobe_testenv_log "GCPROBE_CACHE=$GCPROBE_CACHE"
	for tool in "${tools[@]}"; do
		case $tool in
		prometheus | cc | otelcol | envtest | chromium)
			"gcprobe_testenv_$tool" || failed="$failed $tool"
			;;
		*)
			gcprobe_testenv_log "no tool named $tool (prometheus, cc, otelcol, envtest, chromium)"
			failed="$failed $tool"
			;;
		esac
	done
	if [ -n "$failed" ]; then
		gcprobe_testenv_log "not provided:$failed"
		if [ "${CI:-}" = "true" ]; then
			gcprobe_testenv_log "CI=true: CI must not skip the tests that need them; failing"
			return 1
		fi
	fi
	return 0
}

if [ -n "${GCPROBE_TESTENV_DEFINE_ONLY:-}" ]; then
	# Only the functions, for scripts/testenv_test.sh: nothing is built.
	:
elif [ "${BASH_SOURCE[0]}" = "$0" ]; then
	# Run directly, the exports die with this process: still useful to
	# install, but say how to get the variables.
	gcprobe_testenv_main || exit 1
	gcprobe_testenv_log "run as a script: source it to export the variables into your shell"
else
	gcprobe_testenv_main
fi
