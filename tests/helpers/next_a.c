/* SPDX-License-Identifier: Apache-2.0 */
/* Helper library A of test_rtld_next: next_probe() is 1, and lookup_next()
 * asks dlsym(RTLD_NEXT) for the next definition after this library. */
#define _GNU_SOURCE
#include <dlfcn.h>

int next_probe(void);
int next_probe(void) { return 1; }

typedef int probe_fn(void);
probe_fn *lookup_next(void);
probe_fn *lookup_next(void)
{
    /* Not a tail call: glibc must see this library as dlsym's caller. */
    probe_fn *volatile fn = (probe_fn *)dlsym(RTLD_NEXT, "next_probe");
    return fn;
}
