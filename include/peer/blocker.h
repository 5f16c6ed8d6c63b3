/*
 * The blocker contract: what filed, sosd and cached agree on about object
 * names, the COPY payload and the INFO reply, written once so that a volume
 * that works on one blocker works on every other, and so that
 * tests/test_blocker_conformance.c checks the very same rules.
 *
 * Names. An object name is the request's target: targetlen bytes, not
 * NUL-terminated as far as the rules go. It is refused when it is empty,
 * holds a NUL or a '/', or starts with '.' (which covers "." and ".."):
 * EINVAL; longer than the peer's limit (at most XSEG_MAX_TARGETLEN):
 * ENAMETOOLONG. Every such name is safe as a file name under a directory
 * and as a RADOS object id.
 *
 * COPY. The target is the destination; the data holds a struct
 * xseg_request_copy whose src_len bytes of src name the source, which
 * follows the same rules. The data may end right after the name.
 *
 * INFO. The reply's data is a struct xseg_reply_info (the object's size,
 * 0 for a missing object) and serviced is its size.
 */
#ifndef PEER_BLOCKER_H
#define PEER_BLOCKER_H

#include <stddef.h>
#include <stdint.h>

#include "xseg/xseg.h"

/* The longest object name any blocker takes. */
#define BLOCKER_NAME_MAX XSEG_MAX_TARGETLEN

/* Enough room for any blocker_printable() rendering. */
#define BLOCKER_PRINTABLE_SIZE 80

/*
 * 0 when the `len` bytes at `name` may name an object on a blocker whose
 * limit is max_len (at most BLOCKER_NAME_MAX); otherwise EINVAL or
 * ENAMETOOLONG with *why a static phrase saying which ("is empty", "is too
 * long", ...), to follow the name in a log line. name may be NULL (empty).
 */
int blocker_check_name(const char *name, size_t len, size_t max_len, const char **why);

/*
 * Writes a rendering of name safe for a log line to out and returns out:
 * its first 64 bytes, each byte outside printable ASCII shown as '?', and
 * "..." when the name is longer. out holds outlen bytes (use
 * BLOCKER_PRINTABLE_SIZE); a shorter buffer shortens the rendering.
 */
char *blocker_printable(const char *name, size_t len, char *out, size_t outlen);

/*
 * Reads the COPY payload `data` (datalen bytes, as the request says): 0
 * with *src pointing at the source name inside it and *src_len its length,
 * or EINVAL (a payload shorter than its header or than src_len says, a
 * src_len over BLOCKER_NAME_MAX, a refused source name) or ENAMETOOLONG
 * (a source name over max_len), with *why a static phrase for the log
 * line. *src and *src_len are set whenever the payload holds the whole
 * name, so a refused name can be shown; otherwise *src is NULL.
 */
int blocker_copy_source(const void *data, uint64_t datalen, size_t max_len,
			const char **src, uint32_t *src_len, const char **why);

/*
 * Writes the INFO reply of an object of `size` bytes into req (held by the
 * caller) and sets serviced. A data buffer too small for the reply is
 * replaced by one large enough, keeping the target name. 0, or ENOMEM
 * when the heap has no room (the request may then have lost its buffer,
 * as after a failed xseg_prep_request: fail it, read nothing from it).
 */
int blocker_reply_info(struct xseg *seg, struct xseg_request *req, uint64_t size);

#endif /* PEER_BLOCKER_H */
