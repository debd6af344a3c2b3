/* madvise() and MADV_HUGEPAGE are not POSIX. */
#define _DEFAULT_SOURCE
#include "util.h"


#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void mcp_h2c_mem_init(mcp_mem *dst, const mcp_mem *src) {
  *dst = src ? *src : *mcp_mem_default();
}

void *mcp_h2c_malloc(const mcp_mem *m, size_t n) {
  n = n ? n : 1;
  return m ? m->malloc(n, m->user_data) : malloc(n);
}

void *mcp_h2c_calloc(const mcp_mem *m, size_t nmemb, size_t size) {
  if (nmemb == 0 || size == 0)
    nmemb = size = 1;
  return m ? m->calloc(nmemb, size, m->user_data) : calloc(nmemb, size);
}

void *mcp_h2c_realloc(const mcp_mem *m, void *p, size_t n) {
  n = n ? n : 1;
  return m ? m->realloc(p, n, m->user_data) : realloc(p, n);
}

void mcp_h2c_hint_large(void *p, size_t len) { mcp_hint_large(p, len); }

void mcp_h2c_free(const mcp_mem *m, void *p) {
  if (!p)
    return;
  if (m)
    m->free(p, m->user_data);
  else
    free(p);
}

char *mcp_h2c_strndup(const mcp_mem *m, const char *s, size_t n) {
  char *d = mcp_h2c_malloc(m, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

char *mcp_h2c_strdup(const mcp_mem *m, const char *s) {
  return mcp_h2c_strndup(m, s, strlen(s));
}

int mcp_h2c_buf_puts(mcp_buf *b, const char *s) {
  return mcp_buf_append(b, s, strlen(s));
}

void mcp_h2c_addr_free(mcp_h2c_addr *a) {
  mcp_h2c_free(a->mem, a->host);
  mcp_h2c_free(a->mem, a->port);
  mcp_h2c_free(a->mem, a->path);
  memset(a, 0, sizeof(*a));
}

int mcp_h2c_addr_parse(const char *s, mcp_h2c_addr *a) {
  return mcp_h2c_addr_parse_mem(s, a, NULL);
}

int mcp_h2c_addr_parse_mem(const char *s, mcp_h2c_addr *a,
                           const mcp_mem *mem) {
  memset(a, 0, sizeof(*a));
  if (!s)
    return MCP_ERR_INVALID_ARGUMENT;
  if (strncmp(s, "dns:///", 7) == 0)
    s += 7;
  else if (strncmp(s, "http://", 7) == 0)
    s += 7;
  if (strncmp(s, "unix:", 5) == 0) {
    s += 5;
    if (strncmp(s, "//", 2) == 0) /* unix:///abs/path */
      s += 2;
    if (!*s)
      return MCP_ERR_INVALID_ARGUMENT;
    a->is_unix = 1;
    a->mem = mem;
    a->path = mcp_h2c_strdup(mem, s);
    return a->path ? 0 : MCP_ERR_NOMEM;
  }
  const char *host = s, *host_end, *port;
  if (*s == '[') {
    host = s + 1;
    host_end = strchr(host, ']');
    if (!host_end || host_end[1] != ':')
      return MCP_ERR_INVALID_ARGUMENT;
    port = host_end + 2;
  } else {
    host_end = strrchr(s, ':');
    if (!host_end || memchr(s, ':', (size_t)(host_end - s)))
      return MCP_ERR_INVALID_ARGUMENT; /* none, or an unbracketed IPv6 */
    port = host_end + 1;
  }
  size_t plen = strlen(port);
  if (plen == 0 || plen > 5 || host_end == host)
    return MCP_ERR_INVALID_ARGUMENT;
  long v = 0;
  for (size_t i = 0; i < plen; ++i) {
    if (!isdigit((unsigned char)port[i]))
      return MCP_ERR_INVALID_ARGUMENT;
    v = v * 10 + (port[i] - '0');
  }
  if (v > 65535)
    return MCP_ERR_INVALID_ARGUMENT;
  a->mem = mem;
  a->host = mcp_h2c_strndup(mem, host, (size_t)(host_end - host));
  a->port = mcp_h2c_strndup(mem, port, plen);
  if (!a->host || !a->port) {
    mcp_h2c_addr_free(a);
    return MCP_ERR_NOMEM;
  }
  return 0;
}

int mcp_h2c_parse_timeout(const char *v, mcp_tstamp *out) {
  size_t n = v ? strlen(v) : 0;
  if (n < 2 || n > 9)
    return -1;
  uint64_t x = 0;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (!isdigit((unsigned char)v[i]))
      return -1;
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  uint64_t unit;
  switch (v[n - 1]) {
  case 'H': unit = 3600 * MCP_SECONDS; break;
  case 'M': unit = 60 * MCP_SECONDS; break;
  case 'S': unit = MCP_SECONDS; break;
  case 'm': unit = MCP_MILLISECONDS; break;
  case 'u': unit = 1000; break;
  case 'n': unit = 1; break;
  default: return -1;
  }
  *out = x > UINT64_MAX / unit ? MCP_TSTAMP_MAX : x * unit;
  return 0;
}

int mcp_h2c_percent_encode(const char *in, mcp_buf *b) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)in; *p; ++p) {
    if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
      if (mcp_buf_append(b, p, 1) < 0)
        return MCP_ERR_NOMEM;
    } else {
      char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
      if (mcp_buf_append(b, e, 3) < 0)
        return MCP_ERR_NOMEM;
    }
  }
  return 0;
}

void mcp_h2c_percent_decode(char *s) {
  char *w = s;
  for (const char *r = s; *r;) {
    int hi, lo;
    if (r[0] == '%' && (hi = mcp_hex_value(r[1])) >= 0 && (lo = mcp_hex_value(r[2])) >= 0) {
      *w++ = (char)(hi << 4 | lo);
      r += 3;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

long mcp_h2c_base64url_decode(const char *in, size_t len, uint8_t *out) {
  return mcp_base64_decode(in, len, out, 0);
}

int mcp_h2c_status_from_http(int http_status) {
  switch (http_status) {
  case 400: return MCP_CODE_INTERNAL;
  case 401: return 16; /* UNAUTHENTICATED */
  case 403: return 7;  /* PERMISSION_DENIED */
  case 404: return MCP_CODE_UNIMPLEMENTED;
  case 429:
  case 502:
  case 503:
  case 504: return MCP_CODE_UNAVAILABLE;
  default: return MCP_CODE_UNKNOWN;
  }
}

int mcp_h2c_status_from_h2_error(uint32_t code) {
  switch (code) {
  case 0x7: return MCP_CODE_UNAVAILABLE;        /* REFUSED_STREAM */
  case 0x8: return MCP_CODE_CANCELLED;          /* CANCEL */
  case 0xb: return MCP_CODE_RESOURCE_EXHAUSTED; /* ENHANCE_YOUR_CALM */
  case 0xc: return 7;                           /* INADEQUATE_SECURITY */
  default: return MCP_CODE_INTERNAL;
  }
}

const char *mcp_h2c_reason(int s) {
  switch (s) {
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 204: return "No Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 304: return "Not Modified";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 413: return "Payload Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  default: return s < 400 ? "OK" : s < 500 ? "Client Error" : "Server Error";
  }
}

int mcp_h2c_is_grpc_content_type(const char *ct) {
  static const char g[] = "application/grpc";
  if (!ct || strncasecmp(ct, g, sizeof(g) - 1) != 0)
    return 0;
  char c = ct[sizeof(g) - 1];
  return c == '\0' || c == '+' || c == ';';
}

int mcp_h2c_has_token(const char *list, const char *token) {
  size_t tl = strlen(token);
  const char *p = list;
  while (p && *p) {
    while (*p == ' ' || *p == '\t' || *p == ',')
      p++;
    const char *e = p;
    while (*e && *e != ',')
      e++;
    const char *t = e;
    while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
      t--;
    if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0)
      return 1;
    p = e;
  }
  return 0;
}
