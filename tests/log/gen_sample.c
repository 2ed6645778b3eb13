/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Makes the calls behind tests/log/sample.jsonl, the log the report and
 * replay tests read: two threads on two devices allocating sizes from 256
 * bytes to 16 MiB in a sliding window, some blocks freed by the other
 * thread, a pitched allocation, one failed allocation and one bad free,
 * and a few blocks never freed.  Run it under cupool with a log and
 * CUPOOL_MAX_SIZE so that the largest sizes go native (see Makefile.inc):
 *
 *   CUPOOL_LOG=sample.jsonl CUPOOL_MAX_SIZE=4M tests/run-test.sh tests/log/gen_sample
 *
 * It is deterministic in its calls, not in its pointers or times.
 */
#include "../check.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 70
#define WINDOW 6
#define HANDOFF 16

static CUcontext contexts[2];

/* Blocks thread 0 hands to thread 1 to free. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr handed[HANDOFF];
static int nhanded;

static uint32_t next_random(uint32_t *state)
{
    *state = *state * 1103515245u + 12345u;
    return *state >> 8;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint32_t state = 17u + 31u * (uint32_t)id;
    CUdeviceptr live[WINDOW] = {0};
    for (int round = 0; round < ROUNDS; round++) {
        /* Each thread spends the second half of its rounds on the other device. */
        int dev = (id + (round >= ROUNDS / 2)) % 2;
        CHECK_CU(cuCtxSetCurrent(contexts[dev]));
        int slot = round % WINDOW;
        if (live[slot]) {
            CHECK_CU(cuMemFree(live[slot]));
            live[slot] = 0;
        }
        /* 256 B .. 16 MiB, mostly small. */
        int shift = 8 + (int)(next_random(&state) % 10);
        if (next_random(&state) % 8 == 0) shift += 6 + (int)(next_random(&state) % 3);
        size_t size = ((size_t)1 << shift) + (size_t)(next_random(&state) % 4096);
        CHECK_CU(cuMemAlloc(&live[slot], size));
        if (id == 0 && round % 7 == 3) {
            CUdeviceptr p;
            CHECK_CU(cuMemAlloc(&p, 65536 + (size_t)round));
            pthread_mutex_lock(&lock);
            if (nhanded < HANDOFF) handed[nhanded++] = p;
            else CHECK_CU(cuMemFree(p));
            pthread_mutex_unlock(&lock);
        }
        if (id == 1 && round % 5 == 4) {
            pthread_mutex_lock(&lock);
            while (nhanded > 0) CHECK_CU(cuMemFree(handed[--nhanded]));
            pthread_mutex_unlock(&lock);
        }
        struct timespec pause = {0, 200000 + 50000 * (long)(next_random(&state) % 8)};
        nanosleep(&pause, NULL);
    }
    /* Leave two blocks allocated at exit; free the rest. */
    for (int i = 2; i < WINDOW; i++)
        if (live[i]) CHECK_CU(cuMemFree(live[i]));
    return NULL;
}

int main(void)
{
    int count = 0;
    CHECK_CU(cuInit(0));
    CHECK_CU(cuDeviceGetCount(&count));
    if (count < 2) return CHECK_SKIP;
    for (int d = 0; d < 2; d++) {
        CUdevice dev;
        CHECK_CU(cuDeviceGet(&dev, d));
        CHECK_CU(cuDevicePrimaryCtxRetain(&contexts[d], dev));
    }
    CHECK_CU(cuCtxSetCurrent(contexts[0]));
    CUdeviceptr pitched, bad;
    size_t pitch;
    CHECK_CU(cuMemAllocPitch(&pitched, &pitch, 1000, 64, 4));
    CHECK_CU_EQ(cuMemAlloc(&bad, 0), CUDA_ERROR_INVALID_VALUE);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) CHECK_TRUE(pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < 2; i++) CHECK_TRUE(pthread_join(threads[i], NULL) == 0);
    CHECK_CU(cuCtxSetCurrent(contexts[0]));
    while (nhanded > 0) CHECK_CU(cuMemFree(handed[--nhanded]));
    CHECK_CU(cuMemFree(pitched));
    CHECK_TRUE(cuMemFree((CUdeviceptr)0x1000) != CUDA_SUCCESS);
    return 0;
}
