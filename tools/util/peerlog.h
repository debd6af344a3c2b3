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

/* Flags of a closed stream. */
#define TOOL_PEERLOG_RESET 1 /* ended by the peer's reset or cancel */
#define TOOL_PEERLOG_ASKED 2 /* it had received a request (a push went out) */

/* A stream of |peer| opened (|opened|) or closed (|flags|) at |now|.
 * Returns 1 when its line may be logged, 0 when it is only counted.
 * Summaries of windows that ended are logged first. NULL |pl|: always 1.
 *
 * Issue 23, item 6: a sink whose receive limit is below a push's size
 * resets each stream after the request and redials at once. When
 * TOOL_PEERLOG_FAILING_MIN streams of a peer in one window were reset
 * after asking, one warning says so, once per peer (for the process's
 * life; at most 4096 peers remembered), with the largest push of the
 * window (tool_peerlog_push()): "peer 127.0.0.1: 57 streams in 5 s were
 * reset by the client after asking; the largest push lately was
 * istio/networking/v1alpha3/virtualservices (21.3 MB): a gRPC receive
 * limit (4 MiB by default) below that is the likely cause; raise it on the
 * sink (Istio: --mcpMaxMsgSize). Its new streams are paced at
 * --stream-rate." (without a push above 4 MiB: "...; the largest push
 * lately was C (N bytes); the sink's log says why it fails"). */
#define TOOL_PEERLOG_FAILING_MIN 20
int tool_peerlog_stream(tool_peerlog *pl, const char *peer, int opened,
                        int flags, uint64_t now);

/* A push of |bytes| for |collection| went out at |now| (the largest of
 * the window is kept for the warning above). */
void tool_peerlog_push(tool_peerlog *pl, const char *collection,
                       size_t bytes, uint64_t now);

/* Logs the summaries of windows over at |now| (call periodically). */
void tool_peerlog_flush(tool_peerlog *pl, uint64_t now);

#endif
