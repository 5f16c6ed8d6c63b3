/*
 * Internals of the peer runtime, shared by its files only.
 */
#ifndef PEER_RUNTIME_H
#define PEER_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "peer/peer.h"

#define PEER_BATCH 16u

/* Common options, as parsed. */
struct peer_config {
	const char *segment;
	uint32_t port_first, port_last;
	bool have_port;
	unsigned threads;
	enum peer_log_level log_level;
	bool daemon;
	const char *pidfile;
	uint64_t spin_ns;
	unsigned stop_timeout_s;
	bool never_yield;   /* --yield never (peer.c: yield_if_cpu_shared) */
	unsigned lanes;     /* --lanes: port_first..port_last bound as lanes */
	unsigned watchers;  /* --watchers (0: peer_default_watchers) */
};

/* The context of one send or forward, in the slot of the request's pool
 * index: one request is in at most one send of ours at a time. */
struct peer_slot {
	peer_reply_fn cb;
	void *arg;
	_Atomic uint32_t armed;   /* 1 while the request is out */
	bool forward;
};

struct peer_thread {
	struct peer *peer;
	unsigned index;
	pthread_t tid;
	void *priv;
	struct peer_work *deferred;       /* LIFO of work put off */
	struct xseg_request *batch[PEER_BATCH];
	/* yield_if_cpu_shared: whether this thread's CPU was shared when it
	 * last looked (its involuntary switches then), rounds of work counted. */
	bool cpu_shared;
	long switches_seen;
	unsigned rounds_of_work;
	/* Requests this worker answered since the end of its last round: taken
	 * off peer.accepted once a round (requests.c), not one by one. */
	uint64_t answered;
	/* The tick of this round's last accept (0: none yet): how long its
	 * requests took, for peer_bench_call_if_busy. */
	uint64_t round_accept_tick;
};

/* The worker running on this thread (NULL on any other thread). */
extern __thread struct peer_thread *peer_current_worker;

struct peer {
	const struct peer_ops *ops;
	void *priv;
	struct peer_config cfg;
	struct xseg *seg;
	uint32_t nr_requests;
	uint32_t nr_ports;
	struct peer_slot *slots;          /* nr_requests of them */
	struct xseg_reserve *reserve;     /* requests for when the pool is empty */
	uint64_t cookie_salt;             /* high 32 bits of our cookies */
	struct peer_thread *threads;
	pthread_t main_tid;
	uint64_t start_ns;                /* for the figures' uptime */
	/* When each request (by pool index) was accepted, in counters.h's
	 * ticks: its latency is counted when it is answered. Relaxed
	 * atomics: the accepting and the answering thread may differ. */
	_Atomic uint64_t *accept_tick;

	_Atomic int stop;                 /* a stop began */
	_Atomic int on_stop_done;
	_Atomic int failed;               /* a thread_init failed */
	_Atomic uint64_t accepted;        /* accepted, not yet answered */
	_Atomic uint64_t outstanding;     /* sends and forwards not yet back */
	_Atomic uint64_t deferred;        /* peer_work items not yet run */
	/* peer_post: any thread enqueues, one worker at a time drains. */
	struct __cds_wfcq_head post_head;
	struct cds_wfcq_tail post_tail;
	pthread_mutex_t post_drain;
	/* Held across an accept and its on_accept_in_order calls. */
	pthread_mutex_t accept_order;
	_Atomic unsigned running;         /* worker threads not yet ended */
	_Atomic int drain_failed;         /* ops->drain gave up */
	/* The maintenance thread (ops->maintain): ends when maint_end is set. */
	struct peer_thread maint;
	bool maint_started;
	int maint_state;                  /* 1 after its thread_init, -1 failed */
	_Atomic int maint_end;
	/* Started and not yet joined: at a stop the workers end only after it
	 * (what its last maintain posts or sends is still run or answered). */
	_Atomic int maint_running;
	pthread_mutex_t maint_lock;
	pthread_cond_t maint_cond;
	/* peer_park_workers: idle workers wait on park_cond, not the ports. */
	_Atomic int parked;
	pthread_mutex_t park_lock;
	pthread_cond_t park_cond;
	/* watch.c: idle workers watching the ports (at most max_watchers),
	 * and those waiting on the bench for a call. */
	unsigned max_watchers;
	uint64_t slow_request_ticks;      /* SLOW_REQUEST_NS in ticks */
	_Atomic unsigned watching;
	_Atomic unsigned benched;
	_Atomic uint32_t bench_seq;       /* the bench's futex word */
};

/* requests.c: a reply to one of our sends or forwards (its callback). */
void peer_on_reply(struct peer_thread *t, struct xseg_request *req);

/* work.c: the thread's deferred work, oldest first; the posted work (one
 * worker at a time: false when none, or another drains it); whether work
 * is posted (also the idle workers' spin check, arg the peer). */
void peer_run_deferred(struct peer_thread *t);
bool peer_run_posted(struct peer_thread *t);
bool peer_posted_ready(void *arg);

/* watch.c: which idle workers watch the ports. peer_watch_begin: true
 * (and counted until peer_watch_end) while fewer than max_watchers do;
 * peer_bench_wait: an idle worker that may not watch waits for a call, a
 * stop or timeout_ns; peer_bench_call: wakes one waiting worker (all at a
 * stop), no system call while none waits; peer_bench_call_if_busy: calls
 * one when work is queued, no watcher is idle and more workers would help
 * (the round's `work` items: sends out, or slow requests).
 * peer_bench_setup: the bench's figures, at the start. */
unsigned peer_default_watchers(const struct peer *p);
void peer_bench_setup(struct peer *p);
bool peer_watch_begin(struct peer *p);
void peer_watch_end(struct peer *p);
void peer_bench_wait(struct peer *p, uint64_t timeout_ns);
void peer_bench_call(struct peer *p, bool all);
void peer_bench_call_if_busy(struct peer_thread *t, int work);

/* options.c */
int peer_parse_args(struct peer *p, int argc, char **argv);

/* segment.c: the segment side of peer_main */
int peer_join_and_bind(struct peer *p);
uint32_t peer_port_behind_a_cache(struct peer *p, uint32_t *cache);
void peer_reap_dead_peers(struct peer *p);
uint64_t peer_make_salt(void);

/* log.c */
const char *peer_log_name(void);

/* notify.c: systemd's READY=1 once serving, STOPPING=1 once a stop begins. */
void peer_notify_ready(struct peer *p);
void peer_notify_stopping(void);

#endif /* PEER_RUNTIME_H */
