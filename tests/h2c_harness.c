#include "h2c_harness.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ------------------------------------------------------------------ */
/* Loop                                                                */
/* ------------------------------------------------------------------ */

void h2t_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void tick(uv_timer_t *t) { (void)t; }

int h2t_run_until(uv_loop_t *loop, int (*cond)(void *), void *ud,
                  int timeout_ms) {
  uv_timer_t t;
  uv_timer_init(loop, &t);
  uv_timer_start(&t, tick, 2, 2);
  /* A wait for a condition may take longer under valgrind
   * (MCP_TEST_TIME_SCALE, set by tests/valgrind/run.sh); a plain run for
   * a time may not. */
  const char *scale = getenv("MCP_TEST_TIME_SCALE");
  if (cond && scale && atoi(scale) > 1)
    timeout_ms *= atoi(scale);
  uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
  int ok = 0;
  while (!(ok = cond ? cond(ud) : 0) && uv_hrtime() < end)
    uv_run(loop, UV_RUN_ONCE);
  uv_timer_stop(&t);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_NOWAIT); /* let the close complete */
  return ok;
}

void h2t_run_for(uv_loop_t *loop, int ms) {
  h2t_run_until(loop, NULL, NULL, ms);
}

static void walk_cb(uv_handle_t *h, void *arg) {
  (void)arg;
  fprintf(stderr, "handle left open: %s active=%d\n",
          uv_handle_type_name(uv_handle_get_type(h)), uv_is_active(h));
}

void h2t_loop_finish(uv_loop_t *loop) {
  uint64_t end = uv_hrtime() + 10000000000ull;
  while (uv_run(loop, UV_RUN_NOWAIT) != 0 && uv_hrtime() < end)
    h2t_sleep_ms(1);
  int rv = uv_loop_close(loop);
  if (rv != 0)
    uv_walk(loop, walk_cb, NULL);
  ck_assert_int_eq(rv, 0);
}

/* ------------------------------------------------------------------ */
/* Buffers                                                             */
/* ------------------------------------------------------------------ */

void h2t_buf_add(h2t_buf *b, const void *p, size_t n) {
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
      cap *= 2;
    b->p = realloc(b->p, cap);
    ck_assert_ptr_nonnull(b->p);
    b->cap = cap;
  }
  if (n)
    memcpy(b->p + b->len, p, n);
  b->len += n;
}

void h2t_buf_free(h2t_buf *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

/* ------------------------------------------------------------------ */
/* Raw client                                                          */
/* ------------------------------------------------------------------ */

static rc_stream *find(rc *c, int32_t id) {
  for (int i = 0; i < c->nstreams; ++i)
    if (c->streams[i].id == id)
      return &c->streams[i];
  return NULL;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud) {
  (void)h2;
  (void)flags;
  rc_stream *s = find(ud, frame->hd.stream_id);
  if (!s)
    return 0;
  char v[512];
  size_t n = valuelen < sizeof(v) - 1 ? valuelen : sizeof(v) - 1;
  memcpy(v, value, n);
  v[n] = '\0';
  if (namelen == 7 && memcmp(name, ":status", 7) == 0)
    s->http_status = atoi(v);
  else if (namelen == 12 && memcmp(name, "content-type", 12) == 0)
    snprintf(s->content_type, sizeof(s->content_type), "%.63s", v);
  else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
    s->grpc_status = atoi(v);
  else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
    snprintf(s->grpc_message, sizeof(s->grpc_message), "%.255s", v);
  return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *ud) {
  (void)h2;
  rc *c = ud;
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    c->goaway = 1;
    c->goaway_code = frame->goaway.error_code;
    return 0;
  }
  if (frame->hd.type == NGHTTP2_PING &&
      !(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
    c->pings++;
    return 0;
  }
  rc_stream *s = find(c, frame->hd.stream_id);
  if (!s || frame->hd.type != NGHTTP2_HEADERS)
    return 0;
  int end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE) {
    s->headers = 1;
    if (end)
      s->end_headers_only = 1;
  }
  if (end)
    s->trailers = 1;
  return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud) {
  (void)h2;
  (void)flags;
  rc_stream *s = find(ud, id);
  if (s)
    h2t_buf_add(&s->data, data, len);
  return 0;
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud) {
  (void)h2;
  rc_stream *s = find(ud, id);
  if (s) {
    s->closed = 1;
    s->close_code = code;
  }
  return 0;
}

static ssize_t read_out(nghttp2_session *h2, int32_t id, uint8_t *buf,
                        size_t length, uint32_t *flags,
                        nghttp2_data_source *source, void *ud) {
  (void)h2;
  (void)id;
  (void)ud;
  rc_stream *s = source->ptr;
  size_t n = s->out.len - s->out_off;
  if (n > length)
    n = length;
  if (s->chunk && n > s->chunk)
    n = s->chunk;
  if (n == 0 && !s->end) {
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n)
    memcpy(buf, s->out.p + s->out_off, n);
  s->out_off += n;
  if (s->end && s->out_off == s->out.len)
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

void rc_connect(rc *c, int port, int32_t window) {
  rc_connect_from(c, port, window, NULL);
}

void rc_connect_from(rc *c, int port, int32_t window, const char *from) {
  memset(c, 0, sizeof(*c));
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(c->fd, 0);
  if (from) { /* another loopback address: another peer */
    struct sockaddr_in b;
    memset(&b, 0, sizeof(b));
    b.sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, from, &b.sin_addr), 1);
    ck_assert_int_eq(bind(c->fd, (struct sockaddr *)&b, sizeof(b)), 0);
  }
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);

  nghttp2_session_callbacks *cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
  ck_assert_int_eq(nghttp2_session_client_new(&c->h2, cb, c), 0);
  nghttp2_session_callbacks_del(cb);
  nghttp2_settings_entry iv[2] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                  {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                   window > 0 ? (uint32_t)window : 65535}};
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2);
  if (window > 65535)
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, window);
  rc_io(c);
}

rc_stream *rc_open(rc *c, const char *method, const char *path,
                   const char *ctype, int te, const char *xname,
                   const char *xvalue) {
  ck_assert_int_lt(c->nstreams, 16);
  rc_stream *s = &c->streams[c->nstreams++];
  memset(s, 0, sizeof(*s));
  s->grpc_status = -1;
  nghttp2_nv nva[8];
  size_t n = 0;
#define ADD(k, v)                                                              \
  nva[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k),           \
                          strlen(v), NGHTTP2_NV_FLAG_NONE}
  ADD(":method", method);
  ADD(":scheme", "http");
  ADD(":path", path);
  ADD(":authority", "127.0.0.1");
  if (ctype)
    ADD("content-type", ctype);
  if (te)
    ADD("te", "trailers");
  if (xname)
    ADD(xname, xvalue);
#undef ADD
  nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_out};
  s->id = nghttp2_submit_request(c->h2, NULL, nva, n,
                                 strcmp(method, "GET") ? &prd : NULL, s);
  ck_assert_int_gt(s->id, 0);
  rc_io(c);
  return s;
}

void rc_send(rc *c, rc_stream *s, const void *p, size_t n) {
  h2t_buf_add(&s->out, p, n);
  if (s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(c->h2, s->id);
  }
  rc_io(c);
}

void rc_send_msg(rc *c, rc_stream *s, uint8_t flag, const void *p, size_t n) {
  uint8_t hdr[5] = {flag, (uint8_t)(n >> 24), (uint8_t)(n >> 16),
                    (uint8_t)(n >> 8), (uint8_t)n};
  h2t_buf_add(&s->out, hdr, 5);
  rc_send(c, s, p, n);
}

void rc_end(rc *c, rc_stream *s) {
  s->end = 1;
  if (s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(c->h2, s->id);
  }
  rc_io(c);
}

void rc_rst(rc *c, rc_stream *s, uint32_t code) {
  nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, code);
  rc_io(c);
}

void rc_io(rc *c) {
  if (c->fd < 0)
    return;
  uint8_t buf[16384];
  while (!c->no_read && !c->eof) {
    ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n > 0) {
      c->bytes_read += (uint64_t)n;
      ssize_t rv = nghttp2_session_mem_recv(c->h2, buf, (size_t)n);
      ck_assert_int_eq(rv, n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      c->eof = 1;
    } else {
      break;
    }
  }
  for (;;) {
    if (c->pending.len) {
      ssize_t w = send(c->fd, c->pending.p, c->pending.len, MSG_NOSIGNAL);
      if (w <= 0)
        return;
      memmove(c->pending.p, c->pending.p + w, c->pending.len - (size_t)w);
      c->pending.len -= (size_t)w;
      if (c->pending.len)
        return;
    }
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(c->h2, &p);
    if (n <= 0)
      return;
    h2t_buf_add(&c->pending, p, (size_t)n);
  }
}

void rc_close(rc *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  if (c->h2)
    nghttp2_session_del(c->h2);
  c->h2 = NULL;
  for (int i = 0; i < c->nstreams; ++i) {
    h2t_buf_free(&c->streams[i].data);
    h2t_buf_free(&c->streams[i].out);
  }
  h2t_buf_free(&c->pending);
}

int rc_msg(const rc_stream *s, int i, const uint8_t **p, size_t *n) {
  size_t off = 0;
  for (int k = 0;; ++k) {
    if (s->data.len - off < 5)
      return 0;
    const uint8_t *h = s->data.p + off;
    size_t len =
        (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
    if (s->data.len - off - 5 < len)
      return 0;
    if (k == i) {
      *p = h + 5;
      *n = len;
      return 1;
    }
    off += 5 + len;
  }
}

int rc_nmsgs(const rc_stream *s) {
  int i = 0;
  const uint8_t *p;
  size_t n;
  while (rc_msg(s, i, &p, &n))
    i++;
  return i;
}

/* ------------------------------------------------------------------ */
/* Child processes                                                     */
/* ------------------------------------------------------------------ */

int h2t_spawn(uv_loop_t *loop, char *const argv[], const char *out_path,
              int timeout_ms) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path,
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rv = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ck_assert_int_eq(rv, 0);
  uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
  int status;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (uv_hrtime() >= end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    h2t_run_for(loop, 5);
  }
}

char *h2t_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  h2t_buf b = {0};
  char tmp[4096];
  size_t n;
  while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
    h2t_buf_add(&b, tmp, n);
  fclose(f);
  h2t_buf_add(&b, "", 1);
  return (char *)b.p;
}

typedef struct msgs_want {
  rc *c;
  rc_stream *s;
  int n;
} msgs_want;

static int has_msgs(void *ud) {
  msgs_want *w = ud;
  rc_io(w->c);
  return rc_nmsgs(w->s) >= w->n;
}

int rc_run_until_msgs(uv_loop_t *loop, rc *c, rc_stream *s, int n,
                      int timeout_ms) {
  msgs_want w = {c, s, n};
  return h2t_run_until(loop, has_msgs, &w, timeout_ms);
}

static int has_status(void *ud) {
  msgs_want *w = ud;
  rc_io(w->c);
  return w->s->grpc_status >= 0;
}

int rc_run_until_status(uv_loop_t *loop, rc *c, rc_stream *s,
                        int timeout_ms) {
  msgs_want w = {c, s, 0};
  return h2t_run_until(loop, has_status, &w, timeout_ms);
}

static int is_closed(void *ud) {
  msgs_want *w = ud;
  rc_io(w->c);
  return w->s->closed;
}

int rc_run_until_closed(uv_loop_t *loop, rc *c, rc_stream *s, int timeout_ms) {
  msgs_want w = {c, s, 0};
  return h2t_run_until(loop, is_closed, &w, timeout_ms);
}
