/*
 * Reassembling frames from a connection's byte stream: the part of reading
 * that touches no socket, lock or clock, so that it can be fuzzed on its
 * own (tests/fuzz/fuzz_frame_rx.c feeds it arbitrary chunks).
 *
 * Bytes read sit in `buf`. A header is decoded there (wire.c) and handed
 * to ops->header, which either gives a buffer for the body (RX_TAKE), or
 * asks to wait (RX_WAIT: the header stays in `buf`, nothing is consumed,
 * and it is offered again on the next rx_dispatch), or has dropped the
 * connection (RX_DROP). The body is copied out of `buf`, or read straight
 * into its buffer when much of it is still to come.
 */
#ifndef SYNAPSED_RX_H
#define SYNAPSED_RX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* (The fuzzer shrinks both to reach every path with short inputs.) */
#ifndef RX_BUF_SIZE
#define RX_BUF_SIZE   (256u * 1024)
#endif
/* A body with this much still to come is read straight into its buffer. */
#ifndef RX_DIRECT
#define RX_DIRECT     (32u * 1024)
#endif

enum rx_take { RX_TAKE = 1, RX_WAIT = 0, RX_DROP = -1 };

struct rx_ops {
	/* A valid header: RX_TAKE with *body set (any non-NULL pointer for an
	 * empty body), RX_WAIT, or RX_DROP. */
	int (*header)(void *ctx, const struct wire_header *h, uint8_t **body);
	/* The body handed out for h is complete. */
	void (*body_done)(void *ctx, const struct wire_header *h, uint8_t *body);
};

struct rx {
	uint8_t *buf;          /* RX_BUF_SIZE bytes, owned by the caller */
	size_t len, pos;       /* buf[pos..len): read, not consumed yet */
	bool in_body;
	struct wire_header h;  /* the frame whose body is being read */
	uint8_t *body;
	size_t body_len, body_got;
};

enum rx_status {
	RX_MORE = 0,           /* read more bytes (rx_space) */
	RX_WAITING = 1,        /* ops->header said RX_WAIT */
	RX_GONE = -1,          /* ops->header said RX_DROP */
	RX_BAD = -2,           /* a header broke a rule: *bad is the wire_error */
};

/* Starts reading a new stream into buf (RX_BUF_SIZE bytes). */
void rx_init(struct rx *r, uint8_t *buf);

/* Consumes the frames buffered, calling ops; returns an rx_status. */
int rx_dispatch(struct rx *r, const struct rx_ops *ops, void *ctx, int64_t *bad);

/* Where the next read goes and how much fits (never 0 after rx_dispatch
 * returned RX_MORE); true when it is straight into the body. */
bool rx_space(struct rx *r, uint8_t **dst, size_t *room);

/* n bytes were read where rx_space said; a body read straight in and now
 * complete goes to ops->body_done. */
void rx_advance(struct rx *r, size_t n, bool direct, const struct rx_ops *ops, void *ctx);

/* Part of a frame is in: a header started, or a body not complete. */
bool rx_mid_frame(const struct rx *r);

#endif
