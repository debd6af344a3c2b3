/*
 * The floor under issue 25 target 2 (100 incremental sinks have a change
 * with p99 under 3 ms): what loopback TCP alone costs this machine to
 * reach N receivers and have each answer, with no protocol, no file, no
 * HTTP/2 and no library.
 *
 * One sender and N receivers, each on a TCP connection of its own over
 * 127.0.0.1 (TCP_NODELAY both ways). Each round, the sender takes t0 and
 * writes one message of |size| bytes to every connection in turn, as
 * mcp-source writes one push per stream; each receiver, once its read has
 * the whole message, takes its own CLOCK_MONOTONIC stamp and writes it
 * back (8 bytes: its ACK). A delivery's lag is stamp - t0. The sender
 * reads the answers after its writes, so its reads do not delay a stamp.
 *
 * Receivers (--mode):
 *   procs    a process each, blocking reads: the e2e driver's mcp-sink
 *            processes;
 *   threads  a thread each in one process: mcp-load-sink on gRPC;
 *   loop     one thread with epoll for all: mcp-load-sink on h2c.
 *
 *   BENCH fanout_floor_<mode>_p50_ms <v> ms   (and _p99_ms, _max_ms)
 *   BENCH fanout_floor_procs_cpu_us <v> us    a receiver process's CPU
 *         time per delivery (woken, read, stamp, answer), from the
 *         children's rusage: what e2e_bench's
 *         e2e_propagation_sink_cpu_us compares with
 *
 * Usage: fanout_floor [--receivers N] [--rounds R] [--interval-ms I]
 *                     [--size B] [--mode procs|threads|loop|all] [--quick]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define MAX_RECEIVERS 4096
#define MAX_SIZE (1 << 20)

typedef struct cfg {
  int receivers, rounds, interval_ms;
  size_t size;
} cfg;

static void die(const char *what) {
  fprintf(stderr, "fanout_floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Moves all |n| bytes (|out|: writes them): 1, or 0 at EOF of a read;
 * dies on an error. */
static int full_io(int fd, void *p, size_t n, int out) {
  uint8_t *b = p;
  while (n) {
    ssize_t k = out ? write(fd, b, n) : read(fd, b, n);
    if (k == 0 && !out)
      return 0;
    if (k < 0) {
      if (errno == EINTR)
        continue;
      die(out ? "write" : "read");
    }
    b += k;
    n -= (size_t)k;
  }
  return 1;
}

static int full_read(int fd, void *p, size_t n) { return full_io(fd, p, n, 0); }

static void full_write(int fd, const void *p, size_t n) {
  full_io(fd, (void *)p, n, 1);
}

static void nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    die("TCP_NODELAY");
}

/* A TCP socket, and 127.0.0.1:|port| in |a|. */
static int loopback_socket(struct sockaddr_in *a, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    die("socket");
  memset(a, 0, sizeof(*a));
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return fd;
}

static int dial(int port) {
  struct sockaddr_in a;
  int fd = loopback_socket(&a, port);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
    die("connect");
  nodelay(fd);
  return fd;
}

/* One blocking receiver: a message in, its stamp out, until EOF. */
static void receive_blocking(int fd, size_t size) {
  uint8_t *m = malloc(size);
  if (!m)
    die("malloc");
  while (full_read(fd, m, size)) {
    uint64_t t = mono_ns();
    full_write(fd, &t, sizeof(t));
  }
  free(m);
  close(fd);
}

typedef struct rthread {
  int port;
  size_t size;
} rthread;

static void *receiver_thread(void *ud) {
  rthread *r = ud;
  receive_blocking(dial(r->port), r->size);
  return NULL;
}

/* All receivers on one epoll loop; a message may arrive in parts. */
typedef struct lconn {
  int fd;
  size_t got;
} lconn;

typedef struct lctx {
  int port, n;
  size_t size;
} lctx;

static void *loop_thread(void *ud) {
  lctx *l = ud;
  int ep = epoll_create1(0);
  if (ep < 0)
    die("epoll_create1");
  lconn *c = calloc((size_t)l->n, sizeof(*c));
  uint8_t *m = malloc(l->size);
  if (!c || !m)
    die("malloc");
  for (int i = 0; i < l->n; i++) {
    c[i].fd = dial(l->port);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev) != 0)
      die("epoll_ctl");
  }
  int open = l->n;
  struct epoll_event evs[256];
  while (open > 0) {
    int k = epoll_wait(ep, evs, 256, -1);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      die("epoll_wait");
    }
    for (int i = 0; i < k; i++) {
      lconn *x = evs[i].data.ptr;
      ssize_t r = read(x->fd, m, l->size - x->got);
      if (r <= 0) {
        if (r < 0 && errno == EINTR)
          continue;
        epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
        close(x->fd);
        open--;
        continue;
      }
      x->got += (size_t)r;
      if (x->got == l->size) {
        x->got = 0;
        uint64_t t = mono_ns();
        full_write(x->fd, &t, sizeof(t));
      }
    }
  }
  close(ep);
  free(c);
  free(m);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double tv_us(const struct timeval *t) {
  return (double)t->tv_sec * 1e6 + (double)t->tv_usec;
}

/* The kinds of receivers, in the order they run. */
enum { PROCS, THREADS, LOOP, NMODES };
static const char *const mode_names[NMODES] = {"procs", "threads", "loop"};

static void run(int mode, const cfg *g) {
  if (g->receivers < 1 || g->rounds < 1)
    return;
  struct sockaddr_in a;
  int ls = loopback_socket(&a, 0);
  socklen_t alen = sizeof(a);
  if (bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(ls, MAX_RECEIVERS) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0)
    die("listen");
  int port = ntohs(a.sin_port);
  int n = g->receivers;

  pid_t *kids = NULL;
  pthread_t *th = NULL;
  rthread rt = {port, g->size};
  lctx lc = {port, n, g->size};
  size_t nth = 0; /* threads started */
  struct rusage ru0;
  getrusage(RUSAGE_CHILDREN, &ru0); /* of the children reaped before */
  if (mode == PROCS) {
    if (!(kids = calloc((unsigned)n, sizeof(*kids))))
      die("calloc");
    for (int i = 0; i < n; i++) {
      if ((kids[i] = fork()) < 0)
        die("fork");
      if (kids[i] == 0) {
        close(ls);
        receive_blocking(dial(port), g->size);
        _exit(0);
      }
    }
  } else {
    nth = mode == THREADS ? (unsigned)n : 1;
    if (!(th = calloc(nth, sizeof(*th))))
      die("calloc");
    for (size_t i = 0; i < nth; i++)
      if (pthread_create(&th[i], NULL,
                         mode == THREADS ? receiver_thread : loop_thread,
                         mode == THREADS ? (void *)&rt : (void *)&lc) != 0)
        die("pthread_create");
  }

  /* (unsigned): n and rounds are at least 1 (checked above). */
  int *fd = calloc((unsigned)n, sizeof(*fd));
  uint64_t *lag = calloc((size_t)(unsigned)n * (unsigned)g->rounds,
                         sizeof(*lag));
  uint8_t *msg = calloc(1, g->size);
  if (!fd || !lag || !msg)
    die("calloc");
  for (int i = 0; i < n; i++) {
    if ((fd[i] = accept(ls, NULL, NULL)) < 0)
      die("accept");
    nodelay(fd[i]);
  }
  close(ls);

  size_t k = 0;
  for (int r = 0; r < g->rounds; r++) {
    struct timespec pause = {g->interval_ms / 1000,
                             (long)(g->interval_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL); /* receivers idle, as between changes */
    msg[0] = (uint8_t)r;
    uint64_t t0 = mono_ns();
    for (int i = 0; i < n; i++)
      full_write(fd[i], msg, g->size);
    for (int i = 0; i < n; i++) {
      uint64_t t;
      if (!full_read(fd[i], &t, sizeof(t))) {
        errno = EPIPE;
        die("a receiver ended");
      }
      lag[k++] = t > t0 ? t - t0 : 0;
    }
  }
  for (int i = 0; i < n; i++)
    close(fd[i]);
  for (int i = 0; kids && i < n; i++)
    waitpid(kids[i], NULL, 0);
  for (size_t i = 0; i < nth; i++)
    pthread_join(th[i], NULL);
  if (mode == PROCS) {
    struct rusage ru1;
    getrusage(RUSAGE_CHILDREN, &ru1);
    double us = tv_us(&ru1.ru_utime) + tv_us(&ru1.ru_stime) -
                tv_us(&ru0.ru_utime) - tv_us(&ru0.ru_stime);
    bu_result("fanout_floor_procs_cpu_us", us / ((double)n * (double)g->rounds),
              "us",
              "procs: a receiver's CPU time per delivery (its whole life "
              "over its deliveries: the dial is in it)",
              NULL, -1);
  }

  qsort(lag, k, sizeof(*lag), cmp_u64);
  char name[64], what[160];
  const char *q[] = {"p50", "p99", "max"};
  size_t at[] = {k / 2, k * 99 / 100, k - 1};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof(name), "fanout_floor_%s_%s_ms", mode_names[mode],
             q[i]);
    snprintf(what, sizeof(what),
             "%s, %s: %d receivers x %d rounds of %zu bytes, t0 to each "
             "receiver's stamp",
             q[i], mode_names[mode], n, g->rounds, g->size);
    bu_result(name, (double)lag[at[i]] / 1e6, "ms", what, NULL, -1);
  }
  free(kids);
  free(th);
  free(fd);
  free(lag);
  free(msg);
}

/* --mode's value as a set of modes; 0 when it names none. */
static unsigned mode_bits(const char *v) {
  if (strcmp(v, "all") == 0)
    return (1u << NMODES) - 1;
  for (int m = 0; m < NMODES; m++)
    if (strcmp(v, mode_names[m]) == 0)
      return 1u << m;
  return 0;
}

static int arg_int(const char *v, int lo, int hi, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    return -1;
  *out = (int)x;
  return 0;
}

int main(int argc, char **argv) {
  cfg g = {100, 200, 20, 400};
  unsigned modes = (1u << NMODES) - 1; /* --mode all */
  for (int i = 1; i < argc; i++) {
    int size;
    const char *v = i + 1 < argc ? argv[i + 1] : "";
    if (strcmp(argv[i], "--quick") == 0) {
      g.receivers = 5;
      g.rounds = 5;
      g.interval_ms = 2;
    } else if (strcmp(argv[i], "--receivers") == 0 &&
               arg_int(v, 1, MAX_RECEIVERS, &g.receivers) == 0) {
      i++;
    } else if (strcmp(argv[i], "--rounds") == 0 &&
               arg_int(v, 1, 1000000, &g.rounds) == 0) {
      i++;
    } else if (strcmp(argv[i], "--interval-ms") == 0 &&
               arg_int(v, 0, 60000, &g.interval_ms) == 0) {
      i++;
    } else if (strcmp(argv[i], "--size") == 0 &&
               arg_int(v, 8, MAX_SIZE, &size) == 0) {
      g.size = (size_t)size;
      i++;
    } else if (strcmp(argv[i], "--mode") == 0 &&
               (modes = mode_bits(v)) != 0) {
      i++;
    } else {
      fprintf(stderr,
              "usage: fanout_floor [--receivers N] [--rounds R] "
              "[--interval-ms I] [--size B] "
              "[--mode procs|threads|loop|all] [--quick]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  for (int m = 0; m < NMODES; m++)
    if (modes & (1u << m))
      run(m, &g);
  bu_table("loopback fan-out alone (issue 25 target 2's floor)");
  return bu_missed() ? 1 : 0;
}
