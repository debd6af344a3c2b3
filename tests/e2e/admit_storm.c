/*
 * admit-storm: the admission attacks of issue 12 against a real source, as
 * one single-threaded client (nghttp2 on non-blocking sockets, poll), over
 * cleartext HTTP/2 with prior knowledge (what both transports' listeners
 * accept). For tests/e2e/test_admission.py and the numbers in
 * docs/security.md.
 *
 *   admit-storm HOST:PORT --streams N [--per-conn K] [--from ADDR]
 *               [--mode storm|mute|silent] [--probe-from ADDR]
 *               [--settle-ms MS] [--timeout-ms MS] COLLECTION...
 *
 * Opens N EstablishResourceStream calls at once, K per connection (default
 * 50), from the local address ADDR (default any; another 127.x address is
 * another peer on loopback). Modes:
 *   storm   each stream asks for the collections and never ACKs; the
 *           client reads on. Ends once every stream has its first push (a
 *           whole message) or a grpc-status, or at the timeout.
 *   mute    each stream asks, and the client never reads again once its
 *           requests are written.
 *   silent  each stream sends its headers only.
 * With --probe-from, once the N streams are set up (plus --settle-ms,
 * default 500), one more stream (a new sink) asks from that address and
 * is timed to its first push. Prints one JSON line:
 *   {"streams":N,"pushed":P,"status":{"8":R,"14":U,...},"unanswered":X,
 *    "reset":Z,"max_ms":M,"setup_ms":S,"probe_ms":T,"probe_status":C,
 *    "released":L}
 * (max_ms: the latest first answer of a storm stream, from the start;
 * probe_ms -1 when the probe got no push; probe_status -1 when none;
 * released: storm streams first answered (a push, a status, a reset)
 * after the set-up and before the probe's answer, the ones the probe may
 * have waited for.)
 * Exit 0, or 1 on a failure to connect (stderr), 2 on usage.
 */
#define _GNU_SOURCE
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define PATH "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream"

typedef struct sstream {
  int32_t id;
  size_t got;      /* DATA bytes received */
  size_t need;     /* 5 + the first message's length, once known */
  uint8_t hdr[5];
  uint64_t answered; /* ns of the first push or status, 0: none */
  int pushed, status, reset;
  const uint8_t *out; /* the requests, shared */
  size_t outlen, off;
} sstream;

typedef struct sconn {
  int fd;
  nghttp2_session *h2;
  sstream *s;
  int n;
  uint8_t *pend; /* bytes nghttp2 produced that the socket did not take */
  size_t plen, pcap;
  int mute;      /* no more reading */
  int dead;
} sconn;

static uint64_t t0;
static uint8_t *reqs;
static size_t reqlen;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "admit-storm: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void put(uint8_t **b, size_t *len, size_t *cap, const void *p,
                size_t n) {
  if (*len + n > *cap) {
    *cap = (*len + n) * 2 + 64;
    if (!(*b = realloc(*b, *cap)))
      die("out of memory");
  }
  memcpy(*b + *len, p, n);
  *len += n;
}

static void varint(uint8_t **b, size_t *len, size_t *cap, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, len, cap, t, n);
}

/* gRPC-framed RequestResources{sink_node{id}, collection}, one per
 * collection, into |reqs|. */
static void build_requests(char **colls, int n) {
  size_t cap = 0;
  for (int i = 0; i < n; i++) {
    uint8_t *m = NULL;
    size_t ml = 0, mc = 0;
    static const char id[] = "admit-storm";
    varint(&m, &ml, &mc, 1 << 3 | 2); /* sink_node */
    varint(&m, &ml, &mc, 2 + sizeof(id) - 1);
    varint(&m, &ml, &mc, 1 << 3 | 2); /* SinkNode.id */
    varint(&m, &ml, &mc, sizeof(id) - 1);
    put(&m, &ml, &mc, id, sizeof(id) - 1);
    varint(&m, &ml, &mc, 2 << 3 | 2); /* collection */
    varint(&m, &ml, &mc, strlen(colls[i]));
    put(&m, &ml, &mc, colls[i], strlen(colls[i]));
    uint8_t pre[5] = {0, (uint8_t)(ml >> 24), (uint8_t)(ml >> 16),
                      (uint8_t)(ml >> 8), (uint8_t)ml};
    put(&reqs, &reqlen, &cap, pre, 5);
    put(&reqs, &reqlen, &cap, m, ml);
    free(m);
  }
}

static sstream *find(sconn *c, int32_t id) {
  for (int i = 0; i < c->n; i++)
    if (c->s[i].id == id)
      return &c->s[i];
  return NULL;
}

static void answered(sstream *s) {
  if (!s->answered)
    s->answered = now_ns();
}

static int on_data(nghttp2_session *h, uint8_t flags, int32_t id,
                   const uint8_t *d, size_t len, void *ud) {
  (void)flags;
  sconn *c = ud;
  sstream *s = find(c, id);
  nghttp2_session_consume(h, id, len);
  if (!s)
    return 0;
  size_t k = 0;
  while (k < len && s->got < 5)
    s->hdr[s->got++] = d[k++];
  s->got += len - k;
  if (!s->need && s->got >= 5)
    s->need = 5 + ((size_t)s->hdr[1] << 24 | (size_t)s->hdr[2] << 16 |
                   (size_t)s->hdr[3] << 8 | s->hdr[4]);
  if (s->need && s->got >= s->need && !s->pushed) {
    s->pushed = 1;
    answered(s);
  }
  return 0;
}

static int on_header(nghttp2_session *h, const nghttp2_frame *f,
                     const uint8_t *name, size_t nl, const uint8_t *value,
                     size_t vl, uint8_t flags, void *ud) {
  (void)h;
  (void)flags;
  sconn *c = ud;
  sstream *s = find(c, f->hd.stream_id);
  if (s && nl == 11 && memcmp(name, "grpc-status", 11) == 0) {
    char v[8] = {0};
    memcpy(v, value, vl < 7 ? vl : 7);
    s->status = atoi(v);
    answered(s);
  }
  return 0;
}

static int on_close(nghttp2_session *h, int32_t id, uint32_t code, void *ud) {
  (void)h;
  (void)code;
  sconn *c = ud;
  sstream *s = find(c, id);
  if (s && !s->answered && s->status < 0) {
    s->reset = 1;
    answered(s);
  }
  return 0;
}

static ssize_t read_cb(nghttp2_session *h, int32_t id, uint8_t *buf,
                       size_t len, uint32_t *flags, nghttp2_data_source *src,
                       void *ud) {
  (void)h;
  (void)id;
  (void)flags;
  (void)ud;
  sstream *s = src->ptr;
  size_t n = s->outlen - s->off;
  if (!n)
    return NGHTTP2_ERR_DEFERRED; /* open: no END_STREAM, no ACK */
  if (n > len)
    n = len;
  memcpy(buf, s->out + s->off, n);
  s->off += n;
  return (ssize_t)n;
}

static int connect_from(const struct sockaddr_in *to, const char *from) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket");
  if (from) {
    struct sockaddr_in b;
    memset(&b, 0, sizeof(b));
    b.sin_family = AF_INET;
    if (inet_pton(AF_INET, from, &b.sin_addr) != 1)
      die("bad --from address");
    if (bind(fd, (struct sockaddr *)&b, sizeof(b)) != 0)
      die("bind");
  }
  if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) != 0)
    die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

static void conn_open(sconn *c, const struct sockaddr_in *to,
                      const char *from, const char *authority, int n,
                      int ask) {
  memset(c, 0, sizeof(*c));
  c->fd = connect_from(to, from);
  c->n = n;
  c->s = calloc((size_t)n, sizeof(*c->s));
  if (!c->s)
    die("out of memory");
  nghttp2_session_callbacks *cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
  nghttp2_option *opt;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1); /* on_data consumes */
  if (nghttp2_session_client_new2(&c->h2, cb, c, opt) != 0)
    die("nghttp2");
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                  1 << 20}};
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2);
  nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 26);
#define NV(a, b)                                                               \
  {(uint8_t *)(a), (uint8_t *)(b), sizeof(a) - 1, strlen(b),                  \
   NGHTTP2_NV_FLAG_NONE}
  nghttp2_nv h[] = {NV(":method", "POST"), NV(":scheme", "http"),
                    NV(":path", PATH), NV(":authority", authority),
                    NV("content-type", "application/grpc"),
                    NV("te", "trailers")};
  for (int i = 0; i < n; i++) {
    sstream *s = &c->s[i];
    s->status = -1;
    s->out = ask ? reqs : NULL;
    s->outlen = ask ? reqlen : 0;
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_cb};
    s->id = nghttp2_submit_request(c->h2, NULL, h, 6, &dp, NULL);
    if (s->id < 0)
      die("submit");
  }
}

/* Moves bytes: writes what nghttp2 has, reads unless mute. */
static void conn_io(sconn *c, int readable) {
  if (c->dead)
    return;
  for (;;) {
    if (c->plen) {
      ssize_t w = write(c->fd, c->pend, c->plen);
      if (w < 0 && (errno == EAGAIN || errno == EINTR))
        break;
      if (w < 0) {
        c->dead = 1;
        return;
      }
      memmove(c->pend, c->pend + w, c->plen - (size_t)w);
      c->plen -= (size_t)w;
      continue;
    }
    const uint8_t *d;
    ssize_t n = nghttp2_session_mem_send(c->h2, &d);
    if (n <= 0)
      break;
    put(&c->pend, &c->plen, &c->pcap, d, (size_t)n);
  }
  if (!readable || c->mute)
    return;
  static uint8_t buf[1 << 16];
  for (;;) {
    ssize_t r = read(c->fd, buf, sizeof(buf));
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      break;
    if (r <= 0) {
      c->dead = 1;
      for (int i = 0; i < c->n; i++)
        if (!c->s[i].answered) {
          c->s[i].reset = 1;
          answered(&c->s[i]);
        }
      return;
    }
    if (nghttp2_session_mem_recv(c->h2, buf, (size_t)r) < 0) {
      c->dead = 1;
      return;
    }
  }
}

/* Written out: every request handed to the socket. */
static int flushed(const sconn *c) {
  if (c->plen || nghttp2_session_want_write(c->h2))
    return 0;
  for (int i = 0; i < c->n; i++)
    if (c->s[i].off < c->s[i].outlen)
      return 0;
  return 1;
}

static void poll_all(sconn *c, int nc, int ms) {
  struct pollfd *p = calloc((size_t)nc, sizeof(*p));
  for (int i = 0; i < nc; i++) {
    p[i].fd = c[i].dead ? -1 : c[i].fd;
    p[i].events = (c[i].mute ? 0 : POLLIN) | (c[i].plen ? POLLOUT : 0);
  }
  poll(p, (nfds_t)nc, ms);
  for (int i = 0; i < nc; i++)
    conn_io(&c[i], (p[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0);
  free(p);
}

static int all_answered(sconn *c, int nc) {
  for (int i = 0; i < nc; i++)
    for (int k = 0; k < c[i].n; k++)
      if (!c[i].s[k].answered)
        return 0;
  return 1;
}

int main(int argc, char **argv) {
  const char *addr = NULL, *from = NULL, *probe_from = NULL, *mode = "storm";
  int streams = 0, per = 50, settle = 500, timeout = 60000;
  char **colls = calloc((size_t)argc, sizeof(char *));
  int ncolls = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--streams") && more)
      streams = atoi(argv[++i]);
    else if (!strcmp(a, "--per-conn") && more)
      per = atoi(argv[++i]);
    else if (!strcmp(a, "--from") && more)
      from = argv[++i];
    else if (!strcmp(a, "--mode") && more)
      mode = argv[++i];
    else if (!strcmp(a, "--probe-from") && more)
      probe_from = argv[++i];
    else if (!strcmp(a, "--settle-ms") && more)
      settle = atoi(argv[++i]);
    else if (!strcmp(a, "--timeout-ms") && more)
      timeout = atoi(argv[++i]);
    else if (a[0] == '-' && a[1] == '-')
      goto usage;
    else if (!addr)
      addr = a;
    else
      colls[ncolls++] = argv[i];
  }
  int storm = !strcmp(mode, "storm"), mute = !strcmp(mode, "mute"),
      silent = !strcmp(mode, "silent");
  if (!addr || !ncolls || streams < 0 || per < 1 || !(storm || mute || silent))
    goto usage;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  char host[64];
  const char *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= sizeof(host))
    goto usage;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = 0;
  struct sockaddr_in to;
  memset(&to, 0, sizeof(to));
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &to.sin_addr) != 1)
    goto usage;
  build_requests(colls, ncolls);

  int nc = (streams + per - 1) / per;
  sconn *c = calloc((size_t)nc + 1, sizeof(*c));
  t0 = now_ns();
  for (int i = 0; i < nc; i++) {
    int n = streams - i * per < per ? streams - i * per : per;
    conn_open(&c[i], &to, from, addr, n, !silent);
    conn_io(&c[i], 0);
  }
  uint64_t end = t0 + (uint64_t)timeout * 1000000u;
  /* Set up: written out (storm: answered too). */
  for (;;) {
    int done = 1;
    for (int i = 0; i < nc && done; i++)
      done = c[i].dead || flushed(&c[i]);
    if (storm && done)
      done = all_answered(c, nc);
    if (done || now_ns() > end)
      break;
    poll_all(c, nc, 10);
  }
  uint64_t setup = now_ns();
  if (mute)
    for (int i = 0; i < nc; i++)
      c[i].mute = 1;

  long probe_ms = -1;
  int probe_status = -1;
  int released = 0;
  if (probe_from) {
    uint64_t until = now_ns() + (uint64_t)settle * 1000000u;
    while (now_ns() < until)
      poll_all(c, nc, 10);
    sconn *p = &c[nc];
    uint64_t pt = now_ns();
    conn_open(p, &to, probe_from, addr, 1, 1);
    conn_io(p, 0); /* the request goes out now, not at the next poll */
    while (!p->s[0].answered && !p->dead && now_ns() < end)
      poll_all(c, nc + 1, 10);
    if (p->s[0].pushed)
      probe_ms = (long)((p->s[0].answered - pt) / 1000000u);
    probe_status = p->s[0].status;
    uint64_t pa = p->s[0].answered ? p->s[0].answered : now_ns();
    for (int i = 0; i < nc; i++)
      for (int k = 0; k < c[i].n; k++)
        released += c[i].s[k].answered > setup && c[i].s[k].answered <= pa;
    nc++;
  }

  int pushed = 0, unanswered = 0, reset = 0, by[17] = {0};
  uint64_t max = 0;
  for (int i = 0; i < (probe_from ? nc - 1 : nc); i++)
    for (int k = 0; k < c[i].n; k++) {
      sstream *s = &c[i].s[k];
      pushed += s->pushed;
      reset += s->reset && !s->pushed;
      if (!s->pushed && s->status >= 0 && s->status <= 16)
        by[s->status]++;
      if (!s->answered)
        unanswered++;
      else if (s->answered - t0 > max)
        max = s->answered - t0;
    }
  printf("{\"streams\":%d,\"pushed\":%d,\"status\":{", streams, pushed);
  int first = 1;
  for (int k = 0; k <= 16; k++)
    if (by[k]) {
      printf("%s\"%d\":%d", first ? "" : ",", k, by[k]);
      first = 0;
    }
  printf("},\"unanswered\":%d,\"reset\":%d,\"max_ms\":%llu,\"setup_ms\":%llu,"
         "\"probe_ms\":%ld,\"probe_status\":%d,\"released\":%d}\n",
         unanswered, reset, (unsigned long long)(max / 1000000u),
         (unsigned long long)((setup - t0) / 1000000u), probe_ms,
         probe_status, released);
  fflush(stdout);
  for (int i = 0; i < nc; i++) {
    close(c[i].fd);
    nghttp2_session_del(c[i].h2);
    free(c[i].s);
    free(c[i].pend);
  }
  free(c);
  free(reqs);
  free(colls);
  return 0;
usage:
  fprintf(stderr, "usage: admit-storm HOST:PORT --streams N [--per-conn K] "
                  "[--from ADDR] [--mode storm|mute|silent] [--probe-from "
                  "ADDR] [--settle-ms MS] [--timeout-ms MS] COLLECTION...\n");
  return 2;
}
