/*
 * raw_sink: the lightest MCP sink there can be, for the end-to-end
 * benchmark (bench/e2e_bench.py). It dials a ResourceSource over cleartext
 * HTTP/2 with prior knowledge (what both the gRPC server, insecure, and the
 * h2c server accept), opens EstablishResourceStream, requests every
 * collection given, and ACKs each Resources message it receives; it does
 * not decode resources: it walks the message's top-level fields as they
 * arrive (nothing is buffered) for the version, the collection, the nonce
 * and the number of resources. The time from the connect() to the last ACK
 * handed to the socket is then what the source and its transport take to
 * deliver the state, without a real sink's cost.
 *
 *     raw_sink HOST:PORT [--rounds N] COLLECTION...
 *     raw_sink HOST:PORT --conns N [--incremental] [--connecting K]
 *              [--first I] COLLECTION...
 *
 * One connection per round: prints one line per round on stdout:
 *     RAW <ns from connect to synced> <messages> <bytes of gRPC messages>
 *         <resources>
 * and exits.
 *
 * --conns N: N connections (one stream each) on one epoll loop, at most K
 * (default 256) connecting at once, each asking for incremental pushes
 * with --incremental; they stay until the process is killed (SIGTERM).
 * Connection i dials from its own loopback address, 127.1.X.Y for
 * I + i (X = (I + i) / 250, Y = (I + i) % 250 + 1): 64,000 sinks at most,
 * each its own peer. A stream the source refuses before its sync
 * (UNAVAILABLE or RESOURCE_EXHAUSTED: admission) asks again on the same
 * connection after 0.5 to 1.5 s, as a sink's backoff would.
 * Times are CLOCK_MONOTONIC (what Python's time.monotonic_ns() reads), so
 * that the driver compares them with its own. Once every connection has
 * its first push of every collection ACKed:
 *     SYNCED <first connect ns> <last synced ns> <conns> <messages>
 *            <bytes> <resources> <streams refused and asked again>
 * and then, for each later version (system_version_info) of a collection,
 * once every connection has received and ACKed it:
 *     CHANGE <collection> <version> <resources> <n> <ns> ...
 * the time each connection had it (n of them, in connection order).
 *
 * Exit status 0, or 1 on an error (reported on stderr; in --conns mode
 * a connection that fails or ends is an error). HOST is an IPv4 address.
 * Windows: 1 GiB for the stream and the connection (it never throttles the
 * source). Open files: --conns N needs N + 10 descriptors; the soft limit
 * is raised to the hard one.
 */
#define _GNU_SOURCE /* struct addrinfo with -std=c11 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define PATH "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"
#define WINDOW (1 << 30)
#define TIMEOUT_MS 60000
#define FIELD_MAX 256 /* longest version, collection or nonce kept */

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
    size_t cap = b->cap ? b->cap : 256;
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

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A top-level field of a Resources message kept while it streams by. */
typedef struct field {
  char s[FIELD_MAX];
  size_t len;
} field;

typedef struct conn {
  size_t index;
  int fd;
  int connecting; /* --conns: the non-blocking connect() is under way */
  nghttp2_session *s;
  int32_t sid;
  buf out;        /* gRPC bytes to send on the stream */
  size_t out_off; /* taken by nghttp2 */
  int deferred;
  buf wpend;      /* --conns: frames the socket did not take yet */
  int incremental;
  /* The message being received, parsed as it streams: the 5-byte gRPC
   * prefix, then the fields (tag, length, value) of the body. */
  unsigned char hdr[5];
  size_t hdr_got;
  int in_body;
  uint64_t left;  /* bytes of the body still to come */
  int pst;        /* 0 tag, 1 varint value, 2 length, 3 bytes */
  uint64_t acc;
  unsigned shift;
  uint64_t tag, flen;
  field *cap;     /* the field being kept, or NULL */
  field ver, coll, nonce;
  size_t msg_res;
  /* Totals. */
  size_t ncolls, nmsgs, nres;
  uint64_t bytes;
  int closed;
  int status;     /* grpc-status of the stream, -1 none yet */
  int synced;
  uint64_t t_synced;
  uint64_t retry_at; /* --conns: a refused stream asks again then (0: no) */
} conn;

/* --conns: what every connection had of one version of a collection. */
typedef struct change {
  char key[2 * FIELD_MAX + 2]; /* collection NUL version */
  size_t n;
  size_t res;
  uint64_t *t; /* per connection, 0 until it has it */
} change;

static struct {
  conn *c;
  size_t n, nsynced, connected;
  size_t first;   /* --first: the index of connection 0 (its address) */
  size_t refused; /* streams refused (UNAVAILABLE, RESOURCE_EXHAUSTED) */
  int incremental;
  uint64_t t_first;
  change ch[64];
  size_t nch;
} many;

/* Appends a gRPC-framed RequestResources (an ACK when nonce is set). */
static void put_request(conn *c, const char *coll, size_t collen,
                        const char *nonce, size_t noncelen) {
  buf node = {0}, req = {0};
  put_ld(&node, 1, "raw_sink", 8);
  put_ld(&req, 1, node.p, node.len);
  put_ld(&req, 2, coll, collen);
  if (nonce)
    put_ld(&req, 4, nonce, noncelen);
  if (c->incremental && !nonce) {
    put_varint(&req, 6 << 3); /* incremental = true */
    put_varint(&req, 1);
  }
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

/* --conns: connection |c| has version |ver| of |coll|. */
static void record_change(conn *c) {
  char key[sizeof(many.ch[0].key)];
  memcpy(key, c->coll.s, c->coll.len);
  key[c->coll.len] = 0;
  memcpy(key + c->coll.len + 1, c->ver.s, c->ver.len);
  key[c->coll.len + 1 + c->ver.len] = 0;
  size_t klen = c->coll.len + c->ver.len + 2;
  change *ch = NULL;
  for (size_t i = 0; i < many.nch && !ch; i++)
    if (memcmp(many.ch[i].key, key, klen) == 0)
      ch = &many.ch[i];
  if (!ch) {
    if (many.nch == sizeof(many.ch) / sizeof(many.ch[0]))
      die("too many versions in flight");
    ch = &many.ch[many.nch++];
    memcpy(ch->key, key, klen);
    ch->n = 0;
    ch->res = c->msg_res;
    if (!(ch->t = calloc(many.n, sizeof(*ch->t))))
      die("out of memory");
  }
  if (ch->t[c->index])
    die("a version received twice on one stream");
  ch->t[c->index] = now_ns();
  if (++ch->n < many.n)
    return;
  printf("CHANGE %s %s %zu %zu", ch->key, ch->key + strlen(ch->key) + 1,
         ch->res, many.n);
  for (size_t i = 0; i < many.n; i++)
    printf(" %llu", (unsigned long long)ch->t[i]);
  printf("\n");
  fflush(stdout);
  free(ch->t);
  *ch = many.ch[--many.nch];
}

/* A whole Resources message: ACKed, counted. */
static void on_message(conn *c) {
  if (!c->coll.len || !c->nonce.len)
    die("a message without collection or nonce");
  c->nmsgs++;
  c->nres += c->msg_res;
  put_request(c, c->coll.s, c->coll.len, c->nonce.s, c->nonce.len);
  if (!many.n)
    return;
  if (c->synced) {
    record_change(c);
  } else if (c->nmsgs >= c->ncolls) {
    c->synced = 1;
    c->t_synced = now_ns();
    many.nsynced++;
  }
}

/* The body's bytes: fields walked as they come. */
static void parse(conn *c, const uint8_t *d, size_t len) {
  while (len > 0) {
    if (c->pst == 3) { /* the bytes of a length-delimited field */
      size_t k = c->flen < len ? (size_t)c->flen : len;
      if (c->cap) {
        memcpy(c->cap->s + c->cap->len, d, k);
        c->cap->len += k;
      }
      d += k;
      len -= k;
      if ((c->flen -= k) == 0)
        c->pst = 0;
      continue;
    }
    uint8_t b = *d++;
    len--;
    if (c->shift >= 64)
      die("bad message: varint too long");
    c->acc |= (uint64_t)(b & 0x7f) << c->shift;
    c->shift += 7;
    if (b & 0x80)
      continue;
    uint64_t v = c->acc;
    c->acc = 0;
    c->shift = 0;
    if (c->pst == 0) {
      c->tag = v;
      if ((v & 7) == 0)
        c->pst = 1;
      else if ((v & 7) == 2)
        c->pst = 2;
      else
        die("unexpected wire type");
    } else if (c->pst == 1) {
      c->pst = 0;
    } else { /* a length */
      unsigned f = (unsigned)(c->tag >> 3);
      c->cap = f == 1 ? &c->ver : f == 2 ? &c->coll : f == 5 ? &c->nonce
                                                             : NULL;
      if (f == 3)
        c->msg_res++;
      if (c->cap) {
        if (v >= FIELD_MAX)
          die("a version, collection or nonce too long");
        c->cap->len = 0;
      }
      c->flen = v;
      c->pst = v ? 3 : 0;
    }
  }
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid,
                   const uint8_t *d, size_t len, void *ud) {
  (void)s;
  (void)flags;
  conn *c = ud;
  if (sid != c->sid)
    return 0;
  nghttp2_session_consume(s, sid, len);
  while (len > 0) {
    if (!c->in_body) {
      size_t k = 5 - c->hdr_got < len ? 5 - c->hdr_got : len;
      memcpy(c->hdr + c->hdr_got, d, k);
      c->hdr_got += k;
      d += k;
      len -= k;
      if (c->hdr_got < 5)
        break;
      if (c->hdr[0] != 0)
        die("compressed message");
      c->left = (uint64_t)c->hdr[1] << 24 | (uint64_t)c->hdr[2] << 16 |
                (uint64_t)c->hdr[3] << 8 | c->hdr[4];
      c->in_body = 1;
      c->hdr_got = 0;
      c->ver.len = c->coll.len = c->nonce.len = 0;
      c->msg_res = 0;
      c->pst = 0;
      c->bytes += c->left + 5;
    }
    size_t k = c->left < len ? (size_t)c->left : len;
    parse(c, d, k);
    d += k;
    len -= k;
    c->left -= k;
    if (c->left == 0) {
      if (c->pst != 0 || c->shift)
        die("bad message: a field cut short");
      c->in_body = 0;
      on_message(c);
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
  conn *c = ud;
  if (namelen != 11 || memcmp(name, "grpc-status", 11) != 0)
    return 0;
  c->status = atoi((const char *)value);
  /* --conns: admission's refusals are retried (see retry()). */
  if (c->status != 0 && !(many.n && (c->status == 14 || c->status == 8)))
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

static void submit(conn *c, const char *authority, char **colls,
                   size_t ncolls);

/* The session and the request of a connected |c|. */
static void start(conn *c, const char *authority, char **colls,
                  size_t ncolls) {
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  nghttp2_session_callbacks *cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_option *opt;
  nghttp2_option_new(&opt);
  /* The window is given back as the data is walked (on_data). */
  nghttp2_option_set_no_auto_window_update(opt, 1);
  if (nghttp2_session_client_new2(&c->s, cb, c, opt) != 0)
    die("nghttp2_session_client_new");
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW},
  };
  nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 2);
  nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, WINDOW);
  submit(c, authority, colls, ncolls);
}

/* A new EstablishResourceStream on |c|'s session, asking for |colls|. */
static void submit(conn *c, const char *authority, char **colls,
                   size_t ncolls) {
  c->ncolls = ncolls;
  c->nmsgs = c->nres = 0;
  c->bytes = 0;
  c->out.len = c->out_off = 0;
  c->deferred = 0;
  c->in_body = 0;
  c->hdr_got = 0;
  c->closed = 0;
  c->status = -1;
  c->sid = 0;
  for (size_t i = 0; i < ncolls; i++)
    put_request(c, colls[i], strlen(colls[i]), NULL, 0);
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
  c->sid = nghttp2_submit_request(c->s, NULL, hdrs,
                                  sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL);
  if (c->sid < 0)
    die("nghttp2_submit_request");
}

static uint8_t rb[1 << 18];

static void run(const struct sockaddr_in *sa, const char *authority,
                char **colls, size_t ncolls) {
  conn c;
  memset(&c, 0, sizeof(c));
  uint64_t t0 = now_ns();
  c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c.fd < 0 || connect(c.fd, (const struct sockaddr *)sa, sizeof(*sa)))
    die("cannot connect");
  start(&c, authority, colls, ncolls);
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
}

/* ------------------------------------------------------------------ */
/* --conns: many connections on one epoll loop                         */
/* ------------------------------------------------------------------ */

/* Sends what nghttp2 has, keeping what the socket does not take; 1 when
 * something is left (wait for EPOLLOUT). */
static int flush_nb(conn *c) {
  for (;;) {
    while (c->wpend.len) {
      ssize_t w = write(c->fd, c->wpend.p, c->wpend.len);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0 && errno == EAGAIN)
        return 1;
      if (w < 0)
        die("write failed");
      memmove(c->wpend.p, c->wpend.p + w, c->wpend.len - (size_t)w);
      c->wpend.len -= (size_t)w;
    }
    const uint8_t *d;
    ssize_t n = nghttp2_session_mem_send(c->s, &d);
    if (n < 0)
      die(nghttp2_strerror((int)n));
    if (n == 0)
      return 0;
    buf_put(&c->wpend, d, (size_t)n);
  }
}

static void watch(int ep, conn *c, int op, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(ep, op, c->fd, &ev) != 0)
    die("epoll_ctl failed");
}

static void dial(int ep, conn *c, const struct sockaddr_in *sa) {
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->fd < 0)
    die(errno == EMFILE ? "out of file descriptors" : "socket failed");
  /* Each sink from its own address, as sinks on as many hosts: 127.1.X.Y
   * (loopback is 127/8), so that limits per peer see 10,000 peers, not
   * one, and the ports of one address do not run out. */
  size_t k = many.first + c->index;
  struct sockaddr_in from;
  memset(&from, 0, sizeof(from));
  from.sin_family = AF_INET;
  from.sin_addr.s_addr =
      htonl(0x7f010000u | (uint32_t)(k / 250 % 256) << 8 | (uint32_t)(k % 250 + 1));
  if (bind(c->fd, (const struct sockaddr *)&from, sizeof(from)) != 0)
    die("cannot bind a 127.1.x.y address");
  if (connect(c->fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0 &&
      errno != EINPROGRESS)
    die("cannot connect");
  c->connecting = 1;
  watch(ep, c, EPOLL_CTL_ADD, EPOLLOUT);
}

static void raise_nofile(size_t need) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    fprintf(stderr, "raw_sink: %zu connections need %zu open files; the "
                    "hard limit is %llu\n", need - 10, need,
            (unsigned long long)rl.rlim_max);
    exit(1);
  }
}

static void run_many(const struct sockaddr_in *sa, const char *authority,
                     char **colls, size_t ncolls, size_t n, size_t window) {
  raise_nofile(n + 10);
  many.n = n;
  if (!(many.c = calloc(n, sizeof(conn))))
    die("out of memory");
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    die("epoll_create1 failed");
  size_t next = 0, connecting = 0;
  many.t_first = now_ns();
  struct epoll_event evs[256];
  int reported = 0;
  uint64_t due = 0; /* the earliest retry_at, 0 when none */
  for (;;) {
    while (next < n && connecting < window) {
      conn *c = &many.c[next];
      c->index = next++;
      c->incremental = many.incremental;
      dial(ep, c, sa);
      connecting++;
    }
    if (!reported && many.nsynced == n) {
      uint64_t last = 0;
      size_t msgs = 0, res = 0;
      uint64_t bytes = 0;
      for (size_t i = 0; i < n; i++) {
        conn *c = &many.c[i];
        last = c->t_synced > last ? c->t_synced : last;
        msgs += c->nmsgs;
        bytes += c->bytes;
        res += c->nres;
      }
      printf("SYNCED %llu %llu %zu %zu %llu %zu %zu\n",
             (unsigned long long)many.t_first, (unsigned long long)last, n,
             msgs, (unsigned long long)bytes, res, many.refused);
      fflush(stdout);
      reported = 1;
    }
    if (due && now_ns() >= due) {
      uint64_t t = now_ns();
      due = 0;
      for (size_t i = 0; i < n; i++) {
        conn *c = &many.c[i];
        if (!c->retry_at)
          continue;
        if (c->retry_at <= t) {
          c->retry_at = 0;
          submit(c, authority, colls, ncolls);
          watch(ep, c, EPOLL_CTL_MOD, EPOLLIN | (flush_nb(c) ? EPOLLOUT : 0));
        } else if (!due || c->retry_at < due) {
          due = c->retry_at;
        }
      }
    }
    int wait_ms = reported ? -1 : TIMEOUT_MS;
    if (due) {
      uint64_t t = now_ns();
      wait_ms = due <= t ? 0 : (int)((due - t) / 1000000u + 1);
    }
    int k = epoll_wait(ep, evs, sizeof(evs) / sizeof(evs[0]), wait_ms);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      die("epoll_wait failed");
    if (k == 0 && !due)
      die("timed out: no progress for 60 s");
    for (int i = 0; i < k; i++) {
      conn *c = evs[i].data.ptr;
      if (c->connecting) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
          fprintf(stderr, "raw_sink: connection %zu: %s\n", c->index,
                  strerror(err));
          exit(1);
        }
        c->connecting = 0;
        connecting--;
        many.connected++;
        start(c, authority, colls, ncolls);
      } else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        for (;;) {
          ssize_t r = read(c->fd, rb, sizeof(rb));
          if (r < 0 && errno == EINTR)
            continue;
          if (r < 0 && errno == EAGAIN)
            break;
          if (r <= 0) {
            fprintf(stderr, "raw_sink: connection %zu closed by the source "
                            "(%zu messages)\n", c->index, c->nmsgs);
            exit(1);
          }
          if (nghttp2_session_mem_recv(c->s, rb, (size_t)r) < 0)
            die("nghttp2_session_mem_recv failed");
          if ((size_t)r < sizeof(rb))
            break;
        }
        if (c->closed && !c->retry_at) {
          if (c->synced || (c->status != 14 && c->status != 8)) {
            fprintf(stderr, "raw_sink: stream %zu ended (grpc-status %d)\n",
                    c->index, c->status);
            exit(1);
          }
          /* Refused by admission (UNAVAILABLE "retry later", or
           * RESOURCE_EXHAUSTED): ask again on the same connection after
           * 0.5 to 1.5 s, as a sink's jittered backoff would. */
          many.refused++;
          c->retry_at = now_ns() + 500000000u +
                        (uint64_t)(rand() % 1000) * 1000000u;
          if (!due || c->retry_at < due)
            due = c->retry_at;
        }
      }
      watch(ep, c, EPOLL_CTL_MOD, EPOLLIN | (flush_nb(c) ? EPOLLOUT : 0));
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: raw_sink HOST:PORT [--rounds N] COLLECTION...\n"
                    "       raw_sink HOST:PORT --conns N [--incremental] "
                    "[--connecting K] [--first I] COLLECTION...\n");
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
  long conns = 0, window = 256;
  while (i + 1 < argc && strncmp(argv[i], "--", 2) == 0) {
    if (strcmp(argv[i], "--rounds") == 0)
      rounds = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--conns") == 0)
      conns = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--connecting") == 0)
      window = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--first") == 0)
      many.first = (size_t)atol(argv[i + 1]);
    else if (strcmp(argv[i], "--incremental") == 0) {
      many.incremental = 1;
      i++;
      continue;
    } else
      die("unknown option");
    i += 2;
  }
  if (i >= argc || rounds < 1 || conns < 0 || window < 1)
    die("no collection");
  if (conns > 0) {
    run_many(&sa, argv[1], argv + i, (size_t)(argc - i), (size_t)conns,
             (size_t)window);
    return 0;
  }
  for (int r = 0; r < rounds; r++)
    run(&sa, argv[1], argv + i, (size_t)(argc - i));
  return 0;
}
