/* The Destination view from Services and Endpoints: dest_view.h. */
#include "views/dest_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/struct.pb-c.h"
#include "views/view_util.h"
/* The Destination module's helpers, so that the adapter and the sessions
 * agree on names and bodies (mcp/destination.h, "View helpers"). */
#include <mcp/destination.h>

#define STRUCT_URL "type.googleapis.com/google.protobuf.Struct"

/* The name is ours (malloc'd), "" when unnamed. */
typedef mcp_dest_port dv_port;

typedef struct dv_addr {
  mcp_dest_addr a; /* the ip, parsed once (port set per service port) */
  char *pod; /* targetRef.name when targetRef.kind == Pod, else NULL */
} dv_addr;

typedef struct dv_subset {
  dv_addr *addrs;
  size_t naddrs;
  dv_port *ports;
  size_t nports;
} dv_subset;

/* One "<ns>/<svc>": what its Service and its Endpoints say, and the view
 * collections published for it. */
typedef struct dv_svc {
  char *ns, *name;
  int has_svc;
  dv_port *ports;
  size_t nports;
  int has_ep;
  dv_subset *subsets;
  size_t nsubsets;
  uint32_t *published; /* port numbers whose collection exists */
  size_t npublished;
} dv_svc;

struct dest_view {
  const mcp_store *src;
  mcp_store *view;
  mcp_watch *wsvc, *wep;
  vmap svcs;  /* "<ns>/<svc>" -> dv_svc */
  vmap dirty; /* names of the svcs to recompute -> (void *)1 */
  dest_view_stats st;
  vbuf body;
  const char *cur; /* the document being read (for why) */
  char why[256];   /* the last input skipped, and why */
};

/* Counts one input skipped in |*counter| and says why (dest_view_why()). */
static void bad(dest_view *v, uint64_t *counter, const char *what,
                const char *detail) {
  (*counter)++;
  snprintf(v->why, sizeof v->why, "%s: %s%s%s%s", v->cur ? v->cur : "?",
           what, detail ? " '" : "", detail ? detail : "", detail ? "'" : "");
}

const char *dest_view_why(const dest_view *v) { return v->why; }

static void free_ports(dv_port *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    free((char *)(uintptr_t)p[i].name);
  free(p);
}

static void free_subsets(dv_subset *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < s[i].naddrs; j++)
      free(s[i].addrs[j].pod);
    free(s[i].addrs);
    free_ports(s[i].ports, s[i].nports);
  }
  free(s);
}

static void svc_free(dv_svc *s) {
  if (!s)
    return;
  free(s->ns);
  free(s->name);
  free_ports(s->ports, s->nports);
  free_subsets(s->subsets, s->nsubsets);
  free(s->published);
  free(s);
}

int dest_view_new(dest_view **pv, const mcp_store *src, mcp_store *view,
                  const char *services, const char *endpoints) {
  dest_view *v = calloc(1, sizeof *v);
  if (!v)
    return MCP_ERR_NOMEM;
  v->src = src;
  v->view = view;
  int rv = mcp_watch_new(&v->wsvc, src, services ? services : DEST_VIEW_SERVICES,
                         NULL, NULL);
  if (rv == 0)
    rv = mcp_watch_new(&v->wep, src,
                       endpoints ? endpoints : DEST_VIEW_ENDPOINTS, NULL, NULL);
  if (rv < 0) {
    dest_view_del(v);
    return rv;
  }
  *pv = v;
  return 0;
}

void dest_view_del(dest_view *v) {
  if (!v)
    return;
  size_t i = 0;
  const char *k;
  void *val;
  while (vmap_next(&v->svcs, &i, &k, &val))
    svc_free(val);
  vmap_free(&v->svcs);
  vmap_free(&v->dirty);
  mcp_watch_del(v->wsvc);
  mcp_watch_del(v->wep);
  vbuf_free(&v->body);
  free(v);
}

void dest_view_get_stats(const dest_view *v, dest_view_stats *st) {
  *st = v->st;
}

/* ------------------------------------------------------------------ */
/* Names and bodies                                                    */
/* ------------------------------------------------------------------ */

int dest_view_collection(char *buf, size_t len, const char *ns,
                         const char *svc, uint32_t port) {
  return (int)mcp_dest_view_collection(buf, len, ns, svc, port);
}

int dest_view_addr_name(char *buf, size_t len, const char *ip, uint32_t port) {
  mcp_dest_addr a;
  if (port > 65535 || mcp_dest_ip_parse(&a, ip, (uint16_t)port) < 0)
    return -1;
  return (int)mcp_dest_addr_name(&a, buf, len);
}

/* The encoded WeightedAddr of |a| (mcp_dest_weighted_addr_encode()) into
 * |b|. */
static int weighted_addr(vbuf *b, const mcp_dest_addr *a, const char *pod) {
  size_t n = mcp_dest_weighted_addr_encode(a, pod, NULL, 0);
  vbuf_reset(b);
  if (b->cap < n) {
    uint8_t *p = realloc(b->p, n);
    if (!p)
      return MCP_ERR_NOMEM;
    b->p = p;
    b->cap = n;
  }
  b->len = mcp_dest_weighted_addr_encode(a, pod, b->p, n);
  return 0;
}

/* ------------------------------------------------------------------ */
/* Struct bodies                                                       */
/* ------------------------------------------------------------------ */

static const Google__Protobuf__Value *sget(const Google__Protobuf__Struct *s,
                                           const char *key) {
  for (size_t i = 0; s && i < s->n_fields; i++)
    if (s->fields[i]->key && !strcmp(s->fields[i]->key, key))
      return s->fields[i]->value;
  return NULL;
}

static const char *sstr(const Google__Protobuf__Struct *s, const char *key) {
  const Google__Protobuf__Value *v = sget(s, key);
  return v && v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE
             ? v->string_value
             : NULL;
}

/* The list |key| of |s|; NULL when absent, or when it is not a list
 * (counted: the document's field is ignored). */
static const Google__Protobuf__ListValue *
slist(dest_view *dv, const Google__Protobuf__Struct *s, const char *key) {
  const Google__Protobuf__Value *v = sget(s, key);
  if (v && v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE)
    return v->list_value;
  if (v && v->kind_case != GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE)
    bad(dv, &dv->st.bad_addresses, "not a list, ignored:", key);
  return NULL;
}

static const Google__Protobuf__Struct *
sstruct_of(const Google__Protobuf__Value *v) {
  return v && v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE
             ? v->struct_value
             : NULL;
}

/* A port number: an integral number in 1..65535 (YAML may quote it). */
static int sport(const Google__Protobuf__Struct *s, uint32_t *port) {
  const Google__Protobuf__Value *v = sget(s, "port");
  double d;
  if (!v)
    return 0;
  if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE) {
    d = v->number_value;
  } else if (v->kind_case == GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE) {
    char *end;
    d = strtod(v->string_value, &end);
    if (end == v->string_value || *end)
      return 0;
  } else {
    return 0;
  }
  if (!(d >= 1 && d <= 65535) || d != (double)(uint32_t)d)
    return 0;
  *port = (uint32_t)d;
  return 1;
}

static char *dupnul(const char *s) { return strdup(s ? s : ""); }

/* ports: [{name, port}] -> |*pp|; skips bad entries (counted). */
static int parse_ports(dest_view *v, const Google__Protobuf__ListValue *l,
                       dv_port **pp, size_t *pn) {
  *pp = NULL;
  *pn = 0;
  if (!l || !l->n_values)
    return 0;
  dv_port *p = calloc(l->n_values, sizeof *p);
  if (!p)
    return MCP_ERR_NOMEM;
  size_t n = 0;
  for (size_t i = 0; i < l->n_values; i++) {
    const Google__Protobuf__Struct *e = sstruct_of(l->values[i]);
    uint32_t port;
    if (!e || !sport(e, &port)) {
      bad(v, &v->st.bad_addresses,
          "a port without a number in 1..65535, skipped", NULL);
      continue;
    }
    if (!(p[n].name = dupnul(sstr(e, "name")))) {
      free_ports(p, n);
      return MCP_ERR_NOMEM;
    }
    p[n++].port = port;
  }
  *pp = p;
  *pn = n;
  return 0;
}

static Google__Protobuf__Struct *unpack(dest_view *v, const mcp_item *it) {
  if (!it->type_url || strcmp(it->type_url, STRUCT_URL) != 0) {
    bad(v, &v->st.bad_bodies, "the body is not a", STRUCT_URL);
    return NULL;
  }
  Google__Protobuf__Struct *s =
      google__protobuf__struct__unpack(NULL, it->body_len, it->body);
  if (!s)
    bad(v, &v->st.bad_bodies, "the body does not decode as a Struct", NULL);
  return s;
}

/* Service spec -> ports. A body that is not a Struct: no ports. */
static int set_service(dest_view *v, dv_svc *s, const mcp_item *it) {
  Google__Protobuf__Struct *b = unpack(v, it);
  dv_port *p = NULL;
  size_t n = 0;
  int rv = parse_ports(v, slist(v, b, "ports"), &p, &n);
  if (b)
    google__protobuf__struct__free_unpacked(b, NULL);
  if (rv < 0)
    return rv;
  free_ports(s->ports, s->nports);
  s->ports = p;
  s->nports = n;
  s->has_svc = 1;
  return 0;
}

static int parse_subset(dest_view *v, const Google__Protobuf__Struct *e,
                        dv_subset *out) {
  memset(out, 0, sizeof *out);
  int rv = parse_ports(v, slist(v, e, "ports"), &out->ports, &out->nports);
  if (rv < 0)
    return rv;
  const Google__Protobuf__ListValue *a = slist(v, e, "addresses");
  if (!a || !a->n_values)
    return 0;
  if (!(out->addrs = calloc(a->n_values, sizeof *out->addrs)))
    return MCP_ERR_NOMEM;
  for (size_t i = 0; i < a->n_values; i++) {
    const Google__Protobuf__Struct *ad = sstruct_of(a->values[i]);
    const char *ip = sstr(ad, "ip");
    dv_addr *d = &out->addrs[out->naddrs];
    if (!ip || mcp_dest_ip_parse(&d->a, ip, 0) < 0) {
      bad(v, &v->st.bad_addresses,
          ip ? "not an IP address, skipped:" : "an address without ip, skipped",
          ip);
      continue;
    }
    const Google__Protobuf__Struct *ref =
        sstruct_of(sget(ad, "targetRef"));
    const char *kind = sstr(ref, "kind"), *pod = sstr(ref, "name");
    out->naddrs++;
    if (kind && !strcmp(kind, "Pod") && pod && !(d->pod = strdup(pod)))
      return MCP_ERR_NOMEM;
  }
  return 0;
}

static int set_endpoints(dest_view *v, dv_svc *s, const mcp_item *it) {
  Google__Protobuf__Struct *b = unpack(v, it);
  const Google__Protobuf__ListValue *l = slist(v, b, "subsets");
  dv_subset *sub = NULL;
  size_t n = 0;
  int rv = 0;
  if (l && l->n_values) {
    if (!(sub = calloc(l->n_values, sizeof *sub)))
      rv = MCP_ERR_NOMEM;
    for (size_t i = 0; rv == 0 && i < l->n_values; i++) {
      const Google__Protobuf__Struct *e = sstruct_of(l->values[i]);
      if (!e) {
        bad(v, &v->st.bad_addresses, "a subset that is not a map, skipped",
            NULL);
        continue;
      }
      rv = parse_subset(v, e, &sub[n]);
      n++;
    }
  }
  if (b)
    google__protobuf__struct__free_unpacked(b, NULL);
  if (rv < 0) {
    free_subsets(sub, n);
    return rv;
  }
  free_subsets(s->subsets, s->nsubsets);
  s->subsets = sub;
  s->nsubsets = n;
  s->has_ep = 1;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Changes                                                             */
/* ------------------------------------------------------------------ */

static dv_svc *svc_get(dest_view *v, const char *name, int create) {
  dv_svc *s = vmap_get(&v->svcs, name);
  if (s || !create)
    return s;
  if (!(s = calloc(1, sizeof *s)))
    return NULL;
  const char *slash = strrchr(name, '/');
  s->ns = slash ? strndup(name, (size_t)(slash - name)) : strdup("default");
  s->name = strdup(slash ? slash + 1 : name);
  if (!s->ns || !s->name || vmap_put(&v->svcs, name, s) < 0) {
    svc_free(s);
    return NULL;
  }
  return s;
}

typedef struct take_ctx {
  dest_view *v;
  int endpoints;
  vmap *seen; /* names listed by this take */
} take_ctx;

static int on_item(const mcp_item *it, void *ud) {
  take_ctx *c = ud;
  if (c->seen && vmap_put(c->seen, it->name, (void *)1) < 0)
    return MCP_ERR_NOMEM;
  dv_svc *s = svc_get(c->v, it->name, !it->removed);
  if (!s)
    return it->removed ? 0 : MCP_ERR_NOMEM;
  if (vmap_put(&c->v->dirty, it->name, (void *)1) < 0)
    return MCP_ERR_NOMEM;
  c->v->cur = it->name; /* (valid during the call) */
  if (it->removed) {
    if (c->endpoints) {
      free_subsets(s->subsets, s->nsubsets);
      s->subsets = NULL;
      s->nsubsets = 0;
      s->has_ep = 0;
    } else {
      free_ports(s->ports, s->nports);
      s->ports = NULL;
      s->nports = 0;
      s->has_svc = 0;
    }
    return 0;
  }
  return c->endpoints ? set_endpoints(c->v, s, it) : set_service(c->v, s, it);
}

/* ------------------------------------------------------------------ */
/* Recomputing one Service                                             */
/* ------------------------------------------------------------------ */

typedef struct dv_res {
  char name[MCP_DEST_ADDR_NAME_MAX];
  uint8_t *body;
  size_t len;
} dv_res;

static int cmp_res(const void *a, const void *b) {
  return strcmp(((const dv_res *)a)->name, ((const dv_res *)b)->name);
}

/* The resources of service port |sp|, sorted and without duplicates. */
static int port_resources(dest_view *v, const dv_svc *s, const dv_port *sp,
                          dv_res **pres, size_t *pn) {
  size_t max = 0, n = 0;
  for (size_t i = 0; i < s->nsubsets; i++)
    max += s->subsets[i].naddrs;
  *pres = NULL;
  *pn = 0;
  if (!max)
    return 0;
  dv_res *res = calloc(max, sizeof *res);
  if (!res)
    return MCP_ERR_NOMEM;
  for (size_t i = 0; i < s->nsubsets; i++) {
    const dv_subset *sub = &s->subsets[i];
    const dv_port *ep = mcp_dest_endpoints_port(sp, sub->ports, sub->nports);
    if (!ep)
      continue;
    for (size_t j = 0; j < sub->naddrs; j++) {
      dv_res *r = &res[n];
      mcp_dest_addr a = sub->addrs[j].a;
      a.port = (uint16_t)ep->port; /* 1..65535 (sport()) */
      mcp_dest_addr_name(&a, r->name, sizeof r->name);
      int rv = weighted_addr(&v->body, &a, sub->addrs[j].pod);
      if (rv == 0 && !(r->body = malloc(v->body.len ? v->body.len : 1)))
        rv = MCP_ERR_NOMEM;
      if (rv < 0) {
        for (size_t k = 0; k < n; k++)
          free(res[k].body);
        free(res);
        return rv;
      }
      memcpy(r->body, v->body.p, v->body.len);
      r->len = v->body.len;
      n++;
    }
  }
  qsort(res, n, sizeof *res, cmp_res);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k && !strcmp(res[k - 1].name, res[i].name)) {
      free(res[i].body); /* the first listed wins */
      continue;
    }
    res[k++] = res[i];
  }
  *pres = res;
  *pn = k;
  return 0;
}

static int has_port(const uint32_t *p, size_t n, uint32_t port) {
  for (size_t i = 0; i < n; i++)
    if (p[i] == port)
      return 1;
  return 0;
}

static int recompute(dest_view *v, dv_svc *s, mcp_tstamp ts) {
  char coll[1024];
  uint32_t *now = NULL;
  size_t nnow = 0;
  int rv = 0;
  if (s->has_svc && s->nports &&
      !(now = malloc(s->nports * sizeof *now)))
    return MCP_ERR_NOMEM;
  for (size_t i = 0; s->has_svc && i < s->nports && rv == 0; i++) {
    const dv_port *sp = &s->ports[i];
    if (has_port(now, nnow, sp->port))
      continue; /* the first entry with that number wins */
    dv_res *res;
    size_t n;
    if ((rv = port_resources(v, s, sp, &res, &n)) < 0)
      break;
    mcp_resource *r = n ? calloc(n, sizeof *r) : NULL;
    if (n && !r) {
      rv = MCP_ERR_NOMEM;
    } else {
      for (size_t k = 0; k < n; k++) {
        r[k].name = res[k].name;
        r[k].type_url = DEST_VIEW_TYPE_URL;
        r[k].body = res[k].body;
        r[k].body_len = res[k].len;
      }
      dest_view_collection(coll, sizeof coll, s->ns, s->name, sp->port);
      rv = mcp_store_add_collection(v->view, coll);
      if (rv >= 0)
        rv = mcp_store_replace(v->view, coll, r, n, ts);
      if (rv >= 0) {
        rv = 0;
        now[nnow++] = sp->port;
      }
    }
    free(r);
    for (size_t k = 0; k < n; k++)
      free(res[k].body);
    free(res);
  }
  if (rv < 0) {
    free(now);
    return rv;
  }
  for (size_t i = 0; i < s->npublished; i++) {
    if (has_port(now, nnow, s->published[i]))
      continue;
    dest_view_collection(coll, sizeof coll, s->ns, s->name, s->published[i]);
    if ((rv = mcp_store_remove_collection(v->view, coll, ts)) < 0) {
      free(now);
      return rv;
    }
  }
  free(s->published);
  s->published = now;
  s->npublished = nnow;
  v->st.services++;
  return 0;
}

/* After a whole take of the Services (|endpoints| 0) or the Endpoints:
 * what it did not list is gone. */
static int drop_unseen(dest_view *v, int endpoints, const vmap *seen) {
  take_ctx c = {v, endpoints, NULL};
  size_t i = 0;
  const char *k;
  void *val;
  while (vmap_next(&v->svcs, &i, &k, &val)) {
    dv_svc *s = val;
    if ((endpoints ? s->has_ep : s->has_svc) && !vmap_get(seen, k)) {
      mcp_item gone = {.name = k, .removed = 1};
      int rv = on_item(&gone, &c);
      if (rv < 0)
        return rv;
    }
  }
  return 0;
}

int dest_view_sync(dest_view *v, mcp_tstamp ts) {
  int rv;
  /* O(changed): each take reports what changed, and only the Services it
   * names are recomputed. A whole state (the first take, or the change log
   * no longer reaches) lists only what is live: what it does not list is
   * gone. */
  for (int ep = 0; ep < 2; ep++) {
    mcp_watch *w = ep ? v->wep : v->wsvc;
    if (!mcp_watch_changed(w))
      continue;
    vmap seen = {0};
    take_ctx c = {v, ep, &seen};
    int full = 0;
    rv = mcp_watch_take(w, ts, on_item, &c, &full);
    if (rv >= 0 && full)
      rv = drop_unseen(v, ep, &seen);
    vmap_free(&seen);
    if (rv < 0)
      return rv;
  }
  int n = 0;
  size_t i = 0;
  const char *k;
  void *val;
  while (vmap_next(&v->dirty, &i, &k, &val)) {
    dv_svc *s = vmap_get(&v->svcs, k);
    if (s) {
      if ((rv = recompute(v, s, ts)) < 0)
        return rv;
      n++;
      if (!s->has_svc && !s->has_ep && !s->npublished)
        svc_free(vmap_del(&v->svcs, k));
    }
    vmap_del(&v->dirty, k);
  }
  if (n)
    v->st.syncs++;
  return n;
}
