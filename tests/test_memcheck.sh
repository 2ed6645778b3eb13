#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every C test program of the suite again, under valgrind's memcheck
# (tests/run-test.sh with CUPOOL_TEST_VALGRIND=1): each program and every
# copy of itself it starts for a mode, a fork or a native comparison.  An
# invalid read or write, a jump on uninitialised memory, or a definite leak
# (cupool's, the simulated driver's or the test's own) fails it.  This is
# how a logging program's fork() was found to leak the chunk cupool's log
# writer held (src/base/log.c, in_writer).  Skipped without valgrind.
# The programs come from the Makefile (CUPOOL_TEST_PROGRAMS); one or more
# names as arguments run only those.
set -u
srcdir=${CUPOOL_SRCDIR:-${CUPOOL_BUILDDIR:-$(pwd)}}
command -v valgrind >/dev/null 2>&1 || { echo "test_memcheck: valgrind is not installed"; exit 77; }
[ "${CUPOOL_TEST_DRIVER:-sim}" = sim ] || { echo "test_memcheck: the simulated driver only"; exit 77; }
exec sh "$srcdir/tests/rerun-programs.sh" memcheck CUPOOL_TEST_VALGRIND=1 -- "$@"
