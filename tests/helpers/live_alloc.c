/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A program for tests/test_live.sh to watch: it allocates and frees in a loop
 * on device 0 (a few thousand calls a second, three 1 MiB blocks held all
 * along, and a pinned host and a managed block allocated and freed each
 * round) until the file DIR/quiet appears, then writes what it did to
 * DIR/counts and waits, allocating nothing more, for DIR/exit; it exits
 * without freeing the blocks it holds.  DIR/ready holds its pid once it has
 * allocated, and a child it forked has exited through exit() (whose cupool
 * must leave the parent's page alone).  Each wait gives up after a minute, so a test that fails never
 * leaves it behind.
 */
#define _GNU_SOURCE
#include "../testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING 8
#define GIVE_UP_S 60

static const char *dir;

static int exists(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Written under another name and renamed: a reader never sees half. */
static void put(const char *name, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    CHECK_TRUE(f != NULL);
    fputs(text, f);
    CHECK_EQ(fclose(f), 0);
    CHECK_EQ(rename(tmp, path), 0);
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: live_alloc DIR\n");
        return 2;
    }
    dir = argv[1];
    tl_init(0);
    CUdeviceptr held[3], ring[RING] = {0};
    unsigned long long allocs = 0, frees = 0, in_use = 0, host = 0, managed = 0;
    for (int i = 0; i < 3; i++, allocs++, in_use += 1 << 20) CHECK_CU(cuMemAlloc(&held[i], 1 << 20));
    pid_t child = fork();
    CHECK_TRUE(child >= 0);
    if (child == 0) exit(0);
    int status;
    CHECK_EQ(waitpid(child, &status, 0), child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "live_alloc: the forked child %s %d\n", WIFEXITED(status) ? "exited with" : "was killed by signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return 1;
    }
    char text[256];
    snprintf(text, sizeof text, "%d\n", (int)getpid());
    put("ready", text);
    time_t start = time(NULL);
    for (unsigned i = 0; !exists("quiet") && time(NULL) - start < GIVE_UP_S; i++) {
        for (int k = 0; k < 16; k++) {
            unsigned slot = (i * 16 + (unsigned)k) % RING;
            size_t size = (size_t)4096 << (k % 5);
            if (ring[slot]) {
                CHECK_CU(cuMemFree(ring[slot]));
                frees++;
            }
            CHECK_CU(cuMemAlloc(&ring[slot], size));
            allocs++;
        }
        void *pinned;
        CHECK_CU(cuMemHostAlloc(&pinned, 4096, 0));
        CHECK_CU(cuMemFreeHost(pinned));
        host++;
        CUdeviceptr m;
        CHECK_CU(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_GLOBAL));
        CHECK_CU(cuMemFree(m));
        managed++;
        nap_ms(2);
    }
    for (int i = 0; i < RING; i++) {
        if (!ring[i]) continue;
        CHECK_CU(cuMemFree(ring[i]));
        frees++;
    }
    snprintf(text, sizeof text, "allocs %llu frees %llu in_use %llu host %llu managed %llu\n", allocs, frees, in_use,
             host, managed);
    put("counts", text);
    start = time(NULL);
    while (!exists("exit") && time(NULL) - start < GIVE_UP_S) nap_ms(10);
    return 0;
}
