/*
 * Logging for the mcp-source and mcp-sink programs: one line per message on
 * stderr, "PROGRAM: LEVEL: message", filtered by a level set once at start.
 * Thread-safe: the transport thread logs too (each line is written whole,
 * under the stream's lock).
 */
#ifndef TOOLS_LOG_H
#define TOOLS_LOG_H

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

#endif /* TOOLS_LOG_H */
