/* The etcd v3 client (etcd.h): unary calls and one watch stream on gRPC's C
 * core, each on its own pluck completion queue. */
#include "etcd/etcd.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <openssl/crypto.h>

#include "etcd_rpc.pb-c.h"

#define MAX_ENDPOINTS 64
/* etcd's own default request limit is 1.5 MiB; a Range page of large
 * documents can be far bigger, and a watch response carries a whole
 * revision's events. */
#define MAX_RECV_BYTES (256 << 20)

struct mcpetcd {
  char *endpoints[MAX_ENDPOINTS];
  size_t nendpoints;
  size_t cur;
  uint64_t failovers;
  grpc_channel *channel; /* to endpoints[cur], NULL until needed */
  grpc_channel_credentials *creds;
  char *user, *password;
  char *token; /* of the current endpoint, or NULL */
  int64_t timeout_ms;
  int64_t page_size;
  char last_error[256];

  pthread_mutex_t mu; /* guards watch_call and watch_cancelled */
  grpc_call *watch_call;
  int watch_cancelled;
};

/* The outcome of one call: a gRPC status and its details. */
typedef struct outcome {
  grpc_status_code code;
  char details[200];
} outcome;

int mcpetcd_nap(pthread_mutex_t *mu, pthread_cond_t *cv, const int *stopping,
                unsigned ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_nsec -= 1000000000L;
    ++until.tv_sec;
  }
  pthread_mutex_lock(mu);
  while (!*stopping && pthread_cond_timedwait(cv, mu, &until) != ETIMEDOUT)
    ;
  int v = *stopping;
  pthread_mutex_unlock(mu);
  return v;
}

void mcpetcd_say(void (*log)(int error, const char *message, void *ud),
                 void *ud, int error, const char *fmt, ...) {
  if (!log)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  log(error, msg, ud);
}

/* Shuts |cq| down, drains it and frees it. */
static void cq_free(grpc_completion_queue *cq) {
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME),
                                     NULL).type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(cq);
}

const char *mcpetcd_strerror(int err) {
  switch (err) {
  case 0: return "success";
  case MCPETCD_ERR_NOMEM: return "out of memory";
  case MCPETCD_ERR_INVALID_ARGUMENT: return "invalid argument";
  case MCPETCD_ERR_UNAVAILABLE: return "no etcd endpoint answered";
  case MCPETCD_ERR_COMPACTED: return "revision compacted";
  case MCPETCD_ERR_FUTURE_REV: return "revision not reached yet";
  case MCPETCD_ERR_DENIED: return "authentication or permission refused";
  case MCPETCD_ERR_IO: return "cannot read a credential file";
  case MCPETCD_ERR_SERVER: return "etcd error";
  case MCPETCD_ERR_PROTO: return "malformed message from etcd";
  case MCPETCD_ERR_CANCELLED: return "cancelled";
  }
  return "unknown error";
}

static void set_error(mcpetcd *c, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void set_error(mcpetcd *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
  va_end(ap);
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* Reads a whole PEM file into a NUL-terminated string. */
static char *read_file(const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err)
      snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - 1 - n, f);
    if (n < cap - 1)
      break;
    char *nb = cap < (1u << 20) ? realloc(buf, cap * 2) : NULL;
    if (!nb) {
      free(buf);
      buf = NULL;
      if (err)
        snprintf(err, errlen, "%s: too large or out of memory", path);
      break;
    }
    buf = nb;
    cap *= 2;
  }
  if (buf && ferror(f)) {
    if (err)
      snprintf(err, errlen, "%s: read error", path);
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf)
    buf[n] = '\0';
  return buf;
}

static int make_creds(mcpetcd *c, const mcpetcd_options *o, char *err,
                      size_t errlen) {
  if (!o->ca_file && !o->cert_file && !o->key_file) {
    c->creds = grpc_insecure_credentials_create();
    return c->creds ? 0 : MCPETCD_ERR_NOMEM;
  }
  if (!o->ca_file || !o->cert_file != !o->key_file) {
    if (err)
      snprintf(err, errlen, "TLS needs a CA file, and a certificate and a "
                            "key together");
    return MCPETCD_ERR_INVALID_ARGUMENT;
  }
  int rv = MCPETCD_ERR_IO;
  char *ca = read_file(o->ca_file, err, errlen), *cert = NULL, *key = NULL;
  if (!ca)
    goto out;
  if (o->cert_file &&
      (!(cert = read_file(o->cert_file, err, errlen)) ||
       !(key = read_file(o->key_file, err, errlen))))
    goto out;
  grpc_ssl_pem_key_cert_pair pair = {key, cert};
  c->creds = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
  rv = c->creds ? 0 : MCPETCD_ERR_NOMEM;
out:
  free(ca);
  free(cert);
  if (key) { /* a private key: do not leave it in freed memory */
    memset(key, 0, strlen(key));
    free(key);
  }
  return rv;
}

static int parse_endpoints(mcpetcd *c, const char *list) {
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 7 && !strncmp(p, "http://", 7)) {
      p += 7;
      n -= 7;
    } else if (n > 8 && !strncmp(p, "https://", 8)) {
      p += 8;
      n -= 8;
    }
    const char *colon = memchr(p, ':', n);
    if (!n || !colon || colon == p || colon + 1 == p + n ||
        c->nendpoints == MAX_ENDPOINTS)
      return MCPETCD_ERR_INVALID_ARGUMENT;
    if (!(c->endpoints[c->nendpoints++] = dup_n(p, n)))
      return MCPETCD_ERR_NOMEM;
    p += n;
    if (*p == ',')
      ++p;
  }
  return c->nendpoints ? 0 : MCPETCD_ERR_INVALID_ARGUMENT;
}

int mcpetcd_new(mcpetcd **pc, const mcpetcd_options *o, char *err,
                size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!o || !o->endpoints || o->timeout_ms < 0 || o->page_size < 0)
    return MCPETCD_ERR_INVALID_ARGUMENT;
  mcpetcd *c = calloc(1, sizeof *c);
  if (!c)
    return MCPETCD_ERR_NOMEM;
  /* As the gRPC transport does (docs/api.md, "OpenSSL at exit"): with TLS
   * to etcd, gRPC's late clean-up thread may outlive the exit. */
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
  grpc_init();
  pthread_mutex_init(&c->mu, NULL);
  c->timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
  c->page_size = o->page_size ? o->page_size : 1000;
  int rv = parse_endpoints(c, o->endpoints);
  if (rv < 0 && err)
    snprintf(err, errlen, "bad endpoint list \"%s\" (want host:port,...)",
             o->endpoints);
  if (!rv && o->user) {
    c->user = dup_n(o->user, strlen(o->user));
    c->password = dup_n(o->password ? o->password : "",
                        o->password ? strlen(o->password) : 0);
    if (!c->user || !c->password)
      rv = MCPETCD_ERR_NOMEM;
  }
  if (!rv)
    rv = make_creds(c, o, err, errlen);
  if (rv < 0) {
    mcpetcd_free(c);
    return rv;
  }
  *pc = c;
  return 0;
}

static void drop_channel(mcpetcd *c) {
  if (c->channel)
    grpc_channel_destroy(c->channel);
  c->channel = NULL;
  free(c->token);
  c->token = NULL;
}

void mcpetcd_free(mcpetcd *c) {
  if (!c)
    return;
  drop_channel(c);
  if (c->creds)
    grpc_channel_credentials_release(c->creds);
  for (size_t i = 0; i < c->nendpoints; ++i)
    free(c->endpoints[i]);
  free(c->user);
  if (c->password) {
    memset(c->password, 0, strlen(c->password));
    free(c->password);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
  grpc_shutdown();
}

const char *mcpetcd_endpoint(const mcpetcd *c) { return c->endpoints[c->cur]; }
const char *mcpetcd_last_error(const mcpetcd *c) { return c->last_error; }
uint64_t mcpetcd_failovers(const mcpetcd *c) { return c->failovers; }

static grpc_channel *channel(mcpetcd *c) {
  if (!c->channel) {
    grpc_arg a[2];
    a[0].type = a[1].type = GRPC_ARG_INTEGER;
    a[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    a[0].value.integer = MAX_RECV_BYTES;
    /* A member that is down must fail the call now, not after gRPC's
     * reconnection backoff: we move to the next member ourselves. */
    a[1].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    a[1].value.integer = 1000;
    grpc_channel_args args = {2, a};
    c->channel = grpc_channel_create(c->endpoints[c->cur], c->creds, &args);
  }
  return c->channel;
}

static void next_endpoint(mcpetcd *c) {
  drop_channel(c);
  c->cur = (c->cur + 1) % c->nendpoints;
  ++c->failovers;
}

static gpr_timespec deadline_in(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Copies a received message into |*out| (malloc'd, caller frees). */
static int read_message(grpc_byte_buffer *bb, uint8_t **out, size_t *len) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return MCPETCD_ERR_PROTO;
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  *len = GRPC_SLICE_LENGTH(s);
  *out = malloc(*len ? *len : 1);
  if (*out)
    memcpy(*out, GRPC_SLICE_START_PTR(s), *len);
  grpc_slice_unref(s);
  return *out ? 0 : MCPETCD_ERR_NOMEM;
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  grpc_slice s = grpc_slice_malloc(n);
  protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static void copy_details(outcome *oc, grpc_slice details) {
  size_t n = GRPC_SLICE_LENGTH(details);
  if (n >= sizeof oc->details)
    n = sizeof oc->details - 1;
  memcpy(oc->details, GRPC_SLICE_START_PTR(details), n);
  oc->details[n] = '\0';
}

/* One unary call on the current endpoint: |req| out, the answer's bytes in
 * |*resp| (malloc'd) when the status is OK. Returns the status. */
static void unary_once(mcpetcd *c, const char *method,
                       const ProtobufCMessage *req, int auth, uint8_t **resp,
                       size_t *resp_len, outcome *oc) {
  *resp = NULL;
  oc->code = GRPC_STATUS_UNAVAILABLE;
  snprintf(oc->details, sizeof oc->details, "out of memory");
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_channel *ch = channel(c);
  if (!cq || !ch) {
    if (cq)
      grpc_completion_queue_destroy(cq);
    return;
  }
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(method), NULL,
      deadline_in(c->timeout_ms), NULL);
  grpc_byte_buffer *out = pack(req), *in = NULL;
  grpc_metadata md;
  memset(&md, 0, sizeof md);
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init(&initial);
  grpc_metadata_array_init(&trailing);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (auth && c->token) {
    md.key = grpc_slice_from_static_string("token");
    md.value = grpc_slice_from_copied_string(c->token);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = out;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &in;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  if (call && out &&
      grpc_call_start_batch(call, ops, 6, (void *)1, NULL) == GRPC_CALL_OK) {
    grpc_completion_queue_pluck(cq, (void *)1,
                                gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    oc->code = status;
    copy_details(oc, details);
    if (status == GRPC_STATUS_OK) {
      if (!in || read_message(in, resp, resp_len) < 0) {
        oc->code = GRPC_STATUS_INTERNAL;
        snprintf(oc->details, sizeof oc->details, "no or unreadable answer");
      }
    }
  }
  if (in)
    grpc_byte_buffer_destroy(in);
  if (out)
    grpc_byte_buffer_destroy(out);
  grpc_slice_unref(details);
  grpc_slice_unref(md.value);
  grpc_metadata_array_destroy(&initial);
  grpc_metadata_array_destroy(&trailing);
  if (call)
    grpc_call_unref(call);
  cq_free(cq);
}

/* Failures that say "this endpoint cannot serve now": try another. etcd
 * answers "etcdserver: no leader" and "etcdserver: request timed out" with
 * UNAVAILABLE too. */
static int endpoint_fault(grpc_status_code code) {
  return code == GRPC_STATUS_UNAVAILABLE ||
         code == GRPC_STATUS_DEADLINE_EXCEEDED;
}

static int map_status(mcpetcd *c, const outcome *oc) {
  set_error(c, "%s: %s (gRPC status %d)", c->endpoints[c->cur], oc->details,
            (int)oc->code);
  if (strstr(oc->details, "required revision has been compacted"))
    return MCPETCD_ERR_COMPACTED;
  if (strstr(oc->details, "required revision is a future revision"))
    return MCPETCD_ERR_FUTURE_REV;
  switch (oc->code) {
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_PERMISSION_DENIED:
    return MCPETCD_ERR_DENIED;
  case GRPC_STATUS_INVALID_ARGUMENT:
    /* etcd answers a wrong password ("authentication failed, invalid user
     * ID or password") and a missing user on a cluster with authentication
     * ("user name is empty") so */
    return strstr(oc->details, "authentication failed") ||
                   strstr(oc->details, "user name is empty")
               ? MCPETCD_ERR_DENIED
               : MCPETCD_ERR_SERVER;
  default:
    return endpoint_fault(oc->code) ? MCPETCD_ERR_UNAVAILABLE
                                    : MCPETCD_ERR_SERVER;
  }
}

static int authenticate(mcpetcd *c, outcome *oc) {
  Etcdserverpb__AuthenticateRequest req =
      ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
  req.name = c->user;
  req.password = c->password;
  uint8_t *resp;
  size_t len;
  unary_once(c, "/etcdserverpb.Auth/Authenticate", &req.base, 0, &resp, &len,
             oc);
  if (oc->code != GRPC_STATUS_OK)
    return -1;
  Etcdserverpb__AuthenticateResponse *r =
      etcdserverpb__authenticate_response__unpack(NULL, len, resp);
  free(resp);
  if (!r) {
    oc->code = GRPC_STATUS_INTERNAL;
    snprintf(oc->details, sizeof oc->details, "malformed Authenticate answer");
    return -1;
  }
  free(c->token);
  c->token = dup_n(r->token, strlen(r->token));
  etcdserverpb__authenticate_response__free_unpacked(r, NULL);
  return c->token ? 0 : -1;
}

/* Makes sure the current endpoint has a token when one is needed. */
static void ensure_token(mcpetcd *c, outcome *oc) {
  oc->code = GRPC_STATUS_OK;
  if (c->user && !c->token)
    authenticate(c, oc);
}

/* One unary call, moving through the endpoints on endpoint faults. */
static int unary(mcpetcd *c, const char *method, const ProtobufCMessage *req,
                 uint8_t **resp, size_t *resp_len) {
  outcome oc;
  int renewed = 0;
  c->last_error[0] = '\0';
  for (size_t tried = 0; tried < c->nendpoints;) {
    ensure_token(c, &oc);
    if (oc.code == GRPC_STATUS_OK)
      unary_once(c, method, req, 1, resp, resp_len, &oc);
    if (oc.code == GRPC_STATUS_OK)
      return 0;
    if (oc.code == GRPC_STATUS_UNAUTHENTICATED && c->user && !renewed &&
        strstr(oc.details, "invalid auth token")) {
      free(c->token); /* expired (etcd's simple tokens live 5 min) */
      c->token = NULL;
      renewed = 1;
      continue;
    }
    int rv = map_status(c, &oc);
    if (!endpoint_fault(oc.code))
      return rv;
    next_endpoint(c);
    ++tried;
  }
  return MCPETCD_ERR_UNAVAILABLE;
}

void mcpetcd_kvs_free(mcpetcd_kvs *kvs) {
  for (size_t i = 0; i < kvs->n; ++i) {
    free((void *)kvs->kvs[i].key);
    free((void *)kvs->kvs[i].value);
  }
  free(kvs->kvs);
  kvs->kvs = NULL;
  kvs->n = 0;
}

/* The end of the range of keys starting with |prefix|: the prefix with its
 * last byte below 0xff incremented (etcd's clientv3.GetPrefixRangeEnd). */
static size_t prefix_end(const char *prefix, uint8_t *end) {
  size_t n = strlen(prefix);
  memcpy(end, prefix, n);
  while (n > 0) {
    if (end[n - 1] < 0xff) {
      ++end[n - 1];
      return n;
    }
    --n;
  }
  end[0] = 0; /* every key */
  return 1;
}

static int copy_kv(mcpetcd *c, const Etcdserverpb__KeyValue *in,
                   mcpetcd_kv *out) {
  if (memchr(in->key.data, 0, in->key.len)) {
    set_error(c, "a key under the prefix holds a NUL byte");
    return MCPETCD_ERR_PROTO;
  }
  char *k = dup_n((const char *)in->key.data, in->key.len);
  uint8_t *v = malloc(in->value.len ? in->value.len : 1);
  if (!k || !v) {
    free(k);
    free(v);
    return MCPETCD_ERR_NOMEM;
  }
  if (in->value.len)
    memcpy(v, in->value.data, in->value.len);
  *out = (mcpetcd_kv){k, in->key.len, v, in->value.len, in->create_revision,
                      in->mod_revision};
  return 0;
}

int mcpetcd_get_prefix(mcpetcd *c, const char *prefix, int64_t revision,
                       mcpetcd_kvs *out) {
  *out = (mcpetcd_kvs){0};
  size_t plen = prefix ? strlen(prefix) : 0;
  if (!plen || revision < 0)
    return MCPETCD_ERR_INVALID_ARGUMENT;
  uint8_t *end = malloc(plen + 1), *start = malloc(plen + 1);
  size_t start_len = plen, cap = 0;
  int rv = end && start ? 0 : MCPETCD_ERR_NOMEM;
  size_t end_len = end ? prefix_end(prefix, end) : 0;
  if (start)
    memcpy(start, prefix, plen);
  for (int more = 1; !rv && more;) {
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = (ProtobufCBinaryData){start_len, start};
    req.range_end = (ProtobufCBinaryData){end_len, end};
    req.limit = c->page_size;
    req.revision = revision;
    uint8_t *bytes;
    size_t len;
    if ((rv = unary(c, "/etcdserverpb.KV/Range", &req.base, &bytes, &len)) < 0)
      break;
    Etcdserverpb__RangeResponse *r =
        etcdserverpb__range_response__unpack(NULL, len, bytes);
    free(bytes);
    if (!r || !r->header) {
      set_error(c, "malformed Range answer");
      rv = MCPETCD_ERR_PROTO;
      if (r)
        etcdserverpb__range_response__free_unpacked(r, NULL);
      break;
    }
    if (!revision) /* every later page at the first page's revision */
      revision = out->revision = r->header->revision;
    if (out->n + r->n_kvs > cap) {
      size_t ncap = (out->n + r->n_kvs) * 2;
      mcpetcd_kv *nk = realloc(out->kvs, ncap * sizeof *nk);
      if (!nk)
        rv = MCPETCD_ERR_NOMEM;
      else {
        out->kvs = nk;
        cap = ncap;
      }
    }
    for (size_t i = 0; !rv && i < r->n_kvs; ++i)
      if (!(rv = copy_kv(c, r->kvs[i], &out->kvs[out->n])))
        ++out->n;
    more = r->more && r->n_kvs > 0;
    if (!rv && more) { /* the next page starts right after the last key */
      const Etcdserverpb__KeyValue *last = r->kvs[r->n_kvs - 1];
      uint8_t *ns = realloc(start, last->key.len + 1);
      if (!ns)
        rv = MCPETCD_ERR_NOMEM;
      else {
        start = ns;
        memcpy(start, last->key.data, last->key.len);
        start[last->key.len] = 0;
        start_len = last->key.len + 1;
      }
    }
    etcdserverpb__range_response__free_unpacked(r, NULL);
  }
  free(start);
  free(end);
  if (rv < 0)
    mcpetcd_kvs_free(out);
  else
    out->revision = revision;
  return rv;
}

int mcpetcd_txn(mcpetcd *c, const mcpetcd_op *ops, size_t n,
                int64_t *revision) {
  if (!n)
    return 0;
  Etcdserverpb__RequestOp *ro = calloc(n, sizeof *ro);
  Etcdserverpb__RequestOp **rp = calloc(n, sizeof *rp);
  Etcdserverpb__PutRequest *puts = calloc(n, sizeof *puts);
  Etcdserverpb__DeleteRangeRequest *dels = calloc(n, sizeof *dels);
  int rv = MCPETCD_ERR_NOMEM;
  if (!ro || !rp || !puts || !dels)
    goto out;
  for (size_t i = 0; i < n; ++i) {
    etcdserverpb__request_op__init(&ro[i]);
    ProtobufCBinaryData key = {strlen(ops[i].key), (uint8_t *)ops[i].key};
    if (ops[i].value) {
      etcdserverpb__put_request__init(&puts[i]);
      puts[i].key = key;
      puts[i].value = (ProtobufCBinaryData){ops[i].value_len,
                                            (uint8_t *)ops[i].value};
      ro[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
      ro[i].request_put = &puts[i];
    } else {
      etcdserverpb__delete_range_request__init(&dels[i]);
      dels[i].key = key;
      ro[i].request_case =
          ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
      ro[i].request_delete_range = &dels[i];
    }
    rp[i] = &ro[i];
  }
  Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
  req.n_success = n;
  req.success = rp;
  uint8_t *bytes;
  size_t len;
  if ((rv = unary(c, "/etcdserverpb.KV/Txn", &req.base, &bytes, &len)) < 0)
    goto out;
  Etcdserverpb__TxnResponse *r =
      etcdserverpb__txn_response__unpack(NULL, len, bytes);
  free(bytes);
  if (!r || !r->header) {
    set_error(c, "malformed Txn answer");
    rv = MCPETCD_ERR_PROTO;
  } else if (revision) {
    *revision = r->header->revision;
  }
  if (r)
    etcdserverpb__txn_response__free_unpacked(r, NULL);
out:
  free(ro);
  free(rp);
  free(puts);
  free(dels);
  return rv;
}

int mcpetcd_compact(mcpetcd *c, int64_t revision) {
  Etcdserverpb__CompactionRequest req = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
  req.revision = revision;
  req.physical = 1;
  uint8_t *bytes;
  size_t len;
  int rv = unary(c, "/etcdserverpb.KV/Compact", &req.base, &bytes, &len);
  if (!rv)
    free(bytes);
  return rv;
}

void mcpetcd_watch_cancel(mcpetcd *c) {
  pthread_mutex_lock(&c->mu);
  c->watch_cancelled = 1;
  if (c->watch_call)
    grpc_call_cancel(c->watch_call, NULL);
  pthread_mutex_unlock(&c->mu);
}

void mcpetcd_watch_reset(mcpetcd *c) {
  pthread_mutex_lock(&c->mu);
  c->watch_cancelled = 0;
  pthread_mutex_unlock(&c->mu);
}

/* Runs one batch on the watch call and waits for it. */
static int watch_batch(grpc_call *call, grpc_completion_queue *cq,
                       grpc_op *ops, size_t n) {
  if (grpc_call_start_batch(call, ops, n, (void *)2, NULL) != GRPC_CALL_OK)
    return -1;
  grpc_event ev = grpc_completion_queue_pluck(
      cq, (void *)2, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.success ? 0 : -1;
}

/* Hands one WatchResponse to |fn|; returns 1 to go on, or the result. */
static int deliver(mcpetcd *c, const Etcdserverpb__WatchResponse *r,
                   mcpetcd_watch_fn fn, void *ud, int64_t *compact) {
  if (r->compact_revision) {
    if (compact)
      *compact = r->compact_revision;
    set_error(c, "watch start revision compacted (oldest kept: %lld)",
              (long long)r->compact_revision);
    return MCPETCD_ERR_COMPACTED;
  }
  if (r->canceled) {
    set_error(c, "watch cancelled by etcd: %s",
              r->cancel_reason ? r->cancel_reason : "");
    return strstr(r->cancel_reason ? r->cancel_reason : "", "permission")
               ? MCPETCD_ERR_DENIED
               : MCPETCD_ERR_UNAVAILABLE;
  }
  if (r->created && !r->n_events)
    return 1;
  mcpetcd_event *evs = calloc(r->n_events ? r->n_events : 1, sizeof *evs);
  if (!evs)
    return MCPETCD_ERR_NOMEM;
  int rv = 1;
  for (size_t i = 0; i < r->n_events; ++i) {
    const Etcdserverpb__Event *e = r->events[i];
    if (!e->kv || memchr(e->kv->key.data, 0, e->kv->key.len)) {
      set_error(c, "malformed watch event");
      rv = MCPETCD_ERR_PROTO;
      break;
    }
    evs[i].is_delete = e->type == ETCDSERVERPB__EVENT__EVENT_TYPE__DELETE;
    /* The key is not NUL-terminated in the message: callers get a copy. */
    evs[i].kv = (mcpetcd_kv){NULL, e->kv->key.len, e->kv->value.data,
                             e->kv->value.len, e->kv->create_revision,
                             e->kv->mod_revision};
    if (!(evs[i].kv.key = dup_n((const char *)e->kv->key.data,
                                e->kv->key.len))) {
      rv = MCPETCD_ERR_NOMEM;
      break;
    }
  }
  if (rv == 1 && r->header) {
    int u = fn(evs, r->n_events, r->header->revision, ud);
    if (u)
      rv = u;
  }
  for (size_t i = 0; i < r->n_events; ++i)
    free((void *)evs[i].kv.key);
  free(evs);
  return rv;
}

int mcpetcd_watch(mcpetcd *c, const char *prefix, int64_t start_revision,
                  mcpetcd_watch_fn fn, void *ud, int64_t *compact_revision) {
  size_t plen = prefix ? strlen(prefix) : 0;
  if (!plen || start_revision <= 0 || !fn)
    return MCPETCD_ERR_INVALID_ARGUMENT;
  outcome oc;
  c->last_error[0] = '\0';
  ensure_token(c, &oc);
  if (oc.code != GRPC_STATUS_OK) {
    int rv = map_status(c, &oc);
    if (endpoint_fault(oc.code))
      next_endpoint(c);
    return rv;
  }
  uint8_t *end = malloc(plen + 1);
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  grpc_channel *ch = channel(c);
  if (!end || !cq || !ch) {
    free(end);
    if (cq)
      grpc_completion_queue_destroy(cq);
    return MCPETCD_ERR_NOMEM;
  }
  size_t end_len = prefix_end(prefix, end);
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string("/etcdserverpb.Watch/Watch"), NULL,
      gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  pthread_mutex_lock(&c->mu);
  int cancelled = c->watch_cancelled;
  c->watch_call = call;
  pthread_mutex_unlock(&c->mu);

  Etcdserverpb__WatchCreateRequest create =
      ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
  create.key = (ProtobufCBinaryData){plen, (uint8_t *)prefix};
  create.range_end = (ProtobufCBinaryData){end_len, end};
  create.start_revision = start_revision;
  create.progress_notify = 1;
  Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
  req.request_union_case =
      ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
  req.create_request = &create;
  grpc_byte_buffer *out = pack(&req.base);

  /* "hasleader": etcd ends the watch when its member loses the leader, as
   * clientv3.WithRequireLeader asks, instead of keeping a stream that would
   * silently see nothing. */
  grpc_metadata md[2];
  memset(md, 0, sizeof md);
  md[0].key = grpc_slice_from_static_string("hasleader");
  md[0].value = grpc_slice_from_static_string("true");
  size_t nmd = 1;
  if (c->token) {
    md[1].key = grpc_slice_from_static_string("token");
    md[1].value = grpc_slice_from_copied_string(c->token);
    nmd = 2;
  }
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init(&initial);
  grpc_metadata_array_init(&trailing);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  int rv = MCPETCD_ERR_UNAVAILABLE;
  int status_pending = 0;
  if (cancelled) {
    rv = MCPETCD_ERR_CANCELLED;
    goto out;
  }
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = nmd;
  ops[0].data.send_initial_metadata.metadata = md;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = out;
  ops[2].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[2].data.recv_initial_metadata.recv_initial_metadata = &initial;
  if (!call || !out || watch_batch(call, cq, ops, 3) < 0)
    goto status;
  for (;;) {
    grpc_byte_buffer *in = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &in;
    if (watch_batch(call, cq, &op, 1) < 0 || !in)
      break; /* the stream ended: its status says why */
    uint8_t *bytes;
    size_t len;
    int r = read_message(in, &bytes, &len);
    grpc_byte_buffer_destroy(in);
    if (r < 0) {
      rv = r;
      goto cancel;
    }
    Etcdserverpb__WatchResponse *wr =
        etcdserverpb__watch_response__unpack(NULL, len, bytes);
    free(bytes);
    if (!wr) {
      set_error(c, "malformed watch response");
      rv = MCPETCD_ERR_PROTO;
      goto cancel;
    }
    r = deliver(c, wr, fn, ud, compact_revision);
    etcdserverpb__watch_response__free_unpacked(wr, NULL);
    if (r != 1) {
      rv = r;
      goto cancel;
    }
  }
status:
  status_pending = 1;
  goto finish;
cancel:
  grpc_call_cancel(call, NULL);
  status_pending = 1;
finish:
  if (status_pending && call) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &trailing;
    op.data.recv_status_on_client.status = &status;
    op.data.recv_status_on_client.status_details = &details;
    watch_batch(call, cq, &op, 1);
    pthread_mutex_lock(&c->mu);
    cancelled = c->watch_cancelled;
    pthread_mutex_unlock(&c->mu);
    if (cancelled) {
      rv = MCPETCD_ERR_CANCELLED;
    } else if (rv == MCPETCD_ERR_UNAVAILABLE) {
      oc.code = status;
      copy_details(&oc, details);
      rv = map_status(c, &oc);
      /* A broken stream is an endpoint fault whatever its code: the next
       * watch goes to the next member. */
      if (rv == MCPETCD_ERR_UNAVAILABLE || rv == MCPETCD_ERR_SERVER) {
        rv = MCPETCD_ERR_UNAVAILABLE;
        next_endpoint(c);
      }
    }
  }
out:
  pthread_mutex_lock(&c->mu);
  c->watch_call = NULL;
  pthread_mutex_unlock(&c->mu);
  if (out)
    grpc_byte_buffer_destroy(out);
  grpc_slice_unref(details);
  if (nmd == 2)
    grpc_slice_unref(md[1].value);
  grpc_metadata_array_destroy(&initial);
  grpc_metadata_array_destroy(&trailing);
  if (call)
    grpc_call_unref(call);
  cq_free(cq);
  free(end);
  return rv;
}
