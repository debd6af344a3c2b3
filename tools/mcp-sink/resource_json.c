/* Received resources as JSON; bodies written by the schema library's proto3
 * JSON writer (mcp_schema_to_json()), the one writer of the tree. */
#include "mcp-sink/resource_json.h"

#include <stdio.h>
#include <string.h>

int tool_struct_schema_new(mcp_schema **ps) {
  mcp_schema_options o;
  mcp_schema_options_default(&o);
  /* The top Struct, then a Value and a Struct or ListValue per level. */
  o.max_depth = 2 * TOOL_STRUCT_MAX_DEPTH + 1;
  return mcp_schema_new(ps, &o);
}

/* A body of a message type |schema| knows: its proto3 JSON. */
static json_t *typed_json(const mcp_resource *r, const mcp_schema *schema,
                          const char *type, unsigned flags, char *err,
                          size_t errlen) {
  char *text = NULL;
  size_t len = 0;
  mcp_schema_error e;
  int rv = mcp_schema_to_json(schema, type, r->body, r->body_len, flags, &text,
                              &len, &e);
  if (rv == MCP_ERR_LIMIT && flags & MCP_SCHEMA_JSON_LOOSE_VALUES) {
    snprintf(err, errlen, "body nests deeper than %d levels",
             TOOL_STRUCT_MAX_DEPTH);
    return NULL;
  }
  if (rv < 0) {
    snprintf(err, errlen, "body is not a valid %s: %s", type,
             rv == MCP_ERR_NOMEM ? "out of memory" : e.message);
    return NULL;
  }
  json_error_t je;
  /* DECODE_ANY: a well-known type's JSON may be a string (Duration...);
   * ALLOW_NUL: a string may hold U+0000, which proto3 allows. */
  json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  mcp_schema_free_bytes(schema, text);
  if (!j)
    snprintf(err, errlen, "body of %s: %s", type, je.text);
  return j;
}

static json_t *body_json(const mcp_resource *r, const mcp_schema *structs,
                         const mcp_schema *schema, char *err, size_t errlen) {
  const char *type = r->type_url ? mcp_schema_type_name(r->type_url) : NULL;
  if (r->type_url && strcmp(r->type_url, TOOL_STRUCT_TYPE_URL) == 0)
    return typed_json(r, structs, type, MCP_SCHEMA_JSON_LOOSE_VALUES, err,
                      errlen);
  if (schema && type && mcp_schema_has_message(schema, type))
    return typed_json(r, schema, type, 0, err, errlen);
  char *b = NULL;
  json_t *j = mcp_schema_base64(structs, r->body, r->body_len, &b, NULL) == 0
                  ? json_string(b)
                  : NULL;
  mcp_schema_free_bytes(structs, b);
  if (!j)
    snprintf(err, errlen, "out of memory");
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

json_t *tool_resource_json(const mcp_resource *r, const mcp_schema *structs,
                           const mcp_schema *schema, char *err, size_t errlen) {
  json_t *body = body_json(r, structs, schema, err, errlen);
  /* json_pack's "o" takes every reference, also when it fails. */
  if (!body)
    return NULL;
  char ts[MCP_SCHEMA_TIMESTAMP_TEXT_MAX];
  json_t *ct = r->has_create_time &&
                       mcp_schema_timestamp_text(r->create_time_seconds,
                                                 r->create_time_nanos, ts,
                                                 sizeof(ts)) >= 0
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
