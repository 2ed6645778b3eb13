/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bottom of the base layer: config.h, cuda.h as the driver sees it
 * (cuda_api.h) and the attributes and macros every file of cupool uses
 * (branch hints, the hot-path section, relaxed hint fields, thread-locals,
 * the hash of one 64-bit word).  It names nothing defined elsewhere.
 */
#ifndef CUPOOL_BASE_MACROS_H
#define CUPOOL_BASE_MACROS_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* _GNU_SOURCE for dladdr, dlvsym */
#endif

#include "cuda_api.h"
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CUPOOL_EXPORT __attribute__((visibility("default")))
#define CUPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* The functions of the fast paths (engine/alloc.c, engine/free/free_modes.c,
 * and the shims of shims/memory.c that call them): placed together
 * (.text.hot), each at the start of a cache line, so that the few
 * instruction lines an allocation and a free run stay apart from the rest,
 * which the driver's own code evicts between calls, and stay as few
 * whatever the size of the code before them. */
#define CUPOOL_HOT_PATH __attribute__((hot, aligned(64)))
/* Fields kept under a lock but also read without it, as a hint the reader
 * confirms under the lock (an empty store, no deferred block waiting):
 * written and read whole as relaxed atomics.  On x86-64 and aarch64 these are
 * the plain moves they replace; they keep the unlocked read defined C, and
 * ThreadSanitizer quiet about it.  A write under the lock that no unlocked
 * reader can see mid-way (a list's interior) stays plain. */
#define CUPOOL_HINT_READ(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define CUPOOL_HINT_WRITE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELAXED)
/* For a sanitizer build (-fsanitize=address or thread, tests only: see
 * scripts/sanitize.sh): the dlsym override runs when the sanitizer's
 * runtime, starting, looks up the functions it intercepts, before its shadow
 * memory exists; instrumented code there would crash.  No effect on a
 * normal build. */
#define CUPOOL_NOT_SANITIZED __attribute__((no_sanitize_address, no_sanitize_thread))
/* cupool's thread-locals: initial-exec, a plain %fs-relative access instead
 * of a __tls_get_addr call on every intercepted call.  Fine for a library
 * that is preloaded; one dlopen()ed later takes its few bytes from the
 * static TLS surplus glibc keeps for that. */
#define CUPOOL_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))

#define CUPOOL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* uthash's hash for keys of one 64-bit word (device pointers, sizes): one
 * multiply mixes them well enough, where uthash's default (Jenkins) costs
 * several times more per lookup.  A file defines HASH_FUNCTION as this
 * before it includes uthash.h. */
#define CUPOOL_WORD_HASH(keyptr, keylen, hashv)                                                    \
    do {                                                                                          \
        uint64_t key_;                                                                            \
        memcpy(&key_, (keyptr), sizeof key_);                                                     \
        (void)(keylen);                                                                           \
        (hashv) = (unsigned)((key_ * 0x9E3779B97F4A7C15ull) >> 32);                               \
    } while (0)

#endif
