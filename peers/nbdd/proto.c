/*
 * The NBD wire format: see proto.h. Bytes are assembled by hand (no
 * casts of the buffer) so that unaligned input is fine and the byte order
 * is explicit.
 */
#include "proto.h"

#include <errno.h>
#include <string.h>

static uint16_t get16(const uint8_t *b) { return (uint16_t)(b[0] << 8 | b[1]); }
static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}
static uint64_t get64(const uint8_t *b) { return (uint64_t)get32(b) << 32 | get32(b + 4); }

static void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)(v >> 8); b[1] = (uint8_t)v; }
static void put32(uint8_t *b, uint32_t v)
{
	put16(b, (uint16_t)(v >> 16));
	put16(b + 2, (uint16_t)v);
}
static void put64(uint8_t *b, uint64_t v)
{
	put32(b, (uint32_t)(v >> 32));
	put32(b + 4, (uint32_t)v);
}

const char *nbd_proto_error_name(int code)
{
	switch (code) {
	case NBD_PROTO_BAD_MAGIC: return "bad magic number";
	case NBD_PROTO_BAD_FLAGS: return "unknown client flags";
	case NBD_PROTO_TOO_LONG: return "option data too long";
	case NBD_PROTO_BAD_LENGTH: return "inconsistent lengths";
	}
	return "unknown protocol error";
}

/* ---- handshake ------------------------------------------------------------ */

void nbd_encode_hello(uint8_t out[NBD_HELLO_LEN])
{
	put64(out, NBD_MAGIC);
	put64(out + 8, NBD_IHAVEOPT);
	put16(out + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
}

int nbd_decode_client_flags(const uint8_t *buf, size_t len, uint32_t *flags)
{
	if (len < NBD_CLIENT_FLAGS_LEN)
		return 0;
	*flags = get32(buf);
	/* The spec: a server that sees flags it does not know closes. */
	if (*flags & ~NBD_CLIENT_FLAGS_KNOWN)
		return NBD_PROTO_BAD_FLAGS;
	return NBD_CLIENT_FLAGS_LEN;
}

int nbd_decode_option(const uint8_t *buf, size_t len, struct nbd_option *opt)
{
	if (len < NBD_OPTION_HEADER_LEN)
		return 0;
	if (get64(buf) != NBD_IHAVEOPT)
		return NBD_PROTO_BAD_MAGIC;
	opt->option = get32(buf + 8);
	opt->length = get32(buf + 12);
	if (opt->length > NBD_OPTION_MAX_DATA)
		return NBD_PROTO_TOO_LONG;
	return NBD_OPTION_HEADER_LEN;
}

int nbd_decode_export_query(const uint8_t *data, uint32_t len, struct nbd_export_query *q)
{
	memset(q, 0, sizeof(*q));
	if (len < 4)
		return NBD_PROTO_BAD_LENGTH;
	uint32_t name_len = get32(data);
	if (name_len > NBD_NAME_MAX || name_len > len - 4 || len - 4 - name_len < 2)
		return NBD_PROTO_BAD_LENGTH;
	const uint8_t *p = data + 4 + name_len;
	uint32_t nr_infos = get16(p);
	if (len - 4 - name_len - 2 != 2 * nr_infos)
		return NBD_PROTO_BAD_LENGTH;
	q->name = data + 4;
	q->name_len = name_len;
	for (uint32_t i = 0; i < nr_infos; i++) {
		uint16_t type = get16(p + 2 + 2 * i);
		if (type == NBD_INFO_BLOCK_SIZE)
			q->want_block_size = true;
		else if (type == NBD_INFO_NAME)
			q->want_name = true;
	}
	return 0;
}

void nbd_encode_option_reply(uint8_t out[NBD_OPTION_REPLY_LEN], uint32_t option,
			     uint32_t type, uint32_t data_len)
{
	put64(out, NBD_REPLY_MAGIC_OPT);
	put32(out + 8, option);
	put32(out + 12, type);
	put32(out + 16, data_len);
}

void nbd_encode_info_export(uint8_t out[NBD_INFO_EXPORT_LEN], uint64_t size, uint16_t flags)
{
	put16(out, NBD_INFO_EXPORT);
	put64(out + 2, size);
	put16(out + 10, flags);
}

void nbd_encode_info_block_size(uint8_t out[NBD_INFO_BLOCK_SIZE_LEN], uint32_t minimum,
				uint32_t preferred, uint32_t maximum)
{
	put16(out, NBD_INFO_BLOCK_SIZE);
	put32(out + 2, minimum);
	put32(out + 6, preferred);
	put32(out + 10, maximum);
}

size_t nbd_encode_export_name_reply(uint8_t out[NBD_EXPORT_NAME_REPLY_LEN], uint64_t size,
				    uint16_t flags, bool no_zeroes)
{
	put64(out, size);
	put16(out + 8, flags);
	if (no_zeroes)
		return 10;
	memset(out + 10, 0, NBD_EXPORT_NAME_REPLY_LEN - 10);
	return NBD_EXPORT_NAME_REPLY_LEN;
}

/* ---- transmission ---------------------------------------------------------- */

int nbd_decode_request(const uint8_t *buf, size_t len, struct nbd_request *req)
{
	if (len < NBD_REQUEST_LEN)
		return 0;
	if (get32(buf) != NBD_REQUEST_MAGIC)
		return NBD_PROTO_BAD_MAGIC;
	req->flags = get16(buf + 4);
	req->type = get16(buf + 6);
	req->cookie = get64(buf + 8);
	req->offset = get64(buf + 16);
	req->length = get32(buf + 24);
	return NBD_REQUEST_LEN;
}

uint32_t nbd_check_request(const struct nbd_request *req, uint64_t export_size,
			   uint32_t max_payload)
{
	uint32_t allowed;
	bool writes;

	/* FUA is valid on every command once NBD_FLAG_SEND_FUA is announced
	 * (nbdd always does): the spec says the server MUST accept it, if only
	 * by ignoring it, as on READ, FLUSH (already a full flush) and DISC. */
	switch (req->type) {
	case NBD_CMD_READ:
		allowed = NBD_CMD_FLAG_FUA, writes = false;
		break;
	case NBD_CMD_WRITE:
		allowed = NBD_CMD_FLAG_FUA, writes = true;
		break;
	case NBD_CMD_TRIM:
		allowed = NBD_CMD_FLAG_FUA, writes = false;
		break;
	case NBD_CMD_WRITE_ZEROES:
		allowed = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE, writes = true;
		break;
	case NBD_CMD_FLUSH:
	case NBD_CMD_DISC:
		return req->flags & ~NBD_CMD_FLAG_FUA ? NBD_EINVAL : 0;
	default:
		return NBD_EINVAL;
	}
	if (req->flags & ~allowed)
		return NBD_EINVAL;
	if ((req->type == NBD_CMD_READ || req->type == NBD_CMD_WRITE) && req->length > max_payload)
		return NBD_EINVAL;
	if (req->offset > export_size || req->length > export_size - req->offset)
		return writes ? NBD_ENOSPC : NBD_EINVAL;
	return 0;
}

void nbd_encode_simple_reply(uint8_t out[NBD_SIMPLE_REPLY_LEN], uint32_t error, uint64_t cookie)
{
	put32(out, NBD_SIMPLE_REPLY_MAGIC);
	put32(out + 4, error);
	put64(out + 8, cookie);
}

uint32_t nbd_error_from_errno(int err)
{
	switch (err) {
	case 0: return 0;
	case EPERM: case EROFS: return NBD_EPERM;
	case ENOMEM: case ENOBUFS: return NBD_ENOMEM;
	case EINVAL: return NBD_EINVAL;
	case ENOSPC: case EDQUOT: return NBD_ENOSPC;
	case EOVERFLOW: return NBD_EOVERFLOW;
	case EOPNOTSUPP: return NBD_ENOTSUP;
	}
	/* ESHUTDOWN too: a peer behind nbdd that stops (cached failing what
	 * a plug parked) is not nbdd stopping, and NBD_ESHUTDOWN tells the
	 * client the server goes away and to send nothing more. nbdd's own
	 * stop answers NBD_ESHUTDOWN itself (server.c). */
	return NBD_EIO;
}

const char *nbd_cmd_name(uint16_t type)
{
	switch (type) {
	case NBD_CMD_READ: return "READ";
	case NBD_CMD_WRITE: return "WRITE";
	case NBD_CMD_DISC: return "DISC";
	case NBD_CMD_FLUSH: return "FLUSH";
	case NBD_CMD_TRIM: return "TRIM";
	case NBD_CMD_WRITE_ZEROES: return "WRITE_ZEROES";
	}
	return "unknown";
}
