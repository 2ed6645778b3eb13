/* SPDX-License-Identifier: Apache-2.0 */
/* Placeholder: the work tracker replaces this file. */
#include "engine.h"

void cupool_stream_work(CUstream stream, int per_thread)
{
    (void)stream;
    (void)per_thread;
}

uint64_t cupool_work_mark(void)
{
    return 0;
}

void cupool_work_completed(uint64_t mark, CUstream stream, int per_thread)
{
    (void)mark;
    (void)stream;
    (void)per_thread;
}
