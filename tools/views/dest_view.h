/*
 * dest_view: the Destination view store (BRIEF "View stores") kept from the
 * Kubernetes Services and Endpoints of an MCP store. Internal to tools/.
 *
 * Input: two collections of |src| (mcp-source's MCP store): Services
 * (default "k8s/core/v1/services") and Endpoints ("k8s/core/v1/endpoints"),
 * resources named "<ns>/<name>" ("<name>" alone: namespace "default"),
 * bodies google.protobuf.Struct of the Service's `spec` and of the
 * Endpoints' top-level fields (`subsets`), as the loader makes them.
 *
 * Output, in |view|:
 *   collection "<ns>/<svc>:<port>" for each port number of the Service's
 *   spec.ports[] (it exists exactly as long as the Service has that port;
 *   when the Service or the port goes it is removed with
 *   mcp_store_remove_collection());
 *   one resource per ready endpoint: each Endpoints subset's port whose
 *   `name` equals the service port's name (a service port without a name:
 *   the subset's only port, else its port without a name), and for it each
 *   of the subset's `addresses` (not `notReadyAddresses`) with a valid IPv4
 *   or IPv6 `ip`: name "IP:PORT" / "[v6]:PORT" (RFC 5952), type_url
 *   DEST_VIEW_TYPE_URL, body conduit.proxy.destination.WeightedAddr{addr,
 *   weight 1, metric_labels{k8s_pod} when targetRef.kind is Pod}, version a
 *   hash of the body. The same address listed twice counts once.
 *
 * Cost: dest_view_sync() takes the changes of the two collections through
 * mcp_watch (O(changed)) and recomputes only the Services they touch, each
 * with one mcp_store_replace() of its ports' collections.
 *
 * Threads: none of its own; call it where |src| and |view| change (the
 * transport thread, inside the update that changed |src|).
 */
#ifndef TOOLS_DEST_VIEW_H
#define TOOLS_DEST_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include <mcp/engine.h>
#include <mcp/destination.h>
#include <mcp/mcp.h>

#define DEST_VIEW_TYPE_URL MCP_DEST_WEIGHTED_ADDR_TYPE_URL
#define DEST_VIEW_SERVICES "k8s/core/v1/services"
#define DEST_VIEW_ENDPOINTS "k8s/core/v1/endpoints"

typedef struct dest_view dest_view;

/* What the adapter saw that it could not use (for logs and metrics). */
typedef struct dest_view_stats {
  uint64_t syncs;        /* dest_view_sync() calls that changed the view */
  uint64_t services;     /* Services recomputed */
  uint64_t bad_bodies;   /* bodies that are not a Struct (ignored) */
  uint64_t bad_addresses; /* addresses or ports skipped (not an IP, ...) */
} dest_view_stats;

/*
 * Creates the adapter. |src| and |view| are kept by pointer (both must
 * outlive it); |services| and |endpoints| (NULL: the defaults above) are
 * copied. Nothing is read before the first dest_view_sync(). Errors: NOMEM,
 * and what mcp_watch_new() returns.
 */
int dest_view_new(dest_view **pv, const mcp_store *src, mcp_store *view,
                  const char *services, const char *endpoints);
void dest_view_del(dest_view *v); /* NULL is a no-op */

/*
 * Brings |view| up to date with |src| at |ts|: reads what changed in the
 * two collections since the last sync and rewrites the collections of the
 * Services concerned. Returns the number of Services recomputed (0: nothing
 * changed). Errors: NOMEM (the view may hold part of the change; the
 * Services concerned stay marked and the next sync finishes them).
 */
int dest_view_sync(dest_view *v, mcp_tstamp ts);

void dest_view_get_stats(const dest_view *v, dest_view_stats *st);

/* What the last input counted in bad_bodies or bad_addresses was, and
 * why: "<ns>/<name>: <reason>" ("" before any). Valid until the next
 * dest_view_sync(). */
const char *dest_view_why(const dest_view *v);

/* The view's helpers, also for tests (and the same rules as the
 * Destination module's): the collection of a service port, the resource
 * name of an address ("10.0.0.1:8080", "[2001:db8::1]:80"; |ip| is
 * parsed and printed back in canonical form), and the encoded
 * WeightedAddr. Each writes at most |len| bytes with the NUL and returns
 * the length of the whole result, or -1 for an |ip| that is not an
 * address. */
int dest_view_collection(char *buf, size_t len, const char *ns,
                         const char *svc, uint32_t port);
int dest_view_addr_name(char *buf, size_t len, const char *ip, uint32_t port);

#endif /* TOOLS_DEST_VIEW_H */
