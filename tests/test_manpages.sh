#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The man pages cannot drift from the programs they describe: every option
# the launcher's and the tools' usage prints is a tagged entry of its page,
# every CUPOOL_* variable of the option table (the CUPOOL_OPTIONS X-macro,
# found by grep wherever it lives under src/) is a tagged entry of cupool(7)
# and no entry there names a variable the table lacks, the README, the
# launcher's usage and both pages name the same programs served, and each
# page renders without a warning from groff (and mandoc's linter, where
# installed).
set -u
builddir=${CUPOOL_BUILDDIR:-$(pwd)}
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
mandir=$builddir/man
status=0
fail() { echo "test_manpages: $*" >&2; status=1; }
# The harness preloads nothing for scripts, but keep the tools clean anyway.
unset LD_PRELOAD

for page in cupool.1 cupool-top.1 cupool-report.1 cupool-replay.1 cupool.7; do
    [ -f "$mandir/$page" ] || { echo "test_manpages: $mandir/$page not built" >&2; exit 1; }
done

# The tag lines of a page (the line after each .TP), roff escapes removed:
# "\fB\-p\fR, \fB\-\-policy\fR" and ".BR \-p \", \" \-\-policy" both become
# plain text holding -p and --policy.
tags() {
    awk 'tag { print; tag = 0 } /^\.TP/ { tag = 1 }' "$1" |
        sed -e 's/^\.[A-Z]* //' -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\c//g' -e 's/"//g'
}

# The options a usage text lists: each line that starts with blanks and a
# dash, its option column (up to two blanks) split into -x and --long words.
usage_options() {
    sed -n 's/^  *\(-.*\)/\1/p' | sed 's/   *.*//' | tr ', ' '\n\n' | grep -E '^--?[A-Za-z][A-Za-z0-9-]*$'
}

# has_tag PAGE WORD: WORD is a whole word of one of PAGE's tag lines.
has_tag() {
    tags "$1" | grep -qE -- "(^|[^A-Za-z0-9_-])$2([^A-Za-z0-9_-]|$)"
}

check_options() { # PAGE NAME USAGE-TEXT
    opts=$(printf '%s\n' "$3" | usage_options)
    [ -n "$opts" ] || { fail "no options found in $2's usage"; return; }
    n=0 missing=0
    for opt in $opts; do
        n=$((n + 1))
        has_tag "$1" "$opt" || { fail "$2's option $opt has no entry in $(basename "$1")"; missing=$((missing + 1)); }
    done
    echo "test_manpages: $2: $n options, $missing of them missing from $(basename "$1")"
}

check_options "$mandir/cupool.1" cupool "$(sh "$builddir/scripts/cupool" --help)"
check_options "$mandir/cupool-top.1" cupool-top "$("$builddir/cupool-top" --help)"
check_options "$mandir/cupool-report.1" cupool-report "$("$builddir/cupool-report" -h)"
check_options "$mandir/cupool-replay.1" cupool-replay "$("$builddir/cupool-replay" --help)"

# The option table: the file under src/ that defines CUPOOL_OPTIONS(X); its
# rows are X(ID, "CUPOOL_NAME", KIND, ...), from the #define to the first
# line without a continuation backslash.
table=$(grep -rl --include='*.[ch]' '^#define CUPOOL_OPTIONS(X)' "$srcdir/src")
[ "$(printf '%s\n' "$table" | grep -c .)" = 1 ] || { echo "test_manpages: want one file defining CUPOOL_OPTIONS(X) under src/, found: $table" >&2; exit 1; }
variables=$(awk '/^#define CUPOOL_OPTIONS\(X\)/ { on = 1 } on { print; if ($0 !~ /\\$/) exit }' "$table" |
    grep -oE 'X\([A-Z_]+, *"CUPOOL_[A-Z0-9_]+"' | grep -oE 'CUPOOL_[A-Z0-9_]+')
count=$(printf '%s\n' "$variables" | grep -c .)
# A table that parses to a handful of rows means the pattern above broke.
[ "$count" -ge 10 ] || fail "found only $count CUPOOL_* rows in $table"
missing=0
for v in $variables; do
    has_tag "$mandir/cupool.7" "$v" || { fail "$v (option table, $(basename "$table")) has no entry in cupool.7"; missing=$((missing + 1)); }
done
for v in $(tags "$mandir/cupool.7" | grep -oE '^CUPOOL_[A-Z0-9_]+$'); do
    printf '%s\n' "$variables" | grep -qx "$v" || fail "cupool.7 has an entry for $v, which the option table lacks"
done
echo "test_manpages: $count CUPOOL_* variables in $(basename "$table"), $missing of them missing from cupool.7"

# Which programs cupool serves: the README's table of programs (a "served"
# column of yes or no) is the reference.  The frameworks named in the
# README's opening, in `cupool --help` and in the DESCRIPTION of cupool(1)
# and cupool(7) are exactly those it serves; any framework either page or
# the usage names at all has a row in the README's table.
frameworks='PyTorch CuPy JAX TensorFlow'
readme=$srcdir/README.md
# Rows "| NAME | yes|no | ..." of the table whose header has a "served" column.
table=$(awk -F'|' '/^\| *program *\| *served *\|/ { on = 1; next } on && !/^\|/ { exit }
    on && $3 ~ /^ *(yes|no) *$/ { gsub(/ /, "", $3); print $3 ":" $2 }' "$readme")
served='' listed=''
for f in $frameworks; do
    row=$(printf '%s\n' "$table" | grep -- "$f" | head -n 1)
    [ -n "$row" ] || continue
    listed="$listed $f"
    case $row in yes:*) served="$served $f" ;; esac
done
[ -n "$served" ] || fail "no framework served in README.md's table of programs (| program | served | ...)"
named() { # TEXT: the frameworks it names, in the order of $frameworks
    for f in $frameworks; do printf '%s\n' "$1" | grep -q -- "$f" && printf ' %s' "$f"; done
}
section() { # PAGE NAME: the text of a man page's section
    awk -v name="$2" '/^\.SH/ { on = ($0 == ".SH " name) ; next } on' "$1"
}
agree() { # WHERE TEXT
    got=$(named "$2")
    [ "$got" = "$served" ] || fail "$1 names as served:${got:- nothing}; README.md's table serves:$served"
}
agree "README.md's opening" "$(awk '/^## / { exit } { print }' "$readme")"
agree "cupool --help" "$(sh "$builddir/scripts/cupool" --help)"
agree "cupool.1 DESCRIPTION" "$(section "$mandir/cupool.1" DESCRIPTION)"
agree "cupool.7 DESCRIPTION" "$(section "$mandir/cupool.7" DESCRIPTION)"
for where in cupool.1 cupool.7 help; do
    case $where in help) text=$(sh "$builddir/scripts/cupool" --help) ;; *) text=$(cat "$mandir/$where") ;; esac
    for f in $(named "$text"); do
        case " $listed " in *" $f "*) ;; *) fail "$where names $f, which README.md's table of programs lacks" ;; esac
    done
done
echo "test_manpages: README.md's table of programs serves:$served (of$listed)"

# The README is for someone deciding whether and how to use cupool: under
# 250 lines; and its test command is the one CI (.ci/run) runs.
lines=$(wc -l <"$readme")
[ "$lines" -lt 250 ] || fail "README.md has $lines lines (under 250 wanted: measurements go to docs/BENCHMARKS.md)"
ci=$(sed -n 's/^(\(autoreconf.* check\)) || status=.*/\1/p' "$srcdir/.ci/run")
[ -n "$ci" ] || fail ".ci/run: no build-and-check command found"
grep -qF "&& $ci" "$readme" ||
    fail "README.md has no command ending in .ci/run's: $ci"
echo "test_manpages: README.md has $lines lines; its test command is .ci/run's"

# Rendering: groff's warnings (-ww) and mandoc's linter go to stderr.  All
# of groff's warnings but "break" (a line it cannot adjust or break): the
# pages hold the install paths configure was given, and a long prefix (make
# distcheck's) leaves a line of the synopsis no room, whatever the page says.
if command -v groff >/dev/null 2>&1; then
    for page in cupool.1 cupool-top.1 cupool-report.1 cupool-replay.1 cupool.7; do
        out=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -Wbreak -z "$mandir/$page" 2>&1)
        [ -z "$out" ] || fail "groff warns on $page: $out"
    done
    echo "test_manpages: groff renders every page without a warning"
else
    echo "test_manpages: groff not installed, rendering not checked"
fi
if command -v mandoc >/dev/null 2>&1; then
    for page in cupool.1 cupool-top.1 cupool-report.1 cupool-replay.1 cupool.7; do
        out=$(mandoc -T lint -W warning "$mandir/$page" 2>&1)
        [ -z "$out" ] || fail "mandoc -T lint on $page: $out"
    done
    echo "test_manpages: mandoc -T lint finds nothing"
fi
exit $status
