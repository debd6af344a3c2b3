/*
 * Internal declarations of the Destination module (destination*.c). Not
 * API.
 */
#ifndef MCP_DESTINATION_INT_H
#define MCP_DESTINATION_INT_H

#include "mcp/pballoc.h" /* the engine's public API only */

#include "mcp/destination.h"

/* A bounded writer: counts every byte, writes only while they fit. */
typedef struct mcp_dwr {
  uint8_t *p;
  size_t cap, len;
} mcp_dwr;

void mcp__dwr_bytes(mcp_dwr *w, const void *p, size_t n);
void mcp__dwr_varint(mcp_dwr *w, uint64_t v);
void mcp__dwr_len_field(mcp_dwr *w, uint32_t field, const void *p, size_t n);

/* Encodes conduit.common.TcpAddress{ip, port} (the message itself, no tag)
 * and returns its size; writes as mcp_dwr. */
size_t mcp__dest_tcp_encode(const mcp_dest_addr *a, uint8_t *buf, size_t len);
#define MCP_DEST_TCP_MAX 32 /* bytes of the largest TcpAddress (IPv6: 26) */

/* The map entry {key, value} of a map<string, string> field |field|
 * (tag, length and entry). */
void mcp__dest_map_entry(mcp_dwr *w, uint32_t field, const char *key,
                         const char *value);

/* The parsers of destination.c, on s[0..n): 1 when it is all a port
 * (decimal 0-65535, no leading zero), an IPv4 or an IPv6 address. */
int mcp__dest_parse_port(const char *s, size_t n, uint32_t *port);
int mcp__dest_parse_v4(const char *s, size_t n, uint8_t out[4]);
int mcp__dest_parse_v6(const char *s, size_t n, uint8_t out[16]);

/* Case-insensitive comparison of ASCII |a[0..n)| with |b[0..n)|. */
int mcp__dest_ieq(const char *a, const char *b, size_t n);

#endif /* MCP_DESTINATION_INT_H */
