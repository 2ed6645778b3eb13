/* SPDX-License-Identifier: Apache-2.0 */
/* Helper library B of test_rtld_next: the next definition of next_probe. */
int next_probe(void);
int next_probe(void) { return 2; }
int next_b_linked(void);
int next_b_linked(void) { return 2; }
