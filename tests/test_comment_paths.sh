#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every path of this repository that a comment names must exist, so that a
# file moved or renamed cannot leave a comment pointing at nothing.  Read
# are the comments of the sources, headers, scripts and Makefile fragments
# (/* */ and // in C and CUDA, # in shell, Python, make and autoconf,
# Python's docstrings) and the whole text of the documents (Markdown, man
# pages, the Debian package's texts).  A path is a word that starts with one
# of the tree's top folders (src, include, tests, bench, scripts, docs, man,
# demo, debian) and a slash; a word glued to what precedes it (another
# folder, a variable) is some other tree's path, and one followed by `*` is a
# pattern.  A path passes when it exists in the source tree, or its `.in`
# does (a file configure or make generates from it), or, without an
# extension, its `.c` or `.cu` does (the program built from it).  Build
# products are let be: paths through .libs or .deps, and libtool, object and
# shared library files.  Each path that does not exist is printed with where
# it was named.
set -u
srcdir=${CUPOOL_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
[ -f "$srcdir/src/exports.map" ] || { echo "test_comment_paths: $srcdir is not cupool's source tree" >&2; exit 99; }
command -v python3 >/dev/null 2>&1 || { echo "test_comment_paths: no python3" >&2; exit 77; }
exec python3 - "$srcdir" <<'PY'
import os, re, sys

top = sys.argv[1]
roots = ("src", "include", "tests", "bench", "scripts", "docs", "man", "demo", "debian")
# Files outside the roots that carry comments or prose.
loose = ("README.md", "Makefile.am", "configure.ac", ".ci/run")

C_LIKE = (".c", ".h", ".cu", ".map")
HASH = (".sh", ".py", ".inc", ".am", ".ac", ".in")
PROSE = (".md", ".txt")

def comments_of(path, text):
    """The comments of a file (its whole text for a document), or None for
    a file that is data (logs, pictures, archives)."""
    name = os.path.basename(path)
    if path.startswith("man/") or name.endswith(PROSE) or path in ("debian/changelog", "debian/control",
                                                                    "debian/copyright"):
        return text
    if name.endswith(C_LIKE):
        # Block comments and line comments; a string holding "/*" is rare
        # enough in this tree not to need a C lexer.
        return "\n".join(m.group(0) for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S))
    first = text.split("\n", 1)[0]
    if name.endswith(HASH) or first.startswith("#!") or name in ("run", "rules"):
        parts = [m.group(1) for m in re.finditer(r"(?:^|\s)#+([^\n]*)", text)]
        if name.endswith(".ac"):
            parts += [m.group(1) for m in re.finditer(r"\bdnl\b([^\n]*)", text)]
        if name.endswith(".py"):
            parts += [m.group(0) for m in re.finditer(r'""".*?"""', text, re.S)]
        return "\n".join(parts)
    return None

# A root folder, a slash, then path characters, not glued to a word,
# another folder or a variable before it, nor a pattern's start.
token = re.compile(r"(?<![\w./$~{}@-])((?:%s)/[\w./+-]*)(?![\w./+*-])" % "|".join(roots))
built = re.compile(r"(^|/)\.(libs|deps)(/|$)|\.(la|lo|o|so)(\.\d+)*$")

def named_paths(text):
    for m in token.finditer(text):
        p = m.group(1).rstrip(".")
        if built.search(p):
            continue
        yield p, text.count("\n", 0, m.start()) + 1

def exists(p):
    full = os.path.join(top, p)
    if os.path.exists(full) or os.path.exists(full + ".in"):
        return True
    has_extension = re.search(r"\w\.\w+$", p.rsplit("/", 1)[-1])
    return not has_extension and (os.path.exists(full + ".c") or os.path.exists(full + ".cu"))

files = [f for f in loose if os.path.isfile(os.path.join(top, f))]
for root in roots:
    for d, dirs, names in os.walk(os.path.join(top, root)):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for n in sorted(names):
            files.append(os.path.relpath(os.path.join(d, n), top))

stale, seen = [], 0
for f in files:
    try:
        with open(os.path.join(top, f), encoding="utf-8") as fh:
            text = fh.read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    body = comments_of(f, text)
    if body is None:
        continue
    for p, _ in named_paths(body):
        seen += 1
        if not exists(p):
            # Where in the file: the first line that names it.
            line = next((i for i, l in enumerate(text.split("\n"), 1) if p in l), 0)
            stale.append("%s:%d: %s does not exist" % (f, line, p))

for s in stale:
    print("test_comment_paths: " + s, file=sys.stderr)
if seen < 100:
    # Far fewer than the tree holds: the scan itself is broken.
    print("test_comment_paths: only %d paths found in comments" % seen, file=sys.stderr)
    sys.exit(1)
print("test_comment_paths: %d paths named in comments and documents, %d missing" % (seen, len(stale)))
sys.exit(1 if stale else 0)
PY
