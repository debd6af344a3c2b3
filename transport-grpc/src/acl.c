/* Access lists of peer identities: allow and deny rules, exact or prefix,
 * replaced as a whole while in use (grpc.h gives the semantics). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

#define ACL_MAX_PATTERN 4096
#define ACL_MAX_FILE (1 << 20)

typedef struct acl_rule {
  int deny;
  int prefix;   /* the pattern ended in '*', which is not kept */
  size_t len;   /* of |pattern| */
  char *pattern;
} acl_rule;

typedef struct acl_rules {
  acl_rule *v;
  size_t n, cap;
  const mcp_mem *mem; /* the list's */
} acl_rules;

/* One version of the file, to notice changes. */
typedef struct acl_sig {
  int present;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
} acl_sig;

struct mcp_grpc_acl {
  mcp_mem mem;        /* copied at creation; libc by default */
  pthread_mutex_t mu; /* guards everything below */
  acl_rules fixed;    /* mcp_grpc_acl_add() */
  acl_rules loaded;   /* the last parse or load */
  char *path;         /* the file of the last load, or NULL */
  acl_sig seen;       /* the version of it last read (or found missing) */
};

static void rules_free(acl_rules *r) {
  const mcp_mem *mem = r->mem;
  for (size_t i = 0; i < r->n; i++)
    mcp_grpc_free(mem, r->v[i].pattern);
  mcp_grpc_free(mem, r->v);
  memset(r, 0, sizeof(*r));
  r->mem = mem;
}

/* Empty rules allocated with |acl|'s hook. */
static acl_rules rules_empty(const mcp_grpc_acl *acl) {
  acl_rules r;
  memset(&r, 0, sizeof(r));
  r.mem = &acl->mem;
  return r;
}

/* 1 when |p| (|len| bytes) is a valid pattern. */
static int pattern_ok(const char *p, size_t len) {
  if (len == 0 || len > ACL_MAX_PATTERN)
    return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c <= 0x20 || c == 0x7f)
      return 0;
    if (c == '*' && i + 1 != len)
      return 0;
  }
  return 1;
}

static int rules_add(acl_rules *r, int deny, const char *p, size_t len) {
  if (!pattern_ok(p, len))
    return MCP_ERR_INVALID_ARGUMENT;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 8;
    acl_rule *v = mcp_grpc_realloc(r->mem, r->v, cap * sizeof(*v));
    if (!v)
      return MCP_ERR_NOMEM;
    r->v = v;
    r->cap = cap;
  }
  acl_rule *rule = &r->v[r->n];
  rule->deny = deny;
  rule->prefix = p[len - 1] == '*';
  rule->len = len - (size_t)rule->prefix;
  rule->pattern = mcp_grpc_malloc(r->mem, rule->len + 1);
  if (!rule->pattern)
    return MCP_ERR_NOMEM;
  memcpy(rule->pattern, p, rule->len);
  rule->pattern[rule->len] = '\0';
  r->n++;
  return 0;
}

int mcp_grpc_acl_new(mcp_grpc_acl **pacl) {
  return mcp_grpc_acl_new2(pacl, NULL);
}

int mcp_grpc_acl_new2(mcp_grpc_acl **pacl, const mcp_mem *mem) {
  if (!pacl)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem m;
  mcp_grpc_mem_init(&m, mem);
  mcp_grpc_acl *acl = mcp_grpc_calloc(&m, 1, sizeof(*acl));
  if (!acl)
    return MCP_ERR_NOMEM;
  acl->mem = m;
  if (pthread_mutex_init(&acl->mu, NULL) != 0) {
    mcp_grpc_free(&m, acl);
    return MCP_ERR_NOMEM;
  }
  acl->fixed = rules_empty(acl);
  acl->loaded = rules_empty(acl);
  *pacl = acl;
  return 0;
}

void mcp_grpc_acl_del(mcp_grpc_acl *acl) {
  if (!acl)
    return;
  rules_free(&acl->fixed);
  rules_free(&acl->loaded);
  mcp_grpc_free(&acl->mem, acl->path);
  pthread_mutex_destroy(&acl->mu);
  mcp_mem m = acl->mem;
  mcp_grpc_free(&m, acl);
}

int mcp_grpc_acl_add(mcp_grpc_acl *acl, mcp_grpc_acl_action action,
                     const char *pattern) {
  if (!acl || !pattern ||
      (action != MCP_GRPC_ACL_ALLOW && action != MCP_GRPC_ACL_DENY))
    return MCP_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&acl->mu);
  int rv = rules_add(&acl->fixed, action == MCP_GRPC_ACL_DENY, pattern,
                     strlen(pattern));
  pthread_mutex_unlock(&acl->mu);
  return rv;
}

static void errf(char *err, size_t errlen, size_t line, const char *msg,
                 const char *tok, size_t toklen) {
  if (!err || !errlen)
    return;
  if (toklen > 64)
    toklen = 64;
  if (tok)
    snprintf(err, errlen, "line %zu: %s '%.*s'", line, msg, (int)toklen, tok);
  else
    snprintf(err, errlen, "line %zu: %s", line, msg);
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Parses |text| into |out| (empty on entry). */
static int parse(acl_rules *out, const char *text, size_t len, char *err,
                 size_t errlen) {
  if (len > ACL_MAX_FILE) {
    if (err && errlen)
      snprintf(err, errlen, "larger than 1 MiB");
    return MCP_ERR_LIMIT;
  }
  size_t line = 0, pos = 0;
  while (pos < len) {
    line++;
    size_t end = pos;
    while (end < len && text[end] != '\n')
      end++;
    /* Up to a comment: '#' first on the line or after a blank. */
    size_t stop = pos;
    while (stop < end && !(text[stop] == '#' &&
                           (stop == pos || is_blank(text[stop - 1]))))
      stop++;
    const char *tok[3];
    size_t toklen[3], ntok = 0;
    size_t i = pos;
    while (i < stop) {
      while (i < stop && is_blank(text[i]))
        i++;
      if (i == stop)
        break;
      size_t t = i;
      while (i < stop && !is_blank(text[i]))
        i++;
      if (ntok == 3)
        break;
      tok[ntok] = text + t;
      toklen[ntok] = i - t;
      ntok++;
    }
    pos = end + 1;
    if (ntok == 0)
      continue;
    int deny = 0;
    const char *p = tok[0];
    size_t plen = toklen[0];
    int kw_allow = toklen[0] == 5 && memcmp(tok[0], "allow", 5) == 0;
    int kw_deny = toklen[0] == 4 && memcmp(tok[0], "deny", 4) == 0;
    if (ntok > 2) {
      errf(err, errlen, line, "too many fields", NULL, 0);
      return MCP_ERR_INVALID_ARGUMENT;
    }
    if (ntok == 2) {
      if (!kw_allow && !kw_deny) {
        errf(err, errlen, line, "unknown keyword", tok[0], toklen[0]);
        return MCP_ERR_INVALID_ARGUMENT;
      }
      deny = kw_deny;
      p = tok[1];
      plen = toklen[1];
    } else if (kw_allow || kw_deny) {
      errf(err, errlen, line, "no identity after", tok[0], toklen[0]);
      return MCP_ERR_INVALID_ARGUMENT;
    }
    if (!pattern_ok(p, plen)) { /* also refuses NUL and control bytes */
      errf(err, errlen, line,
           "bad identity pattern (a '*' may only end it)", p, plen);
      return MCP_ERR_INVALID_ARGUMENT;
    }
    int rv = rules_add(out, deny, p, plen);
    if (rv < 0)
      return rv;
  }
  return 0;
}

int mcp_grpc_acl_parse(mcp_grpc_acl *acl, const char *text, size_t len,
                       char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl || (!text && len))
    return MCP_ERR_INVALID_ARGUMENT;
  acl_rules r = rules_empty(acl);
  int rv = parse(&r, text, len, err, errlen);
  if (rv < 0) {
    rules_free(&r);
    return rv;
  }
  pthread_mutex_lock(&acl->mu);
  acl_rules old = acl->loaded;
  acl->loaded = r;
  pthread_mutex_unlock(&acl->mu);
  rules_free(&old);
  return 0;
}

static void sig_of(const struct stat *st, acl_sig *sig) {
  memset(sig, 0, sizeof(*sig));
  sig->present = 1;
  sig->dev = st->st_dev;
  sig->ino = st->st_ino;
  sig->size = st->st_size;
  sig->mtime = st->st_mtim;
}

static int sig_eq(const acl_sig *a, const acl_sig *b) {
  if (a->present != b->present)
    return 0;
  return !a->present ||
         (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
          a->mtime.tv_sec == b->mtime.tv_sec &&
          a->mtime.tv_nsec == b->mtime.tv_nsec);
}

/* Reads and parses |path|; |*sig| is the version read (present = 0 when
 * the file could not be opened). */
static int load(const char *path, acl_rules *out, acl_sig *sig, char *err,
                size_t errlen) {
  memset(sig, 0, sizeof(*sig));
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return MCP_ERR_IO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) < 0) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return MCP_ERR_IO;
  }
  sig_of(&st, sig);
  char *buf = mcp_grpc_malloc(out->mem, ACL_MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    return MCP_ERR_NOMEM;
  }
  size_t len = fread(buf, 1, ACL_MAX_FILE + 1, f);
  int rd_err = ferror(f);
  fclose(f);
  int rv;
  if (rd_err) {
    if (err && errlen)
      snprintf(err, errlen, "cannot read %s", path);
    rv = MCP_ERR_IO;
  } else {
    rv = parse(out, buf, len, err, errlen);
  }
  mcp_grpc_free(out->mem, buf);
  return rv;
}

int mcp_grpc_acl_load_file(mcp_grpc_acl *acl, const char *path, char *err,
                           size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl || !path)
    return MCP_ERR_INVALID_ARGUMENT;
  char *copy = mcp_grpc_strdup(&acl->mem, path);
  if (!copy)
    return MCP_ERR_NOMEM;
  acl_rules r = rules_empty(acl);
  acl_sig sig;
  int rv = load(path, &r, &sig, err, errlen);
  if (rv < 0) {
    rules_free(&r);
    mcp_grpc_free(&acl->mem, copy);
    return rv;
  }
  pthread_mutex_lock(&acl->mu);
  acl_rules old = acl->loaded;
  acl->loaded = r;
  mcp_grpc_free(&acl->mem, acl->path);
  acl->path = copy;
  acl->seen = sig;
  pthread_mutex_unlock(&acl->mu);
  rules_free(&old);
  return 0;
}

int mcp_grpc_acl_reload(mcp_grpc_acl *acl, char *err, size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl)
    return MCP_ERR_INVALID_ARGUMENT;
  /* One reloader at a time is the caller's business; the lock is not
   * held while reading, so that checks go on meanwhile. */
  pthread_mutex_lock(&acl->mu);
  char *path = acl->path ? mcp_grpc_strdup(&acl->mem, acl->path) : NULL;
  int had_path = acl->path != NULL;
  acl_sig seen = acl->seen;
  pthread_mutex_unlock(&acl->mu);
  if (!had_path)
    return MCP_ERR_NOT_FOUND;
  if (!path)
    return MCP_ERR_NOMEM;

  struct stat st;
  acl_sig now;
  memset(&now, 0, sizeof(now));
  if (stat(path, &st) == 0)
    sig_of(&st, &now);
  if (sig_eq(&now, &seen)) {
    mcp_grpc_free(&acl->mem, path);
    return 0;
  }
  acl_rules r = rules_empty(acl);
  acl_sig sig;
  int rv = load(path, &r, &sig, err, errlen);
  pthread_mutex_lock(&acl->mu);
  /* A version that fails is reported once: the next change is read. */
  acl->seen = sig.present || rv == 0 ? sig : now;
  if (rv == 0) {
    acl_rules old = acl->loaded;
    acl->loaded = r;
    r = old;
  }
  pthread_mutex_unlock(&acl->mu);
  rules_free(&r);
  mcp_grpc_free(&acl->mem, path);
  return rv < 0 ? rv : 1;
}

size_t mcp_grpc_acl_count(const mcp_grpc_acl *acl) {
  pthread_mutex_t *mu = (pthread_mutex_t *)&acl->mu;
  pthread_mutex_lock(mu);
  size_t n = acl->fixed.n + acl->loaded.n;
  pthread_mutex_unlock(mu);
  return n;
}

static int match(const acl_rule *r, const char *id) {
  return r->prefix ? strncmp(id, r->pattern, r->len) == 0
                   : strcmp(id, r->pattern) == 0;
}

int mcp_grpc_acl_check(const mcp_grpc_acl *acl, const mcp_grpc_peer *peer) {
  if (!peer || peer->nidentities == 0)
    return GRPC_STATUS_UNAUTHENTICATED;
  int allow_rules = 0, deny_rules = 0, allowed = 0, denied = 0;
  pthread_mutex_t *mu = (pthread_mutex_t *)&acl->mu;
  pthread_mutex_lock(mu);
  const acl_rules *sets[2] = {&acl->fixed, &acl->loaded};
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < sets[k]->n; i++) {
      const acl_rule *r = &sets[k]->v[i];
      if (r->deny)
        deny_rules = 1;
      else
        allow_rules = 1;
      for (size_t j = 0; j < peer->nidentities; j++) {
        if (match(r, peer->identities[j])) {
          if (r->deny)
            denied = 1;
          else
            allowed = 1;
        }
      }
    }
  }
  pthread_mutex_unlock(mu);
  if (denied)
    return GRPC_STATUS_PERMISSION_DENIED;
  if (allowed || (!allow_rules && deny_rules))
    return 0;
  return GRPC_STATUS_PERMISSION_DENIED; /* an allow list, or empty */
}

int mcp_grpc_acl_authorize(const mcp_grpc_peer *peer, void *acl) {
  return mcp_grpc_acl_check(acl, peer);
}
