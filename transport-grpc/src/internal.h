/* Internal declarations of the gRPC transport. */
#ifndef MCP_GRPC_INTERNAL_H
#define MCP_GRPC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include <grpc/grpc.h>

#include "mcp/engine.h"
#include "mcp/grpc.h"

#include "hugepage.h"
#include "jobq.h"
#include "streamrec.h"

#define MCP_GRPC_CONTAINER(ptr, type, member)                                \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* mem.c: allocation through an object's hook (opts.mem, copied into
 * |ep->mem|; the C library when NULL). Every allocation of ours goes
 * through these; gRPC's own do not. */
void mcp_grpc_mem_init(mcp_mem *dst, const mcp_mem *src);
void *mcp_grpc_malloc(const mcp_mem *m, size_t n);
void *mcp_grpc_calloc(const mcp_mem *m, size_t nmemb, size_t size);
void *mcp_grpc_realloc(const mcp_mem *m, void *p, size_t n);
void mcp_grpc_free(const mcp_mem *m, void *p); /* NULL is a no-op */
char *mcp_grpc_strdup(const mcp_mem *m, const char *s);
/* common/hugepage.h's hint, for a received message joined (here, so that
 * mem.c alone defines the _DEFAULT_SOURCE it needs). */
void mcp_grpc_hint_large(void *p, size_t len);

/* Every completion-queue tag is one of these, embedded in the object that
 * started the operation; the loop calls |fn| with the op's success bit. */
typedef struct mcp_grpc_tag {
  void (*fn)(struct mcp_grpc_tag *tag, int ok);
} mcp_grpc_tag;

typedef enum mcp_grpc_role {
  MCP_GRPC_ROLE_NONE, /* a call to an unknown method: answered, then closed */
  MCP_GRPC_ROLE_SOURCE,
  MCP_GRPC_ROLE_SINK,
  /* A stream run by the engine's driver (an mcp_stream): a call to one of
   * opts.services (LISTEN) or a dialed call of a client def's slot (an
   * mcp_grpc_client's, or a dialing source's or sink's MCP side's). */
  MCP_GRPC_ROLE_SERVICE,
  /* The object: an mcp_grpc_client (its streams are ROLE_SERVICE). */
  MCP_GRPC_ROLE_CLIENT
} mcp_grpc_role;

/* Work handed to the transport thread by other threads. */
typedef enum mcp_grpc_job_kind {
  MCP_GRPC_JOB_STORE,
  MCP_GRPC_JOB_STATE,
  MCP_GRPC_JOB_STREAMS,
  MCP_GRPC_JOB_STATS,      /* user_data: the mcp_grpc_stats to fill */
  MCP_GRPC_JOB_REAUTHORIZE,
  MCP_GRPC_JOB_FINISH,     /* mcp_grpc_sink_finish() */
  MCP_GRPC_JOB_RUN         /* mcp_grpc_client_update() */
} mcp_grpc_job_kind;

typedef struct mcp_grpc_job {
  mcp_jobq_job q; /* first: the queue's part (common/jobq.h) */
  mcp_grpc_job_kind kind;
  mcp_grpc_store_fn store_fn;
  mcp_grpc_state_fn state_fn;
  mcp_grpc_stream_fn stream_fn;
  mcp_grpc_run_fn run_fn;
  void *user_data;
} mcp_grpc_job;

typedef struct mcp_grpc_ep mcp_grpc_ep;
typedef struct mcp_grpc_stream mcp_grpc_stream;

/* A client object's connection: one gRPC channel that the calls of its
 * slots share (client_svc.c). It is replaced when a call on it ends with
 * UNAVAILABLE (the connection failed or was lost); a replaced one lives
 * on until its last call is gone, so that the calls still running on it
 * are not cut. */
typedef struct mcp_grpc_chan {
  grpc_channel *ch;
  size_t calls;       /* calls started on it and not yet gone */
  int retired;        /* no new call goes on it */
} mcp_grpc_chan;

/* TLS material from files, shared with gRPC's threads (tls.c). */
typedef struct mcp_grpc_tls mcp_grpc_tls;

typedef enum mcp_grpc_stream_state {
  MCP_GRPC_ST_OPEN,
  MCP_GRPC_ST_FINISHING, /* server: status waits for the send in flight */
  MCP_GRPC_ST_CLOSING    /* status sent or call cancelled or call over */
} mcp_grpc_stream_state;

/* One call. Freed when its last operation completes. */
struct mcp_grpc_stream {
  mcp_grpc_ep *ep;
  struct mcp_grpc_stream *prev, *next;
  grpc_call *call;
  uint64_t id;
  mcp_grpc_role role;
  /* dialed, opened, the message counts, the final status and details
   * (details: mcp_grpc_malloc'd) */
  mcp_stream_rec rec;
  /* The engine's stream, from a service def (the application's or the
   * MCP side's) or a client def: owned,
   * mcp_stream_del() in drop_session(). ROLE_SERVICE: the service served
   * (LISTEN), or the slot and the connection of the client's call
   * (dialed). */
  mcp_stream *st;
  const mcp_service_def *svc;
  size_t slot;
  mcp_grpc_chan *chan;
  /* ROLE_SERVICE: the protocol's name (ops->name, copied: the info's
   * |api| also once the stream is gone), NULL before it has a stream. */
  char *api;
  int recv_busy; /* a receive is in flight */
  char *peer;    /* gpr_malloc'd by gRPC */
  mcp_tstamp expiry; /* of the engine's stream, cached */
  mcp_grpc_stream_state state;
  int dirty;  /* pump at the end of this loop iteration */
  int ops;    /* operations in flight */
  int send_busy, closed, peer_known, announced;
  mcp_grpc_tag recv_tag, send_tag, close_tag;
  grpc_byte_buffer *recv_bb, *send_bb;
  /* client: RECV_INITIAL_METADATA and RECV_STATUS_ON_CLIENT outputs */
  grpc_metadata_array md_initial, md_trailing;
  grpc_status_code recv_status;
  grpc_slice recv_details;
  int cancelled; /* server: RECV_CLOSE_ON_SERVER output */

  /* Identity (auth.c): the peer's verified identities (mcp/auth.h's
   * order and rules), allocated with the object's hook. */
  mcp_identities ids;
  int tls;
  int authorized; /* may send: admitted, or (dialed) the server allowed */
  int connected;  /* dialed: the initial metadata went out */
  int md_sent;    /* server: SEND_INITIAL_METADATA started */
  int client_done; /* dialed: the driver said HALF_CLOSE; the close goes
                      out after the send in flight */
  int close_sent;  /* dialed: SEND_CLOSE_FROM_CLIENT started */

  /* Admission (admit.c, LISTEN): the stream's place in ep->admit (NULL
   * when not admitted or gone). A call waiting to run has a ticket and no
   * session. */
  mcp_admit_ticket *ticket;
};

/* The state shared by the four roles: a source or a sink, listening or
 * dialing, with its thread and completion queue. */
struct mcp_grpc_ep {
  mcp_grpc_role role;
  mcp_mem mem;           /* opts.mem, copied (libc when NULL) */
  mcp_grpc_options opts; /* opts.address points to |address| */
  char *address;
  /* DIAL: |address| may list several, dialed in turn (client.c). */
  size_t dial_index;
  int dialed_once;
  char target[512]; /* the element dialed now */
  mcp_source_options source_opts;
  mcp_sink_state *state;
  /* MCP as the core's service and client definitions (NULL with
   * no_mcp): the transport serves or dials them as any protocol's. */
  mcp_side *side;

  /* Shared with other threads: the queue, and under its lock
   * |wake_pending| (a wake-up call is in flight). */
  mcp_jobq jobs;
  int wake_pending;

  /* Transport thread only (and new/del around its life). */
  pthread_t thread;
  grpc_completion_queue *cq;
  grpc_channel *lame; /* wake-ups: a call on it completes at once */
  mcp_grpc_tag wake_tag;
  grpc_call *wake_call;
  grpc_metadata_array wake_md;
  grpc_status_code wake_status;
  grpc_slice wake_details;
  mcp_tstamp now;
  int stopping, cq_shut, all_dirty;
  mcp_grpc_stream *streams;
  size_t nstreams;
  uint64_t next_id;
  mcp_grpc_stream *sink_stream; /* the newest sink stream (finish) */
  /* A stream was woken (mcp_stream_wake) during a pass of the tick: the
   * tick makes another pass, so that it is pumped before the loop
   * sleeps. */
  int woken;
  int finished; /* DIAL: mcp_grpc_sink_finish(): no new stream */

  /* LISTEN */
  grpc_server *server;
  int port;
  int listen_errno; /* why the address could not be bound (0: unknown) */
  mcp_grpc_tag accept_tag;
  grpc_call *accept_call;
  grpc_call_details accept_details;
  grpc_metadata_array accept_md;
  int accept_pending;
  mcp_grpc_tag shutdown_tag;
  int shutdown_pending, cancelled_all;
  mcp_tstamp cancel_at;

  /* TLS from files (NULL: none) and authorization */
  mcp_grpc_tls *tls;
  mcp_grpc_stats stats;

  /* Admission (LISTEN): the core's policy object (admit.c). */
  mcp_admit *admit;
  int admit_dirty; /* a slot was freed: run admission without waiting */

  /* LISTEN: opts.services, copied with their method strings in one
   * block (opts.services points to it). */
  mcp_service_def *services;

  /* DIAL: the protocol (the client object's, or a dialing MCP side's
   * mcp_side_client(): the same path) and its slots' calls. */
  mcp_client_def client_def;
  mcp_grpc_stream **slots; /* the call of each slot, NULL when none */
  mcp_grpc_chan *chan;     /* where new calls go (NULL: none yet) */
  size_t nchans;           /* channels alive, current or retired */

  /* DIAL: the core's reconnection of the connection (the current
   * connection is the attempt); a protocol's calls are its own (MCP's:
   * its side's client def). */
  mcp_redial redial;
  uint64_t rand_state;
};

/* options.c */
/* Builds the channel arguments for |ep| in a malloc'd array (free it). */
grpc_arg *mcp_grpc_args(const mcp_grpc_ep *ep, int server, size_t *nargs);
/* Replaces 0 (the default) in the admission limits of |o|. */
void mcp_grpc_options_normalize(mcp_grpc_options *o);
/* Reads the caller's |opts| of |version| into |out| (the defaults for the
 * fields of later versions). INVALID_ARGUMENT for an unknown version. */
int mcp_grpc_options_read(mcp_grpc_options *out, int version,
                          const mcp_grpc_options *opts);

/* tls.c */
/* 1 when |o| asks for TLS (one of the files is set). */
int mcp_grpc_tls_wanted(const mcp_grpc_tls_options *o);
/* Reads the files of |o| (checked for the mode) into a new object. */
int mcp_grpc_tls_new(mcp_grpc_tls **pt, const mcp_grpc_tls_options *o,
                     int listen, const mcp_mem *mem);
/* Frees it; gRPC must hold no credentials made from it any more. */
void mcp_grpc_tls_del(mcp_grpc_tls *t);
/* Server credentials whose certificates follow the files (NULL: NOMEM). */
grpc_server_credentials *mcp_grpc_tls_server_credentials(mcp_grpc_tls *t);
/* Channel credentials from the files as they are now (re-read if they
 * changed). */
grpc_channel_credentials *mcp_grpc_tls_channel_credentials(mcp_grpc_tls *t);

/* auth.c */
/* Reads the peer's identities from the call's auth context into |s|. */
void mcp_grpc_stream_identify(mcp_grpc_stream *s);
/* Runs the authorize callback on |s|'s peer: 0, or the status to end the
 * stream with, and its details in |*details| (static). */
int mcp_grpc_stream_authorize(mcp_grpc_stream *s, const char **details);
void mcp_grpc_stream_identity_free(mcp_grpc_stream *s);

/* admit.c */
/* LISTEN: creates / frees ep->admit (after the last stream is gone). */
int mcp_grpc_admit_init(mcp_grpc_ep *ep);
void mcp_grpc_admit_fini(mcp_grpc_ep *ep);
/* A call that passed authorization: refused, queued or opened. */
void mcp_grpc_admit(mcp_grpc_stream *s);
/* Admits what may go now; lowers |*deadline| to the next admission time. */
void mcp_grpc_admit_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline);
/* After a message was handed to gRPC on a source stream holding an
 * initial slot: frees the slot once every first push went out. */
void mcp_grpc_admit_check_initial(mcp_grpc_stream *s);
/* The stream leaves admission: out of its queue, slot and count. */
void mcp_grpc_admit_leave(mcp_grpc_stream *s);

/* loop.c */
int mcp_grpc_ep_start(mcp_grpc_ep *ep);
void mcp_grpc_ep_stop(mcp_grpc_ep *ep);
/* mcp_jobq_submit() of the job |job| describes: an asynchronous one is
 * copied, a synchronous one returns once the loop ran it. */
int mcp_grpc_ep_submit(mcp_grpc_ep *ep, mcp_grpc_job *job);
void mcp_grpc_stream_info_fill(const mcp_grpc_stream *s,
                               mcp_grpc_stream_info *info);

/* server.c */
int mcp_grpc_server_create(mcp_grpc_ep *ep);
void mcp_grpc_server_start(mcp_grpc_ep *ep);
void mcp_grpc_server_shutdown(mcp_grpc_ep *ep);
void mcp_grpc_server_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline);

/* client.c */
/* A new channel to the next target of the address list (NULL: NOMEM). */
grpc_channel *mcp_grpc_channel_new(mcp_grpc_ep *ep);

/* client_svc.c (the calls of a client def: mcp_grpc_client, a dialing
 * source or sink) */
void mcp_grpc_svc_client_tick(mcp_grpc_ep *ep, mcp_tstamp *deadline);
void mcp_grpc_svc_client_shutdown(mcp_grpc_ep *ep);
/* A slot's call is over and freed (its engine stream deleted, its call
 * released): frees the slot, releases the connection, and tells the
 * protocol (ended). */
void mcp_grpc_svc_client_call_gone(mcp_grpc_ep *ep, size_t slot,
                                   mcp_grpc_chan *chan, uint64_t received,
                                   int status, const char *details);

/* stream.c */
/* Client: starts a call of a slot with |st| (taken over, also on
 * failure). Errors: NOMEM (the call is cancelled and released). */
int mcp_grpc_stream_dial_service(mcp_grpc_ep *ep, grpc_call *call,
                                 size_t slot, mcp_grpc_chan *chan,
                                 mcp_stream *st);
/* LISTEN: a call for |svc| (NULL: no method served: UNIMPLEMENTED), run
 * as |role|: SERVICE for opts.services, the object's role for its MCP
 * side's defs. */
void mcp_grpc_stream_accept(mcp_grpc_ep *ep, grpc_call *call,
                            const mcp_service_def *svc, mcp_grpc_role role);
void mcp_grpc_stream_finish(mcp_grpc_stream *s, int status,
                            const char *details);
void mcp_grpc_stream_pump(mcp_grpc_stream *s);
/* Server: an admitted call becomes a stream (session, OPENED, reads). */
void mcp_grpc_stream_open(mcp_grpc_stream *s);
/* Server: ends a call that never became a stream, and reports REFUSED. */
void mcp_grpc_stream_refuse(mcp_grpc_stream *s, int status,
                            const char *details);
/* Runs authorization again on an open or waiting stream. */
void mcp_grpc_stream_reauthorize(mcp_grpc_stream *s);

/* buffer.c */
/* Wraps |msg| into a byte buffer, referencing its large fragments (the
 * message is freed when gRPC drops the last of them). Consumes |msg|, also
 * on failure (NULL). */
grpc_byte_buffer *mcp_grpc_buffer_from_msg(const mcp_mem *mem, mcp_msg *msg);

/* The bytes of |bb|: its single slice, or a joined copy kept in |*flat|
 * (release with grpc_slice_unref when |*joined|). 0, or -1 when |bb|
 * cannot be read. */
int mcp_grpc_buffer_bytes(grpc_byte_buffer *bb, const uint8_t **p,
                          size_t *len, grpc_slice *flat, int *joined);

/* The slices of an uncompressed |bb| of more than one, as fragments in
 * |stack| (|nstack| of them) or, when more, in an array from |mem| that
 * the caller frees unless it is |stack|. Returns the count; 0 when |bb|
 * is one slice or compressed (read it by mcp_grpc_buffer_bytes()), -1 for
 * NOMEM. Valid while |bb| is. */
ptrdiff_t mcp_grpc_buffer_iov(const grpc_byte_buffer *bb, const mcp_mem *mem,
                              mcp_iovec *stack, size_t nstack,
                              mcp_iovec **piov);

#endif
