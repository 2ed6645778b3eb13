/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool does not fall into the trap of a naive redirect of cuMemFree
 * to cuMemFreeAsync.  A kernel spins for ~50 ms and then writes a pattern
 * into its buffer; the program frees the buffer at once (natively cuMemFree
 * waits for the kernel), allocates the same size again and fills it with
 * another pattern on another stream.  The old kernel must never clobber the
 * new block.  Runs for blocking and non-blocking streams, each also with
 * the kernel stream destroyed right after the launch (its work must stay
 * ordered: before the legacy stream's later work if it was blocking, and
 * under a context-wide event or synchronization either way), in every free
 * mode (one process each), and natively to check the test itself.
 * `ordered` moves its order stream to the stream given work (order.c), so
 * it too must hold on non-blocking streams.
 *
 * On a GPU the test reads the new block back: corruption is the failure.
 * On the simulator, which runs each operation at once, the kernel can
 * never be late; its race checker (SIMCUDA_RACES=count) reports instead
 * every access or free that CUDA's stream order does not place after the
 * kernel's write, whatever the timing: none may be reported.
 *
 * The kernel is PTX text generated once with
 *   nvcc -ptx -arch=compute_75 spin.cu   (then .version lowered to 7.0)
 * from:
 *   extern "C" __global__ void cupool_test_spin_write(unsigned *buf,
 *       unsigned long long n, unsigned pattern, unsigned long long spin_ns)
 *   {
 *       unsigned long long start, now;
 *       asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
 *       do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
 *       while (now - start < spin_ns);
 *       for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x
 *            + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
 *           buf[i] = pattern;
 *   }
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char spin_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "	// .globl	cupool_test_spin_write\n"
    ".visible .entry cupool_test_spin_write(\n"
    "	.param .u64 cupool_test_spin_write_param_0,\n"
    "	.param .u64 cupool_test_spin_write_param_1,\n"
    "	.param .u32 cupool_test_spin_write_param_2,\n"
    "	.param .u64 cupool_test_spin_write_param_3\n"
    ")\n"
    "{\n"
    "	.reg .pred 	%p<4>;\n"
    "	.reg .b32 	%r<6>;\n"
    "	.reg .b64 	%rd<20>;\n"
    "	ld.param.u64 	%rd11, [cupool_test_spin_write_param_0];\n"
    "	ld.param.u64 	%rd8, [cupool_test_spin_write_param_1];\n"
    "	ld.param.u32 	%r1, [cupool_test_spin_write_param_2];\n"
    "	ld.param.u64 	%rd9, [cupool_test_spin_write_param_3];\n"
    "	cvta.to.global.u64 	%rd1, %rd11;\n"
    "	mov.u64 %rd10, %globaltimer;\n"
    "$L__BB0_1:\n"
    "	mov.u64 %rd12, %globaltimer;\n"
    "	sub.s64 	%rd13, %rd12, %rd10;\n"
    "	setp.lt.u64 	%p1, %rd13, %rd9;\n"
    "	@%p1 bra 	$L__BB0_1;\n"
    "	mov.u32 	%r2, %ctaid.x;\n"
    "	mov.u32 	%r3, %ntid.x;\n"
    "	cvt.u64.u32 	%rd3, %r3;\n"
    "	mul.wide.u32 	%rd14, %r2, %r3;\n"
    "	mov.u32 	%r4, %tid.x;\n"
    "	cvt.u64.u32 	%rd15, %r4;\n"
    "	add.s64 	%rd19, %rd14, %rd15;\n"
    "	setp.ge.u64 	%p2, %rd19, %rd8;\n"
    "	@%p2 bra 	$L__BB0_5;\n"
    "	mov.u32 	%r5, %nctaid.x;\n"
    "	cvt.u64.u32 	%rd16, %r5;\n"
    "	mul.lo.s64 	%rd5, %rd16, %rd3;\n"
    "$L__BB0_4:\n"
    "	shl.b64 	%rd17, %rd19, 2;\n"
    "	add.s64 	%rd18, %rd1, %rd17;\n"
    "	st.global.u32 	[%rd18], %r1;\n"
    "	add.s64 	%rd19, %rd19, %rd5;\n"
    "	setp.lt.u64 	%p3, %rd19, %rd8;\n"
    "	@%p3 bra 	$L__BB0_4;\n"
    "$L__BB0_5:\n"
    "	ret;\n"
    "}\n"
    ;

#include <dlfcn.h>

static size_t words = (size_t)16 << 20; /* 64 MiB; 1 MiB on the simulator */
#define OLD_PATTERN 0xdeadbeefu
#define NEW_PATTERN 0x600d600du
#define TRIES 5

static CUfunction spin;

/* One try: returns the number of words of the new block not holding the new
 * pattern; *reused says whether the new block overlaps the old one. */
static size_t one_try(CUstream *kernel_stream_p, unsigned kernel_stream_flags, int destroy_kernel_stream,
                      CUstream fill_stream, uint32_t *host, int *reused)
{
    CUstream kernel_stream = *kernel_stream_p;
    size_t bytes = words * 4;
    CUdeviceptr old_buf, new_buf;
    CHECK_CU(cuMemAlloc(&old_buf, bytes));
    unsigned long long n = words, spin_ns = 50ull * 1000 * 1000;
    unsigned pattern = OLD_PATTERN;
    void *params[] = {&old_buf, &n, &pattern, &spin_ns};
    CHECK_CU(cuLaunchKernel(spin, 264, 1, 1, 256, 1, 1, 0, kernel_stream, params, NULL));
    if (destroy_kernel_stream) { /* at once, the kernel still running; a fresh one for the next try */
        CHECK_CU(cuStreamDestroy(kernel_stream));
        CHECK_CU(cuStreamCreate(kernel_stream_p, kernel_stream_flags));
    }
    CHECK_CU(cuMemFree(old_buf));
    CHECK_CU(cuMemAlloc(&new_buf, bytes));
    *reused = new_buf < old_buf + bytes && old_buf < new_buf + bytes;
    CHECK_CU(cuMemsetD32Async(new_buf, NEW_PATTERN, words, fill_stream));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemcpyDtoH(host, new_buf, bytes));
    size_t bad = 0;
    for (size_t i = 0; i < words; i++) bad += host[i] != NEW_PATTERN;
    CHECK_CU(cuMemFree(new_buf));
    return bad;
}

static int child(void)
{
    const char *mode = tl_native() ? "native" : getenv("CUPOOL_FREE");
    long long (*races)(void) = NULL;
    if (!check_real_driver()) {
        races = (long long (*)(void))dlsym(RTLD_DEFAULT, "simcuda_races");
        CHECK_TRUE(races != NULL);
        words = (size_t)1 << 18;
    }
    tl_init(0);
    CUmodule module;
    CHECK_CU(cuModuleLoadData(&module, spin_ptx));
    CHECK_CU(cuModuleGetFunction(&spin, module, "cupool_test_spin_write"));
    uint32_t *host = malloc(words * 4);
    CHECK_TRUE(host != NULL);
    int failed = 0;
    /* Blocking streams first: under auto the context is still ordered.
     * Kinds 1 and 3 destroy the kernel stream right after the launch: the
     * legacy stream must still wait for a blocking one's work (`ordered`
     * relies on it), and a context-wide event or synchronization for
     * either's (`deferred` and `sync` rely on that). */
    static const char *const kinds[] = {"blocking", "destroyed", "non-blocking", "nb-destroyed"};
    for (int kind = 0; kind < 4; kind++) {
        int destroyed = kind % 2, nonblocking = kind >= 2;
        unsigned flags = nonblocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
        CUstream ks, fs;
        CHECK_CU(cuStreamCreate(&ks, flags));
        CHECK_CU(cuStreamCreate(&fs, flags));
        /* The fill goes on another stream of the same kind, and on the legacy stream. */
        CUstream fills[2] = {fs, CU_STREAM_LEGACY};
        for (int f = 0; f < 2; f++) {
            int corrupted = 0, reused_count = 0, raced = 0;
            size_t worst = 0;
            for (int t = 0; t < TRIES; t++) {
                int reused;
                long long before = races ? races() : 0;
                size_t bad = one_try(&ks, flags, destroyed, fills[f], host, &reused);
                reused_count += reused;
                corrupted += bad != 0;
                raced += races && races() > before;
                if (bad > worst) worst = bad;
            }
            const char *where = kinds[kind];
            const char *fill = f ? "legacy" : "another";
            if (races) {
                printf("%-8s %-12s kernel stream, fill on %-7s: races reported in %d/%d tries\n", mode, where, fill,
                       raced, TRIES);
                if (corrupted || raced) failed = 1;
                continue;
            }
            printf("%-8s %-12s kernel stream, fill on %-7s: %d/%d tries corrupted (worst %zu words), address reused %d/%d\n",
                   mode, where, fill, corrupted, TRIES, worst, reused_count, TRIES);
            if (corrupted) failed = 1;
        }
        CHECK_CU(cuStreamDestroy(ks));
        CHECK_CU(cuStreamDestroy(fs));
    }
    free(host);
    CHECK_CU(cuModuleUnload(module));
    return failed;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const modes[] = {"native", "auto", "deferred", "deferred-streams", "sync", "ordered"};
    static const char *const on_simulator[] = {"SIMCUDA_RACES=count", NULL};
    return tl_run_modes(modes, 6, check_real_driver() ? NULL : on_simulator, 300, NULL) ? 1 : 0;
}
