/*
 * The one YAML reader (mcp_schema_yaml_read()) and the one YAML 1.2
 * core-schema scalar resolver (mcp_schema_yaml_resolve()) of the project:
 * the schema library's trees (tree.c) and mcp-source's loader
 * (tools/loader/config_doc.c) both read YAML through them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "schema_int.h"

/* ================================================================== */
/* Scalars: YAML 1.2 core schema                                       */
/* ================================================================== */

/* |s| is |w| (lower case), |w| capitalised, or |w| in capitals: the three
 * spellings YAML 1.2 gives null, true, false and .inf. One pass
 * instead of a strcmp() per spelling: the resolver runs on every plain
 * scalar that starts like one of them. */
static int spelled(const char *s, const char *w) {
  int caps = s[0] != w[0];
  if (caps && s[0] != w[0] - ('a' - 'A'))
    return 0;
  caps = caps && s[1] >= 'A' && s[1] <= 'Z';
  size_t i = 1;
  for (; w[i]; i++)
    if (s[i] != (caps ? w[i] - ('a' - 'A') : w[i]))
      return 0;
  return !s[i];
}

static int is_null_text(const char *s) {
  return !*s || (s[0] == '~' && !s[1]) || spelled(s, "null");
}

static int is_bool_text(const char *s, int *v) {
  if (spelled(s, "true"))
    return *v = 1;
  if (spelled(s, "false"))
    return !(*v = 0);
  return 0;
}

static int dig(char c) { return c >= '0' && c <= '9'; }

/* 0o.. and 0x.. (digits of either case), in a double: they may be wider
 * than 64 bits. */
static int radix_int(const char *s, unsigned base, double *v) {
  double d = 0;
  if (!*s)
    return 0;
  for (; *s; s++) {
    unsigned x;
    char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
    if (dig(c))
      x = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      x = (unsigned)(c - 'a' + 10);
    else
      return 0;
    if (x >= base)
      return 0;
    d = d * base + x;
  }
  if (v)
    *v = d;
  return 1;
}

static int is_int_text(const char *s, double *v) {
  if (s[0] == '0' && s[1] == 'o')
    return radix_int(s + 2, 8, v);
  if (s[0] == '0' && s[1] == 'x')
    return radix_int(s + 2, 16, v);
  const char *p = s + (*s == '-' || *s == '+');
  if (!*p)
    return 0;
  for (; *p; p++)
    if (!dig(*p))
      return 0;
  if (v)
    *v = strtod(s, NULL);
  return 1;
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?, [-+]?.inf, .nan */
static int is_float_text(const char *s, double *v) {
  const char *p = s + (*s == '-' || *s == '+');
  if (p[0] == '.' && spelled(p + 1, "inf")) {
    if (v)
      *v = *s == '-' ? -INFINITY : INFINITY;
    return 1;
  }
  /* Not spelled(): the capitalised form is .NaN. */
  if (s[0] == '.' && (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN"))) {
    if (v)
      *v = NAN;
    return 1;
  }
  size_t n = 0;
  for (; dig(*p); p++)
    n++;
  if (*p == '.')
    for (p++; dig(*p); p++)
      n++;
  if (!n)
    return 0;
  if (*p == 'e' || *p == 'E') {
    p += 1 + (p[1] == '-' || p[1] == '+');
    if (!dig(*p))
      return 0;
    while (dig(*p))
      p++;
  }
  if (*p)
    return 0;
  if (v)
    *v = strtod(s, NULL);
  return 1;
}

const char *mcp_schema_yaml_resolve(const char *s, const char *tag, int plain,
                                    mcp_schema_kind *kind, int *boolean, double *num) {
  *kind = MCP_SCHEMA_STRING;
  if (!tag) {
    if (!plain)
      return NULL;
    /* Most plain scalars are words: only these first bytes (or none) can
     * start a null, a boolean or a number. */
    if (!sc_yaml_may_resolve(s[0]))
      return NULL;
    if (is_null_text(s))
      *kind = MCP_SCHEMA_NULL;
    else if (is_bool_text(s, boolean))
      *kind = MCP_SCHEMA_BOOL;
    else if (is_int_text(s, num) || is_float_text(s, num))
      *kind = MCP_SCHEMA_NUMBER;
    return NULL;
  }
  if (!strcmp(tag, "!") || !strcmp(tag, YAML_STR_TAG))
    return NULL;
  if (!strcmp(tag, YAML_NULL_TAG)) {
    *kind = MCP_SCHEMA_NULL;
    return is_null_text(s) ? NULL : "!!null on a non-null value";
  }
  if (!strcmp(tag, YAML_BOOL_TAG)) {
    *kind = MCP_SCHEMA_BOOL;
    return is_bool_text(s, boolean) ? NULL : "!!bool on a non-boolean value";
  }
  if (!strcmp(tag, YAML_INT_TAG)) {
    *kind = MCP_SCHEMA_NUMBER;
    return is_int_text(s, num) ? NULL : "!!int on a non-integer value";
  }
  if (!strcmp(tag, YAML_FLOAT_TAG)) {
    *kind = MCP_SCHEMA_NUMBER;
    return is_int_text(s, num) || is_float_text(s, num) ? NULL
                                                        : "!!float on a non-numeric value";
  }
  return "unsupported tag";
}

const char *mcp_schema_yaml_collection_tag(const char *tag, mcp_schema_kind kind) {
  if (!tag || !strcmp(tag, "!") ||
      !strcmp(tag, kind == MCP_SCHEMA_MAP ? YAML_MAP_TAG : YAML_SEQ_TAG))
    return NULL;
  return "unsupported tag";
}

/* ================================================================== */
/* Events                                                              */
/* ================================================================== */

/* libyaml's error as MCP_ERR_MALFORMED (or NOMEM). libyaml gives two
 * places: where it noticed the problem and where the construct it was in
 * began ("while parsing a flow mapping"). The first is named, unless it is
 * the end of the input (an unclosed "{", "[" or quote), where there is
 * nothing to see: then the line the construct began on. */
static int syntax_error(const yaml_parser_t *yp, const char *text, size_t len,
                        mcp_schema_error *err) {
  if (yp->error == YAML_MEMORY_ERROR)
    return sc_error(err, MCP_ERR_NOMEM, 0, NULL, "out of memory");
  unsigned long line = yp->problem_mark.line + 1;
  if (yp->error == YAML_READER_ERROR) { /* only an offset is known */
    line = 1;
    for (size_t i = 0; i < yp->problem_offset && i < len; i++)
      line += text[i] == '\n';
  } else if (yp->context && yp->problem_mark.index >= len) {
    line = yp->context_mark.line + 1;
  }
  const char *problem = yp->problem ? yp->problem : "syntax error";
  if (yp->context)
    return sc_error(err, MCP_ERR_MALFORMED, line, NULL, "%s %s", problem, yp->context);
  return sc_error(err, MCP_ERR_MALFORMED, line, NULL, "%s", problem);
}

static int read_libyaml(const char *text, size_t len, mcp_schema_yaml_event_fn fn, void *ctx,
                        mcp_schema_error *err) {
  yaml_parser_t yp;
  int rc = 0;
  if (!yaml_parser_initialize(&yp))
    return sc_error(err, MCP_ERR_NOMEM, 0, NULL, "out of memory");
  yaml_parser_set_input_string(&yp, (const unsigned char *)(text ? text : ""), len);
  for (int done = 0; !done && !rc;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&yp, &ev)) {
      rc = syntax_error(&yp, text, len, err);
      break;
    }
    mcp_schema_yaml_event e;
    memset(&e, 0, sizeof e);
    e.line = ev.start_mark.line;
    switch (ev.type) {
    case YAML_STREAM_END_EVENT:
      done = 1;
      break;
    case YAML_DOCUMENT_START_EVENT:
      e.type = MCP_SCHEMA_YAML_DOC_START;
      e.offset = ev.start_mark.index;
      break;
    case YAML_DOCUMENT_END_EVENT:
      e.type = MCP_SCHEMA_YAML_DOC_END;
      e.offset = ev.end_mark.index;
      break;
    case YAML_SCALAR_EVENT:
      e.type = MCP_SCHEMA_YAML_SCALAR;
      e.text = (const char *)ev.data.scalar.value;
      e.len = ev.data.scalar.length;
      switch (ev.data.scalar.style) {
      case YAML_PLAIN_SCALAR_STYLE:
        e.style = MCP_SCHEMA_YAML_PLAIN;
        break;
      case YAML_SINGLE_QUOTED_SCALAR_STYLE:
        e.style = MCP_SCHEMA_YAML_SINGLE_QUOTED;
        break;
      case YAML_LITERAL_SCALAR_STYLE:
        e.style = MCP_SCHEMA_YAML_LITERAL;
        break;
      case YAML_FOLDED_SCALAR_STYLE:
        e.style = MCP_SCHEMA_YAML_FOLDED;
        break;
      default:
        e.style = MCP_SCHEMA_YAML_DOUBLE_QUOTED;
        break;
      }
      e.tag = (const char *)ev.data.scalar.tag;
      e.anchor = (const char *)ev.data.scalar.anchor;
      break;
    case YAML_SEQUENCE_START_EVENT:
      e.type = MCP_SCHEMA_YAML_SEQ_START;
      e.tag = (const char *)ev.data.sequence_start.tag;
      e.anchor = (const char *)ev.data.sequence_start.anchor;
      break;
    case YAML_MAPPING_START_EVENT:
      e.type = MCP_SCHEMA_YAML_MAP_START;
      e.tag = (const char *)ev.data.mapping_start.tag;
      e.anchor = (const char *)ev.data.mapping_start.anchor;
      break;
    case YAML_SEQUENCE_END_EVENT:
      e.type = MCP_SCHEMA_YAML_SEQ_END;
      break;
    case YAML_MAPPING_END_EVENT:
      e.type = MCP_SCHEMA_YAML_MAP_END;
      break;
    case YAML_ALIAS_EVENT:
      e.type = MCP_SCHEMA_YAML_ALIAS;
      e.anchor = (const char *)ev.data.alias.anchor;
      break;
    default:
      break;
    }
    if (e.type)
      rc = fn(ctx, &e);
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&yp);
  return rc;
}

static int nothing(void *ctx, const mcp_schema_yaml_event *ev) {
  (void)ctx;
  (void)ev;
  return 0;
}

int sc_yaml_read(const mcp_mem *mem, const char *text, size_t len, unsigned max_depth,
                 int mode, unsigned flags, mcp_schema_yaml_event_fn fn, void *ctx,
                 mcp_schema_error *err) {
  if (mode == SC_YAML_LIBYAML)
    return read_libyaml(text, len, fn, ctx, err);
  int rc, bailed = 0;
  if (flags & MCP_SCHEMA_YAML_PRESCAN) {
    rc = sc_yaml_fast(mem, text, len, max_depth, nothing, NULL, NULL);
    if (rc == MCP_ERR_NOMEM)
      return sc_error(err, rc, 0, NULL, "out of memory");
    if (rc) /* the scanner is unsure: libyaml alone */
      return mode == SC_YAML_FAST ? SC_YF_BAIL : read_libyaml(text, len, fn, ctx, err);
    /* It reads the same input the same way: it cannot bail now. */
    rc = sc_yaml_fast(mem, text, len, max_depth, fn, ctx, NULL);
    return rc == MCP_ERR_NOMEM ? sc_error(err, rc, 0, NULL, "out of memory") : rc;
  }
  rc = sc_yaml_fast(mem, text, len, max_depth, fn, ctx, &bailed);
  if (!rc || (!bailed && (rc > 0 || rc == MCP_ERR_NOMEM)))
    return rc == MCP_ERR_NOMEM ? sc_error(err, rc, 0, NULL, "out of memory") : rc;
  if (mode == SC_YAML_FAST)
    return bailed ? SC_YF_BAIL : rc;
  /* The scanner bailed, or |fn| refused what it read: libyaml, from the
   * start, has the last word. */
  mcp_schema_yaml_event e;
  memset(&e, 0, sizeof e);
  e.type = MCP_SCHEMA_YAML_RESTART;
  if ((rc = fn(ctx, &e)))
    return rc;
  return read_libyaml(text, len, fn, ctx, err);
}

int mcp_schema_yaml_read(const mcp_mem *mem, const char *text, size_t len, unsigned max_depth,
                         unsigned flags, mcp_schema_yaml_event_fn fn, void *ctx,
                         mcp_schema_error *err) {
  if ((!text && len) || !fn)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem m;
  sc_mem_init(&m, mem);
  return sc_yaml_read(&m, text, len, max_depth, SC_YAML_AUTO, flags, fn, ctx, err);
}
