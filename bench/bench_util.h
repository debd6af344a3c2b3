/*
 * Shared helpers for libmcp's benchmarks: a monotonic clock, medians, the
 * machine-readable result lines, a readable result table, and a counting
 * allocator for mcp_mem.
 *
 * Output contract (read by bench/run.sh and by tools outside the repo):
 * every result is one line on stdout
 *
 *     BENCH <name> <value> <unit>
 *
 * where <name> matches [a-z0-9_]+, <value> is a decimal number and <unit>
 * one word ("ns", "ms", "x", "bytes", "resources_per_s", ...). Progress
 * and the readable table go to stdout too, but never start with "BENCH ".
 */
#ifndef MCP_BENCH_UTIL_H
#define MCP_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "mcp/mcp.h"

/* CLOCK_MONOTONIC in nanoseconds: what every result is measured with. */
uint64_t bu_now_ns(void);
/* CLOCK_THREAD_CPUTIME_ID in nanoseconds: CPU time of the calling thread,
 * printed beside wall times as a check on a loaded machine. */
uint64_t bu_cpu_ns(void);

/* Wall and CPU time together. */
typedef struct bu_sw {
  uint64_t wall, cpu;
} bu_sw;
bu_sw bu_sw_start(void);
/* Nanoseconds since |sw| started: wall time returned, CPU time in |*cpu|
 * (may be NULL). */
double bu_sw_ns(const bu_sw *sw, double *cpu);

/* Median of |v[0..n)| (sorts |v| in place). 0 when n == 0. */
double bu_median(double *v, size_t n);
/* Smallest and largest of |v[0..n)|. */
double bu_min(const double *v, size_t n);
double bu_max(const double *v, size_t n);

/* Progress message on stdout, prefixed with "# " and flushed. */
void bu_note(const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/*
 * Records one result: prints "BENCH <name> <value> <unit>" at once (so
 * partial runs still report), and keeps a row for bu_table(). |target| is
 * a readable target ("<= 2", ">= 20", ...) or NULL for informational
 * results; |verdict| is 1 (target holds), 0 (missed) or -1 (no target).
 * |what| is a short readable description.
 */
void bu_result(const char *name, double value, const char *unit,
               const char *what, const char *target, int verdict);

/* Prints the readable table of every result recorded so far. */
void bu_table(const char *title);

/* Number of results recorded with a target that was missed. */
size_t bu_missed(void);

/*
 * A counting allocator: every block carries a 16-byte header holding its
 * size, so live bytes are exact. |overhead| estimates what glibc's malloc
 * really uses for the live blocks (8-byte chunk header, 16-byte alignment,
 * 32-byte minimum chunk) beyond the bytes requested.
 */
typedef struct bu_count_mem {
  mcp_mem mem;          /* give &mem to the objects to measure */
  size_t live_bytes;    /* requested bytes of live blocks */
  size_t live_blocks;
  size_t chunk_bytes;   /* glibc chunk sizes of the live blocks */
  size_t peak_bytes;    /* highest live_bytes seen */
  uint64_t allocs;      /* malloc/calloc/realloc(NULL) calls */
} bu_count_mem;

void bu_count_mem_init(bu_count_mem *c);

/* glibc's chunk size for a request of |n| bytes (x86-64/aarch64). */
size_t bu_glibc_chunk(size_t n);

/* Fills |p[0..n)| with deterministic bytes from |seed|. */
void bu_fill(uint8_t *p, size_t n, uint64_t seed);

#endif /* MCP_BENCH_UTIL_H */
