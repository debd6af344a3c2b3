/*
 * The pool of types: FileDescriptorSets unpacked with the protobuf-c code
 * generated from descriptor.proto, indexed into compact tables (messages
 * and enums by full name, fields by number, name and json_name).
 */
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "descriptor.pb-c.h"
#include "schema_int.h"
#include "wkt_set.h"

typedef struct sc_file {
  const char *name;
  uint8_t *bytes; /* the packed FileDescriptorProto, for the identity test */
  size_t len;
} sc_file;

static const char *const wkt_files[] = {
    "google/protobuf/any.proto",        "google/protobuf/duration.proto",
    "google/protobuf/timestamp.proto",  "google/protobuf/wrappers.proto",
    "google/protobuf/struct.proto",     "google/protobuf/field_mask.proto",
    "google/protobuf/empty.proto",
};

void mcp_schema_options_default(mcp_schema_options *o) {
  memset(o, 0, sizeof *o);
  o->max_depth = 100;
}

/* ---- name table ----------------------------------------------------- */

static uint64_t hash_name(const char *s) {
  uint64_t h = UINT64_C(0xcbf29ce484222325);
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

static const char *slot_name(const mcp_schema *s, size_t v) {
  size_t i = (v - 1) >> 1;
  return ((v - 1) & 1) ? s->enums[i]->full_name : s->msgs[i]->full_name;
}

/* The slot value for |name|, 0 when absent. */
static size_t table_get(const mcp_schema *s, const char *name) {
  if (!s->table_cap)
    return 0;
  size_t mask = s->table_cap - 1;
  for (size_t i = (size_t)hash_name(name) & mask;; i = (i + 1) & mask) {
    size_t v = s->table[i];
    if (!v || !strcmp(slot_name(s, v), name))
      return v;
  }
}

static void table_insert(mcp_schema *s, size_t v) {
  size_t mask = s->table_cap - 1;
  size_t i = (size_t)hash_name(slot_name(s, v)) & mask;
  while (s->table[i])
    i = (i + 1) & mask;
  s->table[i] = v;
}

/* Rebuilds the table for the current arrays, at least |cap| slots. */
static int table_rebuild(mcp_schema *s, size_t need) {
  size_t cap = 64;
  while (cap < need * 2 + 2)
    cap *= 2;
  size_t *t = sc_malloc(&s->mem, cap * sizeof *t);
  if (!t)
    return MCP_ERR_NOMEM;
  memset(t, 0, cap * sizeof *t);
  sc_free(&s->mem, s->table);
  s->table = t;
  s->table_cap = cap;
  for (size_t i = 0; i < s->nmsgs; i++)
    table_insert(s, (i << 1) + 1);
  for (size_t i = 0; i < s->nenums; i++)
    table_insert(s, (i << 1 | 1) + 1);
  return 0;
}

const sc_msg *sc_find_msg(const mcp_schema *s, const char *name) {
  size_t v = table_get(s, name);
  return v && !((v - 1) & 1) ? s->msgs[(v - 1) >> 1] : NULL;
}

static sc_enum *find_enum(const mcp_schema *s, const char *name) {
  size_t v = table_get(s, name);
  return v && ((v - 1) & 1) ? s->enums[(v - 1) >> 1] : NULL;
}

/* ---- lookups -------------------------------------------------------- */

const sc_field *sc_field_by_number(const sc_msg *m, uint32_t number) {
  size_t lo = 0, hi = m->nfields;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->fields[mid].number == number)
      return &m->fields[mid];
    if (m->fields[mid].number < number)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static const sc_field *by_key(sc_field *const *a, size_t n, const char *key,
                              int json) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(json ? a[mid]->json_name : a[mid]->name, key);
    if (!c)
      return a[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

const sc_field *sc_field_by_name(const sc_msg *m, const char *name) {
  return by_key(m->by_name, m->nfields, name, 0);
}

const sc_field *sc_field_by_json(const sc_msg *m, const char *name) {
  return by_key(m->by_json, m->nfields, name, 1);
}

/* Eight bytes at a time, each round a multiply and a fold; the last one
 * to eight bytes as one word |*last| by overlapping loads (keys are short:
 * mostly one round). For a key of at most 8 bytes, its length and that
 * word tell it from every other: 4 to 8 bytes are two 4-byte loads that
 * cover them, 1 to 3 bytes the first, middle and last. */
static size_t key_hash(const char *s, size_t len, uint64_t *last) {
  uint64_t h = 0x9e3779b97f4a7c15u ^ len, w;
  uint32_t a, b;
  const char *end = s + len;
  for (; end - s > 8; s += 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdu;
    h ^= h >> 32;
  }
  size_t n = (size_t)(end - s);
  if (n >= 4) {
    memcpy(&a, s, 4);
    memcpy(&b, end - 4, 4);
    w = (uint64_t)a << 32 | b;
  } else if (n) {
    w = (uint64_t)(uint8_t)s[0] << 16 | (uint64_t)(uint8_t)s[n >> 1] << 8 | (uint8_t)end[-1];
  } else {
    w = 0;
  }
  *last = w;
  h = (h ^ w) * 0xff51afd7ed558ccdu;
  return (size_t)(h ^ h >> 32);
}

static const char *slot_key(const sc_msg *m, uint32_t v) {
  const sc_field *f = &m->fields[(v & 0x7fffffffu) - 1];
  return v & 0x80000000u ? f->name : f->json_name;
}

const sc_field *sc_field_lookup(const sc_msg *m, const char *name, size_t len) {
  if (!m->keys)
    return NULL;
  uint64_t w;
  for (size_t i = key_hash(name, len, &w) & m->keys_mask;; i = (i + 1) & m->keys_mask) {
    const sc_key *k = &m->keys[i];
    if (!k->v)
      return NULL;
    if (k->len == len && k->last == w && (len <= 8 || !memcmp(slot_key(m, k->v), name, len)))
      return &m->fields[(k->v & 0x7fffffffu) - 1];
  }
}

/* Enters |m|'s json_names, then the names not already in. */
static int build_keys(sc_arena *a, sc_msg *m) {
  size_t cap = 8;
  while (cap < 4 * m->nfields)
    cap *= 2;
  if (!(m->keys = sc_arena_alloc(a, cap * sizeof *m->keys)))
    return MCP_ERR_NOMEM;
  memset(m->keys, 0, cap * sizeof *m->keys);
  m->keys_mask = cap - 1;
  for (int named = 0; named < 2; named++)
    for (size_t j = 0; j < m->nfields; j++) {
      const char *k = named ? m->fields[j].name : m->fields[j].json_name;
      size_t len = strlen(k);
      if (sc_field_lookup(m, k, len))
        continue;
      uint64_t w;
      size_t i = key_hash(k, len, &w) & m->keys_mask;
      while (m->keys[i].v)
        i = (i + 1) & m->keys_mask;
      m->keys[i].v = (uint32_t)(j + 1) | (named ? 0x80000000u : 0);
      m->keys[i].len = (uint32_t)len;
      m->keys[i].last = w;
    }
  return 0;
}

const sc_enum_value *sc_enum_by_name(const sc_enum *e, const char *name) {
  for (size_t i = 0; i < e->nvalues; i++)
    if (!strcmp(e->values[i].name, name))
      return &e->values[i];
  return NULL;
}

const sc_enum_value *sc_enum_by_number(const sc_enum *e, int32_t number) {
  /* The first value with that number (aliases share numbers). */
  for (size_t i = 0; i < e->nvalues; i++)
    if (e->values[i].number == number)
      return &e->values[i];
  return NULL;
}

/* ---- loading -------------------------------------------------------- */

typedef struct loader {
  mcp_schema *s;
  mcp_schema_error *err;
  int proto3;
} loader;

static int grow(const mcp_mem *mem, void **arr, size_t *cap, size_t n,
                size_t size) {
  if (n < *cap)
    return 0;
  size_t c = *cap ? *cap * 2 : 16;
  void *p = sc_realloc(mem, *arr, c * size);
  if (!p)
    return MCP_ERR_NOMEM;
  *arr = p;
  *cap = c;
  return 0;
}

static char *join(sc_arena *a, const char *prefix, const char *name) {
  size_t pl = prefix ? strlen(prefix) : 0, nl = strlen(name);
  char *d = sc_arena_alloc(a, pl + nl + 2);
  if (!d)
    return NULL;
  if (pl) {
    memcpy(d, prefix, pl);
    d[pl++] = '.';
  }
  memcpy(d + pl, name, nl + 1);
  return d;
}

/* protoc's ToJsonName: drop '_' and capitalise the letter after it. */
static char *json_name_of(sc_arena *a, const char *name) {
  char *d = sc_arena_alloc(a, strlen(name) + 1), *o = d;
  if (!d)
    return NULL;
  int up = 0;
  for (; *name; name++) {
    if (*name == '_') {
      up = 1;
      continue;
    }
    *o++ = up && *name >= 'a' && *name <= 'z' ? (char)(*name - 32) : *name;
    up = 0;
  }
  *o = '\0';
  return d;
}

static int name_taken(loader *l, const char *full) {
  if (table_get(l->s, full))
    return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                    "type %s defined twice", full);
  return 0;
}

static int add_enum(loader *l, const char *prefix,
                    const Google__Protobuf__EnumDescriptorProto *ed) {
  mcp_schema *s = l->s;
  if (!ed->name)
    return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "an enum without a name");
  sc_enum *e = sc_arena_alloc(&s->arena, sizeof *e);
  if (!e)
    return MCP_ERR_NOMEM;
  memset(e, 0, sizeof *e);
  if (!(e->full_name = join(&s->arena, prefix, ed->name)))
    return MCP_ERR_NOMEM;
  int rc = name_taken(l, e->full_name);
  if (rc)
    return rc;
  e->open = l->proto3;
  e->null_value = !strcmp(e->full_name, "google.protobuf.NullValue");
  e->nvalues = ed->n_value;
  if (e->nvalues &&
      !(e->values = sc_arena_alloc(&s->arena, e->nvalues * sizeof *e->values)))
    return MCP_ERR_NOMEM;
  for (size_t i = 0; i < ed->n_value; i++) {
    const char *n = ed->value[i]->name ? ed->value[i]->name : "";
    if (!(e->values[i].name = sc_arena_strndup(&s->arena, n, strlen(n))))
      return MCP_ERR_NOMEM;
    e->values[i].number = ed->value[i]->number;
  }
  if ((rc = grow(&s->mem, (void **)&s->enums, &s->enums_cap, s->nenums,
                 sizeof *s->enums)))
    return rc;
  s->enums[s->nenums++] = e;
  if (s->table_cap < (s->nmsgs + s->nenums) * 2 + 2)
    return table_rebuild(s, (s->nmsgs + s->nenums) * 2);
  table_insert(s, ((s->nenums - 1) << 1 | 1) + 1);
  return 0;
}

static int cmp_field_number(const void *a, const void *b) {
  uint32_t x = ((const sc_field *)a)->number, y = ((const sc_field *)b)->number;
  return x < y ? -1 : x > y;
}
static int cmp_field_name(const void *a, const void *b) {
  return strcmp((*(sc_field *const *)a)->name, (*(sc_field *const *)b)->name);
}
static int cmp_field_json(const void *a, const void *b) {
  return strcmp((*(sc_field *const *)a)->json_name,
                (*(sc_field *const *)b)->json_name);
}

static int wkt_of(const char *n) {
  static const struct {
    const char *name;
    int wkt;
  } t[] = {
      {"google.protobuf.Any", SC_WKT_ANY},
      {"google.protobuf.Duration", SC_WKT_DURATION},
      {"google.protobuf.Timestamp", SC_WKT_TIMESTAMP},
      {"google.protobuf.Struct", SC_WKT_STRUCT},
      {"google.protobuf.Value", SC_WKT_VALUE},
      {"google.protobuf.ListValue", SC_WKT_LISTVALUE},
      {"google.protobuf.FieldMask", SC_WKT_FIELDMASK},
      {"google.protobuf.DoubleValue", SC_WKT_WRAPPER},
      {"google.protobuf.FloatValue", SC_WKT_WRAPPER},
      {"google.protobuf.Int64Value", SC_WKT_WRAPPER},
      {"google.protobuf.UInt64Value", SC_WKT_WRAPPER},
      {"google.protobuf.Int32Value", SC_WKT_WRAPPER},
      {"google.protobuf.UInt32Value", SC_WKT_WRAPPER},
      {"google.protobuf.BoolValue", SC_WKT_WRAPPER},
      {"google.protobuf.StringValue", SC_WKT_WRAPPER},
      {"google.protobuf.BytesValue", SC_WKT_WRAPPER},
  };
  if (strncmp(n, "google.protobuf.", 16) != 0)
    return SC_WKT_NONE;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(t[i].name, n))
      return t[i].wkt;
  return SC_WKT_NONE;
}

static int add_msg(loader *l, const char *prefix,
                   const Google__Protobuf__DescriptorProto *md, unsigned depth) {
  mcp_schema *s = l->s;
  if (depth > 64)
    return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                    "messages nested deeper than 64 levels");
  if (!md->name)
    return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "a message without a name");
  sc_msg *m = sc_arena_alloc(&s->arena, sizeof *m);
  if (!m)
    return MCP_ERR_NOMEM;
  memset(m, 0, sizeof *m);
  if (!(m->full_name = join(&s->arena, prefix, md->name)))
    return MCP_ERR_NOMEM;
  int rc = name_taken(l, m->full_name);
  if (rc)
    return rc;
  m->map_entry = md->options && md->options->has_map_entry && md->options->map_entry;
  m->wkt = wkt_of(m->full_name);
  m->noneofs = md->n_oneof_decl;
  if (m->noneofs &&
      !(m->oneofs = sc_arena_alloc(&s->arena, m->noneofs * sizeof *m->oneofs)))
    return MCP_ERR_NOMEM;
  for (size_t i = 0; i < md->n_oneof_decl; i++) {
    const char *n = md->oneof_decl[i]->name ? md->oneof_decl[i]->name : "";
    if (!(m->oneofs[i] = sc_arena_strndup(&s->arena, n, strlen(n))))
      return MCP_ERR_NOMEM;
  }
  m->nfields = md->n_field;
  if (m->nfields &&
      (!(m->fields = sc_arena_alloc(&s->arena, m->nfields * sizeof *m->fields)) ||
       !(m->by_name = sc_arena_alloc(&s->arena, m->nfields * sizeof *m->by_name)) ||
       !(m->by_json = sc_arena_alloc(&s->arena, m->nfields * sizeof *m->by_json))))
    return MCP_ERR_NOMEM;
  for (size_t i = 0; i < md->n_field; i++) {
    const Google__Protobuf__FieldDescriptorProto *fd = md->field[i];
    sc_field *f = &m->fields[i];
    memset(f, 0, sizeof *f);
    if (!fd->name || !fd->has_number || !fd->has_type || fd->number < 1 ||
        fd->number > 536870911)
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s: a field without a name, a valid number or a type",
                      m->full_name);
    if (!(f->name = sc_arena_strndup(&s->arena, fd->name, strlen(fd->name))))
      return MCP_ERR_NOMEM;
    f->json_name = fd->json_name
                       ? sc_arena_strndup(&s->arena, fd->json_name, strlen(fd->json_name))
                       : json_name_of(&s->arena, fd->name);
    if (!f->json_name)
      return MCP_ERR_NOMEM;
    f->number = (uint32_t)fd->number;
    f->type = (int)fd->type;
    if (f->type < SC_DOUBLE || f->type > SC_SINT64)
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s.%s: unknown field type %d", m->full_name, f->name, f->type);
    f->repeated = fd->has_label &&
                  fd->label == GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED;
    int proto3_optional = fd->has_proto3_optional && fd->proto3_optional;
    f->oneof = fd->has_oneof_index && !proto3_optional ? fd->oneof_index : -1;
    if (f->oneof >= (int)m->noneofs || (fd->has_oneof_index && fd->oneof_index < 0))
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s.%s: bad oneof index", m->full_name, f->name);
    int scalar = f->type != SC_STRING && f->type != SC_BYTES &&
                 f->type != SC_MESSAGE && f->type != SC_GROUP;
    if (f->repeated && scalar) {
      if (l->proto3)
        f->packed = !(fd->options && fd->options->has_packed && !fd->options->packed);
      else
        f->packed = fd->options && fd->options->has_packed && fd->options->packed;
    }
    f->presence = !f->repeated && (f->type == SC_MESSAGE || f->type == SC_GROUP ||
                                   fd->has_oneof_index || !l->proto3);
    if (fd->type_name) {
      const char *t = fd->type_name + (fd->type_name[0] == '.');
      if (!(f->type_name = sc_arena_strndup(&s->arena, t, strlen(t))))
        return MCP_ERR_NOMEM;
    } else if (f->type == SC_MESSAGE || f->type == SC_ENUM || f->type == SC_GROUP) {
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s.%s: no type name", m->full_name, f->name);
    }
  }
  if (m->nfields > 1)
    qsort(m->fields, m->nfields, sizeof *m->fields, cmp_field_number);
  for (size_t i = 0; i < m->nfields; i++) {
    if (i && m->fields[i].number == m->fields[i - 1].number)
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s: field number %u used twice", m->full_name,
                      (unsigned)m->fields[i].number);
    m->by_name[i] = m->by_json[i] = &m->fields[i];
  }
  if (m->nfields > 1) {
    qsort(m->by_name, m->nfields, sizeof *m->by_name, cmp_field_name);
    qsort(m->by_json, m->nfields, sizeof *m->by_json, cmp_field_json);
  }
  if ((rc = build_keys(&s->arena, m)))
    return rc;
  if (m->map_entry && (m->nfields != 2 || m->fields[0].number != 1 ||
                       m->fields[1].number != 2))
    return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                    "%s: a map entry without key and value", m->full_name);
  if ((rc = grow(&s->mem, (void **)&s->msgs, &s->msgs_cap, s->nmsgs, sizeof *s->msgs)))
    return rc;
  s->msgs[s->nmsgs++] = m;
  if (s->table_cap < (s->nmsgs + s->nenums) * 2 + 2) {
    if ((rc = table_rebuild(s, (s->nmsgs + s->nenums) * 2)))
      return rc;
  } else {
    table_insert(s, ((s->nmsgs - 1) << 1) + 1);
  }
  for (size_t i = 0; i < md->n_enum_type; i++)
    if ((rc = add_enum(l, m->full_name, md->enum_type[i])))
      return rc;
  for (size_t i = 0; i < md->n_nested_type; i++)
    if ((rc = add_msg(l, m->full_name, md->nested_type[i], depth + 1)))
      return rc;
  return 0;
}

/* Points the fields of messages [from, nmsgs) to their types. */
static int resolve(loader *l, size_t from) {
  mcp_schema *s = l->s;
  for (size_t i = from; i < s->nmsgs; i++) {
    sc_msg *m = s->msgs[i];
    for (size_t k = 0; k < m->nfields; k++) {
      sc_field *f = &m->fields[k];
      if (f->type == SC_MESSAGE || f->type == SC_GROUP) {
        f->msg = (sc_msg *)sc_find_msg(s, f->type_name);
        if (!f->msg)
          return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                          "%s.%s: unknown message type %s (missing "
                          "--include_imports?)",
                          m->full_name, f->name, f->type_name);
      } else if (f->type == SC_ENUM) {
        f->enm = find_enum(s, f->type_name);
        if (!f->enm)
          return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                          "%s.%s: unknown enum type %s (missing "
                          "--include_imports?)",
                          m->full_name, f->name, f->type_name);
      } else if (f->type_name) {
        return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                        "%s.%s: a type name on a scalar field", m->full_name, f->name);
      }
    }
    if (m->map_entry && m->fields[0].repeated)
      return sc_error(l->err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "%s: a repeated map key", m->full_name);
  }
  return 0;
}

/* protobuf-c's allocator, remembering a failure: unpack() returns NULL
 * both for bad bytes and for a failed allocation. */
typedef struct pb_bridge {
  const mcp_mem *mem;
  int failed;
} pb_bridge;

static void *pb_alloc(void *ud, size_t n) {
  pb_bridge *b = ud;
  void *p = sc_malloc(b->mem, n);
  b->failed |= !p;
  return p;
}
static void pb_free(void *ud, void *p) { sc_free(((pb_bridge *)ud)->mem, p); }

static int is_wkt_file(const char *name) {
  for (size_t i = 0; i < sizeof wkt_files / sizeof wkt_files[0]; i++)
    if (!strcmp(wkt_files[i], name))
      return 1;
  return 0;
}

static int add_set(mcp_schema *s, const uint8_t *data, size_t len,
                   mcp_schema_error *err, int builtin) {
  pb_bridge bridge = {&s->mem, 0};
  ProtobufCAllocator pa = {pb_alloc, pb_free, &bridge};
  Google__Protobuf__FileDescriptorSet *set =
      google__protobuf__file_descriptor_set__unpack(&pa, len, data);
  if (!set)
    return bridge.failed ? sc_error(err, MCP_ERR_NOMEM, 0, NULL, "out of memory")
                         : sc_error(err, MCP_ERR_MALFORMED, 0, NULL,
                                    "not a serialized google.protobuf.FileDescriptorSet");
  size_t old_msgs = s->nmsgs, old_enums = s->nenums, old_files = s->nfiles;
  loader l = {s, err, 0};
  int rc = 0;
  for (size_t i = 0; i < set->n_file && !rc; i++) {
    const Google__Protobuf__FileDescriptorProto *fd = set->file[i];
    if (!fd->name) {
      rc = sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "a file without a name");
      break;
    }
    if (!builtin && is_wkt_file(fd->name))
      continue; /* ours are the reference */
    size_t n = google__protobuf__file_descriptor_proto__get_packed_size(fd);
    uint8_t *bytes = sc_malloc(&s->mem, n);
    if (!bytes) {
      rc = MCP_ERR_NOMEM;
      break;
    }
    google__protobuf__file_descriptor_proto__pack(fd, bytes);
    const sc_file *same = NULL;
    for (size_t k = 0; k < s->nfiles; k++)
      if (!strcmp(s->files[k].name, fd->name))
        same = &s->files[k];
    if (same) {
      int identical = same->len == n && !memcmp(same->bytes, bytes, n);
      sc_free(&s->mem, bytes);
      if (!identical)
        rc = sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, NULL,
                      "file %s is already loaded with different contents", fd->name);
      continue;
    }
    const char *name = sc_arena_strndup(&s->arena, fd->name, strlen(fd->name));
    if (!name || grow(&s->mem, (void **)&s->files, &s->files_cap, s->nfiles,
                      sizeof *s->files)) {
      sc_free(&s->mem, bytes);
      rc = MCP_ERR_NOMEM;
      break;
    }
    s->files[s->nfiles].name = name;
    s->files[s->nfiles].bytes = bytes;
    s->files[s->nfiles].len = n;
    s->nfiles++;
    l.proto3 = fd->syntax && !strcmp(fd->syntax, "proto3");
    const char *pkg = fd->package && *fd->package ? fd->package : NULL;
    for (size_t k = 0; k < fd->n_enum_type && !rc; k++)
      rc = add_enum(&l, pkg, fd->enum_type[k]);
    for (size_t k = 0; k < fd->n_message_type && !rc; k++)
      rc = add_msg(&l, pkg, fd->message_type[k], 0);
  }
  if (!rc)
    rc = resolve(&l, old_msgs);
  google__protobuf__file_descriptor_set__free_unpacked(set, &pa);
  if (rc) {
    if (rc == MCP_ERR_NOMEM)
      sc_error(err, rc, 0, NULL, "out of memory");
    /* All or nothing: forget what this set added (its arena memory stays
     * until mcp_schema_free()). */
    for (size_t k = old_files; k < s->nfiles; k++)
      sc_free(&s->mem, s->files[k].bytes);
    s->nfiles = old_files;
    s->nmsgs = old_msgs;
    s->nenums = old_enums;
    /* Without memory for a new table, the old one (large enough) is
     * refilled in place. */
    if (table_rebuild(s, s->nmsgs + s->nenums) && s->table_cap) {
      memset(s->table, 0, s->table_cap * sizeof *s->table);
      for (size_t i = 0; i < s->nmsgs; i++)
        table_insert(s, (i << 1) + 1);
      for (size_t i = 0; i < s->nenums; i++)
        table_insert(s, (i << 1 | 1) + 1);
    }
  }
  return rc;
}

int mcp_schema_add_descriptor_set(mcp_schema *s, const uint8_t *data, size_t len,
                                  mcp_schema_error *err) {
  if (!s || (!data && len))
    return sc_error(err, MCP_ERR_INVALID_ARGUMENT, 0, NULL, "invalid argument");
  return add_set(s, data, len, err, 0);
}

int mcp_schema_new(mcp_schema **ps, const mcp_schema_options *o) {
  mcp_schema_options def;
  if (!o) {
    mcp_schema_options_default(&def);
    o = &def;
  }
  mcp_mem mem;
  sc_mem_init(&mem, o->mem);
  mcp_schema *s = sc_malloc(&mem, sizeof *s);
  if (!s)
    return MCP_ERR_NOMEM;
  memset(s, 0, sizeof *s);
  s->mem = mem;
  s->max_depth = o->max_depth ? o->max_depth : 100;
  s->arena.mem = &s->mem;
  int rc = add_set(s, sc_wkt_set, sc_wkt_set_len, NULL, 1);
  if (rc) {
    mcp_schema_free(s);
    return rc == MCP_ERR_NOMEM ? rc : MCP_ERR_NOMEM;
  }
  *ps = s;
  return 0;
}

void mcp_schema_free(mcp_schema *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->nfiles; i++)
    sc_free(&s->mem, s->files[i].bytes);
  sc_free(&s->mem, s->files);
  sc_free(&s->mem, s->msgs);
  sc_free(&s->mem, s->enums);
  sc_free(&s->mem, s->table);
  sc_arena_free(&s->arena);
  mcp_mem mem = s->mem;
  sc_free(&mem, s);
}

int mcp_schema_has_message(const mcp_schema *s, const char *full_name) {
  return s && full_name && sc_find_msg(s, full_name) != NULL;
}

size_t mcp_schema_message_count(const mcp_schema *s) { return s->nmsgs; }

const char *mcp_schema_message_name(const mcp_schema *s, size_t i) {
  return i < s->nmsgs ? s->msgs[i]->full_name : NULL;
}

void mcp_schema_free_bytes(const mcp_schema *s, void *p) { sc_free(&s->mem, p); }

size_t mcp_schema_type_url(const char *full_name, char *buf, size_t len) {
  size_t pl = sizeof MCP_SCHEMA_TYPE_URL_PREFIX - 1, nl = strlen(full_name);
  if (pl + nl < len) {
    memcpy(buf, MCP_SCHEMA_TYPE_URL_PREFIX, pl);
    memcpy(buf + pl, full_name, nl + 1);
  }
  return pl + nl;
}

const char *mcp_schema_type_name(const char *type_url) {
  const char *slash = strrchr(type_url, '/');
  return slash ? slash + 1 : type_url;
}
