/*
 * Logging for the mcp-source and mcp-sink programs: one line per message on
 * stderr, filtered by a level set once at start, in one of two formats:
 *   text (default): "TIME PROGRAM: LEVEL: message", TIME as in json
 *     ("2024-01-02T03:04:05.123456Z", UTC);
 *   json: one object per line, {"ts":"2024-01-02T03:04:05.123456Z",
 *     "level":"info","prog":"mcp-sink","msg":"...", then the fields of the
 *     thread's log context when set: "stream" (number), "peer", "node",
 *     "collection"}. Strings are escaped (bytes that are not UTF-8 become
 *     U+FFFD), so every line parses.
 * Thread-safe: the transport thread logs too (each line is written whole,
 * under the stream's lock).
 */
#ifndef TOOLS_LOG_H
#define TOOLS_LOG_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define TOOL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TOOL_PRINTF(f, a)
#endif

typedef enum tool_log_level {
  TOOL_LOG_ERROR = 0,
  TOOL_LOG_WARN = 1,
  TOOL_LOG_INFO = 2,
  TOOL_LOG_DEBUG = 3
} tool_log_level;

/* Sets the program name (kept by pointer: a string literal or argv[0]) and
 * the level (messages above it are dropped). Call before any thread starts. */
void tool_log_init(const char *prog, tool_log_level level);

/* The program name given to tool_log_init(). */
const char *tool_log_prog(void);

/* Parses "error", "warn" (or "warning"), "info", "debug". 0 on success, -1
 * for anything else (|*level| untouched). */
int tool_log_parse_level(const char *s, tool_log_level *level);

/* 1 when messages of |level| are written. */
int tool_log_enabled(tool_log_level level);

void tool_log(tool_log_level level, const char *fmt, ...) TOOL_PRINTF(2, 3);

#define log_error(...) tool_log(TOOL_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) tool_log(TOOL_LOG_WARN, __VA_ARGS__)
#define log_info(...) tool_log(TOOL_LOG_INFO, __VA_ARGS__)
#define log_debug(...) tool_log(TOOL_LOG_DEBUG, __VA_ARGS__)

/* Writes |line| and a newline on stdout and flushes, under stdout's lock
 * (the JSON output of mcp-sink). Returns 0, or -1 when the write failed. */
int tool_out_line(const char *line);

/* ---- format and context ---- */

typedef enum tool_log_format {
  TOOL_LOG_TEXT = 0,
  TOOL_LOG_JSON = 1
} tool_log_format;

/* Parses "text" or "json". 0 on success, -1 otherwise (untouched). */
int tool_log_parse_format(const char *s, tool_log_format *format);

/* Sets the format (before any thread starts). */
void tool_log_set_format(tool_log_format format);

/*
 * Per-thread context of the log lines written while it is pushed (JSON
 * only; text lines do not change). Contexts nest: a field not set (0 or
 * NULL) in the innermost one is taken from the one around it. Strings are
 * borrowed until the context is popped.
 */
typedef struct tool_log_ctx {
  uint64_t stream;        /* 0: none */
  const char *peer;       /* NULL: none */
  const char *node;       /* SinkNode id */
  const char *collection;
  const struct tool_log_ctx *outer; /* set by tool_log_push() */
} tool_log_ctx;

void tool_log_push(tool_log_ctx *ctx);
/* Pops |ctx| (the innermost one). */
void tool_log_pop(tool_log_ctx *ctx);

/*
 * TOOL_LOG_CONTEXT(.stream = id, .peer = peer); at the top of a block
 * pushes a context that is popped when the block is left (GCC and clang's
 * cleanup attribute; elsewhere it does nothing).
 */
#if defined(__GNUC__) || defined(__clang__)
#define TOOL_LOG_CONTEXT(...)                                                \
  tool_log_ctx tool_log_ctx_ __attribute__((cleanup(tool_log_pop))) = {      \
      __VA_ARGS__};                                                          \
  tool_log_push(&tool_log_ctx_)
#else
#define TOOL_LOG_CONTEXT(...) ((void)0)
#endif

#endif /* TOOLS_LOG_H */
