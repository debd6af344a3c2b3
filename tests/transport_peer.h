/*
 * The transport suite's raw peer (issue 21 item 7): one gRPC-core client
 * call, the same for every transport under test (h2c speaks gRPC over
 * HTTP/2 with prior knowledge, so gRPC core's channel talks to it; over
 * TLS its TLS channel, with the suite's client certificate). It is
 * independent of the transport: a test drives a listener's services with
 * it message by message.
 *
 * It never blocks: every wait is the adapter's run_until() on a condition
 * that first moves the call's completions (tp_pump()), so a loop-driven
 * transport (h2c) runs on the test's thread meanwhile. Everything is
 * called from the test's thread.
 */
#ifndef MCP_TEST_TRANSPORT_PEER_H
#define MCP_TEST_TRANSPORT_PEER_H

#include <stddef.h>

#include "transport_suite.h"

typedef struct tp_call tp_call;

/* A call of |method| on 127.0.0.1:|port| (TLS in MCP_TEST_TLS mode),
 * with its initial metadata sent and a receive armed. Free with
 * tp_close(). */
tp_call *tp_open(int port, const char *method);
/* Queues |len| bytes as one message (the half-close with it when
 * |close|); sent in order, one at a time. */
void tp_send(tp_call *c, const void *p, size_t len, int close);
void tp_send_str(tp_call *c, const char *s);
void tp_half_close(tp_call *c);
/* Moves the call's completions without blocking. */
void tp_pump(tp_call *c);
/* Messages received so far; the i-th one (NUL terminated; the first 256
 * are kept) and its length (a binary message may hold NULs). */
int tp_nmsgs(const tp_call *c);
const char *tp_msg(const tp_call *c, int i);
size_t tp_msg_len(const tp_call *c, int i);
/* The call's status once it came (-1 before), and its details. */
int tp_status(const tp_call *c);
const char *tp_details(const tp_call *c);

/* Waits (ta->run_until) until |c| has |n| messages / its status; 1 when
 * it happened. */
int tp_wait_msgs(ta_env *env, tp_call *c, int n);
int tp_wait_status(ta_env *env, tp_call *c);
/* Waits until |c| has its status and its receive has ended (every message
 * the server sent is counted); 1 when it happened. */
int tp_wait_ended(ta_env *env, tp_call *c);
/* Cancels the call (RST_STREAM CANCEL) unless it ended, waits for its
 * completions, and frees it. */
void tp_close(ta_env *env, tp_call *c);

/* ---- admission (test_transport_admission.c) ---- */

/* A gRPC-core channel to |port| on its own connection, as peer |peer|
 * (0 or 1): two peers the listener's admission keys apart, by address in
 * cleartext (127.0.0.1 and ::1: the listener on [::]:0), by identity over
 * TLS (client.pem and denied.pem, both from 127.0.0.1; mcp_peer_admit_key()
 * takes the identity first). Needs grpc_init(); free with
 * grpc_channel_destroy(). */
typedef struct grpc_channel grpc_channel;
grpc_channel *tp_channel(int port, int peer);

#endif
