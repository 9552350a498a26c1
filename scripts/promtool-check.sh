#!/usr/bin/env bash
#
# promtool-check.sh checks gcprobe's Prometheus alerting rules with promtool:
# `promtool check rules` on deploy/prometheus/*.rules.yml (syntax, PromQL,
# templates) and `promtool test rules` on deploy/prometheus/tests/*.yml (the
# unit tests that make every alert fire and not fire). It exits non-zero on
# the first failure.
#
# promtool is $GCPROBE_PROMTOOL, else the one on PATH; `source
# scripts/testenv.sh` installs it and sets the variable.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

promtool=${GCPROBE_PROMTOOL:-$(command -v promtool || true)}
if [ -z "$promtool" ] || [ ! -x "$promtool" ]; then
	echo "promtool-check: promtool not found: run \`source scripts/testenv.sh\` (installs Debian's prometheus package)" >&2
	exit 1
fi

shopt -s nullglob
rules=(deploy/prometheus/*.rules.yml)
tests=(deploy/prometheus/tests/*.yml)
if [ "${#rules[@]}" -eq 0 ] || [ "${#tests[@]}" -eq 0 ]; then
	echo "promtool-check: no rule files or no rule tests under deploy/prometheus/" >&2
	exit 1
fi

echo "promtool-check: $("$promtool" --version 2>&1 | sed -n 1p)"
"$promtool" check rules "${rules[@]}"
"$promtool" test rules "${tests[@]}"
echo "promtool-check: ok"
