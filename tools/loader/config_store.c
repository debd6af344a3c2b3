/* The part of mcpcfg that calls the core: kept apart so that the loader
 * itself depends on the core's header only. */
#include "loader/config_internal.h"

const char *mcpcfg_strerror(int err) {
  if (err == MCPCFG_ERR_IO)
    return "cannot read the configuration directory";
  return mcp_strerror(err);
}

int mcpcfg_loader_apply(mcpcfg_loader *l, mcp_store *store, mcp_tstamp ts) {
  int changed = 0;
  for (size_t i = 0; i < mcpcfg_loader_collection_count(l); i++) {
    if (!mcpcfg_loader_unapplied(l, i))
      continue; /* the store has it: validating it again costs O(all) */
    const char *name = mcpcfg_loader_collection_name(l, i);
    const mcp_resource *res;
    size_t n = mcpcfg_loader_resources(l, i, &res);
    /* Declared first, so that an empty collection is still served. */
    int rv = mcp_store_add_collection(store, name);
    const char *const *names;
    size_t nd = mcpcfg_loader_delta(l, i, &names);
    if (rv >= 0 && nd != (size_t)-1) {
      /* What changed only: the store's cost stays O(changed). Applying
       * again after a failure converges (upsert and delete are
       * idempotent). */
      int any = 0;
      for (size_t k = 0; k < nd && rv >= 0; k++) {
        const mcp_resource *r = mcpcfg_loader_find(l, name, names[k]);
        rv = r ? mcp_store_upsert(store, name, r, ts)
               : mcp_store_delete(store, name, names[k], ts);
        any |= rv > 0;
      }
      if (rv >= 0)
        rv = any;
    } else if (rv >= 0) {
      rv = mcp_store_replace(store, name, res, n, ts);
    }
    if (rv < 0)
      return rv;
    mcpcfg_loader_mark_applied(l, i);
    changed += rv > 0;
  }
  return changed;
}
