/*
 * A received resource as JSON (jansson), for mcp-sink's mirror files:
 *
 *   {"name":..., "version":..., "labels":{...}, "annotations":{...},
 *    "create_time": "RFC 3339" | null, "type_url":..., "body":...}
 *
 * body: when type_url is type.googleapis.com/google.protobuf.Struct, the
 * value decoded with protobuf-c and written as the JSON it stands for
 * (numbers that are whole and within +-2^53 as integers, NaN and the
 * infinities as the strings "NaN", "Infinity", "-Infinity", as protobuf's
 * JSON mapping writes doubles); a message type the schema given to
 * tool_resource_json2() knows (Istio's, --descriptor-set): its proto3 JSON
 * (mcp_schema_to_json(): lowerCamelCase names, enums by name, 64-bit
 * integers as strings); otherwise the bytes in base64 (RFC 4648, padded).
 */
#ifndef TOOLS_RESOURCE_JSON_H
#define TOOLS_RESOURCE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <mcp/mcp.h>
#include <mcp/schema.h>

#define TOOL_STRUCT_TYPE_URL "type.googleapis.com/google.protobuf.Struct"

/* Deepest nesting of structs and lists accepted in a Struct body. */
#define TOOL_STRUCT_MAX_DEPTH 100

/*
 * Returns a new JSON object for |r| (the caller owns the reference), or
 * NULL with a one-line reason in |err|: a Struct body that does not decode,
 * nests deeper than TOOL_STRUCT_MAX_DEPTH, or holds a string that is not
 * UTF-8; or out of memory.
 */
json_t *tool_resource_json(const mcp_resource *r, char *err, size_t errlen);

/* The same, with typed bodies of |schema|'s types as their JSON (NULL:
 * none). A body of a known type that does not decode as it is an error. */
json_t *tool_resource_json2(const mcp_resource *r, const mcp_schema *schema,
                            char *err, size_t errlen);

/* Writes |seconds|.|nanos| as RFC 3339 in UTC ("2024-01-02T03:04:05Z",
 * fractions in 3, 6 or 9 digits as needed). Returns 0, or -1 when the time
 * is outside years 0001-9999 or |len| is too small. */
int tool_rfc3339(char *buf, size_t len, int64_t seconds, int32_t nanos);

/* |n| bytes in padded base64; the caller frees the string. NULL when out of
 * memory. */
char *tool_base64(const uint8_t *p, size_t n);

#endif /* TOOLS_RESOURCE_JSON_H */
