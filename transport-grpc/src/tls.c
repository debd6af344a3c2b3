/* TLS from PEM files: read when the object is created, read again when
 * they change, handed to gRPC as credentials. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/grpc_security.h>

#include "filever.h"
#include "internal.h"

#define TLS_MAX_FILE (1 << 20)
#define TLS_CHECK_EVERY MCP_SECONDS

enum { TLS_CERT, TLS_KEY, TLS_CA, TLS_NFILES };

struct mcp_grpc_tls {
  mcp_mem mem; /* the object's (gRPC's threads use it too) */
  pthread_mutex_t mu; /* gRPC's threads call the fetcher */
  char *path[TLS_NFILES]; /* NULL when not set */
  mcp_filever sig[TLS_NFILES];
  char *pem[TLS_NFILES];
  uint64_t gen;        /* bumped by each successful load */
  uint64_t served_gen; /* LISTEN: the generation gRPC was given */
  mcp_tstamp checked;  /* when the files were last looked at */
};

static void errf(char *err, size_t errlen, const char *what, const char *path,
                 const char *why) {
  if (err && errlen)
    snprintf(err, errlen, "%s %s: %s", what, path, why);
}

/* Reads a whole PEM file into a malloc'd NUL-terminated string. */
static int read_pem(const mcp_mem *mem, const char *path, char **out, mcp_filever *sig, char *err,
                    size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errf(err, errlen, "cannot read", path, strerror(errno));
    return MCP_ERR_IO;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    errf(err, errlen, "cannot read", path, "not a regular file");
    close(fd);
    return MCP_ERR_IO;
  }
  size_t cap = (size_t)st.st_size + 1, len = 0;
  if (cap > TLS_MAX_FILE + 1)
    cap = TLS_MAX_FILE + 1;
  char *buf = mcp_grpc_malloc(mem, cap);
  if (!buf) {
    close(fd);
    return MCP_ERR_NOMEM;
  }
  for (;;) {
    if (len + 1 >= cap) { /* the file grew while being read */
      if (cap > TLS_MAX_FILE) {
        errf(err, errlen, "cannot read", path, "larger than 1 MiB");
        mcp_grpc_free(mem, buf);
        close(fd);
        return MCP_ERR_INVALID_ARGUMENT;
      }
      char *nb = mcp_grpc_realloc(mem, buf, cap * 2);
      if (!nb) {
        mcp_grpc_free(mem, buf);
        close(fd);
        return MCP_ERR_NOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      errf(err, errlen, "cannot read", path, strerror(errno));
      mcp_grpc_free(mem, buf);
      close(fd);
      return MCP_ERR_IO;
    }
    if (r == 0)
      break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';
  if (!strstr(buf, "-----BEGIN ") || strlen(buf) != len) {
    errf(err, errlen, "no PEM data in", path, "expected \"-----BEGIN \"");
    mcp_grpc_free(mem, buf);
    return MCP_ERR_INVALID_ARGUMENT;
  }
  mcp_filever_of(&st, sig);
  *out = buf;
  return 0;
}

static int check_combination(const mcp_grpc_tls_options *o, int listen,
                             char *err, size_t errlen) {
  const char *why = mcp_tls_files_check(!!o->cert_file, !!o->key_file, listen);
  if (why && err && errlen)
    snprintf(err, errlen, "TLS: %s", why);
  return why ? MCP_ERR_INVALID_ARGUMENT : 0;
}

int mcp_grpc_tls_wanted(const mcp_grpc_tls_options *o) {
  return o->cert_file || o->key_file || o->ca_file;
}

/* Reads every file; on success replaces the PEMs in use and bumps the
 * generation, on failure changes nothing. */
static int load(mcp_grpc_tls *t, char *err, size_t errlen) {
  char *pem[TLS_NFILES] = {NULL, NULL, NULL};
  mcp_filever sig[TLS_NFILES];
  memset(sig, 0, sizeof(sig));
  for (int i = 0; i < TLS_NFILES; i++) {
    if (!t->path[i])
      continue;
    int rv = read_pem(&t->mem, t->path[i], &pem[i], &sig[i], err, errlen);
    if (rv < 0) {
      for (int j = 0; j < i; j++)
        mcp_grpc_free(&t->mem, pem[j]);
      return rv;
    }
  }
  for (int i = 0; i < TLS_NFILES; i++) {
    mcp_grpc_free(&t->mem, t->pem[i]);
    t->pem[i] = pem[i];
    t->sig[i] = sig[i];
  }
  t->gen++;
  return 0;
}

/* Reads the files again if one changed, at most once a second. Called
 * with |t->mu| held. A set that does not load keeps the previous one (and
 * is tried again at the next look). */
static void refresh(mcp_grpc_tls *t) {
  mcp_tstamp now = mcp_grpc_now();
  if (now - t->checked < TLS_CHECK_EVERY)
    return;
  t->checked = now;
  int changed = 0;
  for (int i = 0; i < TLS_NFILES && !changed; i++) {
    mcp_filever v;
    if (!t->path[i])
      continue;
    /* Gone (perhaps mid-rename) is a change too: load() decides. */
    (void)mcp_filever_stat(t->path[i], &v);
    changed = !mcp_filever_eq(&v, &t->sig[i]);
  }
  if (changed)
    (void)load(t, NULL, 0);
}

void mcp_grpc_tls_del(mcp_grpc_tls *t) {
  if (!t)
    return;
  for (int i = 0; i < TLS_NFILES; i++) {
    mcp_grpc_free(&t->mem, t->path[i]);
    if (t->pem[i] && i == TLS_KEY)
      memset(t->pem[i], 0, strlen(t->pem[i]));
    mcp_grpc_free(&t->mem, t->pem[i]);
  }
  pthread_mutex_destroy(&t->mu);
  mcp_mem mem = t->mem;
  mcp_grpc_free(&mem, t);
}

int mcp_grpc_tls_new(mcp_grpc_tls **pt, const mcp_grpc_tls_options *o,
                     int listen, const mcp_mem *mem) {
  int rv = check_combination(o, listen, NULL, 0);
  if (rv < 0)
    return rv;
  mcp_grpc_tls *t = mcp_grpc_calloc(mem, 1, sizeof(*t));
  if (!t)
    return MCP_ERR_NOMEM;
  t->mem = *mem;
  if (pthread_mutex_init(&t->mu, NULL) != 0) {
    mcp_grpc_free(mem, t);
    return MCP_ERR_NOMEM;
  }
  const char *paths[TLS_NFILES] = {o->cert_file, o->key_file, o->ca_file};
  for (int i = 0; i < TLS_NFILES; i++) {
    if (paths[i] && !(t->path[i] = mcp_grpc_strdup(&t->mem, paths[i]))) {
      mcp_grpc_tls_del(t);
      return MCP_ERR_NOMEM;
    }
  }
  rv = load(t, NULL, 0);
  if (rv < 0) {
    mcp_grpc_tls_del(t);
    return rv;
  }
  t->checked = mcp_grpc_now();
  *pt = t;
  return 0;
}

int mcp_grpc_tls_check(const mcp_grpc_tls_options *o, char *err,
                       size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!o)
    return MCP_ERR_INVALID_ARGUMENT;
  int rv = check_combination(o, 0, err, errlen);
  if (rv < 0)
    return rv;
  const char *paths[TLS_NFILES] = {o->cert_file, o->key_file, o->ca_file};
  mcp_mem libc; /* no object: the C library */
  mcp_grpc_mem_init(&libc, NULL);
  for (int i = 0; i < TLS_NFILES; i++) {
    char *pem = NULL;
    mcp_filever sig;
    if (!paths[i])
      continue;
    rv = read_pem(&libc, paths[i], &pem, &sig, err, errlen);
    if (pem)
      memset(pem, 0, strlen(pem));
    mcp_grpc_free(&libc, pem);
    if (rv < 0)
      return rv;
  }
  return 0;
}

/* gRPC asks for the server's certificates when the port is added and at
 * each new connection (on its own threads). */
static grpc_ssl_certificate_config_reload_status
fetch(void *user_data, grpc_ssl_server_certificate_config **config) {
  mcp_grpc_tls *t = user_data;
  grpc_ssl_certificate_config_reload_status rv =
      GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  pthread_mutex_lock(&t->mu);
  refresh(t);
  if (t->gen != t->served_gen) {
    grpc_ssl_pem_key_cert_pair pair = {t->pem[TLS_KEY], t->pem[TLS_CERT]};
    /* gRPC copies the strings. A pair that does not match makes gRPC log
     * an error and keep the previous certificates. gRPC 1.51 asserts that
     * a fetched config has roots, even when no client certificate is
     * requested: then they are never used, and our own chain stands in. */
    const char *roots = t->pem[TLS_CA] ? t->pem[TLS_CA] : t->pem[TLS_CERT];
    *config = grpc_ssl_server_certificate_config_create(roots, &pair, 1);
    t->served_gen = t->gen;
    rv = *config ? GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW
                 : GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
  }
  pthread_mutex_unlock(&t->mu);
  return rv;
}

grpc_server_credentials *mcp_grpc_tls_server_credentials(mcp_grpc_tls *t) {
  /* Whether clients must present a certificate is fixed at creation; the
   * CA's content may change. */
  grpc_ssl_server_credentials_options *o =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          t->path[TLS_CA]
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          fetch, t);
  if (!o)
    return NULL;
  return grpc_ssl_server_credentials_create_with_options(o);
}

grpc_channel_credentials *mcp_grpc_tls_channel_credentials(mcp_grpc_tls *t) {
  pthread_mutex_lock(&t->mu);
  refresh(t);
  grpc_ssl_pem_key_cert_pair pair = {t->pem[TLS_KEY], t->pem[TLS_CERT]};
  /* gRPC copies the strings; NULL roots are gRPC's default ones. */
  grpc_channel_credentials *c = grpc_ssl_credentials_create_ex(
      t->pem[TLS_CA], t->pem[TLS_CERT] ? &pair : NULL, NULL, NULL);
  pthread_mutex_unlock(&t->mu);
  return c;
}
