/* Parsing and matching of the peers' network addresses; see peer/addr.h. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/addr.h"

/* Splits "host:port" / "[v6]:port" into host and port strings. */
static int split(const char *s, char *host, size_t hostlen, const char **port)
{
	const char *colon;
	size_t n;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end || end[1] != ':')
			return -1;
		n = (size_t)(end - s - 1);
		if (n >= hostlen)
			return -1;
		memcpy(host, s + 1, n);
		host[n] = '\0';
		*port = end + 2;
		return 0;
	}
	colon = strrchr(s, ':');
	if (!colon || strchr(s, ':') != colon)
		return -1;
	n = (size_t)(colon - s);
	if (n == 0 || n >= hostlen)
		return -1;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = colon + 1;
	return 0;
}

static int lookup(const char *host, const char *port, int flags, struct net_addr *out,
		  const char **why)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = flags }, *res;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		*why = rc == EAI_NONAME ? "is not an address (or an unknown host)" : gai_strerror(rc);
		return -1;
	}
	memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
	out->len = res->ai_addrlen;
	freeaddrinfo(res);
	addr_format((struct sockaddr *)&out->ss, out->text, sizeof(out->text));
	return 0;
}

int addr_parse_endpoint(const char *s, bool resolve, struct net_addr *out, const char **why)
{
	char host[256];
	const char *port;

	memset(out, 0, sizeof(*out));
	if (split(s, host, sizeof(host), &port) < 0) {
		*why = "is not ADDR:PORT (IPv6 as [ADDR]:PORT)";
		return -1;
	}
	/* digits only: strtoul takes "+80" and " 80", getaddrinfo 99999 as 34463 */
	size_t pl = strlen(port);
	unsigned long p = pl && pl <= 5 && strspn(port, "0123456789") == pl ?
			  strtoul(port, NULL, 10) : 0;
	if (p == 0 || p > 65535) {
		*why = "has no port in 1..65535";
		return -1;
	}
	bool bracketed = s[0] == '[';
	if (bracketed && !strchr(host, ':')) {
		*why = "has an IPv4 address in brackets (brackets are for IPv6)";
		return -1;
	}
	/* getaddrinfo takes "1.2.3" as 1.2.0.3: a numeric IPv4 address must be
	 * a full dotted quad */
	struct in_addr v4;
	if (!resolve && !bracketed && inet_pton(AF_INET, host, &v4) != 1) {
		*why = "is not a numeric address (dotted-quad IPv4, or [IPv6]; host names "
		       "are not resolved here)";
		return -1;
	}
	return lookup(host, port, AI_NUMERICSERV | (resolve ? 0 : AI_NUMERICHOST), out, why);
}

int addr_parse_host(const char *s, struct net_addr *out, const char **why)
{
	memset(out, 0, sizeof(*out));
	if (!*s || strlen(s) > 255) {
		*why = "is not a numeric IPv4 or IPv6 address";
		return -1;
	}
	if (lookup(s, "0", AI_NUMERICHOST | AI_NUMERICSERV, out, why) < 0) {
		*why = "is not a numeric IPv4 or IPv6 address";
		return -1;
	}
	return 0;
}

/* The IPv4 address inside sa (also an IPv4-mapped IPv6 one); false if none. */
static bool ipv4_of(const struct sockaddr *sa, struct in_addr *out)
{
	if (sa->sa_family == AF_INET) {
		*out = ((const struct sockaddr_in *)sa)->sin_addr;
		return true;
	}
	const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(a6)) {
		memcpy(out, &a6->s6_addr[12], 4);
		return true;
	}
	return false;
}

bool addr_host_matches(const struct sockaddr *sa, const struct net_addr *allowed)
{
	const struct sockaddr *al = (const struct sockaddr *)&allowed->ss;
	struct in_addr a4, b4;

	if (ipv4_of(sa, &a4) && ipv4_of(al, &b4))
		return a4.s_addr == b4.s_addr;
	if (sa->sa_family == AF_INET6 && al->sa_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
			       &((const struct sockaddr_in6 *)al)->sin6_addr, sizeof(struct in6_addr));
	return false;
}

void addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		snprintf(buf, len, "(family %d)", sa->sa_family);
	}
}
