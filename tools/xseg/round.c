/* A round of "stats" answers; see round.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "round.h"

/* Room for an answer: the runtime's figures, latency buckets, cached's. */
#define REPLY_MAX (64u * 1024)
/* One port: a busy peer gets time. Every port: a client's port never
 * answers (it takes no requests), so no longer than this for all. */
#define ONE_PORT_TIMEOUT_MS 10000u
#define ALL_PORTS_TIMEOUT_MS 2000u

/* Programs of this project that bind ports as clients: never asked. */
static bool is_client(pid_t pid)
{
	static const char *const clients[] = { "xseg", "bench-xseg", "ipc-bench", "xreq" };
	char path[64], comm[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	if (fgets(comm, sizeof(comm), f))
		comm[strcspn(comm, "\n")] = '\0';
	fclose(f);
	for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++)
		if (!strcmp(comm, clients[i]))
			return true;
	return false;
}

/* Every port a live peer serves, the lowest of each process's. */
static size_t ports_to_ask(struct xseg *seg, uint32_t nr_ports, uint32_t *ports)
{
	pid_t *seen = calloc(nr_ports, sizeof(*seen));
	size_t n = 0, nseen = 0;
	for (uint32_t p = 0; seen && p < nr_ports; p++) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, p, &pi) < 0 || !pi.owner || !pi.owner_alive ||
		    pi.owner == getpid())
			continue;
		bool dup = false;
		for (size_t i = 0; i < nseen && !dup; i++)
			dup = seen[i] == pi.owner;
		if (dup)
			continue;
		seen[nseen++] = pi.owner;
		if (!is_client(pi.owner))
			ports[n++] = p;
	}
	free(seen);
	return n;
}

/*
 * Ports that gave no answer in an earlier round of this process (xseg
 * exporter, --watch): not asked again while the same owner holds them
 * (same pid, same epoch). A request that is never answered stays in the
 * pool's count until its holder leaves: asking such a port every scrape
 * would drain the pool.
 */
struct silent {
	uint32_t port, epoch;
	pid_t owner;
};
static struct silent silent[256];
static size_t nr_silent;

static bool still_silent(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;
	if (xseg_port_info(seg, port, &pi) < 0)
		return false;
	for (size_t i = 0; i < nr_silent; i++)
		if (silent[i].port == port && silent[i].owner == pi.owner &&
		    silent[i].epoch == pi.epoch)
			return true;
	return false;
}

static void remember_silent(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;
	if (nr_silent < sizeof(silent) / sizeof(silent[0]) &&
	    xseg_port_info(seg, port, &pi) == 0 && pi.owner)
		silent[nr_silent++] = (struct silent){ port, pi.epoch, pi.owner };
}

/* Asks ports[0..n) but those still silent; out[i] for ports[i]. */
static int ask(struct xseg *seg, const uint32_t *ports, size_t n, unsigned timeout_ms,
	       struct control_answer *out, const char **why)
{
	uint32_t *send = calloc(n ? n : 1, sizeof(*send));
	struct control_answer *got = calloc(n ? n : 1, sizeof(*got));
	size_t k = 0;
	int rc = -1;
	if (!send || !got) {
		*why = "out of memory";
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (!still_silent(seg, ports[i]))
			send[k++] = ports[i];
	if (k && (rc = control_call_all(seg, send, k, "stats", REPLY_MAX, timeout_ms, got,
					why)) < 0)
		goto out;
	rc = 0;
	for (size_t i = 0, j = 0; i < n; i++) {
		if (j < k && send[j] == ports[i]) {
			out[i] = got[j++];
			if (out[i].rc == -ETIMEDOUT)
				remember_silent(seg, ports[i]);
		} else {
			out[i] = (struct control_answer){ .rc = -ETIMEDOUT,
				.why = "none in an earlier round, not asked again" };
		}
	}
out:
	free(send);
	free(got);
	return rc;
}

/* Marks answers from a peer and port that answered an earlier one. */
static void mark_duplicates(struct stats_round *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct port_answer *a = &r->a[i];
		if (a->rc)
			continue;
		for (size_t j = 0; j < i && !a->duplicate; j++) {
			struct port_answer *b = &r->a[j];
			a->duplicate = !b->rc && !b->duplicate &&
				stats_doc_num(&a->doc, "pid", -1) == stats_doc_num(&b->doc, "pid", -2) &&
				stats_doc_num(&a->doc, "port", -1) == stats_doc_num(&b->doc, "port", -2);
		}
	}
}

int stats_collect(struct xseg *seg, bool all, uint32_t port, struct stats_round *r)
{
	struct xseg_segment_info si;
	memset(r, 0, sizeof(*r));
	if (xseg_segment_info(seg, &si) < 0) {
		fprintf(stderr, "xseg: stats: %s\n", xseg_last_error());
		return -1;
	}
	uint32_t *ports = calloc(si.nr_ports, sizeof(*ports));
	struct control_answer *out = calloc(si.nr_ports, sizeof(*out));
	const char *why = "";
	if (!ports || !out || !(r->a = calloc(si.nr_ports, sizeof(*r->a)))) {
		fprintf(stderr, "xseg: stats: out of memory\n");
		goto fail;
	}
	size_t n = 1;
	if (all)
		n = ports_to_ask(seg, si.nr_ports, ports);
	else
		ports[0] = port;
	if (n && (all ? ask(seg, ports, n, ALL_PORTS_TIMEOUT_MS, out, &why)
		      : control_call_all(seg, ports, n, "stats", REPLY_MAX, ONE_PORT_TIMEOUT_MS,
					 out, &why)) < 0) {
		fprintf(stderr, "xseg: stats: %s\n", why);
		goto fail;
	}
	r->at_ns = xseg_now_ns();
	r->n = n;
	for (size_t i = 0; i < n; i++) {
		struct port_answer *a = &r->a[i];
		a->asked = ports[i];
		a->next_hop = xseg_get_next_hop(seg, ports[i]);
		a->rc = out[i].rc;
		a->why = out[i].rc > 0 ? strerror(out[i].rc) : out[i].why;
		a->text = out[i].reply;
		if (!a->rc && stats_doc_parse(a->text, &a->doc, &a->why) < 0)
			a->rc = -EPROTO;
	}
	mark_duplicates(r);
	free(ports);
	free(out);
	return 0;
fail:
	free(ports);
	free(out);
	stats_round_free(r);
	return -1;
}

void stats_round_free(struct stats_round *r)
{
	for (size_t i = 0; r->a && i < r->n; i++) {
		free(r->a[i].text);
		stats_doc_free(&r->a[i].doc);
	}
	free(r->a);
	memset(r, 0, sizeof(*r));
}
