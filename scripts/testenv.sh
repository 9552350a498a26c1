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
#
# Each tool has its own gcprobe_testenv_* function; gcprobe_testenv_main runs
# them in order. To add a tool, write a function next to the placeholders
# below and call it from gcprobe_testenv_main.

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

# gcprobe_testenv_otelcol is the place for the OpenTelemetry Collector.
#
# TODO(otlp owner): build it with the collector builder (see
# shared/RECIPES.md) into "$GCPROBE_CACHE/otelcol-<version>/", reuse an
# existing build, and export GCPROBE_OTELCOL with its path.
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

# gcprobe_testenv_envtest is the place for the envtest control plane.
#
# TODO(controller-runtime owner): build etcd and kube-apiserver (see
# shared/RECIPES.md) into "$GCPROBE_CACHE/envtest-<version>/", link kubectl
# there, reuse an existing build, and export KUBEBUILDER_ASSETS.
gcprobe_testenv_envtest() {
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
	gcprobe_testenv_otelcol || failed="$failed otelcol"
	gcprobe_testenv_envtest || failed="$failed envtest"
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
