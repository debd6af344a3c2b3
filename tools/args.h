/*
 * Command-line helpers shared by mcp-source and mcp-sink. Long options only,
 * written "--name VALUE" or "--name=VALUE". A parse error is reported on
 * stderr by the caller with the program's usage, and exits 2.
 */
#ifndef TOOLS_ARGS_H
#define TOOLS_ARGS_H

#include <stddef.h>

/*
 * If argv[*i] is the option |name| taking a value ("--name VALUE" or
 * "--name=VALUE"), sets |*value|, advances |*i| past it and returns 1.
 * Returns 0 when argv[*i] is another option, and -1 when it is |name| but
 * the value is missing (reported on stderr).
 */
int tool_arg_value(int argc, char **argv, int *i, const char *name,
                   const char **value);

/* 1 when argv[i] is exactly the flag |name| (flags take no value). */
int tool_arg_flag(char **argv, int i, const char *name);

/*
 * Checks "HOST:PORT": HOST non-empty (a name, an IPv4 address or a bracketed
 * IPv6 address "[::1]"), PORT decimal in [min_port, 65535]. 0 when valid;
 * -1 otherwise, with the reason in |why|.
 */
int tool_check_hostport(const char *s, unsigned min_port, const char **why);

/* Parses a decimal integer in [0, max] (no sign, no spaces). 0 on success,
 * -1 otherwise (|*out| untouched). */
int tool_parse_ulong(const char *s, unsigned long max, unsigned long *out);

/*
 * A growable list of borrowed strings (argv entries), for repeatable options.
 * tool_strv_add() skips a string already in the list when |unique|.
 * Returns 0, or -1 when out of memory.
 */
typedef struct tool_strv {
  const char **v;
  size_t n, cap;
} tool_strv;

int tool_strv_add(tool_strv *sv, const char *s, int unique);
void tool_strv_free(tool_strv *sv);

/*
 * A relative path safe to create under a directory: non-empty, no leading
 * '/', no empty segment ("a//b", trailing '/'), no "." segment and no ".."
 * anywhere. Returns 1 when safe.
 */
int tool_path_safe(const char *rel);

#endif /* TOOLS_ARGS_H */
