/* getrandom(2) as a mcp_rand_fn. */
#include "util/rand.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* splitmix64: a good mixer for the fallback. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static void fallback(uint8_t *dest, size_t len) {
  static atomic_uint_fast64_t counter;
  struct timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  uint64_t s = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
  s ^= mix((uint64_t)mono.tv_nsec ^ ((uint64_t)getpid() << 32));
  s ^= mix(atomic_fetch_add(&counter, 1));
  for (size_t i = 0; i < len; i++) {
    if (i % 8 == 0)
      s = mix(s);
    dest[i] = (uint8_t)(s >> (8 * (i % 8)));
  }
}

void tool_rand(uint8_t *dest, size_t len, void *user_data) {
  (void)user_data;
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(dest + got, len - got, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      fallback(dest + got, len - got);
      return;
    }
    got += (size_t)n;
  }
}
