# compare-lib.sh - setup shared by ucx-compare.sh and tcp-compare.sh
# (sourced; they set die, OUT, repo, CORE_SERVER and CORE_CLIENT first).

# need_tools TOOL...: each must be in PATH.
need_tools() {
	for tool in "$@"; do
		command -v "$tool" >/dev/null || die "$tool not found"
	done
}

# check_cores: CORE_SERVER and CORE_CLIENT exist on this machine.
check_cores() {
	local ncpu c
	ncpu=$(nproc)
	for c in "$CORE_SERVER" "$CORE_CLIENT"; do
		[ "$c" -lt "$ncpu" ] || die "core $c does not exist ($ncpu CPUs)"
	done
}

# apt_install PKG...: installs the Debian packages (sudo when not root),
# updating the package lists once if the first attempt fails; the log is
# $OUT/apt.log.
apt_install() {
	[ $# -gt 0 ] || return 0
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "# installing $* from Debian (apt-get)" >&2
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get install -y "$@" >"$OUT/apt.log" 2>&1 ||
		{ $sudo apt-get update >>"$OUT/apt.log" 2>&1 && $sudo apt-get install -y "$@" >>"$OUT/apt.log" 2>&1; } ||
		die "apt-get install $* failed (see $OUT/apt.log)"
}

# gxfer_binary: $OUT/gxfer, a copy of $GXFER_BIN when set, else a go build
# of the repository; exports GXFER_FROM (where it came from).
gxfer_binary() {
	if [ -n "${GXFER_BIN:-}" ]; then
		[ -x "$GXFER_BIN" ] || die "GXFER_BIN=$GXFER_BIN is not an executable"
		cp "$GXFER_BIN" "$OUT/gxfer"
		GXFER_FROM="$GXFER_BIN"
	else
		echo "# building gxfer" >&2
		(cd "$repo" && go build -o "$OUT/gxfer" ./cmd/gxfer) || die "go build failed"
		GXFER_FROM="go build of $repo at $(cd "$repo" && git describe --always --dirty 2>/dev/null || echo '?')"
	fi
	export GXFER_FROM
}
