#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/gen_work_shims.py CUDA_H [-o OUT] [--list]

Writes src/base/work_shims.h: the X-macro list CUPOOL_WORK_ENTRIES of every
driver entry point that gives a stream work (a kernel, a copy, a set, a
graph, a host function, a memory operation...), which src/shims/work.c turns
into shims that tell the work tracker (src/engine/order.c) before the driver
runs the call, and src/base/symbols.h into rows of the tables of intercepted
entry points (real pointers, dlsym, cuGetProcAddress).

cuda.h is read as the driver reads it: run through the C preprocessor
(`$CC -E`, default cc) with __CUDA_API_VERSION_INTERNAL, so that every
exported variant (cuMemcpyHtoD, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds) is
declared under its own name, exactly as src/base/cuda_api.h includes it.
The CUDA version that introduced each variant is that of its PFN_ typedef in
cudaTypedefs.h, beside cuda.h.  src/base/symbols.h's CUPOOL_HANDLED rows
(the entry points with shims written by hand) are left out of the list.

Every function cuda.h declares with a CUstream parameter, or a structure
holding one (CUlaunchConfig, CUDA_LAUNCH_PARAMS, ...), must be classified:
work (generated), handled by hand (CUPOOL_HANDLED), or excluded by one of
the families below, each with its reason.  One that is none of these stops
the generator, so a stream entry point a newer cuda.h adds cannot go unseen
(tests/test_work_shims.sh runs it on the installed cuda.h).

  -o OUT   write the header to OUT (without -o and --list: to stdout)
  --list   print what was included, handled by hand and excluded, and why
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYMBOLS_H = os.path.join(HERE, "..", "src", "base", "symbols.h")

# Work: families of base names (the name without _vN, _ptsz, _ptds).  Every
# exported variant of a matching name is listed.
WORK = [
    ("launches", r"cuLaunch\w*"),
    ("copies", r"cuMemcpy\w*"),
    ("sets", r"cuMemset\w*"),
    ("prefetches and discards", r"cuMemPrefetch\w*Async|cuMemDiscard\w*Async"),
    ("decompression", r"cuMemBatchDecompressAsync"),
    ("sparse array mappings", r"cuMemMapArrayAsync"),
    ("graph launches and uploads", r"cuGraphLaunch|cuGraphUpload"),
    ("host callbacks", r"cuStreamAddCallback"),
    ("memory operations", r"cuStreamBatchMemOp|cuStream(Write|Wait)Value(32|64)"),
    ("external semaphores", r"cu(Signal|Wait)ExternalSemaphoresAsync"),
    ("graphics interoperability", r"cuGraphics(Map|Unmap)Resources"),
]

# Work with no stream argument: the stream column is NULL.  Any other work
# entry point without one stops the generator.
NO_STREAM = [
    ("synchronous copies and sets", r"cuMemcpy(?!\w*Async)\w*|cuMemset(?!\w*Async)\w*",
     "run on the default stream: the legacy one, or the calling thread's for a _ptds variant"),
    ("launches of CUDA 2.0", r"cuLaunch|cuLaunchGrid", "run on the legacy default stream"),
]

# Structures a work entry point may take its stream from: type -> member.
STREAM_MEMBER = {"CUlaunchConfig": "hStream"}

# Functions with a stream (or a structure holding one) that give no work.
EXCLUDED = [
    ("stream creation and destruction", r"cuStreamCreate\w*|cuStreamDestroy|cuGreenCtxStreamCreate",
     "make or end a stream and give it no work; src/shims/stream.c tracks the streams cupool must know"),
    ("stream capture",
     r"cuStream(BeginCapture\w*|EndCapture|IsCapturing|GetCaptureInfo|UpdateCaptureDependencies)"
     r"|cuThreadExchangeStreamCaptureMode",
     "begin, end or look at a capture, whose work is recorded into a graph instead of run; "
     "src/shims/stream.c counts the captures"),
    ("stream queries and waits", r"cuStream(Query|Synchronize)",
     "ask about or wait for work already given and give none"),
    ("stream attributes", r"cuStream(Get|Set)\w*|cuStreamCopyAttributes",
     "read or set a stream's properties (flags, priority, context, id, attributes)"),
    ("events", r"cuEventRecord\w*|cuStreamWaitEvent",
     "order a stream against an event and give it no work of its own; the work on either side "
     "is seen where it is given"),
    ("occupancy", r"cuOccupancy\w*", "read a launch configuration to size a launch; launch nothing"),
    ("graph instantiation", r"cuGraphInstantiate\w*",
     "make an executable graph; the upload it may do in hUploadStream "
     "(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) moves the graph's own resources, and its work runs at "
     "cuGraphLaunch"),
]

# Names that must come out as work: a parse that lost them is broken.
EXPECTED = ["cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyAsync", "cuMemcpyHtoD_v2", "cuMemsetD8_v2",
            "cuGraphLaunch"]


def fail(message):
    sys.exit("gen_work_shims: " + message)


def match_family(families, base):
    for family in families:
        if re.fullmatch(family[1], base):
            return family
    return None


def split_name(name):
    """(base name, variant number, per-thread) of an exported name:
    cuMemcpyHtoDAsync_v2_ptsz -> (cuMemcpyHtoDAsync, 2, True)."""
    per_thread = bool(re.search(r"_pt(sz|ds)$", name))
    rest = re.sub(r"_pt(sz|ds)$", "", name)
    m = re.fullmatch(r"(.*?)(?:_v(\d+))?", rest)
    return m.group(1), int(m.group(2) or 1), per_thread


def preprocess(cuda_h):
    cc = shlex.split(os.environ.get("CC") or "cc")
    source = '#include "%s"\n' % os.path.abspath(cuda_h)
    cmd = cc + ["-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", "-I" + os.path.dirname(os.path.abspath(cuda_h)),
                "-x", "c", "-"]
    try:
        out = subprocess.run(cmd, input=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, check=False)
    except OSError as e:
        fail("cannot run %s: %s" % (cc[0], e))
    if out.returncode != 0:
        fail("%s -E failed on %s:\n%s" % (" ".join(cc), cuda_h, out.stderr))
    return re.sub(r"\s+", " ", out.stdout)


def split_params(text):
    """[(type, name)] of a parameter list's text; [] for (void)."""
    text = text.strip()
    if text in ("", "void"):
        return []
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch in "(["
        depth -= ch in ")]"
        cur += ch
    parts.append(cur)
    params = []
    for p in parts:
        m = re.fullmatch(r"\s*(.*?[\s*])(\w+)\s*", p)
        if not m or not re.search(r"\w", m.group(1)):
            return None  # a parameter without a name, or a function pointer spelt out
        # "CUstream* p", "void ** p": the type as "CUstream *", "void **".
        ptype = re.sub(r"\*\s+(?=\*)", "*", m.group(1).strip())
        ptype = re.sub(r"\s*(\*+)", r" \1", ptype).strip()
        params.append((ptype, m.group(2)))
    return params


def declarations(text):
    """{name: params text} of every function cuda.h declares returning CUresult."""
    found = {}
    for m in re.finditer(r"\bCUresult\s+(cu\w+)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*;", text):
        name, params = m.group(1), m.group(2).strip()
        if name in found and re.sub(r"\s", "", found[name]) != re.sub(r"\s", "", params):
            fail("%s is declared twice with different parameters" % name)
        found.setdefault(name, params)
    return found


def stream_structs(text):
    """The structure and union types (and their typedef names) with a CUstream member."""
    holding = set()
    for m in re.finditer(r"typedef (struct|union) (\w+) \{([^{}]*)\} (\w+)\s*[;,]", text):
        if re.search(r"(^|[;{ ])CUstream \w+ ?;", m.group(3)):
            holding.update(("%s %s" % (m.group(1), m.group(2)), m.group(4)))
    grew = True
    while grew:
        grew = False
        for m in re.finditer(r"typedef ((?:struct |union )?\w+) \*?(\w+)\s*;", text):
            if m.group(1) in holding and m.group(2) not in holding:
                holding.add(m.group(2))
                grew = True
    return holding


def bare_type(ptype):
    return re.sub(r"\bconst\b|\*", "", ptype).strip()


def pfn_versions(path):
    """{(base, per_thread): [(version, parameter count)]} of cudaTypedefs.h's PFN_ typedefs."""
    try:
        text = re.sub(r"\s+", " ", open(path).read())
    except OSError as e:
        fail("cannot read %s: %s" % (path, e))
    table = {}
    for m in re.finditer(r"\(\s*CUDAAPI \*PFN_(\w+)_v(\d+)(_pt(?:sz|ds))?\s*\)\s*\(([^;]*)\)\s*;", text):
        params = split_params(m.group(4))
        table.setdefault((m.group(1), bool(m.group(3))), []).append(
            (int(m.group(2)), len(params) if params is not None else -1))
    if not table:
        fail("no PFN_ typedefs found in %s" % path)
    for k in table:
        table[k].sort()
    return table


def handled_names(path):
    """The exported names of src/base/symbols.h's CUPOOL_HANDLED rows."""
    try:
        lines = open(path).read().split("\n")
    except OSError as e:
        fail("cannot read %s: %s" % (path, e))
    names, inside = [], False
    for line in lines:
        if re.match(r"#define CUPOOL_HANDLED\(X\)", line):
            inside = True
            continue
        if inside:
            m = re.match(r"\s*X\(\s*(\w+)", line)
            if m:
                names.append(m.group(1))
            if not line.rstrip().endswith("\\"):
                break
    if len(names) < 10:
        fail("found only %d CUPOOL_HANDLED rows in %s: the parse is broken" % (len(names), path))
    return set(names)


def classify(decls, holding, handled):
    """(work, handled here, excluded) lists, or the generator stops."""
    work, by_hand, excluded, unclassified = [], [], [], []
    for name in sorted(decls):
        params = split_params(decls[name])
        base, variant, per_thread = split_name(name)
        # A stream in, a stream out (cuStreamCreate), or a structure holding one.
        streamish = params is None or any(bare_type(t) == "CUstream" or bare_type(t) in holding for t, _ in params)
        family = match_family(WORK, base)
        if name in handled:
            if family or streamish:
                by_hand.append(name)
            continue
        if family:
            if params is None:
                fail("cannot read the parameters of %s: (%s)" % (name, decls[name]))
            work.append((name, base, variant, per_thread, params))
            continue
        if not streamish:
            continue
        family = match_family(EXCLUDED, base)
        if family:
            excluded.append((family, name))
        else:
            unclassified.append(name)
    if unclassified:
        fail("these functions take a stream but are neither work, nor CUPOOL_HANDLED in src/base/symbols.h, "
             "nor in an excluded family of %s: classify each\n  %s" % (sys.argv[0], "\n  ".join(unclassified)))
    return work, by_hand, excluded


def stream_of(name, base, params, holding):
    """The C expression of the stream a work entry point's work goes to."""
    streams = [n for t, n in params if t in ("CUstream", "const CUstream")]
    if len(streams) > 1:
        fail("%s takes several streams (%s): write its shim by hand" % (name, ", ".join(streams)))
    if streams:
        return streams[0]
    for t, n in params:
        member = STREAM_MEMBER.get(bare_type(t))
        if member and t.endswith("*"):
            return "%s ? %s->%s : NULL" % (n, n, member)
    for t, n in params:
        if bare_type(t) in holding:
            fail("%s takes its stream in a structure (%s %s): write its shim by hand and list it in "
                 "CUPOOL_HANDLED" % (name, t, n))
    if not match_family(NO_STREAM, base):
        fail("%s gives work but takes no stream, and no family of NO_STREAM says where it runs" % name)
    return "NULL"


def build_rows(decls, work, holding, pfn):
    per_thread_bases = {split_name(n)[0] for n in decls if split_name(n)[2]}
    rows = []
    for name, base, variant, per_thread, params in work:
        # Variants of this base and flavour in order, against the PFN_
        # typedefs of the same base and flavour in order of version.
        variants = sorted(split_name(n)[1] for n in decls if split_name(n)[0] == base and split_name(n)[2] == per_thread)
        pfns = pfn.get((base, per_thread), [])
        if len(pfns) != len(variants):
            fail("%s: %d exported variants of %s%s but %d PFN_ typedefs in cudaTypedefs.h: cannot tell their "
                 "versions apart" % (name, len(variants), base, " (per-thread)" if per_thread else "", len(pfns)))
        version, nparams = pfns[variants.index(variant)]
        if nparams != len(params):
            fail("%s has %d parameters but its PFN_%s_v%d typedef %d" % (name, len(params), base, version, nparams))
        flavour = "CUPOOL_ANY" if base not in per_thread_bases else "CUPOOL_PTDS" if per_thread else "CUPOOL_LEGACY"
        text = ", ".join(t + ("" if t.endswith("*") else " ") + n for t, n in params)
        args = ", ".join(n for _, n in params)
        rows.append((name, base, version, flavour, "(%s)" % text, "(%s)" % args,
                     stream_of(name, base, params, holding), 1 if per_thread else 0, variant))
    rows.sort(key=lambda r: (r[1], r[8], r[7]))
    return rows


def header(rows, cuda_version):
    lines = [
        "/* SPDX-License-Identifier: Apache-2.0 */",
        "/*",
        " * Generated by scripts/gen_work_shims.py from cuda.h of CUDA_VERSION %d and its" % cuda_version,
        " * cudaTypedefs.h: do not edit by hand.  Run it again on a new cuda.h",
        " * (tests/test_work_shims.sh fails until its output and this file agree):",
        " *   python3 scripts/gen_work_shims.py $CUDA_HOME/include/cuda.h -o src/base/work_shims.h",
        " *",
        " * Every driver entry point that gives a stream work (%d rows):" % len(rows),
        " * X(exported name, base name as cuGetProcAddress sees it, CUDA version that",
        " *   introduced this variant, CUPOOL_ANY / CUPOOL_LEGACY / CUPOOL_PTDS,",
        " *   (parameters), (arguments), the stream the work goes to (NULL: the",
        " *   default stream), 1 for a per-thread-default-stream variant).",
        " * src/base/symbols.h makes them rows of the tables of intercepted entry",
        " * points, src/shims/work.c a shim of each.",
        " */",
        "#ifndef CUPOOL_WORK_SHIMS_H",
        "#define CUPOOL_WORK_SHIMS_H",
        "",
        "#if CUDA_VERSION < %d" % cuda_version,
        '#error "src/base/work_shims.h lists entry points of a newer cuda.h: run scripts/gen_work_shims.py on this one"',
        "#endif",
        "",
        "#define CUPOOL_WORK_ENTRIES(X) \\",
    ]
    for i, (name, base, version, flavour, params, args, stream, per_thread, _) in enumerate(rows):
        end = " \\" if i + 1 < len(rows) else ""
        lines.append('    X(%s, "%s", %d, %s, %s, %s, %s, %d)%s' % (name, base, version, flavour, params, args, stream,
                                                                   per_thread, end))
    lines += ["", "#endif", ""]
    return "\n".join(lines)


def print_list(rows, by_hand, excluded):
    print("work, generated (%d):" % len(rows))
    for r in rows:
        print("  %-40s %-6d %-14s stream %s%s" % (r[0], r[2], r[3], r[6], ", per-thread" if r[7] else ""))
    print("handled by hand (CUPOOL_HANDLED in src/base/symbols.h) (%d):" % len(by_hand))
    for name in by_hand:
        print("  " + name)
    print("excluded (%d):" % len(excluded))
    for family in EXCLUDED:
        names = [n for f, n in excluded if f is family]
        if names:
            print("  %s: %s" % (family[0], family[2]))
            for name in names:
                print("    " + name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], usage=__doc__.split("\n")[0])
    parser.add_argument("cuda_h")
    parser.add_argument("-o", "--output")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--symbols", default=SYMBOLS_H, help="src/base/symbols.h (default: this tree's)")
    opts = parser.parse_args()

    try:
        raw = open(opts.cuda_h).read()
    except OSError as e:
        fail("cannot read %s: %s" % (opts.cuda_h, e))
    m = re.search(r"#define CUDA_VERSION (\d+)", raw)
    if not m:
        fail("%s defines no CUDA_VERSION: not cuda.h?" % opts.cuda_h)
    cuda_version = int(m.group(1))
    text = preprocess(opts.cuda_h)
    decls = declarations(text)
    if len(decls) < 100:
        fail("found only %d declarations in %s: the parse is broken" % (len(decls), opts.cuda_h))
    holding = stream_structs(text)
    if "CUlaunchConfig" not in holding:
        fail("found no CUstream member in CUlaunchConfig: the parse of structures is broken")
    pfn = pfn_versions(os.path.join(os.path.dirname(os.path.abspath(opts.cuda_h)), "cudaTypedefs.h"))

    work, by_hand, excluded = classify(decls, holding, handled_names(opts.symbols))
    rows = build_rows(decls, work, holding, pfn)
    names = {r[0] for r in rows}
    missing = [n for n in EXPECTED if n not in names]
    if missing:
        fail("expected among the work entry points but not found: %s" % ", ".join(missing))

    if opts.list:
        print_list(rows, by_hand, excluded)
    out = header(rows, cuda_version)
    if opts.output:
        tmp = opts.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(out)
        os.replace(tmp, opts.output)
    elif not opts.list:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
