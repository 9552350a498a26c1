#!/usr/bin/env bash
#
# runtime-mode-tests.sh runs, built in the runtime build mode
# (finalizercheck -runtime), the tests that say the mode changes nothing:
# the runtime's own finalizer and cleanup tests with the hooks live (a
# checking hook table, added to the runtime's tests only, throws if a
# registration's token does not come back exactly once), the os and net
# tests that open, close and drop files and connections, and the ledger's
# and the leak report's own runtime-mode tests with -race. The patched standard library is built
# once and then cached by the go command. With --runtime-only it runs the
# runtime's tests alone (CI's run on a second toolchain).
set -euo pipefail
only_runtime=false
[ "${1:-}" = --runtime-only ] && only_runtime=true
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
goroot=$(go env GOROOT)
cat >"$work/tests.json" <<JSON
{"Replace": {
	"$goroot/src/runtime/gcprobe_hooks_check_test.go": "$root/cmd/finalizercheck/rtpatch/hooks_check_test.go.tmpl",
	"$goroot/src/runtime/gcprobe_hooks_live_test.go": "$root/cmd/finalizercheck/rtpatch/hooks_check_x_test.go.tmpl"
}}
JSON
flags=$(cd cmd/finalizercheck && GOWORK=off go run . -runtime "$work/rt" -overlay "$work/tests.json" | tail -n 1)
echo "runtime-mode-tests: $flags"

echo "== the runtime's finalizer and cleanup tests, the hooks live and checking"
go test -count=1 $flags -run 'Finalizer|Cleanup|Gcprobe' runtime
$only_runtime && exit 0

echo "== os and net tests that open, close and drop files and connections"
go test -count=1 -short $flags -run 'Close|Open|File|Root|Pipe|Process' os
go test -count=1 -short $flags -run 'Close|Dial|Accept|Listen|Conn' net

echo "== the ledger's and the leak report's runtime-mode tests, with -race"
go test -count=1 -race $flags -run 'RuntimeMode' ./finalizerwatch/ ./tracing/ .
