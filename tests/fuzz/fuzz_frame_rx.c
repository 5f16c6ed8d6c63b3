/*
 * libFuzzer target: synapsed's incoming-frame state machine (rx.c), the
 * code every connection's bytes go through, driven the way net.c drives
 * it: a byte stream arrives in chunks split where the fuzzer says, is read
 * where rx_space says (into the buffer, or straight into a body), bodies
 * are taken only while a budget allows (RX_WAIT otherwise, released at
 * fuzzer-chosen points), and a body over the budget drops the connection.
 *
 * Input: [budget byte][number of cut bytes k][k cut bytes][stream]. A cut
 * byte's low 7 bits are how many more stream bytes arrive (times a scale
 * from the budget byte); its high bit releases the budget held by the
 * bodies read so far once that chunk was read.
 *
 * Checked against a straight parse of the whole stream: bodies arrive in
 * order with exactly the stream's bytes and the headers decoded there; a
 * header that waited is offered again unchanged; the budget is never
 * overrun; nothing is read past a buffer (ASan); and once all is delivered
 * and released, the machine has taken every complete frame and ends where
 * the stream does (a bad header, a dropped one, or mid-frame).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Small buffers: inputs of a few KiB reach the buffer's end, its
 * compaction and the reads straight into a body. */
#define RX_BUF_SIZE 256u
#define RX_DIRECT   48u
#include "../../peers/synapsed/wire.c"
#include "../../peers/synapsed/rx.c"

#define MAX_FRAMES 4096

/* The stream parsed in one go: what rx must find. */
struct expected {
	size_t nr;                      /* complete frames */
	size_t body_at[MAX_FRAMES];     /* offset of each body in the stream */
	struct wire_header h[MAX_FRAMES];
	int64_t end;                    /* 0: stream ends (maybe mid-frame); <0: bad header; 1: dropped */
	size_t end_at;                  /* offset where parsing stopped */
};

struct sim {
	const uint8_t *stream;
	size_t len;
	const struct expected *want;
	size_t budget, held;            /* bytes of bodies held, not released */
	size_t frames;                  /* bodies completed */
	bool waited;                    /* the last header call said RX_WAIT */
	struct wire_header waited_h;
	uint8_t *body;                  /* the body being read */
	size_t body_len;
};

/* Field by field: the struct has padding. */
static bool same(const struct wire_header *a, const struct wire_header *b)
{
	return a->kind == b->kind && a->result == b->result && a->op == b->op &&
	       a->flags == b->flags && a->id == b->id && a->offset == b->offset &&
	       a->size == b->size && a->serviced == b->serviced && a->error == b->error &&
	       a->target_len == b->target_len && a->data_len == b->data_len;
}

static void parse_all(const uint8_t *s, size_t len, size_t budget, struct expected *e)
{
	size_t at = 0;
	e->nr = 0;
	e->end = 0;
	for (;;) {
		e->end_at = at;
		struct wire_header h;
		int64_t n = wire_decode_header(s + at, len - at, &h);
		if (n == WIRE_NEED_MORE)
			return;
		if (n < 0) {
			e->end = n;
			return;
		}
		if ((size_t)(h.target_len + h.data_len) > budget) {
			e->end = 1;
			return;
		}
		if ((uint64_t)(len - at) < (uint64_t)n || e->nr == MAX_FRAMES)
			return;
		e->h[e->nr] = h;
		e->body_at[e->nr] = at + WIRE_HEADER_LEN;
		e->nr++;
		at += (size_t)n;
	}
}

static int on_header(void *ctx, const struct wire_header *h, uint8_t **body)
{
	struct sim *s = ctx;
	size_t need = h->target_len + h->data_len;

	if (s->waited && !same(h, &s->waited_h))
		abort();   /* a waiting header must come back unchanged */
	s->waited = false;
	if (need > s->budget)
		return RX_DROP;
	if (s->held + need > s->budget) {
		s->waited = true;
		s->waited_h = *h;
		return RX_WAIT;
	}
	if (s->frames >= MAX_FRAMES)
		return RX_DROP;
	if (s->frames < s->want->nr && !same(h, &s->want->h[s->frames]))
		abort();
	s->body = malloc(need ? need : 1);
	if (!s->body)
		abort();
	s->body_len = need;
	s->held += need;
	*body = s->body;
	return RX_TAKE;
}

static void on_body(void *ctx, const struct wire_header *h, uint8_t *body)
{
	struct sim *s = ctx;
	if (s->frames >= s->want->nr || body != s->body)
		abort();   /* a body the stream does not complete */
	if (!same(h, &s->want->h[s->frames]) ||
	    memcmp(body, s->stream + s->want->body_at[s->frames], s->body_len) != 0)
		abort();
	free(body);
	s->body = NULL;
	s->frames++;
}

static const struct rx_ops ops = { .header = on_header, .body_done = on_body };

/* Reads what has arrived (stream[*read..avail)) like net.c's conn_read:
 * false once the connection is gone (bad header or dropped). */
static bool drive(struct rx *r, struct sim *s, size_t *read, size_t avail, int *status,
		  int64_t *bad)
{
	for (;;) {
		*status = rx_dispatch(r, &ops, s, bad);
		if (*status == RX_GONE || *status == RX_BAD)
			return false;
		if (*status == RX_WAITING || *read == avail)
			return true;
		uint8_t *dst;
		size_t room;
		bool direct = rx_space(r, &dst, &room);
		if (room == 0)
			abort();   /* RX_MORE with nowhere to read: a stall */
		size_t n = avail - *read < room ? avail - *read : room;
		memcpy(dst, s->stream + *read, n);
		*read += n;
		rx_advance(r, n, direct, &ops, s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[RX_BUF_SIZE];
	static struct expected want;
	if (size < 2)
		return 0;
	/* budgets from 0 to 2016 bytes: small enough to wait often */
	size_t budget = (size_t)(data[0] & 0x3f) << 5;
	size_t scale = (size_t)1 << (data[0] >> 6) * 2;   /* chunk units of 1, 4, 16, 64 bytes */
	size_t k = data[1];
	if (size < 2 + k)
		return 0;
	const uint8_t *cuts = data + 2;
	struct sim s = { .stream = data + 2 + k, .len = size - 2 - k, .want = &want,
			 .budget = budget };
	parse_all(s.stream, s.len, budget, &want);
	if (want.nr == MAX_FRAMES)
		return 0;

	struct rx r;
	rx_init(&r, buf);
	size_t avail = 0, read = 0;
	int status = RX_MORE;
	int64_t bad = 0;
	bool open = true;
	for (size_t i = 0; open && avail < s.len; i++) {
		uint8_t cut = k ? cuts[i % k] : 0x7f;
		size_t chunk = ((size_t)(cut & 0x7f) + 1) * scale;
		avail = s.len - avail < chunk ? s.len : avail + chunk;
		open = drive(&r, &s, &read, avail, &status, &bad);
		if (open && (cut & 0x80)) {
			s.held = 0;   /* the replies went out */
			open = drive(&r, &s, &read, avail, &status, &bad);
		}
	}
	/* everything delivered: release all and let it finish */
	while (open) {
		size_t before = s.frames;
		s.held = 0;
		open = drive(&r, &s, &read, avail, &status, &bad);
		if (status != RX_WAITING || s.frames == before)
			break;
	}
	if (open && status == RX_WAITING)
		abort();   /* with the whole budget free a header still waits */
	if (s.frames != want.nr)
		abort();
	if (want.end < 0 && (status != RX_BAD || bad != want.end))
		abort();
	if (want.end == 1 && status != RX_GONE)
		abort();
	if (want.end == 0 && (!open || rx_mid_frame(&r) != (want.end_at < s.len)))
		abort();
	if (r.in_body)
		free(r.body);
	return 0;
}
