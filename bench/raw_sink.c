/*
 * raw_sink: the lightest MCP sink there can be, for the end-to-end
 * benchmark (bench/e2e_bench.py). It dials a ResourceSource over cleartext
 * HTTP/2 with prior knowledge (what both the gRPC server, insecure, and the
 * h2c server accept), opens EstablishResourceStream, requests every
 * collection given, and ACKs each Resources message it receives; it does
 * not decode resources, only walks the message's top-level fields for the
 * collection, the nonce and the number of resources. The time from the
 * connect() to the last ACK handed to the socket is then what the source
 * and its transport take to deliver the state, without a real sink's cost.
 *
 *     raw_sink HOST:PORT [--rounds N] COLLECTION...
 *
 * Prints one line per round on stdout:
 *     RAW <ns from connect to synced> <messages> <bytes of gRPC messages>
 *         <resources>
 * Exit status 0, or 1 on an error (reported on stderr). HOST is an IPv4
 * address. Windows: 1 GiB for the stream and the connection (it never
 * throttles the source).
 */
#define _GNU_SOURCE /* struct addrinfo with -std=c11 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define PATH "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
#define WINDOW (1 << 30)
#define TIMEOUT_MS 60000

typedef struct buf {
  unsigned char *p;
  size_t len, cap;
} buf;

static void die(const char *what) {
  fprintf(stderr, "raw_sink: %s\n", what);
  exit(1);
}

static void buf_put(buf *b, const void *d, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n)
      cap *= 2;
    if (!(b->p = realloc(b->p, cap)))
      die("out of memory");
    b->cap = cap;
  }
  memcpy(b->p + b->len, d, n);
  b->len += n;
}

static void put_varint(buf *b, uint64_t v) {
  unsigned char t[10];
  size_t n = 0;
  do {
    t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  buf_put(b, t, n);
}

static void put_ld(buf *b, unsigned field, const void *d, size_t n) {
  put_varint(b, (uint64_t)field << 3 | 2);
  put_varint(b, n);
  buf_put(b, d, n);
}

typedef struct conn {
  int fd;
  nghttp2_session *s;
  int32_t sid;
  buf out;        /* gRPC bytes to send on the stream */
  size_t out_off; /* taken by nghttp2 */
  int deferred;
  /* The message being received: 5-byte prefix, then the body. */
  unsigned char hdr[5];
  size_t hdr_got;
  buf msg;
  size_t need;
  int in_body;
  size_t ncolls, nmsgs, nres;
  uint64_t bytes;
  int closed;
} conn;

/* Appends a gRPC-framed RequestResources (an ACK when nonce is set). */
static void put_request(conn *c, const char *coll, size_t collen,
                        const char *nonce, size_t noncelen) {
  buf node = {0}, req = {0};
  put_ld(&node, 1, "raw_sink", 8);
  put_ld(&req, 1, node.p, node.len);
  put_ld(&req, 2, coll, collen);
  if (nonce)
    put_ld(&req, 4, nonce, noncelen);
  unsigned char pre[5] = {0, (unsigned char)(req.len >> 24),
                          (unsigned char)(req.len >> 16),
                          (unsigned char)(req.len >> 8),
                          (unsigned char)req.len};
  buf_put(&c->out, pre, 5);
  buf_put(&c->out, req.p, req.len);
  free(node.p);
  free(req.p);
  if (c->deferred && c->sid > 0) {
    c->deferred = 0;
    nghttp2_session_resume_data(c->s, c->sid);
  }
}

static int get_varint(const unsigned char **p, const unsigned char *end,
                      uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    unsigned char b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return 0;
  }
  return -1;
}

/* A whole Resources message: its collection and nonce, ACKed. */
static void on_message(conn *c, const unsigned char *m, size_t len) {
  const unsigned char *p = m, *end = m + len, *coll = NULL, *nonce = NULL;
  size_t collen = 0, noncelen = 0;
  while (p < end) {
    uint64_t tag, v;
    if (get_varint(&p, end, &tag) != 0)
      die("bad message");
    switch (tag & 7) {
    case 0:
      if (get_varint(&p, end, &v) != 0)
        die("bad message");
      break;
    case 2:
      if (get_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p))
        die("bad message");
      if (tag >> 3 == 2) {
        coll = p;
        collen = v;
      } else if (tag >> 3 == 5) {
        nonce = p;
        noncelen = v;
      } else if (tag >> 3 == 3) {
        c->nres++;
      }
      p += v;
      break;
    default:
      die("unexpected wire type");
    }
  }
  if (!coll || !nonce)
    die("a message without collection or nonce");
  c->nmsgs++;
  c->bytes += len + 5;
  put_request(c, (const char *)coll, collen, (const char *)nonce, noncelen);
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid,
                   const uint8_t *d, size_t len, void *ud) {
  (void)s;
  (void)flags;
  conn *c = ud;
  if (sid != c->sid)
    return 0;
  while (len > 0) {
    if (!c->in_body) {
      size_t k = 5 - c->hdr_got < len ? 5 - c->hdr_got : len;
      memcpy(c->hdr + c->hdr_got, d, k);
      c->hdr_got += k;
      d += k;
      len -= k;
      if (c->hdr_got == 5) {
        if (c->hdr[0] != 0)
          die("compressed message");
        c->need = (size_t)c->hdr[1] << 24 | (size_t)c->hdr[2] << 16 |
                  (size_t)c->hdr[3] << 8 | c->hdr[4];
        c->msg.len = 0;
        c->in_body = 1;
        c->hdr_got = 0;
      }
    }
    if (c->in_body) {
      size_t k = c->need - c->msg.len < len ? c->need - c->msg.len : len;
      if (k)
        buf_put(&c->msg, d, k);
      d += k;
      len -= k;
      if (c->msg.len == c->need) {
        c->in_body = 0;
        on_message(c, c->msg.p, c->msg.len);
      }
    }
  }
  return 0;
}

static int on_close(nghttp2_session *s, int32_t sid, uint32_t code,
                    void *ud) {
  (void)s;
  conn *c = ud;
  if (sid == c->sid)
    c->closed = 1;
  (void)code;
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud) {
  (void)s;
  (void)f;
  (void)flags;
  (void)ud;
  if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0 &&
      !(valuelen == 1 && value[0] == '0'))
    fprintf(stderr, "raw_sink: grpc-status %.*s\n", (int)valuelen, value);
  return 0;
}

static ssize_t read_cb(nghttp2_session *s, int32_t sid, uint8_t *out,
                       size_t len, uint32_t *flags, nghttp2_data_source *src,
                       void *ud) {
  (void)s;
  (void)sid;
  (void)flags;
  (void)src;
  conn *c = ud;
  size_t avail = c->out.len - c->out_off;
  if (!avail) {
    c->out.len = c->out_off = 0;
    c->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (len > avail)
    len = avail;
  memcpy(out, c->out.p + c->out_off, len);
  c->out_off += len;
  return (ssize_t)len;
}

static void write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      die("write failed");
    p += w;
    n -= (size_t)w;
  }
}

static void flush(conn *c) {
  for (;;) {
    const uint8_t *d;
    ssize_t n = nghttp2_session_mem_send(c->s, &d);
    if (n < 0)
      die(nghttp2_strerror((int)n));
    if (n == 0)
      return;
    write_all(c->fd, d, (size_t)n);
  }
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run(const struct sockaddr_in *sa, const char *authority,
                char **colls, size_t ncolls) {
  conn c;
  memset(&c, 0, sizeof(c));
  c.ncolls = ncolls;
  uint64_t t0 = now_ns();
  c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c.fd < 0 || connect(c.fd, (const struct sockaddr *)sa, sizeof(*sa)))
    die("cannot connect");
  int one = 1;
  setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  nghttp2_session_callbacks *cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  if (nghttp2_session_client_new(&c.s, cb, &c) != 0)
    die("nghttp2_session_client_new");
  nghttp2_session_callbacks_del(cb);
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW},
  };
  nghttp2_submit_settings(c.s, NGHTTP2_FLAG_NONE, iv, 2);
  nghttp2_session_set_local_window_size(c.s, NGHTTP2_FLAG_NONE, 0, WINDOW);

  for (size_t i = 0; i < ncolls; i++)
    put_request(&c, colls[i], strlen(colls[i]), NULL, 0);
  const nghttp2_nv hdrs[] = {
#define NV(n, v)                                                              \
  {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                  \
   NGHTTP2_NV_FLAG_NONE}
      NV(":method", "POST"),
      NV(":scheme", "http"),
      NV(":path", PATH),
      NV(":authority", authority),
      NV("content-type", "application/grpc"),
      NV("te", "trailers"),
#undef NV
  };
  nghttp2_data_provider dp = {.read_callback = read_cb};
  c.sid = nghttp2_submit_request(c.s, NULL, hdrs,
                                 sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL);
  if (c.sid < 0)
    die("nghttp2_submit_request");

  static uint8_t rb[1 << 18];
  uint64_t done = 0;
  for (;;) {
    flush(&c);
    if (c.nmsgs >= ncolls && c.out_off == c.out.len &&
        !nghttp2_session_want_write(c.s)) {
      done = now_ns();
      break;
    }
    if (c.closed)
      die("the stream ended before the sync");
    struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
    int r = poll(&pfd, 1, TIMEOUT_MS);
    if (r == 0)
      die("timed out");
    if (r < 0 && errno == EINTR)
      continue;
    ssize_t n = read(c.fd, rb, sizeof(rb));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      die("the connection closed before the sync");
    ssize_t k = nghttp2_session_mem_recv(c.s, rb, (size_t)n);
    if (k < 0)
      die(nghttp2_strerror((int)k));
  }
  printf("RAW %llu %zu %llu %zu\n", (unsigned long long)(done - t0), c.nmsgs,
         (unsigned long long)c.bytes, c.nres);
  fflush(stdout);
  nghttp2_session_del(c.s);
  close(c.fd);
  free(c.out.p);
  free(c.msg.p);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: raw_sink HOST:PORT [--rounds N] COLLECTION...\n");
    return 2;
  }
  char host[64];
  const char *colon = strrchr(argv[1], ':');
  if (!colon || (size_t)(colon - argv[1]) >= sizeof(host))
    die("expected HOST:PORT");
  memcpy(host, argv[1], (size_t)(colon - argv[1]));
  host[colon - argv[1]] = 0;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
    die("HOST must be an IPv4 address");
  int i = 2, rounds = 1;
  if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) {
    rounds = atoi(argv[i + 1]);
    i += 2;
  }
  if (i >= argc || rounds < 1)
    die("no collection");
  for (int r = 0; r < rounds; r++)
    run(&sa, argv[1], argv + i, (size_t)(argc - i));
  return 0;
}
