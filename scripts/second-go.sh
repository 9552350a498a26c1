#!/usr/bin/env bash
#
# second-go.sh VERSION prints the bin directory of Go toolchain VERSION
# (e.g. go1.27.3) installed outside the module cache, under
# ${XDG_CACHE_HOME:-$HOME/.cache}/gcprobe/, fetching it once through the
# module proxy (GOTOOLCHAIN). The runtime build mode cannot patch a
# toolchain that lives in the module cache (the go command overlays no file
# beneath GOMODCACHE), so its tests on a second version use this copy.
set -euo pipefail
version=${1:?usage: second-go.sh go1.N.M}
dest=${XDG_CACHE_HOME:-$HOME/.cache}/gcprobe/$version
if [ ! -x "$dest/bin/go" ]; then
	src=$(cd / && GOTOOLCHAIN=$version go env GOROOT)
	rm -rf "$dest.tmp"
	mkdir -p "$(dirname "$dest")"
	cp -r "$src" "$dest.tmp"
	chmod -R u+w "$dest.tmp"
	mv "$dest.tmp" "$dest"
fi
"$dest/bin/go" version >&2
echo "$dest/bin"
