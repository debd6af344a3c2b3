/* Access lists of peer identities: allow and deny rules, exact or prefix
 * (mcp/auth.h gives the semantics). The parsed rules are replaced as a
 * whole, so a text that fails leaves the list as it was. */
#include <mcp/auth.h>

#include "engine_int.h"

#define ACL_MAX_PATTERN 4096
#define ACL_MAX_TEXT (1 << 20)

typedef struct acl_rule {
  int deny;
  int prefix;   /* the pattern ended in '*', which is not kept */
  size_t len;   /* of |pattern| */
  char *pattern;
} acl_rule;

typedef struct acl_rules {
  acl_rule *v;
  size_t n, cap;
} acl_rules;

struct mcp_acl {
  mcp_mem mem;
  acl_rules fixed;  /* mcp_acl_add() */
  acl_rules parsed; /* the last mcp_acl_parse() */
};

static void rules_free(const mcp_mem *mem, acl_rules *r) {
  for (size_t i = 0; i < r->n; i++)
    mcp_mem_free(mem, r->v[i].pattern);
  mcp_mem_free(mem, r->v);
  memset(r, 0, sizeof(*r));
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

static int rules_add(const mcp_mem *mem, acl_rules *r, int deny, const char *p,
                     size_t len) {
  if (!pattern_ok(p, len))
    return MCP_ERR_INVALID_ARGUMENT;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 8;
    acl_rule *v = mcp_mem_realloc(mem, r->v, cap * sizeof(*v));
    if (!v)
      return MCP_ERR_NOMEM;
    r->v = v;
    r->cap = cap;
  }
  acl_rule *rule = &r->v[r->n];
  rule->deny = deny;
  rule->prefix = p[len - 1] == '*';
  rule->len = len - (size_t)rule->prefix;
  rule->pattern = mcp_mem_strndup(mem, p, rule->len);
  if (!rule->pattern)
    return MCP_ERR_NOMEM;
  r->n++;
  return 0;
}

int mcp_acl_new(mcp_acl **pacl, const mcp_mem *mem) {
  if (!pacl)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_mem m;
  mcp_mem_init(&m, mem);
  mcp_acl *acl = mcp_mem_calloc(&m, 1, sizeof(*acl));
  if (!acl)
    return MCP_ERR_NOMEM;
  acl->mem = m;
  *pacl = acl;
  return 0;
}

void mcp_acl_del(mcp_acl *acl) {
  if (!acl)
    return;
  mcp_mem m = acl->mem;
  rules_free(&m, &acl->fixed);
  rules_free(&m, &acl->parsed);
  mcp_mem_free(&m, acl);
}

int mcp_acl_add(mcp_acl *acl, mcp_acl_action action, const char *pattern) {
  if (!acl || !pattern || (action != MCP_ACL_ALLOW && action != MCP_ACL_DENY))
    return MCP_ERR_INVALID_ARGUMENT;
  return rules_add(&acl->mem, &acl->fixed, action == MCP_ACL_DENY, pattern,
                   strlen(pattern));
}

/* "line N: MSG 'TOKEN'" (the token cut at 64 bytes). */
static void errf(char *err, size_t errlen, size_t line, const char *msg,
                 const char *tok, size_t toklen) {
  if (!err || !errlen)
    return;
  char t[65];
  if (toklen > 64)
    toklen = 64;
  if (tok) {
    memcpy(t, tok, toklen);
    t[toklen] = '\0';
    mcp_fmt(err, errlen, "line %zu: %s '%s'", line, msg, t);
  } else {
    mcp_fmt(err, errlen, "line %zu: %s", line, msg);
  }
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Parses |text| into |out| (empty on entry). */
static int parse(const mcp_mem *mem, acl_rules *out, const char *text,
                 size_t len, char *err, size_t errlen) {
  if (len > ACL_MAX_TEXT) {
    if (err && errlen)
      mcp_fmt(err, errlen, "larger than 1 MiB");
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
    int rv = rules_add(mem, out, deny, p, plen);
    if (rv < 0)
      return rv;
  }
  return 0;
}

int mcp_acl_parse(mcp_acl *acl, const char *text, size_t len, char *err,
                  size_t errlen) {
  if (err && errlen)
    err[0] = '\0';
  if (!acl || (!text && len))
    return MCP_ERR_INVALID_ARGUMENT;
  acl_rules r;
  memset(&r, 0, sizeof(r));
  int rv = parse(&acl->mem, &r, text, len, err, errlen);
  if (rv < 0) {
    rules_free(&acl->mem, &r);
    return rv;
  }
  rules_free(&acl->mem, &acl->parsed);
  acl->parsed = r;
  return 0;
}

size_t mcp_acl_count(const mcp_acl *acl) {
  return acl ? acl->fixed.n + acl->parsed.n : 0;
}

static int match(const acl_rule *r, const char *id) {
  return r->prefix ? strncmp(id, r->pattern, r->len) == 0
                   : strcmp(id, r->pattern) == 0;
}

int mcp_acl_check(const mcp_acl *acl, const mcp_peer *peer) {
  if (!peer || peer->nidentities == 0)
    return MCP_CODE_UNAUTHENTICATED;
  int allow_rules = 0, deny_rules = 0, allowed = 0, denied = 0;
  const acl_rules *sets[2] = {&acl->fixed, &acl->parsed};
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
  if (denied)
    return MCP_CODE_PERMISSION_DENIED;
  if (allowed || (!allow_rules && deny_rules))
    return 0;
  return MCP_CODE_PERMISSION_DENIED; /* an allow list, or empty */
}

int mcp_acl_authorize(const mcp_peer *peer, void *acl) {
  return mcp_acl_check(acl, peer);
}
