#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Proves the list of entry points that give a stream work is complete and
# current.  scripts/gen_work_shims.py is run on the installed cuda.h
# ($CUDA_HOME/include, the one configure builds against) into a temporary
# file, which must equal the committed src/base/work_shims.h (the diff is
# printed otherwise: run the generator again).  The generator stops when
# cuda.h declares a function taking a stream, or a structure holding one,
# that is neither work, nor a CUPOOL_HANDLED row of src/base/symbols.h, nor
# in one of its excluded families (each with its reason), so a stream entry
# point a newer cuda.h adds fails here until someone classifies it.  That
# check is proven to work on a planted case (cuMemAllocAsync taken out of
# CUPOOL_HANDLED must stop it), and checked again by a scan of its own:
# every function cuda.h declares with a CUstream or a CUlaunchConfig among
# its parameters must appear in the generator's --list, in one of its
# three classes.  Skipped (77) without python3, a C compiler or cuda.h.
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cuda_h=${CUDA_HOME:-/usr/local/cuda}/include/cuda.h
gen=$srcdir/scripts/gen_work_shims.py

command -v python3 >/dev/null 2>&1 || { echo "test_work_shims: no python3: skipped"; exit 77; }
command -v "${CC:-cc}" >/dev/null 2>&1 || { echo "test_work_shims: no C compiler (${CC:-cc}): skipped"; exit 77; }
[ -f "$cuda_h" ] || { echo "test_work_shims: $cuda_h missing: skipped"; exit 77; }
[ -f "$(dirname "$cuda_h")/cudaTypedefs.h" ] || { echo "test_work_shims: cudaTypedefs.h missing beside $cuda_h: skipped"; exit 77; }
for f in "$gen" "$srcdir/src/base/work_shims.h" "$srcdir/src/base/symbols.h"; do
    [ -f "$f" ] || { echo "test_work_shims: $f missing" >&2; exit 99; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cupool-work-shims.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM

# 1. The committed list is the generator's output for this cuda.h.
if ! python3 "$gen" "$cuda_h" -o "$tmp/work_shims.h" --list >"$tmp/list" 2>"$tmp/err"; then
    cat "$tmp/err" >&2
    echo "test_work_shims: scripts/gen_work_shims.py failed on $cuda_h" >&2
    exit 1
fi
if ! diff -u "$srcdir/src/base/work_shims.h" "$tmp/work_shims.h" >"$tmp/diff"; then
    cat "$tmp/diff" >&2
    echo "test_work_shims: src/base/work_shims.h is not what scripts/gen_work_shims.py makes of $cuda_h;" \
        "run: python3 scripts/gen_work_shims.py $cuda_h -o src/base/work_shims.h" >&2
    exit 1
fi

# 2. The generator's classification can fail: a stream entry point it
# finds nowhere (cuMemAllocAsync, without its CUPOOL_HANDLED row) stops it.
grep -v '^[[:space:]]*X(cuMemAllocAsync,' "$srcdir/src/base/symbols.h" >"$tmp/symbols.h"
if python3 "$gen" "$cuda_h" --symbols "$tmp/symbols.h" -o "$tmp/planted.h" >/dev/null 2>"$tmp/planted"; then
    echo "test_work_shims: the generator accepted cuMemAllocAsync unclassified" >&2
    exit 1
fi
if ! grep -q '^  cuMemAllocAsync$' "$tmp/planted"; then
    cat "$tmp/planted" >&2
    echo "test_work_shims: the generator failed on the planted case without naming cuMemAllocAsync" >&2
    exit 1
fi

# 3. A scan of cuda.h of its own, simpler than the generator's parse: each
# function declared with a CUstream or CUlaunchConfig parameter is listed.
"${CC:-cc}" -E -P -D__CUDA_API_VERSION_INTERNAL -I"$(dirname "$cuda_h")" -x c - <<EOF >"$tmp/cuda.i" || exit 99
#include "$cuda_h"
EOF
python3 - "$tmp/cuda.i" "$tmp/list" <<'PY'
import re, sys

text = open(sys.argv[1]).read()
listed = set(re.findall(r"^ +(cu\w+)\b", open(sys.argv[2]).read(), re.M))
declared = set()
for m in re.finditer(r"\bCUresult\s+(cu\w+)\s*\(", text):
    # The parameters: up to the parenthesis that closes this one.
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    if re.search(r"\b(CUstream|CUlaunchConfig)\b", text[m.end():i]):
        declared.add(m.group(1))
if len(declared) < 150:
    sys.exit("test_work_shims: found only %d stream functions in cuda.h: the scan is broken" % len(declared))
missing = sorted(declared - listed)
if missing:
    sys.exit("test_work_shims: declared with a stream but in no class of the generator's --list:\n  "
             + "\n  ".join(missing))
print("test_work_shims: %d functions of cuda.h take a stream, each classified" % len(declared))
PY
[ $? -eq 0 ] || exit 1
echo "test_work_shims: src/base/work_shims.h is current ($(grep -c '^    X(' "$srcdir/src/base/work_shims.h") work entry points)"
