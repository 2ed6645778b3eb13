/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool works when CUDA is first called from another library's
 * constructor, before main: libtest_ctor's constructor runs cuInit,
 * cuMemAlloc, a memset and cuMemFree; here main checks that they all
 * succeeded, the data was right, and the allocation was pooled.
 */
#include "testlib.h"

extern int ctor_ran, ctor_init, ctor_alloc, ctor_free, ctor_data_ok;
extern unsigned long long ctor_pooled, ctor_ptr;

int main(void)
{
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    CHECK_EQ(ctor_ran, 1);
    CHECK_CU_EQ((CUresult)ctor_init, CUDA_SUCCESS);
    CHECK_CU_EQ((CUresult)ctor_alloc, CUDA_SUCCESS);
    CHECK_CU_EQ((CUresult)ctor_free, CUDA_SUCCESS);
    CHECK_EQ(ctor_data_ok, 1);
    CHECK_EQ(ctor_pooled, 1); /* seen as pooled from inside the constructor */
    cupool_stats_t s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.pooled_frees, 1);
    CHECK_EQ(s.in_use, 0);
    /* And main can carry on. */
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    CHECK_CU(cuMemFree(p));
    CHECK_EQ(tl_stats(0).pooled_allocs, 2);
    return 0;
}
