/*
 * A small HTTP/1.1 server for debug endpoints, on a libuv loop, parsing
 * with http-parser.
 *
 * Two layers:
 *   ops_http_session: one connection's bytes in, answers out, no I/O (so
 *     that tests feed it anything);
 *   ops_http_server: a TCP listener on a uv_loop_t whose connections each
 *     run a session.
 *
 * Behaviour:
 *   - every request is answered, in order (pipelining works), with
 *     Content-Length; HEAD gets the headers of GET without the body;
 *   - keep-alive as HTTP/1.1 says (HTTP/1.0: only with "Connection:
 *     keep-alive"); "Connection: close" closes after the answer;
 *   - bounded requests: the request line and headers at most |max_header|
 *     bytes (431, then close), a body at most |max_body| bytes (413, then
 *     close; bodies are read and ignored);
 *   - a request that does not parse: 400, then close; an Upgrade request
 *     is answered as a plain one, then the connection closes;
 *   - a connection that completes no request within |timeout_ms| of its
 *     start or of its previous request is closed (408 first when a request
 *     was begun): idle keep-alive connections and slow senders both go;
 *   - at most |max_connections| at once: more are accepted and closed.
 *
 * The handler runs on the loop thread, synchronously, and fills a reply
 * (status, content type, body). Routing, 404 and 405 are the handler's.
 */
#ifndef TOOLS_OPS_HTTP_H
#define TOOLS_OPS_HTTP_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "ops/buf.h"

#define OPS_HTTP_DEFAULT_MAX_HEADER 8192
#define OPS_HTTP_DEFAULT_MAX_BODY 65536
#define OPS_HTTP_DEFAULT_TIMEOUT_MS 30000
#define OPS_HTTP_DEFAULT_MAX_CONNECTIONS 64

/* An answer being built. */
typedef struct ops_http_reply {
  int status;               /* default 200 */
  const char *content_type; /* default "text/plain; charset=utf-8"; must
                               outlive the handler call (a literal) */
  const char *allow;        /* 405: the Allow header (a literal) */
  ops_buf body;
} ops_http_reply;

/* Inline: usable by the transports' files without linking this code. */
static inline void ops_http_reply_init(ops_http_reply *r) {
  memset(r, 0, sizeof(*r));
  r->status = 200;
}
static inline void ops_http_reply_free(ops_http_reply *r) {
  free(r->body.p);
  memset(&r->body, 0, sizeof(r->body));
}
/* Status, text/plain, and |text| as the whole body. */
void ops_http_reply_text(ops_http_reply *r, int status, const char *text);

/* The standard reason phrase of |status| ("Unknown" for others). */
const char *ops_http_reason(int status);

/*
 * Answers one request. |method| is the request's ("GET"); |path| its
 * target in origin form, with the query ("/metrics?x=1"; an absolute-form
 * target is reduced to its path and query). Runs on the loop thread.
 */
typedef void (*ops_http_fn)(const char *method, const char *path,
                            ops_http_reply *reply, void *user_data);

typedef struct ops_http_options {
  size_t max_header;       /* request line + headers; default 8 KiB */
  size_t max_body;         /* default 64 KiB */
  unsigned timeout_ms;     /* default 30 s */
  size_t max_connections;  /* default 64 */
} ops_http_options;

void ops_http_options_default(ops_http_options *o);

/* ---- one connection, no I/O ---- */

typedef struct ops_http_session ops_http_session;

/* NULL when out of memory. |o| may be NULL (defaults). */
ops_http_session *ops_http_session_new(const ops_http_options *o,
                                       ops_http_fn fn, void *user_data);
void ops_http_session_del(ops_http_session *s);

/*
 * Feeds received bytes and appends the answers of the requests they
 * complete to |out|. Returns 0 to go on reading, 1 when the connection is
 * to be closed once |out| is written (then feed nothing more).
 */
int ops_http_session_feed(ops_http_session *s, const char *data, size_t len,
                          ops_buf *out);

/* 1 when a request has begun and is not complete. */
int ops_http_session_busy(const ops_http_session *s);

/* Number of requests answered so far. */
unsigned long ops_http_session_requests(const ops_http_session *s);

/* The 408 answer (for a timeout while busy), appended to |out|. */
void ops_http_session_timeout(ops_http_session *s, ops_buf *out);

/* ---- the server ---- */

typedef struct ops_http_server ops_http_server;

/*
 * Listens on "HOST:PORT" (IPv4, "[v6]" or a name; port 0 picks one) on
 * |loop|. |o| may be NULL (defaults). Returns 0, or a negative libuv or
 * getaddrinfo error with a message in |err| (NUL terminated).
 */
int ops_http_server_new(ops_http_server **ps, uv_loop_t *loop,
                        const char *hostport, const ops_http_options *o,
                        ops_http_fn fn, void *user_data, char *err,
                        size_t errlen);

/* The bound port. */
int ops_http_server_port(const ops_http_server *s);

/* Open connections (for tests). */
size_t ops_http_server_connections(const ops_http_server *s);

/* Stops listening and closes every connection; the server frees itself
 * once its handles are closed (keep running the loop). NULL: no-op. No
 * handler call happens after this. */
void ops_http_server_close(ops_http_server *s);

#endif /* TOOLS_OPS_HTTP_H */
