/*
 * What the view adapters (dest_view.c, disp_view.c) share: a growable byte
 * buffer with a protobuf wire writer, a protobuf wire reader, a string-keyed
 * hash map, and the version string of a body. Internal to tools/.
 *
 * Memory comes from malloc; every allocation is checked (a buffer remembers
 * that one failed, so a whole encoding is checked once at its end).
 */
#ifndef TOOLS_VIEW_UTIL_H
#define TOOLS_VIEW_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* Buffer and protobuf writer                                          */
/* ------------------------------------------------------------------ */

typedef struct vbuf {
  uint8_t *p;
  size_t len, cap;
  int failed; /* an append ran out of memory: the content is incomplete */
} vbuf;

void vbuf_free(vbuf *b);
void vbuf_reset(vbuf *b); /* len = 0, failed = 0; keeps the memory */
void vbuf_put(vbuf *b, const void *p, size_t n);
void pbw_varint(vbuf *b, uint64_t v);
void pbw_key(vbuf *b, uint32_t field, int wire_type);
void pbw_bytes(vbuf *b, uint32_t field, const void *p, size_t n);
void pbw_str(vbuf *b, uint32_t field, const char *s); /* nothing for "" */

/* ------------------------------------------------------------------ */
/* Protobuf reader                                                     */
/* ------------------------------------------------------------------ */

typedef struct pbr_field {
  uint32_t field;
  int wire_type;       /* 0 varint, 1 fixed64, 2 bytes, 5 fixed32 */
  uint64_t v;          /* varint and fixed values */
  const uint8_t *data; /* wire type 2: the payload */
  size_t len;
  const uint8_t *start; /* the whole field, key included */
  size_t total;
} pbr_field;

/* The next field of |*p .. end|: 1 and |*f| (and |*p| moved past it), 0 at
 * the end, -1 when the bytes are not protobuf (groups included). */
int pbr_next(const uint8_t **p, const uint8_t *end, pbr_field *f);

/* ------------------------------------------------------------------ */
/* String map                                                          */
/* ------------------------------------------------------------------ */

/* Open addressing, keys copied. Values are the caller's. */
typedef struct vmap {
  struct vmap_slot *slots;
  size_t cap, n, used; /* used: live + deleted slots */
} vmap;

void vmap_free(vmap *m); /* frees the keys, not the values */
void *vmap_get(const vmap *m, const char *key);
/* Sets |key| to |val| (non-NULL). 0, or -1 when out of memory (nothing
 * changed). */
int vmap_put(vmap *m, const char *key, void *val);
/* Removes |key|; returns its value or NULL. */
void *vmap_del(vmap *m, const char *key);
/* Iteration: |*i| starts at 0; returns 1 with |*key|/|*val| while there
 * are entries. The map must not change during an iteration (except
 * through vmap_del() of the entry just returned). */
int vmap_next(const vmap *m, size_t *i, const char **key, void **val);

#endif /* TOOLS_VIEW_UTIL_H */
