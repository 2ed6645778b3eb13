/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Modules and kernels of the simulated CUDA driver.  cuModuleLoadData accepts
 * PTX text and reads the `.entry` declarations out of it, parameter sizes
 * included, so kernel arguments can be copied into graph nodes like the real
 * driver does.  A few kernels are emulated on the host by name: cupool's fill
 * kernels `cupool_fill_u8/u16/u32` (dst, pitch in bytes, width in elements,
 * height in rows, value), test_kernel_race's `cupool_test_spin_write` (buffer,
 * words, pattern, spin time: writes the pattern at once) and `sim_busy` (no
 * parameters, does nothing).
 * Launching any other kernel answers CUDA_ERROR_NOT_SUPPORTED; a fill outside a
 * live allocation answers CUDA_ERROR_ILLEGAL_ADDRESS.
 */
#include "sim.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- emulated kernels --------------------------------------------------------- */

static CUresult emulate_fill(void *const *params, unsigned element_size)
{
    sim_memset_params p = {
        .dst = *(const unsigned long long *)params[0],
        .pitch = *(const unsigned long long *)params[1],
        .width = *(const unsigned long long *)params[2],
        .height = *(const unsigned long long *)params[3],
        .value = *(const unsigned *)params[4],
        .element_size = element_size,
    };
    if (p.width == 0 || p.height == 0) return CUDA_SUCCESS;
    /* A kernel has no argument checking: anything wrong is a fault. */
    CUresult rc = sim_memset_run(&p);
    return rc == CUDA_SUCCESS ? rc : CUDA_ERROR_ILLEGAL_ADDRESS;
}

static CUresult emulate_fill_u8(void *const *params) { return emulate_fill(params, 1); }
static CUresult emulate_fill_u16(void *const *params) { return emulate_fill(params, 2); }
static CUresult emulate_fill_u32(void *const *params) { return emulate_fill(params, 4); }

/* test_kernel_race's kernel (buf, words, pattern, spin_ns): the spin is
 * timing, which the race checker stands in for here; the writes remain. */
static CUresult emulate_spin_write(void *const *params)
{
    unsigned long long words = *(const unsigned long long *)params[1];
    sim_memset_params p = {
        .dst = *(const unsigned long long *)params[0],
        .pitch = words * 4,
        .width = words,
        .height = 1,
        .value = *(const unsigned *)params[2],
        .element_size = 4,
    };
    if (words == 0) return CUDA_SUCCESS;
    return sim_memset_run(&p) == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS;
}

static CUresult emulate_busy(void *const *params)
{
    (void)params;
    return CUDA_SUCCESS;
}

static const size_t fill_layout[] = { 8, 8, 8, 8, 4 };
static const size_t spin_write_layout[] = { 8, 8, 4, 8 };

static const struct {
    const char *name;
    const size_t *layout;
    unsigned nparams;
    sim_emulator emulate;
} emulated[] = {
    { "cupool_fill_u8", fill_layout, 5, emulate_fill_u8 },
    { "cupool_fill_u16", fill_layout, 5, emulate_fill_u16 },
    { "cupool_fill_u32", fill_layout, 5, emulate_fill_u32 },
    { "cupool_test_spin_write", spin_write_layout, 4, emulate_spin_write },
    { "sim_busy", NULL, 0, emulate_busy },
};

/* The emulator for a kernel, if its name and parameter layout match one. */
static sim_emulator find_emulator(const struct CUfunc_st *f)
{
    for (size_t i = 0; i < sizeof emulated / sizeof *emulated; i++) {
        if (strcmp(f->name, emulated[i].name) != 0 || f->nparams != emulated[i].nparams) continue;
        for (unsigned p = 0; p < f->nparams; p++)
            if (f->param_size[p] != emulated[i].layout[p]) return NULL;
        return emulated[i].emulate;
    }
    return NULL;
}

/* ---- PTX scanning -------------------------------------------------------------- */

static const char *skip_space(const char *s, const char *end)
{
    while (s < end && isspace((unsigned char)*s)) s++;
    return s;
}

static bool is_ident(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.';
}

/* Size and alignment of one `.param` declaration, e.g. ".param .u64 x",
 * ".param .align 8 .b8 x[16]" or ".param .u64 .ptr .global .align 1 x". */
static bool parse_param(const char *s, const char *end, size_t *size, size_t *align)
{
    size_t elem = 0, count = 1, explicit_align = 0;
    while ((s = skip_space(s, end)) < end) {
        if (*s == '.') {
            const char *t = s + 1;
            while (t < end && is_ident(*t) && *t != '.') t++;
            size_t n = (size_t)(t - s - 1);
            if (n >= 2 && strchr("bsuf", s[1]) && isdigit((unsigned char)s[2])) {
                elem = strtoul(s + 2, NULL, 10) / 8;
            } else if (n == 5 && strncmp(s + 1, "align", 5) == 0) {
                t = skip_space(t, end);
                explicit_align = strtoul(t, NULL, 10);
                while (t < end && isdigit((unsigned char)*t)) t++;
            }
            s = t;
        } else if (*s == '[') {
            count = strtoul(s + 1, NULL, 10);
            s++;
        } else {
            s++;
        }
    }
    if (elem == 0) return false;
    *size = elem * count;
    *align = explicit_align ? explicit_align : elem;
    return true;
}

/* Fills f's parameter table from the text between an entry's parentheses. */
static bool parse_params(struct CUfunc_st *f, const char *s, const char *end)
{
    size_t offset = 0;
    while (s < end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *stop = comma ? comma : end;
        const char *decl = skip_space(s, stop);
        if (decl < stop) {
            size_t size, align;
            if (f->nparams == SIM_MAX_KERNEL_PARAMS || !parse_param(decl, stop, &size, &align)) return false;
            offset = (offset + align - 1) / align * align;
            f->param_offset[f->nparams] = offset;
            f->param_size[f->nparams++] = size;
            offset += size;
        }
        s = comma ? comma + 1 : end;
    }
    f->param_bytes = offset;
    return true;
}

/* Threads per block an entry allows: the product of its `.maxntid x, y, z`
 * directive (between the parameter list and the body), else the device limit. */
static unsigned parse_maxntid(const char *s)
{
    const char *body = strchr(s, '{');
    const char *directive = strstr(s, ".maxntid");
    if (!directive || (body && directive > body)) return 1024;
    unsigned long long product = 1;
    char *p = (char *)directive + 8;
    for (int i = 0; i < 3; i++) {
        unsigned long n = strtoul(p, &p, 10);
        if (n) product *= n;
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        if (!isdigit((unsigned char)*p)) break;
    }
    return product > 1024 ? 1024 : (unsigned)product;
}

static void function_free(struct CUfunc_st *f)
{
    sim_handle_remove(f);
    free(f->name);
    free(f);
}

/* Adds one function per `.entry` in the PTX text to the module. */
static CUresult scan_entries(CUmodule mod, const char *ptx)
{
    const char *end = ptx + strlen(ptx);
    for (const char *s = strstr(ptx, ".entry"); s; s = strstr(s, ".entry")) {
        s = skip_space(s + 6, end);
        const char *name = s;
        while (s < end && is_ident(*s) && *s != '.') s++;
        if (s == name) continue;
        struct CUfunc_st *f = calloc(1, sizeof *f);
        if (!f || !(f->name = strndup(name, (size_t)(s - name)))) {
            free(f);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        f->module = mod;
        s = skip_space(s, end);
        if (*s == '(') {
            const char *close = strchr(s, ')');
            if (!close || !parse_params(f, s + 1, close)) {
                free(f->name);
                free(f);
                return CUDA_ERROR_INVALID_PTX;
            }
            s = close + 1;
        }
        f->max_threads = parse_maxntid(s);
        f->emulate = find_emulator(f);
        sim_vec_push(&mod->functions, f);
        sim_handle_add(f, SIM_KIND_FUNCTION);
    }
    return CUDA_SUCCESS;
}

/* ---- modules --------------------------------------------------------------------- */

void sim_module_destroy_obj(CUmodule mod)
{
    for (size_t i = 0; i < mod->functions.len; i++) function_free(mod->functions.items[i]);
    sim_vec_free(&mod->functions);
    sim_vec_remove(&mod->ctx->modules, mod);
    sim_handle_remove(mod);
    free(mod);
}

/* A cubin (ELF) or fatbin rather than PTX text. */
static bool is_binary_image(const void *image)
{
    static const unsigned char elf[4] = { 0x7f, 'E', 'L', 'F' }, fatbin[4] = { 0x50, 0xed, 0x55, 0xba };
    if (strnlen(image, 4) < 4) return false;
    return memcmp(image, elf, 4) == 0 || memcmp(image, fatbin, 4) == 0;
}

SIM_API CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    SIM_BEGIN;
    CUcontext ctx;
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    if (is_binary_image(image)) return CUDA_ERROR_INVALID_IMAGE; /* no SASS runs here */
    CUmodule mod = calloc(1, sizeof *mod);
    if (!mod) return CUDA_ERROR_OUT_OF_MEMORY;
    mod->ctx = ctx;
    sim_handle_add(mod, SIM_KIND_MODULE);
    sim_vec_push(&ctx->modules, mod);
    CUresult rc = scan_entries(mod, image);
    if (rc != CUDA_SUCCESS) {
        sim_module_destroy_obj(mod);
        return rc;
    }
    *module = mod;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int nopts,
                                            CUjit_option *options, void **values)
{
    (void)nopts; /* JIT options have no meaning without a JIT */
    (void)options;
    (void)values;
    return cuModuleLoadData(module, image);
}

SIM_API CUresult CUDAAPI cuModuleUnload(CUmodule mod)
{
    SIM_BEGIN;
    if (!sim_handle_is(mod, SIM_KIND_MODULE)) return CUDA_ERROR_INVALID_HANDLE;
    sim_module_destroy_obj(mod);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuModuleGetFunction(CUfunction *out, CUmodule mod, const char *name)
{
    SIM_BEGIN;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_handle_is(mod, SIM_KIND_MODULE)) return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < mod->functions.len; i++) {
        CUfunction f = mod->functions.items[i];
        if (strcmp(f->name, name) == 0) {
            *out = f;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* Kernel handles (cuLibrary*) are not modelled; a CUkernel naming one of our
 * functions is accepted as that function. */
CUfunction sim_function_from_kernel(CUkernel k)
{
    return sim_handle_is(k, SIM_KIND_FUNCTION) ? (CUfunction)(void *)k : NULL;
}

/* ---- kernel parameters ------------------------------------------------------------- */

static void **extra_lookup(void **extra, void *key)
{
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2)
        if (extra[i] == key) return &extra[i + 1];
    return NULL;
}

CUresult sim_kernel_params_init(sim_kernel_params *out, CUfunction f, CUcontext ctx, const unsigned grid[3],
                                const unsigned block[3], unsigned shared_mem, void **kernel_params, void **extra)
{
    memset(out, 0, sizeof *out);
    if (!sim_handle_is(f, SIM_KIND_FUNCTION)) return CUDA_ERROR_INVALID_HANDLE;
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2]) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned long long)block[0] * block[1] * block[2] > f->max_threads) return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *packed = NULL;
    if (!kernel_params && extra && f->nparams) {
        void **buffer = extra_lookup(extra, CU_LAUNCH_PARAM_BUFFER_POINTER);
        void **size = extra_lookup(extra, CU_LAUNCH_PARAM_BUFFER_SIZE);
        if (!buffer || !size || !*buffer || !*size || *(size_t *)*size < f->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        packed = *buffer;
    } else if (f->nparams && !kernel_params) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    out->param_blob = calloc(1, f->param_bytes + 1);
    out->param_ptrs = calloc(f->nparams + 1, sizeof *out->param_ptrs);
    if (!out->param_blob || !out->param_ptrs) {
        sim_kernel_params_free(out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; i < f->nparams; i++) {
        out->param_ptrs[i] = out->param_blob + f->param_offset[i];
        const void *src = packed ? packed + f->param_offset[i] : kernel_params[i];
        if (!src) {
            sim_kernel_params_free(out);
            return CUDA_ERROR_INVALID_VALUE;
        }
        memcpy(out->param_ptrs[i], src, f->param_size[i]);
    }
    out->func = f;
    out->ctx = ctx;
    memcpy(out->grid, grid, sizeof out->grid);
    memcpy(out->block, block, sizeof out->block);
    out->shared_mem = shared_mem;
    return CUDA_SUCCESS;
}

CUresult sim_kernel_params_copy(sim_kernel_params *dst, const sim_kernel_params *src)
{
    return sim_kernel_params_init(dst, src->func, src->ctx, src->grid, src->block, src->shared_mem, src->param_ptrs,
                                  NULL);
}

void sim_kernel_params_free(sim_kernel_params *p)
{
    free(p->param_blob);
    free(p->param_ptrs);
    p->param_blob = NULL;
    p->param_ptrs = NULL;
}

CUresult sim_kernel_run(const sim_kernel_params *p)
{
    if (!sim_handle_is(p->func, SIM_KIND_FUNCTION)) return CUDA_ERROR_INVALID_HANDLE; /* module unloaded */
    if (!p->func->emulate) return CUDA_ERROR_NOT_SUPPORTED;
    return p->func->emulate(p->param_ptrs);
}

/* ---- launches ------------------------------------------------------------------------ */

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared_mem, CUstream h, void **kernel_params, void **extra, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (sim_handle_is(f, SIM_KIND_FUNCTION) && f->module->ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
    sim_node_params op = { .type = CU_GRAPH_NODE_TYPE_KERNEL };
    SIM_CHECK(sim_kernel_params_init(&op.u.kernel, f, s->ctx, grid, block, shared_mem, kernel_params, extra));
    return sim_stream_submit(h, ptds, &op);
}

SIM_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_mem,
                                        CUstream s, void **kernel_params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shared_mem, s, kernel_params, extra, false);
}

SIM_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                             unsigned int bx, unsigned int by, unsigned int bz,
                                             unsigned int shared_mem, CUstream s, void **kernel_params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shared_mem, s, kernel_params, extra, true);
}
