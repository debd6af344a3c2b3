/*
 * Test harness of the h2c transport: a bounded way to run a libuv loop
 * until a condition holds, and a raw HTTP/2 client (nghttp2 on a
 * non-blocking socket, driven from the same thread) that sends exactly the
 * frames a test wants and records what comes back.
 */
#ifndef MCP_H2C_HARNESS_H
#define MCP_H2C_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "mcp/h2c.h"

/* Runs |loop| until cond(ud) is true or |timeout_ms| passed (times
 * MCP_TEST_TIME_SCALE when set, for valgrind). The loop is woken every
 * 2 ms so that cond also sees events outside it (sockets of the raw
 * client). Returns 1 when cond held. */
int h2t_run_until(uv_loop_t *loop, int (*cond)(void *), void *ud,
                  int timeout_ms);
/* Sleeps without running the loop. */
void h2t_sleep_ms(int ms);
/* Runs the loop for |ms| milliseconds. */
void h2t_run_for(uv_loop_t *loop, int ms);
/* Runs the loop until it has nothing left (after *_del()), at most 10 s,
 * then closes it; fails the test if handles remain. */
void h2t_loop_finish(uv_loop_t *loop);

/* A growable byte buffer. */
typedef struct h2t_buf {
  uint8_t *p;
  size_t len, cap;
} h2t_buf;
void h2t_buf_add(h2t_buf *b, const void *p, size_t n);
void h2t_buf_free(h2t_buf *b);

/* One stream of the raw client. */
typedef struct rc_stream {
  int32_t id;
  int http_status;
  char content_type[64];
  int grpc_status; /* -1: none yet */
  char grpc_message[256];
  int headers;     /* response HEADERS received */
  int trailers;    /* HEADERS with END_STREAM received */
  int end_headers_only; /* the response was headers with END_STREAM */
  int closed;
  uint32_t close_code;
  h2t_buf data;    /* DATA payload received, as is */
  /* What to send: |out| from |out_off|, at most |chunk| bytes per DATA
   * frame (0: as large as allowed); |end| half-closes once sent. */
  h2t_buf out;
  size_t out_off, chunk;
  int end, deferred;
} rc_stream;

typedef struct rc {
  int fd;
  nghttp2_session *h2;
  rc_stream streams[16];
  int nstreams;
  h2t_buf pending; /* bytes nghttp2 produced that the socket did not take */
  int no_read;     /* stop reading the socket */
  int eof, goaway;
  uint32_t goaway_code;
  uint64_t bytes_read;
  int pings; /* PINGs received (not ACKs; nghttp2 answers them) */
} rc;

/* Connects to 127.0.0.1:|port| and sends the preface with SETTINGS: an
 * initial stream window of |window| (0: nghttp2's default 65535) and, when
 * |window| is large, a matching connection window. */
void rc_connect(rc *c, int port, int32_t window);
/* The same from the local address |from| (e.g. "127.0.0.2": another
 * peer on loopback; NULL: any). */
void rc_connect_from(rc *c, int port, int32_t window, const char *from);
/* Opens a stream: POST |path| with content-type |ctype| (NULL: none) and
 * te: trailers when |te|, plus one more header when |xname| is not NULL. */
rc_stream *rc_open(rc *c, const char *method, const char *path,
                   const char *ctype, int te, const char *xname,
                   const char *xvalue);
/* Queues raw DATA bytes / a gRPC message with flag byte |flag|. */
void rc_send(rc *c, rc_stream *s, const void *p, size_t n);
void rc_send_msg(rc *c, rc_stream *s, uint8_t flag, const void *p, size_t n);
void rc_end(rc *c, rc_stream *s);
void rc_rst(rc *c, rc_stream *s, uint32_t code);
/* Moves bytes both ways without blocking. */
void rc_io(rc *c);
/* Closes the socket at once (no GOAWAY) and frees the session. */
void rc_close(rc *c);

/* The |i|-th gRPC message in s->data: returns 1 and sets |*p|, |*n|
 * (pointing into s->data), 0 when there is no such complete message. */
int rc_msg(const rc_stream *s, int i, const uint8_t **p, size_t *n);
int rc_nmsgs(const rc_stream *s);
/* Runs |loop| until |s| holds |n| whole messages, moving |c|'s bytes at
 * each turn, at most |timeout_ms| (h2t_run_until()): 1 when it does. */
int rc_run_until_msgs(uv_loop_t *loop, rc *c, rc_stream *s, int n,
                      int timeout_ms);
/* The same until |s| has its grpc-status. */
int rc_run_until_status(uv_loop_t *loop, rc *c, rc_stream *s,
                        int timeout_ms);
/* The same until |s| is closed (any end: trailers, a reset, a plain HTTP
 * answer). */
int rc_run_until_closed(uv_loop_t *loop, rc *c, rc_stream *s, int timeout_ms);

/* Spawns |argv| (a program on PATH) with stdout to |out_path|, stderr to
 * /dev/null, runs |loop| while it runs (at most |timeout_ms|), and returns
 * its exit status (-1: killed on timeout). */
int h2t_spawn(uv_loop_t *loop, char *const argv[], const char *out_path,
              int timeout_ms);
/* Reads a whole file into a NUL-terminated malloc'd string. */
char *h2t_slurp(const char *path);

#endif
