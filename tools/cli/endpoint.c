/* The endpoint options of the shared flags (cli/endpoint.h). */
#include "cli/endpoint.h"

#include "util/rand.h"

tool_endpoint_options tool_endpoint_base(const tool_sec_args *sec,
                                         const tool_access *access,
                                         tool_ops *ops) {
  return (tool_endpoint_options){
      .rand = tool_rand,
      .http = tool_ops_http, /* h2: the debug endpoints on its port */
      .http_user_data = ops,
      .tls = {sec->tls_cert, sec->tls_key, sec->tls_ca, sec->tls_server_name},
      .acl = tool_access_acl(access),
      .max_streams_per_connection = (int)sec->max_streams_per_connection,
      .peer_stream_rate =
          sec->stream_rate_off ? UINT32_MAX : (uint32_t)sec->stream_rate,
      .peer_stream_burst = (uint32_t)sec->stream_burst,
      .max_handshakes_per_peer = (int)sec->handshakes_per_peer,
  };
}
