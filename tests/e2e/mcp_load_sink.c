/*
 * mcp-load-sink: many MCP sinks in one process, for the fault tests
 * (tests/e2e/test_faults.py): N streams to one source, each with its own
 * sink state and endpoint, on any transport of the programs' table
 * (tools/transport/transport.h). What 1000 mcp-sink processes would do, at a fraction
 * of the cost (no process, no mirror, no JSON bodies).
 *
 *   mcp-load-sink --streams N --collection NAME... [--connect HOST:PORT[,...]]
 *                 [--transport grpc|h2c] [--incremental | --mixed]
 *                 [--tls-cert FILE --tls-key FILE] [--tls-ca FILE]
 *                 [--tls-server-name NAME] [--log-level LEVEL]
 *
 * --tls-*: every stream dials over (mutual) TLS with those files, as
 * mcp-sink does (cli/args.h); each makes its own handshake.
 * --mixed: odd streams ask for incremental pushes, even ones for full state.
 * stdout, one JSON object per line, written whole:
 *   {"event":"ready","streams":N}              every endpoint created
 *   {"event":"ack","s":I,"c":COLL,"v":SYSTEM_VERSION,"n":HELD,"inc":0|1}
 *   {"event":"nack","s":I,"c":COLL,"v":SYSTEM_VERSION,"code":C}
 *   {"event":"closed","s":I,"status":S}       a stream that had answered ended
 *   {"event":"stopped"}                        after SIGTERM/SIGINT, all gone
 * Exit: 0 after SIGTERM/SIGINT, 1 on a failure at start, 2 on usage.
 *
 * Threads: the endpoints call back on their transport's thread (gRPC: one
 * per endpoint) or on the main loop (h2c); the callbacks touch only their
 * own stream's record and write whole lines under stdout's lock.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "cli/args.h"
#include "util/log.h"
#include "util/rand.h"
#include "transport/transport.h"

typedef struct load_stream {
  size_t index;
  int answered; /* the current stream has ACKed or NACKed something */
  mcp_sink_state *state;
  void *ep;
} load_stream;

typedef struct load_app {
  uv_loop_t loop;
  uv_signal_t sigint, sigterm;
  const tool_transport *tp;
  load_stream *streams;
  size_t n;
  int stopping;
} load_app;

static void usage(FILE *f) {
  fputs("usage: mcp-load-sink --streams N --collection NAME... "
        "[--connect HOST:PORT]\n"
        "                     [--transport grpc|h2c] [--incremental | "
        "--mixed]\n"
        "                     [--log-level LEVEL]\n",
        f);
}

static void on_core_event(const mcp_event *ev, void *ud) {
  load_stream *s = ud;
  char line[1024];
  if (ev->type == MCP_EVENT_ACK) {
    s->answered = 1;
    snprintf(line, sizeof(line),
             "{\"event\":\"ack\",\"s\":%zu,\"c\":\"%s\",\"v\":\"%s\","
             "\"n\":%zu,\"inc\":%d}",
             s->index, ev->collection, ev->version, ev->held,
             ev->incremental ? 1 : 0);
  } else if (ev->type == MCP_EVENT_NACK) {
    s->answered = 1;
    snprintf(line, sizeof(line),
             "{\"event\":\"nack\",\"s\":%zu,\"c\":\"%s\",\"v\":\"%s\","
             "\"code\":%d}",
             s->index, ev->collection, ev->version, ev->code);
  } else {
    return;
  }
  tool_out_line(line);
}

static void on_stream(int opened, const tool_stream_info *info, void *ud) {
  load_stream *s = ud;
  if (opened) {
    s->answered = 0;
    return;
  }
  if (s->answered) {
    char line[128];
    snprintf(line, sizeof(line), "{\"event\":\"closed\",\"s\":%zu,"
             "\"status\":%d}", s->index, info->status);
    tool_out_line(line);
  }
  s->answered = 0;
}

static void stop(load_app *a) {
  if (a->stopping)
    return;
  a->stopping = 1;
  for (size_t i = 0; i < a->n; i++) {
    if (a->streams[i].ep)
      a->tp->sink_del(a->streams[i].ep);
    a->streams[i].ep = NULL;
  }
  uv_close((uv_handle_t *)&a->sigint, NULL);
  uv_close((uv_handle_t *)&a->sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)signum;
  stop(h->data);
}

int main(int argc, char **argv) {
  tool_log_init("mcp-load-sink", TOOL_LOG_WARN);
  const char *connect = "127.0.0.1:9901", *transport = "grpc", *v = NULL;
  const char *level = "warn";
  unsigned long nstreams = 0;
  int incremental = 0, mixed = 0, rv, status = 2;
  tool_strv colls = {0};
  tool_sec_args sec = {0};
  load_app app;
  memset(&app, 0, sizeof(app));

  for (int i = 1; i < argc; i++) {
#define VALUE(name) ((rv = tool_arg_value(argc, argv, &i, name, &v)) != 0)
    if (tool_arg_flag(argv, i, "--help")) {
      usage(stdout);
      status = 0;
      goto out;
    } else if (tool_arg_flag(argv, i, "--incremental")) {
      incremental = 1;
    } else if (tool_arg_flag(argv, i, "--mixed")) {
      mixed = 1;
    } else if (VALUE("--streams")) {
      if (rv < 0 || tool_parse_ulong(v, 100000, &nstreams) != 0 ||
          nstreams == 0)
        goto bad;
    } else if (VALUE("--collection")) {
      if (rv < 0 || !v[0] || tool_strv_add(&colls, v, 1) != 0)
        goto bad;
    } else if (VALUE("--connect")) {
      if (rv < 0)
        goto bad;
      connect = v;
    } else if (VALUE("--transport")) {
      if (rv < 0)
        goto bad;
      transport = v;
    } else if (VALUE("--log-level")) {
      if (rv < 0)
        goto bad;
      level = v;
    } else if ((rv = tool_sec_parse_arg(argc, argv, &i, &sec)) != 0) {
      if (rv < 0)
        goto bad;
    } else {
      fprintf(stderr, "mcp-load-sink: unknown argument: %s\n", argv[i]);
      goto bad;
    }
#undef VALUE
  }
  tool_log_level lvl;
  const char *why;
  if (nstreams == 0 || colls.n == 0 || tool_log_parse_level(level, &lvl) ||
      tool_check_hostports(connect, 1, &why) != 0)
    goto bad;
  if (tool_sec_acl(&sec) || sec.allow_cleartext) {
    fprintf(stderr, "mcp-load-sink: only the --tls-* flags are taken\n");
    goto bad;
  }
  tool_log_init("mcp-load-sink", lvl);
  rv = tool_transport_find(transport, &app.tp);
  if (rv != 0) {
    fprintf(stderr, "mcp-load-sink: %s transport not available\n", transport);
    goto out;
  }

  status = 1;
  signal(SIGPIPE, SIG_IGN);
  app.n = nstreams;
  if (!(app.streams = calloc(app.n, sizeof(*app.streams)))) {
    fprintf(stderr, "mcp-load-sink: out of memory\n");
    goto out;
  }
  uv_loop_init(&app.loop);
  uv_signal_init(&app.loop, &app.sigint);
  uv_signal_init(&app.loop, &app.sigterm);
  app.sigint.data = app.sigterm.data = &app;
  uv_signal_start(&app.sigint, on_signal, SIGINT);
  uv_signal_start(&app.sigterm, on_signal, SIGTERM);

  for (size_t i = 0; i < app.n; i++) {
    load_stream *s = &app.streams[i];
    s->index = i;
    char node[32];
    snprintf(node, sizeof(node), "load-%zu", i);
    mcp_sink_options so;
    mcp_sink_options_default(&so);
    so.node_id = node;
    so.collections = colls.v;
    so.ncollections = colls.n;
    so.incremental = mixed ? (int)(i & 1) : incremental;
    so.on_event = on_core_event;
    so.user_data = s;
    if ((rv = mcp_sink_state_new(&s->state, &so)) < 0) {
      fprintf(stderr, "mcp-load-sink: sink state %zu: %s\n", i,
              mcp_strerror(rv));
      goto fail;
    }
    tool_endpoint_options eo = {
        .mode = TOOL_DIAL,
        .address = connect,
        .rand = tool_rand,
        .on_stream = on_stream,
        .user_data = s,
        .tls = {sec.tls_cert, sec.tls_key, sec.tls_ca, sec.tls_server_name},
    };
    if ((rv = app.tp->sink_new(&s->ep, &app.loop, &eo, s->state)) < 0) {
      s->ep = NULL;
      fprintf(stderr, "mcp-load-sink: endpoint %zu: %s\n", i,
              mcp_strerror(rv));
      goto fail;
    }
  }
  {
    char line[64];
    snprintf(line, sizeof(line), "{\"event\":\"ready\",\"streams\":%zu}",
             app.n);
    tool_out_line(line);
  }
  uv_run(&app.loop, UV_RUN_DEFAULT);
  status = 0;
  tool_out_line("{\"event\":\"stopped\"}");
  goto done;

fail:
  stop(&app);
  uv_run(&app.loop, UV_RUN_DEFAULT);
done:
  uv_loop_close(&app.loop);
  for (size_t i = 0; i < app.n; i++)
    mcp_sink_state_del(app.streams[i].state);
  free(app.streams);
  tool_strv_free(&colls);
  tool_sec_args_free(&sec);
  return status;

bad:
  usage(stderr);
  status = 2;
out:
  tool_strv_free(&colls);
  tool_sec_args_free(&sec);
  return status;
}
