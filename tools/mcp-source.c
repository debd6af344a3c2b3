/*
 * mcp-source: serves a directory of Kubernetes-style YAML files as MCP
 * collections, listening for sinks (ResourceSource) or dialing one
 * (ResourceSink), and pushes every change of the files.
 *
 * Threads: the main thread runs a libuv loop (signals, file watching,
 * rescans, the loader). The store lives where the transport runs (gRPC: a
 * thread of its own). A rescan runs on the main thread, and its result is
 * applied to the store through the transport's source_apply(), which
 * returns once applied: the loader's resources, which the apply reads, stay
 * untouched until the next scan, which cannot start before that.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "args.h"
#include "config_load.h"
#include <mcp/schema_istio.h>
#include "log.h"
#include "proc.h"
#include "ops/ops.h"
#include "rand.h"
#include "schema_args.h"
#include "transport.h"
#include "watch.h"

#define DEFAULT_ADDRESS "127.0.0.1:9901"
#define DEFAULT_DEBOUNCE_MS 100
#define MAX_DEBOUNCE_MS 3600000ul
/* A burst of file events is scanned this long after its first event. */
#define SETTLE_MS 5
/* Rescan period: catches what inotify cannot see. */
#define RESCAN_MS 1000

typedef struct source_app {
  uv_loop_t loop;
  const tool_transport *tp;
  void *ep;
  tool_ops *ops; /* metrics and debug endpoints (tools/ops) */
  tool_access *access; /* --allow, --deny, --access-list; NULL: none */
  mcp_store *store;
  mcpcfg_loader *loader; /* NULL without --dir */
  mcp_schema *schema;     /* typed bodies: Istio's types, --descriptor-set */
  mcpcfg_kind_type *kinds; /* --kind, then Istio's kinds */
  const char *dir;
  tool_watch *watch;
  uv_timer_t settle, rescan;
  uv_signal_t sigint, sigterm;
  int timers; /* settle and rescan initialised */
  int stopping;
  int io_error;      /* the last scan could not read the directory */
  int apply_pending; /* the loader holds changes the store lacks */
  /* Transport thread only. */
  int dial_failing; /* the status the failing dials end with, 0: none */
} source_app;

static void usage(FILE *f) {
  fprintf(f,
          "usage: mcp-source [--dir DIR] [--collection NAME]...\n"
          "                  [--listen HOST:PORT | --connect HOST:PORT]\n"
          "                  [--transport grpc|h2c] [--debounce MS]\n"
          "                  [--log-level LEVEL] [--log-format text|json]\n"
          "                  [--debug-listen HOST:PORT]\n"
          "                  [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]\n"
          "                  [--tls-server-name NAME] [--allow ID]... [--deny ID]...\n"
          "                  [--access-list FILE] [--allow-cleartext]\n"
          "                  [--descriptor-set FILE]... [--kind G/V/KIND=MESSAGE]...\n"
          "                  [--body typed|struct]\n"
          "\n"
          "Serves the YAML files below DIR as MCP collections and pushes every\n"
          "change of them.\n"
          "\n"
          "  --dir DIR          YAML files to serve, watched for changes\n"
          "  --collection NAME  serve NAME even when empty (repeatable)\n"
          "  --listen HOST:PORT serve ResourceSource: sinks dial us\n"
          "                     (default " DEFAULT_ADDRESS ")\n"
          "  --connect HOST:PORT dial a ResourceSink, reconnecting forever\n"
          "  --transport NAME   grpc (default) or h2c: HTTP/2 without TLS\n"
          "  --debounce MS      push a change once its collection has been\n"
          "                     quiet for MS milliseconds (default %d; 0: at once)\n"
          "  --log-level LEVEL  error, warn, info (default) or debug\n"
          "  --log-format FORMAT text (default) or json: one object per line\n"
          "  --debug-listen HOST:PORT serve /metrics, /debug/syncz, /healthz\n"
          "                     and /readyz over HTTP\n"
          "  --tls-cert FILE    our certificate chain (PEM; grpc only)\n"
          "  --tls-key FILE     its private key (PEM)\n"
          "  --tls-ca FILE      CA certificates (PEM) that verify the peer; when\n"
          "                     listening, clients must present a certificate\n"
          "  --tls-server-name NAME  --connect: the name the sink's certificate\n"
          "                     must carry instead of the host dialed\n"
          "  --allow ID         allow a peer identity (SPIFFE ID, DNS name, CN;\n"
          "                     a prefix ending in '*'); repeatable\n"
          "  --deny ID          deny a peer identity; repeatable\n"
          "  --access-list FILE rules, one per line (\"allow ID\", \"deny ID\");\n"
          "                     read again when it changes and on SIGHUP\n"
          "  --allow-cleartext  let h2c listen on an address that is not loopback\n"
          "  --descriptor-set FILE  message types (a FileDescriptorSet: protoc\n"
          "                     --include_imports --descriptor_set_out=FILE) added\n"
          "                     to Istio 1.6's, built in; repeatable\n"
          "  --kind GROUP/VERSION/KIND=full.message.Name  documents of that kind\n"
          "                     have bodies of that message; repeatable\n"
          "  --body typed|struct  typed (default): bodies of known kinds are their\n"
          "                     message; struct: google.protobuf.Struct everywhere\n"
          "  --help             this text\n"
          "\n"
          "Exit status: 0 after SIGINT or SIGTERM, 1 on a runtime failure,\n"
          "2 on a usage error.\n",
          DEFAULT_DEBOUNCE_MS);
}

static int usage_error(const char *fmt, ...) TOOL_PRINTF(1, 2);
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mcp-source: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  usage(stderr);
  return 2;
}

/* ---- events (the transport's thread) ---- */

static void on_core_event(const mcp_event *ev, void *ud) {
  source_app *a = ud;
  tool_ops_event(a->ops, ev);
  TOOL_LOG_CONTEXT(.collection = ev->collection);
  switch (ev->type) {
  case MCP_EVENT_REQUEST:
    log_debug("request for %s", ev->collection);
    break;
  case MCP_EVENT_PUSH:
    log_debug("push %s nonce %s version %s: %zu resources, %zu removed%s",
              ev->collection, ev->nonce, ev->version, ev->nresources,
              ev->nremoved, ev->incremental ? " (incremental)" : "");
    break;
  case MCP_EVENT_ACK:
    log_debug("ACK %s nonce %s version %s", ev->collection, ev->nonce,
              ev->version);
    break;
  case MCP_EVENT_NACK:
    log_warn("sink rejected %s version %s (nonce %s): code %d: %s",
             ev->collection, ev->version, ev->nonce, ev->code, ev->message);
    break;
  case MCP_EVENT_STALE:
    log_debug("stale answer for %s (nonce %s)", ev->collection, ev->nonce);
    break;
  case MCP_EVENT_UNKNOWN_COLLECTION:
    log_warn("sink asked for unknown collection %s (served once it exists)",
             ev->collection);
    break;
  case MCP_EVENT_TRIGGER_IGNORED:
    log_debug("sink rejected the trigger, as expected");
    break;
  }
}

/* The first identity of a peer, for the logs. */
static const char *first_identity(const tool_stream_info *info) {
  return info->nidentities ? info->identities[0] : "none";
}

/* A call refused before it became a stream (the transport's thread). */
static void on_refused(const tool_stream_info *info, void *ud) {
  source_app *a = ud;
  tool_ops_refused(a->ops, info);
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  char name[24];
  tool_log(info->status == 7 || info->status == 16 ? TOOL_LOG_WARN
                                                   : TOOL_LOG_INFO,
           "refused %s: status %d (%s): %s; identity %s", info->peer,
           info->status,
           tool_ops_code_name(info->status, name, sizeof(name)),
           info->details, first_identity(info));
}

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  source_app *a = ud;
  tool_ops_stream(a->ops, opened, info);
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  if (opened) {
    if (info->dialed)
      log_debug("stream %llu: dialing %s", (unsigned long long)info->id,
                info->peer);
    else if (info->nidentities)
      log_info("stream %llu: sink %s connected (identity %s)",
               (unsigned long long)info->id, info->peer,
               info->identities[0]);
    else
      log_info("stream %llu: sink %s connected", (unsigned long long)info->id,
               info->peer);
    return;
  }
  if (info->dialed && info->received == 0) {
    tool_ops_log_dial_failure(info, "the sink", &a->dial_failing);
    return;
  }
  a->dial_failing = 0;
  log_info("stream %llu: %s closed: status %d%s%s",
           (unsigned long long)info->id, info->peer, info->status,
           info->details[0] ? ": " : "", info->details);
}

/* ---- loading ---- */

static void on_report(const char *path, unsigned long line,
                      const char *message, void *ud) {
  (void)ud;
  if (line)
    log_error("%s:%lu: %s", path, line, message);
  else
    log_error("%s: %s", path, message);
}

/* Where the store lives (or on the main thread before the endpoint
 * exists): the loader's current set into the store. */
static void apply_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  source_app *a = ud;
  size_t n = mcpcfg_loader_collection_count(a->loader);
  int rv = mcpcfg_loader_apply(a->loader, store, ts);
  if (rv < 0) {
    log_error("cannot update the store: %s (retrying at the next scan)",
              mcpcfg_strerror(rv));
    return;
  }
  a->apply_pending = 0;
  if (rv == 0)
    return;
  for (size_t i = 0; i < n; i++) {
    const char *c = mcpcfg_loader_collection_name(a->loader, i);
    log_debug("collection %s: %zu resources, generation %llu", c,
              mcp_store_count(store, c),
              (unsigned long long)mcp_store_generation(store, c));
  }
  log_info("%d collection%s changed", rv, rv == 1 ? "" : "s");
}

static void scan(source_app *a) {
  int rv = mcpcfg_loader_scan(a->loader);
  if (a->watch)
    tool_watch_sync(a->watch);
  if (rv < 0) {
    if (rv != MCPCFG_ERR_IO)
      log_error("scan of %s failed: %s", a->dir, mcpcfg_strerror(rv));
    else if (!a->io_error)
      log_warn("serving the last content of %s until it can be read again",
               a->dir);
    a->io_error = rv == MCPCFG_ERR_IO;
    return;
  }
  if (a->io_error) {
    log_info("%s is readable again", a->dir);
    a->io_error = 0;
  }
  if (rv > 0)
    a->apply_pending = 1;
  if (!a->apply_pending)
    return;
  rv = a->tp->source_apply(a->ep, apply_fn, a);
  if (rv < 0)
    log_error("cannot update the store: %s", mcp_strerror(rv));
}

/* ---- the loop (main thread) ---- */

static void on_settle(uv_timer_t *t) { scan(t->data); }

static void on_rescan(uv_timer_t *t) { scan(t->data); }

static void on_fs_change(void *ud) {
  source_app *a = ud;
  /* Not restarted by later events: a steady stream of writes cannot
   * starve the scan. */
  if (!a->stopping && !uv_is_active((uv_handle_t *)&a->settle))
    uv_timer_start(&a->settle, on_settle, SETTLE_MS, 0);
}

/* Stops the endpoint (the store is ours again when it returns) and closes
 * every handle: uv_run() then returns. */
static void stop(source_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  tool_ops_close(a->ops);
  tool_access_close(a->access);
  a->tp->source_del(a->ep);
  a->ep = NULL;
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  if (a->timers) {
    uv_close((uv_handle_t *)&a->settle, NULL);
    uv_close((uv_handle_t *)&a->rescan, NULL);
  }
  tool_watch_close(a->watch);
  a->watch = NULL;
}

static void on_signal(uv_signal_t *h, int signum) {
  source_app *a = h->data;
  log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  stop(a);
}

/* "HOST:PORT" with the port replaced by |port| (for port 0). */
static void bound_address(char *buf, size_t len, const char *addr, int port) {
  const char *colon = strrchr(addr, ':');
  snprintf(buf, len, "%.*s:%d", (int)(colon - addr), addr, port);
}

/* Typed bodies: the schema (Istio's types and --descriptor-set files) and
 * the kinds (--kind first, so that it overrides Istio's). 0, or -1
 * (logged). */
static int set_typed_bodies(source_app *a, const tool_schema_args *sa,
                            mcpcfg_options *lo) {
  char why[600];
  size_t ni;
  const mcp_schema_istio_kind *ik = mcp_schema_istio_kinds(&ni);
  if (tool_schema_load(sa, &a->schema, why, sizeof(why)) != 0) {
    log_error("%s", why);
    return -1;
  }
  if (!(a->kinds = calloc(sa->nkinds + ni, sizeof(*a->kinds)))) {
    log_error("out of memory");
    return -1;
  }
  for (size_t i = 0; i < sa->nkinds; i++)
    a->kinds[i] = (mcpcfg_kind_type){sa->kinds[i].api_version,
                                     sa->kinds[i].kind, sa->kinds[i].message};
  for (size_t i = 0; i < ni; i++)
    a->kinds[sa->nkinds + i] = (mcpcfg_kind_type){
        ik[i].api_version, ik[i].kind, ik[i].message};
  lo->schema = a->schema;
  lo->kinds = a->kinds;
  lo->nkinds = sa->nkinds + ni;
  lo->force_struct = sa->body_struct;
  log_info("bodies: %s (%zu kinds typed, %zu message types)",
           sa->body_struct ? "google.protobuf.Struct (--body struct)"
                           : "typed",
           sa->body_struct ? (size_t)0 : lo->nkinds,
           mcp_schema_message_count(a->schema));
  return 0;
}

/* The command line. */
typedef struct source_args {
  const char *dir, *address, *transport;
  int dial;
  unsigned long debounce_ms;
  tool_log_level level;
  tool_strv colls;
  tool_ops_args ops; /* --debug-listen, --log-format */
  tool_sec_args sec; /* --tls-*, --allow, --deny, --access-list */
  tool_schema_args schema; /* --descriptor-set, --kind, --body */
} source_args;

/* Returns -1 to run, or the exit status (0 for --help, 2 for a usage
 * error, reported). */
static int parse_args(int argc, char **argv, source_args *o) {
  const char *listen = NULL, *connect = NULL, *level = "info", *v = NULL;
  o->transport = tool_transport_default();
  o->debounce_ms = DEFAULT_DEBOUNCE_MS;
  for (int i = 1; i < argc; i++) {
    int rv;
    if (tool_arg_flag(argv, i, "--help") || tool_arg_flag(argv, i, "-h")) {
      usage(stdout);
      return 0;
    }
#define VALUE(name) ((rv = tool_arg_value(argc, argv, &i, name, &v)) != 0)
    if (VALUE("--dir")) {
      if (rv > 0 && !v[0])
        return usage_error("--dir needs a directory");
      o->dir = v;
    } else if (VALUE("--collection")) {
      if (rv > 0 && !v[0])
        return usage_error("--collection needs a name");
      if (rv > 0 && tool_strv_add(&o->colls, v, 1) != 0) {
        fprintf(stderr, "mcp-source: out of memory\n");
        return 1;
      }
    } else if (VALUE("--listen")) {
      listen = v;
    } else if (VALUE("--connect")) {
      connect = v;
    } else if (VALUE("--transport")) {
      o->transport = v;
    } else if (VALUE("--debounce")) {
      if (rv > 0 && tool_parse_ulong(v, MAX_DEBOUNCE_MS, &o->debounce_ms) != 0)
        return usage_error("--debounce: not a number of milliseconds: %s", v);
    } else if (VALUE("--log-level")) {
      level = v;
    } else if ((rv = tool_ops_parse_arg(argc, argv, &i, &o->ops)) != 0) {
      /* --debug-listen, --log-format */
    } else if ((rv = tool_sec_parse_arg(argc, argv, &i, &o->sec)) != 0) {
      if (rv == -2) {
        fprintf(stderr, "mcp-source: out of memory\n");
        return 1;
      }
    } else if ((rv = tool_schema_parse_arg(argc, argv, &i, &o->schema, 1)) !=
               0) {
      if (rv == -2) {
        fprintf(stderr, "mcp-source: out of memory\n");
        return 1;
      }
    } else {
      return usage_error("unknown argument: %s", argv[i]);
    }
#undef VALUE
    if (rv < 0) { /* a value is missing: reported */
      usage(stderr);
      return 2;
    }
  }
  if (tool_log_parse_level(level, &o->level) != 0)
    return usage_error("--log-level: expected error, warn, info or debug, "
                       "not %s", level);
  if (listen && connect)
    return usage_error("--listen and --connect exclude each other");
  o->dial = connect != NULL;
  o->address = connect ? connect : listen ? listen : DEFAULT_ADDRESS;
  const char *why;
  if (tool_check_hostport(o->address, o->dial ? 1 : 0, &why) != 0)
    return usage_error("%s %s: %s", o->dial ? "--connect" : "--listen",
                       o->address, why);
  return -1;
}

int main(int argc, char **argv) {
  tool_log_init("mcp-source", TOOL_LOG_INFO);
  source_args args;
  memset(&args, 0, sizeof(args));
  int status = parse_args(argc, argv, &args);
  if (status >= 0) {
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    return status;
  }
  tool_log_init("mcp-source", args.level);
  tool_log_set_format(args.ops.log_format);
  const char *dir = args.dir, *address = args.address;
  const tool_strv colls = args.colls;
  int connect = args.dial, rv;
  unsigned long debounce_ms = args.debounce_ms;

  source_app app;
  memset(&app, 0, sizeof(app));
  rv = tool_transport_find(args.transport, &app.tp);
  if (rv == -2) {
    fprintf(stderr, "mcp-source: %s transport not built into this program "
                    "(use --transport %s)\n", args.transport,
            tool_transport_default());
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    return 2;
  }
  if (rv != 0) {
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    return usage_error("unknown transport %s (expected grpc or h2c)",
                       args.transport);
  }
  char why[600];
  if (tool_sec_check(&args.sec, app.tp->tls_check != NULL, app.tp->name,
                     !connect, address, why, sizeof(why)) != 0) {
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    return usage_error("%s", why);
  }
  if (tool_sec_acl(&args.sec)) {
    rv = tool_access_new(&app.access, app.tp, args.sec.allow.v,
                         args.sec.allow.n, args.sec.deny.v, args.sec.deny.n,
                         args.sec.access_list, why, sizeof(why));
    if (rv != 0) {
      tool_strv_free(&args.colls);
      tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
      if (rv == 2)
        return usage_error("%s", why);
      log_error("%s", why);
      return 1;
    }
  }

  tool_proc_init();
  status = 1;
  app.dir = dir;
  if (tool_sec_tls(&args.sec)) {
    const tool_tls_options t = {args.sec.tls_cert, args.sec.tls_key,
                                args.sec.tls_ca, args.sec.tls_server_name};
    if ((rv = app.tp->tls_check(&t, why, sizeof(why))) < 0) {
      log_error("TLS: %s", why[0] ? why : mcp_strerror(rv));
      goto out;
    }
  }

  mcp_store_options so;
  mcp_store_options_default(&so);
  so.rand = tool_rand;
  if ((rv = mcp_store_new(&app.store, &so)) < 0) {
    log_error("cannot create the store: %s", mcp_strerror(rv));
    goto out;
  }
  mcpcfg_options lo;
  mcpcfg_options_default(&lo);
  /* Even without --dir: a bad --descriptor-set or --kind is an error. */
  if (set_typed_bodies(&app, &args.schema, &lo) != 0)
    goto out;
  if (dir) {
    lo.report = on_report;
    lo.user_data = &app;
    if ((rv = mcpcfg_loader_new(&app.loader, dir, &lo)) < 0) {
      log_error("cannot create the loader: %s", mcpcfg_strerror(rv));
      goto out;
    }
  }
  for (size_t i = 0; i < colls.n; i++) {
    rv = app.loader ? mcpcfg_loader_declare(app.loader, colls.v[i])
                    : mcp_store_add_collection(app.store, colls.v[i]);
    if (rv < 0) {
      log_error("cannot declare collection %s: %s", colls.v[i],
                mcp_strerror(rv));
      goto out;
    }
  }
  if (app.loader) {
    /* The first load goes straight into the store: no thread yet. */
    if ((rv = mcpcfg_loader_scan(app.loader)) < 0) {
      log_error("cannot load %s: %s", dir, mcpcfg_strerror(rv));
      goto out;
    }
    apply_fn(app.store, app.tp->now(), &app);
    if (app.apply_pending)
      goto out;
  }
  size_t total = 0, ncoll = mcp_store_collection_count(app.store);
  for (size_t i = 0; i < ncoll; i++) {
    const char *c = mcp_store_collection_name(app.store, i);
    size_t n = mcp_store_count(app.store, c);
    log_info("collection %s: %zu resource%s", c, n, n == 1 ? "" : "s");
    total += n;
  }
  log_info("%zu resource%s in %zu collection%s, epoch %016llx", total,
           total == 1 ? "" : "s", ncoll, ncoll == 1 ? "" : "s",
           (unsigned long long)mcp_store_epoch(app.store));

  tool_ops_options oo = {.role = TOOL_OPS_SOURCE, .component = "mcp-source"};
  if (tool_ops_new(&app.ops, &oo) != 0) {
    log_error("out of memory");
    goto out;
  }
  mcp_source_options sopts;
  mcp_source_options_default(&sopts);
  sopts.store = app.store;
  sopts.on_event = on_core_event;
  sopts.user_data = &app;
  if (debounce_ms > 0) {
    sopts.debounce = (mcp_tstamp)debounce_ms * MCP_MILLISECONDS;
    sopts.max_delay = sopts.debounce * 10;
    if (sopts.max_delay < MCP_SECONDS)
      sopts.max_delay = MCP_SECONDS;
  }
  tool_endpoint_options eo = {
      .mode = connect ? TOOL_DIAL : TOOL_LISTEN,
      .address = address,
      .rand = tool_rand,
      .on_stream = on_stream,
      .user_data = &app,
      .http = tool_ops_http, /* h2c: the debug endpoints on its port */
      .http_user_data = app.ops,
      .tls = {args.sec.tls_cert, args.sec.tls_key, args.sec.tls_ca,
              args.sec.tls_server_name},
      .acl = tool_access_acl(app.access),
      .on_refused = on_refused,
  };
  uv_loop_init(&app.loop);
  if ((rv = app.tp->source_new(&app.ep, &app.loop, &eo, &sopts)) < 0) {
    log_error("cannot %s %s: %s", connect ? "dial" : "listen on", address,
              mcp_strerror(rv));
    app.ep = NULL;
    uv_run(&app.loop, UV_RUN_DEFAULT); /* whatever the transport left */
    uv_loop_close(&app.loop);
    goto out;
  }
  /* Before the address is logged: whoever waits for that line may signal
   * us at once. */
  uv_signal_init(&app.loop, &app.sigint);
  uv_signal_init(&app.loop, &app.sigterm);
  app.sigint.data = app.sigterm.data = &app;
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);
  tool_access_watch(app.access, &app.loop, app.ep, 0); /* and SIGHUP */
  if (connect) {
    log_info("dialing the ResourceSink at %s (%s)", address, app.tp->name);
  } else {
    char buf[300];
    bound_address(buf, sizeof(buf), address, app.tp->source_port(app.ep));
    log_info("serving ResourceSource on %s (%s)", buf, app.tp->name);
  }
  if (app.tp->tls_check) {
    tool_sec_describe(&args.sec, !connect, why, sizeof(why));
    log_info("security: %s", why);
    if (app.access) {
      size_t n = app.tp->acl_count(tool_access_acl(app.access));
      log_info("access list: %zu rule%s%s%s", n, n == 1 ? "" : "s",
               args.sec.access_list ? ", watching " : "",
               args.sec.access_list ? args.sec.access_list : "");
    }
    if (!connect && !tool_sec_tls(&args.sec) && !args.sec.allow_cleartext &&
        !tool_addr_is_loopback(address))
      log_warn("serving without TLS on %s, which is not loopback: peers are "
               "neither encrypted nor authenticated (give --tls-cert, "
               "--tls-key and --tls-ca; --allow-cleartext silences this)",
               address);
  }
  tool_ops_attach(app.ops, app.tp, app.ep);
  tool_ops_set_ready(app.ops, 1); /* the first load is in the store */

  if (app.loader) {
    uv_timer_init(&app.loop, &app.settle);
    uv_timer_init(&app.loop, &app.rescan);
    app.settle.data = app.rescan.data = &app;
    app.timers = 1;
    uv_timer_start(&app.rescan, on_rescan, RESCAN_MS, RESCAN_MS);
    if (tool_watch_new(&app.watch, &app.loop, dir, on_fs_change, &app) != 0)
      log_warn("cannot watch %s: out of memory (rescanning every %d ms)",
               dir, RESCAN_MS);
    else
      tool_watch_sync(app.watch);
  }
  /* Runs until a signal: stop() deletes the endpoint and closes the
   * handles, and the loop ends once the transport's are closed too. */
  int ops_failed = 0;
  if (args.ops.debug_listen) {
    char err[300], buf[300];
    if (tool_ops_listen(app.ops, &app.loop, args.ops.debug_listen, NULL, err,
                        sizeof(err)) != 0) {
      log_error("--debug-listen: %s", err);
      ops_failed = 1;
      stop(&app);
    } else {
      bound_address(buf, sizeof(buf), args.ops.debug_listen,
                    tool_ops_port(app.ops));
      log_info("debug endpoints on http://%s/", buf);
    }
  }
  uv_run(&app.loop, UV_RUN_DEFAULT);
  status = ops_failed ? 1 : 0;
  rv = uv_loop_close(&app.loop);
  if (rv != 0)
    log_debug("loop close: %s", uv_strerror(rv));

out:
  mcpcfg_loader_del(app.loader);
  mcp_store_del(app.store);
  tool_ops_del(app.ops);
  tool_access_del(app.access);
  tool_strv_free(&args.colls);
  tool_sec_args_free(&args.sec);
  tool_schema_args_free(&args.schema);
  mcp_schema_free(app.schema);
  free(app.kinds);
  if (status == 0)
    log_info("stopped");
  return status;
}
