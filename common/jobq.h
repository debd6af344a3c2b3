/*
 * The queue that hands work from any thread to a transport's loop thread:
 * the transports' *_update(), *_run(), *_stats() and the like. One copy of
 * its rules for every transport: a job queued after del() is refused
 * (MCP_ERR_CLOSED); an asynchronous job beyond the options'
 * max_queued_updates is refused (MCP_ERR_LIMIT); a synchronous one waits
 * until the loop has run it and may not be submitted from the loop thread
 * (it would wait for itself: MCP_ERR_INVALID_ARGUMENT).
 *
 * Header-only and private, like filever.h: compiled into each transport,
 * part of no library's ABI. Each transport embeds an mcp_jobq_job at the
 * start of its own job type and says how its loop is woken.
 */
#ifndef MCP_COMMON_JOBQ_H
#define MCP_COMMON_JOBQ_H

#include <pthread.h>
#include <stddef.h>

#include "mcp/engine.h" /* the error codes */

typedef struct mcp_jobq_job {
  struct mcp_jobq_job *next;
  int sync; /* the submitter waits for |done|; the job is on its stack */
  int done;
} mcp_jobq_job;

typedef struct mcp_jobq {
  /* Also guards what the transport's wake-up function keeps. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mcp_jobq_job *head, **tail;
  size_t queued;     /* asynchronous jobs waiting */
  size_t max_queued; /* 0: no limit */
  int closing;       /* del() was called: no more jobs */
  /* Makes the loop thread run mcp_jobq_take() soon; called with |mu|
   * held, from any thread, the loop's own included. */
  void (*wake)(void *user_data);
  void *wake_user_data;
} mcp_jobq;

/* 0, or MCP_ERR_NOMEM when the lock or the condition cannot be made. */
static inline int mcp_jobq_init(mcp_jobq *q, size_t max_queued,
                                void (*wake)(void *), void *user_data) {
  q->head = NULL;
  q->tail = &q->head;
  q->queued = 0;
  q->max_queued = max_queued;
  q->closing = 0;
  q->wake = wake;
  q->wake_user_data = user_data;
  if (pthread_mutex_init(&q->mu, NULL) != 0)
    return MCP_ERR_NOMEM;
  if (pthread_cond_init(&q->cv, NULL) != 0) {
    pthread_mutex_destroy(&q->mu);
    return MCP_ERR_NOMEM;
  }
  return 0;
}

/* Once no thread can use the queue any more. */
static inline void mcp_jobq_fini(mcp_jobq *q) {
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}

/*
 * Queues |job| and wakes the loop. An asynchronous job is the caller's
 * allocation, handed over on success (the loop frees it after running
 * it, mcp_jobq_done()); a synchronous one returns here once it ran.
 * |on_loop|: the caller is the loop thread. 0, MCP_ERR_CLOSED,
 * MCP_ERR_LIMIT or MCP_ERR_INVALID_ARGUMENT.
 */
static inline int mcp_jobq_submit(mcp_jobq *q, mcp_jobq_job *job,
                                  int on_loop) {
  if (job->sync && on_loop)
    return MCP_ERR_INVALID_ARGUMENT;
  pthread_mutex_lock(&q->mu);
  int err = q->closing ? MCP_ERR_CLOSED : 0;
  if (!err && !job->sync && q->max_queued && q->queued >= q->max_queued)
    err = MCP_ERR_LIMIT;
  if (err) {
    pthread_mutex_unlock(&q->mu);
    return err;
  }
  if (!job->sync)
    q->queued++;
  job->next = NULL;
  job->done = 0;
  *q->tail = job;
  q->tail = &job->next;
  /* Also from the loop thread: a callback run from the loop would
   * otherwise leave the job waiting for the next event. */
  q->wake(q->wake_user_data);
  while (job->sync && !job->done)
    pthread_cond_wait(&q->cv, &q->mu);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

/* The loop thread: every queued job, in order (NULL: none); |*closing|
 * (may be NULL) says whether del() was called. */
static inline mcp_jobq_job *mcp_jobq_take(mcp_jobq *q, int *closing) {
  pthread_mutex_lock(&q->mu);
  mcp_jobq_job *job = q->head;
  q->head = NULL;
  q->tail = &q->head;
  q->queued = 0;
  if (closing)
    *closing = q->closing;
  pthread_mutex_unlock(&q->mu);
  return job;
}

/* The loop thread, after running |job| (its next taken already): 1 when
 * the job is the loop's to free (asynchronous), 0 when it went back to
 * its waiting submitter, who may free it from here on. */
static inline int mcp_jobq_done(mcp_jobq *q, mcp_jobq_job *job) {
  if (!job->sync)
    return 1;
  pthread_mutex_lock(&q->mu);
  job->done = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

/* del(): refuses every later job; |wake|: wakes the loop to see it. */
static inline void mcp_jobq_close(mcp_jobq *q, int wake) {
  pthread_mutex_lock(&q->mu);
  q->closing = 1;
  if (wake)
    q->wake(q->wake_user_data);
  pthread_mutex_unlock(&q->mu);
}

#endif
