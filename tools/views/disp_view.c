/* The Dispatcher view from swarmkit objects: disp_view.h. */
#include "views/disp_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/struct.pb-c.h"
#include "views/view_util.h"
#include "util/grow.h"
/* The Dispatcher module's names, so that both sides agree. */
#include <mcp/dispatcher.h>

#define STRUCT_URL "type.googleapis.com/google.protobuf.Struct"

enum { K_TASK, K_SECRET, K_CONFIG, K_NODE, K_N };
static const char *const kind_msg[K_N] = {"Task", "Secret", "Config", "Node"};
static const char *const kind_def[K_N] = {DISP_VIEW_TASKS, DISP_VIEW_SECRETS,
                                          DISP_VIEW_CONFIGS, DISP_VIEW_NODES};

/* Task.id (objects.proto): set from the document's name. */
#define TASK_ID 1

typedef struct strv {
  char **v;
  size_t n;
} strv;

static void strv_free(strv *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

static int strv_add(strv *s, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < s->n; i++)
    if (strlen(s->v[i]) == n && !memcmp(s->v[i], p, n))
      return 0;
  char **v = realloc(s->v, (s->n + 1) * sizeof *v);
  if (!v)
    return MCP_ERR_NOMEM;
  s->v = v;
  if (!(s->v[s->n] = strndup((const char *)p, n)))
    return MCP_ERR_NOMEM;
  s->n++;
  return 0;
}

typedef struct dp_task {
  char *id;
  char *node; /* node_id, "" when none */
  int state;
  uint8_t *body; /* the Task, id set */
  size_t len;
  strv secrets, configs; /* referenced ids */
  /* What the view holds for it: the node published on and the bytes. */
  char *served_node;
  uint8_t *served;
  size_t served_len;
} dp_task;

typedef struct dp_obj { /* a secret or config: id set */
  uint8_t *body;
  size_t len;
} dp_obj;

struct disp_view {
  const mcp_store *src;
  mcp_store *view;
  const mcp_schema *schema;
  mcp_watch *w[K_N];
  vmap tasks;         /* id -> dp_task */
  vmap objs[2];       /* secrets, configs: id -> dp_obj */
  vmap refs[2];       /* secret/config id -> vmap* (task id -> dp_task) */
  vmap node_tasks;    /* node id -> vmap* (task id -> dp_task) */
  vmap dirty;         /* node ids to recompute -> (void *)1 */
  vmap published;     /* node ids whose collection exists -> (void *)1 */
  int nodes_changed;
  disp_view_stats st;
  const char *cur; /* the document being read (for why) */
  char why[256];   /* the last body skipped, and why */
};

/* Counts one body skipped and says why (disp_view_why()). */
static void bad(disp_view *v, const char *what, const char *detail) {
  v->st.bad_bodies++;
  snprintf(v->why, sizeof v->why, "%s: %s%s%.160s", v->cur ? v->cur : "?",
           what, detail ? ": " : "", detail ? detail : "");
}

const char *disp_view_why(const disp_view *v) { return v->why; }

static void task_free(dp_task *t) {
  if (!t)
    return;
  free(t->id);
  free(t->node);
  free(t->body);
  strv_free(&t->secrets);
  strv_free(&t->configs);
  free(t->served_node);
  free(t->served);
  free(t);
}

static void obj_free(dp_obj *o) {
  if (o)
    free(o->body);
  free(o);
}

/* Frees a map of maps (the inner values are not owned). */
static void free_index(vmap *m) {
  size_t i = 0;
  const char *k;
  void *val;
  while (vmap_next(m, &i, &k, &val)) {
    vmap_free(val);
    free(val);
  }
  vmap_free(m);
}

int disp_view_new(disp_view **pv, const mcp_store *src, mcp_store *view,
                  const disp_view_options *opts) {
  disp_view *v = calloc(1, sizeof *v);
  if (!v)
    return MCP_ERR_NOMEM;
  v->src = src;
  v->view = view;
  v->schema = opts ? opts->schema : NULL;
  const char *names[K_N] = {opts ? opts->tasks : NULL,
                            opts ? opts->secrets : NULL,
                            opts ? opts->configs : NULL,
                            opts ? opts->nodes : NULL};
  for (int k = 0; k < K_N; k++) {
    int rv = mcp_watch_new(&v->w[k], src, names[k] ? names[k] : kind_def[k],
                           NULL, NULL);
    if (rv < 0) {
      disp_view_del(v);
      return rv;
    }
  }
  *pv = v;
  return 0;
}

void disp_view_del(disp_view *v) {
  if (!v)
    return;
  size_t i = 0;
  const char *k;
  void *val;
  while (vmap_next(&v->tasks, &i, &k, &val))
    task_free(val);
  vmap_free(&v->tasks);
  for (int j = 0; j < 2; j++) {
    i = 0;
    while (vmap_next(&v->objs[j], &i, &k, &val))
      obj_free(val);
    vmap_free(&v->objs[j]);
    free_index(&v->refs[j]);
  }
  free_index(&v->node_tasks);
  vmap_free(&v->dirty);
  vmap_free(&v->published);
  for (int j = 0; j < K_N; j++)
    mcp_watch_del(v->w[j]);
  free(v);
}

void disp_view_get_stats(const disp_view *v, disp_view_stats *st) {
  *st = v->st;
}

/* ------------------------------------------------------------------ */
/* Bodies                                                              */
/* ------------------------------------------------------------------ */

/* Struct -> mcp_schema_value, every node malloc'd into |pool|. */
typedef struct sv_pool {
  void **p;
  size_t n, cap;
  int failed;
} sv_pool;

static void *pool_alloc(sv_pool *pl, size_t size) {
  if (pl->failed)
    return NULL;
  void **p = tool_grow(pl->p, pl->n, &pl->cap, sizeof *p, 32);
  if (!p) {
    pl->failed = 1;
    return NULL;
  }
  pl->p = p;
  void *x = calloc(1, size ? size : 1);
  if (!x) {
    pl->failed = 1;
    return NULL;
  }
  pl->p[pl->n++] = x;
  return x;
}

static void pool_free(sv_pool *pl) {
  for (size_t i = 0; i < pl->n; i++)
    free(pl->p[i]);
  free(pl->p);
}

static const mcp_schema_value *sv_struct(sv_pool *pl,
                                         const Google__Protobuf__Struct *s);

static mcp_schema_value *sv_scalar(sv_pool *pl, mcp_schema_kind kind,
                                   const char *text) {
  mcp_schema_value *x = pool_alloc(pl, sizeof *x);
  if (!x)
    return NULL;
  x->kind = kind;
  x->text = text;
  x->len = strlen(text);
  return x;
}

static const mcp_schema_value *sv_value(sv_pool *pl,
                                        const Google__Protobuf__Value *v) {
  if (!v)
    return sv_scalar(pl, MCP_SCHEMA_NULL, "");
  switch (v->kind_case) {
  case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
    return sv_struct(pl, v->struct_value);
  case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE: {
    mcp_schema_value *x = pool_alloc(pl, sizeof *x);
    const Google__Protobuf__ListValue *l = v->list_value;
    size_t n = l ? l->n_values : 0;
    const mcp_schema_value **kids = pool_alloc(pl, n * sizeof *kids);
    if (!x || !kids)
      return NULL;
    for (size_t i = 0; i < n; i++)
      if (!(kids[i] = sv_value(pl, l->values[i])))
        return NULL;
    x->kind = MCP_SCHEMA_LIST;
    x->text = "";
    x->kids = kids;
    x->n = n;
    return x;
  }
  case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
    return sv_scalar(pl, MCP_SCHEMA_STRING, v->string_value);
  case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE: {
    mcp_schema_value *x =
        sv_scalar(pl, MCP_SCHEMA_BOOL, v->bool_value ? "true" : "false");
    if (x)
      x->boolean = v->bool_value;
    return x;
  }
  case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE: {
    char *t = pool_alloc(pl, 32);
    if (!t)
      return NULL;
    snprintf(t, 32, "%.17g", v->number_value);
    return sv_scalar(pl, MCP_SCHEMA_NUMBER, t);
  }
  default:
    return sv_scalar(pl, MCP_SCHEMA_NULL, "");
  }
}

static const mcp_schema_value *sv_struct(sv_pool *pl,
                                         const Google__Protobuf__Struct *s) {
  size_t n = s ? s->n_fields : 0;
  mcp_schema_value *x = pool_alloc(pl, sizeof *x);
  const mcp_schema_value **kids = pool_alloc(pl, 2 * n * sizeof *kids);
  if (!x || !kids)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (!(kids[2 * i] = sv_scalar(pl, MCP_SCHEMA_STRING,
                                  s->fields[i]->key ? s->fields[i]->key : "")) ||
        !(kids[2 * i + 1] = sv_value(pl, s->fields[i]->value)))
      return NULL;
  }
  x->kind = MCP_SCHEMA_MAP;
  x->text = "";
  x->kids = kids;
  x->n = n;
  return x;
}

/*
 * The object of |it| (kind |k|) as wire bytes with `id` = |id| (written
 * first, any id of the body dropped): 0 and |*out| (malloc'd), 1 when the
 * body cannot be read (counted), NOMEM.
 */
static int object_bytes(disp_view *v, int k, const mcp_item *it,
                        const char *id, uint8_t **out, size_t *outlen) {
  char url[128];
  snprintf(url, sizeof url, DISP_VIEW_URL_PREFIX "%s", kind_msg[k]);
  const uint8_t *body = it->body;
  size_t len = it->body_len;
  uint8_t *typed = NULL;
  if (it->type_url && !strcmp(it->type_url, STRUCT_URL) && v->schema) {
    Google__Protobuf__Struct *s =
        google__protobuf__struct__unpack(NULL, it->body_len, it->body);
    if (!s) {
      bad(v, "the body does not decode as a Struct", NULL);
      return 1;
    }
    mcp_schema_error err = {0};
    sv_pool pl = {0};
    const mcp_schema_value *sv = sv_struct(&pl, s);
    int rv = MCP_ERR_NOMEM;
    if (sv)
      rv = mcp_schema_encode(v->schema, url + strlen("type.googleapis.com/"),
                             sv, "spec", 0, &typed, &len, &err);
    pool_free(&pl);
    google__protobuf__struct__free_unpacked(s, NULL);
    if (rv == MCP_ERR_NOMEM)
      return rv;
    if (rv < 0) {
      bad(v, "not a valid object", err.message);
      return 1;
    }
    body = typed;
  } else if (!it->type_url || strcmp(it->type_url, url) != 0) {
    bad(v, "the body is not a", url);
    return 1;
  }
  vbuf b = {0};
  pbw_str(&b, TASK_ID, id); /* field 1 is `id` in all four messages */
  const uint8_t *p = body, *end = body + len;
  pbr_field f;
  int r;
  while ((r = pbr_next(&p, end, &f)) > 0)
    if (f.field != TASK_ID)
      vbuf_put(&b, f.start, f.total);
  if (typed)
    mcp_schema_free_bytes(v->schema, typed);
  if (r < 0) {
    vbuf_free(&b);
    bad(v, "the body is not protobuf", NULL);
    return 1;
  }
  if (b.failed) {
    vbuf_free(&b);
    return MCP_ERR_NOMEM;
  }
  *out = b.p;
  *outlen = b.len;
  return 0;
}

/* The id of a resource: its name's last segment. */
static const char *id_of(const char *name) {
  const char *s = strrchr(name, '/');
  return s ? s + 1 : name;
}

static int add_ref(int kind, const char *id, size_t len, void *ud) {
  dp_task *t = ud;
  return strv_add(kind == MCP_DISP_SECRET ? &t->secrets : &t->configs,
                  (const uint8_t *)id, len) < 0
             ? MCP_ERR_NOMEM
             : 0;
}

/* Reads node_id, status.state and the references of a Task through the
 * core's rules (mcp_disp_task_read). 0, 1 when malformed (counted),
 * NOMEM. */
static int read_task(disp_view *v, dp_task *t) {
  mcp_disp_task_info info;
  strv_free(&t->secrets);
  strv_free(&t->configs);
  int r = mcp_disp_task_read(t->body, t->len, &info, add_ref, t);
  if (r == MCP_ERR_NOMEM)
    return r;
  if (r == MCP_ERR_INVALID_ARGUMENT) {
    char n[16];
    snprintf(n, sizeof n, "%d", info.state);
    bad(v, "a Task in an unknown status.state", n);
    return 1;
  }
  if (r < 0) {
    bad(v, "a Task that does not decode", NULL);
    return 1;
  }
  free(t->node);
  if (!(t->node = strndup(info.node_id, info.node_id_len)))
    return MCP_ERR_NOMEM;
  t->state = info.state;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Indexes                                                             */
/* ------------------------------------------------------------------ */

static int mark(disp_view *v, const char *node) {
  if (!node || !*node)
    return 0;
  return vmap_put(&v->dirty, node, (void *)1) < 0 ? MCP_ERR_NOMEM : 0;
}

static int index_add(vmap *idx, const char *key, dp_task *t) {
  vmap *m = vmap_get(idx, key);
  if (!m) {
    if (!(m = calloc(1, sizeof *m)))
      return MCP_ERR_NOMEM;
    if (vmap_put(idx, key, m) < 0) {
      free(m);
      return MCP_ERR_NOMEM;
    }
  }
  return vmap_put(m, t->id, t) < 0 ? MCP_ERR_NOMEM : 0;
}

static void index_del(vmap *idx, const char *key, const dp_task *t) {
  vmap *m = vmap_get(idx, key);
  if (!m)
    return;
  vmap_del(m, t->id);
  if (!m->n) {
    vmap_del(idx, key);
    vmap_free(m);
    free(m);
  }
}

/* Takes |t| out of every index (its node is marked). */
static int unindex(disp_view *v, dp_task *t) {
  for (size_t i = 0; i < t->secrets.n; i++)
    index_del(&v->refs[0], t->secrets.v[i], t);
  for (size_t i = 0; i < t->configs.n; i++)
    index_del(&v->refs[1], t->configs.v[i], t);
  if (t->node && *t->node)
    index_del(&v->node_tasks, t->node, t);
  return mark(v, t->node);
}

static int reindex(disp_view *v, dp_task *t) {
  int rv = 0;
  for (size_t i = 0; rv == 0 && i < t->secrets.n; i++)
    rv = index_add(&v->refs[0], t->secrets.v[i], t);
  for (size_t i = 0; rv == 0 && i < t->configs.n; i++)
    rv = index_add(&v->refs[1], t->configs.v[i], t);
  if (rv == 0 && *t->node)
    rv = index_add(&v->node_tasks, t->node, t);
  return rv ? rv : mark(v, t->node);
}

/* Marks the nodes of every task referencing object |id| of kind |k|. */
static int mark_referrers(disp_view *v, int k, const char *id) {
  vmap *m = vmap_get(&v->refs[k == K_SECRET ? 0 : 1], id);
  size_t i = 0;
  const char *tid;
  void *val;
  while (m && vmap_next(m, &i, &tid, &val))
    if (mark(v, ((dp_task *)val)->node) < 0)
      return MCP_ERR_NOMEM;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Changes                                                             */
/* ------------------------------------------------------------------ */

static int task_gone(disp_view *v, const char *id) {
  dp_task *t = vmap_get(&v->tasks, id);
  if (!t)
    return 0;
  if (unindex(v, t) < 0)
    return MCP_ERR_NOMEM;
  /* The node collection it was on is rewritten without it (marked). */
  if (t->served_node && mark(v, t->served_node) < 0)
    return MCP_ERR_NOMEM;
  task_free(vmap_del(&v->tasks, id));
  return 0;
}

static int task_set(disp_view *v, const mcp_item *it) {
  const char *id = id_of(it->name);
  dp_task nt = {0};
  int rv = object_bytes(v, K_TASK, it, id, &nt.body, &nt.len);
  if (rv != 0)
    return rv < 0 ? rv : task_gone(v, id); /* unreadable: as absent */
  if ((rv = read_task(v, &nt)) != 0) {
    task_free_fields:
    free(nt.body);
    free(nt.node);
    strv_free(&nt.secrets);
    strv_free(&nt.configs);
    if (rv > 0)
      return task_gone(v, id);
    return rv;
  }
  dp_task *t = vmap_get(&v->tasks, id);
  if (!t) {
    if (!(t = calloc(1, sizeof *t)) || !(t->id = strdup(id)) ||
        vmap_put(&v->tasks, id, t) < 0) {
      task_free(t);
      rv = MCP_ERR_NOMEM;
      goto task_free_fields;
    }
  } else if (unindex(v, t) < 0) {
    rv = MCP_ERR_NOMEM;
    goto task_free_fields;
  }
  free(t->body);
  free(t->node);
  strv_free(&t->secrets);
  strv_free(&t->configs);
  t->body = nt.body;
  t->len = nt.len;
  t->node = nt.node;
  t->state = nt.state;
  t->secrets = nt.secrets;
  t->configs = nt.configs;
  if (t->served_node && strcmp(t->served_node, t->node) != 0) {
    /* Moved: its old node loses it; what it was served there says nothing
     * about the new one. */
    if (mark(v, t->served_node) < 0)
      return MCP_ERR_NOMEM;
    free(t->served_node);
    free(t->served);
    t->served_node = NULL;
    t->served = NULL;
    t->served_len = 0;
  }
  return reindex(v, t);
}

static int obj_set(disp_view *v, int k, const mcp_item *it) {
  const char *id = id_of(it->name);
  vmap *objs = &v->objs[k == K_SECRET ? 0 : 1];
  dp_obj *o = vmap_get(objs, id);
  if (it->removed) {
    if (!o)
      return 0;
    obj_free(vmap_del(objs, id));
    return mark_referrers(v, k, id);
  }
  uint8_t *b;
  size_t len;
  int rv = object_bytes(v, k, it, id, &b, &len);
  if (rv != 0) {
    if (rv < 0 || !o)
      return rv < 0 ? rv : 0;
    obj_free(vmap_del(objs, id)); /* unreadable: as absent */
    return mark_referrers(v, k, id);
  }
  if (!o) {
    if (!(o = calloc(1, sizeof *o)) || vmap_put(objs, id, o) < 0) {
      free(o);
      free(b);
      return MCP_ERR_NOMEM;
    }
  }
  free(o->body);
  o->body = b;
  o->len = len;
  return mark_referrers(v, k, id);
}

static int node_set(disp_view *v, const mcp_item *it, mcp_tstamp ts) {
  const char *id = id_of(it->name);
  int rv;
  if (it->removed) {
    rv = mcp_store_delete(v->view, "nodes", id, ts);
  } else {
    uint8_t *b;
    size_t len;
    rv = object_bytes(v, K_NODE, it, id, &b, &len);
    if (rv > 0)
      return mcp_store_delete(v->view, "nodes", id, ts) < 0 ? MCP_ERR_NOMEM
                                                            : 0;
    if (rv < 0)
      return rv;
    mcp_resource r = {.name = id,
                      .type_url = DISP_VIEW_URL_PREFIX "Node",
                      .body = b,
                      .body_len = len};
    rv = mcp_store_upsert(v->view, "nodes", &r, ts);
    free(b);
  }
  if (rv > 0)
    v->nodes_changed = 1;
  return rv < 0 ? rv : 0;
}

typedef struct take_ctx {
  disp_view *v;
  int k;
  mcp_tstamp ts;
  vmap *seen; /* names listed by this take */
} take_ctx;

static int on_item(const mcp_item *it, void *ud) {
  take_ctx *c = ud;
  c->v->cur = it->name; /* (valid during the call) */
  if (c->seen && vmap_put(c->seen, id_of(it->name), (void *)1) < 0)
    return MCP_ERR_NOMEM;
  switch (c->k) {
  case K_TASK:
    return it->removed ? task_gone(c->v, id_of(it->name))
                       : task_set(c->v, it);
  case K_SECRET:
  case K_CONFIG:
    return obj_set(c->v, c->k, it);
  default:
    return node_set(c->v, it, c->ts);
  }
}

/* After a whole take of kind |k|: what it did not list is gone. */
static int drop_unseen(disp_view *v, int k, const vmap *seen, mcp_tstamp ts) {
  vmap *m = k == K_TASK ? &v->tasks : &v->objs[k == K_SECRET ? 0 : 1];
  char **gone = NULL;
  size_t ngone = 0, cap = 0;
  int rv = 0;
  {
    size_t i = 0;
    const char *key;
    void *val;
    while (vmap_next(m, &i, &key, &val)) {
      if (vmap_get(seen, key))
        continue;
      if (ngone == cap) {
        cap = cap ? 2 * cap : 16;
        char **g = realloc(gone, cap * sizeof *g);
        if (!g) {
          rv = MCP_ERR_NOMEM;
          break;
        }
        gone = g;
      }
      if (!(gone[ngone] = strdup(key))) {
        rv = MCP_ERR_NOMEM;
        break;
      }
      ngone++;
    }
  }
  for (size_t i = 0; i < ngone; i++) {
    if (rv == 0) {
      mcp_item gi = {.name = gone[i], .removed = 1};
      take_ctx c = {v, k, ts, NULL};
      rv = on_item(&gi, &c);
    }
    free(gone[i]);
  }
  free(gone);
  return rv;
}

/* Node names the view's "nodes" collection holds that a whole take did not
 * list. */
typedef struct nodes_ctx {
  const vmap *seen;
  strv gone;
  int rv;
} nodes_ctx;

static void on_node_name(const char *name, const char *version, void *ud) {
  nodes_ctx *c = ud;
  (void)version;
  if (!c->rv && !vmap_get(c->seen, name) &&
      strv_add(&c->gone, (const uint8_t *)name, strlen(name)) < 0)
    c->rv = MCP_ERR_NOMEM;
}

static int drop_unseen_nodes(disp_view *v, const vmap *seen, mcp_tstamp ts) {
  nodes_ctx c = {seen, {0}, 0};
  mcp_store_foreach(v->view, "nodes", on_node_name, &c);
  for (size_t i = 0; c.rv == 0 && i < c.gone.n; i++) {
    int rv = mcp_store_delete(v->view, "nodes", c.gone.v[i], ts);
    if (rv < 0)
      c.rv = rv;
    else if (rv > 0)
      v->nodes_changed = 1;
  }
  strv_free(&c.gone);
  return c.rv;
}

/* ------------------------------------------------------------------ */
/* Recomputing one node                                                */
/* ------------------------------------------------------------------ */

typedef struct res_list {
  mcp_resource *r;
  char (*names)[300];
  size_t n, cap;
} res_list;

static int res_add(res_list *l, int kind, const char *id, const char *type,
                   const uint8_t *body, size_t len) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    mcp_resource *r = realloc(l->r, cap * sizeof *r);
    if (r)
      l->r = r;
    char(*nm)[300] = r ? realloc(l->names, cap * sizeof *nm) : NULL;
    if (!nm)
      return MCP_ERR_NOMEM;
    l->names = nm;
    l->cap = cap;
  }
  /* Names are re-pointed once the arrays stop moving (recompute()). */
  static const int kinds[] = {MCP_DISP_TASK, MCP_DISP_SECRET, MCP_DISP_CONFIG};
  mcp_disp_item_name(l->names[l->n], sizeof l->names[l->n], kinds[kind], id);
  mcp_resource *r = &l->r[l->n++];
  memset(r, 0, sizeof *r);
  r->type_url = type;
  r->body = body;
  r->body_len = len;
  return 0;
}

static int recompute(disp_view *v, const char *node, mcp_tstamp ts) {
  res_list l = {0};
  strv sec = {0}, cfg = {0};
  int rv = 0;
  vmap *m = vmap_get(&v->node_tasks, node);
  size_t i = 0;
  const char *tid;
  void *val;
  while (rv == 0 && m && vmap_next(m, &i, &tid, &val)) {
    dp_task *t = val;
    if (!mcp_disp_task_assigned(t->state)) {
      free(t->served_node); /* not on the node (any more) */
      free(t->served);
      t->served_node = NULL;
      t->served = NULL;
      t->served_len = 0;
      continue;
    }
    if (!(t->served_node && !strcmp(t->served_node, node) && t->served &&
          mcp_disp_task_keeps_held(t->served, t->served_len, t->body, t->len,
                                   t->state))) {
      /* Published as it is now (swarmkit keeps the old bytes for a task
       * past ASSIGNED whose update changed nothing but its status). */
      uint8_t *copy = malloc(t->len ? t->len : 1);
      char *sn = t->served_node && !strcmp(t->served_node, node)
                     ? t->served_node
                     : strdup(node);
      if (!copy || !sn) {
        free(copy);
        if (sn != t->served_node)
          free(sn);
        rv = MCP_ERR_NOMEM;
        break;
      }
      memcpy(copy, t->body, t->len);
      free(t->served);
      if (sn != t->served_node)
        free(t->served_node);
      t->served = copy;
      t->served_len = t->len;
      t->served_node = sn;
    } else if (t->served_len != t->len ||
               memcmp(t->served, t->body, t->len) != 0) {
      v->st.kept++;
    }
    rv = res_add(&l, K_TASK, t->id, DISP_VIEW_URL_PREFIX "Task", t->served,
                 t->served_len);
    /* swarmkit releases the secrets and configs of a task past RUNNING
     * (assignments.go releaseTaskDependencies) and never adds them for one
     * first seen there: the node keeps only what a live task uses. */
    if (t->state > MCP_DISP_TASK_RUNNING)
      continue;
    for (size_t j = 0; rv == 0 && j < t->secrets.n; j++)
      rv = strv_add(&sec, (const uint8_t *)t->secrets.v[j],
                    strlen(t->secrets.v[j]));
    for (size_t j = 0; rv == 0 && j < t->configs.n; j++)
      rv = strv_add(&cfg, (const uint8_t *)t->configs.v[j],
                    strlen(t->configs.v[j]));
  }
  for (int k = 0; k < 2 && rv == 0; k++) {
    strv *ids = k ? &cfg : &sec;
    for (size_t j = 0; rv == 0 && j < ids->n; j++) {
      dp_obj *o = vmap_get(&v->objs[k], ids->v[j]);
      if (o)
        rv = res_add(&l, k ? K_CONFIG : K_SECRET, ids->v[j],
                     k ? DISP_VIEW_URL_PREFIX "Config"
                       : DISP_VIEW_URL_PREFIX "Secret",
                     o->body, o->len);
    }
  }
  if (rv == 0) {
    for (size_t j = 0; j < l.n; j++) {
      l.r[j].name = l.names[j];
    }
    char coll[300];
    mcp_disp_node_collection(coll, sizeof coll, node);
    /* A node never given anything has no collection (the session reads
     * absent and empty alike); one that had keeps an empty one. */
    if (l.n || vmap_get(&v->published, node)) {
      rv = mcp_store_replace(v->view, coll, l.r, l.n, ts);
      if (rv >= 0 && !vmap_get(&v->published, node) &&
          vmap_put(&v->published, node, (void *)1) < 0)
        rv = MCP_ERR_NOMEM;
      if (rv >= 0)
        rv = 0;
    }
  }
  free(l.r);
  free(l.names);
  strv_free(&sec);
  strv_free(&cfg);
  if (rv == 0)
    v->st.nodes++;
  return rv;
}

int disp_view_sync(disp_view *v, mcp_tstamp ts) {
  for (int k = 0; k < K_N; k++) {
    if (!mcp_watch_changed(v->w[k]))
      continue;
    vmap seen = {0};
    take_ctx c = {v, k, ts, &seen};
    int full = 0;
    int rv = mcp_watch_take(v->w[k], ts, on_item, &c, &full);
    if (rv >= 0 && full)
      rv = k == K_NODE ? drop_unseen_nodes(v, &seen, ts)
                       : drop_unseen(v, k, &seen, ts);
    vmap_free(&seen);
    if (rv < 0)
      return rv;
  }
  int n = 0;
  size_t i = 0;
  const char *node;
  void *val;
  while (vmap_next(&v->dirty, &i, &node, &val)) {
    int rv = recompute(v, node, ts);
    if (rv < 0)
      return rv;
    vmap_del(&v->dirty, node);
    n++;
  }
  if (v->nodes_changed) {
    v->nodes_changed = 0;
    n++;
  }
  if (n)
    v->st.syncs++;
  return n;
}
