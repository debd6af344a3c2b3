/* Logging on stderr and line output on stdout, safe from any thread. */
#include "util/log.h"
#include "util/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *g_prog = "mcp";
static tool_log_level g_level = TOOL_LOG_INFO;
static tool_log_format g_format = TOOL_LOG_TEXT;
static _Thread_local const tool_log_ctx *t_ctx;

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

/* ---- JSON lines ---- */

int tool_log_parse_format(const char *s, tool_log_format *format) {
  if (strcmp(s, "text") == 0)
    *format = TOOL_LOG_TEXT;
  else if (strcmp(s, "json") == 0)
    *format = TOOL_LOG_JSON;
  else
    return -1;
  return 0;
}

void tool_log_set_format(tool_log_format format) { g_format = format; }

void tool_log_push(tool_log_ctx *ctx) {
  ctx->outer = t_ctx;
  t_ctx = ctx;
}

void tool_log_pop(tool_log_ctx *ctx) { t_ctx = ctx->outer; }

/* A line being built in a fixed buffer; what does not fit is dropped (the
 * caller keeps room for the end of the object). */
typedef struct line {
  char *p;
  size_t len, cap;
} line;

static void put(line *l, const char *s, size_t n) {
  if (n > l->cap - l->len)
    n = l->cap - l->len;
  memcpy(l->p + l->len, s, n);
  l->len += n;
}

static void puts_(line *l, const char *s) { put(l, s, strlen(s)); }

/* A JSON string of at most |max| bytes of |s|. */
static void put_string(line *l, const char *s, size_t max) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strnlen(s, max);
  put(l, "\"", 1);
  /* Stops early rather than leave no room for the rest of the object
   * (the closing quote, the field names after it: under 128 bytes). */
  while (n > 0 && l->len + 16 + 128 < l->cap) {
    char esc[8];
    const char *text;
    size_t len, k = tool_json_char(p, n, esc, &text, &len);
    put(l, text, len);
    p += k;
    n -= k;
  }
  put(l, "\"", 1);
}

/* Now, in UTC, to the microsecond: "2024-01-02T03:04:05.123456Z" (both
 * formats; |when| holds 40 bytes). */
static void stamp(char *when, size_t len) {
  struct timespec ts;
  struct tm tm;
  when[0] = '\0';
  clock_gettime(CLOCK_REALTIME, &ts);
  if (gmtime_r(&ts.tv_sec, &tm)) {
    size_t k = strftime(when, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + k, len - k, ".%06ldZ", ts.tv_nsec / 1000);
  }
}

static void log_json(tool_log_level level, const char *msg, int truncated) {
  char buf[16384];
  line l = {buf, 0, sizeof(buf) - 8}; /* room for "}\n" */
  char when[40];
  stamp(when, sizeof(when));
  puts_(&l, "{\"ts\":\"");
  puts_(&l, when);
  puts_(&l, "\",\"level\":\"");
  puts_(&l, level_names[level]);
  puts_(&l, "\",\"prog\":");
  put_string(&l, g_prog, 256);
  puts_(&l, ",\"msg\":");
  if (truncated) {
    char m[2100];
    snprintf(m, sizeof(m), "%s...", msg);
    put_string(&l, m, sizeof(m));
  } else {
    put_string(&l, msg, 4096);
  }
  uint64_t stream = 0;
  const char *peer = NULL, *node = NULL, *coll = NULL;
  for (const tool_log_ctx *c = t_ctx; c; c = c->outer) {
    if (!stream)
      stream = c->stream;
    if (!peer)
      peer = c->peer;
    if (!node)
      node = c->node;
    if (!coll)
      coll = c->collection;
  }
  if (stream) {
    char num[32];
    snprintf(num, sizeof(num), ",\"stream\":%llu", (unsigned long long)stream);
    puts_(&l, num);
  }
  if (peer) {
    puts_(&l, ",\"peer\":");
    put_string(&l, peer, 1024);
  }
  if (node) {
    puts_(&l, ",\"node\":");
    put_string(&l, node, 1024);
  }
  if (coll) {
    puts_(&l, ",\"collection\":");
    put_string(&l, coll, 1024);
  }
  l.cap = sizeof(buf);
  puts_(&l, "}\n");
  /* One write per line, under stderr's lock. */
  flockfile(stderr);
  fwrite(buf, 1, l.len, stderr);
  funlockfile(stderr);
}

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
  if (g_format == TOOL_LOG_JSON) {
    log_json(level, buf, (size_t)n >= sizeof(buf));
    return;
  }
  /* One fprintf per line: stdio locks the stream for the whole call. */
  char when[40];
  stamp(when, sizeof(when));
  fprintf(stderr, "%s %s: %s: %s%s\n", when, g_prog, level_names[level], buf,
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
