/*
 * Command-line helpers shared by mcp-source and mcp-sink. Long options only,
 * written "--name VALUE" or "--name=VALUE". A parse error is reported on
 * stderr by the caller, then "see PROG --help" (not the whole usage: it hid
 * the error), and exits 2.
 */
#ifndef TOOLS_ARGS_H
#define TOOLS_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/log.h" /* TOOL_PRINTF */

/*
 * Reports a usage error the programs' way on stderr: "PROG: ", the message
 * and a newline, then "PROG: see PROG --help for every option". Returns 2,
 * the exit status of a usage error. Each program wraps it as
 * usage_error(fmt, ...). |usage| is unused (the signature every caller
 * has); --help prints it.
 */
int tool_usage_error(const char *prog, void (*usage)(FILE *f),
                     const char *fmt, ...) TOOL_PRINTF(3, 4);

/* Writes the line that ends a usage error reported otherwise ("PROG: see
 * PROG --help for every option") on stderr; returns 2. */
int tool_see_help(const char *prog);

/*
 * The option a mistyped |arg| most likely meant, among the "--name" words
 * of the text |usage| writes: the nearest by edit distance (at most one
 * edit for names under 6 bytes, two for longer ones; dashes and "=VALUE"
 * aside), else the only option |arg| abbreviates (3 bytes or more). A word
 * without dashes is matched only to an option's exact name. Writes "--name"
 * into |out| and returns 1; 0 when none is close (or out of memory).
 */
int tool_suggest_option(void (*usage)(FILE *f), const char *arg, char *out,
                        size_t outlen);

/*
 * Reports an argument no option takes: "PROG: WHAT: ARG", with "; did you
 * mean --X?" when tool_suggest_option() finds one, then the "see --help"
 * line. Returns 2.
 */
int tool_unknown_arg(const char *prog, void (*usage)(FILE *f),
                     const char *what, const char *arg);

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
 * IPv6 address "[::1]"), PORT decimal in [min_port, 65535]; or a unix
 * socket, "unix:PATH" (also "unix:///abs/path"), PATH non-empty and short
 * enough for a socket address (107 bytes). 0 when valid; -1 otherwise,
 * with the reason in |why|.
 */
int tool_check_hostport(const char *s, unsigned min_port, const char **why);
/* The same for a comma-separated list of HOST:PORT (--connect A,B,C). */
int tool_check_hostports(const char *s, unsigned min_port, const char **why);

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

/* ---- security flags (both programs) ---- */

/*
 * --tls-cert FILE, --tls-key FILE, --tls-ca FILE, --tls-server-name NAME,
 * --allow ID, --deny ID (repeatable), --access-list FILE,
 * --allow-cleartext and --max-streams-per-connection N (a listener's
 * limit on one connection's concurrent calls; 0: the transport's default,
 * 1024), --stream-rate PER_S[,BURST] or "off" (a listener's new streams
 * per peer: 0 each is the default, 100/s after a burst of 100;
 * |stream_rate_off| 1: no per-peer limit). Strings are borrowed from
 * argv.
 */
typedef struct tool_sec_args {
  const char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
  tool_strv allow, deny;
  const char *access_list;
  int allow_cleartext;
  unsigned long max_streams_per_connection;
  unsigned long handshakes_per_peer; /* 0: the transport's default */
  unsigned long stream_rate, stream_burst;
  int stream_rate_off;
} tool_sec_args;

/* Those flags in a usage synopsis, each line starting with |I| (a string
 * literal of the program's indentation). */
#define TOOL_SEC_SYNOPSIS(I)                                                 \
  I "[--tls-cert FILE --tls-key FILE] [--tls-ca FILE]\n"                     \
  I "[--tls-server-name NAME] [--allow ID]... [--deny ID]...\n"              \
  I "[--access-list FILE] [--allow-cleartext]\n"                             \
  I "[--max-streams-per-connection N]\n"                                     \
  I "[--stream-rate PER_S[,BURST]|off]\n"                                    \
  I "[--tls-handshakes-per-peer N]\n"

/*
 * If argv[*i] is one of those flags: parses it into |a|, advances |*i| past
 * its value and returns 1. Returns 0 for another argument, -1 for a usage
 * error (reported on stderr as "PROG: ..."), -2 when out of memory.
 */
int tool_sec_parse_arg(int argc, char **argv, int *i, tool_sec_args *a);

/* Any --tls-* file given. */
int tool_sec_tls(const tool_sec_args *a);

/* Any of --allow, --deny, --access-list given. */
int tool_sec_acl(const tool_sec_args *a);

/* What a transport offers, for tool_sec_check(). */
#define TOOL_SEC_NO_TLS 0
#define TOOL_SEC_TLS 1         /* TLS (gRPC: cleartext listens anywhere) */
#define TOOL_SEC_TLS_GUARDED 2 /* TLS, and cleartext only on loopback (h2) */

/*
 * Checks the flags against the transport and the role, for |address|
 * (HOST:PORT) listened on (|listen|) or dialed. |tls_capable|: one of
 * TOOL_SEC_*; |transport| its name, for the messages.
 * 0 when they go together; -1 with the reason in |why| (a usage error):
 *   - TLS or access flags with a transport without TLS;
 *   - listening cleartext (TOOL_SEC_NO_TLS, or TOOL_SEC_TLS_GUARDED
 *     without TLS flags) on an address that is not loopback, without
 *     --allow-cleartext;
 *   - listening with TLS without --tls-cert and --tls-key; dialing with
 *     only one of them; --tls-server-name when listening or without TLS;
 *   - an access list without identities to check: listening without
 *     --tls-ca (client certificates), dialing without TLS;
 *   - --tls-handshakes-per-peer but for a TLS listener of a transport
 *     that limits handshakes (TOOL_SEC_TLS_GUARDED: h2).
 */
int tool_sec_check(const tool_sec_args *a, int tls_capable,
                   const char *transport, int listen, const char *address,
                   char *why, size_t len);

/*
 * The transport a program uses when no --transport is given: "h2" (the
 * nghttp2 transport, with TLS when the flags ask) when it listens
 * (|listen|), "grpc" when it dials. gRPC 1.51's HTTP/2 server cannot bound
 * a rapid-reset flood (docs/security.md, "gRPC 1.51 under attack"), so
 * every listener uses the nghttp2 one, TLS included; dialing keeps gRPC,
 * which talks to both.
 */
const char *tool_sec_default_transport(const tool_sec_args *a, int listen);

/* The --transport names the programs know, "h2, h2c or grpc" (at most
 * |len| bytes into |buf|), for "unknown transport" messages. Returns
 * |buf|. */
const char *tool_transport_names(char *buf, size_t len);

/* One line for the start-up log: how the connections are secured. */
void tool_sec_describe(const tool_sec_args *a, int listen, char *buf,
                       size_t len);

void tool_sec_args_free(tool_sec_args *a);

/*
 * Whether a listen address stays on this host: a unix socket ("unix:..."),
 * "localhost", an IPv4 address in 127.0.0.0/8, ::1 or ::ffff:127.x.y.z
 * (brackets and the :PORT are optional). 0 for anything else, including
 * 0.0.0.0, [::] and other names.
 */
int tool_addr_is_loopback(const char *address);

/*
 * The listen address as bound, for the logs and the sink's "listening"
 * event: |address| with its :PORT replaced by |port| (a listener asked
 * for :0 names the port the system chose); a unix socket ("unix:PATH",
 * "unix-abstract:NAME") as given, since it has no port.
 */
void tool_addr_bound(char *buf, size_t len, const char *address, int port);

#endif /* TOOLS_ARGS_H */
