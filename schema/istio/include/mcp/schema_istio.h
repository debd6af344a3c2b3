/*
 * Istio 1.6's configuration types, built into libmcp-schema-istio: the
 * descriptors of istio/api release-1.6 (proto/istio/, compiled by protoc at
 * build time) and the table of the kinds Istio 1.6 exchanges over MCP.
 *
 * Depends on libmcp-schema (mcp/schema.h). docs/tools.md lists the kinds.
 */
#ifndef MCP_SCHEMA_ISTIO_H
#define MCP_SCHEMA_ISTIO_H

#include <stddef.h>

#include <mcp/schema.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One kind: the document's apiVersion and kind, the message its spec is
 * (Resource.body's type URL is "type.googleapis.com/" + message), and the
 * collection Istio 1.6 names it (Galley's metadata.yaml). */
typedef struct mcp_schema_istio_kind {
  const char *api_version; /* "networking.istio.io/v1alpha3" */
  const char *kind;        /* "VirtualService" */
  const char *message;     /* "istio.networking.v1alpha3.VirtualService" */
  const char *collection;  /* "istio/networking/v1alpha3/virtualservices" */
} mcp_schema_istio_kind;

/*
 * Adds Istio 1.6's networking v1alpha3 and security v1beta1 files (and
 * what they import) to |s|: mcp_schema_add_descriptor_set() of the
 * built-in set, with its errors (a conflicting file already in |s|:
 * MCP_ERR_INVALID_ARGUMENT; MCP_ERR_NOMEM). Adding them twice is a no-op.
 */
MCP_EXTERN int mcp_schema_add_istio(mcp_schema *s, mcp_schema_error *err);

/* The built-in serialized FileDescriptorSet (static storage). */
MCP_EXTERN const uint8_t *mcp_schema_istio_descriptor_set(size_t *len);

/* The table of kinds: |*n| entries, static storage. */
MCP_EXTERN const mcp_schema_istio_kind *mcp_schema_istio_kinds(size_t *n);

#ifdef __cplusplus
}
#endif

#endif /* MCP_SCHEMA_ISTIO_H */
