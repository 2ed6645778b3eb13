import sys, re
root, variant = sys.argv[1], sys.argv[2]
def edit(path, pairs):
    p = f"{root}/src/{path}"; s = open(p).read()
    for a, b in pairs:
        assert a in s, (path, a); s = s.replace(a, b)
    open(p, "w").write(s)
v = set(variant.split("+"))
if "nostats" in v or "all" in v:
    edit("memory.c", [("    cupool_stats_alloc(call->device, CUPOOL_ROUTE_POOL, size);\n", ""),
                      ("        cupool_stats_free(call.device, CUPOOL_ROUTE_POOL, o.size);\n", "")])
    edit("driver.c", [("    cupool_stats_call(c->sym, served);\n", "    (void)served;\n")])
if "noenter" in v or "all" in v:
    edit("memory.c", [("    int pushed = cupool_enter_context(c->ctx);\n", "    int pushed = 0;\n")])
if "noorigin" in v or "all" in v:
    edit("memory.c", [("static CUresult pool_alloc_once(", "static __thread cupool_origin_t probe_slot;\nstatic CUresult pool_alloc_once("),
                      ("    if (cupool_origin_insert(&origin) != 0) {", "    probe_slot = origin;\n    if (0) {"),
                      ("    int claimed = dptr && cupool_active() ? cupool_origin_claim(dptr, &o, cupool_free_is_deferred, &deferred) : -1;",
                       "    int claimed = -1;\n    if (dptr && probe_slot.ptr == dptr) { o = probe_slot; probe_slot.ptr = 0; claimed = 0; }")])
