/* TLS on a connection with OpenSSL 3, the way nghttp2's own servers do it:
 * BIOs in memory between the socket and the SSL object, ALPN "h2", TLS 1.2
 * at least (1.3 preferred by the negotiation). The certificate files are
 * read when the object is made and again when they change (checked at
 * most once a second, on a new connection or a dial attempt); a set that
 * fails to load keeps the previous one in use. The peer's identities come
 * from its verified certificate by the core's rules (mcp/auth.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <uv.h>

#include "filever.h"
#include "internal.h"

#define TLS_CHECK_EVERY MCP_SECONDS

enum { TLS_CERT, TLS_KEY, TLS_CA, TLS_NFILES };

struct mcp_h2c_tls {
  int listen;
  mcp_filever sig[TLS_NFILES]; /* of the files of ep->opts.tls (paths_of()) */
  SSL_CTX *ctx;       /* the set in use; each SSL holds a reference */
  mcp_tstamp checked; /* when the files were last looked at */
  uint64_t reloads, reload_failures;
};

static void errf(char *err, size_t errlen, const char *fmt, const char *a,
                 const char *b) {
  if (err && errlen)
    snprintf(err, errlen, fmt, a, b);
}

/* OpenSSL's reason for the last failure, and its queue emptied. */
static const char *ossl_reason(char *buf, size_t len) {
  unsigned long e = ERR_peek_last_error();
  if (!e)
    snprintf(buf, len, "unknown error");
  else
    ERR_error_string_n(e, buf, len);
  ERR_clear_error();
  return buf;
}

static int stat_file(const char *path, mcp_filever *sig, char *err,
                     size_t errlen) {
  int rv = mcp_filever_stat(path, sig);
  if (rv < 0) {
    errf(err, errlen, "cannot read %s: %s", path, strerror(-rv));
    return MCP_ERR_IO;
  }
  if (!sig->regular) {
    errf(err, errlen, "cannot read %s: %s", path, "not a regular file");
    return MCP_ERR_IO;
  }
  return 0;
}

/* The server picks h2 (gRPC), else http/1.1 (plain HTTP: /healthz); a
 * client that offers neither is refused. */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  (void)ssl;
  (void)arg;
  static const unsigned char prefs[] = "\x02h2\x08http/1.1";
  if (SSL_select_next_proto((unsigned char **)out, outlen, prefs,
                            sizeof(prefs) - 1, in,
                            inlen) == OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_OK;
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

int mcp_h2c_tls_ctx_new(const mcp_h2c_tls_options *o, int listen, SSL_CTX **out,
                        char *err, size_t errlen) {
  /* As transport-grpc/src/api.c does: no OpenSSL clean-up at exit, which
   * gRPC's threads may outlive in a process that holds both transports. */
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
  SSL_CTX *ctx = SSL_CTX_new(listen ? TLS_server_method() : TLS_client_method());
  if (!ctx)
    return MCP_ERR_NOMEM;
  char why[256];
  int rv = MCP_ERR_INVALID_ARGUMENT;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* HTTP/2 (RFC 9113 9.2): no compression, no renegotiation, and TLS 1.2
   * only with ephemeral key exchange and AEAD ciphers. */
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (!SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20"))
    goto fail_ossl;
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (o->cert_file) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
      errf(err, errlen, "no certificate in %s: %s", o->cert_file,
           ossl_reason(why, sizeof(why)));
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
        goto mismatch;
      errf(err, errlen, "no private key in %s: %s", o->key_file,
           ossl_reason(why, sizeof(why)));
      goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
    mismatch:
      errf(err, errlen, "the key %s does not match the certificate %s",
           o->key_file, o->cert_file);
      ERR_clear_error();
      goto fail;
    }
  }
  if (o->ca_file) {
    if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1) {
      errf(err, errlen, "no CA certificate in %s: %s", o->ca_file,
           ossl_reason(why, sizeof(why)));
      goto fail;
    }
  } else if (!listen && SSL_CTX_set_default_verify_paths(ctx) != 1) {
    ERR_clear_error(); /* no system roots: nothing verifies then */
  }
  if (listen) {
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    /* Mutual TLS when a CA is given: a client without a certificate the
     * CA verifies fails the handshake. */
    if (o->ca_file)
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         NULL);
    /* Resumption tickets would let a client skip the certificate check
     * the identities come from after a CA or list change: full
     * handshakes only (their cost is measured in bench/). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x02h2", 3) != 0)
      goto fail_ossl;
  }
  *out = ctx;
  return 0;
fail_ossl:
  errf(err, errlen, "%s%s", "TLS: ", ossl_reason(why, sizeof(why)));
  rv = MCP_ERR_NOMEM;
fail:
  SSL_CTX_free(ctx);
  return rv;
}

static int check_combination(const mcp_h2c_tls_options *o, int listen,
                             char *err, size_t errlen) {
  const char *why = mcp_tls_files_check(!!o->cert_file, !!o->key_file, listen);
  if (why)
    errf(err, errlen, "%s%s", "TLS: ", why);
  return why ? MCP_ERR_INVALID_ARGUMENT : 0;
}

/* The files of |o| by TLS_CERT, TLS_KEY, TLS_CA (NULL: not set). */
static void paths_of(const mcp_h2c_tls_options *o,
                     const char *paths[TLS_NFILES]) {
  paths[TLS_CERT] = o->cert_file;
  paths[TLS_KEY] = o->key_file;
  paths[TLS_CA] = o->ca_file;
}

/* Reads the files of |o| into a new context; |sig| gets their versions. */
static int load(const mcp_h2c_tls_options *o, int listen, SSL_CTX **out,
                mcp_filever sig[TLS_NFILES], char *err, size_t errlen) {
  const char *paths[TLS_NFILES];
  paths_of(o, paths);
  for (int i = 0; i < TLS_NFILES; i++) {
    if (!paths[i])
      continue;
    int rv = stat_file(paths[i], &sig[i], err, errlen);
    if (rv < 0)
      return rv;
  }
  return mcp_h2c_tls_ctx_new(o, listen, out, err, errlen);
}

int mcp_h2c_tls_wanted(const mcp_h2c_tls_options *o) {
  return o->cert_file || o->key_file || o->ca_file;
}

int mcp_h2c_tls_check(const mcp_h2c_tls_options *tls, int listen, char *err,
                      size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!tls)
    return MCP_ERR_INVALID_ARGUMENT;
  if (!mcp_h2c_tls_wanted(tls))
    return 0;
  int rv = check_combination(tls, listen, err, errlen);
  if (rv < 0)
    return rv;
  SSL_CTX *ctx = NULL;
  mcp_filever sig[TLS_NFILES];
  rv = load(tls, listen, &ctx, sig, err, errlen);
  SSL_CTX_free(ctx);
  return rv;
}

int mcp_h2c_tls_new(mcp_h2c_ep *ep, int listen) {
  const mcp_h2c_tls_options *o = &ep->opts.tls;
  int rv = check_combination(o, listen, NULL, 0);
  if (rv < 0)
    return rv;
  mcp_h2c_tls *t = mcp_h2c_calloc(&ep->mem, 1, sizeof(*t));
  if (!t)
    return MCP_ERR_NOMEM;
  t->listen = listen;
  rv = load(o, listen, &t->ctx, t->sig, NULL, 0);
  if (rv < 0) {
    mcp_h2c_free(&ep->mem, t);
    return rv;
  }
  t->checked = mcp_h2c_now();
  ep->tls = t;
  return 0;
}

void mcp_h2c_tls_free(mcp_h2c_ep *ep) {
  if (!ep->tls)
    return;
  SSL_CTX_free(ep->tls->ctx);
  mcp_h2c_free(&ep->mem, ep->tls);
  ep->tls = NULL;
}

/* Rotated certificates: a new context once the files changed. */
static void refresh(mcp_h2c_ep *ep) {
  mcp_h2c_tls *t = ep->tls;
  mcp_tstamp now = mcp_h2c_now();
  if (now - t->checked < TLS_CHECK_EVERY)
    return;
  t->checked = now;
  const char *paths[TLS_NFILES];
  paths_of(&ep->opts.tls, paths);
  int changed = 0;
  for (int i = 0; i < TLS_NFILES && !changed; i++) {
    mcp_filever s;
    if (paths[i] &&
        (stat_file(paths[i], &s, NULL, 0) < 0 || !mcp_filever_eq(&s, &t->sig[i])))
      changed = 1;
  }
  if (!changed)
    return;
  SSL_CTX *ctx = NULL;
  mcp_filever sig[TLS_NFILES];
  memset(sig, 0, sizeof(sig));
  if (load(&ep->opts.tls, t->listen, &ctx, sig, NULL, 0) < 0) {
    /* A half-written rotation: the set in use stays, and the next
     * change (or this one, a second later) is read again. */
    t->reload_failures++;
    return;
  }
  SSL_CTX_free(t->ctx); /* connections keep their own reference */
  t->ctx = ctx;
  memcpy(t->sig, sig, sizeof(sig));
  t->reloads++;
}

void mcp_h2c_tls_stats(const mcp_h2c_ep *ep, mcp_h2c_stats *st) {
  if (!ep->tls)
    return;
  st->tls_reloads = ep->tls->reloads;
  st->tls_reload_failures = ep->tls->reload_failures;
}

/* 1 when |host| is an IP address (checked against IP SANs). */
static int is_ip(const char *host) {
  ASN1_OCTET_STRING *ip = a2i_IPADDRESS(host);
  if (!ip)
    return 0;
  ASN1_OCTET_STRING_free(ip);
  return 1;
}

/*
 * The connection's BIO, both ways, so that no byte is copied into or out
 * of a memory BIO:
 *   - writing appends each record to c->wtls, which start_write() then
 *     hands to the socket as it is (a swap, as cleartext's frames);
 *     records written while a write is in flight (a handshake answer)
 *     wait there the same way;
 *   - reading takes the socket's bytes where the read left them (c->rin,
 *     lent by conn.c for one read), and what the SSL object did not take
 *     before the read ended from c->rtls, where mcp_h2c_tls_input_end()
 *     keeps it. "No data yet" is a retry, never end of file.
 * Memory BIOs cost a copy of every byte each way and buffers of their own
 * that grew to the largest burst.
 */
static BIO_METHOD *bio_method;

static int bio_write(BIO *b, const char *p, int n) {
  mcp_h2c_conn *c = BIO_get_data(b);
  if (n <= 0)
    return 0;
  if (mcp_buf_append(&c->wtls, p, (size_t)n) < 0)
    return -1; /* SSL_write() fails: the connection closes */
  c->ep->write_buffered += (size_t)n;
  return n;
}

static int bio_read(BIO *b, char *p, int n) {
  mcp_h2c_conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (n <= 0)
    return 0;
  const uint8_t *src;
  size_t k;
  if (c->rtls_off < c->rtls.len) { /* the older bytes first */
    src = c->rtls.p + c->rtls_off;
    k = c->rtls.len - c->rtls_off;
  } else {
    src = c->rin;
    k = c->rin_len;
  }
  if (k == 0) {
    BIO_set_retry_read(b);
    return -1;
  }
  if (k > (size_t)n)
    k = (size_t)n;
  memcpy(p, src, k);
  if (src == c->rin) {
    c->rin += k;
    c->rin_len -= k;
  } else if ((c->rtls_off += k) == c->rtls.len) {
    c->rtls_off = c->rtls.len = 0;
  }
  return (int)k;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)num;
  (void)ptr;
  mcp_h2c_conn *c = BIO_get_data(b);
  switch (cmd) {
  case BIO_CTRL_FLUSH: /* the record layer flushes after each flight */
    return 1;
  case BIO_CTRL_PENDING:
    return (long)(c->rtls.len - c->rtls_off + c->rin_len);
  default:
    return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

/* One method for the process, as OpenSSL's own BIO_s_mem(): made once,
 * never freed (a BIO refers to it until SSL_free(), whichever endpoint
 * goes first). */
static void bio_method_make(void) {
  BIO_METHOD *m =
      BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "mcp_h2c");
  if (m && BIO_meth_set_write(m, bio_write) == 1 &&
      BIO_meth_set_read(m, bio_read) == 1 &&
      BIO_meth_set_ctrl(m, bio_ctrl) == 1 &&
      BIO_meth_set_create(m, bio_create) == 1) {
    bio_method = m;
    return;
  }
  BIO_meth_free(m);
}

static BIO *bio_new(mcp_h2c_conn *c) {
  static uv_once_t once = UV_ONCE_INIT;
  uv_once(&once, bio_method_make);
  BIO *b = bio_method ? BIO_new(bio_method) : NULL;
  if (b)
    BIO_set_data(b, c);
  return b;
}

int mcp_h2c_tls_conn_start(mcp_h2c_conn *c) {
  mcp_h2c_ep *ep = c->ep;
  refresh(ep);
  SSL *ssl = SSL_new(ep->tls->ctx);
  if (!ssl)
    return MCP_ERR_NOMEM;
  BIO *b = bio_new(c);
  if (!b) {
    SSL_free(ssl);
    return MCP_ERR_NOMEM;
  }
  SSL_set_bio(ssl, b, b); /* one reference, the SSL object's */
  c->rtls.mem = &ep->mem;
  if (c->dialed) {
    const char *name = ep->opts.tls.server_name ? ep->opts.tls.server_name
                                                : ep->addr.host;
    if (name && !ep->addr.is_unix) {
      if (is_ip(name)) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) != 1)
          goto nomem;
      } else if (SSL_set_tlsext_host_name(ssl, name) != 1 ||
                 SSL_set1_host(ssl, name) != 1) {
        goto nomem;
      }
    }
    SSL_set_connect_state(ssl);
  } else {
    SSL_set_accept_state(ssl);
  }
  c->ssl = ssl;
  c->hs_started = mcp_h2c_now();
  return 0;
nomem:
  ERR_clear_error();
  SSL_free(ssl);
  return MCP_ERR_NOMEM;
}

void mcp_h2c_tls_conn_free(mcp_h2c_conn *c) {
  if (c->ssl) {
    SSL_free(c->ssl);
    c->ssl = NULL;
  }
  c->ep->read_buffered -= c->rtls.cap;
  mcp_buf_free(&c->rtls);
  c->rtls_off = 0;
  c->rin = NULL;
  c->rin_len = 0;
  mcp_identities_free(&c->ids, &c->ep->mem);
}

void mcp_h2c_tls_input(mcp_h2c_conn *c, const uint8_t *p, size_t n) {
  c->rin = p;
  c->rin_len = n;
}

int mcp_h2c_tls_input_end(mcp_h2c_conn *c) {
  size_t n = c->rin_len;
  const uint8_t *p = c->rin;
  c->rin = NULL;
  c->rin_len = 0;
  if (n == 0)
    return 0;
  /* Unreachable today: conn.c's read loop runs until the SSL object
   * wants more, and stops early only on close (nothing kept) or a pause,
   * which is never set inside it. Kept so that a pause there could not
   * drop bytes silently; at most one read's worth. */
  size_t cap = c->rtls.cap;
  int rv = mcp_buf_append(&c->rtls, p, n);
  c->ep->read_buffered += c->rtls.cap - cap;
  return rv < 0 ? MCP_ERR_NOMEM : 0;
}

/* The verified certificate's identities (mcp/auth.h's rules). */
static void identify(mcp_h2c_conn *c) {
  X509 *x = SSL_get0_peer_certificate(c->ssl);
  if (!x || SSL_get_verify_result(c->ssl) != X509_V_OK)
    return;
  /* A server without a CA asks for no certificate: none to trust. */
  if (!c->dialed && !c->ep->opts.tls.ca_file)
    return;
  mcp_identity_builder b;
  memset(&b, 0, sizeof(b));
  GENERAL_NAMES *gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
  int n = gens ? sk_GENERAL_NAME_num(gens) : 0;
  for (int i = 0; i < n; i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
    if (g->type == GEN_URI)
      mcp_identity_add(&b, MCP_IDENTITY_URI,
                       (const char *)ASN1_STRING_get0_data(
                           g->d.uniformResourceIdentifier),
                       (size_t)ASN1_STRING_length(g->d.uniformResourceIdentifier));
    else if (g->type == GEN_DNS)
      mcp_identity_add(&b, MCP_IDENTITY_DNS,
                       (const char *)ASN1_STRING_get0_data(g->d.dNSName),
                       (size_t)ASN1_STRING_length(g->d.dNSName));
  }
  X509_NAME *subj = X509_get_subject_name(x);
  int k = subj ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
  if (k >= 0) {
    ASN1_STRING *cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, k));
    mcp_identity_add(&b, MCP_IDENTITY_CN,
                     (const char *)ASN1_STRING_get0_data(cn),
                     (size_t)ASN1_STRING_length(cn));
  }
  /* Without memory the peer has no identity: fail closed. */
  (void)mcp_identities_build(&b, &c->ep->mem, &c->ids);
  GENERAL_NAMES_free(gens);
}

int mcp_h2c_tls_handshake(mcp_h2c_conn *c, char *why, size_t len) {
  ERR_clear_error();
  int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    const unsigned char *alpn = NULL;
    unsigned int alen = 0;
    SSL_get0_alpn_selected(c->ssl, &alpn, &alen);
    if (c->dialed && !(alen == 2 && memcmp(alpn, "h2", 2) == 0)) {
      snprintf(why, len, "no TLS connection: the server did not select h2 "
                         "(ALPN)");
      return MCP_ERR_PROTOCOL;
    }
    identify(c);
    return 1;
  }
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return 0;
  char buf[200];
  long v = SSL_get_verify_result(c->ssl);
  if (v != X509_V_OK)
    snprintf(why, len, "no TLS connection: certificate verify failed: %s",
             X509_verify_cert_error_string(v));
  else
    snprintf(why, len, "no TLS connection: %s", ossl_reason(buf, sizeof(buf)));
  ERR_clear_error();
  return MCP_ERR_PROTOCOL;
}

ssize_t mcp_h2c_tls_read(mcp_h2c_conn *c, uint8_t *buf, size_t cap,
                         char *why, size_t len) {
  ERR_clear_error();
  int r = SSL_read(c->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
  if (r > 0)
    return r;
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return 0;
  if (e == SSL_ERROR_ZERO_RETURN) {
    snprintf(why, len, "connection closed by the peer");
    return MCP_ERR_CLOSED;
  }
  /* E.g. TLS 1.3's client learns here, after its side of the handshake,
   * that the server refused its certificate ("tlsv13 alert certificate
   * required"): before anything came through, there was no connection. */
  char buf2[200];
  snprintf(why, len, "%s: %s",
           c->tls_data ? "TLS connection failed" : "no TLS connection",
           ossl_reason(buf2, sizeof(buf2)));
  return MCP_ERR_PROTOCOL;
}

int mcp_h2c_tls_output(mcp_h2c_conn *c, mcp_buf *plain) {
  if (!c->tls_done || plain->len == 0)
    return 0;
  /* The write BIO takes everything: the write never stops halfway. */
  size_t off = 0;
  while (off < plain->len) {
    size_t n = plain->len - off;
    int r = SSL_write(c->ssl, plain->p + off, n > INT_MAX ? INT_MAX : (int)n);
    if (r <= 0) {
      ERR_clear_error();
      return MCP_ERR_PROTOCOL;
    }
    off += (size_t)r;
  }
  c->ep->write_buffered -= plain->len;
  plain->len = 0;
  return 0;
}
