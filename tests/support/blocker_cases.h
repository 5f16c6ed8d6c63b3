/*
 * The cases of the blocker contract (include/peer/blocker.h) that the
 * tests send to real peers: names every blocker, and cached in front of
 * one, must refuse. test_peers_blocker checks each against
 * blocker_check_name, so the table and the header cannot drift apart.
 */
#ifndef TEST_BLOCKER_CASES_H
#define TEST_BLOCKER_CASES_H

#include <stddef.h>
#include <stdint.h>

struct blocker_bad_name {
	const char *name;
	uint32_t len;       /* 0: strlen(name); else raw bytes (may hold NULs) */
	int error;          /* what the peer answers */
	const char *what;
};

extern const struct blocker_bad_name blocker_bad_names[];
extern const size_t blocker_bad_names_count;

/* Fills a COPY payload naming src, and returns its length: the header and
 * the name only (the short form every peer must take). */
size_t blocker_copy_payload(void *buf, size_t buflen, const char *src, uint32_t src_len);

#endif
