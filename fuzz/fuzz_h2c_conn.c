/*
 * fuzz_h2c_conn: one client connection to a real h2c source (the whole of
 * transport-h2c, on a libuv loop, over a Unix socket), fed bytes chunk by
 * chunk: the first-bytes probe, HTTP/1.1 requests and the "Upgrade: h2c"
 * handshake (http1.c), HTTP/2 with prior knowledge or after the upgrade
 * (nghttp2, h2.c), gRPC deframing and the source sessions behind it.
 * The bytes a peer may send are all the target controls; the store and
 * the options are fixed (one of two configurations).
 *
 * Oracles, besides ASan/UBSan/LSan:
 *   - what the server wrote is well formed: HTTP/1.1 responses (status
 *     line, Content-Length, the body), and after "101 Switching Protocols"
 *     or for prior knowledge, HTTP/2 frames that start with SETTINGS, end
 *     on a frame boundary once the server is quiet, never exceed the
 *     default maximum frame size, and are never padded;
 *   - once the client goes away the server closes the connection, and
 *     every byte it accounted for (read, write and message buffers) and
 *     every stream is released.
 * Input: one byte choosing the configuration, then chunks, each a length
 * byte and that many bytes (255: the rest of the input); the loop runs
 * between chunks, so each one arrives in a read of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "mcp/h2c.h"

#define NCONF 2

static uv_loop_t loop;
static mcp_store *store;
static mcp_h2c_source *srcs[NCONF];
static char paths[NCONF][108];
static char dir[64];

typedef struct obuf {
  uint8_t *p;
  size_t len, cap;
} obuf;

static void put(mcp_store *st, const char *coll, const char *name,
                size_t body_len) {
  uint8_t *body = malloc(body_len ? body_len : 1);
  FZ_CHECK(body, "out of memory");
  for (size_t i = 0; i < body_len; ++i)
    body[i] = (uint8_t)('a' + i % 26);
  mcp_resource r = {.name = name,
                    .version = "v1",
                    .type_url = "type.googleapis.com/test.Body",
                    .body = body,
                    .body_len = body_len};
  FZ_CHECK(mcp_store_upsert(st, coll, &r, 1) >= 0, "upsert %s/%s", coll, name);
  free(body);
}

static int http_handler(const char *method, const char *path,
                        mcp_h2c_http_response *resp, void *ud) {
  (void)ud;
  if (strcmp(path, "/debug/empty") == 0) { /* no body at all */
    mcp_h2c_http_respond(resp, 204, NULL);
    return 1;
  }
  if (strcmp(path, "/debug/echo") != 0)
    return 0;
  mcp_h2c_http_respond(resp, 200, "text/plain");
  mcp_h2c_http_append(resp, method, strlen(method));
  return 1;
}

static void cleanup(void) {
  for (int i = 0; i < NCONF; ++i)
    unlink(paths[i]);
  rmdir(dir);
}

static void setup(void) {
  /* libuv writes with write(2): a peer that closed first must be an error
   * return, not SIGPIPE (CI saw exit 141 when the server wrote a GOAWAY to
   * a socket this target had just closed). */
  signal(SIGPIPE, SIG_IGN);
  FZ_CHECK(uv_loop_init(&loop) == 0, "uv_loop_init");
  snprintf(dir, sizeof(dir), "/tmp/mcp-fuzz-h2c-XXXXXX");
  FZ_CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
  atexit(cleanup);
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.epoch = 1; /* the same versions in every run */
  FZ_CHECK(mcp_store_new(&store, &so) == 0, "store");
  put(store, "istio/networking/v1alpha3/gateways", "default/a", 100);
  put(store, "istio/networking/v1alpha3/gateways", "default/b", 20000);
  put(store, "istio/networking/v1alpha3/virtualservices", "ns/vs", 300);
  for (int i = 0; i < NCONF; ++i) {
    snprintf(paths[i], sizeof(paths[i]), "%s/%d.sock", dir, i);
    char addr[128];
    snprintf(addr, sizeof(addr), "unix:%s", paths[i]);
    mcp_h2c_options o;
    mcp_h2c_options_default(&o);
    o.address = addr;
    o.http_handler = http_handler;
    o.keepalive_time_ms = 0; /* no timer that real time could fire */
    o.idle_timeout_ms = 0;
    if (i == 1) { /* tight: the limits are reached by small inputs */
      o.max_recv_message_size = 64;
      o.max_send_message_size = 1 << 20;
      o.stream_window_size = 1024;
      o.connection_window_size = 65535;
      o.max_concurrent_streams = 2;
      o.write_buffer_size = 4096;
    }
    mcp_source_options sopts;
    mcp_source_options_default(&sopts);
    sopts.store = store;
    FZ_CHECK(mcp_h2c_source_new(&srcs[i], &loop, &o, &sopts) == 0,
             "source %d on %s", i, addr);
  }
}

/* Reads what the server wrote so far. 1 on EOF. */
static int drain(int fd, obuf *o) {
  for (;;) {
    if (o->cap - o->len < 65536) {
      o->cap = o->cap ? o->cap * 2 : 131072;
      o->p = realloc(o->p, o->cap);
      FZ_CHECK(o->p, "out of memory");
    }
    ssize_t r = recv(fd, o->p + o->len, o->cap - o->len, MSG_DONTWAIT);
    if (r > 0) {
      o->len += (size_t)r;
      continue;
    }
    if (r == 0)
      return 1;
    if (errno == EINTR)
      continue;
    /* EAGAIN, or ECONNRESET after the server closed with data unread */
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

static void stats(int i, mcp_h2c_stats *st) {
  mcp_h2c_source_stats(srcs[i], st);
}

/* Runs the loop until the server is quiet: nothing new written for a few
 * rounds and nothing buffered. */
static int settle(int i, int fd, obuf *o) {
  int quiet = 0, eof = 0;
  for (int round = 0; round < 2000 && quiet < 4; ++round) {
    size_t had = o->len;
    uv_run(&loop, UV_RUN_NOWAIT);
    eof |= drain(fd, o);
    mcp_h2c_stats st;
    stats(i, &st);
    quiet = o->len == had && st.write_buffered == 0 ? quiet + 1 : 0;
  }
  return eof;
}

/* ---- what the server wrote ---- */

static size_t h2_frames(const uint8_t *p, size_t n, int complete) {
  size_t i = 0, nframes = 0;
  while (n - i >= 9) {
    size_t len = (size_t)p[i] << 16 | (size_t)p[i + 1] << 8 | p[i + 2];
    uint8_t type = p[i + 3], flags = p[i + 4];
    FZ_CHECK(len <= 16384, "a %zu-byte frame (type %u)", len, type);
    if (nframes == 0)
      FZ_CHECK(type == 4 && !(flags & 1) && len % 6 == 0,
               "the server's first frame is type %u flags %u", type, flags);
    if (type == 0 || type == 1) /* DATA, HEADERS: never padded */
      FZ_CHECK(!(flags & 0x8), "a padded frame (type %u)", type);
    if (n - i - 9 < len)
      break;
    i += 9 + len;
    nframes++;
  }
  if (complete)
    FZ_CHECK(i == n, "the server went quiet inside a frame (%zu of %zu)", i,
             n);
  return nframes;
}

static const char *find(const uint8_t *p, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; ++i)
    if (memcmp(p + i, s, k) == 0)
      return (const char *)p + i;
  return NULL;
}

static void check_output(const uint8_t *p, size_t n, int complete) {
  static const char h1[] = "HTTP/1.1 ";
  if (n == 0)
    return;
  if (n < 9 || memcmp(p, h1, 9) != 0) {
    h2_frames(p, n, complete);
    return;
  }
  size_t i = 0;
  while (i < n) {
    FZ_CHECK(n - i >= 9 && memcmp(p + i, h1, 9) == 0,
             "bytes after an HTTP/1.1 response are no response");
    const char *end = find(p + i, n - i, "\r\n\r\n");
    if (!end) {
      FZ_CHECK(!complete, "an HTTP/1.1 response head without its end");
      return;
    }
    size_t head = (size_t)((const uint8_t *)end - (p + i)) + 4;
    int status = 0;
    FZ_CHECK(sscanf((const char *)p + i + 9, "%3d", &status) == 1 &&
                 status >= 100 && status <= 599,
             "a malformed status line");
    i += head;
    if (status == 101) {
      h2_frames(p + i, n - i, complete);
      return;
    }
    const char *cl = find(p + i - head, head, "\r\nContent-Length: ");
    FZ_CHECK(cl, "a response without Content-Length");
    size_t len = strtoul(cl + 18, NULL, 10);
    /* HEAD: the length without the body (the next response follows, or
     * nothing). */
    if (i == n || (n - i >= 9 && memcmp(p + i, h1, 9) == 0))
      continue;
    if (n - i < len) {
      FZ_CHECK(!complete, "a %zu-byte body cut at %zu", len, n - i);
      return;
    }
    i += len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  fz_in in = {data, size};
  int conf = fz_u8(&in) % NCONF;
  mcp_h2c_stats st0;
  stats(conf, &st0);

  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  FZ_CHECK(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, paths[conf], strlen(paths[conf]) + 1);
  FZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s",
           strerror(errno));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

  obuf out = {0};
  int eof = 0;
  while (in.n > 0 && !eof) {
    size_t want = fz_u8(&in), got;
    const uint8_t *p = fz_take(&in, want == 255 ? in.n : want, &got);
    while (got > 0 && !eof) {
      ssize_t w = send(fd, p, got, MSG_NOSIGNAL);
      if (w > 0) {
        p += w;
        got -= (size_t)w;
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        uv_run(&loop, UV_RUN_NOWAIT);
        eof |= drain(fd, &out);
      } else {
        eof = 1; /* the server closed: the rest is not read */
      }
    }
    eof |= settle(conf, fd, &out);
  }
  mcp_h2c_stats st;
  stats(conf, &st);
  /* Quiet: all it wrote is whole, unless it closed before writing all. */
  check_output(out.p, out.len, !eof && st.write_buffered == 0);

  close(fd);
  for (int round = 0; round < 100000; ++round) {
    uv_run(&loop, UV_RUN_NOWAIT);
    stats(conf, &st);
    if (st.connections == st0.connections)
      break;
  }
  FZ_CHECK(st.connections == st0.connections,
           "the connection outlived its peer (%zu open)", st.connections);
  FZ_CHECK(st.streams == 0, "%zu streams left", st.streams);
  FZ_CHECK(st.read_buffered == 0 && st.write_buffered == 0 &&
               st.msg_buffered == 0,
           "bytes still accounted for: read %zu, write %zu, messages %zu",
           st.read_buffered, st.write_buffered, st.msg_buffered);
  free(out.p);
  return 0;
}
