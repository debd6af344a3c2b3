/*
 * A received resource as JSON (jansson), for mcp-sink's mirror files:
 *
 *   {"name":..., "version":..., "labels":{...}, "annotations":{...},
 *    "create_time": "RFC 3339" | null, "type_url":..., "body":...}
 *
 * body, written by the schema library (mcp_schema_to_json()): when type_url
 * is type.googleapis.com/google.protobuf.Struct, its JSON with
 * MCP_SCHEMA_JSON_LOOSE_VALUES (whole numbers within +-2^53 as integers, NaN
 * and the infinities as the strings "NaN", "Infinity", "-Infinity", a Value
 * with no kind as null, keys in wire order); a message type the |schema|
 * given to tool_resource_json() knows (Istio's, --descriptor-set): its
 * proto3 JSON (lowerCamelCase names, enums by name, 64-bit integers as
 * strings); otherwise the bytes in base64 (RFC 4648, padded).
 */
#ifndef TOOLS_RESOURCE_JSON_H
#define TOOLS_RESOURCE_JSON_H

#include <stddef.h>

#include <jansson.h>
#include <mcp/mcp.h>
#include <mcp/schema.h>

#define TOOL_STRUCT_TYPE_URL "type.googleapis.com/google.protobuf.Struct"

/* Deepest nesting of structs and lists accepted in a Struct body. */
#define TOOL_STRUCT_MAX_DEPTH 100

/* Creates the pool that writes Struct bodies and base64 for
 * tool_resource_json(): the well-known types, nesting bounded by
 * TOOL_STRUCT_MAX_DEPTH. Free with mcp_schema_free(). 0 or MCP_ERR_NOMEM. */
int tool_struct_schema_new(mcp_schema **ps);

/*
 * Returns a new JSON object for |r| (the caller owns the reference), or
 * NULL with a one-line reason in |err|: a Struct body that does not decode,
 * nests deeper than TOOL_STRUCT_MAX_DEPTH or holds a string that is not
 * UTF-8; a body of one of |schema|'s types that does not decode as it; or
 * out of memory. |structs|: from tool_struct_schema_new(); |schema|: the
 * typed bodies' types (NULL: none). Both borrowed.
 */
json_t *tool_resource_json(const mcp_resource *r, const mcp_schema *structs,
                           const mcp_schema *schema, char *err, size_t errlen);

#endif /* TOOLS_RESOURCE_JSON_H */
