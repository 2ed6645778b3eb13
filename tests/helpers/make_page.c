/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writes live statistics pages by hand for tests/test_top_neighbours.sh, so
 * that cupool-top can be shown pages no cupool would write but a neighbour
 * could: a command line with any bytes, a device twice, a page whose
 * sequence number stays odd; and one that another process keeps truncating
 * while cupool-top reads it.
 *
 *   make_page DIR PID [--command HEX] [--dup-device] [--odd]
 *       writes a page of process PID (its real start time, this process's
 *       PID namespace) into DIR and prints its path;
 *   make_page --truncate PATH SECONDS
 *       for SECONDS, cuts the page at PATH to a random length and restores
 *       it, over and over.
 */
#define _GNU_SOURCE
#include "../../src/engine/live.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

static int truncate_loop(const char *path, int seconds)
{
    int fd = open(path, O_RDWR);
    if (fd < 0) return perror(path), 1;
    static cupool_live_page_t page;
    if (pread(fd, &page, sizeof page, 0) != (ssize_t)sizeof page) return perror("read"), 1;
    long long end = now_ns(CLOCK_MONOTONIC) + seconds * 1000000000ll;
    srand((unsigned)getpid());
    /* Mostly empty (a mapping of it then has no page at all: SIGBUS for a
     * reader that maps it), sometimes cut inside, briefly whole. */
    struct timespec cut = {0, 500000}, whole = {0, 100000};
    while (now_ns(CLOCK_MONOTONIC) < end) {
        if (ftruncate(fd, rand() % 4 ? 0 : (off_t)(rand() % (int)sizeof page)) != 0) return perror("ftruncate"), 1;
        nanosleep(&cut, NULL);
        if (pwrite(fd, &page, sizeof page, 0) != (ssize_t)sizeof page) return perror("write"), 1;
        nanosleep(&whole, NULL);
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--truncate") == 0) return truncate_loop(argv[2], atoi(argv[3]));
    if (argc < 3) {
        fprintf(stderr, "usage: make_page DIR PID [--command HEX] [--dup-device] [--odd]\n");
        return 2;
    }
    static cupool_live_page_t page;
    int pid = atoi(argv[2]);
    page.magic = CUPOOL_LIVE_MAGIC;
    page.format = CUPOOL_LIVE_FORMAT;
    page.size = sizeof page;
    page.pid = pid;
    page.uid = (uint32_t)getuid();
    page.start_time = cupool_live_process_start(pid);
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) page.pid_ns = (uint64_t)st.st_ino;
    page.updated_ns = (uint64_t)now_ns(CLOCK_REALTIME);
    page.updates = 1;
    page.interval_ms = CUPOOL_LIVE_INTERVAL_MS;
    snprintf(page.version_text, sizeof page.version_text, "test");
    snprintf(page.policy, sizeof page.policy, "dedicated");
    snprintf(page.free_option, sizeof page.free_option, "auto");
    snprintf(page.command, sizeof page.command, "made-page");
    page.ndevices = 1;
    page.device[0].ordinal = 0;
    page.device[0].pooled = 1;
    page.device[0].in_use = 1 << 20;
    page.device[0].reserved = 2 << 20;
    uint64_t seq = 2;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--command") == 0 && i + 1 < argc) {
            const char *hex = argv[++i];
            size_t n = 0;
            memset(page.command, 0, sizeof page.command);
            for (; hex[2 * n] && hex[2 * n + 1] && n < sizeof page.command - 1; n++)
                sscanf(hex + 2 * n, "%2hhx", (unsigned char *)&page.command[n]);
        } else if (strcmp(argv[i], "--dup-device") == 0) {
            page.device[1] = page.device[0];
            page.ndevices = 2;
        } else if (strcmp(argv[i], "--odd") == 0) {
            seq = 3;
        } else {
            fprintf(stderr, "make_page: unknown %s\n", argv[i]);
            return 2;
        }
    }
    atomic_store(&page.seq, seq);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%u.%d.%llu.%016llx", argv[1], CUPOOL_LIVE_PREFIX, (unsigned)getuid(), pid,
             (unsigned long long)page.start_time, (unsigned long long)now_ns(CLOCK_MONOTONIC));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, &page, sizeof page) != (ssize_t)sizeof page || close(fd) != 0) return perror(path), 1;
    printf("%s\n", path);
    return 0;
}
