#!/usr/bin/env bash
# Checks scripts/testenv.sh's build lock without building anything: a shell
# that finds the lock held says at once that it waits, for which lock and
# for whom, says so again while it waits, gives up after its timeout, and
# takes the lock once the holder is done. About 6 s.
#
#	bash scripts/testenv_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GCPROBE_TESTENV_DEFINE_ONLY=1 source scripts/testenv.sh

fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}
command -v flock >/dev/null 2>&1 || {
	echo "SKIP: flock not on PATH"
	exit 0
}
tmp=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT
lock=$tmp/build.lock

# The holder takes the lock as testenv.sh does and keeps it for 6 s.
(gcprobe_testenv_lock 9 "$lock" "the test's tool" >/dev/null && sleep 6) 9>>"$lock" &
holder=$!
for _ in $(seq 50); do
	[ -s "$lock" ] && break
	sleep 0.1
done
[ -s "$lock" ] || fail "the holder wrote no note into $lock"

# A shell that gives up after 3 s, saying so every second.
if out=$( (GCPROBE_TESTENV_LOCK_EVERY=1 gcprobe_testenv_lock 9 "$lock" "the test's tool" 3) 9>>"$lock"); then
	fail "took a lock that another shell holds:
$out"
fi
printf '%s\n' "$out"
for want in \
	"testenv: waiting for the lock $lock: pid $holder (" \
	"has been building the test's tool for " \
	"testenv: still waiting for the lock $lock (" \
	"testenv: gave up waiting for the lock $lock after "; do
	case $out in
	*"$want"*) ;;
	*) fail "the waiting shell did not say \"$want\"" ;;
	esac
done
[ "$(grep -c 'waiting for the lock' <<<"$out")" -ge 3 ] || fail "the waiting shell did not say so again while it waited"

# A shell without a timeout waits until the holder is done, then takes it.
out=$( (GCPROBE_TESTENV_LOCK_EVERY=1 gcprobe_testenv_lock 9 "$lock" "the test's tool") 9>>"$lock") ||
	fail "did not take the lock once it was free:
$out"
case $out in
*"testenv: got the lock $lock after waiting "*) ;;
*) fail "the waiting shell did not say it got the lock:
$out" ;;
esac
wait "$holder" || fail "the holder failed"
holder=
echo "ok  scripts/testenv_test.sh"
