/* Process set-up: see proc.h. */
#include "cli/proc.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "util/log.h"

/* The kernel refuses more than fs.nr_open (1048576 by default), so an
 * unlimited hard limit is not a value to copy. */
#define NOFILE_CAP ((rlim_t)1 << 20)

/* Allocations of this size and more get their own mapping, returned to
 * the system when freed: a connection's write buffers (about twice the
 * h2c transport's 64 KiB write_buffer_size while a sync goes out, freed
 * when it is done). In glibc's heap they would stay in the process's RSS
 * after ten thousand sinks synced (140 KB per idle sink instead of 50). */
#define MMAP_THRESHOLD (64 << 10)

void tool_proc_init(int many_peers) {
  signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
  if (many_peers) {
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
  }
#else
  (void)many_peers;
#endif
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    log_warn("open files: getrlimit: %s", strerror(errno));
    return;
  }
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > NOFILE_CAP
                    ? NOFILE_CAP
                    : rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      log_warn("open files: limit %llu, could not raise it to %llu (%s): "
               "about that many streams at most",
               (unsigned long long)was, (unsigned long long)want,
               strerror(errno));
      return;
    }
    log_info("open files: limit raised from %llu to %llu",
              (unsigned long long)was, (unsigned long long)want);
    return;
  }
  log_debug("open files: limit %llu",
            (unsigned long long)(rl.rlim_cur == RLIM_INFINITY ? want
                                                              : rl.rlim_cur));
}
