/*
 * The handshake's options (fixed newstyle): EXPORT_NAME, ABORT, LIST, INFO
 * and GO answered, any other refused as unsupported (simple replies only).
 * The option replies are queued like any reply (conn.c) and count against
 * the connection's limits until written. The exports come through the
 * layer above (struct server_ops), never by name.
 */
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "handshake.h"
#include "nbdd.h"

static void option_reply(struct conn *c, uint32_t option, uint32_t type, const void *data,
			 uint32_t len)
{
	uint8_t buf[NBD_OPTION_REPLY_LEN + 64];
	if (len > sizeof(buf) - NBD_OPTION_REPLY_LEN)
		len = 0;   /* never: our replies are small */
	nbd_encode_option_reply(buf, option, type, len);
	if (len)
		memcpy(buf + NBD_OPTION_REPLY_LEN, data, len);
	conn_send_bytes(c, buf, NBD_OPTION_REPLY_LEN + len, 0);
}

static void list_exports(struct conn *c)
{
	for (unsigned i = 0; i < nbdd_cfg.nr_exports; i++) {
		const struct nbd_export *e = &nbdd_cfg.exports[i];
		uint32_t len = 4 + e->name_len;
		uint8_t *buf = malloc(NBD_OPTION_REPLY_LEN + len);
		if (!buf)
			break;
		nbd_encode_option_reply(buf, NBD_OPT_LIST, NBD_REP_SERVER, len);
		uint8_t *p = buf + NBD_OPTION_REPLY_LEN;
		p[0] = (uint8_t)(e->name_len >> 24), p[1] = (uint8_t)(e->name_len >> 16);
		p[2] = (uint8_t)(e->name_len >> 8), p[3] = (uint8_t)e->name_len;
		memcpy(p + 4, e->name, e->name_len);
		conn_send_bytes(c, buf, NBD_OPTION_REPLY_LEN + len, 0);
		free(buf);
	}
	option_reply(c, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
}

/* An empty name asks for the default export: the first one. */
static const struct nbd_export *lookup(const struct server_ops *up, const uint8_t *name,
				       uint32_t len)
{
	if (!len)
		return nbdd_cfg.nr_exports ? &nbdd_cfg.exports[0] : NULL;
	return up->find_export(name, len);
}

static void start_transmission(struct conn *c, const struct nbd_export *e)
{
	c->exp = e;
	c->phase = PH_TRANSMISSION;
	pthread_mutex_lock(&c->lock);
	c->bytes_limit = nbdd_cfg.max_client_buffer;
	pthread_mutex_unlock(&c->lock);
	peer_info("%s: serving export %s", c->peer_name, e->name);
}

static void info_or_go(struct conn *c, const struct server_ops *up, uint32_t option,
		       const uint8_t *data, uint32_t len)
{
	struct nbd_export_query q;
	if (nbd_decode_export_query(data, len, &q) < 0) {
		option_reply(c, option, NBD_REP_ERR_INVALID, NULL, 0);
		return;
	}
	const struct nbd_export *e = lookup(up, q.name, q.name_len);
	if (!e) {
		peer_info("%s: unknown export '%.*s'", c->peer_name, (int)(q.name_len > 64 ? 64 : q.name_len),
			  (const char *)q.name);
		option_reply(c, option, NBD_REP_ERR_UNKNOWN, NULL, 0);
		return;
	}
	uint8_t info[NBD_INFO_BLOCK_SIZE_LEN];
	nbd_encode_info_export(info, e->size, up->transmission_flags());
	option_reply(c, option, NBD_REP_INFO, info, NBD_INFO_EXPORT_LEN);
	/* Any alignment works (vlmcd takes byte ranges); the maximum bounds
	 * READ and WRITE. Sent even when not asked: clients ignore it then. */
	nbd_encode_info_block_size(info, 1, 4096, (uint32_t)nbdd_cfg.max_request);
	option_reply(c, option, NBD_REP_INFO, info, NBD_INFO_BLOCK_SIZE_LEN);
	option_reply(c, option, NBD_REP_ACK, NULL, 0);
	if (option == NBD_OPT_GO)
		start_transmission(c, e);
}

bool handshake_option(struct conn *c, const struct server_ops *up, const struct nbd_option *opt,
		      const uint8_t *data)
{
	switch (opt->option) {
	case NBD_OPT_EXPORT_NAME: {
		const struct nbd_export *e = lookup(up, data, opt->length);
		if (!e)
			return false;   /* the spec: no error reply to this option */
		uint8_t buf[NBD_EXPORT_NAME_REPLY_LEN];
		size_t n = nbd_encode_export_name_reply(buf, e->size, up->transmission_flags(),
							c->client_flags & NBD_FLAG_NO_ZEROES);
		conn_send_bytes(c, buf, (uint32_t)n, 0);
		start_transmission(c, e);
		return true;
	}
	case NBD_OPT_ABORT:
		option_reply(c, opt->option, NBD_REP_ACK, NULL, 0);
		pthread_mutex_lock(&c->lock);
		conn_set_disc_locked(c);
		pthread_mutex_unlock(&c->lock);
		return true;
	case NBD_OPT_LIST:
		if (opt->length)
			option_reply(c, opt->option, NBD_REP_ERR_INVALID, NULL, 0);
		else
			list_exports(c);
		return true;
	case NBD_OPT_INFO:
	case NBD_OPT_GO:
		info_or_go(c, up, opt->option, data, opt->length);
		return true;
	}
	/* STARTTLS, STRUCTURED_REPLY, meta contexts, ...: simple replies only. */
	option_reply(c, opt->option, NBD_REP_ERR_UNSUP, NULL, 0);
	return true;
}
