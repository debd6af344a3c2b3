/* Received resources as JSON, with google.protobuf.Struct bodies decoded. */
#include "mcp-sink/resource_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "google/protobuf/struct.pb-c.h"

/* ---- base64 and time ---- */

char *tool_base64(const uint8_t *p, size_t n) {
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  if (!out)
    return NULL;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    *o++ = tab[v >> 18];
    *o++ = tab[(v >> 12) & 63];
    *o++ = tab[(v >> 6) & 63];
    *o++ = tab[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)p[i + 1] << 8;
    *o++ = tab[v >> 18];
    *o++ = tab[(v >> 12) & 63];
    *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    *o++ = '=';
  }
  *o = '\0';
  return out;
}

/* Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm): no
 * dependence on time_t's range or the time zone. */
static void civil(int64_t days, int64_t *y, unsigned *m, unsigned *d) {
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  unsigned doe = (unsigned)(days - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

int tool_rfc3339(char *buf, size_t len, int64_t seconds, int32_t nanos) {
  /* 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z */
  if (seconds < -62135596800LL || seconds > 253402300799LL || nanos < 0 ||
      nanos > 999999999)
    return -1;
  int64_t days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400;
  int64_t sod = seconds - days * 86400;
  int64_t y;
  unsigned m, d;
  civil(days, &y, &m, &d);
  char frac[16] = "";
  if (nanos % 1000000 == 0 && nanos)
    snprintf(frac, sizeof(frac), ".%03d", (int)(nanos / 1000000));
  else if (nanos % 1000 == 0 && nanos)
    snprintf(frac, sizeof(frac), ".%06d", (int)(nanos / 1000));
  else if (nanos)
    snprintf(frac, sizeof(frac), ".%09d", (int)nanos);
  int n = snprintf(buf, len, "%04d-%02u-%02uT%02d:%02d:%02d%sZ", (int)y, m, d,
                   (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60),
                   frac);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* ---- Struct ---- */

/* A protobuf varint; 0 at the end of input or on a bad one. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return 1;
  }
  return 0;
}

enum { K_STRUCT, K_ENTRY, K_VALUE, K_LIST, K_NONE };

/*
 * Checks the nesting of a Struct's wire form before protobuf-c (which
 * recurses without a limit) decodes it. Returns 0 when within |depth|
 * levels, 1 when deeper, -1 when the bytes are not protobuf.
 */
static int nesting(const uint8_t *p, size_t n, int kind, int depth) {
  const uint8_t *end = p + n;
  while (p < end) {
    uint64_t key, v;
    if (!varint(&p, end, &key))
      return -1;
    switch (key & 7) {
    case 0:
      if (!varint(&p, end, &v))
        return -1;
      break;
    case 1:
      if (end - p < 8)
        return -1;
      p += 8;
      break;
    case 5:
      if (end - p < 4)
        return -1;
      p += 4;
      break;
    case 2: {
      if (!varint(&p, end, &v) || v > (uint64_t)(end - p))
        return -1;
      uint64_t f = key >> 3;
      int sub = K_NONE;
      if (kind == K_STRUCT && f == 1)
        sub = K_ENTRY;
      else if (kind == K_ENTRY && f == 2)
        sub = K_VALUE;
      else if (kind == K_VALUE && f == 5)
        sub = K_STRUCT;
      else if (kind == K_VALUE && f == 6)
        sub = K_LIST;
      else if (kind == K_LIST && f == 1)
        sub = K_VALUE;
      if (sub != K_NONE) {
        /* Struct and List levels count; entries and values do not. */
        int d = depth - (sub == K_STRUCT || sub == K_LIST);
        if (d < 0)
          return 1;
        int rv = nesting(p, (size_t)v, sub, d);
        if (rv != 0)
          return rv;
      }
      p += v;
      break;
    }
    default:
      return -1;
    }
  }
  return 0;
}

static json_t *value_json(const Google__Protobuf__Value *v);

static json_t *struct_json(const Google__Protobuf__Struct *s) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < s->n_fields; i++) {
    const Google__Protobuf__Struct__FieldsEntry *e = s->fields[i];
    json_t *jv = e->value ? value_json(e->value) : json_null();
    /* A repeated key: the last one wins, as protobuf's maps say. */
    if (!jv || json_object_set_new(o, e->key, jv) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

static json_t *number_json(double d) {
  if (isnan(d))
    return json_string("NaN");
  if (isinf(d))
    return json_string(d > 0 ? "Infinity" : "-Infinity");
  if (d == floor(d) && fabs(d) <= 9007199254740992.0)
    return json_integer((json_int_t)d);
  return json_real(d);
}

static json_t *value_json(const Google__Protobuf__Value *v) {
  switch (v->kind_case) {
  case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE:
    return number_json(v->number_value);
  case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
    return json_string(v->string_value);
  case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
    return json_boolean(v->bool_value);
  case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
    return v->struct_value ? struct_json(v->struct_value) : json_object();
  case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE: {
    json_t *a = json_array();
    const Google__Protobuf__ListValue *l = v->list_value;
    for (size_t i = 0; a && l && i < l->n_values; i++) {
      json_t *e = value_json(l->values[i]);
      if (!e || json_array_append_new(a, e) != 0) {
        json_decref(a);
        return NULL;
      }
    }
    return a;
  }
  case GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE:
  default: /* no kind set: null, as protobuf's JSON printers do */
    return json_null();
  }
}

/* A body of a message type |schema| knows: its proto3 JSON. */
static json_t *typed_json(const mcp_resource *r, const mcp_schema *schema,
                          const char *type, char *err, size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  mcp_schema_error e;
  int rv = mcp_schema_to_json(schema, type, r->body, r->body_len, 0, &text,
                              &len, &e);
  if (rv < 0) {
    snprintf(err, errlen, "body is not a valid %s: %s", type,
             rv == MCP_ERR_NOMEM ? "out of memory" : e.message);
    return NULL;
  }
  json_error_t je;
  /* DECODE_ANY: a well-known type's JSON may be a string (Duration...). */
  json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &je);
  mcp_schema_free_bytes(schema, text);
  if (!j)
    snprintf(err, errlen, "body of %s: %s", type, je.text);
  return j;
}

static json_t *body_json(const mcp_resource *r, const mcp_schema *schema,
                         char *err, size_t errlen) {
  const char *type = r->type_url ? mcp_schema_type_name(r->type_url) : NULL;
  if (schema && type && strcmp(r->type_url, TOOL_STRUCT_TYPE_URL) != 0 &&
      mcp_schema_has_message(schema, type))
    return typed_json(r, schema, type, err, errlen);
  if (!r->type_url || strcmp(r->type_url, TOOL_STRUCT_TYPE_URL) != 0) {
    char *b = r->body_len ? tool_base64(r->body, r->body_len) : strdup("");
    json_t *j = b ? json_string(b) : NULL;
    free(b);
    if (!j)
      snprintf(err, errlen, "out of memory");
    return j;
  }
  if (r->body_len == 0)
    return json_object(); /* an empty Struct */
  int rv = nesting(r->body, r->body_len, K_STRUCT, TOOL_STRUCT_MAX_DEPTH);
  if (rv > 0) {
    snprintf(err, errlen, "body nests deeper than %d levels",
             TOOL_STRUCT_MAX_DEPTH);
    return NULL;
  }
  Google__Protobuf__Struct *s =
      rv < 0 ? NULL
             : google__protobuf__struct__unpack(NULL, r->body_len, r->body);
  if (!s) {
    snprintf(err, errlen, "body is not a google.protobuf.Struct");
    return NULL;
  }
  json_t *j = struct_json(s);
  google__protobuf__struct__free_unpacked(s, NULL);
  if (!j)
    snprintf(err, errlen,
             "body holds a string that is not UTF-8 (or out of memory)");
  return j;
}

static json_t *kv_json(const mcp_kv *kv, size_t n) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < n; i++) {
    if (json_object_set_new(o, kv[i].key, json_string(kv[i].value)) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

json_t *tool_resource_json(const mcp_resource *r, char *err, size_t errlen) {
  return tool_resource_json2(r, NULL, err, errlen);
}

json_t *tool_resource_json2(const mcp_resource *r, const mcp_schema *schema,
                            char *err, size_t errlen) {
  json_t *body = body_json(r, schema, err, errlen);
  /* json_pack's "o" takes every reference, also when it fails. */
  if (!body)
    return NULL;
  char ts[40];
  json_t *ct = r->has_create_time && tool_rfc3339(ts, sizeof(ts),
                                                  r->create_time_seconds,
                                                  r->create_time_nanos) == 0
                   ? json_string(ts)
                   : json_null();
  json_t *o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:s, s:o}", "name",
                        r->name, "version", r->version ? r->version : "",
                        "labels", kv_json(r->labels, r->nlabels),
                        "annotations",
                        kv_json(r->annotations, r->nannotations),
                        "create_time", ct, "type_url",
                        r->type_url ? r->type_url : "", "body", body);
  if (!o)
    snprintf(err, errlen, "out of memory");
  return o;
}
