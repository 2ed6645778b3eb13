/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the core test programs: driver and context set-up,
 * cupool's statistics looked up the way a program would (dlsym), running
 * this same program again under another environment (options are read once
 * per process, so every setting needs its own process), running a child with
 * or without cupool and capturing what it prints, and pool queries.
 */
#ifndef CUPOOL_TESTLIB_H
#define CUPOOL_TESTLIB_H

#include "check.h"
#include "cupool.h"

#include <stddef.h>
#include <stdint.h>

/* cuInit, then makes device `ordinal`'s primary context current; returns it. */
CUcontext tl_init(int ordinal);
/* Number of devices the driver reports (cuInit must have run). */
int tl_device_count(void);

/* cupool's statistics for a device, found with dlsym(RTLD_DEFAULT); the
 * test fails when cupool is not loaded. */
cupool_stats_t tl_stats(int device);

/* This test program's path, for re-executing it.  Read through readlink
 * rather than exec'ing /proc/self/exe: under valgrind /proc/self/exe is
 * valgrind itself, while readlink answers with the program valgrind runs, so
 * the child runs under valgrind too (tests/test_memcheck.sh). */
const char *tl_self_path(void);

/* When `name` is unset in the environment: sets it to `value` and re-executes
 * this program with the same arguments.  Returns when it is already set. */
void tl_reexec_with(char **argv, const char *name, const char *value);

/* Whether a CUDA tool (compute-sanitizer, Nsight) is attached to this
 * process, as cupool's options.c decides it. */
int tl_cuda_tool_attached(void);

/* True in a child started with native = 1 (CUPOOL_TEST_NATIVE=1, no cupool). */
int tl_native(void);

/* What a child did: exit status (128 + signal when killed, 124 on timeout)
 * and everything it wrote on stdout and stderr (NUL-terminated, malloc'd). */
typedef struct tl_child {
    int status;
    char *out;
    char *err;
} tl_child_t;

/* Runs this program again with `args` (NULL-terminated, may be NULL) after
 * argv[0]; `env` is a NULL-terminated list of "NAME=value" to set or "NAME"
 * to unset; native = 1 removes libcupool.so from LD_PRELOAD and sets
 * CUPOOL_TEST_NATIVE=1.  Kills the child after timeout_s seconds. */
void tl_run_self(const char *const *args, const char *const *env, int native, int timeout_s, tl_child_t *child);
/* Sets each NAME=VALUE of env (a NULL-terminated list as for tl_run_self;
 * a bare NAME unsets it) in this process: a child before it execs. */
void tl_apply_env(const char *const *env);
/* An IPC handle as 128 hex digits (out holds 129 bytes), and back: how
 * the IPC tests pass handles between their processes. */
void tl_handle_to_hex(const CUipcMemHandle *h, char out[129]);
void tl_handle_from_hex(const char *hex, CUipcMemHandle *h);
void tl_child_free(tl_child_t *child);

/* Number of lines of text starting with prefix / containing needle. */
int tl_count_prefix(const char *text, const char *prefix);
int tl_count_substr(const char *text, const char *needle);
/* Reads the lines "ROW RESULT" a child printed into results[ROW] (-1 for
 * a row it did not print); returns how many rows it printed. */
int tl_parse_results(const char *out, CUresult *results, size_t nrows);
/* Prints a child's output to stderr, for failure reports. */
void tl_child_dump(const char *what, const tl_child_t *child);

/* Runs this program with --child once per free mode (CUPOOL_FREE=mode plus
 * `env`, a NULL-terminated list as for tl_run_self, may be NULL; the mode
 * "native" runs it without cupool; "MODE-FENCE" adds
 * CUPOOL_DEFERRED_FENCE=FENCE), prints what each printed and "mode M
 * passed" or "FAILED".  A run passes when it exits 0 and `check` (may be
 * NULL) returns nonzero.  Returns the number of modes that failed.
 * CUPOOL_TEST_MODES (words separated by spaces or commas) runs only the
 * modes it names, so that each mode can run alone under a tool such as
 * compute-sanitizer; a test none of whose modes it names exits 77 (skip). */
int tl_run_modes(const char *const *modes, int nmodes, const char *const *env, int timeout_s,
                 int (*check)(const char *mode, const tl_child_t *child));

/* A case of a test program that runs each case in a child of its own
 * (options are read once per process): its name, what runs in the child,
 * the child's environment (a list as for tl_run_self), whether it needs
 * the simulator, and what the child must print once on stderr (NULL:
 * nothing asked). */
typedef struct tl_case {
    const char *name;
    int (*run)(void);
    const char *env[8];
    int sim_only;
    const char *says;
} tl_case_t;
/* The case `--case NAME` asks for, or NULL (no such arguments). */
const tl_case_t *tl_case_asked(const tl_case_t *cases, size_t ncases, int argc, char **argv);
/* Runs every case in a child (killed after 60 s), but those needing the
 * simulator on the real driver and those `skip` (may be NULL) gives a
 * reason for; prints what each printed and "NAME: passed" or "FAILED".
 * Returns the number that failed. */
int tl_run_cases(const tl_case_t *cases, size_t ncases, const char *(*skip)(const tl_case_t *));
/* A control for tl_sim_cases_main: case `name`, run in a child with `env`
 * (a list as for tl_run_self), must fail its own checks (exit status 1,
 * not a crash or a time-out) without `what` it proves; the test prints
 * "control: NAME with WHAT fails, as it must" or why not. */
typedef struct {
    const char *name;
    const char *env[8];
    const char *what;
} tl_control_t;
/* main() of a test whose cases the simulator judges: the case asked for
 * (--case NAME), else every case and then the control (may be NULL);
 * skipped on the real driver.  Returns main's exit status. */
int tl_sim_cases_main(const tl_case_t *cases, size_t ncases, int argc, char **argv, const tl_control_t *control);

/* The pool a device pointer belongs to (NULL for cuMemAlloc memory) and
 * the bytes that pool has in use. */
CUmemoryPool tl_pool_of(CUdeviceptr ptr);
uint64_t tl_pool_used(CUmemoryPool pool);
/* Device memory in use as cuMemGetInfo tells the program (total - free):
 * blocks allocated and not freed, and freed blocks cupool still waits on.
 * What the pools reserve without using, and the freed blocks cupool keeps
 * ready for reuse in `deferred`, count as free. */
uint64_t tl_held(void);
/* cupool's cuMemGetInfo (*seen, *total), bracketed by the device's own
 * answer just before and just after it (the lower and higher of the two in
 * *device_low, *device_high): other processes on the GPU, and the sanitizer,
 * move the device's free memory by hundreds of MiB, both ways, so the three
 * readings are taken again (up to 100 times) until the device's two agree. */
void tl_mem_get_info_bracketed(size_t *seen, size_t *total, size_t *device_low, size_t *device_high);

/* Fills `bytes` at ptr with a 32-bit pattern (bytes need not be a multiple
 * of 4: the tail gets the pattern's low byte) and checks the first, middle and
 * last words read back; returns 0 when they match. */
void tl_fill(CUdeviceptr ptr, size_t bytes, uint32_t pattern);
int tl_spot_check(CUdeviceptr ptr, size_t bytes, uint32_t pattern);

/* Small deterministic random numbers (xorshift64*). */
uint64_t tl_rand(uint64_t *state);

#endif
