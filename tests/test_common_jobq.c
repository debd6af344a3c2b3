/* common/jobq.h: the job queue both transports hand work to their loop
 * thread through (each rule once; the transport suite runs it behind
 * both transports' public functions). A real second thread plays the
 * loop where a job must be waited for; it waits for events, not time. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "jobq.h"

typedef struct job {
  mcp_jobq_job q; /* first, as in the transports */
  int id;
} job;

/* The copies' allocator: counts what lives (the submitter allocates, the
 * loop frees), fails when told to. */
typedef struct counted {
  mcp_mem mem;
  atomic_long live;
  int fail;
} counted;

static void *c_malloc(size_t n, void *ud) {
  counted *c = ud;
  if (c->fail)
    return NULL;
  void *p = malloc(n);
  if (p)
    c->live++;
  return p;
}

static void c_free(void *p, void *ud) {
  counted *c = ud;
  if (p)
    c->live--;
  free(p);
}

static void counted_init(counted *c) {
  c->mem = (mcp_mem){.malloc = c_malloc, .free = c_free, .user_data = c};
  atomic_init(&c->live, 0);
  c->fail = 0;
}

/* The wake-up: counts, under the queue's lock (as the transports' do). */
static int wakes;
static void count_wake(void *ud) {
  (void)ud;
  wakes++;
}

/* A queue with |max| and a counted allocator, no wake-up counted yet. */
static void queue_init(mcp_jobq *q, size_t max, counted *c) {
  counted_init(c);
  wakes = 0;
  ck_assert_int_eq(mcp_jobq_init(q, max, &c->mem, count_wake, NULL), 0);
}

static int id_of(mcp_jobq_job *q) { return ((job *)(void *)q)->id; }

static int submit(mcp_jobq *q, int id, int on_loop) {
  job j = {.id = id}; /* asynchronous: copied, |j| may go */
  return mcp_jobq_submit(q, &j.q, sizeof(j), on_loop);
}

/* Takes and finishes every queued job as the loop does; their ids in
 * order, one decimal digit each. */
static long run_all(mcp_jobq *q) {
  long ids = 0;
  for (mcp_jobq_job *t = mcp_jobq_take(q, NULL), *next; t; t = next) {
    next = t->next;
    ids = ids * 10 + id_of(t);
    mcp_jobq_done(q, t);
  }
  return ids;
}

START_TEST(test_jobq_runs_copies_in_order_and_frees_them) {
  mcp_jobq q;
  counted c;
  queue_init(&q, 0, &c);
  ck_assert_int_eq(submit(&q, 1, 0), 0);
  ck_assert_int_eq(submit(&q, 2, 0), 0);
  ck_assert_int_eq(wakes, 2);
  ck_assert_int_eq(c.live, 2);
  int closing = -1;
  mcp_jobq_job *t = mcp_jobq_take(&q, &closing);
  ck_assert_int_eq(closing, 0);
  ck_assert_int_eq(id_of(t), 1);
  ck_assert_int_eq(id_of(t->next), 2);
  ck_assert_ptr_null(t->next->next);
  mcp_jobq_done(&q, t->next);
  mcp_jobq_done(&q, t);
  ck_assert_int_eq(c.live, 0);
  /* The queue starts empty again after a take. */
  ck_assert_ptr_null(mcp_jobq_take(&q, NULL));
  ck_assert_int_eq(submit(&q, 3, 0), 0);
  ck_assert_int_eq(run_all(&q), 3);
  ck_assert_int_eq(c.live, 0);
  mcp_jobq_fini(&q);
}
END_TEST

START_TEST(test_jobq_without_memory_queues_nothing) {
  mcp_jobq q;
  counted c;
  queue_init(&q, 0, &c);
  c.fail = 1;
  ck_assert_int_eq(submit(&q, 1, 0), MCP_ERR_NOMEM);
  ck_assert_int_eq(wakes, 0);
  ck_assert_ptr_null(mcp_jobq_take(&q, NULL));
  /* A synchronous job is not copied: memory plays no part. */
  ck_assert_int_eq(mcp_jobq_submit(&q, &(job){.q.sync = 1}.q, sizeof(job), 1),
                   MCP_ERR_INVALID_ARGUMENT);
  c.fail = 0;
  ck_assert_int_eq(submit(&q, 2, 0), 0);
  ck_assert_int_eq(run_all(&q), 2);
  ck_assert_int_eq(c.live, 0);
  mcp_jobq_fini(&q);
}
END_TEST

START_TEST(test_jobq_limits_waiting_async_jobs_only) {
  mcp_jobq q;
  counted c;
  queue_init(&q, 2, &c);
  ck_assert_int_eq(submit(&q, 1, 0), 0);
  ck_assert_int_eq(submit(&q, 2, 0), 0);
  ck_assert_int_eq(submit(&q, 3, 0), MCP_ERR_LIMIT);
  ck_assert_int_eq(c.live, 2); /* the refused copy is freed */
  /* A take makes room. */
  ck_assert_int_eq(run_all(&q), 12);
  ck_assert_int_eq(submit(&q, 3, 0), 0);
  ck_assert_int_eq(submit(&q, 4, 0), 0);
  ck_assert_int_eq(run_all(&q), 34);
  ck_assert_int_eq(c.live, 0);
  mcp_jobq_fini(&q);
}
END_TEST

START_TEST(test_jobq_refuses_every_job_once_closed) {
  mcp_jobq q;
  counted c;
  queue_init(&q, 0, &c);
  ck_assert_int_eq(submit(&q, 1, 0), 0);
  mcp_jobq_close(&q, 0);
  ck_assert_int_eq(wakes, 1); /* close(.., 0): no wake-up */
  ck_assert_int_eq(submit(&q, 2, 0), MCP_ERR_CLOSED);
  job s = {.q.sync = 1, .id = 3};
  ck_assert_int_eq(mcp_jobq_submit(&q, &s.q, sizeof(s), 0), MCP_ERR_CLOSED);
  ck_assert_int_eq(c.live, 1); /* the refused copy is freed */
  /* What was queued before still runs, and the loop learns of the close. */
  int closing = 0;
  mcp_jobq_job *t = mcp_jobq_take(&q, &closing);
  ck_assert_int_eq(closing, 1);
  ck_assert_int_eq(id_of(t), 1);
  ck_assert_ptr_null(t->next);
  mcp_jobq_done(&q, t);
  ck_assert_int_eq(c.live, 0);
  mcp_jobq_close(&q, 1);
  ck_assert_int_eq(wakes, 2);
  mcp_jobq_fini(&q);
}
END_TEST

START_TEST(test_jobq_refuses_a_sync_job_from_the_loop_thread) {
  mcp_jobq q;
  counted c;
  queue_init(&q, 0, &c);
  job s = {.q.sync = 1};
  ck_assert_int_eq(mcp_jobq_submit(&q, &s.q, sizeof(s), 1),
                   MCP_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(wakes, 0);
  ck_assert_ptr_null(mcp_jobq_take(&q, NULL));
  /* An asynchronous one is fine there. */
  ck_assert_int_eq(submit(&q, 1, 1), 0);
  ck_assert_int_eq(run_all(&q), 1);
  mcp_jobq_fini(&q);
}
END_TEST

/* The loop: waits to be woken (its own lock and condition, as a
 * transport's poller would), takes, runs, hands back. */
typedef struct loop {
  mcp_jobq q;
  counted c;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int woken, ran, sync_ran;
} loop;

static void loop_wake(void *ud) {
  loop *l = ud;
  pthread_mutex_lock(&l->mu);
  l->woken = 1;
  pthread_cond_signal(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static void *loop_main(void *arg) {
  loop *l = arg;
  for (;;) {
    pthread_mutex_lock(&l->mu);
    while (!l->woken)
      pthread_cond_wait(&l->cv, &l->mu);
    l->woken = 0;
    pthread_mutex_unlock(&l->mu);
    int closing;
    mcp_jobq_job *t = mcp_jobq_take(&l->q, &closing);
    while (t) {
      mcp_jobq_job *next = t->next;
      l->ran++;
      if (t->sync)
        l->sync_ran = id_of(t);
      /* The submitter owns a synchronous job again after this. */
      mcp_jobq_done(&l->q, t);
      t = next;
    }
    if (closing)
      return NULL;
  }
}

START_TEST(test_jobq_sync_job_returns_after_the_loop_ran_it) {
  loop l = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  counted_init(&l.c);
  ck_assert_int_eq(mcp_jobq_init(&l.q, 0, &l.c.mem, loop_wake, &l), 0);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, loop_main, &l), 0);
  for (int i = 0; i < 100; i++) {
    ck_assert_int_eq(submit(&l.q, 1000 + i, 0), 0);
    job s = {.q.sync = 1, .id = i + 1};
    ck_assert_int_eq(mcp_jobq_submit(&l.q, &s.q, sizeof(s), 0), 0);
    /* Returned: the loop ran it (and the job before it, in order). */
    ck_assert(s.q.done);
    pthread_mutex_lock(&l.q.mu);
    int sr = l.sync_ran, ran = l.ran;
    pthread_mutex_unlock(&l.q.mu);
    ck_assert_int_eq(sr, i + 1);
    ck_assert_int_eq(ran, 2 * (i + 1));
  }
  mcp_jobq_close(&l.q, 1);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_int_eq(l.ran, 200);
  ck_assert_int_eq(l.c.live, 0); /* every copy freed by the loop */
  mcp_jobq_fini(&l.q);
}
END_TEST

int main(void) {
  Suite *s = suite_create("common_jobq");
  TCase *tc = tcase_create("jobq");
  tcase_add_test(tc, test_jobq_runs_copies_in_order_and_frees_them);
  tcase_add_test(tc, test_jobq_without_memory_queues_nothing);
  tcase_add_test(tc, test_jobq_limits_waiting_async_jobs_only);
  tcase_add_test(tc, test_jobq_refuses_every_job_once_closed);
  tcase_add_test(tc, test_jobq_refuses_a_sync_job_from_the_loop_thread);
  tcase_add_test(tc, test_jobq_sync_job_returns_after_the_loop_ran_it);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
