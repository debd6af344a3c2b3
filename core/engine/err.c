#include <stdarg.h>

#include "engine_int.h"

const char *mcp_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define MCP_ERR_STR_(n, v, g, s) \
  case v:                        \
    return s;
    MCP_ERRNO_MAP(MCP_ERR_STR_)
#undef MCP_ERR_STR_
  default:
    return "unknown error";
  }
}

int mcp_err_is_fatal(int err) {
  switch (err) {
#define MCP_ERR_FATAL_(n, v, g, s) \
  case v:                          \
    return (v) <= MCP_ERR_FATAL;
    MCP_ERRNO_MAP(MCP_ERR_FATAL_)
#undef MCP_ERR_FATAL_
  default:
    return 0;
  }
}

int mcp_error_grpc_status(int err) {
  switch (err) {
  case 0:
    return MCP_CODE_OK;
#define MCP_ERR_GRPC_(n, v, g, s) \
  case v:                         \
    return g;
    MCP_ERRNO_MAP(MCP_ERR_GRPC_)
#undef MCP_ERR_GRPC_
  default:
    return MCP_CODE_UNKNOWN;
  }
}

static void fmt_put(char *buf, size_t n, size_t *k, const char *s, size_t l) {
  for (size_t i = 0; i < l && *k + 1 < n; ++i) {
    buf[(*k)++] = s[i];
  }
}

static void fmt_u(char *buf, size_t n, size_t *k, uint64_t v, int neg) {
  char tmp[24];
  size_t d = 0;
  do {
    tmp[sizeof(tmp) - 1 - d++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  if (neg) {
    tmp[sizeof(tmp) - 1 - d++] = '-';
  }
  fmt_put(buf, n, k, tmp + sizeof(tmp) - d, d);
}

void mcp_fmt(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  size_t k = 0;
  if (!n) {
    return;
  }
  va_start(ap, fmt);
  for (const char *p = fmt; *p; ++p) {
    if (*p != '%') {
      fmt_put(buf, n, &k, p, 1);
      continue;
    }
    ++p;
    if (*p == 's') {
      const char *s = va_arg(ap, const char *);
      s = s ? s : "(null)";
      fmt_put(buf, n, &k, s, strlen(s));
    } else if (p[0] == 'z' && p[1] == 'u') {
      ++p;
      fmt_u(buf, n, &k, va_arg(ap, size_t), 0);
    } else if (*p == 'd') {
      int v = va_arg(ap, int);
      fmt_u(buf, n, &k, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, v < 0);
    } else if (*p == '%') {
      fmt_put(buf, n, &k, "%", 1);
    } else {
      break; /* unsupported: stop rather than misread the arguments */
    }
  }
  va_end(ap);
  buf[k] = '\0';
}
