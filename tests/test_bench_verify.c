/*
 * bench-xseg's verification against a blocker that lies: this test plays
 * the blocker (port 1) itself, answers bench-xseg's requests the wrong way
 * on purpose, and checks that bench-xseg says so (exit 1). The kill and
 * fault tests trust `bench-xseg --verify` to prove that every acknowledged
 * byte reads back; a false pass here would hide data loss everywhere.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/peer_test_util.h"

/* The patterns are bench-private; compile them in to produce good data. */
#include "../bench/bench-xseg/block_data.c"

#define PEER_PORT  1u
#define BENCH_PORT 10u

enum fake_mode {
	ACK_ONLY,        /* writes and reads served, no data touched */
	GOOD_ONCE,       /* a read's data is right the first time per offset,
			  * later reads of it are served without touching it */
	SHRINK,          /* served with size (and serviced) halved; a read's
			  * half is right */
	ZEROS,           /* reads return zeros (the data was lost) */
	GOOD,            /* reads served right (the last one's data kept) */
	ALIAS,           /* keeps blocks by offset alone: every target name
			  * is the same place (a name truncated, mixed up) */
	LOSE_ACKED,      /* ALIAS, but block 1's write is acknowledged and not
			  * kept, blocks 2 and 3 kept and failed (a reply lost) */
	FAIL_WRITES,     /* ALIAS, but blocks 2 and 3 fail and are not kept */
	HANG,            /* nothing answered, ever */
	BATCH,           /* reads held until `batch` are in, then all filled
			  * right and answered, the last one first, while
			  * bench-xseg is stopped: it takes them in at once */
};

struct fake {
	struct xseg *seg;
	char name[64];
	char log[600];         /* bench-xseg's output, the last run's */
	char unacked[600];     /* a file for --unacked */
	enum fake_mode mode;
	enum verify_mode verify;
	uint64_t seed;
	uint64_t seen[64];     /* GOOD_ONCE: offsets already answered */
	unsigned nseen;
	void *last;            /* GOOD: the last read's data */
	uint64_t last_offset, last_size;
	unsigned char store[65536];      /* ALIAS: the bytes by offset */
	struct xseg_request *held[64];   /* BATCH: the reads held so far */
	unsigned nheld, batch;
	pid_t pid;                       /* bench-xseg, while it runs */
};

static bool seen_before(struct fake *f, uint64_t offset)
{
	for (unsigned i = 0; i < f->nseen; i++)
		if (f->seen[i] == offset)
			return true;
	ck_assert_uint_lt(f->nseen, 64);
	f->seen[f->nseen++] = offset;
	return false;
}

/* What bench-xseg --volume v writes there. */
static void fill_good(struct fake *f, void *data, uint64_t size, uint64_t offset)
{
	block_data_fill(f->verify, data, size, f->seed, block_data_name_key("v"), offset);
}

static void answer(struct fake *f, struct xseg_request *req)
{
	void *data = xseg_get_data(f->seg, req);
	if (f->mode == HANG)
		return;
	if (f->mode == BATCH) {
		ck_assert_uint_eq(req->op, X_READ);
		f->held[f->nheld++] = req;
		if (f->nheld < f->batch)
			return;
		for (unsigned i = 0; i < f->nheld; i++)
			fill_good(f, xseg_get_data(f->seg, f->held[i]), f->held[i]->size,
				  f->held[i]->offset);
		siginfo_t si = { 0 };
		ck_assert_int_eq(kill(f->pid, SIGSTOP), 0);
		ck_assert_int_eq(waitid(P_PID, (id_t)f->pid, &si, WSTOPPED), 0);
		while (f->nheld) {   /* the first one held is answered last */
			req = f->held[--f->nheld];
			req->serviced = req->size;
			req->result = XR_SERVED;
			req->error = 0;
			ck_assert_int_ge(xseg_respond(f->seg, req, PEER_PORT), 0);
		}
		ck_assert_int_eq(kill(f->pid, SIGCONT), 0);
		return;
	}
	if (req->op == X_READ) {
		switch (f->mode) {
		case ACK_ONLY:
		case HANG:      /* answered above */
		case BATCH:
			break;
		case GOOD_ONCE:
			if (!seen_before(f, req->offset))
				fill_good(f, data, req->size, req->offset);
			break;
		case SHRINK:
			req->size /= 2;
			fill_good(f, data, req->size, req->offset);
			break;
		case ZEROS:
			memset(data, 0, req->size);
			break;
		case ALIAS:
		case LOSE_ACKED:
		case FAIL_WRITES:
			ck_assert(req->offset + req->size <= sizeof(f->store));
			memcpy(data, f->store + req->offset, req->size);
			break;
		case GOOD:
			if (!f->last || f->last_offset != req->offset || f->last_size != req->size) {
				free(f->last);
				f->last = malloc(req->size);
				ck_assert_ptr_nonnull(f->last);
				fill_good(f, f->last, req->size, req->offset);
				f->last_offset = req->offset;
				f->last_size = req->size;
			}
			memcpy(data, f->last, req->size);
			break;
		}
	} else if (f->mode == SHRINK) {
		req->size /= 2;
	} else if (f->mode == ALIAS || f->mode == LOSE_ACKED || f->mode == FAIL_WRITES) {
		uint64_t block = req->offset / 4096;
		ck_assert(req->offset + req->size <= sizeof(f->store));
		bool keep = f->mode == LOSE_ACKED ? block != 1 :
			    f->mode == FAIL_WRITES ? block != 2 && block != 3 : true;
		if (keep)
			memcpy(f->store + req->offset, data, req->size);
		if (f->mode != ALIAS && (block == 2 || block == 3)) {
			req->serviced = 0;
			req->result = XR_FAILED;
			req->error = EIO;
			ck_assert_int_ge(xseg_respond(f->seg, req, PEER_PORT), 0);
			return;
		}
	}
	req->serviced = req->size;
	req->result = XR_SERVED;
	req->error = 0;
	ck_assert_int_ge(xseg_respond(f->seg, req, PEER_PORT), 0);
}

/* Runs bench-xseg against the fake blocker (--volume v unless told a
 * volume or a prefix: object 0, offsets as asked); returns its exit
 * status. */
static int bench(struct fake *f, const char *const extra[])
{
	const char *args[48];
	char seed[24];
	int n = 0;
	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)f->seed);
	const char *base[] = { "--segment", f->name, "--port", "10", "--target-port", "1",
			       "--seed", seed, "--timeout", "10", "--json" };
	bool named = false;
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		args[n++] = base[i];
	for (int i = 0; extra[i]; i++) {
		named |= !strcmp(extra[i], "--volume") || !strcmp(extra[i], "--prefix");
		args[n++] = extra[i];
	}
	if (!named) {
		args[n++] = "--volume";
		args[n++] = "v";
	}
	args[n] = NULL;

	unlink(f->log);
	pid_t pid = pt_start("bench-xseg", args, f->log);
	f->pid = pid;
	for (;;) {
		struct xseg_request *reqs[32];
		int got = xseg_accept(f->seg, PEER_PORT, reqs, 32);
		for (int i = 0; i < got; i++)
			answer(f, reqs[i]);
		if (got > 0)
			continue;
		siginfo_t si = { 0 };
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == pid)
			break;
		xseg_wait(f->seg, PEER_PORT, 10000000ull);
	}
	int status = pt_stop(pid, 0, 1000);
	ck_assert_msg(WIFEXITED(status), "bench-xseg did not exit (status %d)", status);
	return WEXITSTATUS(status);
}

static struct fake *setup_fake_heap(enum fake_mode mode, enum verify_mode verify, uint64_t seed,
				    uint64_t heap)
{
	static struct fake f;
	char dir[512];
	memset(&f, 0, sizeof(f));
	pt_tmpdir(dir, sizeof(dir));
	snprintf(f.log, sizeof(f.log), "%s/bench.log", dir);
	snprintf(f.unacked, sizeof(f.unacked), "%s/unacked", dir);
	f.seg = pt_segment(f.name, sizeof(f.name), 16, 64, heap);
	ck_assert_int_eq(xseg_bind_port(f.seg, PEER_PORT), 0);
	f.mode = mode;
	f.verify = verify;
	f.seed = seed;
	return &f;
}

static struct fake *setup_fake(enum fake_mode mode, enum verify_mode verify, uint64_t seed)
{
	return setup_fake_heap(mode, verify, seed, 16u << 20);
}

/* The last run's output, as a string. */
static char *read_log(struct fake *f)
{
	uint64_t len;
	char *text = pt_read_file(f->log, &len);
	ck_assert_ptr_nonnull(text);
	text[len] = '\0';   /* pt_read_file leaves room for it */
	return text;
}

/* A number from the last run's JSON line. */
static double json_field(struct fake *f, const char *field)
{
	char *text = read_log(f), key[64];
	snprintf(key, sizeof(key), "\"%s\":", field);
	char *line = strrchr(text, '{'), *at = line ? strstr(line, key) : NULL;
	ck_assert_msg(at, "no %s in bench-xseg's output: %s", field, text);
	double v = strtod(at + strlen(key), NULL);
	free(text);
	return v;
}

/* A number from a JSON line (its text up to the end of the line). */
static double line_field(const char *line, const char *field)
{
	char key[64];
	snprintf(key, sizeof(key), "\"%s\":", field);
	const char *end = strchr(line, '\n'), *at = strstr(line, key);
	ck_assert_msg(at && (!end || at < end), "no %s in %.200s", field, line);
	return strtod(at + strlen(key), NULL);
}

/* How many numbers an array of the last run's JSON line holds. */
static int json_array_len(struct fake *f, const char *field)
{
	char *text = read_log(f), key[64];
	snprintf(key, sizeof(key), "\"%s\":[", field);
	char *line = strrchr(text, '{'), *at = line ? strstr(line, key) : NULL;
	ck_assert_msg(at, "no %s in bench-xseg's output: %s", field, text);
	int n = 0;
	for (at += strlen(key); *at && *at != ']'; at++)
		n += *at == ',' || at[-1] == '[';
	free(text);
	return n;
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* A blocker that keeps nothing and answers reads without data: the read's
 * buffer still holds what the write run left in it (the heap hands the
 * same block back), which is exactly the data expected. */
START_TEST(read_served_without_data_is_caught)
{
	const char *verify[] = { "full", "meta" };
	for (int v = 0; v < 2; v++) {
		struct fake *f = setup_fake(ACK_ONLY, v ? VERIFY_META : VERIFY_FULL, 1);
		ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq",
					       "--total-size", "4K", "--verify", verify[v])), 0);
		ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq",
					    "--total-size", "4K", "--verify", verify[v])) == 1,
			      "--verify %s: a read served with no data passed", verify[v]);
		ck_assert_int_eq((int)json_field(f, "corrupted"), 1);
	}
}
END_TEST

/* --runtime reads the blocks again: a blocker that gets a block right once
 * and later answers without data leaves the right bytes of the previous
 * pass in the buffer. */
START_TEST(later_pass_served_without_data_is_caught)
{
	struct fake *f = setup_fake(GOOD_ONCE, VERIFY_FULL, 3);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "4K",
				       "--verify", "full", "--runtime", "0.2")), 1);
	/* the first read was right, every later one wrong */
	ck_assert_int_eq(json_field(f, "corrupted"), json_field(f, "requests") - 1);
}
END_TEST

/* A reply's size is the blocker's to write: one that halves it and
 * serves that half has not served the block. */
START_TEST(reply_with_a_smaller_size_is_not_served)
{
	struct fake *f = setup_fake(SHRINK, VERIFY_FULL, 4);
	ck_assert_msg(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "16K",
				    "--verify", "full", "--iodepth", "2")) == 1,
		      "writes acknowledged for half their bytes counted as written");
	ck_assert_int_eq((int)json_field(f, "failed"), 4);
	ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "16K",
				    "--verify", "full", "--iodepth", "2")) == 1,
		      "reads served for half their bytes passed");
	ck_assert_int_eq((int)json_field(f, "failed"), 4);
	ck_assert_int_eq((int)json_field(f, "mib_per_s"), 0);
}
END_TEST

/* Zeros (a lost object reads as a hole) are no block's data, whatever the
 * seed: meta's signature of seed 0, object 0, offset 0 was all zeros. */
START_TEST(zeros_never_verify)
{
	const char *verify[] = { "full", "meta" };
	for (int v = 0; v < 2; v++) {
		struct fake *f = setup_fake(ZEROS, v ? VERIFY_META : VERIFY_FULL, 0);
		ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "8K",
					    "--verify", verify[v])) == 1,
			      "--verify %s --seed 0: zeros passed", verify[v]);
		ck_assert_int_eq((int)json_field(f, "corrupted"), 2);
	}
}
END_TEST

/* --runtime: a reply taken in just before the deadline, the deadline
 * passing while it is checked; the run then ended with a 200 ms poll for
 * nothing, in its time and so in every figure. 4M blocks: the check of
 * one is most of each round trip, so most runs end that way. */
START_TEST(runtime_ends_with_its_last_reply)
{
	struct fake *f = setup_fake(GOOD, VERIFY_FULL, 5);
	int over = 0;
	char last[160] = "";
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq",
					       "--total-size", "4M", "--block-size", "4M",
					       "--verify", "full", "--runtime", "0.1")), 0);
		/* the deadline, the slowest round trip, 0.15 s of slack (< 0.2) */
		double took = json_field(f, "seconds"), lat = json_field(f, "lat_us_max") / 1e6;
		if (took >= 0.1 + lat + 0.15) {
			over++;
			snprintf(last, sizeof(last), "run %d: --runtime 0.1 took %.3f s (%.0f "
				 "requests, slowest %.3f s)", i, took, json_field(f, "requests"), lat);
		}
	}
	/* The poll hit most runs; a loaded machine (TSan, CI beside other
	 * work) makes one or two late on its own. */
	ck_assert_msg(over <= 2, "%d of 8 runs late, e.g. %s", over, last);
}
END_TEST

/* Two volumes (or two prefixes) written with the same seed: a blocker
 * that keeps both in one place lost the first one's data, and a read of it
 * must say so; it did not while the data was the same for every name. */
START_TEST(another_targets_data_is_caught)
{
	const char *verify[] = { "full", "meta" };
	for (int v = 0; v < 2; v++) {
		struct fake *f = setup_fake(ALIAS, v ? VERIFY_META : VERIFY_FULL, 7);
		const char *opt[] = { "--volume", "--prefix" }, *name[2][2] = { { "v", "w" },
										{ "p", "q" } };
		/* 8K objects: the two blocks of either prefix are one object */
		for (int m = 0; m < 2; m++) {
			for (int k = 0; k < 2; k++)
				ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq",
							       "--total-size", "8K", "--object-size", "8K",
							       "--verify", verify[v], opt[m],
							       name[m][k])), 0);
			ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq",
						    "--total-size", "8K", "--object-size", "8K",
						    "--verify", verify[v], opt[m], name[m][0])) == 1,
				      "--verify %s: %s %s read back %s's data", verify[v], opt[m],
				      name[m][0], name[m][1]);
		}
	}
}
END_TEST

/* A block too small for meta's two signatures (under 48 bytes): what the
 * write leaves past the first one must be what the read expects there, not
 * whatever the request's buffer held before (here a 4K write's data). */
START_TEST(small_meta_blocks_read_back)
{
	struct fake *f = setup_fake(ALIAS, VERIFY_META, 8);
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "4K",
				       "--verify", "full", "--volume", "big")), 0);
	const char *sizes[] = { "16", "24", "32", "40", "48", "56" };
	for (int i = 0; i < 6; i++) {
		ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq",
					       "--total-size", sizes[i], "--block-size", sizes[i],
					       "--verify", "meta")), 0);
		ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq",
					    "--total-size", sizes[i], "--block-size", sizes[i],
					    "--verify", "meta")) == 0,
			      "--block-size %s: what was written does not verify", sizes[i]);
	}
}
END_TEST

/* --runtime: slice_iops holds the twentieths of the time, all of them,
 * also the last when nothing is answered after the deadline (one 4M block
 * in flight, most of its round trip the check). */
START_TEST(runtime_reports_every_twentieth)
{
	struct fake *f = setup_fake(GOOD, VERIFY_FULL, 5);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq",
					       "--total-size", "4M", "--block-size", "4M",
					       "--verify", "full", "--runtime", "0.1")), 0);
		ck_assert_msg(json_array_len(f, "slice_iops") == 20, "run %d: %d twentieths", i,
			      json_array_len(f, "slice_iops"));
	}
}
END_TEST

/* A write acknowledged and lost beside writes failed and kept: the
 * corrupted count stays under the failed one (1 <= 2), which is all a kill
 * test could compare. --unacked names the blocks never acknowledged, and a
 * read with --may-differ forgives those alone. */
START_TEST(lost_acknowledged_write_beside_failed_ones_is_caught)
{
	struct fake *f = setup_fake(LOSE_ACKED, VERIFY_FULL, 9);
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "rand", "--total-size", "32K",
				       "--verify", "full", "--iodepth", "4", "--unacked",
				       f->unacked)), 1);
	ck_assert_int_eq((int)json_field(f, "failed"), 2);
	ck_assert_int_eq((int)json_field(f, "unacked"), 2);
	/* the counts alone: 1 corrupted, 2 failed */
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full")), 1);
	ck_assert_int_eq((int)json_field(f, "corrupted"), 1);
	ck_assert_msg(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				    "--verify", "full", "--may-differ", f->unacked)) == 1,
		      "an acknowledged write was lost and the read passed");
	ck_assert_int_eq((int)json_field(f, "corrupted"), 1);

	/* the failed writes not kept: they may differ, and only they do */
	f = setup_fake(FAIL_WRITES, VERIFY_FULL, 9);
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full", "--unacked", f->unacked)), 1);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "rand", "--total-size", "32K",
				       "--verify", "full", "--iodepth", "3", "--may-differ",
				       f->unacked)), 0);
	ck_assert_int_eq((int)json_field(f, "corrupted"), 0);
	ck_assert_int_eq((int)json_field(f, "differed"), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full")), 1);
	ck_assert_int_eq((int)json_field(f, "corrupted"), 2);
	/* another block size or run size than the write's: refused */
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--block-size", "8K", "--verify", "full", "--may-differ",
				       f->unacked)), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "64K",
				       "--verify", "full", "--may-differ", f->unacked)), 2);
	/* another seed's or volume's list: refused (it excused the blocks its
	 * own run left unacknowledged, not this run's) */
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--seed", "10", "--verify", "full", "--may-differ",
				       f->unacked)), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--volume", "w", "--verify", "full", "--may-differ",
				       f->unacked)), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full", "--unacked", f->unacked)), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full", "--may-differ", f->unacked)), 2);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "32K",
				       "--may-differ", f->unacked)), 2);
}
END_TEST

/* Two stores that each hold half of one writer's blocks and half of
 * another's, the halves swapped: the same counts (4 of 8 not the first
 * writer's), other data. --differing lists which blocks. */
START_TEST(differing_lists_which_blocks)
{
	struct fake *f = setup_fake(ALIAS, VERIFY_FULL, 21);
	char list[700], *text;
	uint64_t len;
	snprintf(list, sizeof(list), "%s.differing", f->unacked);
	for (int swap = 0; swap < 2; swap++) {
		for (uint64_t i = 0; i < 8; i++)
			block_data_fill(VERIFY_FULL, f->store + i * 4096, 4096, (i < 4) == !swap ? 21 : 22,
					block_data_name_key("v"), i * 4096);
		ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "rand", "--total-size",
					       "32K", "--verify", "full", "--iodepth", "4",
					       "--differing", list)), 1);
		ck_assert_int_eq((int)json_field(f, "corrupted"), 4);
		text = pt_read_file(list, &len);
		ck_assert_ptr_nonnull(text);
		text[len] = '\0';
		ck_assert_str_eq(text,
				 swap ? "bench-xseg blocks block_size 4096 blocks 8 seed 21 target v\n0 4\n"
				      : "bench-xseg blocks block_size 4096 blocks 8 seed 21 target v\n4 4\n");
		free(text);
	}
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full", "--differing", list)), 2);
}
END_TEST

/* Sixteen 4M reads answered at once (bench-xseg takes them in as one
 * batch), the first one submitted last: each reply's latency ends when
 * bench-xseg took the batch in. It ended when the reply's turn in the
 * batch came, after --verify full had checked the replies before it: the
 * slowest read (the first) carried fifteen checks that were not its own,
 * and ended with the run but for its own check (the run: from before the
 * first submit to after the last check). */
START_TEST(latency_leaves_out_the_checks_of_other_replies)
{
	struct fake *f = setup_fake_heap(BATCH, VERIFY_FULL, 11, 256u << 20);
	uint64_t block = 4u << 20;
	f->batch = 16;
	/* what one check costs on this machine, in this build */
	unsigned char *buf = malloc(block);
	ck_assert_ptr_nonnull(buf);
	fill_good(f, buf, block, 0);
	double check_ns = INFINITY;   /* the fastest of five: others only wait more */
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = xseg_now_ns();
		ck_assert_uint_eq(block_data_check(VERIFY_FULL, buf, block, f->seed,
						   block_data_name_key("v"), 0), 0);
		check_ns = fmin(check_ns, (double)(xseg_now_ns() - t0));
	}
	free(buf);

	/* twice: the first run faults the buffers' pages in, which made the
	 * first submit (before the slowest read began) as long as a check */
	for (int run = 0; run < 2; run++)
		ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size",
					       "64M", "--block-size", "4M", "--iodepth", "16",
					       "--verify", "full")), 0);
	/* the sixteen checks came after the batch was taken in: they lie
	 * between the slowest read's end and the run's (a machine busy with
	 * other work only makes that longer), ten of them at least, where
	 * there was one check and the first submit */
	double max_ns = json_field(f, "lat_us_max") * 1e3, run_ns = json_field(f, "seconds") * 1e9;
	ck_assert_msg(run_ns - max_ns > 10 * check_ns,
		      "slowest read %.1f ms of a %.1f ms run: it ended after the checks of "
		      "the others (one is %.1f ms)", max_ns / 1e6, run_ns / 1e6, check_ns / 1e6);
}
END_TEST

/* A blocker that never answers: bench-xseg gives up at --timeout (exit
 * 3, every block failed) and the requests it gave up took that long at
 * least. They were in no latency figure: lat_us_max 0 for a run whose
 * every request hung. */
START_TEST(given_up_requests_are_in_the_latency)
{
	struct fake *f = setup_fake(HANG, VERIFY_FULL, 12);
	ck_assert_int_eq(bench(f, ARGS("--op", "read", "--pattern", "seq", "--total-size", "16K",
				       "--verify", "full", "--iodepth", "2", "--timeout", "1")), 3);
	ck_assert_int_eq((int)json_field(f, "failed"), 4);
	ck_assert_int_eq((int)json_field(f, "unanswered"), 4);
	ck_assert_int_eq((int)json_field(f, "requests"), 0);
	ck_assert_msg(json_field(f, "lat_us_max") >= 1e6 && json_field(f, "lat_us_p50") >= 0.97e6,
		      "requests given up after 1 s: p50 %.0f us, max %.0f us",
		      json_field(f, "lat_us_p50"), json_field(f, "lat_us_max"));
}
END_TEST

/* A quarter of the writes fail (blocks 2 and 3 of 8), pass after pass:
 * IOPS and MiB/s are of the requests served. The failed ones counted in
 * IOPS, and the interval lines' MiB/s (IOPS times the block size) counted
 * their bytes: a blocker failing every write at once drew a bandwidth
 * peak in bench/plot's over-time figure where there was none. */
START_TEST(failed_requests_are_no_throughput)
{
	struct fake *f = setup_fake(FAIL_WRITES, VERIFY_FULL, 13);
	ck_assert_int_eq(bench(f, ARGS("--op", "write", "--pattern", "seq", "--total-size", "32K",
				       "--verify", "full", "--runtime", "0.3", "--interval-json",
				       "0.1")), 1);
	double requests = json_field(f, "requests"), failed = json_field(f, "failed");
	ck_assert(requests >= 16 && failed >= requests / 4 - 2 && failed <= requests / 4 + 2);
	double served = json_field(f, "iops") * json_field(f, "seconds");
	ck_assert_msg(fabs(served - (requests - failed)) < 1 + requests / 1000,
		      "iops x seconds = %.1f: %.0f requests, %.0f of them failed", served,
		      requests, failed);
	ck_assert_msg(fabs(json_field(f, "mib_per_s") * (1 << 20) / 4096 - json_field(f, "iops")) <
		      1 + json_field(f, "iops") / 1000, "MiB/s and IOPS differ");

	char *text = read_log(f), *line = text;
	int lines = 0;
	while ((line = strstr(line, "{\"interval\":true"))) {
		double n = line_field(line, "requests"), bad = line_field(line, "failed");
		double iops = line_field(line, "iops"), dt = line_field(line, "dt");
		double mib = line_field(line, "mib_per_s");
		if (dt >= 0.05 && n >= 100) {   /* dt's 3 decimals hold it to 1 % */
			ck_assert_msg(fabs(iops * dt - (n - bad)) < 0.02 * n + 1,
				      "an interval's iops x dt = %.1f: %.0f requests, %.0f failed",
				      iops * dt, n, bad);
			lines++;
		}
		ck_assert(fabs(mib * (1 << 20) / 4096 - iops) < 1 + iops / 1000);
		line++;
	}
	free(text);
	ck_assert_int_ge(lines, 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_verify");
	TCase *tc = tcase_create("lying_blocker");
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	tcase_add_test(tc, read_served_without_data_is_caught);
	tcase_add_test(tc, later_pass_served_without_data_is_caught);
	tcase_add_test(tc, reply_with_a_smaller_size_is_not_served);
	tcase_add_test(tc, zeros_never_verify);
	tcase_add_test(tc, runtime_ends_with_its_last_reply);
	tcase_add_test(tc, another_targets_data_is_caught);
	tcase_add_test(tc, small_meta_blocks_read_back);
	tcase_add_test(tc, runtime_reports_every_twentieth);
	tcase_add_test(tc, lost_acknowledged_write_beside_failed_ones_is_caught);
	tcase_add_test(tc, differing_lists_which_blocks);
	tcase_add_test(tc, latency_leaves_out_the_checks_of_other_replies);
	tcase_add_test(tc, given_up_requests_are_in_the_latency);
	tcase_add_test(tc, failed_requests_are_no_throughput);
	return pt_run(s);
}
