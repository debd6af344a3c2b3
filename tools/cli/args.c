/* Command-line helpers. */
#include "cli/args.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/edit.h"
#include "util/log.h"
#include "util/grow.h"

int tool_see_help(const char *prog) {
  fprintf(stderr, "%s: see %s --help for every option\n", prog, prog);
  return 2;
}

int tool_usage_error(const char *prog, void (*usage)(FILE *f),
                     const char *fmt, ...) {
  (void)usage;
  va_list ap;
  va_start(ap, fmt);
  flockfile(stderr);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  tool_see_help(prog);
  funlockfile(stderr);
  va_end(ap);
  return 2;
}

int tool_suggest_option(void (*usage)(FILE *f), const char *arg, char *out,
                        size_t outlen) {
  /* The options are the "--name" words of the usage text: one list, which
   * grows with every option documented. */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return 0;
  usage(f);
  if (fclose(f) != 0 || !text) {
    free(text);
    return 0;
  }
  /* What was typed, without its dashes and its "=VALUE". */
  const char *typed = arg;
  while (*typed == '-')
    typed++;
  size_t tn = strcspn(typed, "=");
  int dashed = typed > arg;
  size_t best = (size_t)-1, nprefix = 0;
  const char *pick = NULL, *prefix = NULL;
  size_t pickn = 0, prefixn = 0;
  for (const char *p = text; (p = strstr(p, "--")) != NULL;) {
    int word_start = p == text || strchr(" \t\n[|(,", p[-1]) != NULL;
    const char *name = p + 2;
    size_t n = 0;
    while ((name[n] >= 'a' && name[n] <= 'z') ||
           (name[n] >= '0' && name[n] <= '9') || name[n] == '-')
      n++;
    p = name + n;
    if (!word_start || n < 2 || name[0] == '-')
      continue;
    /* The same option again in the text: counted once. */
    if ((pick && n == pickn && memcmp(name, pick, n) == 0) ||
        (prefix && n == prefixn && memcmp(name, prefix, n) == 0))
      continue;
    if (dashed && tn >= 3 && tn < n && memcmp(typed, name, tn) == 0) {
      nprefix++;
      prefix = name;
      prefixn = n;
    }
    size_t d = n == tn && memcmp(typed, name, n) == 0
                   ? 0
                   : tool_edit_distance(typed, tn, name, n, 0);
    if (d < best) {
      best = d;
      pick = name;
      pickn = n;
    }
  }
  /* Close enough to be a slip: one edit in a short name, two in a longer
   * one; a word without dashes only when it is the option's very name
   * ("collection" for --collection); else an unambiguous abbreviation. */
  size_t allowed = dashed ? (tn >= 6 ? 2 : 1) : 0;
  if (!pick || best > allowed) {
    pick = nprefix == 1 ? prefix : NULL;
    pickn = prefixn;
  }
  /* Never the argument itself ("--json=1" to a flag: the value is wrong). */
  int found = pick && !(arg[0] == '-' && arg[1] == '-' &&
                        strlen(arg + 2) == pickn &&
                        memcmp(arg + 2, pick, pickn) == 0);
  if (found)
    snprintf(out, outlen, "--%.*s", (int)pickn, pick);
  free(text);
  return found;
}

int tool_unknown_arg(const char *prog, void (*usage)(FILE *f),
                     const char *what, const char *arg) {
  char hint[128];
  flockfile(stderr);
  if (tool_suggest_option(usage, arg, hint, sizeof(hint))) {
    /* "--json=1": the option is right, the value is not. */
    size_t n = strcspn(arg, "=");
    if (arg[n] == '=' && strlen(hint) == n && memcmp(hint, arg, n) == 0)
      fprintf(stderr, "%s: %s: %s; %s takes no value\n", prog, what, arg,
              hint);
    else
      fprintf(stderr, "%s: %s: %s; did you mean %s?\n", prog, what, arg,
              hint);
  } else
    fprintf(stderr, "%s: %s: %s\n", prog, what, arg);
  tool_see_help(prog);
  funlockfile(stderr);
  return 2;
}

int tool_arg_value(int argc, char **argv, int *i, const char *name,
                   const char **value) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0)
    return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0')
    return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: option %s needs a value\n", tool_log_prog(), name);
    return -1;
  }
  *i += 1;
  *value = argv[*i];
  return 1;
}

int tool_arg_flag(char **argv, int i, const char *name) {
  return strcmp(argv[i], name) == 0;
}

int tool_parse_ulong(const char *s, unsigned long max, unsigned long *out) {
  if (s[0] < '0' || s[0] > '9')
    return -1;
  errno = 0;
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max)
    return -1;
  *out = v;
  return 0;
}

/* sizeof(((struct sockaddr_un *)0)->sun_path) on Linux, less the NUL. */
#define UNIX_PATH_MAX 107

int tool_check_hostport(const char *s, unsigned min_port, const char **why) {
  const char *colon;
  if (strncmp(s, "unix:", 5) == 0) { /* both transports' form */
    const char *path = s + 5;
    if (strncmp(path, "//", 2) == 0)
      path += 2;
    if (!path[0]) {
      *why = "missing PATH after unix:";
      return -1;
    }
    if (strlen(path) > UNIX_PATH_MAX) {
      *why = "a unix socket PATH has at most 107 bytes";
      return -1;
    }
    return 0;
  }
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || close == s + 1) {
      *why = "bad IPv6 address (expected [ADDRESS]:PORT)";
      return -1;
    }
    colon = close + 1;
    if (*colon != ':') {
      *why = "missing :PORT";
      return -1;
    }
  } else {
    colon = strrchr(s, ':');
    if (!colon) {
      *why = "missing :PORT";
      return -1;
    }
    if (colon == s) {
      *why = "missing HOST";
      return -1;
    }
    if (memchr(s, ':', (size_t)(colon - s))) {
      *why = "an IPv6 address must be in brackets ([::1]:PORT)";
      return -1;
    }
  }
  unsigned long port;
  if (tool_parse_ulong(colon + 1, 65535, &port) != 0 || port < min_port) {
    *why = min_port ? "PORT must be a number in [1, 65535]"
                    : "PORT must be a number in [0, 65535]";
    return -1;
  }
  return 0;
}

int tool_check_hostports(const char *s, unsigned min_port, const char **why) {
  char one[512];
  for (;;) {
    size_t n = strcspn(s, ",");
    if (n == 0 || n >= sizeof(one)) {
      *why = n ? "an address is too long" : "an empty address in the list";
      return -1;
    }
    memcpy(one, s, n);
    one[n] = '\0';
    if (tool_check_hostport(one, min_port, why) != 0)
      return -1;
    if (!s[n])
      return 0;
    s += n + 1;
  }
}

int tool_strv_add(tool_strv *sv, const char *s, int unique) {
  if (unique) {
    for (size_t i = 0; i < sv->n; i++) {
      if (strcmp(sv->v[i], s) == 0)
        return 0;
    }
  }
  const char **v = tool_grow(sv->v, sv->n, &sv->cap, sizeof(*v), 8);
  if (!v)
    return -1;
  sv->v = v;
  sv->v[sv->n++] = s;
  return 0;
}

void tool_strv_free(tool_strv *sv) {
  free(sv->v);
  memset(sv, 0, sizeof(*sv));
}

int tool_path_safe(const char *rel) {
  if (rel[0] == '\0' || rel[0] == '/' || strstr(rel, ".."))
    return 0;
  const char *seg = rel;
  for (;;) {
    const char *end = strchr(seg, '/');
    size_t len = end ? (size_t)(end - seg) : strlen(seg);
    if (len == 0 || (len == 1 && seg[0] == '.'))
      return 0;
    if (!end)
      return 1;
    seg = end + 1;
  }
}

/* ---- security flags ---- */

#define STREAM_RATE_MAX 1000000ul

/* --stream-rate PER_S[,BURST] | off: 1 or -1 (said on stderr). */
static int parse_stream_rate(const char *v, tool_sec_args *a) {
  if (strcmp(v, "off") == 0) {
    a->stream_rate_off = 1;
    a->stream_rate = a->stream_burst = 0;
    return 1;
  }
  char rate[32];
  const char *comma = strchr(v, ',');
  size_t n = comma ? (size_t)(comma - v) : strlen(v);
  unsigned long r = 0, b = 0;
  int ok = n < sizeof(rate);
  if (ok) {
    memcpy(rate, v, n);
    rate[n] = '\0';
    ok = tool_parse_ulong(rate, STREAM_RATE_MAX, &r) == 0 && r > 0 &&
         (!comma ||
          (tool_parse_ulong(comma + 1, STREAM_RATE_MAX, &b) == 0 && b > 0));
  }
  if (!ok) {
    fprintf(stderr,
            "%s: --stream-rate needs PER_SECOND[,BURST] (new streams per "
            "peer, each from 1 to %lu) or off, not \"%s\"\n",
            tool_log_prog(), STREAM_RATE_MAX, v);
    return -1;
  }
  a->stream_rate = r;
  a->stream_burst = b;
  a->stream_rate_off = 0;
  return 1;
}

int tool_sec_parse_arg(int argc, char **argv, int *i, tool_sec_args *a) {
  static const struct {
    const char *name, *what;
  } files[] = {{"--tls-cert", "a PEM certificate file"},
               {"--tls-key", "a PEM private key file"},
               {"--tls-ca", "a PEM CA certificates file"},
               {"--tls-server-name", "a name"},
               {"--access-list", "a file"},
               {"--allow", "an identity pattern"},
               {"--deny", "an identity pattern"}};
  if (tool_arg_flag(argv, *i, "--allow-cleartext")) {
    a->allow_cleartext = 1;
    return 1;
  }
  const char *n;
  int nrv = tool_arg_value(argc, argv, i, "--max-streams-per-connection", &n);
  if (nrv != 0) {
    if (nrv < 0 || tool_parse_ulong(n, 1u << 20,
                                    &a->max_streams_per_connection) != 0 ||
        a->max_streams_per_connection == 0) {
      fprintf(stderr, "%s: --max-streams-per-connection needs a number from "
                      "1 to 1048576\n", tool_log_prog());
      return -1;
    }
    return 1;
  }
  nrv = tool_arg_value(argc, argv, i, "--tls-handshakes-per-peer", &n);
  if (nrv != 0) {
    if (nrv < 0 || tool_parse_ulong(n, 1u << 20, &a->handshakes_per_peer) != 0 ||
        a->handshakes_per_peer == 0) {
      fprintf(stderr, "%s: --tls-handshakes-per-peer needs a number from 1 "
                      "to 1048576\n", tool_log_prog());
      return -1;
    }
    return 1;
  }
  nrv = tool_arg_value(argc, argv, i, "--stream-rate", &n);
  if (nrv != 0)
    return nrv < 0 ? -1 : parse_stream_rate(n, a);
  for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++) {
    const char *v;
    int rv = tool_arg_value(argc, argv, i, files[k].name, &v);
    if (rv == 0)
      continue;
    if (rv < 0)
      return -1;
    if (!v[0]) {
      fprintf(stderr, "%s: %s needs %s\n", tool_log_prog(), files[k].name,
              files[k].what);
      return -1;
    }
    switch (k) {
    case 0: a->tls_cert = v; break;
    case 1: a->tls_key = v; break;
    case 2: a->tls_ca = v; break;
    case 3: a->tls_server_name = v; break;
    case 4: a->access_list = v; break;
    default:
      if (tool_strv_add(k == 5 ? &a->allow : &a->deny, v, 1) != 0)
        return -2;
    }
    return 1;
  }
  return 0;
}

int tool_sec_tls(const tool_sec_args *a) {
  return a->tls_cert || a->tls_key || a->tls_ca;
}

int tool_sec_acl(const tool_sec_args *a) {
  return a->allow.n || a->deny.n || a->access_list;
}

/* The first access flag given, for the messages. */
static const char *acl_flag(const tool_sec_args *a) {
  return a->allow.n ? "--allow" : a->deny.n ? "--deny" : "--access-list";
}

/*
 * The transports the programs know by --transport name, one row each: a
 * new transport adds a row here (its policy) and one in
 * tools/transport/transport.c (its implementation). The default for each
 * role: listeners use the nghttp2 transport, TLS included (gRPC 1.51's
 * HTTP/2 server cannot bound a rapid-reset flood, docs/security.md);
 * dialing keeps gRPC, which talks to both.
 */
static const struct {
  const char *name;
  int listen_default; /* the default of a listening program */
  int dial_default;   /* the default of a dialing one */
  int tls_advice;     /* named where a transport without TLS is refused */
} transport_names[] = {
    {"h2", 1, 0, 0},
    {"h2c", 0, 0, 0}, /* the nghttp2 transport's name before it had TLS */
    {"grpc", 0, 1, 1},
};

#define NTRANSPORT_NAMES (sizeof(transport_names) / sizeof(transport_names[0]))

const char *tool_transport_names(char *buf, size_t len) {
  size_t k = 0;
  if (len)
    buf[0] = '\0';
  for (size_t i = 0; i < NTRANSPORT_NAMES && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%s",
                          i == 0                        ? ""
                          : i + 1 == NTRANSPORT_NAMES ? " or "
                                                        : ", ",
                          transport_names[i].name);
  return buf;
}

/* The transport to name to someone who needs TLS or identities. */
static const char *tls_transport(void) {
  for (size_t i = 0; i < NTRANSPORT_NAMES; i++)
    if (transport_names[i].tls_advice)
      return transport_names[i].name;
  return transport_names[0].name;
}

/* Cleartext listening stays on loopback unless --allow-cleartext. */
static int cleartext_refused(const tool_sec_args *a, const char *transport,
                             int listen, const char *address, char *why,
                             size_t len) {
  if (!listen || a->allow_cleartext || tool_addr_is_loopback(address))
    return 0;
  snprintf(why, len,
           "--listen %s: the %s transport without TLS is cleartext (no "
           "encryption, no authentication of peers), so it listens only on "
           "loopback (127.0.0.0/8, ::1, localhost) unless --allow-cleartext "
           "says the network is protected otherwise (a mesh with mTLS, a "
           "private link); or give --tls-cert and --tls-key",
           address, transport);
  return -1;
}

int tool_sec_check(const tool_sec_args *a, int tls_capable,
                   const char *transport, int listen, const char *address,
                   char *why, size_t len) {
  int tls = tool_sec_tls(a);
  if (a->handshakes_per_peer &&
      (tls_capable != TOOL_SEC_TLS_GUARDED || !listen || !tls)) {
    snprintf(why, len, "--tls-handshakes-per-peer limits the TLS handshakes "
                       "a listener of the h2 transport runs at once from one "
                       "address: give it with --listen, --tls-cert and "
                       "--tls-key on --transport h2");
    return -1;
  }
  if (tls_capable == TOOL_SEC_TLS_GUARDED && !tls &&
      cleartext_refused(a, transport, listen, address, why, len))
    return -1;
  if (!tls_capable) {
    if (tls || a->tls_server_name) {
      snprintf(why, len,
               "%s: the %s transport is cleartext HTTP/2 by definition and "
               "has no TLS; use --transport %s for TLS",
               a->tls_cert ? "--tls-cert" : a->tls_key ? "--tls-key"
                          : a->tls_ca ? "--tls-ca" : "--tls-server-name",
               transport, tls_transport());
      return -1;
    }
    if (tool_sec_acl(a)) {
      snprintf(why, len,
               "%s: access lists check the identities of TLS client "
               "certificates, and the %s transport is cleartext (no peer "
               "has an identity); use --transport %s with --tls-ca",
               acl_flag(a), transport, tls_transport());
      return -1;
    }
    return cleartext_refused(a, transport, listen, address, why, len);
  }
  if (listen) {
    if (a->tls_server_name) {
      snprintf(why, len, "--tls-server-name is for dialing (--connect): it "
                         "names the server's certificate");
      return -1;
    }
    if (tls && (!a->tls_cert || !a->tls_key)) {
      snprintf(why, len, "listening with TLS needs --tls-cert and --tls-key "
                         "(--tls-ca alone is for dialing)");
      return -1;
    }
    if (tool_sec_acl(a) && !a->tls_ca) {
      snprintf(why, len,
               "%s needs the clients' identities: give --tls-ca (with "
               "--tls-cert and --tls-key) so that clients must present a "
               "certificate it verifies",
               acl_flag(a));
      return -1;
    }
    return 0;
  }
  if (!a->tls_cert != !a->tls_key) {
    snprintf(why, len, "%s without %s: a client certificate needs its key "
                       "and the reverse",
             a->tls_cert ? "--tls-cert" : "--tls-key",
             a->tls_cert ? "--tls-key" : "--tls-cert");
    return -1;
  }
  if (a->tls_server_name && !tls) {
    snprintf(why, len, "--tls-server-name needs TLS: give --tls-ca (and "
                       "--tls-cert, --tls-key for mutual TLS)");
    return -1;
  }
  if (tool_sec_acl(a) && !tls) {
    snprintf(why, len,
             "%s needs the server's identity: give --tls-ca (the server's "
             "certificate is then verified and its identities known)",
             acl_flag(a));
    return -1;
  }
  return 0;
}

const char *tool_sec_default_transport(const tool_sec_args *a, int listen) {
  (void)a; /* TLS or not: the nghttp2 transport has both */
  for (size_t i = 0; i < NTRANSPORT_NAMES; i++)
    if (listen ? transport_names[i].listen_default
               : transport_names[i].dial_default)
      return transport_names[i].name;
  return transport_names[0].name;
}

void tool_sec_describe(const tool_sec_args *a, int listen, char *buf,
                       size_t len) {
  if (!tool_sec_tls(a))
    snprintf(buf, len, "cleartext (no TLS): peers have no identity");
  else if (listen && a->tls_ca)
    snprintf(buf, len, "mutual TLS: clients must present a certificate "
                       "that %s verifies", a->tls_ca);
  else if (listen)
    snprintf(buf, len, "TLS without client certificates: clients have no "
                       "identity");
  else
    snprintf(buf, len, "TLS: the server's certificate verified by %s%s%s%s, "
                       "%s%s",
             a->tls_ca ? a->tls_ca : "the default roots",
             a->tls_server_name ? " for the name \"" : "",
             a->tls_server_name ? a->tls_server_name : "",
             a->tls_server_name ? "\"" : "",
             a->tls_cert ? "presenting " : "no client certificate",
             a->tls_cert ? a->tls_cert : "");
}

void tool_sec_args_free(tool_sec_args *a) {
  tool_strv_free(&a->allow);
  tool_strv_free(&a->deny);
}

static int is_unix(const char *address) {
  return strncmp(address, "unix:", 5) == 0 ||
         strncmp(address, "unix-abstract:", 14) == 0;
}

void tool_addr_bound(char *buf, size_t len, const char *address, int port) {
  const char *colon = strrchr(address, ':');
  if (is_unix(address) || !colon)
    snprintf(buf, len, "%s", address);
  else
    snprintf(buf, len, "%.*s:%d", (int)(colon - address), address, port);
}

int tool_addr_is_loopback(const char *address) {
  if (is_unix(address))
    return 1;
  char host[256];
  const char *start = address, *end;
  if (address[0] == '[') {
    start = address + 1;
    end = strchr(start, ']');
    if (!end)
      return 0;
  } else {
    end = strrchr(address, ':');
    /* More than one colon without brackets: a bare IPv6 address. */
    if (!end || memchr(address, ':', (size_t)(end - address)))
      end = address + strlen(address);
  }
  size_t n = (size_t)(end - start);
  if (n == 0 || n >= sizeof(host))
    return 0;
  memcpy(host, start, n);
  host[n] = '\0';
  if (strcasecmp(host, "localhost") == 0 ||
      strcasecmp(host, "localhost.") == 0)
    return 1;
  unsigned char b[16];
  if (inet_pton(AF_INET, host, b) == 1)
    return b[0] == 127;
  if (inet_pton(AF_INET6, host, b) == 1) {
    static const unsigned char one[16] = {[15] = 1};
    static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
    return memcmp(b, one, 16) == 0 ||
           (memcmp(b, mapped, 12) == 0 && b[12] == 127);
  }
  return 0;
}
