/*
 * etcdsrc: what an etcd cluster holds under a prefix, as MCP resources, for
 * mcp-source --etcd (docs/operations.md). Internal to tools/.
 *
 * Layout: key PREFIX<collection>/<name> holds one document (YAML or JSON),
 * converted exactly as a file's document (tools/loader/loader.h); the
 * key must be the one its document names, so that two keys can never define
 * one resource. The resource version is the key's mod_revision in decimal:
 * the same on every replica.
 *
 * A thread of its own loads with one Range at revision R, then watches from
 * R+1. On a compacted watch, a broken stream or a member down it moves to
 * the next endpoint (mcpetcd), reads again at a new revision and queues
 * exactly the difference with what it held (keys whose mod_revision changed,
 * keys gone): nothing lost, nothing twice. A document that does not convert
 * is reported (path "etcd:KEY") and the resource keeps its last good
 * content, as for files.
 *
 * Changes are queued for the store and announced through |notify| (from the
 * etcd thread: hand it to the thread that owns the store, e.g. with
 * uv_async_send); etcdsrc_apply(), called where the store lives, applies
 * them in order.
 */
#ifndef TOOLS_ETCD_SOURCE_H
#define TOOLS_ETCD_SOURCE_H

#include <stdint.h>

#include <mcp/mcp.h>

#include "loader/loader.h"
#include "etcd/etcd.h"

typedef struct etcdsrc etcdsrc;

typedef struct etcdsrc_options {
  mcpetcd_options etcd;
  const char *prefix;          /* NULL: "/mcp/" */
  const mcpcfg_options *parse; /* conversion limits and the report callback */
  /* Called from the etcd thread when changes are queued or the state of the
   * connection changed; must not call into etcdsrc except etcdsrc_stats(). */
  void (*notify)(void *user_data);
  void *user_data;
  /* Logs one line about the connection (etcd thread): |error| 1 for a
   * failure, 0 for news (loaded, moved to another endpoint). */
  void (*log)(int error, const char *message, void *user_data);
} etcdsrc_options;

/* Starts the thread. Fails with INVALID_ARGUMENT (options; |err| says
 * why), MCPETCD_ERR_IO (a credential file) or NOMEM. */
int etcdsrc_start(etcdsrc **ps, const etcdsrc_options *o, char *err,
                  size_t errlen);

/* Stops the thread and frees |s| and the changes it still queued. NULL is a
 * no-op. */
void etcdsrc_stop(etcdsrc *s);

/*
 * Applies the queued changes to |store|, in order (wherever the store is
 * owned). Returns the number of resources that changed, or a negative core
 * error (the failed change and those after it stay queued, and are tried
 * again at the next call). Every applied resource gets version
 * mod_revision.
 */
int etcdsrc_apply(etcdsrc *s, mcp_store *store, mcp_tstamp ts);

typedef struct etcdsrc_stats {
  int loaded;            /* the first read is wholly in the store */
  int64_t revision;      /* etcd revision of the newest queued change set */
  int64_t applied;       /* revision the store now reflects (0: none) */
  uint64_t reloads;      /* reads of the whole prefix after the first */
  uint64_t failovers;    /* moves to another endpoint */
  uint64_t bad_documents;/* documents skipped (not converted, wrong key) */
  double lag_seconds;    /* receipt to store, of the last applied change */
} etcdsrc_stats;

/* A snapshot of the counters (any thread). */
void etcdsrc_stats_get(etcdsrc *s, etcdsrc_stats *st);

#endif /* TOOLS_ETCD_SOURCE_H */
