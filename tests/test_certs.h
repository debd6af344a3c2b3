/*
 * The TLS tests' certificates (header only, for the C suites that need
 * them): made once per run by tests/gen_certs.sh (its path: MCP_GEN_CERTS,
 * given by meson) into a temporary directory, before the suite runs (the
 * forked tests read the files), and removed after.
 */
#ifndef MCP_TEST_CERTS_H
#define MCP_TEST_CERTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MCP_GEN_CERTS
#define MCP_GEN_CERTS "tests/gen_certs.sh"
#endif

static char test_certs_dir[64];

/* "<dir>/<name>", from a ring of buffers: enough for one object's
 * options (the libraries copy the paths). */
static inline const char *test_cert(const char *name) {
  static char ring[16][160];
  static int next;
  char *b = ring[next++ % 16];
  snprintf(b, sizeof(ring[0]), "%s/%s", test_certs_dir, name);
  return b;
}

/* 0, or -1 (said on stderr) when the certificates cannot be made. */
static inline int test_certs_make(void) {
  snprintf(test_certs_dir, sizeof(test_certs_dir), "/tmp/mcp-certs-XXXXXX");
  if (!mkdtemp(test_certs_dir)) {
    perror("mkdtemp");
    return -1;
  }
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "sh '%s' '%s'", MCP_GEN_CERTS, test_certs_dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot make certificates: %s failed\n", cmd);
    return -1;
  }
  return 0;
}

/* The mode of a transport's behaviour suite (issue 23: "the transport
 * suite runs over TLS too"): 1 when MCP_TEST_TLS is set and not "0" (the
 * *_tls tests of meson.build), and the same tests then run with mutual TLS
 * on every connection they make; 0: cleartext. */
static inline int test_tls_mode(void) {
  const char *v = getenv("MCP_TEST_TLS");
  return v && *v && strcmp(v, "0") != 0;
}

static inline void test_certs_remove(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_certs_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", test_certs_dir);
}

#endif
