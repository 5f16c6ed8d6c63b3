/*
 * Network addresses for the peers' options (nbdd's and synapsed's --listen,
 * synapsed's --remote and --allow): "ADDR:PORT" (a dotted-quad IPv4
 * address, "[IPv6]:PORT", or a host name where resolving is asked for) and
 * a bare numeric "ADDR".
 */
#ifndef PEER_ADDR_H
#define PEER_ADDR_H

#include <stdbool.h>
#include <sys/socket.h>

#define ADDR_TEXT_MAX 64

struct net_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	char text[ADDR_TEXT_MAX];   /* for log lines */
};

/* Parses "ADDR:PORT", the port 1..65535 in digits. Returns 0, or -1 with a
 * reason in *why. Host names are resolved (first IPv4/IPv6 answer) only
 * when `resolve` is set; otherwise an IPv4 address must be a full dotted
 * quad and an IPv6 one stand in brackets. */
int addr_parse_endpoint(const char *s, bool resolve, struct net_addr *out, const char **why);

/* Parses a numeric address without a port (--allow). */
int addr_parse_host(const char *s, struct net_addr *out, const char **why);

/* True when sa is the host of `allowed` (ports ignored; IPv4-mapped IPv6
 * peers match their IPv4 address). */
bool addr_host_matches(const struct sockaddr *sa, const struct net_addr *allowed);

/* "1.2.3.4:5" or "[::1]:5". */
void addr_format(const struct sockaddr *sa, char *buf, size_t len);

#endif
