# SPDX-License-Identifier: Apache-2.0
# Sourced by the tests of live statistics (test_live.sh,
# test_top_neighbours.sh) after they set $test_name: the programs they
# drive (cupool, cupool-top, tests/helpers/live_alloc), a private
# directory $tmp (mode 0700) whose pages/ is CUPOOL_LIVE_DIR, so that
# they see the pages of their own processes only, wherever other
# processes publish theirs; $pids, the background processes that the
# exit's cleanup kills (with every live_alloc in $tmp/run.* told to
# exit); and until_ok.  Exits 77 (skipped) without python3.
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
lib=${CUPOOL_LIBRARY:-$builddir/.libs/libcupool.so}
launcher=$builddir/scripts/cupool
helper=$builddir/tests/helpers/live_alloc
CUPOOL_TOP=$builddir/cupool-top
export CUPOOL_TOP
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
# The interpreter itself: a version manager's python3 shim can take seconds
# a start, and the checks start it often.
python=$(python3 -c 'import sys; print(sys.executable)') || exit 99
[ -x "$CUPOOL_TOP" ] && [ -x "$helper" ] || { echo "build cupool-top and tests/helpers/live_alloc first"; exit 99; }
unset LD_PRELOAD CUPOOL_LIVE CUPOOL_STATS CUPOOL_LOG
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-$test_name.XXXXXX") || exit 99
chmod 700 "$tmp"
CUPOOL_LIVE_DIR=$tmp/pages
export CUPOOL_LIVE_DIR
mkdir "$CUPOOL_LIVE_DIR"
uid=$(id -u)
pids=""
cleanup() {
    for d in "$tmp"/run.*; do [ -d "$d" ] && touch "$d/quiet" "$d/exit"; done
    for p in $pids; do kill "$p" 2>/dev/null; done
    [ -S "$tmp/tmux.sock" ] && tmux -S "$tmp/tmux.sock" kill-server 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# until_ok SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds.
until_ok() {
    tries=$(($1 * 20))
    shift
    while ! "$@"; do
        tries=$((tries - 1))
        [ $tries -gt 0 ] || return 1
        sleep 0.05
    done
}
