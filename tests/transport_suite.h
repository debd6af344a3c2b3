/*
 * The transport suite's adapter (issue 21 item 7): the behaviour tests of
 * a transport are written once (tests/test_transport_*.c) over this small
 * table of functions, and each transport gives one table
 * (tests/transport_grpc.c: ta_grpc, tests/transport_h2c.c: ta_h2c). A
 * third transport gets the suite by writing its own table and adding a
 * row to tests/meson.build; checks that only one transport can pass are that
 * transport's own tests (ta_transport.add_own_tests), each saying why.
 *
 * Threads: everything is called from the test's thread. A loop-driven
 * transport (h2c) runs its loop inside run_until() and settle(); a
 * threaded one (gRPC) runs by itself, and run_until() only polls.
 */
#ifndef MCP_TEST_TRANSPORT_SUITE_H
#define MCP_TEST_TRANSPORT_SUITE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp/auth.h"
#include "mcp/engine.h"
#include "mcp/mcp.h"

/* How long a test waits for an event before it fails: a failure guard,
 * never a window (every wait returns at its event); generous, for a busy
 * 2-core machine. */
#define TA_TIMEOUT_MS 20000

typedef struct ta_env ta_env; /* a test's world: the loop, if any */
typedef struct ta_obj ta_obj; /* a source, a sink or a client */

/* What the suite sets; the adapter writes the transport's own options
 * struct from it (defaults of |version| first, then these). */
typedef struct ta_opts {
  int version;        /* passed to *_new_versioned() */
  int defaults_version; /* of *_options_default_versioned() (0: current) */
  int listen;         /* 1 LISTEN, 0 DIAL */
  const char *address;
  const mcp_mem *mem; /* written even where |defaults_version| lacks it */
  const mcp_service_def *services;
  size_t nservices;
  int no_mcp; /* services only */
  int max_recv_message_size; /* 0: the transport's default */
  int max_send_message_size; /* 0: the transport's default */
  int max_concurrent_streams; /* listening; 0: the transport's default */
  int max_streams; /* listening, admission; 0: the transport's default */
  /* Each stream's OPENED / CLOSED / REFUSED, on the transport's thread;
   * NULL: none. Given to the transport as it is: both take the engine's
   * mcp_stream_cb. */
  mcp_stream_cb on_stream;
  void *on_stream_ud;
  /* TLS files (NULL: cleartext); the suite sets them in MCP_TEST_TLS
   * mode (test_certs.h keeps the directory in the suite's file). */
  const char *cert_file, *key_file, *ca_file, *server_name;
  /* The transport's authorize hook and its user data (NULL: everyone). */
  mcp_authorize_fn authorize;
  void *authorize_ud;
  /* ---- sync ---- */
  size_t max_queued_updates; /* a source's; 0: the transport's default */
  /* HTTP/2 keepalive, as both transports' options (0: their default). */
  int keepalive_time_ms, keepalive_timeout_ms, keepalive_permit_without_calls;
  int min_recv_ping_interval_ms;
  /* ---- admission (test_transport_admission.c) ---- */
  /* A listener's admission options, as both transports name them
   * (0: the transport's default; UINT32_MAX / SIZE_MAX: no limit). */
  size_t max_streams_per_peer;
  uint32_t stream_rate, stream_burst;
  uint32_t peer_stream_rate, peer_stream_burst;
  size_t max_initial_pushes, max_initial_pushes_per_peer;
  mcp_tstamp initial_push_timeout, admission_wait_timeout;
  /* Streams one connection may carry (h2c's max_streams_per_connection;
   * gRPC's bound is max_concurrent_streams alone). 0: the default. */
  int max_streams_per_connection;
} ta_opts;

/* ---- sync ---- */
/* Copies ta_opts' sync fields into a transport's options struct |o|, whose
 * fields of these names mean the same on every transport. */
#define TA_SYNC_OPTIONS(o, t)                                                \
  do {                                                                       \
    if ((t)->max_queued_updates)                                             \
      (o)->max_queued_updates = (t)->max_queued_updates;                     \
    if ((t)->keepalive_time_ms)                                              \
      (o)->keepalive_time_ms = (t)->keepalive_time_ms;                       \
    if ((t)->keepalive_timeout_ms)                                           \
      (o)->keepalive_timeout_ms = (t)->keepalive_timeout_ms;                 \
    if ((t)->keepalive_permit_without_calls)                                 \
      (o)->keepalive_permit_without_calls =                                  \
          (t)->keepalive_permit_without_calls;                               \
    if ((t)->min_recv_ping_interval_ms)                                      \
      (o)->min_recv_ping_interval_ms = (t)->min_recv_ping_interval_ms;       \
  } while (0)

typedef struct ta_transport {
  const char *name;
  /* versioned structs */
  size_t options_size, mem_offset; /* of the options struct and its |mem| */
  int options_v1, options_version;
  void (*options_default_versioned)(int version, void *opts);
  /* Checks the transport's own V1 defaults in |opts| (ck_assert). */
  void (*check_v1_defaults)(const void *opts);

  /* the world */
  ta_env *(*env_new)(void);
  /* Runs what is left after the objects' *_del() and frees the env. */
  void (*env_del)(ta_env *env);
  int (*run_until)(ta_env *env, int (*cond)(void *), void *ud, long ms);
  /* After env_del(): cond(ud), once what the objects' *_del() left is
   * freed (gRPC's threads may drop a message's last slice later: waited
   * for; the h2c loop has run to its end in env_del()). */
  int (*settled)(int (*cond)(void *), void *ud);

  /* objects: 0 or an mcp error; *pobj untouched on failure */
  int (*source_new)(ta_env *env, ta_obj **pobj, const ta_opts *o,
                    const mcp_source_options *so);
  int (*sink_new)(ta_env *env, ta_obj **pobj, const ta_opts *o,
                  mcp_sink_state *state);
  int (*client_new)(ta_env *env, ta_obj **pobj, const ta_opts *o,
                    const mcp_client_def *def);
  void (*del)(ta_obj *obj);
  int (*port)(ta_obj *listener); /* a listening source or sink */
  /* A listening source's or sink's *_reauthorize(). */
  int (*reauthorize)(ta_obj *listener);
  /* *_streams() with a function counting into *seen (NULL: none). */
  int (*streams)(ta_obj *obj, int *seen);
  /* *_streams() with fn(info, ud) for each stream. */
  int (*list)(ta_obj *obj, void (*fn)(const mcp_stream_info *, void *),
              void *ud);
  /* A listening source's *_update(): fn(store, ts, ud) queued to run on
   * the transport's thread, then every stream pushes what it may. */
  int (*update)(ta_obj *src, void (*fn)(mcp_store *, mcp_tstamp, void *),
                void *ud);
  /* A client's *_call(): fn(ts, ud) run on the transport's thread, from
   * another thread; returns once it ran (INVALID_ARGUMENT on the
   * transport's thread). */
  int (*call)(ta_obj *client, void (*fn)(mcp_tstamp, void *), void *ud);
  /* The object's *_stats_versioned(): every transport's stats are the
   * engine's mcp_transport_stats. */
  int (*stats_versioned)(ta_obj *obj, int version, mcp_transport_stats *st);
  /* Runs fn(state, now, ud) where the sink's state may be read. */
  int (*sink_call)(ta_obj *sink, void (*fn)(mcp_sink_state *, mcp_tstamp,
                                            void *),
                   void *ud);
  mcp_tstamp (*now)(void);
  /* One turn of the loop of |client| that brings it no event of a call's
   * own, then fn(ud) between that turn and the next, where the client's
   * protocol state is still (h2c: uv_run(UV_RUN_NOWAIT) on the test's
   * thread, no event; gRPC: fn run on its thread through
   * mcp_grpc_client_call(), itself the turn's one event). */
  int (*turn)(ta_env *env, ta_obj *client, void (*fn)(void *), void *ud);
  /* How often a client may ask a free slot's open() in one such turn:
   * at the next event, so 1 where the turn is an event (gRPC), 0 where
   * it is none (h2c). */
  int asks_per_turn;
  /* The shortest delay between two connection attempts of a dialer the
   * adapter makes (its backoff's initial delay less the jitter). */
  mcp_tstamp min_redial;
  /* More allocations than this through each side's hook in a sync:
   * more than the objects alone. */
  long min_sync_allocs;

  /* 1: the stats count connections and socket bytes (h2c); 0: they
   * stay 0 (gRPC core does not expose them; docs/api.md). */
  int counts_bytes;
  /* 1: mcp_stream_info.method is the call's path (h2c); 0: "" (gRPC's
   * call holds it, the transport does not keep it; docs/api.md). */
  int tells_method;

  /* 1: the suite runs a second time with MCP_TEST_TLS=1 (meson.build),
   * where the explicit TLS tests run (once is enough). */
  int tls_run;
  /* Tests of this transport alone (NULL: none). */
  void (*add_own_tests)(Suite *s);

  /* ---- sync (tests/test_transport_sync.c) ---- */
  /* Runs fn(store, now, ud) where |src|'s store may be read, from the
   * test's thread: through the source's *_call() (gRPC), or on |store|
   * directly where the loop runs on the test's thread (h2c). */
  int (*store_call)(ta_obj *src, mcp_store *store,
                    void (*fn)(mcp_store *, mcp_tstamp, void *), void *ud);
  /* The transport's own *_source_call() and *_sink_call(), called from a
   * thread that is not the transport's: they return once fn ran
   * (INVALID_ARGUMENT on the transport's thread). */
  int (*source_call)(ta_obj *src, void (*fn)(mcp_store *, mcp_tstamp, void *),
                     void *ud);
  int (*sink_call_from)(ta_obj *sink,
                        void (*fn)(mcp_sink_state *, mcp_tstamp, void *),
                        void *ud);
  int (*sink_finish)(ta_obj *sink); /* *_sink_finish() */
  /* *_method(): the gRPC method a service is called on. */
  const char *(*method)(mcp_service service, int sink_dials);
  /* 1: the transport runs on its own thread (gRPC), so an update can be
   * held there; 0: its loop runs only inside run_until() (h2c). */
  int runs_by_itself;
  /* In the details a listener ends a call at the other side's MCP method
   * with (UNIMPLEMENTED; docs/protocol.md "A server's unknown method"). */
  const char *not_served;
  /* Sync tests of this transport alone (NULL: none). */
  void (*add_sync_tests)(Suite *s);
  /* ---- test_transport_tls ---- */
  /* 1: the TLS counters (tls_handshakes, handshaking, tls_reloads) are
   * counted (h2c); 0: they stay 0 (gRPC core owns the handshakes and the
   * certificate fetch; docs/api.md). */
  int counts_tls;
  /* TLS tests of this transport alone, run by test_transport_tls with
   * the suite's certificates made (ta_cert()); NULL: none. */
  void (*add_tls_tests)(Suite *s);
  /* ---- test_transport_shutdown ---- */
  /* 1: *_del() ends every stream for the application at once, a stuck
   * one too (CLOSED: UNAVAILABLE "server shutting down"), and drains the
   * connection behind it until the grace (h2c); 0: a stuck call stays
   * until the grace, then is cancelled (CLOSED: CANCELLED; gRPC core). */
  int ends_streams_at_del;
} ta_transport;

/* The transport under test, set by the suite's main()
 * (tests/transport_suite.c holds it). */
extern const ta_transport *ta;

/* A world most tests share (tests/transport_suite.c): a store with
 * collection "c1" holding "a" and "big" (64 KiB, larger than an HTTP/2
 * DATA frame), a sink state for "c1", and the objects started on it. */
typedef struct ta_world {
  ta_env *env;
  mcp_store *store;
  mcp_sink_state *state;
  ta_obj *src, *sink;
  char addr[64];
  /* the store's content, taken before any thread serves it */
  int n;
  char name[4][16], version[4][64];
} ta_world;

void ta_world_init(ta_world *w);
/* Runs a suite file's |s| and frees it: how many of its tests failed. */
int ta_run(Suite *s);
/* A suite file's main(): |t| under test, its certificates in
 * MCP_TEST_TLS mode, the suite |make()| builds run; the exit status. */
int ta_main(const ta_transport *t, Suite *(*make)(void));
/* The suite's certificates (tests/test_certs.h, one directory for all the
 * suite's files): made, removed, and the path of one of them. */
int ta_certs_make(void);
void ta_certs_remove(void);
const char *ta_cert(const char *name);
/* Options for a listening (|listen|) or dialing object at |address|,
 * with |mem|, mutual TLS in MCP_TEST_TLS mode (tests/transport_suite.c). */
ta_opts ta_opts_for(int listen, const char *address, const mcp_mem *mem);
/* A listening source with |o|; w->addr is where it listens. */
void ta_start_source_with(ta_world *w, const ta_opts *o);
/* Deletes the objects, runs what is left (env_del), frees the rest. */
void ta_world_fini(ta_world *w);
/* A listening source on 127.0.0.1:0 / a sink dialing it, with |mem|. */
void ta_start_source(ta_world *w, const mcp_mem *mem);
void ta_start_sink(ta_world *w, const mcp_mem *mem);
/* The sink is synced and holds the store's names and versions. */
int ta_synced(void *w);
/* A service open() that refuses every call (MCP_ERR_UNSUPPORTED). */
int ta_open_unsupported(void *ud, const mcp_peer_info *peer, mcp_tstamp ts,
                        mcp_stream **pst);
/* No live block in a tm_mem (mem_count.h), once settled. */
int ta_balanced(void *tm);

/* ---- admission (test_transport_admission.c) ---- */

/* Writes ta_opts' admission options |t| onto a transport's options |o|
 * (both name them alike); 0 leaves the transport's default. */
#define TA_ADMISSION_OPTIONS(o, t)                                             \
  do {                                                                         \
    if ((t)->max_streams_per_peer)                                             \
      (o)->max_streams_per_peer = (t)->max_streams_per_peer;                   \
    if ((t)->stream_rate)                                                      \
      (o)->stream_rate = (t)->stream_rate;                                     \
    if ((t)->stream_burst)                                                     \
      (o)->stream_burst = (t)->stream_burst;                                   \
    if ((t)->peer_stream_rate)                                                 \
      (o)->peer_stream_rate = (t)->peer_stream_rate;                           \
    if ((t)->peer_stream_burst)                                                \
      (o)->peer_stream_burst = (t)->peer_stream_burst;                         \
    if ((t)->max_initial_pushes)                                               \
      (o)->max_initial_pushes = (t)->max_initial_pushes;                       \
    if ((t)->max_initial_pushes_per_peer)                                      \
      (o)->max_initial_pushes_per_peer = (t)->max_initial_pushes_per_peer;     \
    if ((t)->initial_push_timeout)                                             \
      (o)->initial_push_timeout = (t)->initial_push_timeout;                   \
    if ((t)->admission_wait_timeout)                                           \
      (o)->admission_wait_timeout = (t)->admission_wait_timeout;               \
  } while (0)
/* ---- test_transport_tls ---- */
/* A new sink state for collection "c1" as node |node_id| (kept, not
 * copied: a literal or one that outlives the state). */
mcp_sink_state *ta_sink_state(const char *node_id);
/* ---- busy ports (test_transport_sync.c, test_transport_shutdown.c) ---- */
/* A plain socket listening on 127.0.0.1:0, which makes its port busy;
 * the port in |*port|. Close it to free the port. */
int ta_hold_port(int *port);

#endif
