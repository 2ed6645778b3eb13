/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tools' command lines, parsed by getopt_long with its own messages
 * off (opterr = 0, an option string opening with ':'): every option with a
 * value takes it as -x VALUE, --name VALUE or --name=VALUE, and a refused
 * option is named in the program's words, a missing value as such.
 */
#ifndef CUPOOL_TOOLS_CLI_H
#define CUPOOL_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* After getopt_long returned ':' or '?' for argv[optind - 1]: says why. */
static inline void cli_refused(const char *prog, int c, char **argv, const struct option *longs)
{
    const char *arg = argv[optind - 1];
    if (strncmp(arg, "--", 2) == 0) {
        size_t len = strcspn(arg, "=");
        if (c == ':') {
            fprintf(stderr, "%s: option %.*s needs a value\n", prog, (int)len, arg);
            return;
        }
        for (const struct option *o = longs; o->name; o++)
            if (arg[len] == '=' && strlen(o->name) == len - 2 && strncmp(o->name, arg + 2, len - 2) == 0) {
                fprintf(stderr, "%s: option --%s takes no value\n", prog, o->name);
                return;
            }
        fprintf(stderr, "%s: unknown option %.*s\n", prog, (int)len, arg);
    } else if (c == ':') fprintf(stderr, "%s: option -%c needs a value\n", prog, optopt);
    else fprintf(stderr, "%s: unknown option -%c\n", prog, optopt ? optopt : '?');
}

#endif
