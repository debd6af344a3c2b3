/*
 * Internal: what the xDS module's files share (mcp/xds.h): the decoded
 * requests (xds_request.c) and the framing of stored resources
 * (xds_resource.c), used by the server sessions (xds_server.c).
 */
#ifndef MCP_XDS_INT_H
#define MCP_XDS_INT_H

#include <string.h>

#include "mcp/xds.h" /* the engine's public API only */

/* A string inside the received bytes (not NUL-terminated), checked UTF-8
 * without NUL and at most MCP_XDS_MAX_STRING bytes. */
typedef struct xds_str {
  const char *p;
  size_t n;
} xds_str;

/*
 * A DiscoveryRequest (|delta| 0) or DeltaDiscoveryRequest (1), decoded by
 * hand so that the core needs no Envoy generated code. Strings point into
 * the input; the arrays are allocated (mcp__xds_request_free()).
 *   names    SotW resource_names, delta resource_names_subscribe
 *   unsub    delta resource_names_unsubscribe
 *   iv_*     delta initial_resource_versions (name, version)
 */
typedef struct xds_request {
  int delta;
  xds_str version_info, type_url, nonce;
  const uint8_t *node; /* the Node message, or NULL */
  size_t node_len;
  int has_error;
  int32_t error_code;
  xds_str error_message;
  xds_str *names, *unsub, *iv_name, *iv_version;
  size_t nnames, nunsub, niv;
} xds_request;

/* Decodes |in[0..len)|. Returns 0; MCP_ERR_MALFORMED (bad wire bytes),
 * MCP_ERR_INVALID_ARGUMENT (a string not UTF-8 or too long, no type_url)
 * with a reason in |why| (static), MCP_ERR_LIMIT (more than
 * MCP_XDS_MAX_NAMES names), MCP_ERR_NOMEM. On failure nothing is held. */
int mcp__xds_request_decode(xds_request *rq, int delta, const uint8_t *in,
                            size_t len, const mcp_mem *m, const char **why);
void mcp__xds_request_free(xds_request *rq, const mcp_mem *m);

/* The node's id and metadata (string, bool and integral number values)
 * as allocated copies: |*kvs| has |*nkvs| entries whose keys and values,
 * like |*id|, are freed with mcp__xds_node_free(). Returns 0,
 * MCP_ERR_MALFORMED, MCP_ERR_NOMEM. */
int mcp__xds_node_decode(const uint8_t *p, size_t n, const mcp_mem *m,
                         char **id, mcp_kv **kvs, size_t *nkvs);
void mcp__xds_node_free(const mcp_mem *m, char *id, mcp_kv *kvs, size_t n);

/* The xDS name of a store name: itself when it has a '/', else "/" +
 * itself (the empty namespace as istiod writes it). Writes as snprintf. */
size_t mcp__xds_name(const char *store_name, char *buf, size_t len);

/* Appends |it| (live) to |b| as field |field| of its message:
 *   SotW   Any{MCP_XDS_RESOURCE_TYPE_URL, Resource}
 *   delta  discovery.v3.Resource{name, version, resource: that Any}
 * |body_only|: the Any is the resource's body itself (MeshConfig, as
 * istiod's apigen sends it), not the Resource around it.
 * The Resource is the store's bytes, shared; a bare store name is renamed
 * "/name" with a few bytes of the message's own (mcp__xds_name()).
 * Returns 0, or MCP_ERR_INVALID_ARGUMENT for an item not from a store. */
int mcp__xds_put_resource(mcp_msg_builder *b, uint32_t field, int delta,
                          int body_only, const mcp_item *it);

/* The whole state of |w|'s collection now as the |resources| fields of a
 * SotW response, framed by mcp__xds_put_resource() once and frozen into a
 * snapshot (mcp_msg_builder_freeze()): each item's Any header (and a
 * renamed name) in the snapshot's own bytes, its stored Resource bytes
 * referenced. Shared by every wildcard stream of that generation
 * (mcp_msg_builder_snap()). Returns 0, |*psn| (one reference) and the
 * resources in it in |*count|, or NOMEM, INVALID_ARGUMENT. */
int mcp__xds_snap(const mcp_watch *w, const mcp_mem *m, mcp_snap **psn,
                  size_t *count);

#endif /* MCP_XDS_INT_H */
