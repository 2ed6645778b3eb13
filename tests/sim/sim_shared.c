/*
 * A simulated device shared between processes (SIMCUDA_SHARED_DEVICE=path):
 * real GPUs are one pool of memory for every process on them, so one
 * process's reserve is memory another cannot have.  With the variable set,
 * each process's device usage (cuMemAlloc memory and pool chunks, as
 * sim_mem.c and sim_pool.c count them) is also published in a slot of the
 * file at `path`, mapped shared, and a device's free memory is its budget
 * (SIMCUDA_MEM, which every process must set alike) less the usage of every
 * live process's slot.  A slot whose process has ended counts nothing (its
 * memory died with it, as on a GPU) and is taken by the next process that
 * needs one.  Two processes allocating at the same moment may together
 * overshoot the budget by one allocation: the tests this serves allocate
 * in turn.  A fork()ed child takes a slot of its own at its first charge.
 * The devices' UUIDs tell the two apart: those of a shared file are the
 * same in every process that maps it, the others are the process's own.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARED_SLOTS 64

typedef struct {
    atomic_int pid; /* 0: free */
    atomic_llong used[SIM_MAX_DEVICES];
} shared_slot;

typedef struct {
    shared_slot slot[SHARED_SLOTS];
} shared_file;

static shared_file *shared;
static uint64_t instance; /* the shared file's device and inode, or 0 */
static shared_slot *mine;
static pid_t mine_pid;

void sim_shared_open(void)
{
    const char *path = getenv("SIMCUDA_SHARED_DEVICE");
    if (!path || !*path) return;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    void *m = MAP_FAILED;
    /* Every process grows the file to the same size: harmless when two do. */
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        ((size_t)st.st_size >= sizeof(shared_file) || ftruncate(fd, sizeof(shared_file)) == 0))
        m = mmap(NULL, sizeof(shared_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) instance = ((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino;
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "simcuda: SIMCUDA_SHARED_DEVICE=%s cannot be used (%s); the device is this process's alone\n",
                path, strerror(errno));
        return;
    }
    shared = m;
}

uint64_t sim_shared_instance(void)
{
    return shared ? instance : (uint64_t)getpid() << 8;
}

bool sim_shared_on(void)
{
    return shared != NULL;
}

static bool alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* This process's slot: a free one, or one whose process has ended. */
static shared_slot *my_slot(void)
{
    if (mine && mine_pid == getpid()) return mine;
    mine = NULL;
    for (int i = 0; i < SHARED_SLOTS && !mine; i++) {
        shared_slot *s = &shared->slot[i];
        int pid = atomic_load(&s->pid);
        if (pid != 0 && alive(pid)) continue;
        if (!atomic_compare_exchange_strong(&s->pid, &pid, (int)getpid())) continue;
        for (int d = 0; d < SIM_MAX_DEVICES; d++) atomic_store(&s->used[d], 0);
        mine = s;
    }
    if (!mine) fprintf(stderr, "simcuda: SIMCUDA_SHARED_DEVICE has no free slot; this process's use is not shared\n");
    mine_pid = getpid();
    return mine;
}

void sim_shared_charge(int device, long long delta)
{
    if (!shared || device < 0 || device >= SIM_MAX_DEVICES) return;
    shared_slot *s = my_slot();
    if (s) atomic_fetch_add(&s->used[device], delta);
}

size_t sim_shared_used(int device)
{
    long long total = 0;
    my_slot(); /* counted from the first look: usage of this process lands there */
    for (int i = 0; i < SHARED_SLOTS; i++) {
        shared_slot *s = &shared->slot[i];
        int pid = atomic_load(&s->pid);
        if (pid == 0 || !alive(pid)) continue;
        long long used = atomic_load(&s->used[device]);
        if (used > 0) total += used;
    }
    return (size_t)total;
}
