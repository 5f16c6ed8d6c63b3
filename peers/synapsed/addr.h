/*
 * Network addresses for synapsed's options: "ADDR:PORT" (IPv4, a host name,
 * or "[IPv6]:PORT") and bare "ADDR" for --allow.
 */
#ifndef SYNAPSED_ADDR_H
#define SYNAPSED_ADDR_H

#include <stdbool.h>
#include <sys/socket.h>

#define ADDR_TEXT_MAX 64

struct net_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	char text[ADDR_TEXT_MAX];   /* for log lines */
};

/* Parses "ADDR:PORT". Returns 0, or -1 with a reason in *why. Host names
 * are resolved (first IPv4/IPv6 answer) only when `resolve` is set. */
int addr_parse_endpoint(const char *s, bool resolve, struct net_addr *out, const char **why);

/* Parses a numeric address without a port (--allow). */
int addr_parse_host(const char *s, struct net_addr *out, const char **why);

/* True when sa is the host of `allowed` (ports ignored; IPv4-mapped IPv6
 * peers match their IPv4 address). */
bool addr_host_matches(const struct sockaddr *sa, const struct net_addr *allowed);

/* "1.2.3.4:5" or "[::1]:5". */
void addr_format(const struct sockaddr *sa, char *buf, size_t len);

#endif
