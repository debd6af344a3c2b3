/*
 * mcp-sink's clients of the engine's other protocols (issues 14 and 16):
 *
 *   mcp-sink --api destination --destination AUTHORITY... --connect
 *            HOST:PORT[,...] [--transport grpc|h2c] [--json] [--out DIR]
 *            [--exit-after-sync]
 *     One conduit.proxy.destination.Destination/Get stream per AUTHORITY
 *     ("host[:port]", scheme k8s), each reconnecting with backoff.
 *     --json: one line per Update received:
 *       {"event":"destination","authority":A,"update":"add"|"remove"|
 *        "no_endpoints","addrs":["IP:PORT",...],"exists":BOOL (no_endpoints
 *        only),"total":N}
 *     --out DIR: DIR/<authority>.json = {"exists":BOOL,"addrs":[sorted]},
 *     written atomically after each Update.
 *     --exit-after-sync: exit 0 once every authority got its first message.
 *
 *   mcp-sink --api dispatcher --node-id NODE --connect HOST:PORT[,...]
 *            [--report-status STATE] [--json] [--out DIR]
 *            [--exit-after-sync]
 *     A swarmkit worker: Session (description.hostname = NODE), Heartbeat
 *     at the period answered, Assignments; a new session on a chain
 *     mismatch or a session error.
 *     --json: one line per Assignments message:
 *       {"event":"assignments","type":"COMPLETE"|"INCREMENTAL",
 *        "applies_to":..,"results_in":..,"changes":[{"action":"UPDATE"|
 *        "REMOVE","kind":"task"|"secret"|"config","id":..}],"total":N}
 *     --out DIR: DIR/<kind>s/<id>.json, the object in proto3 JSON, written
 *     atomically, removed on REMOVE (and when a COMPLETE no longer holds it).
 *     --report-status STATE: every task held is reported in that state
 *     (UpdateTaskStatus). --exit-after-sync: exit 0 after the first message.
 *
 *   mcp-sink --api xds [--connect HOST:PORT[,...]] [--delta] [--type GVK]...
 *            [--node-id ID] [--json] [--out DIR] [--exit-after-sync]
 *     An istiod-like client of MCP over xDS (issue 22; mcp/xds.h): one
 *     StreamAggregatedResources (--delta: DeltaAggregatedResources) call
 *     subscribing to every --type (default: MeshConfig, then every Istio
 *     type the schema knows, as adsc.ConfigInitialRequests), ACKing each
 *     response, NACKing what cannot be decoded or written; reconnecting
 *     with backoff, across the --connect list (delta: resuming with
 *     initial_resource_versions). --json: one line per response:
 *       {"event":"response","type_url":..,"version_info":..,"nonce":..,
 *        "resources":[{"name","version","type_url"}],"removed":[..],
 *        "verdict":"ack"|"nack"}
 *     --out DIR: MCP's mirror layout, DIR/<collection>/<name>.json.
 *     --exit-after-sync: exit 0 once every type was answered.
 *
 * All also take --transport, --log-level, --log-format and the TLS and
 * access flags of the MCP sink (--tls-*, --allow, --deny, --access-list).
 */
#ifndef TOOLS_SINK_PROTO_H
#define TOOLS_SINK_PROTO_H

/* The synopsis lines of these APIs (the first without its "usage: " or
 * its indent, each further one indented by 7), for both usage texts. */
#define TOOL_SINK_PROTO_SYNOPSIS                                             \
  "mcp-sink --api destination --destination AUTHORITY... "                   \
  "[--connect HOST:PORT[,...]]\n"                                            \
  "                [--transport grpc|h2c] [--json] [--out DIR] "             \
  "[--exit-after-sync]\n"                                                    \
  "       mcp-sink --api dispatcher --node-id NODE [--connect "              \
  "HOST:PORT[,...]]\n"                                                       \
  "                [--report-status STATE] [--transport grpc|h2c] "          \
  "[--json] [--out DIR]\n"                                                   \
  "                [--exit-after-sync]\n"                                   \
  "       mcp-sink --api xds [--connect HOST:PORT[,...]] [--delta] "          \
  "[--type GVK]...\n"                                                       \
  "                [--node-id ID] [--transport grpc|h2c] [--json] "          \
  "[--out DIR]\n"                                                           \
  "                [--exit-after-sync]\n"

/* 1 when argv asks for one of these APIs (--api destination|dispatcher|xds). */
int tool_sink_proto_wanted(int argc, char **argv);

/* Runs mcp-sink for them; returns the exit status (0, 1 runtime failure,
 * 2 usage error). */
int tool_sink_proto_main(int argc, char **argv);

#endif /* TOOLS_SINK_PROTO_H */
