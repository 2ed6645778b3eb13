/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool's dlsym override keeps RTLD_NEXT semantics: library A's
 * dlsym(RTLD_NEXT, "next_probe") must find library B's definition (the next
 * one after A in the search order), not A's own nor one found relative to
 * libcupool.so.  glibc decides "next" from the caller's address, so a dlsym
 * wrapper that is not a tail call would break this.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <string.h>

int next_probe(void);
int next_b_linked(void);
typedef int probe_fn(void);
probe_fn *lookup_next(void);

int main(void)
{
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    /* cupool's dlsym is the one programs bind to. */
    Dl_info info;
    CHECK_TRUE(dladdr(dlsym(RTLD_DEFAULT, "dlsym"), &info) && strstr(info.dli_fname, "libcupool"));
    CHECK_EQ(next_b_linked(), 2); /* keeps B linked under --as-needed */
    CHECK_EQ(next_probe(), 1);    /* A comes first */
    probe_fn *next = lookup_next();
    CHECK_TRUE(next != NULL);
    CHECK_EQ(next(), 2);
    return 0;
}
