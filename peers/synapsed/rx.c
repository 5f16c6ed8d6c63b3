/* Frames out of a byte stream; see rx.h. */
#include <string.h>

#include "rx.h"

void rx_init(struct rx *r, uint8_t *buf)
{
	memset(r, 0, sizeof(*r));
	r->buf = buf;
}

int rx_dispatch(struct rx *r, const struct rx_ops *ops, void *ctx, int64_t *bad)
{
	for (;;) {
		if (!r->in_body) {
			struct wire_header h;
			int64_t n = wire_decode_header(r->buf + r->pos, r->len - r->pos, &h);
			if (n == WIRE_NEED_MORE)
				return RX_MORE;
			if (n < 0) {
				*bad = n;
				return RX_BAD;
			}
			uint8_t *body = NULL;
			int take = ops->header(ctx, &h, &body);
			if (take == RX_WAIT)
				return RX_WAITING;   /* the header stays in buf */
			if (take != RX_TAKE)
				return RX_GONE;
			r->pos += WIRE_HEADER_LEN;
			r->h = h;
			r->body = body;
			r->body_len = h.target_len + h.data_len;
			r->body_got = 0;
			r->in_body = true;
		}
		size_t n = r->len - r->pos, need = r->body_len - r->body_got;
		if (n > need)
			n = need;
		if (n)
			memcpy(r->body + r->body_got, r->buf + r->pos, n);
		r->body_got += n;
		r->pos += n;
		if (r->body_got < r->body_len)
			return RX_MORE;
		r->in_body = false;
		ops->body_done(ctx, &r->h, r->body);
		r->body = NULL;
	}
}

bool rx_space(struct rx *r, uint8_t **dst, size_t *room)
{
	/* keep the unread tail at the front */
	if (r->pos) {
		memmove(r->buf, r->buf + r->pos, r->len - r->pos);
		r->len -= r->pos;
		r->pos = 0;
	}
	if (r->in_body && r->body_len - r->body_got >= RX_DIRECT) {
		*dst = r->body + r->body_got;
		*room = r->body_len - r->body_got;
		return true;
	}
	*dst = r->buf + r->len;
	*room = RX_BUF_SIZE - r->len;
	return false;
}

void rx_advance(struct rx *r, size_t n, bool direct, const struct rx_ops *ops, void *ctx)
{
	if (!direct) {
		r->len += n;
		return;
	}
	r->body_got += n;
	if (r->body_got == r->body_len) {
		r->in_body = false;
		ops->body_done(ctx, &r->h, r->body);
		r->body = NULL;
	}
}

bool rx_mid_frame(const struct rx *r)
{
	return r->in_body || r->len > r->pos;
}
