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
 * start of its own job type, gives its allocator, and says how its loop
 * is woken.
 */
#ifndef MCP_COMMON_JOBQ_H
#define MCP_COMMON_JOBQ_H

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "mcp/engine.h" /* the error codes, mcp_mem */

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
  const mcp_mem *mem; /* asynchronous jobs' copies (the object's hook) */
  /* Makes the loop thread run mcp_jobq_take() soon; called with |mu|
   * held, from any thread, the loop's own included. */
  void (*wake)(void *user_data);
  void *wake_user_data;
} mcp_jobq;

/* |mem| (kept: it outlives the queue) allocates the copies of
 * asynchronous jobs. 0, or MCP_ERR_NOMEM when the lock or the condition
 * cannot be made. */
static inline int mcp_jobq_init(mcp_jobq *q, size_t max_queued,
                                const mcp_mem *mem, void (*wake)(void *),
                                void *user_data) {
  q->head = NULL;
  q->tail = &q->head;
  q->queued = 0;
  q->max_queued = max_queued;
  q->closing = 0;
  q->mem = mem;
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
 * Queues the job at |tmpl| (|size| bytes: the transport's whole job) and
 * wakes the loop. An asynchronous job is copied first (the caller's
 * |tmpl| may go at once; the loop frees the copy, mcp_jobq_done()); a
 * synchronous one is queued itself and returns here once it ran.
 * |on_loop|: the caller is the loop thread. 0, MCP_ERR_NOMEM,
 * MCP_ERR_CLOSED, MCP_ERR_LIMIT or MCP_ERR_INVALID_ARGUMENT.
 */
static inline int mcp_jobq_submit(mcp_jobq *q, mcp_jobq_job *tmpl,
                                  size_t size, int on_loop) {
  if (tmpl->sync && on_loop)
    return MCP_ERR_INVALID_ARGUMENT;
  mcp_jobq_job *job = tmpl;
  if (!tmpl->sync) {
    if (!(job = mcp_mem_malloc(q->mem, size)))
      return MCP_ERR_NOMEM;
    memcpy(job, tmpl, size);
  }
  pthread_mutex_lock(&q->mu);
  int err = q->closing ? MCP_ERR_CLOSED : 0;
  if (!err && !job->sync && q->max_queued && q->queued >= q->max_queued)
    err = MCP_ERR_LIMIT;
  if (err) {
    pthread_mutex_unlock(&q->mu);
    if (job != tmpl)
      mcp_mem_free(q->mem, job);
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

/* The loop thread, after running |job| (its next taken already): frees
 * an asynchronous job's copy, or hands a synchronous one back to its
 * waiting submitter, who may free it from here on. */
static inline void mcp_jobq_done(mcp_jobq *q, mcp_jobq_job *job) {
  if (!job->sync) {
    mcp_mem_free(q->mem, job);
    return;
  }
  pthread_mutex_lock(&q->mu);
  job->done = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
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
