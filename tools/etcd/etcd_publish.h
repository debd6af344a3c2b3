/*
 * etcdpub: publishes a directory's documents into etcd, for mcp-source
 * --dir DIR --etcd ENDPOINTS (docs/operations.md). Internal to tools/.
 *
 * Each resource the loader serves becomes key PREFIX<collection>/<name>
 * with the document's text exactly as in its file (the loader's keep_text),
 * so that every replica converts it as the files' source would. After each
 * scan, etcdpub_offer() hands over what changed since the last offer (new
 * or changed text, names gone); a thread of its own writes it in
 * transactions of at most MCPETCD_TXN_OPS operations and 1 MiB (etcd's
 * default limits: --max-txn-ops 128, --max-request-bytes 1.5 MiB), only
 * under PREFIX. At start it reads what etcd holds under PREFIX and writes
 * only what differs, and deletes there the keys the directory does not
 * define: a restarted publisher rewrites nothing, so sinks are sent
 * nothing. A failed transaction is retried with backoff, after reading
 * again what etcd holds.
 */
#ifndef TOOLS_ETCD_PUBLISH_H
#define TOOLS_ETCD_PUBLISH_H

#include <stdint.h>

#include "loader/loader.h"
#include "etcd/etcd.h"

#define MCPETCD_TXN_OPS 128
#define MCPETCD_TXN_BYTES (1u << 20)

typedef struct etcdpub etcdpub;

typedef struct etcdpub_stats {
  uint64_t txns;      /* transactions that succeeded */
  uint64_t puts, deletes;
  uint64_t failures;  /* transactions or reads that failed (retried) */
  int64_t revision;   /* of the last transaction (0: none yet) */
  int synced;         /* etcd holds everything offered so far */
} etcdpub_stats;

/* Starts the publishing thread. |log| receives one line per failure (error
 * 1) and per transaction (error 0), from that thread. Errors as
 * mcpetcd_new(); |err| says why. */
int etcdpub_start(etcdpub **pp, const mcpetcd_options *etcd,
                  const char *prefix,
                  void (*log)(int error, const char *message, void *ud),
                  void *ud, char *err, size_t errlen);

/*
 * Offers the loader's current documents (after a scan; the loader must
 * have been made with keep_text). Looks only at the collections the loader
 * changed since the last offer (mcpcfg_loader_collection_gen()), and copies
 * the text of the documents that changed in them. Returns the number of
 * changes queued, or NOMEM (nothing queued: offer again).
 */
int etcdpub_offer(etcdpub *p, const mcpcfg_loader *l);

void etcdpub_stats_get(etcdpub *p, etcdpub_stats *st);

/* Stops the thread (a transaction under way finishes first) and frees
 * |p|. NULL is a no-op. */
void etcdpub_stop(etcdpub *p);

#endif /* TOOLS_ETCD_PUBLISH_H */
