/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupool-options: the launcher's check of the CUPOOL_* variables, made
 * before it runs the program, with the option table and parser the library
 * itself is built from (src/base/options.c), so that both take and refuse
 * the same values with the same words.  The arguments name the variables
 * the launcher set from its own options: a bad value of one of them is an
 * error ("cupool: error: CUPOOL_FREE=\"banana\": expected ..."), exit
 * status 1; a bad value the environment already held gets the library's
 * own warning and its default.  With CUPOOL_VERBOSE=1 it prints every
 * effective value as the library does when it starts.  Installed in
 * pkglibexecdir: the launcher runs it, a user never needs to.
 */
#include "../base/options.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) return printf("cupool-options %s\n", PACKAGE_VERSION), 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("Usage: cupool-options [CUPOOL_NAME...]\n"
                   "Checks the CUPOOL_* variables of the environment as libcupool.so reads them; a bad\n"
                   "value of a variable named is an error (exit status 1), of another a warning.\n"
                   "The cupool launcher runs it before the program.\n");
            return 0;
        }
        if (cupool_options_refuse(argv[i]) != 0) {
            fprintf(stderr, "cupool-options: no option %s in the table\n", argv[i]);
            return 2;
        }
    }
    if (cupool_options_refused()) return 1;
    if (cupool_option(CUPOOL_OPT_VERBOSE)) cupool_options_print();
    return 0;
}
