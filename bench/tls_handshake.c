/*
 * What one TLS handshake costs OpenSSL alone (issue 23): N full handshakes
 * between a server and a client SSL object in this process, joined by a
 * BIO pair (no socket, no HTTP/2, no libmcp), with the CPU time of each
 * side's SSL calls counted apart.
 *
 * e2e_bench.py's tlsload part runs it with the certificates of its TLS
 * run to put a floor under the TLS/cleartext ratio of 1,000 sinks' initial
 * sync: every sink is one full mutual-TLS handshake, so TLS adds at least
 * N x (server + client) of CPU to the cleartext sync's, whatever the
 * transport does around it.
 *
 * The contexts are the h2 transport's own (mcp_h2c_tls_ctx_new(), as every
 * endpoint makes them: TLS 1.2+, ECDHE with AEAD, ALPN, no session cache,
 * no tickets, so every handshake is full; the server asks for and
 * verifies the client's certificate when mutual). Prints, per kind
 * (mutual, server-only):
 *
 *   BENCH tls_handshake_<kind>_server_cpu_us <us> us
 *   BENCH tls_handshake_<kind>_client_cpu_us <us> us
 *
 * Usage: tls_handshake --certs DIR [--handshakes N] [--quick]
 *   DIR holds tests/gen_certs.sh's ca.pem, server.pem/.key, client.pem/.key.
 */
#define _POSIX_C_SOURCE 200809L
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "internal.h" /* transport-h2c's: mcp_h2c_tls_ctx_new() */

static const char *certs = NULL;

static void die(const char *what) {
  fprintf(stderr, "tls_handshake: %s\n", what);
  ERR_print_errors_fp(stderr);
  exit(1);
}

/* bench_util's CPU clock in seconds: the handshakes run on this thread. */
static double cpu_s(void) { return (double)bu_cpu_ns() / 1e9; }

static void path(char *out, size_t cap, const char *name) {
  if ((size_t)snprintf(out, cap, "%s/%s", certs, name) >= cap)
    die("certificate directory name too long");
}

/* The transport's context of a server (with its certificate; the CA when
 * |mutual|) or of a client (the CA; its certificate when |mutual|). */
static SSL_CTX *make_ctx(int server, int mutual) {
  char cert[4096], key[4096], ca[4096], err[512];
  path(cert, sizeof(cert), server ? "server.pem" : "client.pem");
  path(key, sizeof(key), server ? "server.key" : "client.key");
  path(ca, sizeof(ca), "ca.pem");
  mcp_h2c_tls_options o = {NULL, NULL, NULL, NULL};
  if (server || mutual) {
    o.cert_file = cert;
    o.key_file = key;
  }
  if (!server || mutual)
    o.ca_file = ca;
  SSL_CTX *ctx = NULL;
  if (mcp_h2c_tls_ctx_new(&o, server, &ctx, err, sizeof(err)) != 0) {
    fprintf(stderr, "tls_handshake: %s\n", err);
    exit(1);
  }
  return ctx;
}

/* One step of |s|: 1 when its handshake is done, 0 when it waits for the
 * other side. Adds its CPU time to |*cpu|. */
static int step(SSL *s, double *cpu) {
  double t0 = cpu_s();
  int r = SSL_do_handshake(s);
  *cpu += cpu_s() - t0;
  if (r == 1)
    return 1;
  if (SSL_get_error(s, r) != SSL_ERROR_WANT_READ)
    die("handshake failed");
  return 0;
}

/* |n| handshakes; the mean CPU per handshake of each side, in us. SSL_new,
 * SSL_free and the BIO pair count for the side they belong to. */
static void run(int mutual, int n, double *server_us, double *client_us) {
  SSL_CTX *sctx = make_ctx(1, mutual), *cctx = make_ctx(0, mutual);
  double ts = 0, tc = 0;
  for (int i = 0; i < n; i++) {
    double t0 = cpu_s();
    SSL *ss = SSL_new(sctx);
    BIO *sb = NULL, *cb = NULL;
    if (!ss || BIO_new_bio_pair(&sb, 1 << 16, &cb, 1 << 16) != 1)
      die("SSL_new");
    SSL_set_bio(ss, sb, sb);
    SSL_set_accept_state(ss);
    double t1 = cpu_s();
    ts += t1 - t0;
    SSL *cs = SSL_new(cctx);
    if (!cs)
      die("SSL_new");
    SSL_set_bio(cs, cb, cb);
    SSL_set_connect_state(cs);
    /* As a dialer of 127.0.0.1 checks the server's name. */
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(cs), "127.0.0.1") != 1)
      die("IP check");
    tc += cpu_s() - t1;
    int sdone = 0, cdone = 0;
    while (!sdone || !cdone) {
      if (!cdone)
        cdone = step(cs, &tc);
      if (!sdone)
        sdone = step(ss, &ts);
    }
    if (mutual && !SSL_get0_peer_certificate(ss))
      die("no client certificate");
    t0 = cpu_s();
    SSL_free(ss);
    t1 = cpu_s();
    SSL_free(cs);
    tc += cpu_s() - t1;
    ts += t1 - t0;
  }
  SSL_CTX_free(sctx);
  SSL_CTX_free(cctx);
  *server_us = ts / n * 1e6;
  *client_us = tc / n * 1e6;
}

int main(int argc, char **argv) {
  int n = 1000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--certs") && i + 1 < argc)
      certs = argv[++i];
    else if (!strcmp(argv[i], "--handshakes") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      n = 20;
    else {
      fprintf(stderr, "usage: tls_handshake --certs DIR [--handshakes N] "
                      "[--quick]\n");
      return 2;
    }
  }
  if (!certs || n <= 0) {
    fprintf(stderr, "tls_handshake: --certs DIR and N > 0 are needed\n");
    return 2;
  }
  static const struct {
    const char *kind, *what;
    int mutual;
  } kinds[] = {
      {"mutual", "mutual TLS (as the TLS benchmarks dial)", 1},
      {"server_only", "the server's certificate only", 0},
  };
  bu_note("%s", OpenSSL_version(OPENSSL_VERSION));
  run(1, n < 10 ? n : 10, &(double){0}, &(double){0}); /* warm up */
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    double s, c;
    char name[64], what[160];
    run(kinds[k].mutual, n, &s, &c);
    snprintf(name, sizeof(name), "tls_handshake_%s_server_cpu_us", kinds[k].kind);
    snprintf(what, sizeof(what),
             "OpenSSL's CPU for one full handshake, server side, %s; mean "
             "of %d", kinds[k].what, n);
    bu_result(name, s, "us", what, NULL, -1);
    snprintf(name, sizeof(name), "tls_handshake_%s_client_cpu_us", kinds[k].kind);
    snprintf(what, sizeof(what), "the same, client side");
    bu_result(name, c, "us", what, NULL, -1);
  }
  bu_table("One TLS handshake, OpenSSL alone (BIO pair, one process)");
  return 0;
}
