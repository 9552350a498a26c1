#!/usr/bin/env bash
# version-moves.sh checks that requiring gcprobe moves no version of a host
# program's modules. A copy of the host's own module (Caddy's by default)
# is the main module: its build list (go list -m all) is recorded, then, in
# copies, one of its packages imports gcprobe's root package, or
# cmd/finalizercheck is added as a tool, both taken from this checkout, it
# is tidied and listed again: a module whose version rises fails the check,
# unless every module requiring the new version is one the host already
# selected at that version (its requirements enter the build list once
# gcprobe imports one of its packages: no requirement of gcprobe can
# change that), which is reported; modules added are listed. The work
# happens in bench/internal/versionmoves's test, under
# $GCPROBE_CACHE/version-moves (outside the repository; removed
# afterwards). It needs the module proxy; a few seconds with a warm module
# cache, under a minute cold.
#
#	bash scripts/version-moves.sh                       # Caddy v2.11.9
#	bash scripts/version-moves.sh MODULE@VERSION PACKAGE # another host
#
# PACKAGE is a package of the host's module, where the file that imports
# gcprobe goes, e.g. go.etcd.io/etcd/server/v3@v3.6.17
# go.etcd.io/etcd/server/v3/embed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
GCPROBE_CACHE="${GCPROBE_CACHE:-${HOME:-/tmp}/.cache/gcprobe}"
export GCPROBE_CACHE
if [ "$#" -ne 0 ] && [ "$#" -ne 2 ]; then
	echo "usage: $0 [MODULE@VERSION PACKAGE]" >&2
	exit 2
fi
if [ "$#" -eq 2 ]; then
	export GCPROBE_VERSION_MOVES_HOST="$1" GCPROBE_VERSION_MOVES_IMPORT="$2"
fi
mkdir -p "$GCPROBE_CACHE/version-moves"
start=$SECONDS
# -v: the modules added are the report, printed by the test's log.
GOWORK=off GOFLAGS= GCPROBE_VERSION_MOVES=1 GCPROBE_REPO="$repo" \
	go -C "$repo/bench" test -count=1 -timeout 20m -v -run '^TestVersionMoves$' ./internal/versionmoves/
echo "version-moves: no version raised by gcprobe ($((SECONDS - start)) s)"
