/*
 * Per-peer limits on the programs' stream log lines (issue 23, item 5): a
 * rapid reset once wrote 26,000 info lines, two per stream. Each peer (its
 * address without the port) may log |per_window| stream lines per window
 * of |window| nanoseconds; the rest are counted, and once the window is
 * over one summary line says what happened ("peer 127.0.0.1: 24812
 * streams in 10 s, 24812 reset by the client; 24792 lines not logged").
 * Thread-safe (a lock): the transport thread reports streams, the main
 * thread flushes. Time is the caller's (the transport's clock).
 */
#ifndef TOOLS_PEERLOG_H
#define TOOLS_PEERLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct tool_peerlog tool_peerlog;

/* NULL when memory runs out (then every line is logged). */
tool_peerlog *tool_peerlog_new(size_t per_window, uint64_t window);
void tool_peerlog_del(tool_peerlog *pl);

/* A stream of |peer| opened (|opened|) or closed (|reset|: ended by the
 * peer's reset or cancel) at |now|. Returns 1 when its line may be
 * logged, 0 when it is only counted. Summaries of windows that ended are
 * logged first. NULL |pl|: always 1. */
int tool_peerlog_stream(tool_peerlog *pl, const char *peer, int opened,
                        int reset, uint64_t now);

/* Logs the summaries of windows over at |now| (call periodically). */
void tool_peerlog_flush(tool_peerlog *pl, uint64_t now);

#endif
