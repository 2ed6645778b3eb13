#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The layers of src/ hold (Makefile.am, "the library"): base, then engine,
# then shims, then tools, each including only its own layer and those below
# it; and the engine's private headers (its state, engine/state.h) are
# reached from no shim and no tool, whose face of the engine is
# engine/engine.h; the free store's own header (engine/free/free_store.h)
# is included from engine/free/ alone, the rest of the engine including
# engine/free/free.h, the registry's (engine/registry.h) from its three
# files alone, and the IPC files' (engine/ipc_wire.h) from ipc.c,
# ipc_export.c and ipc_wire.c alone.  Every #include "..." is followed,
# transitively, from where the including file lies (an include that names
# no file under src/, as config.h, cupool.h or uthash.h, is not cupool's
# layering).  On failure it prints each include that points up a layer
# and, for each shim or tool that reaches a private header, the chain that
# reaches it.
#
# A checker that finds nothing proves nothing: it is run first on a small
# tree of its own with one violation of each kind, and must find them.
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
[ -d "$srcdir/src/engine" ] || { echo "test_layers: $srcdir/src/engine missing" >&2; exit 99; }

# The engine's private headers, relative to src/.
PRIVATE="engine/state.h"
# Headers of a few files alone: HEADER=PREFIX,PREFIX... (a folder/ or a file).
FOLDER_ONLY="engine/free/free_store.h=engine/free/ \
engine/registry.h=engine/devices.c,engine/contexts.c,engine/lifecycle.c \
engine/ipc_wire.h=engine/ipc.c,engine/ipc_export.c,engine/ipc_wire.c"

# check DIR: the layering of DIR (a src/ tree); prints what breaks it and
# returns 1 then.
check() {
    (
        cd "$1" || exit 2
        find base engine shims tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null |
            sort | while read -r f; do
                sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
                    while read -r inc; do printf '%s\t%s\n' "$f" "$inc"; done
                # A file with no include is still a node.
                printf '%s\t\n' "$f"
            done
    ) | awk -F '\t' -v private="$PRIVATE" -v folder_only="$(echo $FOLDER_ONLY)" '
        function layer(path,   top) {
            top = path; sub(/\/.*/, "", top)
            if (top == "base") return 0
            if (top == "engine") return 1
            if (top == "shims") return 2
            if (top == "tools") return 3
            return -1
        }
        # dir/inc with "." and ".." resolved; "" when it climbs out of src/.
        function resolve(dir, inc,   n, parts, out, m, i) {
            n = split(dir "/" inc, parts, "/")
            m = 0
            for (i = 1; i <= n; i++) {
                if (parts[i] == "" || parts[i] == ".") continue
                if (parts[i] == "..") { if (m == 0) return ""; m--; continue }
                out[++m] = parts[i]
            }
            path = ""
            for (i = 1; i <= m; i++) path = path (i > 1 ? "/" : "") out[i]
            return path
        }
        {
            file = $1; inc = $2
            known[file] = 1
            if (inc == "") next
            dir = file; sub(/\/[^\/]*$/, "", dir)
            edge_from[++nedges] = file; edge_inc[nedges] = inc; edge_dir[nedges] = dir
        }
        END {
            bad = 0
            nfolder = split(folder_only, rules, " ")
            for (e = 1; e <= nedges; e++) {
                to = resolve(edge_dir[e], edge_inc[e])
                if (!(to in known)) continue  # not a file of src/: config.h, cupool.h, uthash.h
                from = edge_from[e]
                kids[from] = kids[from] " " to
                if (layer(to) > layer(from)) {
                    printf "test_layers: %s includes %s, a layer above it (base < engine < shims < tools)\n", from, to
                    bad = 1
                }
                for (r = 1; r <= nfolder; r++) {
                    split(rules[r], rule, "=")
                    if (to != rule[1]) continue
                    nallowed = split(rule[2], allowed, ",")
                    ok = 0
                    for (a = 1; a <= nallowed; a++) if (index(from, allowed[a]) == 1) ok = 1
                    if (!ok) {
                        printf "test_layers: %s includes %s, which is the own header of %s\n", from, to, rule[2]
                        bad = 1
                    }
                }
            }
            nprivate = split(private, priv, " ")
            for (f in known) {
                if (layer(f) < 2) continue
                # Breadth-first from f, remembering how each file was reached.
                delete seen; delete via
                head = 1; tail = 1; queue[1] = f; seen[f] = 1
                while (head <= tail) {
                    cur = queue[head++]
                    n = split(kids[cur], next_files, " ")
                    for (i = 1; i <= n; i++) {
                        k = next_files[i]
                        if (k in seen) continue
                        seen[k] = 1; via[k] = cur; queue[++tail] = k
                    }
                }
                for (p = 1; p <= nprivate; p++) {
                    if (!(priv[p] in seen)) continue
                    chain = priv[p]
                    for (k = priv[p]; k != f; k = via[k]) chain = via[k] " -> " chain
                    printf "test_layers: %s reaches the engine'"'"'s private %s: %s\n", f, priv[p], chain
                    bad = 1
                }
            }
            exit bad
        }'
}

# The checker on a tree with one violation of each kind: an include up a
# layer, a folder's own header included from outside it, and a shim that
# reaches the private state through another header.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-layers.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/base" "$tmp/engine/free" "$tmp/shims" "$tmp/tools"
printf '#include "../engine/engine.h"\n' >"$tmp/base/base.h"
printf '\n' >"$tmp/engine/free/free_store.h"
printf '#include "free/free_store.h"\n' >"$tmp/engine/queue.c"
printf '#include "relay.h"\n' >"$tmp/engine/engine.h"
printf '#include "state.h"\n' >"$tmp/engine/relay.h"
printf '\n' >"$tmp/engine/state.h"
printf '#include "../engine/engine.h"\n#include "config.h"\n' >"$tmp/shims/memory.c"
printf '\n' >"$tmp/tools/top.c"
out=$(check "$tmp")
case $out in
*"base/base.h includes engine/engine.h"*"engine/queue.c includes engine/free/free_store.h, which is the own header of engine/free/"*"shims/memory.c reaches"*"shims/memory.c -> engine/engine.h -> engine/relay.h -> engine/state.h"*) ;;
*)
    echo "test_layers: the checker missed a violation planted for it; it found:" >&2
    echo "$out" >&2
    exit 99
    ;;
esac

check "$srcdir/src" || exit 1
echo "test_layers: base < engine < shims < tools hold, no shim or tool reaches $PRIVATE, and" $FOLDER_ONLY "hold"
