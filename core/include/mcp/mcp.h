/*
 * libmcp: a sans-I/O engine for Istio's Mesh Configuration Protocol
 * (istio.mcp.v1alpha1) and its sibling protocols.
 *
 * This header is the umbrella of libmcp, which links every module: it
 * includes the engine and each protocol module's header. A program that
 * takes only the engine and one protocol includes that module's header
 * (which includes mcp/engine.h) and links libmcp-engine and the module's
 * library (docs/architecture.md, "Layers").
 *
 *   mcp/engine.h         store, watch, message builder, stream driver,
 *                        admission, backoff, wire, memory, errors
 *   mcp/auth.h           peer identities, authorization, access lists
 *   mcp/mcp_v1alpha1.h   Istio's MCP (source and sink sessions)
 *   mcp/destination.h    Conduit's Destination API
 *   mcp/dispatcher.h     swarmkit's Dispatcher
 *   mcp/xds.h            MCP over xDS (Envoy's ADS)
 */
#ifndef MCP_MCP_H
#define MCP_MCP_H

#include <mcp/engine.h>
#include <mcp/auth.h>
#include <mcp/mcp_v1alpha1.h>
#include <mcp/destination.h>
#include <mcp/dispatcher.h>
#include <mcp/xds.h>

#endif /* MCP_MCP_H */
