/*
 * Whether a process exits with OpenSSL still up (docs/api.md, "OpenSSL at
 * exit"): header only, for the suites whose objects ask OpenSSL to leave
 * its clean-up at exit to the system.
 */
#ifndef MCP_TEST_EXIT_PROBE_H
#define MCP_TEST_EXIT_PROBE_H

#include <openssl/crypto.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run by exit() after every handler registered later: OpenSSL cannot be
 * initialised again once it has cleaned up. */
static void test_exit_probe_(void) {
  _exit(OPENSSL_init_crypto(0, NULL) == 1 ? 0 : 3);
}

/* Runs |body| in a child that then exit()s: the child's exit status, 0 when
 * OpenSSL was still up at the end of its exit (3: it had cleaned up; 2:
 * |body| failed, returning non-zero). The child must be the first of its
 * process tree to initialise OpenSSL (a test in a process of its own). */
static inline int test_exit_keeps_openssl_up(int (*body)(void *), void *ud) {
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    if (atexit(test_exit_probe_) != 0 || body(ud) != 0)
      _exit(2);
    exit(0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

#endif
