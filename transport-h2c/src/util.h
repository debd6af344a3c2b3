/* Pure helpers of the h2c transport: buffers, addresses, and the small
 * encodings of gRPC over HTTP/2 (no I/O; tested on their own). */
#ifndef MCP_H2C_UTIL_H
#define MCP_H2C_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "mcp/mcp.h"
#include "mcp/engine.h" /* mcp_buf */

#include "hugepage.h"

/* Allocation through an object's hook; |m| NULL: the C library. Every
 * allocation of the transport goes through these. */
void mcp_h2c_mem_init(mcp_mem *dst, const mcp_mem *src); /* libc if NULL */
void *mcp_h2c_malloc(const mcp_mem *m, size_t n);
void *mcp_h2c_calloc(const mcp_mem *m, size_t nmemb, size_t size);
void *mcp_h2c_realloc(const mcp_mem *m, void *p, size_t n);

/* common/hugepage.h's hint (here, so that util.c alone defines the
 * _DEFAULT_SOURCE it needs). */
void mcp_h2c_hint_large(void *p, size_t len);
void mcp_h2c_free(const mcp_mem *m, void *p); /* NULL |p| is a no-op */
char *mcp_h2c_strdup(const mcp_mem *m, const char *s);
char *mcp_h2c_strndup(const mcp_mem *m, const char *s, size_t n);

/* Appends a NUL-terminated string (without its NUL) to the engine's
 * growable buffer (mcp_buf, engine.h). 0 or MCP_ERR_NOMEM. */
int mcp_h2c_buf_puts(mcp_buf *b, const char *s);

/* A parsed address: "HOST:PORT", "[V6]:PORT", "unix:PATH", with an
 * optional "dns:///" or "http://" prefix. Strings are allocated with
 * |mem|. */
typedef struct mcp_h2c_addr {
  int is_unix;
  char *host; /* without brackets */
  char *port; /* decimal */
  char *path; /* unix */
  const mcp_mem *mem;
} mcp_h2c_addr;

/* 0, MCP_ERR_INVALID_ARGUMENT (bad syntax), MCP_ERR_NOMEM. On failure
 * |a| is left zeroed. The strings are allocated with |mem| (NULL: the C
 * library), which |a| keeps for mcp_h2c_addr_free(). */
int mcp_h2c_addr_parse_mem(const char *s, mcp_h2c_addr *a,
                           const mcp_mem *mem);
int mcp_h2c_addr_parse(const char *s, mcp_h2c_addr *a); /* the C library */
void mcp_h2c_addr_free(mcp_h2c_addr *a);

/* grpc-timeout ("1..8 digits" and one of H M S m u n) in nanoseconds
 * (saturating). 0, or -1 when malformed. */
int mcp_h2c_parse_timeout(const char *v, mcp_tstamp *out);

/* grpc-message percent-encoding (gRPC's: bytes outside 0x20..0x7e and
 * '%' become %XX). Appends to |b|. 0 or MCP_ERR_NOMEM. */
int mcp_h2c_percent_encode(const char *in, mcp_buf *b);
/* Decodes in place; malformed escapes are kept as they are. */
void mcp_h2c_percent_decode(char *s);

/* base64url (RFC 4648 section 5, padding optional) into |out|, which has
 * room for len * 3 / 4 + 3 bytes. Returns the decoded length, or -1.
 * The engine's mcp_base64_decode(), not strict (HTTP2-Settings). */
long mcp_h2c_base64url_decode(const char *in, size_t len, uint8_t *out);

/* gRPC status for an HTTP status without grpc-status (gRPC's mapping). */
int mcp_h2c_status_from_http(int http_status);
/* gRPC status for an HTTP/2 RST_STREAM or GOAWAY error code. */
int mcp_h2c_status_from_h2_error(uint32_t code);
/* A reason phrase for an HTTP/1.1 status line. */
const char *mcp_h2c_reason(int http_status);

/* 1 when |ct| is a gRPC content type: "application/grpc" alone or
 * followed by '+' or ';'. */
int mcp_h2c_is_grpc_content_type(const char *ct);

/* 1 when the comma-separated header value |list| has |token| (case
 * insensitive). */
int mcp_h2c_has_token(const char *list, const char *token);

#endif
