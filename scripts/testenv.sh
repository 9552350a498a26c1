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
		gcprobe_testenv_log "prometheus/promtool not on PATH: installing Debian's prometheus package"
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
		gcprobe_testenv_log "no C compiler ($(go env CC)) on PATH: installing Debian's gcc package"
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
	# reused; a cold one takes a few minutes. The end-to-end tests of
	# tracing and exporters/otlp read GCPROBE_OTELCOL and skip without it.
	local version=0.161.0
	local dir="$GCPROBE_CACHE/otelcol-v$version"
	local bin="$dir/otelcol-gcprobe"
	if [ ! -x "$bin" ]; then
		gcprobe_testenv_log "building the OpenTelemetry Collector v$version into $dir (a few minutes)"
		if ! command -v go >/dev/null 2>&1; then
			gcprobe_testenv_log "go not on PATH: cannot build the collector"
			return 1
		fi
		if ! mkdir -p "$dir/build"; then
			gcprobe_testenv_log "cannot create $dir"
			return 1
		fi
		# The builder is a Go program of its own; it lives beside its
		# output so that one version never builds with another's builder.
		if [ ! -x "$dir/builder" ] &&
			! GOBIN="$dir" go install "go.opentelemetry.io/collector/cmd/builder@v$version"; then
			gcprobe_testenv_log "go install of the collector builder v$version failed"
			return 1
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
			return 1
		fi
		if ! "$dir/builder" --config="$dir/manifest.yaml"; then
			gcprobe_testenv_log "the collector builder failed; see its output above"
			return 1
		fi
		# Copy then rename, so that a build interrupted half-way never
		# leaves a truncated binary that the check above would reuse.
		if ! cp "$dir/build/otelcol-gcprobe" "$bin.tmp" || ! mv "$bin.tmp" "$bin"; then
			gcprobe_testenv_log "cannot install the built collector at $bin"
			return 1
		fi
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
	# cores, 3.6 + 13.7 min measured on 2 cores shared with other builds,
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
		# The builds run in a subshell holding a lock, so that two shells
		# sourcing this script at once (CI and a developer, two engineers)
		# build once: the second waits, then finds the binaries. The
		# subshell also keeps cd-free go -C calls and its variables away
		# from the caller's shell; exit leaves the subshell only.
		(
			if command -v flock >/dev/null 2>&1 && ! flock 9; then
				gcprobe_testenv_log "cannot lock $bin/../build.lock"
				exit 1
			fi
			src="$GCPROBE_CACHE/envtest-src"
			# The scratch modules must not see a go.work of an enclosing
			# folder, nor the caller's GOFLAGS (e.g. -mod=vendor). Builds
			# are trimmed and stripped: smaller binaries, less to link.
			goenv=(env GOWORK=off GOFLAGS=-buildvcs=false)

			if [ ! -x "$bin/etcd" ]; then
				t=$SECONDS
				gcprobe_testenv_log "building etcd v$etcd_version into $bin (~30 s)"
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
				gcprobe_testenv_log "building kube-apiserver v$kube_version into $bin (~7 min on 2 idle cores)"
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
		) 9>"$bin/../build.lock" || return 1
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
		gcprobe_testenv_log "chromium not on PATH: installing Debian's chromium package (about a minute)"
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
	gcprobe_testenv_log "GCPROBE_CHROMIUM=$bin ($(gcprobe_testenv_first_line "$bin" --version))"
	return 0
}

# gcprobe_testenv_main runs every provider. In CI (CI=true) a tool that could
# not be provided fails the run, because CI must never skip those tests;
# elsewhere it is a warning and the tests skip.
gcprobe_testenv_main() {
	local failed=""
	if ! mkdir -p "$GCPROBE_CACHE"; then
		gcprobe_testenv_log "cannot create GCPROBE_CACHE=$GCPROBE_CACHE"
		failed="$failed cache"
	fi
	gcprobe_testenv_log "GCPROBE_CACHE=$GCPROBE_CACHE"
	gcprobe_testenv_prometheus || failed="$failed prometheus"
	gcprobe_testenv_cc || failed="$failed cc"
	gcprobe_testenv_otelcol || failed="$failed otelcol"
	gcprobe_testenv_envtest || failed="$failed envtest"
	gcprobe_testenv_chromium || failed="$failed chromium"
	if [ -n "$failed" ]; then
		gcprobe_testenv_log "not provided:$failed"
		if [ "${CI:-}" = "true" ]; then
			gcprobe_testenv_log "CI=true: CI must not skip the tests that need them; failing"
			return 1
		fi
	fi
	return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	# Run directly, the exports die with this process: still useful to
	# install, but say how to get the variables.
	gcprobe_testenv_main || exit 1
	gcprobe_testenv_log "run as a script: source it to export the variables into your shell"
else
	gcprobe_testenv_main
fi
