/*
 * The endpoint options both programs build alike from their shared flags:
 * the security flags (cli/args.h), the access list they made, and the
 * debug endpoints (tools/ops) answered on an h2 port.
 */
#ifndef TOOLS_CLI_ENDPOINT_H
#define TOOLS_CLI_ENDPOINT_H

#include "cli/args.h"
#include "ops/ops.h"
#include "transport/transport.h"

/*
 * Every field of |sec|'s, |access|'s and |ops|' share: reconnection jitter
 * (tool_rand), the debug endpoints of |ops| on the transport's own port,
 * the TLS files, the access list, the streams per connection, the TLS
 * handshakes per peer and the per-peer stream rate (--stream-rate "off":
 * a rate of UINT32_MAX). The caller sets the mode, the address, its
 * callbacks and the services.
 * Strings are borrowed from |sec|; |access| and |ops| (either may be NULL)
 * must outlive the endpoint.
 */
tool_endpoint_options tool_endpoint_base(const tool_sec_args *sec,
                                         const tool_access *access,
                                         tool_ops *ops);

#endif
