/* A string-keyed hash map: open addressing with linear probing and
 * backward-shift deletion, so there are no tombstones to sweep. */
#include "engine_int.h"

uint64_t mcp_hash(const char *s, size_t n) {
  /* FNV-1a, then a final mix so that linear probing sees spread bits. */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= (uint8_t)s[i];
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

static mcp_map_slot *find(const mcp_map *m, const char *key, size_t n,
                          uint64_t h) {
  if (!m->cap) {
    return NULL;
  }
  size_t mask = m->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    mcp_map_slot *s = &m->slots[i];
    if (!s->key) {
      return s;
    }
    if (s->hash == h && strncmp(s->key, key, n) == 0 && s->key[n] == '\0') {
      return s;
    }
  }
}

void *mcp_map_get_n(const mcp_map *m, const char *key, size_t n) {
  mcp_map_slot *s = find(m, key, n, mcp_hash(key, n));
  return s && s->key ? s->val : NULL;
}

void *mcp_map_get(const mcp_map *m, const char *key) {
  return mcp_map_get_n(m, key, strlen(key));
}

static int grow(mcp_map *m, const mcp_mem *mem, size_t want) {
  size_t cap = m->cap ? m->cap : 8;
  while (want > cap / 4 * 3) { /* load factor at most 3/4 */
    if (cap > SIZE_MAX / 2 / sizeof(mcp_map_slot)) {
      return MCP_ERR_NOMEM;
    }
    cap *= 2;
  }
  if (cap == m->cap) {
    return 0;
  }
  mcp_map_slot *slots = mcp_mem_calloc(mem, cap, sizeof(*slots));
  if (!slots) {
    return MCP_ERR_NOMEM;
  }
  mcp_map old = *m;
  m->slots = slots;
  m->cap = cap;
  for (size_t i = 0; i < old.cap; ++i) {
    if (old.slots[i].key) {
      size_t mask = cap - 1, j = old.slots[i].hash & mask;
      while (slots[j].key) {
        j = (j + 1) & mask;
      }
      slots[j] = old.slots[i];
    }
  }
  mcp_mem_free(mem, old.slots);
  return 0;
}

int mcp_map_reserve(mcp_map *m, const mcp_mem *mem, size_t extra) {
  if (extra > SIZE_MAX / 2 - m->n) {
    return MCP_ERR_NOMEM;
  }
  return grow(m, mem, m->n + extra);
}

void *mcp_map_put(mcp_map *m, const mcp_mem *mem, const char *key, void *val,
                   int *err) {
  size_t n = strlen(key);
  uint64_t h = mcp_hash(key, n);
  mcp_map_slot *s = find(m, key, n, h);
  if (s && s->key) {
    void *old = s->val;
    s->key = key;
    s->val = val;
    return old;
  }
  if (!m->cap || m->n + 1 > m->cap / 4 * 3) {
    if (grow(m, mem, m->n + 1) != 0) {
      *err = MCP_ERR_NOMEM;
      return NULL;
    }
    s = find(m, key, n, h);
  }
  s->key = key;
  s->hash = h;
  s->val = val;
  m->n++;
  return NULL;
}

void *mcp_map_del(mcp_map *m, const char *key) {
  size_t n = strlen(key);
  mcp_map_slot *s = find(m, key, n, mcp_hash(key, n));
  if (!s || !s->key) {
    return NULL;
  }
  void *val = s->val;
  size_t mask = m->cap - 1, i = (size_t)(s - m->slots);
  /* Shift back every following entry that would no longer be reachable. */
  for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
    size_t home = m->slots[j].hash & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->slots[i] = m->slots[j];
      i = j;
    }
  }
  m->slots[i].key = NULL;
  m->n--;
  return val;
}

int mcp_map_iter(const mcp_map *m, size_t *i, void **val) {
  for (; *i < m->cap; ++*i) {
    if (m->slots[*i].key) {
      *val = m->slots[(*i)++].val;
      return 1;
    }
  }
  return 0;
}

void mcp_map_free(mcp_map *m, const mcp_mem *mem) {
  mcp_mem_free(mem, m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}
