/* Randomness for the programs: the store epoch and the reconnection jitter. */
#ifndef TOOLS_RAND_H
#define TOOLS_RAND_H

#include <stddef.h>
#include <stdint.h>

/*
 * A mcp_rand_fn: fills |dest| with |len| bytes from getrandom(2). Should
 * the kernel refuse (no getrandom, seccomp), falls back to a mix of the
 * clocks, the process id and a counter, which still differs between runs.
 * Thread-safe. |user_data| is unused.
 */
void tool_rand(uint8_t *dest, size_t len, void *user_data);

#endif /* TOOLS_RAND_H */
