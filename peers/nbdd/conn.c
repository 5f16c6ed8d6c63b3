/*
 * A connection's output and lifetime: replies queued under the
 * connection's lock and written from any thread (conn_send), or after a
 * worker's round together with the others it queued (conn_send_batched);
 * the buffers each connection holds, counted against its limits and the
 * total; waking the socket thread (server.c) to look at a connection;
 * references (the socket thread's, one per command). Calls nothing of
 * server.c: what both touch is in conn.h.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conn.h"
#include "nbdd.h"

#define WRITE_IOVS 64

struct conn_hub H;

struct out_buf *out_buf_new(uint32_t len)
{
	struct out_buf *ob = malloc(sizeof(*ob) + len);
	if (ob) {
		ob->next = NULL;
		ob->len = len;
		ob->charge = 0;
		ob->charge_bytes = 0;
	}
	return ob;
}

bool conn_drained_locked(const struct conn *c)
{
	return !c->inflight && !c->out_head;
}

/* Asks c's socket thread to look at it (resume reading, close). */
void conn_kick(struct conn *c)
{
	struct loop *L = c->loop;
	pthread_mutex_lock(&L->kick_lock);
	if (!c->kicked) {
		c->kicked = true;
		conn_get(c);
		c->next_kick = L->kicks;
		L->kicks = c;
	}
	pthread_mutex_unlock(&L->kick_lock);
	loop_wake(L);
}

void conn_update_events_locked(struct conn *c)
{
	if (c->dead || c->lingering)
		return;
	struct epoll_event ev = { .data.ptr = c };
	ev.events = (c->paused || c->disc ? 0 : EPOLLIN) | (c->want_out ? EPOLLOUT : 0);
	if (epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		peer_warn("%s: epoll: %s", c->peer_name, strerror(errno));
}

/* DISC or ABORT: stop reading now. Bytes the client sends after it would
 * otherwise keep the level-triggered EPOLLIN firing while the replies
 * drain, each round reading nothing (a core spun). Closed once drained:
 * here when it already is (ABORT's ACK is often written at once), else
 * by the write that drains it. Lock held. */
void conn_set_disc_locked(struct conn *c)
{
	c->disc = true;
	conn_update_events_locked(c);
	if (conn_drained_locked(c))
		conn_kick(c);
}

void conn_owe_locked(struct conn *c, uint64_t replies)
{
	c->inflight += replies;
	atomic_fetch_add(&H.unanswered, replies);
}

void conn_unowe_locked(struct conn *c, uint64_t replies)
{
	c->inflight -= replies;
	atomic_fetch_sub(&H.unanswered, replies);
}

bool conn_closing_locked(const struct conn *c)
{
	return c->disc || atomic_load(&H.stopping);
}

/* Buffer bytes a connection holds (lock held), counted in the total too. */
void conn_hold_locked(struct conn *c, uint64_t bytes)
{
	c->inflight_bytes += bytes;
	atomic_fetch_add(&H.held_total, bytes);
}

void conn_unhold_locked(struct conn *c, uint64_t bytes)
{
	c->inflight_bytes -= bytes;
	uint64_t total = atomic_fetch_sub(&H.held_total, bytes) - bytes;
	if (bytes && atomic_load(&H.total_waiters) && total < nbdd_cfg.max_buffer_total) {
		/* Others wait for this memory, on any socket thread: each looks. */
		loops_wake_waiters();
	}
}

/* Reading c again (lock held): it is no longer stopped, for any reason. */
void conn_unpause_locked(struct conn *c)
{
	c->paused = c->paused_memory = false;
	if (c->waits_total) {
		c->waits_total = false;
		atomic_fetch_sub(&H.total_waiters, 1);
	}
}

/* Takes a written or dropped buffer off the books (lock held). */
void conn_release_locked(struct conn *c, struct out_buf *ob)
{
	conn_unowe_locked(c, ob->charge);
	conn_unhold_locked(c, ob->charge_bytes);
	free(ob);
	/* Resume at half the limits, not at the first reply written. */
	if (c->paused && c->inflight <= nbdd_cfg.max_inflight / 2 &&
	    c->inflight_bytes <= c->bytes_limit / 2) {
		conn_unpause_locked(c);
		conn_kick(c);   /* bytes may wait in its input buffer */
	}
}

/* Drops every unsent buffer of a closed connection (lock held). */
void conn_drop_output_locked(struct conn *c)
{
	while (c->out_head) {
		struct out_buf *ob = c->out_head;
		c->out_head = ob->next;
		conn_release_locked(c, ob);
	}
	c->out_tail = &c->out_head;
	c->out_off = 0;
}

/* Takes the w bytes the socket took off the head of the queue (lock held). */
static void conn_written_locked(struct conn *c, size_t w)
{
	while (w) {
		struct out_buf *ob = c->out_head;
		size_t rest = ob->len - c->out_off;
		if (w < rest) {
			c->out_off += (uint32_t)w;
			return;
		}
		w -= rest;
		c->out_off = 0;
		c->out_head = ob->next;
		if (!c->out_head)
			c->out_tail = &c->out_head;
		conn_release_locked(c, ob);
	}
}

/*
 * Writes what the socket takes now (lock held; dropped around sendmsg).
 * One thread writes at a time (c->writing): another that queues replies
 * meanwhile leaves them to it, which looks at the queue again after each
 * sendmsg. Holding the lock through sendmsg made the socket thread, which
 * takes it twice per command it reads, sleep on it while a worker wrote a
 * batch of replies (a context switch each, issue 24). The writer owns the
 * queue's head: appends touch only the tail, and a close while it writes
 * leaves the buffers to it (conn_close).
 */
void conn_flush_locked(struct conn *c)
{
	if (c->writing)
		return;
	c->writing = true;
	while (c->out_head && !c->dead && !c->broken) {
		struct iovec iov[WRITE_IOVS];
		int n = 0;
		uint32_t off = c->out_off;
		for (struct out_buf *ob = c->out_head; ob && n < WRITE_IOVS; ob = ob->next) {
			iov[n].iov_base = ob->data + off;
			iov[n].iov_len = ob->len - off;
			off = 0;
			n++;
		}
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		pthread_mutex_unlock(&c->lock);
		ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		int err = errno;
		pthread_mutex_lock(&c->lock);
		if (c->dead)
			break;
		if (w < 0) {
			if (err == EINTR)
				continue;
			if (err == EAGAIN || err == EWOULDBLOCK) {
				if (!c->want_out) {
					c->want_out = true;
					c->tx_wait_ns = xseg_now_ns();
					conn_update_events_locked(c);
				}
				break;
			}
			peer_info("%s: write: %s", c->peer_name, strerror(err));
			c->broken = true;
			conn_kick(c);
			break;
		}
		if (c->want_out)
			c->tx_wait_ns = xseg_now_ns();   /* slow, not stalled */
		conn_written_locked(c, (size_t)w);
	}
	c->writing = false;
	if (c->dead) {
		conn_drop_output_locked(c);   /* closed while we wrote */
		return;
	}
	if (c->want_out && !c->out_head) {
		c->want_out = false;
		conn_update_events_locked(c);
	}
	if (conn_closing_locked(c) && conn_drained_locked(c))
		conn_kick(c);   /* everything answered: close it */
}

/* Queues ob for writing; false (ob let go) when the connection is dead. */
static bool conn_queue_locked(struct conn *c, struct out_buf *ob)
{
	if (c->dead) {
		conn_release_locked(c, ob);
		return false;
	}
	ob->next = NULL;
	*c->out_tail = ob;
	c->out_tail = &ob->next;
	return true;
}

void conn_send(struct conn *c, struct out_buf *ob)
{
	pthread_mutex_lock(&c->lock);
	if (conn_queue_locked(c, ob))
		conn_flush_locked(c);
	pthread_mutex_unlock(&c->lock);
}

static void deferred_flush(struct peer_thread *t, struct peer_work *w)
{
	(void)t;
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, flush_work));
	pthread_mutex_lock(&c->lock);
	c->flush_pending = false;
	conn_flush_locked(c);
	pthread_mutex_unlock(&c->lock);
	conn_put(c);   /* held while deferred */
}

/*
 * A reply per sendmsg woke the client once per reply (fio's kernel time was
 * mostly that wake-up). Replies a worker takes in one round are written
 * together once the round is over: the runtime runs deferred work right
 * after it. Only one write is pending per connection; replies other workers
 * queue meanwhile go with it. (A reply finished by deferred work itself, a
 * retry after an empty pool, waits for the worker's next round: up to about
 * a millisecond when nothing else comes.)
 */
void conn_send_batched(struct conn *c, struct out_buf *ob, struct peer_thread *t)
{
	bool schedule = false;
	pthread_mutex_lock(&c->lock);
	if (conn_queue_locked(c, ob)) {
		schedule = !c->flush_pending;
		c->flush_pending = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (schedule) {
		conn_get(c);
		peer_defer(t, &c->flush_work, deferred_flush);
	}
}

unsigned conn_lane(const struct conn *c)
{
	return c->loop->index;
}

void conn_get(struct conn *c)
{
	atomic_fetch_add(&c->refs, 1);
}

void conn_put(struct conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Queues bytes the socket thread makes (handshake replies, early errors);
 * they count against the connection's byte limit until written. */
void conn_send_bytes(struct conn *c, const void *data, uint32_t len, uint32_t charge)
{
	struct out_buf *ob = out_buf_new(len);
	if (!ob) {
		peer_warn("%s: out of memory for a reply: closing", c->peer_name);
		pthread_mutex_lock(&c->lock);
		c->broken = true;
		pthread_mutex_unlock(&c->lock);
		conn_kick(c);
		return;
	}
	memcpy(ob->data, data, len);
	ob->charge = charge;
	ob->charge_bytes = len;
	pthread_mutex_lock(&c->lock);
	conn_owe_locked(c, charge);
	conn_hold_locked(c, len);
	pthread_mutex_unlock(&c->lock);
	conn_send(c, ob);
}

