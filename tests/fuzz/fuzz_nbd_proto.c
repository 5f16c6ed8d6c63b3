/*
 * libFuzzer target: nbdd's NBD decoders on arbitrary bytes, as the socket
 * thread feeds them (a stream cut anywhere). They must never read past the
 * input, consume more than they were given, or accept an option whose
 * data is over the limit; a request they accept must survive the checks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../peers/nbdd/proto.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t flags;
	struct nbd_option opt;
	struct nbd_request req;
	struct nbd_export_query q;

	int n = nbd_decode_client_flags(data, size, &flags);
	if (n > (int)size || (n > 0 && (flags & ~NBD_CLIENT_FLAGS_KNOWN)))
		abort();
	n = nbd_decode_option(data, size, &opt);
	if (n > (int)size || (n > 0 && opt.length > NBD_OPTION_MAX_DATA))
		abort();
	if (n > 0 && size - (size_t)n >= opt.length &&
	    nbd_decode_export_query(data + n, opt.length, &q) == 0 &&
	    (q.name_len > opt.length || q.name_len > NBD_NAME_MAX ||
	     q.name < data + n || q.name + q.name_len > data + n + opt.length))
		abort();
	n = nbd_decode_request(data, size, &req);
	if (n > (int)size)
		abort();
	if (n > 0 && nbd_check_request(&req, size * 4096, 1u << 16) == 0 &&
	    req.type != NBD_CMD_FLUSH && req.type != NBD_CMD_DISC &&
	    (req.offset > size * 4096 || req.length > size * 4096 - req.offset))
		abort();
	return 0;
}
