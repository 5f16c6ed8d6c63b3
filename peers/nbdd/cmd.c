/*
 * One NBD command on the worker threads. READ, WRITE, TRIM and
 * WRITE_ZEROES become requests on the export's volume of at most
 * --chunk-size bytes each, up to CHUNKS_IN_FLIGHT of them at once, sent to
 * the target port (vlmcd); the command is answered when every chunk is
 * back, with the first error if any failed. TRIM and WRITE_ZEROES write
 * zeros, so both read back as zeros whatever is behind vlmcd. FLUSH is one
 * X_FLUSH of the volume: vlmcd's barrier covers every write it has
 * acknowledged, from any connection. FUA sets XF_FUA on every chunk of a
 * WRITE, TRIM or WRITE_ZEROES; on READ and FLUSH it is ignored.
 *
 * A small command (at most DIRECT_MAX bytes, one chunk) is sent by the
 * socket thread itself (peer_send_any): handing it to a worker cost a
 * wake-up and a thread switch per command, more than the copy. Larger ones,
 * and retries after an empty pool, go to the workers (peer_post). With
 * --lanes a command's requests leave from its socket thread's lane, so
 * the socket threads share no queue behind nbdd. Replies
 * come back on a worker, which queues them on the connection; they are
 * written after its round of replies, one write for all of them
 * (conn_send_batched).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "peer/stats.h"
#include "nbdd.h"

#define CHUNKS_IN_FLIGHT 8u
/* Largest command the socket thread sends itself. */
#define DIRECT_MAX (64u << 10)

static struct cmd *cmd_of(struct peer_work *w)
{
	return (struct cmd *)((char *)w - offsetof(struct cmd, work));
}

uint64_t cmd_buffer_bytes(const struct nbd_request *req)
{
	if (req->type == NBD_CMD_READ || req->type == NBD_CMD_WRITE)
		return req->length;
	/* TRIM and WRITE_ZEROES malloc nothing, but their chunks in flight
	 * take the segment's heap like a WRITE's: counted as those, else a
	 * client pipelining large ones took the whole heap. */
	if (req->type == NBD_CMD_TRIM || req->type == NBD_CMD_WRITE_ZEROES) {
		uint64_t most = CHUNKS_IN_FLIGHT * nbdd_cfg.chunk_size;
		return req->length < most ? req->length : most;
	}
	return 0;
}

struct cmd *cmd_new(struct conn *c, const struct nbd_export *exp,
		    const struct nbd_request *req)
{
	struct cmd *cmd = calloc(1, sizeof(*cmd));
	if (!cmd)
		return NULL;
	uint32_t data = req->type == NBD_CMD_READ ? req->length : 0;
	cmd->reply = out_buf_new(NBD_SIMPLE_REPLY_LEN + data);
	if (!cmd->reply) {
		free(cmd);
		return NULL;
	}
	cmd->reply->charge = 1;
	cmd->reply->charge_bytes = cmd_buffer_bytes(req);
	if (req->type == NBD_CMD_WRITE && req->length) {
		cmd->payload = malloc(req->length);
		if (!cmd->payload) {
			free(cmd->reply);
			free(cmd);
			return NULL;
		}
	}
	cmd->conn = c;
	cmd->exp = exp;
	cmd->req = *req;
	pthread_mutex_init(&cmd->lock, NULL);
	return cmd;
}

void cmd_free(struct cmd *cmd)
{
	pthread_mutex_destroy(&cmd->lock);
	free(cmd->payload);
	free(cmd->reply);
	free(cmd);
}

/* Answers the client and lets go of the command. t: the worker it runs
 * on; NULL on the socket thread. */
static void finish(struct peer_thread *t, struct cmd *cmd)
{
	uint32_t err = nbd_error_from_errno(cmd->error);
	struct out_buf *ob = cmd->reply;
	struct conn *c = cmd->conn;

	if (err) {
		peer_info("%s of %" PRIu32 " bytes at %" PRIu64 " on %s failed: %s",
			  nbd_cmd_name(cmd->req.type), cmd->req.length, cmd->req.offset,
			  cmd->exp->name, strerror(cmd->error));
		ob->len = NBD_SIMPLE_REPLY_LEN;   /* no data after an error */
	}
	nbd_encode_simple_reply(ob->data, err, cmd->req.cookie);
	peer_stats_end(cmd->req.type == NBD_CMD_READ ? X_READ :
		       cmd->req.type == NBD_CMD_WRITE ? X_WRITE : X_FLUSH,
		       cmd->req.length, cmd->error, cmd->stats_ns);
	cmd->reply = NULL;
	cmd_free(cmd);
	if (t)
		conn_send_batched(c, ob, t);
	else
		conn_send(c, ob);
	conn_put(c);
}

/* Units to issue: bytes, or one FLUSH. */
static uint64_t span(const struct cmd *cmd)
{
	return cmd->req.type == NBD_CMD_FLUSH ? 1 : cmd->req.length;
}

static void issue(struct peer *p, struct cmd *cmd);
static void drop_hold(struct peer *p, struct peer_thread *t, struct cmd *cmd, int err);

static void retry_issue(struct peer_thread *t, struct peer_work *w)
{
	struct cmd *cmd = cmd_of(w);
	pthread_mutex_lock(&cmd->lock);
	cmd->holds++;
	pthread_mutex_unlock(&cmd->lock);
	issue(peer_of(t), cmd);
	drop_hold(peer_of(t), t, cmd, 0);
}

/*
 * Drops a hold (a chunk out, or a thread issuing), noting err. Whoever drops
 * the last one answers the command, or, when the pool or heap ran dry with
 * chunks still to send, retries later: nobody else would. t: the worker;
 * NULL on the socket thread, whose retry goes to the workers.
 */
static void drop_hold(struct peer *p, struct peer_thread *t, struct cmd *cmd, int err)
{
	bool last = false;
	pthread_mutex_lock(&cmd->lock);
	cmd->holds--;
	if (err && !cmd->error)
		cmd->error = err;
	if (!cmd->holds && !cmd->finished) {
		if (cmd->error || cmd->issued == span(cmd))
			last = cmd->finished = true;
		else if (t)
			peer_defer(t, &cmd->work, retry_issue);
		else
			peer_post(p, &cmd->work, retry_issue);
	}
	pthread_mutex_unlock(&cmd->lock);
	if (last)
		finish(t, cmd);
}

static void note_error(struct cmd *cmd, int err)
{
	pthread_mutex_lock(&cmd->lock);
	if (!cmd->error)
		cmd->error = err;
	pthread_mutex_unlock(&cmd->lock);
}

static void chunk_done(struct peer_thread *t, struct xseg_request *r, void *arg)
{
	struct cmd *cmd = arg;
	int err = 0;

	if (r->result != XR_SERVED)
		err = r->result == XR_FAILED && r->error > 0 ? r->error : EIO;
	else if (cmd->req.type != NBD_CMD_FLUSH && r->serviced != r->size)
		err = EIO;
	else if (cmd->req.type == NBD_CMD_READ)   /* chunks never overlap: no lock */
		memcpy(cmd->reply->data + NBD_SIMPLE_REPLY_LEN + (r->offset - cmd->req.offset),
		       xseg_get_data(peer_segment(peer_of(t)), r), r->size);
	peer_put_request(t, r);
	if (err)
		note_error(cmd, err);
	else
		issue(peer_of(t), cmd);   /* this chunk's hold keeps the command alive */
	drop_hold(peer_of(t), t, cmd, 0);
}

static uint32_t xseg_op_of(uint16_t type)
{
	switch (type) {
	case NBD_CMD_READ: return X_READ;
	case NBD_CMD_FLUSH: return X_FLUSH;
	}
	return X_WRITE;   /* WRITE, TRIM, WRITE_ZEROES */
}

/* Sends chunks until CHUNKS_IN_FLIGHT are out or none is left. The caller
 * holds the command. Any thread (the _any calls). */
static void issue(struct peer *p, struct cmd *cmd)
{
	struct xseg *seg = peer_segment(p);
	bool is_flush = cmd->req.type == NBD_CMD_FLUSH;
	uint64_t cap = is_flush ? 0 : cmd->req.length < nbdd_cfg.chunk_size ?
		       cmd->req.length : nbdd_cfg.chunk_size;

	for (;;) {
		pthread_mutex_lock(&cmd->lock);
		bool more = !cmd->error && cmd->issued < span(cmd) &&
			    cmd->holds <= CHUNKS_IN_FLIGHT;
		pthread_mutex_unlock(&cmd->lock);
		if (!more)
			return;
		/* Half the pool out: wait as for an empty one (the rest is the
		 * path's and the segment's other clients'). */
		struct xseg_request *r = NULL;
		if (peer_in_flight(p) < nbdd_cfg.max_path_requests)
			r = peer_get_request_lane(p, conn_lane(cmd->conn), cmd->exp->name, cap);
		else
			errno = ENOBUFS;
		if (!r) {
			/* An empty pool or heap is retried by the last hold. */
			int err = errno;
			pthread_mutex_lock(&cmd->lock);
			uint64_t deadline = cmd->deadline_ns;
			pthread_mutex_unlock(&cmd->lock);
			if ((err != ENOBUFS && err != ENOMEM) || xseg_now_ns() >= deadline) {
				static _Atomic int64_t last;
				static _Atomic uint64_t skipped;
				uint64_t quiet;
				if (peer_log_once_a_second(&last, &skipped, &quiet))
					peer_warn("export %s: no request for the path: %s (%" PRIu64
						  " more such since the last word)", cmd->exp->name,
						  strerror(err), quiet);
				note_error(cmd, err);
			}
			return;
		}
		pthread_mutex_lock(&cmd->lock);
		uint64_t start = cmd->issued;
		uint64_t len = is_flush ? 1 : span(cmd) - start < cap ? span(cmd) - start : cap;
		bool claimed = !cmd->error && start < span(cmd);
		if (claimed) {
			cmd->issued += len;
			cmd->holds++;
			/* Progress: the retry limit counts from the last chunk out. */
			cmd->deadline_ns = xseg_now_ns() + nbdd_cfg.retry_limit_ns;
		}
		pthread_mutex_unlock(&cmd->lock);
		if (!claimed) {
			peer_put_request_any(p, r);
			return;
		}
		r->op = xseg_op_of(cmd->req.type);
		/* XF_FUA is a write's ("durable before answered"): not on a
		 * READ, and a FLUSH is durable anyway. */
		r->flags = r->op == X_WRITE && (cmd->req.flags & NBD_CMD_FLAG_FUA) ? XF_FUA : 0;
		r->offset = is_flush ? 0 : cmd->req.offset + start;
		r->size = is_flush ? 0 : len;
		if (cmd->req.type == NBD_CMD_WRITE)
			memcpy(xseg_get_data(seg, r), cmd->payload + start, len);
		else if (r->op == X_WRITE)
			memset(xseg_get_data(seg, r), 0, len);
		int rc = peer_send_any(p, r, (uint32_t)nbdd_cfg.target_port, chunk_done, cmd);
		if (rc < 0) {
			/* Every command fails so while the target is gone (a
			 * vlmcd restarting): a line each flooded the log. */
			static _Atomic int64_t last;
			static _Atomic uint64_t skipped;
			uint64_t quiet;
			if (peer_log_once_a_second(&last, &skipped, &quiet))
				peer_warn("export %s: cannot send to target port %" PRIu64 ": %s (%"
					  PRIu64 " more such since the last word)", cmd->exp->name,
					  nbdd_cfg.target_port, xseg_last_error(), quiet);
			peer_put_request_any(p, r);
			/* Not the last hold: the caller's issuing hold remains. */
			note_error(cmd, rc == -ENOENT ? EHOSTUNREACH : -rc);
			pthread_mutex_lock(&cmd->lock);
			cmd->holds--;
			pthread_mutex_unlock(&cmd->lock);
			return;
		}
	}
}

/* Issues cmd under the caller's hold, then drops it. t: as drop_hold. */
static void start_on(struct peer *p, struct peer_thread *t, struct cmd *cmd)
{
	pthread_mutex_lock(&cmd->lock);
	cmd->deadline_ns = xseg_now_ns() + nbdd_cfg.retry_limit_ns;
	cmd->holds++;   /* the issuer's hold */
	pthread_mutex_unlock(&cmd->lock);
	issue(p, cmd);
	drop_hold(p, t, cmd, 0);
}

static void start(struct peer_thread *t, struct peer_work *w)
{
	start_on(peer_of(t), t, cmd_of(w));
}

void cmd_post(struct peer *p, struct cmd *cmd)
{
	/* NBD commands are what nbdd serves: the runtime's figures count them */
	cmd->stats_ns = peer_stats_begin();
	if (cmd->req.length <= DIRECT_MAX)
		start_on(p, NULL, cmd);
	else
		peer_post(p, &cmd->work, start);
}
