#!/bin/sh
# Fetch Debian bookworm-backports' linux-libc-dev (kernel 6.12 uAPI headers,
# with include/drm/habanalabs_accel.h) and unpack it, without installing it
# and without touching the system's apt configuration: apt reads a private
# sources list and keeps its lists and cache under the cache directory.
#
# Usage: fetch-new-header.sh [CACHE_DIR]
# (default: $GXFER_UAPI_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/gxfer-uapi)
#
# Prints the directory to pass as GXFER_UAPI_NEW_HEADER_DIR (it contains
# usr/include/drm/habanalabs_accel.h). Idempotent: a complete earlier unpack
# is reused without network access. Exits non-zero on any failure.
set -eu

cache=${1:-${GXFER_UAPI_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/gxfer-uapi}}
root="$cache/root"
hdr="$root/usr/include/drm/habanalabs_accel.h"

if [ -f "$root/.complete" ] && [ -f "$hdr" ]; then
	echo "$root"
	exit 0
fi

mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/deb"
cat >"$cache/apt/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
EOF
aptopts="-o Dir::Etc::SourceList=$cache/apt/sources.list -o Dir::Etc::SourceParts=/dev/null \
	-o Dir::State::Lists=$cache/apt/lists -o Dir::Cache=$cache/apt/cache \
	-o APT::Sandbox::User=root"

# shellcheck disable=SC2086 # aptopts is a list of options
apt-get -qq $aptopts update >&2
rm -f "$cache"/deb/*.deb
# shellcheck disable=SC2086
(cd "$cache/deb" && apt-get -qq $aptopts download linux-libc-dev/bookworm-backports >&2)
deb=$(ls "$cache"/deb/linux-libc-dev_*.deb)

rm -rf "$root.tmp"
mkdir -p "$root.tmp"
dpkg-deb -x "$deb" "$root.tmp"
if [ ! -f "$root.tmp/usr/include/drm/habanalabs_accel.h" ]; then
	echo "fetch-new-header: $deb has no usr/include/drm/habanalabs_accel.h" >&2
	exit 1
fi
dpkg-deb -f "$deb" Version >"$root.tmp/.complete"
rm -rf "$root"
mv "$root.tmp" "$root"
echo "fetch-new-header: unpacked linux-libc-dev $(cat "$root/.complete") into $root" >&2
echo "$root"
