/*
 * The NBD wire format (fixed newstyle handshake, simple replies), as pure
 * functions over bytes: nothing here does I/O or keeps state, so every
 * decoder can be unit-tested and fuzzed on its own. Written from the NBD
 * project's doc/proto.md. All numbers are big-endian on the wire.
 *
 * Decoders return the bytes they consumed (> 0), 0 when `len` is too short
 * to decide yet, or a negative NBD_PROTO_* code for bytes that can never be
 * valid; they never read past `len`.
 */
#ifndef NBDD_PROTO_H
#define NBDD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_MAGIC              0x4e42444d41474943ull   /* "NBDMAGIC" */
#define NBD_IHAVEOPT           0x49484156454f5054ull   /* "IHAVEOPT" */
#define NBD_REPLY_MAGIC_OPT    0x0003e889045565a9ull
#define NBD_REQUEST_MAGIC      0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u

/* Handshake flags (server) and client flags. */
#define NBD_FLAG_FIXED_NEWSTYLE  (1u << 0)
#define NBD_FLAG_NO_ZEROES       (1u << 1)
#define NBD_CLIENT_FLAGS_KNOWN   (NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES)

/* Options. */
#define NBD_OPT_EXPORT_NAME       1u
#define NBD_OPT_ABORT             2u
#define NBD_OPT_LIST              3u
#define NBD_OPT_STARTTLS          5u
#define NBD_OPT_INFO              6u
#define NBD_OPT_GO                7u
#define NBD_OPT_STRUCTURED_REPLY  8u

/* Option reply types. */
#define NBD_REP_ACK              1u
#define NBD_REP_SERVER           2u
#define NBD_REP_INFO             3u
#define NBD_REP_ERR_UNSUP        (0x80000000u + 1)
#define NBD_REP_ERR_POLICY       (0x80000000u + 2)
#define NBD_REP_ERR_INVALID      (0x80000000u + 3)
#define NBD_REP_ERR_UNKNOWN      (0x80000000u + 6)

/* Information types in NBD_REP_INFO. */
#define NBD_INFO_EXPORT       0u
#define NBD_INFO_NAME         1u
#define NBD_INFO_DESCRIPTION  2u
#define NBD_INFO_BLOCK_SIZE   3u

/* Transmission flags. */
#define NBD_FLAG_HAS_FLAGS          (1u << 0)
#define NBD_FLAG_READ_ONLY          (1u << 1)
#define NBD_FLAG_SEND_FLUSH         (1u << 2)
#define NBD_FLAG_SEND_FUA           (1u << 3)
#define NBD_FLAG_SEND_TRIM          (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES  (1u << 6)
#define NBD_FLAG_CAN_MULTI_CONN     (1u << 8)

/* Commands and their flags. */
#define NBD_CMD_READ          0u
#define NBD_CMD_WRITE         1u
#define NBD_CMD_DISC          2u
#define NBD_CMD_FLUSH         3u
#define NBD_CMD_TRIM          4u
#define NBD_CMD_WRITE_ZEROES  6u
#define NBD_CMD_FLAG_FUA      (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE  (1u << 1)

/* Errors in replies (the spec's values, which are Linux's errnos). */
#define NBD_EPERM      1u
#define NBD_EIO        5u
#define NBD_ENOMEM     12u
#define NBD_EINVAL     22u
#define NBD_ENOSPC     28u
#define NBD_EOVERFLOW  75u
#define NBD_ENOTSUP    95u
#define NBD_ESHUTDOWN  108u

/* Sizes of fixed messages. */
#define NBD_HELLO_LEN          18u   /* NBDMAGIC, IHAVEOPT, handshake flags */
#define NBD_CLIENT_FLAGS_LEN   4u
#define NBD_OPTION_HEADER_LEN  16u
#define NBD_OPTION_REPLY_LEN   20u   /* header; its data follows */
#define NBD_REQUEST_LEN        28u
#define NBD_SIMPLE_REPLY_LEN   16u
#define NBD_INFO_EXPORT_LEN    12u
#define NBD_INFO_BLOCK_SIZE_LEN 14u
#define NBD_EXPORT_NAME_REPLY_LEN 134u   /* size, flags, 124 zeroes */

/* Longest option data we take (strings are at most 4096 bytes, so a GO
 * with a full name and a few info requests fits). */
#define NBD_OPTION_MAX_DATA  8192u
#define NBD_NAME_MAX         4096u

enum nbd_proto_error {
	NBD_PROTO_BAD_MAGIC = -1,      /* not the magic number it must be */
	NBD_PROTO_BAD_FLAGS = -2,      /* client flags we do not know */
	NBD_PROTO_TOO_LONG = -3,       /* option data above NBD_OPTION_MAX_DATA */
	NBD_PROTO_BAD_LENGTH = -4,     /* lengths inside the data do not add up */
};
const char *nbd_proto_error_name(int code);

/* ---- handshake ------------------------------------------------------------ */

void nbd_encode_hello(uint8_t out[NBD_HELLO_LEN]);
/* The client's 4 flag bytes. */
int nbd_decode_client_flags(const uint8_t *buf, size_t len, uint32_t *flags);

struct nbd_option {
	uint32_t option;
	uint32_t length;     /* bytes of data that follow the header */
};
/* An option header; NBD_PROTO_TOO_LONG when its data would exceed the limit. */
int nbd_decode_option(const uint8_t *buf, size_t len, struct nbd_option *opt);

/* The data of NBD_OPT_INFO / NBD_OPT_GO: an export name (pointing into
 * `data`) and the information types asked for. */
struct nbd_export_query {
	const uint8_t *name;
	uint32_t name_len;
	bool want_block_size;
	bool want_name;
};
/* Decodes the whole option data; 0 or NBD_PROTO_BAD_LENGTH. */
int nbd_decode_export_query(const uint8_t *data, uint32_t len, struct nbd_export_query *q);

/* An option reply header for `data_len` bytes of data. */
void nbd_encode_option_reply(uint8_t out[NBD_OPTION_REPLY_LEN], uint32_t option,
			     uint32_t type, uint32_t data_len);
void nbd_encode_info_export(uint8_t out[NBD_INFO_EXPORT_LEN], uint64_t size, uint16_t flags);
void nbd_encode_info_block_size(uint8_t out[NBD_INFO_BLOCK_SIZE_LEN], uint32_t minimum,
				uint32_t preferred, uint32_t maximum);
/* The answer to NBD_OPT_EXPORT_NAME; returns its length (10 with
 * NO_ZEROES, else 134). */
size_t nbd_encode_export_name_reply(uint8_t out[NBD_EXPORT_NAME_REPLY_LEN], uint64_t size,
				    uint16_t flags, bool no_zeroes);

/* ---- transmission ---------------------------------------------------------- */

struct nbd_request {
	uint16_t flags;
	uint16_t type;
	uint64_t cookie;
	uint64_t offset;
	uint32_t length;
};
int nbd_decode_request(const uint8_t *buf, size_t len, struct nbd_request *req);

/* Bytes of payload that follow this request on the wire (WRITE only). */
static inline uint32_t nbd_request_payload(const struct nbd_request *req)
{
	return req->type == NBD_CMD_WRITE ? req->length : 0;
}

/*
 * Checks a decoded request against the export: 0 when it may be served, or
 * the NBD error to answer: EINVAL for an unknown command, a flag it does
 * not allow (FUA is allowed on every command), a READ/WRITE longer than
 * `max_payload`, a READ or TRIM beyond the end; ENOSPC for a WRITE or
 * WRITE_ZEROES beyond the end.
 */
uint32_t nbd_check_request(const struct nbd_request *req, uint64_t export_size,
			   uint32_t max_payload);

void nbd_encode_simple_reply(uint8_t out[NBD_SIMPLE_REPLY_LEN], uint32_t error,
			     uint64_t cookie);

/* The NBD error for a (positive) errno from the path (never NBD_ESHUTDOWN:
 * that one says nbdd itself stops). */
uint32_t nbd_error_from_errno(int err);
const char *nbd_cmd_name(uint16_t type);

#endif /* NBDD_PROTO_H */
