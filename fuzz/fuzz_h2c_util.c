/*
 * fuzz_h2c_util: the pure helpers of the h2c transport that read what a
 * peer sends (transport-h2c/src/util.c), each against a reference written
 * here from the specification:
 *   - grpc-timeout (1-8 digits and a unit; saturating nanoseconds);
 *   - grpc-message percent-encoding: encode then decode is the identity,
 *     the encoding is printable ASCII; decoding never grows a string;
 *   - base64url of HTTP2-Settings (RFC 4648 section 5, padding optional),
 *     into a buffer of exactly the documented size (len * 3 / 4 + 3);
 *   - comma-separated token lists (Upgrade, TE, Connection);
 *   - gRPC content types;
 *   - dial addresses.
 * Input: one byte choosing the helper, then the bytes (a C string: up to
 * the first NUL). The gRPC message deframer and the HTTP/1.1 Upgrade
 * handshake are not reachable without a connection (see fuzz/README.md).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_util.h"
#include "util.h"

static void run_timeout(const char *s) {
  mcp_tstamp out = 42;
  int rv = mcp_h2c_parse_timeout(s, &out);
  /* Reference: TimeoutValue = 1*8DIGIT, TimeoutUnit = H / M / S / m / u / n */
  size_t n = strlen(s);
  int ok = n >= 2 && n <= 9;
  unsigned long long x = 0;
  for (size_t i = 0; ok && i + 1 < n; ++i) {
    ok = s[i] >= '0' && s[i] <= '9';
    x = x * 10 + (unsigned long long)(s[i] - '0');
  }
  const char *units = "HMSmun";
  static const unsigned long long mult[6] = {3600000000000ULL, 60000000000ULL,
                                             1000000000ULL, 1000000ULL, 1000ULL,
                                             1ULL};
  const char *u = ok ? strchr(units, s[n - 1]) : NULL;
  ok = ok && u && s[n - 1];
  FZ_CHECK((rv == 0) == ok, "grpc-timeout '%s': %d, reference %d", s, rv, ok);
  if (ok) {
    unsigned long long m = mult[u - units];
    mcp_tstamp want = x > UINT64_MAX / m ? MCP_TSTAMP_MAX : x * m;
    FZ_CHECK(out == want, "grpc-timeout '%s': %llu, reference %llu", s,
             (unsigned long long)out, (unsigned long long)want);
  } else {
    FZ_CHECK(out == 42, "a malformed grpc-timeout set the output");
  }
}

static void run_percent(const char *s) {
  mcp_buf b = {0};
  FZ_CHECK(mcp_h2c_percent_encode(s, &b) == 0, "encode");
  FZ_CHECK(mcp_buf_append(&b, "", 1) == 0, "append");
  for (size_t i = 0; i + 1 < b.len; ++i) {
    FZ_CHECK(b.p[i] >= 0x20 && b.p[i] <= 0x7e, "encoded byte 0x%02x", b.p[i]);
  }
  mcp_h2c_percent_decode((char *)b.p);
  FZ_CHECK(strcmp((const char *)b.p, s) == 0, "percent round trip of '%s'", s);
  mcp_buf_free(&b);
  /* Decoding what a peer sent, in place. */
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  FZ_CHECK(d, "out of memory");
  memcpy(d, s, n + 1);
  mcp_h2c_percent_decode(d);
  FZ_CHECK(strlen(d) <= n, "percent_decode grew a string");
  free(d);
}

static int b64ref(char c) {
  const char *a =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char *p = c ? strchr(a, c) : NULL;
  if (p) {
    return (int)(p - a);
  }
  return c == '+' ? 62 : c == '/' ? 63 : -1; /* the standard alphabet too */
}

static void run_base64(const char *s) {
  size_t len = strlen(s);
  uint8_t *out = malloc(len * 3 / 4 + 3); /* the documented room, exactly */
  FZ_CHECK(out, "out of memory");
  long n = mcp_h2c_base64url_decode(s, len, out);
  /* Reference. */
  size_t l = len;
  while (l > 0 && s[l - 1] == '=') {
    l--;
  }
  long want = l % 4 == 1 ? -1 : (long)(l * 6 / 8);
  for (size_t i = 0; want >= 0 && i < l; ++i) {
    if (b64ref(s[i]) < 0) {
      want = -1;
    }
  }
  FZ_CHECK(n == want, "base64url of '%s': %ld, reference %ld", s, n, want);
  if (n > 0) {
    uint32_t acc = 0;
    int bits = 0;
    long k = 0;
    for (size_t i = 0; i < l; ++i) {
      acc = acc << 6 | (uint32_t)b64ref(s[i]);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        FZ_CHECK(out[k] == (uint8_t)(acc >> bits), "base64url byte %ld", k);
        k++;
        acc &= (1u << bits) - 1;
      }
    }
  }
  free(out);
}

static void run_token(const char *s) {
  /* The token is the part after the first ';' (or "h2c"). */
  const char *semi = strchr(s, ';');
  char tok[64] = "h2c";
  char *list = strdup(s);
  FZ_CHECK(list, "out of memory");
  if (semi) {
    list[semi - s] = '\0';
    snprintf(tok, sizeof(tok), "%s", semi + 1);
  }
  int got = mcp_h2c_has_token(list, tok);
  /* Reference: split on ',', trim spaces and tabs, compare ignoring case. */
  int want = 0;
  size_t tl = strlen(tok);
  for (char *p = list; !want;) {
    char *e = strchr(p, ',');
    char *end = e ? e : p + strlen(p);
    char *b = p;
    while (b < end && (*b == ' ' || *b == '\t')) {
      b++;
    }
    char *t = end;
    while (t > b && (t[-1] == ' ' || t[-1] == '\t')) {
      t--;
    }
    if ((size_t)(t - b) == tl && tl && strncasecmp(b, tok, tl) == 0) {
      want = 1;
    }
    if (!e) {
      break;
    }
    p = e + 1;
  }
  if (tl == 0) {
    want = got; /* an empty token: unspecified */
  }
  FZ_CHECK(got == want, "has_token('%s', '%s') = %d, reference %d", list, tok,
           got, want);
  free(list);
  int ct = mcp_h2c_is_grpc_content_type(s);
  int ctw = strncasecmp(s, "application/grpc", 16) == 0 &&
            (s[16] == '\0' || s[16] == '+' || s[16] == ';');
  FZ_CHECK(ct == ctw, "is_grpc_content_type('%s') = %d", s, ct);
}

static void run_addr(const char *s) {
  mcp_h2c_addr a;
  int rv = mcp_h2c_addr_parse(s, &a);
  FZ_CHECK(rv == 0 || rv == MCP_ERR_INVALID_ARGUMENT || rv == MCP_ERR_NOMEM,
           "addr_parse: %d", rv);
  if (rv == 0) {
    if (a.is_unix) {
      FZ_CHECK(a.path && a.path[0], "unix address without path");
    } else {
      FZ_CHECK(a.host && a.host[0] && a.port, "address without host or port");
      char *end = NULL;
      long port = strtol(a.port, &end, 10);
      FZ_CHECK(*a.port && !*end && port >= 0 && port <= 65535, "port '%s'",
               a.port);
    }
  } else {
    FZ_CHECK(!a.host && !a.port && !a.path, "a failed parse left strings");
  }
  mcp_h2c_addr_free(&a);
  (void)mcp_h2c_reason((int)strlen(s) * 7);
  (void)mcp_h2c_status_from_http((int)strlen(s) * 13);
  (void)mcp_h2c_status_from_h2_error((uint32_t)strlen(s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) {
    return 0;
  }
  char *s = malloc(size);
  FZ_CHECK(s, "out of memory");
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  switch (data[0] % 5) {
  case 0:
    run_timeout(s);
    break;
  case 1:
    run_percent(s);
    break;
  case 2:
    run_base64(s);
    break;
  case 3:
    run_token(s);
    break;
  default:
    run_addr(s);
    break;
  }
  free(s);
  return 0;
}
