/* Logging on stderr and line output on stdout, safe from any thread. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *g_prog = "mcp";
static tool_log_level g_level = TOOL_LOG_INFO;

static const char *const level_names[] = {"error", "warning", "info",
                                          "debug"};

void tool_log_init(const char *prog, tool_log_level level) {
  g_prog = prog;
  g_level = level;
}

const char *tool_log_prog(void) { return g_prog; }

int tool_log_parse_level(const char *s, tool_log_level *level) {
  static const struct {
    const char *name;
    tool_log_level level;
  } names[] = {{"error", TOOL_LOG_ERROR}, {"warn", TOOL_LOG_WARN},
               {"warning", TOOL_LOG_WARN}, {"info", TOOL_LOG_INFO},
               {"debug", TOOL_LOG_DEBUG}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(s, names[i].name) == 0) {
      *level = names[i].level;
      return 0;
    }
  }
  return -1;
}

int tool_log_enabled(tool_log_level level) { return level <= g_level; }

void tool_log(tool_log_level level, const char *fmt, ...) {
  if (!tool_log_enabled(level))
    return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  /* One fprintf per line: stdio locks the stream for the whole call. */
  fprintf(stderr, "%s: %s: %s%s\n", g_prog, level_names[level], buf,
          (size_t)n >= sizeof(buf) ? "..." : "");
}

int tool_out_line(const char *line) {
  flockfile(stdout);
  int rv = fputs(line, stdout) < 0 || putc('\n', stdout) == EOF ||
                   fflush(stdout) != 0
               ? -1
               : 0;
  funlockfile(stdout);
  return rv;
}
