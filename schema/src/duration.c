/*
 * google.protobuf.Duration from text: proto3's JSON form ("1.5s") and Go's
 * time.ParseDuration form ("300ms", "2h45m", "1µs"), which Istio's YAML
 * uses because gogo jsonpb reads Durations with Go's parser.
 */
#include <string.h>

#include "schema_int.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

int sc_fraction(const char *s, size_t len, int32_t *nanos) {
  *nanos = 0;
  if (!len || s[0] != '.')
    return 0;
  size_t i = 1;
  int32_t v = 0;
  while (i < len && is_digit(s[i]) && i <= 9)
    v = v * 10 + (s[i++] - '0');
  if (i == 1 || (i < len && is_digit(s[i])))
    return -1;
  for (size_t k = i; k <= 9; k++)
    v *= 10;
  *nanos = v;
  return (int)i;
}

/* proto3: -?digits(.digits{1,9})?s, within +-315576000000 s. */
static int proto3_form(const char *s, size_t len, int64_t *secs, int32_t *nanos) {
  size_t i = s[0] == '-';
  int neg = (int)i;
  uint64_t v = 0;
  size_t d0 = i;
  for (; i < len && is_digit(s[i]); i++)
    if (v <= (uint64_t)SC_DURATION_MAX_SECONDS) /* then stays above it */
      v = v * 10 + (uint64_t)(s[i] - '0');
  if (i == d0)
    return SC_DUR_SYNTAX;
  int32_t ns;
  int k = sc_fraction(s + i, len - i, &ns);
  if (k < 0)
    return SC_DUR_SYNTAX;
  i += (size_t)k;
  if (i + 1 != len || s[i] != 's')
    return SC_DUR_SYNTAX;
  if (v > (uint64_t)SC_DURATION_MAX_SECONDS)
    return SC_DUR_RANGE;
  *secs = neg ? -(int64_t)v : (int64_t)v;
  *nanos = neg ? -ns : ns;
  return 0;
}

static const struct {
  const char *name;
  uint64_t ns;
} units[] = {
    {"ns", 1},
    {"us", 1000},
    {"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
    {"\xce\xbcs", 1000}, /* U+03BC Greek small letter mu */
    {"ms", 1000000},
    {"s", 1000000000},
    {"m", UINT64_C(60000000000)},
    {"h", UINT64_C(3600000000000)},
};

#define GO_LIMIT (UINT64_C(1) << 63)

/*
 * Go's time.ParseDuration, rule for rule (go1.19 src/time/format.go):
 * [-+]?([0-9]*(\.[0-9]*)?unit)+, or "0" alone after the sign; an integer
 * part beyond 2^63 or a sum beyond 2^63 ns (2^63-1 when positive) is an
 * overflow; a fraction keeps the digits that fit in 2^63 and is scaled in
 * float64 (so "1.1h" gives what Go gives, to the nanosecond).
 */
static int go_form(const char *s, size_t len, int64_t *secs, int32_t *nanos,
                   size_t *unit_at, size_t *unit_len) {
  size_t i = 0;
  int neg = 0;
  if (len && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    i++;
  }
  if (len - i == 1 && s[i] == '0') {
    *secs = 0;
    *nanos = 0;
    return 0;
  }
  if (i == len)
    return SC_DUR_SYNTAX;
  uint64_t d = 0;
  while (i < len) {
    if (!(s[i] == '.' || is_digit(s[i])))
      return SC_DUR_SYNTAX;
    uint64_t v = 0, f = 0;
    double scale = 1;
    size_t p0 = i;
    for (; i < len && is_digit(s[i]); i++) {
      if (v > GO_LIMIT / 10)
        return SC_DUR_GO_RANGE;
      v = v * 10 + (uint64_t)(s[i] - '0');
      if (v > GO_LIMIT)
        return SC_DUR_GO_RANGE;
    }
    int pre = i != p0, post = 0;
    if (i < len && s[i] == '.') {
      size_t f0 = ++i;
      int overflow = 0;
      for (; i < len && is_digit(s[i]); i++) {
        if (overflow)
          continue;
        if (f > (GO_LIMIT - 1) / 10) {
          overflow = 1;
          continue;
        }
        uint64_t y = f * 10 + (uint64_t)(s[i] - '0');
        if (y > GO_LIMIT) {
          overflow = 1;
          continue;
        }
        f = y;
        scale *= 10;
      }
      post = i != f0;
    }
    if (!pre && !post)
      return SC_DUR_SYNTAX;
    size_t u0 = i;
    while (i < len && s[i] != '.' && !is_digit(s[i]))
      i++;
    if (i == u0)
      return SC_DUR_NO_UNIT;
    uint64_t unit = 0;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
      if (strlen(units[k].name) == i - u0 && !memcmp(units[k].name, s + u0, i - u0))
        unit = units[k].ns;
    if (!unit) {
      *unit_at = u0;
      *unit_len = i - u0;
      return SC_DUR_UNIT;
    }
    if (v > GO_LIMIT / unit)
      return SC_DUR_GO_RANGE;
    v *= unit;
    if (f > 0) {
      /* float64 as Go: nanosecond-exact for fractions of an hour. */
      v += (uint64_t)((double)f * ((double)unit / scale));
      if (v > GO_LIMIT)
        return SC_DUR_GO_RANGE;
    }
    d += v;
    if (d > GO_LIMIT)
      return SC_DUR_GO_RANGE;
  }
  if (!neg && d > GO_LIMIT - 1)
    return SC_DUR_GO_RANGE;
  /* Go's Duration / 1e9 and % 1e9, as gogo jsonpb splits it. */
  uint64_t sec = d / 1000000000u;
  int32_t ns = (int32_t)(d % 1000000000u);
  *secs = neg ? -(int64_t)sec : (int64_t)sec;
  *nanos = neg ? -ns : ns;
  return 0;
}

int sc_duration_parse(const char *s, size_t len, int64_t *secs, int32_t *nanos,
                      size_t *unit_at, size_t *unit_len) {
  if (!len)
    return SC_DUR_SYNTAX;
  /* proto3's form first: its range is wider than Go's (Go's int64
   * nanoseconds end at about 292 years). */
  int rc = proto3_form(s, len, secs, nanos);
  if (rc != SC_DUR_SYNTAX)
    return rc;
  return go_form(s, len, secs, nanos, unit_at, unit_len);
}
