/*
 * Typed bodies: which message a document's kind is, and its body encoded
 * as that message by libmcp-schema (the proto3 JSON mapping). The loader's
 * own YAML tree is handed over as mcp_schema_value nodes (config_doc.c).
 */
#include "loader/config_internal.h"

#include <string.h>

static int typed(const mcpcfg_options *o) {
  return o->schema && !o->force_struct;
}

int mcpcfg_body_check(const mcpcfg_options *o) {
  if (!o || !typed(o))
    return 0;
  for (size_t i = 0; i < o->nkinds; i++)
    if (!o->kinds[i].api_version || !o->kinds[i].kind ||
        !o->kinds[i].message ||
        !mcp_schema_has_message(o->schema, o->kinds[i].message))
      return MCPCFG_ERR_INVALID_ARGUMENT;
  return 0;
}

const char *mcpcfg_body_message(const mcpcfg_options *o,
                                const char *api_version, const char *kind) {
  if (!typed(o))
    return NULL;
  for (size_t i = 0; i < o->nkinds; i++)
    if (!strcmp(o->kinds[i].kind, kind) &&
        !strcmp(o->kinds[i].api_version, api_version))
      return o->kinds[i].message;
  /* A newer Istio version of an Istio type (networking.istio.io/v1
   * VirtualService) is that type: typed as its canonical version. */
  const char *canon = mcp_kind_canonical_api_version(api_version, kind);
  if (canon != api_version)
    return mcpcfg_body_message(o, canon, kind);
  return NULL;
}

int mcpcfg_body_encode(const mcpcfg_options *o, const char *message,
                       const mcp_schema_value *body, const char *bodyname,
                       uint8_t **out, size_t *outlen, mcp_schema_error *errs,
                       size_t max_errs, size_t *nerrs) {
  /* No body (absent or null): the message with every field unset. */
  static const mcp_schema_value empty = {.kind = MCP_SCHEMA_MAP};
  uint8_t *wire = NULL;
  size_t len = 0;
  *nerrs = 0;
  int rv = mcp_schema_encode_all(o->schema, message, body ? body : &empty,
                                 bodyname, 0, &wire, &len, errs, max_errs,
                                 nerrs);
  if (rv == MCP_ERR_NOMEM)
    return MCPCFG_ERR_NOMEM;
  if (rv < 0)
    /* NOT_FOUND cannot happen (mcpcfg_body_check()); LIMIT (nesting
     * deeper than the schema's max_depth) is the document's fault too. */
    return MCPCFG_ERR_INVALID_ARGUMENT;
  *out = wire;
  *outlen = len;
  return 0;
}
