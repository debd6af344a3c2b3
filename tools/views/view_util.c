/* Buffers, protobuf wire writing and reading, a string map: view_util.h. */
#include "views/view_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mcp/engine.h>

void vbuf_free(vbuf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

void vbuf_reset(vbuf *b) {
  b->len = 0;
  b->failed = 0;
}

/* Growth is the engine's (mcp_buf_reserve); a vbuf adds the sticky
 * failure. */
static int vbuf_room(vbuf *b, size_t n) {
  if (b->failed)
    return 0;
  mcp_buf m = {b->p, b->len, b->cap, NULL};
  if (mcp_buf_reserve(&m, n) != 0) {
    b->failed = 1;
    return 0;
  }
  b->p = m.p;
  b->cap = m.cap;
  return 1;
}

void vbuf_put(vbuf *b, const void *p, size_t n) {
  if (n && vbuf_room(b, n)) {
    memcpy(b->p + b->len, p, n);
    b->len += n;
  }
}

void pbw_varint(vbuf *b, uint64_t v) {
  uint8_t t[10]; /* a uint64_t's varint at most */
  vbuf_put(b, t, (size_t)(mcp_wire_put_varint(t, v) - t));
}

void pbw_key(vbuf *b, uint32_t field, int wire_type) {
  pbw_varint(b, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

void pbw_bytes(vbuf *b, uint32_t field, const void *p, size_t n) {
  pbw_key(b, field, 2);
  pbw_varint(b, n);
  vbuf_put(b, p, n);
}

void pbw_str(vbuf *b, uint32_t field, const char *s) {
  if (s && *s)
    pbw_bytes(b, field, s, strlen(s));
}

int pbr_next(const uint8_t **p, const uint8_t *end, pbr_field *f) {
  if (*p >= end)
    return 0;
  const uint8_t *start = *p;
  uint64_t key;
  if (mcp_wire_varint(p, end, &key) < 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
    return -1;
  f->field = (uint32_t)(key >> 3);
  f->wire_type = (int)(key & 7);
  f->data = NULL;
  f->len = 0;
  f->v = 0;
  switch (f->wire_type) {
  case 0:
    if (mcp_wire_varint(p, end, &f->v) < 0)
      return -1;
    break;
  case 1:
  case 5: {
    size_t n = f->wire_type == 1 ? 8 : 4;
    if ((size_t)(end - *p) < n)
      return -1;
    for (size_t i = 0; i < n; i++)
      f->v |= (uint64_t)(*p)[i] << (8 * i);
    *p += n;
    break;
  }
  case 2: {
    uint64_t n;
    if (mcp_wire_varint(p, end, &n) < 0 || n > (uint64_t)(end - *p))
      return -1;
    f->data = *p;
    f->len = (size_t)n;
    *p += n;
    break;
  }
  default:
    return -1; /* groups (3, 4) are not in proto3 messages */
  }
  f->start = start;
  f->total = (size_t)(*p - start);
  return 1;
}

/* ------------------------------------------------------------------ */

struct vmap_slot {
  char *key; /* NULL: empty; &tomb: deleted */
  void *val;
  uint64_t h;
};

static char tomb;

static uint64_t hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

void vmap_free(vmap *m) {
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key && m->slots[i].key != &tomb)
      free(m->slots[i].key);
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static struct vmap_slot *find(const vmap *m, const char *key, uint64_t h) {
  if (!m->cap)
    return NULL;
  for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    struct vmap_slot *s = &m->slots[i];
    if (!s->key)
      return NULL;
    if (s->key != &tomb && s->h == h && !strcmp(s->key, key))
      return s;
  }
}

void *vmap_get(const vmap *m, const char *key) {
  struct vmap_slot *s = find(m, key, hash_str(key));
  return s ? s->val : NULL;
}

static int grow(vmap *m) {
  size_t cap = m->cap ? m->cap : 8;
  while ((m->n + 1) * 2 > cap)
    cap *= 2;
  struct vmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t i = 0; i < m->cap; i++) {
    struct vmap_slot *s = &m->slots[i];
    if (!s->key || s->key == &tomb)
      continue;
    size_t j = s->h & (cap - 1);
    while (slots[j].key)
      j = (j + 1) & (cap - 1);
    slots[j] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->n;
  return 0;
}

int vmap_put(vmap *m, const char *key, void *val) {
  uint64_t h = hash_str(key);
  struct vmap_slot *s = find(m, key, h);
  if (s) {
    s->val = val;
    return 0;
  }
  if ((m->used + 1) * 4 > m->cap * 3 && grow(m) < 0)
    return -1;
  char *k = strdup(key);
  if (!k)
    return -1;
  size_t i = h & (m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != &tomb)
    i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key)
    m->used++;
  m->slots[i].key = k;
  m->slots[i].val = val;
  m->slots[i].h = h;
  m->n++;
  return 0;
}

void *vmap_del(vmap *m, const char *key) {
  struct vmap_slot *s = find(m, key, hash_str(key));
  if (!s)
    return NULL;
  void *v = s->val;
  free(s->key);
  s->key = &tomb;
  s->val = NULL;
  m->n--;
  return v;
}

int vmap_next(const vmap *m, size_t *i, const char **key, void **val) {
  for (; *i < m->cap; (*i)++) {
    struct vmap_slot *s = &m->slots[*i];
    if (s->key && s->key != &tomb) {
      *key = s->key;
      *val = s->val;
      (*i)++;
      return 1;
    }
  }
  return 0;
}

