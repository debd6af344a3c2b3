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
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "cli/args.h"
#include "cli/endpoint.h"
#include "loader/loader.h"
#include "etcd/etcd_publish.h"
#include "etcd/etcd_source.h"
#include <mcp/schema_istio.h>
#include "util/log.h"
#include "cli/proc.h"
#include "ops/ops.h"
#include "util/rand.h"
#include "cli/schema_args.h"
#include "transport/transport.h"
#include "util/peerlog.h"
#include "views/dest_view.h"
#include "views/disp_view.h"
#include "views/schema_swarmkit.h"
#include "mcp-source/watch.h"
#include <mcp/destination.h>
#include <mcp/dispatcher.h>
#include <mcp/xds.h>
#include <jansson.h>
#include <stdatomic.h>

#define DEFAULT_ADDRESS "127.0.0.1:9901"
#define DEFAULT_DEBOUNCE_MS 100
#define MAX_DEBOUNCE_MS 3600000ul
/* A file modified and not closed is read once its size and mtime have
 * not changed for this long (--write-settle; tools/mcp-source/watch.h). */
#define DEFAULT_WRITE_SETTLE_MS 1000
#define MAX_WRITE_SETTLE_MS 3600000ul
/* The periodic rescan: a walk every second while inotify may miss a
 * change (rescan_pace()), else every minute. A walk stat()s every file
 * (60 ms for 20,000) and a change that arrives meanwhile waits for it. */
#define RESCAN_MS 1000
#define RESCAN_SAFE_MS 60000
/* How often the protocols' counters reach the metrics. */
#define PROTO_TICK_MS 1000

/* The APIs mcp-source can serve (--api): the bit of each row of
 * |modules| (below), in its order. */
enum {
  API_MCP = 1u << 0,
  API_DEST = 1u << 1,
  API_DISP = 1u << 2,
  API_XDS = 1u << 3
};
#define NAPIS 4
#define MAX_SERVICES 8

typedef struct api_module api_module; /* a row of |modules| (below) */

typedef struct source_app {
  uv_loop_t loop;
  const tool_transport *tp;
  void *ep;
  tool_ops *ops; /* metrics and debug endpoints (tools/ops) */
  tool_access *access; /* --allow, --deny, --access-list; NULL: none */
  tool_tls_watch *tls_watch; /* a broken replacement of the TLS files is said */
  mcp_store *store;
  mcpcfg_loader *loader; /* NULL without --dir */
  mcp_schema *schema;     /* typed bodies: Istio's types, --descriptor-set */
  mcpcfg_kind_type *kinds; /* --kind, then Istio's kinds */
  size_t nkinds;          /* entries of |kinds| */
  size_t nbuiltin;        /* the last of them: Istio's and swarmkit's */
  int force_struct;       /* --body struct */
  const char *dir;
  tool_watch *watch;
  uv_timer_t rescan;
  uv_signal_t sigint, sigterm;
  int timers; /* rescan initialised */
  uint64_t rescan_every;   /* the walks' period now (ms) */
  uint64_t quiet_ticks;    /* seconds without a walk */
  unsigned long unstable;  /* mcpcfg_loader_unstable_reads() then */
  int stopping;
  int io_error;      /* the last scan could not read the directory */
  int apply_pending; /* the loader holds changes the store lacks */
  /* --etcd: the store mirrors an etcd prefix (tools/etcd/). */
  etcdsrc *etcd;
  uv_async_t etcd_async; /* the etcd thread has changes */
  int etcd_async_init;
  const tool_strv *colls; /* declared once the first etcd read is in */
  ops_metric *m_etcd_rev, *m_etcd_reloads, *m_etcd_failovers, *m_etcd_bad,
      *m_etcd_lag;
  etcdsrc_stats etcd_seen; /* the counters as last exported */
  int64_t etcd_applied; /* transport thread: the revision in the store */
  etcdpub *pub; /* --dir with --etcd: the directory into etcd */
  int offered;  /* the loader's first set went to the publisher */
  ops_metric *m_pub_txns, *m_pub_failures;
  etcdpub_stats pub_seen;
  /* Transport thread only. */
  int dial_failing; /* the status the failing dials end with, 0: none */
  /* The health of the configuration (registered on ops; any thread). */
  ops_metric *files_with_errors, *last_load, *resources, *unknown_kinds;
  ops_metric *m_being_written, *m_file_events; /* the watcher's */
  tool_watch_stats watch_seen; /* its counters as last exported */
  /* The engine's protocols (--api), beside MCP. Their view stores and
   * adapters are changed where the MCP store is, in the same update
   * (apply_fn, etcd_apply_fn); the modules run on the transport. */
  unsigned apis;
  mcp_store *dest_store, *disp_store;
  dest_view *dview;
  disp_view *pview;
  mcp_dest_server *dsrv;
  mcp_disp *disp;
  mcp_xds_server *xsrv; /* --api xds: serves |store| itself */
  ops_metric *m_xds_nacks;
  uint64_t xds_updates_seen;
  mcp_service_def services[MAX_SERVICES];
  size_t nservices;
  uv_timer_t proto_tick;
  int proto_tick_init;
  /* The modules' own timers (api_module.get_expiry): one timer at the
   * earliest deadline, looked at again when a module's stream opens or
   * ends (|expiry_async|, sent from the transport's thread). */
  uv_timer_t expiry;
  uv_async_t expiry_async;
  int expiry_init;
  /* Metrics per API (docs/tools.md): streams and updates. */
  ops_metric *m_api_streams, *m_api_open, *m_api_updates, *m_disp_sessions,
      *m_disp_status_updates, *m_disp_task_statuses, *m_view_bad;
  atomic_uint_fast64_t mcp_pushes; /* transport thread */
  /* Stream lines per peer: a few per window, then a summary (issue 23:
   * a rapid reset wrote two info lines per stream). */
  tool_peerlog *peerlog;
  uint64_t dest_updates_seen, disp_updates_seen, status_updates_seen,
      mcp_pushes_seen, view_bad_seen;
} source_app;

/* The flags' defaults are the modules' (mcp/destination.h,
 * mcp/dispatcher.h). */
static unsigned long dest_default_heartbeat_ms(void) {
  mcp_dest_server_options d;
  mcp_dest_server_options_default(&d);
  return (unsigned long)(d.heartbeat / MCP_MILLISECONDS);
}

static unsigned long disp_default_period_ms(void) {
  mcp_disp_options d;
  mcp_disp_options_default(&d);
  return (unsigned long)(d.heartbeat_period / MCP_MILLISECONDS);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mcp-source [--dir DIR] [--etcd ENDPOINTS] [--collection NAME]...\n"
          "                  [--listen HOST:PORT | --connect HOST:PORT]\n"
          "                  [--transport h2|grpc] [--debounce MS]\n"
          "                  [--write-settle MS]\n"
          "                  [--names kubernetes|permissive]\n"
          "                  [--log-level LEVEL] [--log-format text|json]\n"
          "                  [--debug-listen HOST:PORT]\n"
          TOOL_SEC_SYNOPSIS("                  ")
          "                  [--descriptor-set FILE]... [--kind G/V/KIND=MESSAGE]...\n"
          "                  [--body typed|struct]\n"
          "                  [--api LIST] [--dns-zone ZONE]\n"
          "                  [--destination-heartbeat MS]\n"
          "                  [--heartbeat-period MS] [--manager [ID=]ADDR]...\n"
          "                  [--manager-id ID] [--xds-require-identity PATTERN]\n"
          "\n"
          "Serves the YAML files below DIR as MCP collections and pushes every\n"
          "change of them; when listening, also Conduit's Destination API\n"
          "(Services and Endpoints) and swarmkit's Dispatcher (Tasks, Secrets,\n"
          "Configs and Nodes of apiVersion swarmkit.docker.com/v1).\n"
          "\n"
          "  --dir DIR          YAML files to serve, watched for changes\n"
          "  --etcd ENDPOINTS   serve what etcd holds (host:port,...): key\n"
          "                     PREFIX<collection>/<name> is one document;\n"
          "                     with --dir, publish DIR there first\n"
          "  --etcd-prefix P    the keys' prefix (default /mcp/)\n"
          "  --etcd-ca FILE, --etcd-cert FILE, --etcd-key FILE  TLS to etcd\n"
          "  --etcd-user USER --etcd-password-file FILE  etcd authentication\n"
          "  --collection NAME  serve NAME even when empty (repeatable)\n"
          "  --names RULES      resource names the files may use: kubernetes\n"
          "                     (default: each '/' segment a lowercase DNS-1123\n"
          "                     subdomain) or permissive (printable ASCII)\n"
          "  --listen HOST:PORT serve ResourceSource: sinks dial us\n"
          "                     (default " DEFAULT_ADDRESS "); unix:PATH for\n"
          "                     a unix socket, here and in --connect\n"
          "  --connect HOST:PORT dial a ResourceSink, reconnecting forever\n"
          "  --transport NAME   h2 (nghttp2; TLS with the --tls-* flags, else\n"
          "                     cleartext h2c; also named h2c) or grpc (gRPC\n"
          "                     core); default: h2 to listen, grpc to --connect.\n"
          "                     Expose only h2: a gRPC core 1.51 listener is\n"
          "                     still open to rapid reset, CONTINUATION floods\n"
          "                     and rapid reset after a TLS handshake\n"
          "                     (docs/security.md)\n"
          "  --debounce MS      push a change after a quiet period at once, and\n"
          "                     changes within MS milliseconds of it once the\n"
          "                     collection is quiet for MS (default %d; 0: at once)\n"
          "  --write-settle MS  --dir: a file modified but not closed is read\n"
          "                     once unchanged for MS milliseconds (default\n"
          "                     %d); closed or renamed files are read at once\n"
          , DEFAULT_DEBOUNCE_MS, DEFAULT_WRITE_SETTLE_MS);
  fputs(
          "  --log-level LEVEL  error, warn, info (default) or debug\n"
          "  --log-format FORMAT text (default) or json: one object per line\n"
          "  --debug-listen HOST:PORT serve /metrics, /debug/syncz, /healthz\n"
          "                     and /readyz over HTTP\n"
          "  --tls-cert FILE    our certificate chain (PEM)\n"
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
          "  --allow-cleartext  let h2 listen without TLS on an address that is\n"
          "                     not loopback\n"
          "  --version          print the library version and exit\n"
          "  --descriptor-set FILE  message types (a FileDescriptorSet: protoc\n"
          "                     --include_imports --descriptor_set_out=FILE) added\n"
          "                     to Istio 1.6's, built in; repeatable\n"
          "  --kind GROUP/VERSION/KIND=full.message.Name  documents of that kind\n"
          "                     have bodies of that message; repeatable\n",
        f);
  fprintf(f,
          "  --body typed|struct  typed (default): bodies of known kinds are their\n"
          "                     message; struct: google.protobuf.Struct everywhere\n"
          "  --api LIST         the APIs served, comma-separated, from mcp,\n"
          "                     destination, dispatcher, xds (default: all this\n"
          "                     program supports; --connect: mcp only)\n"
          "  --xds-require-identity PATTERN  xds: serve only peers with a\n"
          "                     verified identity matching PATTERN ('*' any\n"
          "                     run), e.g. spiffe://cluster.local/ns/istio-system/sa/*\n"
          "  --dns-zone ZONE    Destination: the cluster's DNS zone of\n"
          "                     <svc>.<ns>.svc.ZONE (default cluster.local)\n"
          "  --destination-heartbeat MS  Destination: an empty update after MS\n"
          "                     milliseconds without one (default %lu; 0: off)\n"
          "  --heartbeat-period MS  Dispatcher: the heartbeat period answered\n"
          "                     (default %lu); a node silent for 3 periods\n"
          "                     loses its session\n"
          "  --manager [ID=]ADDR  Dispatcher: a manager (node id and address)\n"
          "                     sent to agents, weight 10 (repeatable;\n"
          "                     default: this one, at the --listen address)\n"
          "  --manager-id ID    Dispatcher: this manager's node id in that\n"
          "                     default (default: the host name)\n"
          "  --max-streams-per-connection N  calls one connection may hold\n"
          "                     at once (default 1024; h2 refuses more with\n"
          "                     RESOURCE_EXHAUSTED, gRPC core queues them)\n"
          "  --stream-rate PER_S[,BURST]  new streams one peer (its\n"
          "                     verified identity, else its address) may\n"
          "                     open: PER_S a second after a burst of BURST\n"
          "                     (default 100,100); a stream past it waits\n"
          "                     for a token, or past a quarter of the burst\n"
          "                     waiting is refused RESOURCE_EXHAUSTED; off:\n"
          "                     no per-peer limit\n"
          "  --tls-handshakes-per-peer N  h2 over TLS: handshakes one\n"
          "                     address may have in progress (default 32;\n"
          "                     a connection beyond is closed at once)\n"
          "  --help             this text\n"
          "\n"
          "Exit status: 0 after SIGINT or SIGTERM, 1 on a runtime failure,\n"
          "2 on a usage error.\n",
          dest_default_heartbeat_ms(), disp_default_period_ms());
}

#define usage_error(...) tool_usage_error("mcp-source", usage, __VA_ARGS__)

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
    atomic_fetch_add(&a->mcp_pushes, 1);
    tool_peerlog_push(a->peerlog, ev->collection, ev->bytes, a->tp->now());
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

/* A call refused before it became a stream (the transport's thread). */
static void on_refused(const tool_stream_info *info, void *ud) {
  source_app *a = ud;
  tool_ops_refused(a->ops, info);
  tool_ops_log_refused(info);
}

static const char *api_of(const tool_stream_info *info);

static int stream_of_timed_module(const tool_stream_info *info);
static int stream_of_mcp(const tool_stream_info *info);

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  source_app *a = ud;
  TOOL_LOG_CONTEXT(.stream = info->id, .peer = info->peer);
  if (!info->dialed) {
    const char *lv[] = {api_of(info)};
    if (opened)
      ops_metric_add(a->m_api_streams, lv, 1);
    ops_metric_add(a->m_api_open, lv, opened ? 1 : -1);
  }
  if (!stream_of_mcp(info)) {
    /* A call of a module with timers may have moved its deadline (a
     * session registered, a heartbeat): look again (run_expiry()). */
    if (a->expiry_init && stream_of_timed_module(info))
      uv_async_send(&a->expiry_async);
    /* Another protocol's call: the MCP stream metrics are not its. */
    /* Unary calls (Heartbeat every period) and clean ends: debug. */
    int quiet = opened || info->status == 0 ||
                !strcmp(info->api, "heartbeat") ||
                !strcmp(info->api, "update_task_status");
    if (opened)
      log_debug("stream %llu: %s call (%s) from %s",
                (unsigned long long)info->id, info->api, api_of(info),
                info->peer);
    else
      tool_log(quiet ? TOOL_LOG_DEBUG : TOOL_LOG_INFO,
               "stream %llu: %s call (%s) from %s closed: status %d%s%s",
               (unsigned long long)info->id, info->api, api_of(info),
               info->peer, info->status, info->details[0] ? ": " : "",
               info->details);
    return;
  }
  tool_ops_stream(a->ops, opened, info);
  /* Accepted streams log a few lines per peer and window (peerlog.h). */
  int reset = !opened && info->status == 1; /* CANCELLED */
  int quiet = !info->dialed &&
              !tool_peerlog_stream(
                  a->peerlog, info->peer, opened,
                  (reset ? TOOL_PEERLOG_RESET : 0) |
                      (reset && info->received ? TOOL_PEERLOG_ASKED : 0),
                  a->tp->now());
  if (opened) {
    if (info->dialed)
      log_debug("stream %llu: dialing %s", (unsigned long long)info->id,
                info->peer);
    else if (quiet)
      log_debug("stream %llu: sink %s connected", (unsigned long long)info->id,
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
  tool_log(quiet ? TOOL_LOG_DEBUG : TOOL_LOG_INFO,
           "stream %llu: %s closed: status %d%s%s",
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

/* The loader's news: a likely typo in a kind (a warning, counted), a
 * broken file fixed (info: the user sees the error is gone). */
static void on_note(int what, const char *path, unsigned long line,
                    const char *message, void *ud) {
  source_app *a = ud;
  tool_log_level level = TOOL_LOG_INFO;
  if (what == MCPCFG_NOTE_UNKNOWN_KIND) {
    level = TOOL_LOG_WARN;
    ops_metric_inc(a->unknown_kinds, NULL);
  }
  if (line)
    tool_log(level, "%s:%lu: %s", path, line, message);
  else
    tool_log(level, "%s: %s", path, message);
}

/* The configuration metrics (docs/operations.md); NULL families (no
 * registry) are no-ops. */
static void register_config_metrics(source_app *a) {
  ops_metrics *m = tool_ops_metrics(a->ops);
  static const char *const coll[] = {"collection"};
  a->files_with_errors = ops_metrics_gauge(
      m, "mcp_config_files_with_errors",
      "Files under --dir whose last read reported a problem (unreadable, "
      "not YAML, a document skipped); they serve their last good content.",
      NULL, 0);
  a->last_load = ops_metrics_gauge(
      m, "mcp_config_last_load_success_timestamp_seconds",
      "Unix time of the last scan of --dir that read the directory and left "
      "every change in the store, or a second in which inotify saw every "
      "change and the store held them (about every second).",
      NULL, 0);
  a->resources = ops_metrics_gauge(
      m, "mcp_config_resources",
      "Resources served, per collection, as of the last load.", coll, 1);
  a->unknown_kinds = ops_metrics_counter(
      m, "mcp_config_unknown_kinds_total",
      "Documents read whose kind is none of its built-in group's (a typo "
      "such as VirtualServce), served as an untyped collection.",
      NULL, 0);
  static const char *const ev[] = {"event"};
  a->m_being_written = ops_metrics_gauge(
      m, "mcp_config_files_being_written",
      "Files under --dir modified and not yet closed: not read until their "
      "writer closes or renames them, or they stay unchanged for "
      "--write-settle.",
      NULL, 0);
  a->m_file_events = ops_metrics_counter(
      m, "mcp_config_file_events_total",
      "File events of --dir by what they did: closed (read at once), "
      "renamed (read at once), modified (held until closed or settled), "
      "settled (read after --write-settle without a close), rescan (a "
      "walk of the whole directory).",
      ev, 1);
}

/* The watcher's counters into the metrics. */
static void watch_metrics(source_app *a) {
  if (!a->watch)
    return;
  tool_watch_stats st;
  tool_watch_get_stats(a->watch, &st);
  static const char *const names[] = {"closed", "renamed", "modified",
                                      "settled", "rescan"};
  unsigned long long now[] = {st.closed, st.moved, st.modified, st.settled,
                              st.rescans},
                     was[] = {a->watch_seen.closed, a->watch_seen.moved,
                              a->watch_seen.modified, a->watch_seen.settled,
                              a->watch_seen.rescans};
  for (size_t i = 0; i < sizeof now / sizeof *now; i++) {
    const char *lv[] = {names[i]};
    if (now[i] != was[i])
      ops_metric_add(a->m_file_events, lv, (double)(now[i] - was[i]));
  }
  ops_metric_set(a->m_being_written, NULL, (double)st.writing);
  a->watch_seen = st;
}

/* A scan read the directory and the store holds all it found. */
static void loaded(source_app *a) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  ops_metric_set(a->last_load, NULL,
                 (double)now.tv_sec + (double)now.tv_nsec / 1e9);
}

/* Where the stores live, in the update that changed the MCP store: the
 * view stores of the other APIs follow it (only the Services and nodes a
 * change touches are recomputed). A failure (memory) is finished by the
 * next update. */
/* Logs what a view's sync did: |skipped| inputs (|inputs|) skipped since
 * the last sync (the last one: |why|), the sync's failure (|rv| < 0), or
 * the |rv| |units| it |did|. */
static void view_synced(const char *view, int rv, uint64_t skipped,
                        const char *inputs, const char *why,
                        const char *units, const char *did) {
  if (skipped)
    log_warn("%s view: %llu %s%s skipped, the last: %s", view,
             (unsigned long long)skipped, inputs, skipped == 1 ? "" : "s",
             why);
  if (rv < 0)
    log_error("%s view: %s (finished at the next change)", view,
              mcp_strerror(rv));
  else if (rv > 0)
    log_debug("%s view: %d %s%s %s", view, rv, units, rv == 1 ? "" : "s",
              did);
}

static void views_sync(source_app *a, mcp_tstamp ts) {
  if (a->dview) {
    dest_view_stats before, after;
    dest_view_get_stats(a->dview, &before);
    int rv = dest_view_sync(a->dview, ts);
    dest_view_get_stats(a->dview, &after);
    view_synced("Destination", rv,
                after.bad_bodies + after.bad_addresses - before.bad_bodies -
                    before.bad_addresses,
                "input", dest_view_why(a->dview), "service", "recomputed");
  }
  if (a->pview) {
    disp_view_stats before, after;
    disp_view_get_stats(a->pview, &before);
    int rv = disp_view_sync(a->pview, ts);
    disp_view_get_stats(a->pview, &after);
    view_synced("Dispatcher", rv, after.bad_bodies - before.bad_bodies,
                "object", disp_view_why(a->pview), "collection", "rewritten");
  }
}

/* Where the store lives (or on the main thread before the endpoint
 * exists): the loader's current set into the store. */
static void apply_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  source_app *a = ud;
  size_t n = mcpcfg_loader_collection_count(a->loader);
  int rv = mcpcfg_loader_apply(a->loader, store, ts);
  views_sync(a, ts); /* also what an earlier failure left */
  if (rv < 0) {
    log_error("cannot update the store: %s (retrying at the next scan)",
              mcpcfg_strerror(rv));
    return;
  }
  a->apply_pending = 0;
  loaded(a);
  if (rv == 0)
    return;
  for (size_t i = 0; i < n; i++) {
    const char *c = mcpcfg_loader_collection_name(a->loader, i);
    const char *lv[] = {c};
    ops_metric_set(a->resources, lv, (double)mcp_store_count(store, c));
    log_debug("collection %s: %zu resources, generation %llu", c,
              mcp_store_count(store, c),
              (unsigned long long)mcp_store_generation(store, c));
  }
  log_info("%d collection%s changed", rv, rv == 1 ? "" : "s");
}

/* After a scan or an update (|rv| is its result): into the store. */
static void into_store(source_app *a, int rv) {
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
  ops_metric_set(a->files_with_errors, NULL,
                 (double)mcpcfg_loader_files_with_errors(a->loader));
  if (a->pub) { /* published, then served from etcd like any replica */
    if (rv > 0 || !a->offered) {
      int n = etcdpub_offer(a->pub, a->loader);
      if (n < 0)
        log_error("cannot publish into etcd: %s (retrying at the next "
                  "scan)", mcpetcd_strerror(n));
      else
        a->offered = 1;
      if (n > 0)
        log_info("publishing %d change%s into etcd", n, n == 1 ? "" : "s");
    }
    return;
  }
  if (rv > 0)
    a->apply_pending = 1;
  if (!a->apply_pending) {
    loaded(a);
    return;
  }
  rv = a->tp->source_apply(a->ep, apply_fn, a);
  if (rv < 0)
    log_error("cannot update the store: %s", mcp_strerror(rv));
}

/* Sets the periodic rescan's period from what the last walk and read
 * found: a second while inotify may miss a change, a minute otherwise. */
static void rescan_pace(source_app *a) {
  if (!a->timers || a->stopping)
    return;
  char buf[160];
  const char *why = NULL;
  unsigned long unstable = mcpcfg_loader_unstable_reads(a->loader);
  if (!a->watch)
    why = "no inotify watch";
  else if (a->io_error)
    why = "the directory cannot be read";
  else if (unstable != a->unstable)
    why = "a file changed while it was read";
  else
    why = tool_watch_blind(a->watch, buf, sizeof buf);
  a->unstable = unstable;
  uint64_t every = why ? RESCAN_MS : RESCAN_SAFE_MS;
  if (every == a->rescan_every)
    return;
  a->rescan_every = every;
  if (why)
    log_info("rescanning %s every %d ms: %s", a->dir, RESCAN_MS, why);
  else
    log_info("rescanning %s every %d s: inotify sees every change", a->dir,
             RESCAN_SAFE_MS / 1000);
}

static void scanned(source_app *a, int rv) {
  into_store(a, rv);
  rescan_pace(a);
}

/* A walk of the whole directory. */
static void scan(source_app *a) {
  a->quiet_ticks = 0;
  /* New directories are watched before the loader walks them: a file
   * made in one between the loader's walk and its watch would be seen by
   * neither (until the next periodic walk). */
  if (a->watch)
    tool_watch_sync(a->watch);
  int rv = mcpcfg_loader_scan(a->loader);
  if (a->watch)
    watch_metrics(a);
  scanned(a, rv);
}

/* ---- etcd (--etcd) ---- */

/* Where the store lives: the changes the etcd thread queued. */
static void etcd_apply_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  source_app *a = ud;
  int rv = etcdsrc_apply(a->etcd, store, ts);
  if (rv < 0)
    log_error("cannot update the store: %s (retrying at the next change)",
              mcp_strerror(rv));
  views_sync(a, ts);
  etcdsrc_stats st;
  etcdsrc_stats_get(a->etcd, &st);
  a->etcd_applied = st.applied;
  if (st.loaded && !a->etcd_seen.loaded) /* now they exist, empty or not */
    for (size_t i = 0; i < a->colls->n; i++)
      if (mcp_store_add_collection(store, a->colls->v[i]) < 0)
        log_error("cannot declare collection %s", a->colls->v[i]);
}

/* The transport thread: versions are etcd revisions; a resuming sink that
 * holds one this replica has not applied yet waits (core, version_reached)
 * rather than being taken back in time. */
static int etcd_version_reached(const char *collection, const char *version,
                                void *ud) {
  (void)collection;
  const source_app *a = ud;
  char *end;
  errno = 0;
  long long v = strtoll(version, &end, 10);
  if (end == version || *end || errno || v < 0)
    return 1; /* not a revision: not comparable */
  return v <= a->etcd_applied;
}

static void etcd_export(source_app *a, const etcdsrc_stats *st) {
  ops_metric_set(a->m_etcd_rev, NULL, (double)st->applied);
  ops_metric_add(a->m_etcd_reloads, NULL,
                 (double)(st->reloads - a->etcd_seen.reloads));
  ops_metric_add(a->m_etcd_failovers, NULL,
                 (double)(st->failovers - a->etcd_seen.failovers));
  ops_metric_add(a->m_etcd_bad, NULL,
                 (double)(st->bad_documents - a->etcd_seen.bad_documents));
  ops_metric_set(a->m_etcd_lag, NULL, st->lag_seconds);
  if (a->pub) {
    etcdpub_stats ps;
    etcdpub_stats_get(a->pub, &ps);
    ops_metric_add(a->m_pub_txns, NULL, (double)(ps.txns - a->pub_seen.txns));
    ops_metric_add(a->m_pub_failures, NULL,
                   (double)(ps.failures - a->pub_seen.failures));
    a->pub_seen = ps;
  }
}

static void on_etcd_async(uv_async_t *h) {
  source_app *a = h->data;
  if (a->stopping || !a->etcd)
    return;
  int rv = a->tp->source_apply(a->ep, etcd_apply_fn, a);
  if (rv < 0)
    log_error("cannot update the store: %s", mcp_strerror(rv));
  etcdsrc_stats st;
  etcdsrc_stats_get(a->etcd, &st);
  etcd_export(a, &st);
  if (st.loaded && !a->etcd_seen.loaded) {
    log_info("etcd revision %lld is served", (long long)st.applied);
    tool_ops_set_ready(a->ops, 1);
  }
  a->etcd_seen = st;
}

/* The etcd thread: changes are queued. */
static void etcd_notify(void *ud) {
  source_app *a = ud;
  uv_async_send(&a->etcd_async);
}

static void etcd_log(int error, const char *message, void *ud) {
  (void)ud;
  if (error)
    log_warn("etcd: %s", message);
  else
    log_info("etcd: %s", message);
}

static void etcd_metrics(source_app *a) {
  ops_metrics *m = tool_ops_metrics(a->ops);
  a->m_etcd_rev = ops_metrics_gauge(
      m, "mcp_etcd_revision", "etcd revision the served state reflects",
      NULL, 0);
  a->m_etcd_reloads = ops_metrics_counter(
      m, "mcp_etcd_reloads_total",
      "reads of the whole prefix after the first (compaction, lost watch)",
      NULL, 0);
  a->m_etcd_failovers = ops_metrics_counter(
      m, "mcp_etcd_failovers_total", "moves to another etcd endpoint", NULL,
      0);
  a->m_etcd_bad = ops_metrics_counter(
      m, "mcp_etcd_bad_documents_total",
      "etcd values skipped: not a document, or at the wrong key", NULL, 0);
  a->m_pub_txns = ops_metrics_counter(
      m, "mcp_etcd_publish_txns_total",
      "transactions that published the directory into etcd (--dir --etcd)",
      NULL, 0);
  a->m_pub_failures = ops_metrics_counter(
      m, "mcp_etcd_publish_failures_total",
      "failed attempts to publish the directory into etcd (retried)", NULL,
      0);
  a->m_etcd_lag = ops_metrics_gauge(
      m, "mcp_etcd_watch_lag_seconds",
      "from receiving the last change from etcd to its store update", NULL,
      0);
}

/* ---- the loop (main thread) ---- */

/* Each second: a walk when one is due; else, with inotify seeing every
 * change and all of them in the store, the served content is current as
 * of now (mcp_config_last_load_success_timestamp_seconds moves as it did
 * with a walk each second). */
static void on_rescan(uv_timer_t *t) {
  source_app *a = t->data;
  if (++a->quiet_ticks >= a->rescan_every / RESCAN_MS) {
    a->quiet_ticks = 0;
    scan(a);
  } else if (!a->apply_pending && !a->io_error && !a->pub) {
    loaded(a);
  }
}

/* The watcher's batch: the files its writers are done with are read at
 * once, alone; what only a walk can tell walks. */
static void on_fs_change(const char *const *paths, size_t n, int rescan,
                         void *ud) {
  source_app *a = ud;
  if (a->stopping)
    return;
  if (rescan) {
    scan(a);
    return;
  }
  watch_metrics(a);
  if (n)
    scanned(a, mcpcfg_loader_update(a->loader, paths, n));
}

/* The loader's hold: a file being written is not read. */
static int being_written(const char *path, void *ud) {
  source_app *a = ud;
  return a->watch && tool_watch_writing(a->watch, path);
}

/* Stops the endpoint (the store is ours again when it returns) and closes
 * every handle: uv_run() then returns. */
static void expiry_close(source_app *a);

static void stop(source_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  etcdpub_stop(a->pub);
  a->pub = NULL;
  etcdsrc_stop(a->etcd); /* no more notifications once it returns */
  a->etcd = NULL;
  if (a->etcd_async_init)
    uv_close((uv_handle_t *)&a->etcd_async, NULL);
  tool_ops_close(a->ops);
  tool_access_close(a->access);
  tool_tls_watch_close(a->tls_watch);
  a->tls_watch = NULL;
  if (a->proto_tick_init)
    uv_close((uv_handle_t *)&a->proto_tick, NULL);
  a->proto_tick_init = 0;
  a->tp->source_del(a->ep);
  a->ep = NULL;
  expiry_close(a); /* after source_del(): on_stream no longer runs */
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
  if (a->timers)
    uv_close((uv_handle_t *)&a->rescan, NULL);
  tool_watch_close(a->watch);
  a->watch = NULL;
}

static void on_signal(uv_signal_t *h, int signum) {
  source_app *a = h->data;
  log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
  stop(a);
}

/* "HOST:PORT" with the port replaced by |port| (for port 0). */
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
  /* swarmkit's types, built in too: the Dispatcher's objects are typed
   * bodies (a --descriptor-set holding the same files is a no-op). */
  size_t nsk;
  const tool_swarmkit_kind *sk = tool_swarmkit_kinds(&nsk);
  mcp_schema_error serr;
  if (tool_schema_add_swarmkit(a->schema, &serr) < 0) {
    log_error("swarmkit's types: %s", serr.message);
    return -1;
  }
  if (!(a->kinds = calloc(sa->nkinds + ni + nsk, sizeof(*a->kinds)))) {
    log_error("out of memory");
    return -1;
  }
  for (size_t i = 0; i < sa->nkinds; i++)
    a->kinds[i] = (mcpcfg_kind_type){sa->kinds[i].api_version,
                                     sa->kinds[i].kind, sa->kinds[i].message};
  for (size_t i = 0; i < ni; i++)
    a->kinds[sa->nkinds + i] = (mcpcfg_kind_type){
        ik[i].api_version, ik[i].kind, ik[i].message};
  for (size_t i = 0; i < nsk; i++)
    a->kinds[sa->nkinds + ni + i] =
        (mcpcfg_kind_type){sk[i].api_version, sk[i].kind, sk[i].message};
  lo->schema = a->schema;
  lo->kinds = a->kinds;
  lo->nkinds = a->nkinds = sa->nkinds + ni + nsk;
  lo->force_struct = a->force_struct = sa->body_struct;
  /* Istio's and swarmkit's groups are built in: another kind in them is a
   * typo the loader warns about (MCPCFG_NOTE_UNKNOWN_KIND). */
  lo->builtin = a->kinds + sa->nkinds;
  lo->nbuiltin = a->nbuiltin = ni + nsk;
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
  const char *etcd, *etcd_prefix, *etcd_ca, *etcd_cert, *etcd_key,
      *etcd_user, *etcd_password_file;
  int dial;
  mcp_name_rules names; /* --names */
  unsigned long debounce_ms;
  unsigned long write_settle_ms; /* --write-settle */
  tool_log_level level;
  tool_strv colls;
  tool_ops_args ops; /* --debug-listen, --log-format */
  tool_sec_args sec; /* --tls-*, --allow, --deny, --access-list */
  tool_schema_args schema; /* --descriptor-set, --kind, --body */
  unsigned apis;           /* --api; 0: the default */
  const char *dns_zone;    /* --dns-zone */
  unsigned long dest_heartbeat_ms, heartbeat_period_ms;
  tool_strv managers;      /* --manager, as given ([ID=]ADDR) */
  const char *manager_id;  /* --manager-id (argv) */
  const char *xds_require_identity; /* --xds-require-identity */
} source_args;

/*
 * One protocol mcp-source serves (--api): a row of |modules|. Adding a
 * protocol adds a row (its bit in the enum above, and its functions);
 * the program's generic code (--api, metrics, setup, timers) loops over
 * the rows. The protocol's rules and defaults stay in its module.
 */
struct api_module {
  const char *name; /* in --api, the logs and the metrics' api label */
  /* 1: served as services beside MCP (transports with services only);
   * 0: MCP itself, which every transport serves. */
  int beside_mcp;
  /* The names its streams carry (mcp_stream_ops.name, tool_stream_info.
   * api), NULL-terminated. */
  const char *const *streams;
  /* Makes the module, its view and its services before the first load
   * (main thread, no transport yet): 0, or -1 (logged). NULL: MCP's
   * sessions are made by the transport. */
  int (*setup)(source_app *a, const source_args *o);
  /* The "serving ..." line, once listening (|addr| the bound address). */
  void (*log_serving)(const source_app *a, const source_args *o,
                      const char *addr);
  /* Module-wide timers, called where the module lives (the transport's
   * thread): its next deadline (MCP_TSTAMP_MAX: none) and acting on it.
   * NULL: only its streams have timers, which the transport drives
   * (mcp_stream_get_expiry()). */
  mcp_tstamp (*get_expiry)(const source_app *a);
  void (*handle_expiry)(source_app *a, mcp_tstamp ts);
};

static const api_module modules[NAPIS];

/* The APIs this build can serve on |tp|. */
static unsigned apis_supported(const tool_transport *tp) {
  unsigned s = 0;
  for (unsigned i = 0; i < NAPIS; i++)
    if (!modules[i].beside_mcp || tp->services)
      s |= 1u << i;
  return s;
}

/* "mcp,destination" -> API_* bits; 0 with |*bad| the part not known. */
static unsigned parse_apis(const char *list, char *bad, size_t badlen) {
  unsigned apis = 0;
  const char *p = list;
  for (;;) {
    size_t n = strcspn(p, ",");
    unsigned i = 0;
    while (i < NAPIS && (strlen(modules[i].name) != n ||
                         strncmp(p, modules[i].name, n) != 0))
      i++;
    if (i == NAPIS) {
      snprintf(bad, badlen, "%.*s", (int)(n > 64 ? 64 : n), p);
      return 0;
    }
    apis |= 1u << i;
    if (!p[n])
      return apis;
    p += n + 1;
  }
}

static const char *api_names(unsigned apis, char *buf, size_t len) {
  size_t k = 0;
  if (len)
    buf[0] = '\0';
  for (int i = 0; i < NAPIS; i++)
    if ((apis & (1u << i)) && k < len)
      k += (size_t)snprintf(buf + k, len - k, "%s%s", k ? "," : "",
                            modules[i].name);
  return buf;
}

/* Returns -1 to run, or the exit status (0 for --help, 2 for a usage
 * error, reported). */
static int parse_args(int argc, char **argv, source_args *o) {
  const char *listen = NULL, *connect = NULL, *level = "info", *v = NULL;
  o->transport = NULL; /* by the role and the flags, below */
  o->debounce_ms = DEFAULT_DEBOUNCE_MS;
  o->write_settle_ms = DEFAULT_WRITE_SETTLE_MS;
  o->names = MCP_NAMES_KUBERNETES;
  o->dest_heartbeat_ms = dest_default_heartbeat_ms();
  o->heartbeat_period_ms = disp_default_period_ms();
  for (int i = 1; i < argc; i++) {
    int rv;
    if (tool_arg_flag(argv, i, "--version")) {
      printf("mcp-source %s\n", mcp_version());
      return 0;
    }
    if (tool_arg_flag(argv, i, "--help") || tool_arg_flag(argv, i, "-h")) {
      usage(stdout);
      return 0;
    }
#define VALUE(name) ((rv = tool_arg_value(argc, argv, &i, name, &v)) != 0)
    if (VALUE("--dir")) {
      if (rv > 0 && !v[0])
        return usage_error("--dir needs a directory");
      o->dir = v;
    } else if (VALUE("--etcd")) {
      if (rv > 0 && !v[0])
        return usage_error("--etcd needs endpoints (host:port,...)");
      o->etcd = v;
    } else if (VALUE("--etcd-prefix")) {
      if (rv > 0 && !v[0])
        return usage_error("--etcd-prefix must not be empty");
      o->etcd_prefix = v;
    } else if (VALUE("--etcd-ca")) {
      o->etcd_ca = v;
    } else if (VALUE("--etcd-cert")) {
      o->etcd_cert = v;
    } else if (VALUE("--etcd-key")) {
      o->etcd_key = v;
    } else if (VALUE("--etcd-user")) {
      o->etcd_user = v;
    } else if (VALUE("--etcd-password-file")) {
      o->etcd_password_file = v;
    } else if (VALUE("--collection")) {
      if (rv > 0 && !v[0])
        return usage_error("--collection needs a name");
      if (rv > 0 && tool_strv_add(&o->colls, v, 1) != 0) {
        fprintf(stderr, "mcp-source: out of memory\n");
        return 1;
      }
    } else if (VALUE("--names")) {
      if (rv > 0 && !strcmp(v, "kubernetes"))
        o->names = MCP_NAMES_KUBERNETES;
      else if (rv > 0 && !strcmp(v, "permissive"))
        o->names = MCP_NAMES_LENIENT;
      else if (rv > 0)
        return usage_error("--names: expected kubernetes or permissive, "
                           "not %s", v);
    } else if (VALUE("--listen")) {
      listen = v;
    } else if (VALUE("--connect")) {
      connect = v;
    } else if (VALUE("--transport")) {
      o->transport = v;
    } else if (VALUE("--debounce")) {
      if (rv > 0 && tool_parse_ulong(v, MAX_DEBOUNCE_MS, &o->debounce_ms) != 0)
        return usage_error("--debounce: not a number of milliseconds: %s", v);
    } else if (VALUE("--write-settle")) {
      if (rv > 0 && (tool_parse_ulong(v, MAX_WRITE_SETTLE_MS,
                                      &o->write_settle_ms) != 0 ||
                     o->write_settle_ms == 0))
        return usage_error("--write-settle: not a number of milliseconds "
                           "from 1 to %lu: %s", MAX_WRITE_SETTLE_MS, v);
    } else if (VALUE("--log-level")) {
      level = v;
    } else if (VALUE("--api")) {
      char bad[80];
      if (rv > 0 && !(o->apis = parse_apis(v, bad, sizeof bad)))
        return usage_error("--api: expected a comma-separated list of mcp, "
                           "destination, dispatcher, xds; not '%s'", bad);
    } else if (VALUE("--xds-require-identity")) {
      if (rv > 0 && !v[0])
        return usage_error("--xds-require-identity: an empty pattern");
      o->xds_require_identity = v;
    } else if (VALUE("--dns-zone")) {
      if (rv > 0 && (!v[0] || strspn(v, "abcdefghijklmnopqrstuvwxyz"
                                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789.-") != strlen(v)))
        return usage_error("--dns-zone: not a DNS name: '%s'", v);
      o->dns_zone = v;
    } else if (VALUE("--destination-heartbeat")) {
      if (rv > 0 &&
          tool_parse_ulong(v, MAX_DEBOUNCE_MS, &o->dest_heartbeat_ms) != 0)
        return usage_error("--destination-heartbeat: not a number of "
                           "milliseconds: %s", v);
    } else if (VALUE("--heartbeat-period")) {
      if (rv > 0 &&
          (tool_parse_ulong(v, MAX_DEBOUNCE_MS, &o->heartbeat_period_ms) !=
               0 ||
           o->heartbeat_period_ms == 0))
        return usage_error("--heartbeat-period: not a positive number of "
                           "milliseconds: %s", v);
    } else if (VALUE("--manager-id")) {
      if (rv > 0 && !*v)
        return usage_error("--manager-id: empty");
      if (rv > 0)
        o->manager_id = v;
    } else if (VALUE("--manager")) {
      const char *why;
      const char *eq = rv > 0 ? strchr(v, '=') : NULL;
      if (eq == v)
        return usage_error("--manager %s: an empty node id before '='", v);
      if (rv > 0 && tool_check_hostport(eq ? eq + 1 : v, 1, &why) != 0)
        return usage_error("--manager %s: %s", v, why);
      if (rv > 0 && tool_strv_add(&o->managers, v, 1) != 0) {
        fprintf(stderr, "mcp-source: out of memory\n");
        return 1;
      }
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
      return tool_unknown_arg("mcp-source", usage, "unknown argument",
                              argv[i]);
    }
#undef VALUE
    if (rv < 0) /* a value is missing: reported */
      return tool_see_help("mcp-source");
  }
  if (tool_log_parse_level(level, &o->level) != 0)
    return usage_error("--log-level: expected error, warn, info or debug, "
                       "not %s", level);
  if (listen && connect)
    return usage_error("--listen and --connect exclude each other");
  if (!o->etcd && (o->etcd_prefix || o->etcd_ca || o->etcd_cert ||
                   o->etcd_key || o->etcd_user || o->etcd_password_file))
    return usage_error("the --etcd-* options need --etcd");
  if (!o->etcd_cert != !o->etcd_key)
    return usage_error("--etcd-cert and --etcd-key go together");
  if ((o->etcd_cert || o->etcd_key) && !o->etcd_ca)
    return usage_error("--etcd-cert needs --etcd-ca");
  if (!o->etcd_user != !o->etcd_password_file)
    return usage_error("--etcd-user and --etcd-password-file go together");
  o->dial = connect != NULL;
  o->address = connect ? connect : listen ? listen : DEFAULT_ADDRESS;
  if (!o->transport) {
    const tool_transport *tp;
    o->transport = tool_sec_default_transport(&o->sec, !o->dial);
    if (tool_transport_find(o->transport, &tp) != 0)
      o->transport = tool_transport_default();
  }
  const char *why;
  if (tool_check_hostport(o->address, o->dial ? 1 : 0, &why) != 0)
    return usage_error("%s %s: %s", o->dial ? "--connect" : "--listen",
                       o->address, why);
  return -1;
}

/* Reads the etcd password: the first line of |path|, at most 1 KiB. */
static char *read_password(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    log_error("--etcd-password-file %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = calloc(1, 1026);
  if (buf && !fgets(buf, 1026, f) && ferror(f)) {
    log_error("--etcd-password-file %s: cannot read it", path);
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    size_t n = strcspn(buf, "\r\n");
    if (n > 1024) {
      log_error("--etcd-password-file %s: longer than 1024 bytes", path);
      free(buf);
      return NULL;
    }
    buf[n] = '\0';
  }
  return buf;
}

/* Starts mirroring etcd into the store (main thread, endpoint running):
 * not ready until the first read is in. */
static int start_etcd(source_app *a, const source_args *o) {
  char *password = NULL;
  if (o->etcd_password_file && !(password = read_password(o->etcd_password_file)))
    return -1;
  uv_async_init(&a->loop, &a->etcd_async, on_etcd_async);
  a->etcd_async.data = a;
  a->etcd_async_init = 1;
  mcpcfg_options lo;
  mcpcfg_options_default(&lo);
  lo.report = on_report;
  lo.note = on_note;
  lo.user_data = a;
  lo.name_rules = o->names;
  /* Typed bodies as for files (set_typed_bodies()). */
  lo.schema = a->schema;
  lo.kinds = a->kinds;
  lo.nkinds = a->nkinds;
  lo.force_struct = a->force_struct;
  lo.builtin = a->kinds + (a->nkinds - a->nbuiltin);
  lo.nbuiltin = a->nbuiltin;
  etcdsrc_options eo = {
      .etcd = {.endpoints = o->etcd, .ca_file = o->etcd_ca,
               .cert_file = o->etcd_cert, .key_file = o->etcd_key,
               .user = o->etcd_user, .password = password},
      .prefix = o->etcd_prefix,
      .parse = &lo,
      .notify = etcd_notify,
      .log = etcd_log,
      .user_data = a,
  };
  char err[300] = "";
  int rv = etcdsrc_start(&a->etcd, &eo, err, sizeof(err));
  if (rv == 0 && a->loader &&
      (rv = etcdpub_start(&a->pub, &eo.etcd, o->etcd_prefix, etcd_log, a,
                          err, sizeof(err))) == 0) {
    log_info("publishing %s into etcd under %s", o->dir,
             o->etcd_prefix ? o->etcd_prefix : "/mcp/");
    scan(a); /* the first offer: the whole directory */
  }
  if (password) {
    memset(password, 0, strlen(password));
    free(password);
  }
  if (rv < 0) {
    log_error("--etcd: %s", err[0] ? err : mcpetcd_strerror(rv));
    return -1;
  }
  log_info("serving what etcd holds under %s at %s; ready once it is read",
           o->etcd_prefix ? o->etcd_prefix : "/mcp/", o->etcd);
  return 0;
}

/* ---- the engine's other protocols (--api) ---- */

/* The xDS sessions' events (the transport's thread): logged with the
 * client's node id, NACKs counted. */
static void on_xds_event(const mcp_xds_event *ev, void *ud) {
  source_app *a = ud;
  TOOL_LOG_CONTEXT(.node = ev->node_id);
  const char *how = ev->delta ? "delta" : "sotw";
  switch (ev->kind) {
  case MCP_XDS_EVENT_NACK: {
    const char *lv[] = {ev->type_url};
    ops_metric_add(a->m_xds_nacks, lv, 1);
    log_warn("xDS (%s) client %s rejected %s version %s (nonce %s): code %d: "
             "%s", how, ev->node_id, ev->type_url, ev->version, ev->nonce,
             ev->code, ev->message);
    break;
  }
  case MCP_XDS_EVENT_UNKNOWN_TYPE:
    log_info("xDS (%s) client %s asked for %s: no such type, answered empty",
             how, ev->node_id, ev->type_url);
    break;
  case MCP_XDS_EVENT_REFUSED:
    log_warn("xDS (%s) call refused: %s", how, ev->message);
    break;
  case MCP_XDS_EVENT_STALE:
    log_debug("xDS (%s) client %s: stale nonce %s for %s", how, ev->node_id,
              ev->nonce, ev->type_url);
    break;
  }
}

static mcp_store *new_view_store(void) {
  mcp_store_options so;
  mcp_store_options_default(&so);
  so.rand = tool_rand;
  so.name_rules = MCP_NAMES_ANY; /* "IP:PORT", "task/<id>": the adapters' */
  mcp_store *s = NULL;
  return mcp_store_new(&s, &so) < 0 ? NULL : s;
}

/* --debounce MS (0: none) as every server's debounce; each module,
 * MCP's source too, bounds it (max_delay) by its own default
 * (mcp_watch_default_max_delay()): no program sets that. */
static mcp_tstamp debounce_of(const source_args *o) {
  return (mcp_tstamp)o->debounce_ms * MCP_MILLISECONDS;
}

/* A module's services, served next to MCP's. */
static void add_services(source_app *a, const mcp_service_def *defs,
                         size_t n) {
  for (size_t i = 0; i < n && a->nservices < MAX_SERVICES; i++)
    a->services[a->nservices++] = defs[i];
}

static void bad_inputs_metric(source_app *a) {
  if (a->m_view_bad)
    return;
  a->m_view_bad = ops_metrics_counter(
      tool_ops_metrics(a->ops), "mcp_view_bad_inputs_total",
      "Documents or values the Destination and Dispatcher views could not "
      "use (not a Struct or swarmkit object, a bad address or port).",
      NULL, 0);
}

static int setup_dest(source_app *a, const source_args *o) {
  int rv;
  bad_inputs_metric(a);
  if (!(a->dest_store = new_view_store())) {
    log_error("out of memory");
    return -1;
  }
  if ((rv = dest_view_new(&a->dview, a->store, a->dest_store, NULL,
                          NULL)) < 0) {
    log_error("Destination view: %s", mcp_strerror(rv));
    return -1;
  }
  mcp_dest_server_options d;
  mcp_dest_server_options_default(&d);
  d.view = a->dest_store;
  d.dns_zone = o->dns_zone;
  d.heartbeat = (mcp_tstamp)o->dest_heartbeat_ms * MCP_MILLISECONDS;
  d.debounce = debounce_of(o); /* as MCP's */
  if ((rv = mcp_dest_server_new(&a->dsrv, &d)) < 0) {
    log_error("Destination: %s", mcp_strerror(rv));
    return -1;
  }
  add_services(a, mcp_dest_server_service(a->dsrv), 1);
  return 0;
}

static int setup_disp(source_app *a, const source_args *o) {
  ops_metrics *m = tool_ops_metrics(a->ops);
  int rv;
  bad_inputs_metric(a);
  if (!(a->disp_store = new_view_store())) {
    log_error("out of memory");
    return -1;
  }
  disp_view_options vo = {.schema = a->schema};
  if ((rv = disp_view_new(&a->pview, a->store, a->disp_store, &vo)) < 0) {
    log_error("Dispatcher view: %s", mcp_strerror(rv));
    return -1;
  }
  mcp_disp_options d;
  mcp_disp_options_default(&d);
  d.view = a->disp_store;
  d.heartbeat_period = (mcp_tstamp)o->heartbeat_period_ms * MCP_MILLISECONDS;
  /* SessionMessage.managers: --manager, else this one where it listens
   * (swarmkit sends the raft members: node id and address). */
  size_t nm = o->managers.n ? o->managers.n : 1;
  char **maddr = calloc(nm, sizeof *maddr), **mid = calloc(nm, sizeof *mid);
  char host[256] = "";
  if (!o->manager_id && gethostname(host, sizeof host - 1) != 0)
    host[0] = 0;
  rv = maddr && mid ? 0 : MCP_ERR_NOMEM;
  for (size_t i = 0; rv == 0 && i < nm; i++) {
    const char *v = o->managers.n ? o->managers.v[i] : o->address;
    const char *eq = o->managers.n ? strchr(v, '=') : NULL;
    mid[i] = eq ? strndup(v, (size_t)(eq - v))
                : strdup(o->managers.n ? ""
                         : o->manager_id ? o->manager_id : host);
    maddr[i] = strdup(eq ? eq + 1 : v);
    if (!mid[i] || !maddr[i])
      rv = MCP_ERR_NOMEM;
  }
  d.managers = (const char *const *)maddr;
  d.manager_ids = (const char *const *)mid;
  d.nmanagers = nm;
  d.rand = tool_rand;
  if (rv == 0)
    rv = mcp_disp_new(&a->disp, &d, a->tp->now()); /* copies them */
  for (size_t i = 0; i < nm && maddr && mid; i++) {
    free(maddr[i]);
    free(mid[i]);
  }
  free(maddr);
  free(mid);
  if (rv < 0) {
    log_error("Dispatcher: %s", mcp_strerror(rv));
    return -1;
  }
  const mcp_service_def *defs;
  size_t n = mcp_disp_services(a->disp, &defs);
  add_services(a, defs, n);
  a->m_disp_sessions = ops_metrics_gauge(
      m, "mcp_dispatcher_sessions", "Dispatcher sessions live now.", NULL,
      0);
  a->m_disp_status_updates = ops_metrics_counter(
      m, "mcp_dispatcher_task_status_updates_total",
      "Task statuses agents reported through UpdateTaskStatus.", NULL, 0);
  a->m_disp_task_statuses = ops_metrics_gauge(
      m, "mcp_dispatcher_task_statuses",
      "Tasks with a status kept (/debug/tasks).", NULL, 0);
  return 0;
}

static int setup_xds(source_app *a, const source_args *o) {
  /* xDS serves the MCP store itself: its collections are the types. */
  mcp_xds_server_options x;
  mcp_xds_server_options_default(&x);
  x.store = a->store;
  x.debounce = debounce_of(o); /* as MCP's */
  x.require_identity = o->xds_require_identity;
  x.on_event = on_xds_event;
  x.user_data = a;
  int rv;
  if ((rv = mcp_xds_server_new(&a->xsrv, &x)) < 0) {
    log_error("xDS: %s", mcp_strerror(rv));
    return -1;
  }
  const mcp_service_def *defs;
  size_t n = mcp_xds_server_services(a->xsrv, &defs);
  add_services(a, defs, n);
  a->m_xds_nacks = ops_metrics_counter(
      tool_ops_metrics(a->ops), "mcp_xds_nacks_total",
      "xDS responses a client rejected (NACK), per type URL.",
      (const char *const[]){"type_url"}, 1);
  return 0;
}

static void log_mcp(const source_app *a, const source_args *o,
                    const char *addr) {
  (void)o;
  log_info("serving ResourceSource on %s (%s)", addr, a->tp->name);
}

static void log_dest(const source_app *a, const source_args *o,
                     const char *addr) {
  log_info("serving conduit.proxy.destination.Destination on %s (%s), "
           "zone %s", addr, a->tp->name,
           o->dns_zone ? o->dns_zone : "cluster.local");
}

static void log_disp(const source_app *a, const source_args *o,
                     const char *addr) {
  log_info("serving docker.swarmkit.v1.Dispatcher on %s (%s), heartbeat "
           "period %lu ms", addr, a->tp->name, o->heartbeat_period_ms);
}

static void log_xds(const source_app *a, const source_args *o,
                    const char *addr) {
  log_info("serving " MCP_XDS_SERVICE " (MCP over xDS, state of the world "
           "and delta) on %s (%s)%s%s", addr, a->tp->name,
           o->xds_require_identity ? ", identity " : "",
           o->xds_require_identity ? o->xds_require_identity : "");
}

/* The Dispatcher's registry: sessions past their deadline are freed at
 * it (their streams end on their own timers). */
static mcp_tstamp disp_get_expiry(const source_app *a) {
  return mcp_disp_get_expiry(a->disp);
}

static void disp_handle_expiry(source_app *a, mcp_tstamp ts) {
  mcp_disp_stats before, after;
  mcp_disp_get_stats(a->disp, &before);
  mcp_disp_handle_expiry(a->disp, ts);
  mcp_disp_get_stats(a->disp, &after);
  if (after.sessions_expired > before.sessions_expired)
    log_debug("Dispatcher: %llu session%s expired",
              (unsigned long long)(after.sessions_expired -
                                   before.sessions_expired),
              after.sessions_expired - before.sessions_expired == 1 ? ""
                                                                    : "s");
}

static const char *const dest_streams[] = {"destination", NULL};
static const char *const disp_streams[] = {
    "session", "heartbeat", "update_task_status", "tasks", "assignments",
    NULL};
static const char *const xds_streams[] = {MCP_XDS_API_NAME, NULL};
static const char *const mcp_streams[] = {MCP_API_NAME, NULL};

static const api_module modules[NAPIS] = {
    {"mcp", 0, mcp_streams, NULL, log_mcp, NULL, NULL},
    {"destination", 1, dest_streams, setup_dest, log_dest, NULL, NULL},
    {"dispatcher", 1, disp_streams, setup_disp, log_disp, disp_get_expiry,
     disp_handle_expiry},
    {"xds", 1, xds_streams, setup_xds, log_xds, NULL, NULL},
};

/* The module a stream belongs to (its row), for metrics and logs. */
static const api_module *module_of(const tool_stream_info *info) {
  for (unsigned i = 0; i < NAPIS; i++) {
    const char *const *n = modules[i].streams;
    for (; info->api && *n; n++)
      if (strcmp(*n, info->api) == 0)
        return &modules[i];
  }
  return NULL;
}

/* 1 when |info|'s module has timers of its own (api_module.get_expiry). */
static int stream_of_timed_module(const tool_stream_info *info) {
  const api_module *m = module_of(info);
  return m && m->get_expiry;
}

/* 1 for MCP's own streams; 0 for a call of a module beside it or of an
 * API no row names. */
static int stream_of_mcp(const tool_stream_info *info) {
  const api_module *m = module_of(info);
  return m && !m->beside_mcp;
}

/* The API a stream belongs to, its name for metrics and logs (a stream
 * no row names keeps its own name). */
static const char *api_of(const tool_stream_info *info) {
  const api_module *m = module_of(info);
  return m ? m->name : info->api;
}

/* ---- the modules' timers (api_module.get_expiry) ---- */

typedef struct expiry_run {
  source_app *a;
  mcp_tstamp next; /* the earliest deadline left */
} expiry_run;

/* Where the modules live: acts on every deadline due at |ts|, and notes
 * the earliest one left. */
static void expiry_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  expiry_run *r = ud;
  (void)store;
  for (unsigned i = 0; i < NAPIS; i++) {
    const api_module *m = &modules[i];
    if (!(r->a->apis & (1u << i)) || !m->get_expiry)
      continue;
    mcp_tstamp e = m->get_expiry(r->a);
    if (e <= ts) {
      m->handle_expiry(r->a, ts);
      e = m->get_expiry(r->a);
    }
    if (e < r->next)
      r->next = e;
  }
}

static void on_expiry_timer(uv_timer_t *t);

/* Runs what is due and arms the timer at the next deadline (main
 * thread). */
static void run_expiry(source_app *a) {
  if (a->stopping || !a->ep || !a->expiry_init)
    return;
  expiry_run r = {a, MCP_TSTAMP_MAX};
  if (a->tp->source_apply(a->ep, expiry_fn, &r) < 0)
    return;
  if (r.next == MCP_TSTAMP_MAX) {
    uv_timer_stop(&a->expiry);
    return;
  }
  mcp_tstamp now = a->tp->now();
  /* Rounded up: a timer that fires early would find nothing due. */
  uint64_t ms = r.next > now ? (r.next - now + MCP_MILLISECONDS - 1) /
                                   MCP_MILLISECONDS
                             : 1;
  uv_timer_start(&a->expiry, on_expiry_timer, ms, 0);
}

static void on_expiry_timer(uv_timer_t *t) { run_expiry(t->data); }

static void on_expiry_async(uv_async_t *h) { run_expiry(h->data); }

/* 1 when a module of |apis| has timers of its own. */
static int modules_have_expiry(unsigned apis) {
  for (unsigned i = 0; i < NAPIS; i++)
    if ((apis & (1u << i)) && modules[i].get_expiry)
      return 1;
  return 0;
}

/* Before the endpoint: on_stream may wake the async from its first
 * stream on. */
static void expiry_init(source_app *a) {
  if (!modules_have_expiry(a->apis))
    return;
  uv_timer_init(&a->loop, &a->expiry);
  uv_async_init(&a->loop, &a->expiry_async, on_expiry_async);
  a->expiry.data = a->expiry_async.data = a;
  a->expiry_init = 1;
}

static void expiry_close(source_app *a) {
  if (!a->expiry_init)
    return;
  a->expiry_init = 0;
  uv_close((uv_handle_t *)&a->expiry, NULL);
  uv_close((uv_handle_t *)&a->expiry_async, NULL);
}

/* Views, modules and their services, before the first load (main thread,
 * no transport yet). 0, or -1 (logged). */
static int setup_apis(source_app *a, const source_args *o) {
  ops_metrics *m = tool_ops_metrics(a->ops);
  static const char *const api[] = {"api"};
  a->m_api_streams = ops_metrics_counter(
      m, "mcp_api_streams_total",
      "Streams (calls) accepted, per API: mcp, destination, dispatcher, xds.",
      api,
      1);
  a->m_api_open = ops_metrics_gauge(
      m, "mcp_api_streams", "Streams (calls) open now, per API.", api, 1);
  a->m_api_updates = ops_metrics_counter(
      m, "mcp_api_updates_total",
      "Updates sent, per API: MCP pushes, Destination Update messages, "
      "Dispatcher Assignments and Tasks messages, xDS responses.",
      api, 1);
  for (unsigned i = 0; i < NAPIS; i++)
    if (a->apis & (1u << i)) { /* the series exist from the start */
      const char *lv[] = {modules[i].name};
      ops_metric_add(a->m_api_updates, lv, 0);
      ops_metric_add(a->m_api_streams, lv, 0);
      ops_metric_add(a->m_api_open, lv, 0);
    }
  for (unsigned i = 0; i < NAPIS; i++)
    if ((a->apis & (1u << i)) && modules[i].setup &&
        modules[i].setup(a, o) != 0)
      return -1;
  return 0;
}

/* What the protocols counted, read where they live. */
typedef struct proto_counts {
  uint64_t dest_updates, disp_updates, status_updates, task_statuses,
      sessions, view_bad, xds_updates;
} proto_counts;

static void proto_tick_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  source_app *a = ((void **)ud)[0];
  proto_counts *c = ((void **)ud)[1];
  (void)store;
  (void)ts;
  if (a->dview) {
    dest_view_stats st;
    dest_view_get_stats(a->dview, &st);
    c->view_bad += st.bad_bodies + st.bad_addresses;
  }
  if (a->pview) {
    disp_view_stats st;
    disp_view_get_stats(a->pview, &st);
    c->view_bad += st.bad_bodies;
  }
  if (a->dsrv) {
    mcp_dest_server_stats st;
    mcp_dest_server_get_stats(a->dsrv, &st);
    c->dest_updates = st.updates;
  }
  if (a->xsrv) {
    mcp_xds_server_stats st;
    mcp_xds_server_get_stats(a->xsrv, &st);
    c->xds_updates = st.responses;
  }
  if (a->disp) {
    mcp_disp_stats st;
    mcp_disp_get_stats(a->disp, &st);
    c->disp_updates = st.assignments_messages + st.tasks_messages;
    c->status_updates = st.status_updates;
    c->task_statuses = st.task_statuses;
    c->sessions = st.sessions;
  }
}

static void add_delta(ops_metric *m, const char *label, uint64_t now,
                      uint64_t *seen) {
  const char *lv[] = {label};
  if (now > *seen)
    ops_metric_add(m, label ? lv : NULL, (double)(now - *seen));
  *seen = now;
}

/* Every PROTO_TICK_MS: the counters into the metrics. */
static void on_proto_tick(uv_timer_t *t) {
  source_app *a = t->data;
  if (a->stopping || !a->ep)
    return;
  tool_peerlog_flush(a->peerlog, a->tp->now());
  proto_counts c = {0};
  void *ud[2] = {a, &c};
  /* (Every stream is pumped after it: only when there is something to
   * read there.) */
  if ((a->apis & (API_DEST | API_DISP | API_XDS)) &&
      a->tp->source_apply(a->ep, proto_tick_fn, ud) < 0)
    return;
  if (a->apis & API_XDS)
    add_delta(a->m_api_updates, "xds", c.xds_updates, &a->xds_updates_seen);
  add_delta(a->m_api_updates, "mcp", atomic_load(&a->mcp_pushes),
            &a->mcp_pushes_seen);
  if (a->apis & API_DEST)
    add_delta(a->m_api_updates, "destination", c.dest_updates,
              &a->dest_updates_seen);
  if (a->apis & API_DISP) {
    add_delta(a->m_api_updates, "dispatcher", c.disp_updates,
              &a->disp_updates_seen);
    add_delta(a->m_disp_status_updates, NULL, c.status_updates,
              &a->status_updates_seen);
    ops_metric_set(a->m_disp_task_statuses, NULL, (double)c.task_statuses);
    ops_metric_set(a->m_disp_sessions, NULL, (double)c.sessions);
  }
  if (a->m_view_bad)
    add_delta(a->m_view_bad, NULL, c.view_bad, &a->view_bad_seen);
}

/* swarmkit's TaskState names (types.proto). */
typedef struct tasks_page {
  json_t *tasks;
  mcp_tstamp now;
  int failed;
} tasks_page;

static int task_status_fn(const mcp_disp_task_status *st, void *ud) {
  tasks_page *p = ud;
  const char *name = mcp_disp_task_state_name(st->state);
  json_t *o = json_pack(
      "{s:s, s:s, s:o, s:i, s:s, s:s, s:f}", "task_id", st->task_id,
      "node_id", st->node_id ? st->node_id : "", "state",
      name ? json_string(name) : json_integer(st->state), "state_code",
      st->state, "message", st->message ? st->message : "", "err",
      st->err ? st->err : "", "age_seconds",
      p->now >= st->updated ? tool_ops_seconds(p->now - st->updated) : 0.0);
  if (!o || json_array_append_new(p->tasks, o) != 0)
    p->failed = 1;
  return 0;
}

static void tasks_fn(mcp_store *store, mcp_tstamp ts, void *ud) {
  source_app *a = ((void **)ud)[0];
  tasks_page *p = ((void **)ud)[1];
  (void)store;
  p->now = ts;
  mcp_disp_task_statuses(a->disp, task_status_fn, p);
}

static int cmp_task(const void *x, const void *y) {
  const char *a = json_string_value(
      json_object_get(*(json_t *const *)x, "task_id"));
  const char *b = json_string_value(
      json_object_get(*(json_t *const *)y, "task_id"));
  return strcmp(a ? a : "", b ? b : "");
}

/* GET /debug/tasks: the latest status each task's agent reported
 * (UpdateTaskStatus), sorted by task id. */
static void page_tasks(const char *method, const char *path,
                       ops_http_reply *r, void *ud) {
  source_app *a = ud;
  (void)method;
  (void)path;
  tasks_page p = {json_array(), 0, 0};
  void *arg[2] = {a, &p};
  if (!p.tasks || !a->ep || a->tp->source_apply(a->ep, tasks_fn, arg) < 0 ||
      p.failed) {
    json_decref(p.tasks);
    ops_http_reply_text(r, 503, "not available\n");
    return;
  }
  size_t n = json_array_size(p.tasks);
  json_t **v = n ? calloc(n, sizeof *v) : NULL;
  for (size_t i = 0; v && i < n; i++)
    v[i] = json_incref(json_array_get(p.tasks, i));
  if (v) {
    qsort(v, n, sizeof *v, cmp_task);
    json_array_clear(p.tasks);
    for (size_t i = 0; i < n; i++)
      json_array_append_new(p.tasks, v[i]);
    free(v);
  }
  json_t *page = json_pack("{s:o, s:I}", "tasks", p.tasks, "count",
                           (json_int_t)n);
  tool_ops_reply_json(r, page, JSON_COMPACT);
}

/* After the endpoint is gone (no stream left): the modules, views and
 * their stores. */
static void teardown_apis(source_app *a) {
  mcp_dest_server_del(a->dsrv);
  a->dsrv = NULL;
  mcp_disp_del(a->disp);
  a->disp = NULL;
  mcp_xds_server_del(a->xsrv);
  a->xsrv = NULL;
  dest_view_del(a->dview);
  disp_view_del(a->pview);
  a->dview = NULL;
  a->pview = NULL;
  mcp_store_del(a->dest_store);
  mcp_store_del(a->disp_store);
  a->dest_store = a->disp_store = NULL;
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
    tool_strv_free(&args.managers);
    return status;
  }
  tool_log_init("mcp-source", args.level);
  tool_log_set_format(args.ops.log_format);
  const char *dir = args.dir, *address = args.address;
  const tool_strv colls = args.colls;
  int connect = args.dial, rv;

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
    tool_strv_free(&args.managers);
    return 2;
  }
  if (rv != 0) {
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    tool_strv_free(&args.managers);
    char names[64];
    return usage_error("unknown transport %s (expected %s)", args.transport,
                       tool_transport_names(names, sizeof names));
  }
  /* --api: what this build and transport serve; --connect dials a
   * ResourceSink, MCP only. */
  {
    unsigned sup = apis_supported(app.tp);
    char names[64];
    app.apis = args.apis ? args.apis : connect ? API_MCP : sup;
    const char *bad = NULL;
    if (app.apis & ~sup)
      bad = "is not served by this program";
    else if (connect && app.apis != API_MCP)
      bad = "needs --listen (--connect dials a ResourceSink: mcp only)";
    if (!bad && args.xds_require_identity && !(app.apis & API_XDS)) {
      tool_strv_free(&args.colls);
      tool_sec_args_free(&args.sec);
      tool_schema_args_free(&args.schema);
      tool_strv_free(&args.managers);
      return usage_error("--xds-require-identity needs xds in --api");
    }
    if (bad) {
      api_names(app.apis & (connect ? ~(unsigned)API_MCP : ~sup), names,
                sizeof names);
      tool_strv_free(&args.colls);
      tool_sec_args_free(&args.sec);
      tool_schema_args_free(&args.schema);
      tool_strv_free(&args.managers);
      return usage_error("--api %s %s%s%s", names, bad,
                         (app.apis & ~sup) ? " over " : "",
                         (app.apis & ~sup) ? app.tp->name : "");
    }
  }
  char why[600];
  if (tool_sec_check(&args.sec, tool_transport_sec(app.tp), app.tp->name,
                     !connect, address, why, sizeof(why)) != 0) {
    tool_strv_free(&args.colls);
    tool_sec_args_free(&args.sec);
    tool_schema_args_free(&args.schema);
    tool_strv_free(&args.managers);
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
    tool_strv_free(&args.managers);
      if (rv == 2)
        return usage_error("%s", why);
      log_error("%s", why);
      return 1;
    }
  }

  tool_proc_init(!connect); /* a listener serves many sinks */
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

  /* 1,000 stream lines per peer in 10 s (100/s: 100 sinks connecting
   * at once still log each), then one summary (NULL: all). */
  app.peerlog = tool_peerlog_new(1000, 10 * MCP_SECONDS);

  mcp_store_options so;
  mcp_store_options_default(&so);
  so.rand = tool_rand;
  so.name_rules = args.names; /* the loader's: it never gives the store more */
  if ((rv = mcp_store_new(&app.store, &so)) < 0) {
    log_error("cannot create the store: %s", mcp_strerror(rv));
    goto out;
  }
  /* Before the first load, which the metrics describe. */
  tool_ops_options oo = {.role = TOOL_OPS_SOURCE, .component = "mcp-source"};
  if (tool_ops_new(&app.ops, &oo) != 0) {
    log_error("out of memory");
    goto out;
  }
  if (dir)
    register_config_metrics(&app);
  mcpcfg_options lo;
  mcpcfg_options_default(&lo);
  /* Even without --dir: a bad --descriptor-set or --kind is an error. */
  if (set_typed_bodies(&app, &args.schema, &lo) != 0)
    goto out;
  /* Before the first load: the views follow the store from its start. */
  if (setup_apis(&app, &args) != 0)
    goto out;
  if (dir) {
    lo.report = on_report;
    lo.note = on_note;
    lo.user_data = &app;
    lo.name_rules = args.names;
    lo.keep_text = args.etcd != NULL; /* published as written */
    if ((rv = mcpcfg_loader_new(&app.loader, dir, &lo)) < 0) {
      log_error("cannot create the loader: %s", mcpcfg_strerror(rv));
      goto out;
    }
  }
  app.colls = &colls;
  for (size_t i = 0; !args.etcd && i < colls.n; i++) {
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
    ops_metric_set(app.files_with_errors, NULL,
                   (double)mcpcfg_loader_files_with_errors(app.loader));
    if (!args.etcd) { /* with etcd, published once etcd is reached */
      apply_fn(app.store, app.tp->now(), &app);
      if (app.apply_pending)
        goto out;
    }
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
  /* What the other APIs serve from it. */
  for (int v = 0; v < 2; v++) {
    mcp_store *vs = v ? app.disp_store : app.dest_store;
    size_t colls = 0, items = 0;
    for (size_t i = 0; vs && i < mcp_store_collection_count(vs); i++) {
      const char *c = mcp_store_collection_name(vs, i);
      if (!mcp_store_has_collection(vs, c) || (v && !strcmp(c, "nodes")))
        continue;
      colls++;
      items += mcp_store_count(vs, c);
    }
    if (vs)
      log_info(v ? "Dispatcher: %zu node%s with %zu assigned object%s"
                 : "Destination: %zu service port%s with %zu endpoint%s",
               colls, colls == 1 ? "" : "s", items, items == 1 ? "" : "s");
  }

  mcp_source_options sopts;
  mcp_source_options_default(&sopts);
  sopts.store = app.store;
  sopts.on_event = on_core_event;
  sopts.user_data = &app;
  if (args.etcd) {
    sopts.version_reached = etcd_version_reached;
    sopts.version_reached_user_data = &app;
  }
  sopts.debounce = debounce_of(&args);
  tool_endpoint_options eo =
      tool_endpoint_base(&args.sec, app.access, app.ops);
  eo.mode = connect ? TOOL_DIAL : TOOL_LISTEN;
  eo.address = address;
  eo.on_stream = on_stream;
  eo.on_refused = on_refused;
  eo.user_data = &app;
  eo.services = app.nservices ? app.services : NULL;
  eo.nservices = app.nservices;
  eo.no_mcp = !(app.apis & API_MCP);
  uv_loop_init(&app.loop);
  expiry_init(&app);
  errno = 0; /* the transport sets it when it cannot bind */
  if ((rv = app.tp->source_new(&app.ep, &app.loop, &eo, &sopts)) < 0) {
    log_error("cannot %s %s: %s", connect ? "dial" : "listen on", address,
              tool_endpoint_strerror(rv, errno));
    app.ep = NULL;
    expiry_close(&app);
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
  if (tool_sec_tls(&args.sec)) {
    const tool_tls_options t = {args.sec.tls_cert, args.sec.tls_key,
                                args.sec.tls_ca, args.sec.tls_server_name};
    if (tool_tls_watch_start(&app.tls_watch, app.tp, &t, &app.loop) != 0)
      log_warn("out of memory: a broken change of the TLS files will not "
               "be reported");
  }
  if (connect) {
    log_info("dialing the ResourceSink at %s (%s)", address, app.tp->name);
  } else {
    char buf[300];
    tool_addr_bound(buf, sizeof(buf), address, app.tp->source_port(app.ep));
    char names[64];
    for (unsigned i = 0; i < NAPIS; i++)
      if (app.apis & (1u << i))
        modules[i].log_serving(&app, &args, buf);
    log_info("APIs: %s", api_names(app.apis, names, sizeof names));
  }
  uv_timer_init(&app.loop, &app.proto_tick);
  app.proto_tick.data = &app;
  app.proto_tick_init = 1;
  uv_timer_start(&app.proto_tick, on_proto_tick, PROTO_TICK_MS, PROTO_TICK_MS);
  run_expiry(&app); /* the modules' first deadlines */
  if (app.apis & API_DISP)
    tool_ops_set_page(app.ops, "/debug/tasks", page_tasks, &app);
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
  /* The first load is in the store; etcd's comes later. */
  tool_ops_set_ready(app.ops, !args.etcd);

  if (app.loader) {
    uv_timer_init(&app.loop, &app.rescan);
    app.rescan.data = &app;
    app.timers = 1;
    app.rescan_every = RESCAN_MS;
    app.unstable = mcpcfg_loader_unstable_reads(app.loader);
    uv_timer_start(&app.rescan, on_rescan, RESCAN_MS, RESCAN_MS);
    int wrv = tool_watch_new(&app.watch, &app.loop, dir,
                             (unsigned)args.write_settle_ms, on_fs_change,
                             &app);
    if (wrv != 0) {
      app.watch = NULL;
      log_warn("cannot watch %s: %s (rescanning every %d ms)", dir,
               wrv == -1 ? "out of memory" : strerror(-wrv), RESCAN_MS);
    } else {
      tool_watch_sync(app.watch);
      mcpcfg_loader_set_hold(app.loader, being_written, &app);
      app.rescan_every = 0; /* said once at the start, whatever it is */
      rescan_pace(&app);
      /* The first tick walks: what changed between the first load and
       * the watch's start has sent no event. */
      app.quiet_ticks = RESCAN_SAFE_MS / RESCAN_MS;
    }
  }
  /* Runs until a signal: stop() deletes the endpoint and closes the
   * handles, and the loop ends once the transport's are closed too. */
  int ops_failed = 0;
  if (args.etcd) {
    etcd_metrics(&app);
    if (start_etcd(&app, &args) != 0) {
      ops_failed = 1;
      stop(&app);
    }
  }
  if (!app.stopping && args.ops.debug_listen) {
    char err[300], buf[300];
    if (tool_ops_listen(app.ops, &app.loop, args.ops.debug_listen, NULL, err,
                        sizeof(err)) != 0) {
      log_error("--debug-listen: %s", err);
      ops_failed = 1;
      stop(&app);
    } else {
      tool_addr_bound(buf, sizeof(buf), args.ops.debug_listen,
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
  teardown_apis(&app); /* the endpoint is gone: no stream uses them */
  mcpcfg_loader_del(app.loader);
  mcp_store_del(app.store);
  tool_ops_del(app.ops);
  tool_peerlog_del(app.peerlog);
  tool_access_del(app.access);
  tool_strv_free(&args.colls);
  tool_sec_args_free(&args.sec);
  tool_schema_args_free(&args.schema);
  tool_strv_free(&args.managers);
  mcp_schema_free(app.schema);
  free(app.kinds);
  if (status == 0)
    log_info("stopped");
  return status;
}
