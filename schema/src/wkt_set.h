/* The well-known types' FileDescriptorSet, embedded at build time
 * (schema/meson.build: protoc-c --include_imports, then embed.c). */
#ifndef MCP_SCHEMA_WKT_SET_H
#define MCP_SCHEMA_WKT_SET_H
#include <stddef.h>
#include <stdint.h>
extern const uint8_t sc_wkt_set[];
extern const size_t sc_wkt_set_len;
#endif
