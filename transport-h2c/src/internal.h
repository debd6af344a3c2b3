/* Internal declarations of the h2c transport. */
#ifndef MCP_H2C_INTERNAL_H
#define MCP_H2C_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "mcp/h2c.h"
#include "deframe.h"
#include "jobq.h"
#include "streamrec.h"
#include "util.h"

#define MCP_H2C_CONTAINER(ptr, type, member)                                 \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

typedef struct mcp_h2c_ep mcp_h2c_ep;
typedef struct mcp_h2c_conn mcp_h2c_conn;
typedef struct mcp_h2c_stream mcp_h2c_stream;
typedef struct mcp_h2c_tls mcp_h2c_tls;

typedef enum mcp_h2c_role {
  MCP_H2C_ROLE_SOURCE,
  MCP_H2C_ROLE_SINK,
  MCP_H2C_ROLE_CLIENT /* mcp_h2c_client: runs an mcp_client_def */
} mcp_h2c_role;

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

typedef enum mcp_h2c_stream_kind {
  MCP_H2C_SK_NEW,      /* server: request headers being received */
  MCP_H2C_SK_GRPC,     /* a gRPC call: a core session or an mcp_stream */
  MCP_H2C_SK_HTTP,     /* server: a plain HTTP request */
  MCP_H2C_SK_REJECTED  /* server: answered at once; input is dropped */
} mcp_h2c_stream_kind;

/* Header fields kept from a request (server) or a response (client). */
typedef struct mcp_h2c_headers {
  char *method, *path, *content_type, *te, *timeout, *encoding;
  int http_status;  /* client: :status, 0 when none */
  int grpc_status;  /* client: grpc-status, -1 when none */
  char *grpc_message;
  size_t bytes;     /* total size, bounded */
} mcp_h2c_headers;

struct mcp_h2c_stream {
  mcp_h2c_conn *c;
  mcp_h2c_stream *prev, *next;
  int32_t id;   /* HTTP/2 stream id; 0 before a dialed request is sent */
  uint64_t seq; /* mcp_h2c_stream_info.id */
  mcp_h2c_stream_kind kind;
  /* dialed, opened, the message counts, the final status and details
   * (details: mcp_h2c_malloc'd) */
  mcp_stream_rec rec;
  mcp_h2c_headers hd;
  mcp_tstamp deadline; /* grpc-timeout, MCP_TSTAMP_MAX when none */

  /* Every gRPC call: the protocol's stream driver (an application's
   * service or client, or the object's own MCP side's; |side|: a call
   * routed to the side's defs, which becomes the sink stream that
   * mcp_h2c_sink_finish() ends once opened), the service routed
   * to (server), the call slot (client: |in_slot| while the slot is this
   * stream's), and whether the peer's half-close was told to the driver. */
  mcp_stream *eng;
  int side;
  const mcp_service_def *svc;
  size_t slot;
  int in_slot;
  int eng_half_closed;
  char *api; /* a copy of ops->name (CLOSED reports it after del) */
  mcp_tstamp expiry; /* of the driver, cached */

  /* Outgoing: the one message taken from the core, as 5 header bytes and
   * the message's fragments; |out_read| bytes were promised to nghttp2 by
   * the data source, |out_sent| copied into the write buffer. */
  mcp_msg *out;
  uint8_t out_hdr[5];
  size_t out_len, out_read, out_sent;
  size_t out_iov, out_iov_off; /* position of |out_sent| in the fragments */
  int deferred;                /* the data source returned DEFERRED */
  /* A plain HTTP answer's body. */
  mcp_buf body;
  size_t body_off;

  mcp_h2c_deframer in; /* incoming messages */

  int response_submitted; /* server: response HEADERS submitted */
  int finishing;          /* the status is decided (trailers pending) */
  int trailers_submitted;
  int remote_closed;      /* the peer half-closed */
  int local_closed;       /* dialed: END_STREAM is (to be) sent */
  int announced;          /* OPENED was reported */
  int dirty;              /* pump at the next kick */

  /* Admission (admit.c, server): the stream's place in ep->admit (NULL
   * when none), whether it waits to run, and the DATA received while it
   * waits (not consumed: the stream's window bounds it). */
  mcp_admit_ticket *ticket;
  int waiting;
  int counted; /* counts in c->ncalls */
  mcp_buf held;
};

/* ------------------------------------------------------------------ */
/* Connections                                                         */
/* ------------------------------------------------------------------ */

typedef enum mcp_h2c_proto {
  MCP_H2C_PROTO_PROBE,  /* server: the first bytes decide */
  MCP_H2C_PROTO_HTTP1,  /* server: HTTP/1.1 requests */
  MCP_H2C_PROTO_H2,     /* HTTP/2 */
  MCP_H2C_PROTO_DIALING /* client: resolving or connecting */
} mcp_h2c_proto;

/* HTTP/1.1 request being parsed. */
typedef struct mcp_h2c_http1 {
  http_parser parser;
  mcp_buf url;
  mcp_buf field, value; /* the header line being read */
  int in_value;
  char *upgrade, *connection, *settings, *content_type, *te;
  size_t header_bytes;
  int has_body;
  int bad; /* an HTTP status (414, 431) to answer instead */
  int complete; /* a request was read: answer it */
  const mcp_mem *mem; /* the object's */
} mcp_h2c_http1;

struct mcp_h2c_conn {
  mcp_h2c_ep *ep;
  mcp_h2c_conn *prev, *next;
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_stream_t *sock;
  uv_timer_t timer;
  int refs; /* open handles and requests in flight */
  mcp_h2c_proto proto;
  int dialed;
  char peer[128];

  nghttp2_session *h2;
  mcp_h2c_stream *streams;
  size_t nstreams;      /* every stream object */
  size_t nmcp;          /* of them, streams with a session or a driver
                           (for keepalive) */
  size_t ncalls;        /* server: gRPC calls counted against
                           max_streams_per_connection */

  mcp_buf probe;    /* server: first bytes */
  mcp_h2c_http1 *h1;

  mcp_buf wfill, wflight; /* frames being gathered / being written;
                                 freed after a second without writes */
  mcp_buf wtls;  /* TLS: records to write next (tls.c's write BIO) */
  /* TLS: ciphertext the SSL object reads (tls.c's BIO): the socket's
   * bytes, lent for one read, then what it left of them, kept. */
  const uint8_t *rin;
  size_t rin_len;
  mcp_buf rtls;
  size_t rtls_off;
  mcp_tstamp last_write;      /* the last write's completion */
  uv_write_t wreq;
  int writing;
  int reading;
  int read_paused; /* HTTP/1.1: the answers wait for the socket */

  int closing;     /* conn_close() ran: handles are closing */
  int goaway_recv;
  int in_kick, dirty;
  int draining;    /* close once nothing is left to write */
  int goaway;      /* GOAWAY sent */
  int eof;
  /* Closed, but the socket lingers (conn.c linger()): FIN sent, what the
   * peer still sends read and dropped until it ends or goes quiet. */
  int lingering;
  mcp_tstamp linger_until; /* the latest end, however much it sends */
  uv_shutdown_t shut;
  mcp_tstamp last_recv, ping_sent_at, idle_since, last_ping_recv;
  int ping_outstanding, ping_strikes;
  /* server: streams the client reset, and its token bucket (h2.c) */
  uint64_t resets;
  double reset_tokens;
  mcp_tstamp reset_at;

  /* TLS (tls.c): the connection's SSL object (NULL: cleartext), whether
   * its handshake is done, since when it runs, whether it counts in
   * ep->handshaking, and the peer's verified identities. */
  SSL *ssl;
  int tls_done;
  int tls_data; /* plaintext came through */
  mcp_tstamp hs_started;
  int hs_counted;
  mcp_identities ids;

  /* client */
  mcp_tstamp connected_at; /* 0 until connected */
  int peer_settings; /* the server's first SETTINGS arrived: its stream
                        limit is known, calls may be sent */
  uv_connect_t connect_req;
  uv_getaddrinfo_t gai;
  int resolving;
};

/* ------------------------------------------------------------------ */
/* The object                                                          */
/* ------------------------------------------------------------------ */

typedef enum mcp_h2c_job_kind {
  MCP_H2C_JOB_STORE,
  MCP_H2C_JOB_STATE,
  MCP_H2C_JOB_RUN /* mcp_h2c_client_update() / _call() */
} mcp_h2c_job_kind;

typedef struct mcp_h2c_job {
  mcp_jobq_job q; /* first: the queue's part (common/jobq.h) */
  mcp_h2c_job_kind kind;
  mcp_h2c_store_fn store_fn;
  mcp_h2c_state_fn state_fn;
  mcp_h2c_run_fn run_fn;
  void *user_data;
} mcp_h2c_job;

struct mcp_h2c_ep {
  mcp_h2c_role role;
  /* opts.mem, copied (libc when NULL); every allocation of the object
   * goes through it, nghttp2's sessions' through |ngmem| (the same). */
  mcp_mem mem;
  nghttp2_mem ngmem;
  uv_loop_t *loop;
  mcp_h2c_options opts; /* strings point to the copies below */
  char *address, *authority;
  mcp_h2c_addr addr;      /* DIAL: the element of |address| dialed now */
  size_t naddrs, addr_index; /* elements of |address|, the current one */
  int fixed_authority;    /* opts.authority was given */
  int dialed_once;        /* the first address was dialed */
  char target[512];       /* DIAL: the element dialed now, as written */
  mcp_source_options source_opts;
  mcp_sink_state *state;
  /* MCP as the core's service and client definitions (NULL with no
   * MCP): served and dialed as any protocol's. */
  mcp_side *side;
  uv_thread_t loop_thread;

  mcp_jobq jobs; /* shared with other threads; woken through |async| */

  uv_async_t async;
  uv_idle_t idle; /* deferred kicks */
  int idle_active;
  int notify_all;

  int stopping; /* del() ran */
  int refs;     /* open handles (the object's and its connections') */
  mcp_h2c_conn *conns;
  size_t nconns;
  mcp_h2c_conn *lingering; /* closed connections whose sockets linger */
  size_t nlingering;
  mcp_h2c_stream *sink_stream; /* the newest sink stream (finish) */
  int finished; /* DIAL: mcp_h2c_sink_finish(): no new connection */
  uint64_t next_stream_id;
  mcp_tstamp grace_at;

  /* LISTEN (server.c): the listening descriptor, polled; whether
   * accepting is paused (out of descriptors or memory) and how often it
   * was; the timer that tries again. */
  uv_poll_t lis;
  int lis_fd;
  int listening;
  int port;
  int accept_paused;
  uint64_t accept_pauses;
  uv_timer_t accept_retry;

  /* LISTEN: admission (admit.c): the core's policy, its timer, and a run
   * of its decisions pending (on the idle handle). */
  mcp_admit *admit;
  uv_timer_t admit_timer;
  int admit_dirty;

  /* DIAL */
  uv_timer_t retry;
  mcp_h2c_conn *dial; /* the attempt under way */
  mcp_redial redial; /* the core's reconnection: a connection is an attempt */
  uint64_t rand_state;

  /* LISTEN: services served beside (or instead of, |no_mcp|) MCP. */
  const mcp_service_def *services;
  size_t nservices;
  int no_mcp;

  /* DIAL: the protocol run (the client object's, or a dialing MCP side's
   * mcp_side_client()), one stream (or NULL) per slot, and the timer for
   * def.get_expiry(). */
  mcp_client_def cdef;
  mcp_h2c_stream **slots;
  uv_timer_t cexp;
  int in_fill;

  /* TLS (tls.c; NULL: cleartext): the context and its files (copies of
   * opts.tls's paths), handshakes in progress, counters. */
  mcp_h2c_tls *tls;
  char *tls_paths[4];
  size_t handshaking;
  uint64_t tls_handshakes, tls_handshake_failures, tls_handshake_timeouts,
      refused_handshakes, refused_unauthenticated, refused_denied, revoked,
      refused_connection_streams, rapid_resets;

  /* counters */
  uint64_t bytes_read, bytes_written, msgs_in, msgs_out;
  uint64_t opened; /* streams opened (OPENED events, with or without a
                      callback) */
  size_t write_buffered, msg_buffered, read_buffered;
};

/* api.c */
/* Reads the caller's |opts| of |version| into |out| (the defaults for the
 * fields of later versions). INVALID_ARGUMENT for an unknown version. */
int mcp_h2c_options_read(mcp_h2c_options *out, int version,
                         const mcp_h2c_options *opts);
/* Writes the fields of |version| of |full| into |out|. INVALID_ARGUMENT
 * for a version below 1 or |out| NULL. */
/* 1 when called on |ep|'s loop thread. */
int mcp_h2c_on_loop_thread(const mcp_h2c_ep *ep);
/* Makes |ep->mem| and |ep->ngmem| from |mem| (NULL: the C library). */
void mcp_h2c_ep_mem_init(mcp_h2c_ep *ep, const mcp_mem *mem);

/* ep.c */
void mcp_h2c_ep_schedule(mcp_h2c_ep *ep); /* kick dirty connections soon */
void mcp_h2c_ep_unref(mcp_h2c_ep *ep);    /* a handle of the object closed */
void mcp_h2c_info_fill(const mcp_h2c_stream *s, mcp_h2c_stream_info *info);
void mcp_h2c_notify_stream(mcp_h2c_stream *s, mcp_h2c_stream_event ev);

/* conn.c */
mcp_h2c_conn *mcp_h2c_conn_new(mcp_h2c_ep *ep, int dialed);
void mcp_h2c_conn_start(mcp_h2c_conn *c); /* socket ready: start reading */
void mcp_h2c_conn_close(mcp_h2c_conn *c, int status, const char *details);
/* Closes at once every socket left lingering after its connection closed
 * (conn.c): the endpoint stops. */
void mcp_h2c_conn_linger_stop(mcp_h2c_ep *ep);
void mcp_h2c_conn_kick(mcp_h2c_conn *c);
void mcp_h2c_conn_mark(mcp_h2c_conn *c); /* kick it from the idle handle */
int mcp_h2c_conn_write(mcp_h2c_conn *c, const void *p, size_t n);
void mcp_h2c_conn_arm(mcp_h2c_conn *c);
void mcp_h2c_conn_unref(mcp_h2c_conn *c); /* a handle or request is done */
void mcp_h2c_conn_name_peer(mcp_h2c_conn *c);
/* TLS: |c| no longer counts as a handshake in progress. */
void mcp_h2c_conn_handshake_over(mcp_h2c_conn *c);

/* h2.c */
int mcp_h2c_session_new(mcp_h2c_conn *c, int server);
mcp_h2c_stream *mcp_h2c_stream_new(mcp_h2c_conn *c, int32_t id);
void mcp_h2c_stream_free(mcp_h2c_stream *s);
void mcp_h2c_stream_finish(mcp_h2c_stream *s, int status,
                           const char *details);
void mcp_h2c_stream_pump(mcp_h2c_stream *s, mcp_tstamp now);
/* The connection is going away: reports and frees every stream. */
void mcp_h2c_streams_gone(mcp_h2c_conn *c, int status, const char *details);
int mcp_h2c_stream_open_session(mcp_h2c_stream *s);
/* Gives |st| (a service's or a client's driver) to |s|: waker, counters,
 * OPENED-ready. */
void mcp_h2c_stream_attach(mcp_h2c_stream *s, mcp_stream *st, mcp_tstamp now);
/* The peer half-closed a driver's stream: tells it once, after the
 * messages before it. */
void mcp_h2c_stream_tell_half_close(mcp_h2c_stream *s);
/* server: the request's headers are complete (also after an upgrade). */
void mcp_h2c_stream_request(mcp_h2c_stream *s);
/* server: an admitted request starts: session, response, OPENED, and the
 * DATA held while it waited. */
void mcp_h2c_stream_start(mcp_h2c_stream *s);
/* The connection's peer as authorization sees it (valid while |c| is). */
void mcp_h2c_conn_peer(const mcp_h2c_conn *c, mcp_peer *peer);
/* Asks options.authorize about |c|'s peer: 0, or the status to refuse
 * with (|*details| set), counted in the stats. */
int mcp_h2c_conn_authorize(mcp_h2c_conn *c, const char **details);
/* server: a trailers-only gRPC answer (HTTP 200) with |status|. */
void mcp_h2c_stream_reject(mcp_h2c_stream *s, int status, const char *details);
/* Feeds DATA payload to a running stream (delivers whole messages). */
void mcp_h2c_stream_input(mcp_h2c_stream *s, const uint8_t *p, size_t n);
/* client: submit the request of a dialed stream. */
int mcp_h2c_stream_submit_request(mcp_h2c_stream *s);
/* server: answers a complete plain HTTP request. */
void mcp_h2c_stream_http_answer(mcp_h2c_stream *s);
void mcp_h2c_stream_set_details(mcp_h2c_stream *s, const char *details);

/* http1.c */
int mcp_h2c_http1_start(mcp_h2c_conn *c);
/* Feeds bytes; returns 0, or <0 when the connection must close. */
int mcp_h2c_http1_feed(mcp_h2c_conn *c, const uint8_t *p, size_t n);
void mcp_h2c_http1_free(mcp_h2c_conn *c);
/* Answers a plain HTTP request: runs the handler or the built-in answer. */
void mcp_h2c_http_answer(mcp_h2c_ep *ep, const char *method, const char *path,
                         int *status, char **content_type, mcp_buf *body);

/* client.c */
/* Makes element |i| of ep->address the address dialed (ep->addr, and the
 * :authority unless one was given). INVALID_ARGUMENT, NOMEM. */
int mcp_h2c_ep_select_addr(mcp_h2c_ep *ep, size_t i);
void mcp_h2c_client_start(mcp_h2c_ep *ep); /* schedule the first attempt */
void mcp_h2c_client_stop(mcp_h2c_ep *ep);
void mcp_h2c_client_conn_gone(mcp_h2c_ep *ep, mcp_h2c_conn *c);
/* A dialed stream of |c| is gone after |received| messages: counted for
 * its connection's attempt (the protocol heard the end through
 * mcp_h2c_client_call_gone()). */
void mcp_h2c_client_stream_gone(mcp_h2c_ep *ep, mcp_h2c_conn *c,
                                uint64_t received);
/* 1 when |ep| dials the calls of a client def: the client object, or a
 * dialing source or sink (its MCP side's def); the same path for both. */
static inline int mcp_h2c_runs_client(const mcp_h2c_ep *ep) {
  return ep->cdef.nslots > 0;
}
/* The connection calls may start on (NULL when none). */
mcp_h2c_conn *mcp_h2c_client_conn(mcp_h2c_ep *ep);
/* Asks def.open() for every free slot; starts the calls on |c|; arms the
 * expiry timer. Never inside nghttp2 callbacks. */
void mcp_h2c_client_fill(mcp_h2c_ep *ep, mcp_h2c_conn *c);
/* The call of |s| is gone: frees its slot and calls def.ended() (not
 * once the object is stopping). */
void mcp_h2c_client_call_gone(mcp_h2c_stream *s);
/* *_del(): every call ends CANCELLED for the protocol. */
void mcp_h2c_client_end_all(mcp_h2c_ep *ep);
/* Once the connection is ready (the server's SETTINGS came), submits the
 * calls waiting for it. NOMEM. */
int mcp_h2c_client_connected(mcp_h2c_ep *ep, mcp_h2c_conn *c);

/* admit.c */
/* LISTEN: creates ep->admit and its timer (a handle: counts in refs). */
int mcp_h2c_admit_init(mcp_h2c_ep *ep);
void mcp_h2c_admit_close(mcp_h2c_ep *ep); /* closes the timer */
void mcp_h2c_admit_free(mcp_h2c_ep *ep);  /* with the object */
/* A gRPC request that passed the checks: runs, waits or is refused. */
void mcp_h2c_admit(mcp_h2c_stream *s);
/* Applies the policy's decisions now (from the idle handle or timer). */
void mcp_h2c_admit_run(mcp_h2c_ep *ep);
/* After a message was taken from a source session holding a slot. */
void mcp_h2c_admit_check_initial(mcp_h2c_stream *s, mcp_tstamp now);
/* DATA for a waiting stream: held, not consumed. 0, or NOMEM. */
int mcp_h2c_admit_hold(mcp_h2c_stream *s, const uint8_t *p, size_t n);
/* The stream leaves admission (ends or is freed). */
void mcp_h2c_admit_leave(mcp_h2c_stream *s);

/* tls.c */
int mcp_h2c_tls_wanted(const mcp_h2c_tls_options *o);
/* A context from the files of |o| as read now (|listen|: a server's),
 * set as every endpoint's is; bench/tls_handshake measures handshakes
 * with it. 0 and *out (the caller's: SSL_CTX_free()), or INVALID_ARGUMENT
 * or NOMEM with the reason in |err|. */
int mcp_h2c_tls_ctx_new(const mcp_h2c_tls_options *o, int listen, SSL_CTX **out,
                        char *err, size_t errlen);
/* Makes ep->tls from ep->opts.tls (|listen|: a server's context).
 * INVALID_ARGUMENT, IO, NOMEM. */
int mcp_h2c_tls_new(mcp_h2c_ep *ep, int listen);
void mcp_h2c_tls_free(mcp_h2c_ep *ep);
void mcp_h2c_tls_stats(const mcp_h2c_ep *ep, mcp_h2c_stats *st);
/* A connection's SSL object (the context reloaded first if its files
 * changed). NOMEM. */
int mcp_h2c_tls_conn_start(mcp_h2c_conn *c);
void mcp_h2c_tls_conn_free(mcp_h2c_conn *c);
/* Ciphertext from the socket, lent to the SSL object until
 * mcp_h2c_tls_input_end(): read where it is, never copied. */
void mcp_h2c_tls_input(mcp_h2c_conn *c, const uint8_t *p, size_t n);
/* What the SSL object did not read of the lent bytes is kept in c->rtls
 * (the socket's buffer is reused by the next read). NOMEM. */
int mcp_h2c_tls_input_end(mcp_h2c_conn *c);
/* Advances the handshake: 1 done (identities read), 0 more to come, or
 * PROTOCOL with |why| ("no TLS connection: ..."). */
int mcp_h2c_tls_handshake(mcp_h2c_conn *c, char *why, size_t len);
/* Plaintext received: >0 bytes, 0 none now, CLOSED (close_notify),
 * PROTOCOL. */
ssize_t mcp_h2c_tls_read(mcp_h2c_conn *c, uint8_t *buf, size_t cap,
                         char *why, size_t len);
/* Encrypts |plain| (emptied; once the handshake is done) into c->wtls,
 * where the SSL object writes every record it sends. PROTOCOL (NOMEM
 * included: OpenSSL's write fails). */
int mcp_h2c_tls_output(mcp_h2c_conn *c, mcp_buf *plain);

/* server.c */
int mcp_h2c_server_start(mcp_h2c_ep *ep);
void mcp_h2c_server_stop(mcp_h2c_ep *ep);
/* An accepted connection closed: a descriptor is free, so a paused
 * listener tries again now. */
void mcp_h2c_server_conn_gone(mcp_h2c_ep *ep);

#endif
