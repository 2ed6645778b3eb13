#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Proves libcupool.so exports exactly what it means to: every entry point of
# src/base/symbols.h's CUPOOL_HANDLED list and of src/base/work_shims.h's
# generated CUPOOL_WORK_ENTRIES list, the public API (cupool_version,
# cupool_get_stats) and dlsym at GLIBC_2.2.5 and (default) GLIBC_2.34; nothing
# else and nothing less (in the manner of jansson's check-exports).  The list
# is derived from the two headers, so adding a row to either keeps this test
# honest, and hard-coded minimums catch a parse that silently finds nothing.
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
lib=$builddir/.libs/libcupool.so
NM=${NM:-nm}

command -v "$NM" >/dev/null 2>&1 || { echo "test_exports: $NM not found: skipped"; exit 77; }
[ -f "$lib" ] || { echo "test_exports: $lib missing" >&2; exit 99; }
for h in symbols.h work_shims.h; do
    [ -f "$srcdir/src/base/$h" ] || { echo "test_exports: $srcdir/src/base/$h missing" >&2; exit 99; }
done

tmp=${TMPDIR:-/tmp}/cupool-exports.$$
trap 'rm -f "$tmp".*' EXIT INT TERM

# The exported names of the rows of an X-macro list (X(name, ...)): from its
# #define to the first line that does not continue it.
rows() {
    awk -v list="$1" '
        index($0, "#define " list "(X)") == 1 { inside = 1; next }
        inside {
            if (match($0, /^[ \t]*X\([ \t]*[A-Za-z_][A-Za-z0-9_]*/)) {
                row = substr($0, RSTART, RLENGTH); sub(/^[ \t]*X\([ \t]*/, "", row); print row
            }
            if ($0 !~ /\\[ \t]*$/) inside = 0
        }' "$2"
}
rows CUPOOL_HANDLED "$srcdir/src/base/symbols.h" >"$tmp.handled"
rows CUPOOL_WORK_ENTRIES "$srcdir/src/base/work_shims.h" >"$tmp.work"

count=$(wc -l <"$tmp.handled")
if [ "$count" -lt 10 ]; then
    echo "test_exports: found only $count CUPOOL_HANDLED rows in symbols.h: the parse is broken" >&2
    exit 1
fi
count=$(wc -l <"$tmp.work")
if [ "$count" -lt 100 ]; then
    echo "test_exports: found only $count CUPOOL_WORK_ENTRIES rows in work_shims.h: the parse is broken" >&2
    exit 1
fi
{
    cat "$tmp.handled" "$tmp.work"
    echo cupool_version
    echo cupool_get_stats
    echo dlsym@GLIBC_2.2.5
    echo dlsym@@GLIBC_2.34
} | sort -u >"$tmp.expected"

# Whatever happens to symbols.h, these must be there.
for must in cuMemAlloc_v2 cuMemFree_v2 cuGetProcAddress_v2 cuGetProcAddress cuInit \
    cuLaunchKernel cuLaunchKernel_ptsz cuMemcpyAsync cuMemcpyHtoD_v2 cuMemsetD8_v2 cuGraphLaunch \
    dlsym@GLIBC_2.2.5 dlsym@@GLIBC_2.34 cupool_version cupool_get_stats; do
    grep -qx "$must" "$tmp.expected" || { echo "test_exports: $must missing from the expected list" >&2; exit 1; }
done

# Defined dynamic symbols; version nodes (type A) are not symbols anyone can
# call.  cupool's own version node is dropped from the names of its exports
# (cuInit@@CUPOOL_0 is cuInit to a program linked against libcuda).
"$NM" -D --defined-only "$lib" >"$tmp.nm" || { echo "test_exports: $NM failed" >&2; exit 99; }
awk '$2 != "A" { print $3 }' "$tmp.nm" | sed -e 's/@@CUPOOL_0$//' | sort -u >"$tmp.actual"

status=0
extra=$(comm -13 "$tmp.expected" "$tmp.actual")
missing=$(comm -23 "$tmp.expected" "$tmp.actual")
if [ -n "$extra" ]; then
    echo "test_exports: exported but not intended:" >&2
    echo "$extra" | sed 's/^/  /' >&2
    status=1
fi
if [ -n "$missing" ]; then
    echo "test_exports: intended but not exported:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    status=1
fi
# The shims must be functions, not data.
notext=$(awk '$2 != "A" && $2 != "T" && $2 != "i" { print }' "$tmp.nm")
if [ -n "$notext" ]; then
    echo "test_exports: exports that are not functions:" >&2
    echo "$notext" | sed 's/^/  /' >&2
    status=1
fi
[ $status -eq 0 ] && echo "test_exports: $(wc -l <"$tmp.actual") symbols as intended"
exit $status
