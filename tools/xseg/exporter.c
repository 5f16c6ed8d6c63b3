#define _GNU_SOURCE   /* ppoll, accept4 */
/*
 * xseg exporter; see exporter.h. One thread, one connection at a time:
 * a scrape asks every port at once (round.c, 2 s at most), and a client
 * that sends nothing, or a bad request, costs at most IO_TIMEOUT_S before
 * the next one is taken. Any fault of a client closes its connection only.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "peer/addr.h"
#include "exporter.h"
#include "prometheus.h"
#include "round.h"

#define REQUEST_MAX 8192
#define IO_TIMEOUT_S 5

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int exporter_check_listen(const char *listen, const char **why)
{
	struct net_addr a;
	return addr_parse_endpoint(listen, false, &a, why);
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n <= 0)
			return;   /* the client left or stalled past IO_TIMEOUT_S */
		buf += n;
		len -= (size_t)n;
	}
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, type, len);
	send_all(fd, head, (size_t)n);
	send_all(fd, body, len);
}

static void reply_text(int fd, const char *status, const char *text)
{
	reply(fd, status, "text/plain; charset=utf-8", text, strlen(text));
}

static void serve_metrics(int fd, struct xseg *seg, bool all, uint32_t port)
{
	struct stats_round r;
	char *body = NULL;
	size_t len = 0;
	if (stats_collect(seg, all, port, &r) < 0) {
		reply_text(fd, "500 Internal Server Error", "the segment could not be asked\n");
		return;
	}
	FILE *out = open_memstream(&body, &len);
	if (out) {
		prometheus_write(out, &r);
		fclose(out);
	}
	stats_round_free(&r);
	if (!out || !body)
		reply_text(fd, "500 Internal Server Error", "out of memory\n");
	else
		reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
	free(body);
}

/* Reads the request head (up to the blank line); its length, or -1. The
 * whole head within IO_TIMEOUT_S: SO_RCVTIMEO bounds each recv only, and a
 * client trickling a byte a second held the (one-at-a-time) exporter. */
static ssize_t read_head(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	uint64_t deadline = xseg_now_ns() + (uint64_t)IO_TIMEOUT_S * 1000000000ull;
	while (len < cap - 1) {
		uint64_t now = xseg_now_ns();
		if (now >= deadline)
			return -1;
		uint64_t left_us = (deadline - now) / 1000;
		struct timeval tv = { (time_t)(left_us / 1000000), (suseconds_t)(left_us % 1000000) };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
		if (n <= 0)
			return len ? (ssize_t)len : -1;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return (ssize_t)len;
	}
	return -1;   /* a head over REQUEST_MAX */
}

static void serve_client(int fd, struct xseg *seg, bool all, uint32_t port)
{
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	char *buf = malloc(REQUEST_MAX);
	ssize_t len = buf ? read_head(fd, buf, REQUEST_MAX) : -1;
	char method[16], path[256], version[16];
	if (len < 0 || sscanf(buf, "%15s %255s %15s", method, path, version) != 3 ||
	    strncmp(version, "HTTP/", 5)) {
		reply_text(fd, "400 Bad Request", "expected: GET /metrics HTTP/1.1\n");
	} else if (strcmp(method, "GET")) {
		reply_text(fd, "405 Method Not Allowed", "only GET\n");
	} else if (!strcmp(path, "/metrics") || !strncmp(path, "/metrics?", 9)) {
		serve_metrics(fd, seg, all, port);
	} else if (!strcmp(path, "/")) {
		reply_text(fd, "200 OK", "xseg exporter: the figures are at /metrics\n");
	} else {
		reply_text(fd, "404 Not Found", "not found: try /metrics\n");
	}
	free(buf);
}

static int listen_on(const char *listen_addr)
{
	struct net_addr a;
	const char *why = "";
	if (addr_parse_endpoint(listen_addr, false, &a, &why) < 0) {
		fprintf(stderr, "xseg: exporter: --listen: '%s' %s\n", listen_addr, why);
		return -1;
	}
	int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 16) < 0) {
		fprintf(stderr, "xseg: exporter: cannot listen on %s: %s\n", listen_addr,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int exporter_run(struct xseg *seg, const char *listen_addr, bool all, uint32_t port)
{
	/* TERM and INT are blocked but while waiting for a client: a scrape
	 * under way ends first, then the exporter exits 0. */
	sigset_t block, waiting;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &waiting);
	sigdelset(&waiting, SIGTERM);
	sigdelset(&waiting, SIGINT);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int lfd = listen_on(listen_addr);
	if (lfd < 0)
		return 1;
	fprintf(stderr, "xseg exporter: serving http://%s/metrics\n", listen_addr);
	while (!stop) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int n = ppoll(&pfd, 1, NULL, &waiting);
		if (n <= 0)
			continue;   /* EINTR: a signal; stop is looked at */
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				sleep(1);   /* the client waits in the backlog */
			continue;
		}
		serve_client(fd, seg, all, port);
		close(fd);
	}
	close(lfd);
	return 0;
}
