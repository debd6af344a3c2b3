/* Istio 1.6's types, built in: the descriptor set and the kinds table. */
#include "mcp/schema_istio.h"

extern const uint8_t mcp_schema_istio_set[];
extern const size_t mcp_schema_istio_set_len;

/*
 * Istio 1.6's names: collections from Galley's metadata.yaml
 * (pkg/config/schema/metadata.yaml, release-1.6), messages from istio/api
 * release-1.6. The collections are also what mcp-source's naming rule
 * derives from apiVersion and kind (tests/test_config_typed.c checks it).
 */
#define NET "networking.istio.io/v1alpha3"
#define SEC "security.istio.io/v1beta1"
static const mcp_schema_istio_kind kinds[] = {
    {NET, "DestinationRule", "istio.networking.v1alpha3.DestinationRule",
     "istio/networking/v1alpha3/destinationrules"},
    {NET, "EnvoyFilter", "istio.networking.v1alpha3.EnvoyFilter",
     "istio/networking/v1alpha3/envoyfilters"},
    {NET, "Gateway", "istio.networking.v1alpha3.Gateway",
     "istio/networking/v1alpha3/gateways"},
    {NET, "ServiceEntry", "istio.networking.v1alpha3.ServiceEntry",
     "istio/networking/v1alpha3/serviceentries"},
    {NET, "Sidecar", "istio.networking.v1alpha3.Sidecar",
     "istio/networking/v1alpha3/sidecars"},
    {NET, "VirtualService", "istio.networking.v1alpha3.VirtualService",
     "istio/networking/v1alpha3/virtualservices"},
    {NET, "WorkloadEntry", "istio.networking.v1alpha3.WorkloadEntry",
     "istio/networking/v1alpha3/workloadentries"},
    {SEC, "AuthorizationPolicy", "istio.security.v1beta1.AuthorizationPolicy",
     "istio/security/v1beta1/authorizationpolicies"},
    {SEC, "PeerAuthentication", "istio.security.v1beta1.PeerAuthentication",
     "istio/security/v1beta1/peerauthentications"},
    {SEC, "RequestAuthentication",
     "istio.security.v1beta1.RequestAuthentication",
     "istio/security/v1beta1/requestauthentications"},
};

int mcp_schema_add_istio(mcp_schema *s, mcp_schema_error *err) {
  return mcp_schema_add_descriptor_set(s, mcp_schema_istio_set,
                                       mcp_schema_istio_set_len, err);
}

const uint8_t *mcp_schema_istio_descriptor_set(size_t *len) {
  *len = mcp_schema_istio_set_len;
  return mcp_schema_istio_set;
}

const mcp_schema_istio_kind *mcp_schema_istio_kinds(size_t *n) {
  *n = sizeof kinds / sizeof kinds[0];
  return kinds;
}
