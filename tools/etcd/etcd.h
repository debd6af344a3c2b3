/*
 * mcpetcd: the etcd v3 client mcp-source uses to serve what an etcd cluster
 * holds (docs/operations.md). Internal to tools/ (not installed).
 *
 * Speaks etcd's gRPC API through gRPC's C core: Range (paginated, at one
 * revision), Txn (puts and deletes in one transaction), Compact, and Watch
 * (one stream on a key prefix from a start revision). Every call goes to the
 * current endpoint; a call that fails for want of a server (UNAVAILABLE,
 * DEADLINE_EXCEEDED, a connection refused) moves the client to the next
 * endpoint of the list and is tried there, once per endpoint, so a member
 * that is down costs one attempt. Errors that a server gave (a compacted
 * revision, a permission refused) are returned as they are.
 *
 * Authentication: with a user, the client calls Auth/Authenticate on each
 * endpoint it moves to and sends the token as the "token" metadata, as etcd's
 * own clients do; an expired token (etcd says "invalid auth token") is renewed
 * once per call. Mutual TLS: a CA, and optionally a certificate and key,
 * PEM files read when the client is created.
 *
 * Threads: one mcpetcd may be used by one thread at a time, except that
 * mcpetcd_watch_cancel() may be called from any thread while another runs
 * mcpetcd_watch(). Blocking: every call blocks for at most its timeout per
 * endpoint tried; mcpetcd_watch() blocks until cancelled or ended.
 *
 * Conventions: functions returning int return 0 (or a count) on success and a
 * negative MCPETCD_ERR_* on failure; mcpetcd_strerror() names them, and
 * mcpetcd_last_error() gives the server's message for the last failure.
 */
#ifndef MCPETCD_ETCD_H
#define MCPETCD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define MCPETCD_ERR_NOMEM (-1)
#define MCPETCD_ERR_INVALID_ARGUMENT (-2)
/* No endpoint answered (each was tried once). */
#define MCPETCD_ERR_UNAVAILABLE (-3)
/* The revision asked for was compacted (Range, Watch). */
#define MCPETCD_ERR_COMPACTED (-4)
/* The revision asked for is newer than the cluster's (Range). */
#define MCPETCD_ERR_FUTURE_REV (-5)
/* Authentication failed, or the user may not do this. */
#define MCPETCD_ERR_DENIED (-6)
/* A credential or certificate file could not be read. */
#define MCPETCD_ERR_IO (-7)
/* Any other error of the server (see mcpetcd_last_error()). */
#define MCPETCD_ERR_SERVER (-8)
/* A message from the server did not decode. */
#define MCPETCD_ERR_PROTO (-9)
/* mcpetcd_watch() ended because mcpetcd_watch_cancel() was called. */
#define MCPETCD_ERR_CANCELLED (-10)

const char *mcpetcd_strerror(int err);

typedef struct mcpetcd mcpetcd;

typedef struct mcpetcd_options {
  /* "host:port,host:port,...": the cluster's client URLs, without scheme
   * (an "http://" or "https://" prefix is accepted and dropped). */
  const char *endpoints;
  /* PEM files for TLS: |ca_file| alone for server authentication, with
   * |cert_file| and |key_file| for mutual TLS; all NULL for cleartext. */
  const char *ca_file;
  const char *cert_file;
  const char *key_file;
  /* User and password for etcd's authentication, or NULL. The strings are
   * copied; the program reads the password from a file. */
  const char *user;
  const char *password;
  /* Deadline of one unary call on one endpoint, milliseconds; 0: 5000. */
  int64_t timeout_ms;
  /* Keys per Range page; 0: 1000. */
  int64_t page_size;
} mcpetcd_options;

/* Creates a client (no I/O yet: connections are made by the first call).
 * Fails with INVALID_ARGUMENT (no endpoint, a malformed endpoint, cert
 * without key), IO (a PEM file unreadable; mcpetcd_last_error() is not set
 * since there is no client: the message goes to |err|, |errlen| bytes, when
 * not NULL) or NOMEM. On failure *pc is untouched. */
int mcpetcd_new(mcpetcd **pc, const mcpetcd_options *opts, char *err,
                size_t errlen);

/* Frees |c|; no call may be running on it. */
void mcpetcd_free(mcpetcd *c);

/* The endpoint the next call goes to (valid until the next call). */
const char *mcpetcd_endpoint(const mcpetcd *c);

/* The message of the last failure ("" when none); valid until the next
 * call on |c|. */
const char *mcpetcd_last_error(const mcpetcd *c);

/* How many times the client moved to another endpoint since it was made. */
uint64_t mcpetcd_failovers(const mcpetcd *c);

/* One key and its value, as etcd holds it. */
typedef struct mcpetcd_kv {
  const char *key; /* NUL-terminated copy; keys with NUL are refused */
  size_t key_len;
  const uint8_t *value;
  size_t value_len;
  int64_t create_revision;
  int64_t mod_revision;
} mcpetcd_kv;

/* The result of mcpetcd_get_prefix(): owned by the caller, freed with
 * mcpetcd_kvs_free(). Keys in byte order. */
typedef struct mcpetcd_kvs {
  mcpetcd_kv *kvs;
  size_t n;
  int64_t revision; /* the store revision the whole result is from */
} mcpetcd_kvs;

void mcpetcd_kvs_free(mcpetcd_kvs *kvs);

/*
 * Reads every key that starts with |prefix| at |revision| (0: the newest),
 * in pages of page_size keys, all at the revision of the first page, so the
 * result is one consistent snapshot. COMPACTED when |revision| (or, rarely,
 * the first page's revision, compacted before the last page was read) is
 * older than the cluster's compaction; FUTURE_REV when newer than its
 * newest. On failure *out is left empty.
 */
int mcpetcd_get_prefix(mcpetcd *c, const char *prefix, int64_t revision,
                       mcpetcd_kvs *out);

/* One operation of a transaction: a put (|value| not NULL) or a delete of
 * one key (|value| NULL). */
typedef struct mcpetcd_op {
  const char *key;
  const uint8_t *value;
  size_t value_len;
} mcpetcd_op;

/* Applies |ops| in one transaction (all or none); |*revision| gets the
 * revision it made (unchanged when |n| is 0, which sends nothing). A call
 * whose answer was lost may or may not have been applied: callers that
 * retry must be idempotent (puts and deletes of whole documents are). */
int mcpetcd_txn(mcpetcd *c, const mcpetcd_op *ops, size_t n,
                int64_t *revision);

/* Compacts the key space up to |revision| (for tests and operators). */
int mcpetcd_compact(mcpetcd *c, int64_t revision);

/* One change seen by a watch. |kv.value| is empty for a delete. */
typedef struct mcpetcd_event {
  int is_delete;
  mcpetcd_kv kv;
} mcpetcd_event;

/* Receives the events of one revision or more, in revision order, and the
 * revision the watch has now seen everything up to (a progress notification
 * has |n| == 0). Pointers are valid during the call only. Called on the
 * thread that runs mcpetcd_watch(); it must not call into |c| except
 * mcpetcd_watch_cancel(). A non-zero return ends the watch, which returns
 * that value. */
typedef int (*mcpetcd_watch_fn)(const mcpetcd_event *evs, size_t n,
                                int64_t revision, void *user_data);

/*
 * Watches every key starting with |prefix| from |start_revision| (> 0),
 * with progress notifications, calling |fn| for each response. Blocks until:
 * mcpetcd_watch_cancel() (CANCELLED), |fn| returns non-zero (that value), the
 * revision was compacted (COMPACTED; *compact_revision gets the oldest
 * revision still held when not NULL), or the stream broke (UNAVAILABLE; the
 * client has moved to the next endpoint). The caller re-reads and watches
 * again after COMPACTED or UNAVAILABLE: events are never skipped silently.
 */
int mcpetcd_watch(mcpetcd *c, const char *prefix, int64_t start_revision,
                  mcpetcd_watch_fn fn, void *user_data,
                  int64_t *compact_revision);

/* Ends a running mcpetcd_watch() (from any thread; a no-op otherwise; a
 * watch started after it returns CANCELLED at once until
 * mcpetcd_watch_reset()). */
void mcpetcd_watch_cancel(mcpetcd *c);
void mcpetcd_watch_reset(mcpetcd *c);

/* ---- for the threads built on the client (etcd_source.c, etcd_publish.c) */

#include <pthread.h>

/* Waits |ms| milliseconds or until |*stopping| is set (and |cv| signalled)
 * under |mu|; returns |*stopping|. */
int mcpetcd_nap(pthread_mutex_t *mu, pthread_cond_t *cv, const int *stopping,
                unsigned ms);

/* Formats one line for |log| (when not NULL). */
void mcpetcd_say(void (*log)(int error, const char *message, void *ud),
                 void *ud, int error, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif /* MCPETCD_ETCD_H */
