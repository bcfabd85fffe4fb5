/*
 * ibk-rdv: either side of ibkern's ib_send_lat ping-pong, on rdma-core's verbs, for a Linux
 * node facing an ibkern node (docs/linux-guest.md, "Linux against ibkern"). It speaks
 * ibkern's in-band rendezvous (docs/rendezvous.md): Hello, HelloAck, a Barrier per size, Done.
 *
 * Client (-r client, the default): sends its Hellos to the server's rendezvous QPN (-q) at
 * -l PEER_LID, then everything to the HelloAck's source QPN. An ibkern server's QPN follows
 * from its firmware's reserved-QP count (docs/rendezvous.md), which rdma-core's verbs do not
 * report, so the runner computes it and passes it. Every answer's
 * tag and payload are checked against the pattern (docs/benchmarks.md, "Deviations").
 * Server (-r server): its rendezvous QPN is whatever ibv_create_qp gave, so it prints
 * "ibk-rdv server: listening on LID 0x.... rendezvous QPN 0x......" for the client's
 * peer_rdv_qpn; it answers Hello, Barrier and Done as ibkern's server does, checks the
 * client's parameters and every request's tag and payload, and answers each request. It
 * runs the one run of its command line: unlike ibkern's server it does not follow a client's
 * plan, and answers a Hello asking for another run with a refusal (Refuse, reason 5) before
 * it fails. Messages are version 1, or version 3 when answering a version-3 (plan) Hello of
 * a send_lat run.
 *
 * Usage: ibk-rdv [-r client|server] -c UD|UC [-l PEER_LID] [-a | -s SIZE] [-n ITERS]
 *                [-q RDV_QPN] [-t TIMEOUT_MS] [-p PEER_TIMEOUT_S]
 * (-l and -q are required for, and only accepted by, the client.)
 * Exit status 0 only if every size ran, every message carried the expected data and Done
 * was exchanged; 1 otherwise (the reason on stderr); 2 bad usage.
 *
 * Written for this project (built by the runner with gcc against Debian's libibverbs-dev).
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RDV_QKEY 0x49424B52u
#define DATA_QKEY 0x11111111u
#define MAGIC 0x49424B52u
#define MSG_LEN 64
#define GRH 40
#define RDV_SLOTS 32
#define RDV_SLOT 128
#define RDV_SQ 64
#define RX_DEPTH 64
#define MAX_UC (8u << 20)
#define LOSS_LIMIT 100

enum { HELLO = 1, HELLO_ACK, BARRIER, BARRIER_ACK, DONE, DONE_ACK, REFUSE };
/* A server's refusal reason code (docs/rendezvous.md, "Refuse"): a combination it does not run. */
#define REFUSE_UNSUPPORTED 5

/* Version 1 (send_lat, bytes 40..64 zero) or 3 (a run of an ibkern client's plan: send_lat's
 * fields plus completion, inline limit and the run's place in the plan, kept in `plan` as
 * bytes 40..64 and echoed in the answers). */
struct msg {
	uint8_t version, kind, role, transport, mtu, flags;
	uint32_t session, peer_session, qpn, psn, iterations, size, index;
	uint16_t lid;
	uint8_t plan[24];
};

static void put32(uint8_t *b, uint32_t v)
{
	b[0] = v >> 24;
	b[1] = v >> 16;
	b[2] = v >> 8;
	b[3] = v;
}

static uint32_t get32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static void encode(const struct msg *m, uint8_t *b)
{
	memset(b, 0, MSG_LEN);
	put32(b, MAGIC);
	b[4] = m->version == 3 ? 3 : 1;
	b[5] = m->kind;
	b[6] = m->role;
	b[7] = m->transport;
	put32(b + 8, m->session);
	put32(b + 12, m->peer_session);
	b[16] = m->lid >> 8;
	b[17] = m->lid;
	b[18] = m->mtu;
	b[19] = m->flags;
	put32(b + 20, m->qpn & 0xFFFFFF);
	put32(b + 24, m->psn & 0xFFFFFF);
	put32(b + 28, m->iterations);
	put32(b + 32, m->size);
	put32(b + 36, m->index);
	if (b[4] == 3) {
		memcpy(b + 40, m->plan, sizeof m->plan);
		b[40] = 1; /* send_lat */
	}
}

static int decode(const uint8_t *b, struct msg *m)
{
	/* Version 3 is read when it is a send_lat run (byte 40); write_lat (version 2, or 3
	 * with test 2) is not this program's. */
	if (get32(b) != MAGIC || (b[4] != 1 && !(b[4] == 3 && b[40] == 1)) || b[5] < 1 ||
	    b[5] > 7 || b[6] < 1 || b[6] > 2 || b[7] < 1 || b[7] > 2)
		return -1;
	m->version = b[4];
	memcpy(m->plan, b + 40, sizeof m->plan);
	m->kind = b[5];
	m->role = b[6];
	m->transport = b[7];
	m->session = get32(b + 8);
	m->peer_session = get32(b + 12);
	m->lid = (uint16_t)(b[16] << 8 | b[17]);
	m->mtu = b[18];
	m->flags = b[19];
	m->qpn = get32(b + 20) & 0xFFFFFF;
	m->psn = get32(b + 24) & 0xFFFFFF;
	m->iterations = get32(b + 28);
	m->size = get32(b + 32);
	m->index = get32(b + 36);
	return 0;
}

/* The server's payload byte at offset >= 2 for size index `index` (bench::perftest). */
static uint8_t pattern(size_t offset, uint32_t index)
{
	return (uint8_t)((uint8_t)offset * 31u) ^ (uint8_t)((uint8_t)index * 0x5Bu) ^ 0xA5;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static const char *who = "ibk-rdv client";

static void die(const char *what)
{
	fprintf(stderr, "%s: FAIL: %s%s%s\n", who, what, errno ? ": " : "",
		errno ? strerror(errno) : "");
	exit(1);
}

/* A failure that is not a system call's (errno is not meaningful). */
static void fail(const char *what)
{
	errno = 0;
	die(what);
}

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t send_off, recv_off, rdv_off, rdv_send_off;
	struct ibv_cq *rdv_cq, *scq, *rcq;
	struct ibv_qp *rdv_qp, *qp;
	struct ibv_ah *rdv_ah, *data_ah;
	int ud, server;
	uint16_t lid, peer_lid;
	uint32_t peer_rdv_qpn, rdv_inflight;
	struct msg me;
	uint32_t peer_qpn, peer_psn;
	size_t max_size;
	uint32_t inline_max;
	int mtu;
	uint64_t timeout_ns, peer_timeout_ns;
	uint32_t iters;
} g;

static void post_rdv_recv(uint32_t slot)
{
	struct ibv_sge sge = {(uintptr_t)(g.buf + g.rdv_off + slot * RDV_SLOT), GRH + MSG_LEN,
			      g.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(g.rdv_qp, &wr, &bad))
		die("post rendezvous receive");
}

static void send_rdv(uint8_t kind, uint32_t index)
{
	if (g.rdv_inflight >= RDV_SQ - 1)
		return;
	struct msg m = g.me;
	m.kind = kind;
	m.index = index;
	uint8_t *b = g.buf + g.rdv_send_off;
	encode(&m, b);
	struct ibv_sge sge = {(uintptr_t)b, MSG_LEN, g.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1ull << 63, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE},
			   *bad;
	wr.wr.ud.ah = g.rdv_ah;
	wr.wr.ud.remote_qpn = g.peer_rdv_qpn;
	wr.wr.ud.remote_qkey = RDV_QKEY;
	if (ibv_post_send(g.rdv_qp, &wr, &bad))
		die("post rendezvous send");
	g.rdv_inflight++;
}

/* Takes rendezvous completions one at a time until a well-formed message from the other
 * role (not our own session) is found: returns 1 with it in *m, 0 once the CQ is empty.
 * The caller checks the sessions. */
static int poll_rdv(struct msg *m, uint32_t *src_qp, uint16_t *slid)
{
	uint8_t other = g.server ? 1 : 2;
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(g.rdv_cq, 1, &wc);
		if (n < 0)
			die("poll rendezvous CQ");
		if (n == 0)
			return 0;
		if (wc.wr_id >> 63) {
			g.rdv_inflight--;
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "%s: FAIL: rendezvous send: %s\n", who,
					ibv_wc_status_str(wc.status));
				exit(1);
			}
			continue;
		}
		uint32_t slot = (uint32_t)wc.wr_id;
		struct msg x;
		int ok = wc.status == IBV_WC_SUCCESS &&
			 decode(g.buf + g.rdv_off + slot * RDV_SLOT + GRH, &x) == 0 &&
			 x.session != g.me.session && x.role == other;
		post_rdv_recv(slot);
		if (ok) {
			*m = x;
			*src_qp = wc.src_qp;
			*slid = wc.slid;
			return 1;
		}
	}
}

static struct ibv_qp *make_qp(enum ibv_qp_type type, struct ibv_cq *scq, struct ibv_cq *rcq,
			      uint32_t sq, uint32_t rq, uint32_t inl)
{
	struct ibv_qp_init_attr a = {.send_cq = scq, .recv_cq = rcq, .qp_type = type,
				     .cap = {.max_send_wr = sq, .max_recv_wr = rq,
					     .max_send_sge = 1, .max_recv_sge = 1,
					     .max_inline_data = inl}};
	struct ibv_qp *qp = ibv_create_qp(g.pd, &a);
	if (!qp)
		die("ibv_create_qp");
	if (inl)
		g.inline_max = a.cap.max_inline_data;
	return qp;
}

static void ud_up(struct ibv_qp *qp, uint32_t qkey, uint32_t psn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qkey = qkey};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("UD QP to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("UD QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("UD QP to RTS");
}

static struct ibv_ah *ah_to(uint16_t lid)
{
	struct ibv_ah_attr a = {.dlid = lid, .sl = 0, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(g.pd, &a);
	if (!ah)
		die("ibv_create_ah");
	return ah;
}

static void post_data_recv(void)
{
	struct ibv_sge sge = {(uintptr_t)(g.buf + g.recv_off), (uint32_t)(g.max_size + GRH),
			      g.mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(g.qp, &wr, &bad))
		die("post data receive");
}

/* The data QP toward the peer (LID `lid`, QPN and PSN from its rendezvous message). */
static void connect_data(uint16_t lid)
{
	if (g.ud) {
		ud_up(g.qp, DATA_QKEY, g.me.psn);
		g.data_ah = ah_to(lid);
	} else {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
					.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
		if (ibv_modify_qp(g.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_ACCESS_FLAGS))
			die("UC QP to INIT");
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = (enum ibv_mtu)g.mtu;
		a.dest_qp_num = g.peer_qpn;
		a.rq_psn = g.peer_psn;
		a.ah_attr.dlid = lid;
		a.ah_attr.port_num = 1;
		if (ibv_modify_qp(g.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
			die("UC QP to RTR");
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = g.me.psn;
		if (ibv_modify_qp(g.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
			die("UC QP to RTS");
	}
	for (int i = 0; i < RX_DEPTH; i++)
		post_data_recv();
}

/* Posts one SEND of `sz` bytes from the send buffer and waits (bounded) for its completion. */
static void send_data(size_t sz, uint64_t wait_ns)
{
	struct ibv_sge sge = {(uintptr_t)(g.buf + g.send_off), (uint32_t)sz, g.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED |
					       (sz <= g.inline_max ? IBV_SEND_INLINE : 0)},
			   *bad;
	if (g.ud) {
		wr.wr.ud.ah = g.data_ah;
		wr.wr.ud.remote_qpn = g.peer_qpn;
		wr.wr.ud.remote_qkey = DATA_QKEY;
	}
	if (ibv_post_send(g.qp, &wr, &bad))
		die("post send");
	struct ibv_wc wc;
	uint64_t t0 = now_ns();
	int n;
	while ((n = ibv_poll_cq(g.scq, 1, &wc)) == 0) {
		if (now_ns() - t0 > wait_ns)
			fail("send completion timed out");
	}
	if (n < 0)
		die("poll send CQ");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: FAIL: send completion: %s\n", who,
			ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void fill_pattern(size_t sz, uint32_t index)
{
	uint8_t *sbuf = g.buf + g.send_off;
	for (size_t i = 2; i < sz; i++)
		sbuf[i] = pattern(i, index);
}

/* 1 if every payload byte after the tag is the pattern of size index `index`; else prints
 * the first wrong byte. */
static int payload_ok(const uint8_t *p, size_t sz, uint32_t index, uint32_t seq)
{
	for (size_t i = 2; i < sz; i++) {
		if (p[i] != pattern(i, index)) {
			fprintf(stderr, "%s: FAIL: %zu-byte message %u: byte %zu is %#x, expected %#x\n",
				who, sz, seq, i, p[i], pattern(i, index));
			return 0;
		}
	}
	return 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void print_header(void)
{
	printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
	       "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
}

/* One perftest row from `ns` + 1 stamps (one sample per round trip, halved: RTT/2, us). */
static void print_row(size_t sz, uint64_t *stamp, unsigned ns, double *lat)
{
	for (unsigned i = 0; i < ns; i++)
		lat[i] = (double)(stamp[i + 1] - stamp[i]) / 2000.0;
	qsort(lat, ns, sizeof(double), cmp_double);
	double sum = 0, sq = 0;
	for (unsigned i = 0; i < ns; i++)
		sum += lat[i];
	double avg = sum / ns;
	for (unsigned i = 0; i < ns; i++)
		sq += (lat[i] - avg) * (lat[i] - avg);
	unsigned p99 = (ns * 99 + 99) / 100, p999 = (ns * 999 + 999) / 1000;
	printf(" %-7zu %-10u %-14.2f %-14.2f %-14.2f %-14.2f %-14.2f %-14.2f %-14.2f\n", sz,
	       g.iters, lat[0], lat[ns - 1], lat[ns / 2], avg, __builtin_sqrt(sq / ns),
	       lat[(p99 > ns ? ns : p99) - 1], lat[(p999 > ns ? ns : p999) - 1]);
}

/* The sizes: -a is 2 B to the MTU (UD) or to 8 MiB (UC), as ibkern's and perftest's. */
static unsigned size_list(int all, size_t size, size_t *sizes)
{
	unsigned n = 0;
	if (all) {
		size_t top = g.ud ? (size_t)(128u << g.mtu) : MAX_UC;
		for (size_t s = 2; s <= top; s <<= 1)
			sizes[n++] = s;
	} else {
		sizes[n++] = size;
	}
	return n;
}

static void usage(void)
{
	fprintf(stderr, "usage: ibk-rdv [-r client|server] -c UD|UC [-l PEER_LID] [-a | -s SIZE] "
			"[-n ITERS] [-q RDV_QPN] [-t TIMEOUT_MS] [-p PEER_TIMEOUT_S]\n"
			"  (-l and -q are required for, and only accepted by, the client)\n");
	exit(2);
}

static int run_client(int all, size_t size, const char *transport);
static int run_server(int all, size_t size, const char *transport);

int main(int argc, char **argv)
{
	int opt, all = 0, got_q = 0;
	unsigned long size = 2, iters = 1000, timeout_ms = 2000, peer_timeout_s = 120;
	unsigned long peer_lid = 0, rdv_qpn = 0;
	const char *transport = NULL, *role = "client";
	while ((opt = getopt(argc, argv, "r:c:l:as:n:q:t:p:")) != -1) {
		char *end = NULL;
		unsigned long *v = NULL;
		switch (opt) {
		case 'r': role = optarg; continue;
		case 'c': transport = optarg; continue;
		case 'a': all = 1; continue;
		case 'l': v = &peer_lid; break;
		case 's': v = &size; break;
		case 'n': v = &iters; break;
		case 'q': v = &rdv_qpn; got_q = 1; break;
		case 't': v = &timeout_ms; break;
		case 'p': v = &peer_timeout_s; break;
		default: usage();
		}
		errno = 0;
		*v = strtoul(optarg, &end, 0);
		if (errno || !end || *end || optarg[0] == '-')
			usage();
	}
	if (optind != argc || (strcmp(role, "client") && strcmp(role, "server")))
		usage();
	g.server = !strcmp(role, "server");
	who = g.server ? "ibk-rdv server" : "ibk-rdv client";
	if (g.server ? (peer_lid || got_q) : (!peer_lid || peer_lid > 0xBFFF || !got_q))
		usage();
	if (!transport || (strcmp(transport, "UD") && strcmp(transport, "UC")) || iters < 5 ||
	    iters > 16777216 || size < 2 || size > MAX_UC || timeout_ms < 1 ||
	    timeout_ms > 60000 || peer_timeout_s < 1 || peer_timeout_s > 86400 ||
	    (!g.server && (rdv_qpn < 2 || rdv_qpn > 0xFFFFFF)))
		usage();
	g.ud = !strcmp(transport, "UD");
	if (g.ud && !all && size > 4096)
		usage();
	g.iters = (uint32_t)iters;
	g.timeout_ns = timeout_ms * 1000000ull;
	g.peer_timeout_ns = peer_timeout_s * 1000000000ull;
	setvbuf(stdout, NULL, _IOLBF, 0);

	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1)
		die("no RDMA device");
	g.ctx = ibv_open_device(list[0]);
	if (!g.ctx)
		die("ibv_open_device");
	struct ibv_port_attr port;
	if (ibv_query_port(g.ctx, 1, &port))
		die("ibv_query_port");
	if (port.state != IBV_PORT_ACTIVE)
		fail("port 1 is not ACTIVE");
	g.lid = port.lid;
	g.peer_lid = (uint16_t)peer_lid;
	/* perftest's ConnectX-3 rule, as ibkern: 4096 is used as 2048. */
	g.mtu = port.active_mtu > IBV_MTU_2048 ? IBV_MTU_2048 : port.active_mtu;
	g.max_size = g.ud ? (size_t)(128u << g.mtu) : (all ? MAX_UC : size);
	if (g.ud && !all && size > g.max_size)
		fail("size larger than the UD MTU");
	g.pd = ibv_alloc_pd(g.ctx);
	if (!g.pd)
		die("ibv_alloc_pd");
	g.send_off = 0;
	g.recv_off = (g.max_size + 63) & ~(size_t)63;
	g.rdv_off = g.recv_off + ((g.max_size + GRH + 63) & ~(size_t)63);
	g.rdv_send_off = g.rdv_off + RDV_SLOTS * RDV_SLOT;
	size_t total = g.rdv_send_off + 64;
	g.buf = aligned_alloc(4096, (total + 4095) & ~(size_t)4095);
	if (!g.buf)
		die("out of memory");
	memset(g.buf, 0, total);
	g.mr = ibv_reg_mr(g.pd, g.buf, total, IBV_ACCESS_LOCAL_WRITE);
	if (!g.mr)
		die("ibv_reg_mr");

	/* Rendezvous QP (any QPN: our messages carry it as their source QPN). */
	g.rdv_cq = ibv_create_cq(g.ctx, 2 * RDV_SQ + RDV_SLOTS, NULL, NULL, 0);
	if (!g.rdv_cq)
		die("ibv_create_cq");
	g.rdv_qp = make_qp(IBV_QPT_UD, g.rdv_cq, g.rdv_cq, RDV_SQ, RDV_SLOTS, MSG_LEN);
	ud_up(g.rdv_qp, RDV_QKEY, 0);
	for (uint32_t s = 0; s < RDV_SLOTS; s++)
		post_rdv_recv(s);
	g.peer_rdv_qpn = (uint32_t)rdv_qpn;

	/* Data QP. */
	g.scq = ibv_create_cq(g.ctx, 16, NULL, NULL, 0);
	g.rcq = ibv_create_cq(g.ctx, RX_DEPTH + 16, NULL, NULL, 0);
	if (!g.scq || !g.rcq)
		die("ibv_create_cq");
	g.qp = make_qp(g.ud ? IBV_QPT_UD : IBV_QPT_UC, g.scq, g.rcq, 4, RX_DEPTH,
		       g.ud ? 188 : 236);
	srand((unsigned)(now_ns() ^ (uint64_t)getpid()));
	uint32_t psn = (uint32_t)rand() & 0xFFFFFF;
	g.me = (struct msg){.role = g.server ? 2 : 1, .transport = g.ud ? 1 : 2,
			    .session = ((uint32_t)rand() << 1) | 1, .lid = g.lid,
			    .mtu = (uint8_t)g.mtu, .qpn = g.qp->qp_num, .psn = psn,
			    .iterations = (uint32_t)iters, .size = all ? 0 : (uint32_t)size};
	printf(" local address: LID %#06x QPN %#08x PSN %#08x, rendezvous QPN %#08x\n", g.lid,
	       g.qp->qp_num, psn, g.rdv_qp->qp_num);
	return g.server ? run_server(all, size, transport) : run_client(all, size, transport);
}

static int run_client(int all, size_t size, const char *transport)
{
	g.rdv_ah = ah_to(g.peer_lid);
	/* Hello every 10 ms until the server's HelloAck to our session. */
	struct msg m;
	uint32_t src_qp;
	uint16_t slid;
	uint64_t start = now_ns(), next = 0;
	for (;;) {
		if (now_ns() - start > g.peer_timeout_ns)
			fail("no HelloAck from the server (peer not found)");
		int got = poll_rdv(&m, &src_qp, &slid);
		if (got && m.kind == HELLO_ACK && m.peer_session == g.me.session)
			break;
		if (got && m.kind == REFUSE && m.peer_session == g.me.session) {
			fprintf(stderr, "%s: FAIL: the server refused the run (reason code %u)\n", who,
				m.index);
			exit(1);
		}
		if (now_ns() >= next) {
			send_rdv(HELLO, 0);
			next = now_ns() + 10000000ull;
		}
	}
	if (m.transport != g.me.transport || m.iterations != g.iters || m.size != g.me.size)
		fail("the server runs another transport, iteration count or size");
	g.me.peer_session = m.session;
	g.peer_rdv_qpn = src_qp; /* docs/rendezvous.md: answers go to the source QPN */
	g.peer_qpn = m.qpn;
	g.peer_psn = m.psn;
	if (m.mtu >= IBV_MTU_256 && m.mtu < (uint8_t)g.mtu)
		g.mtu = m.mtu;
	printf(" remote address: LID %#06x QPN %#08x PSN %#08x, mtu %d\n", slid, m.qpn, m.psn,
	       128 << g.mtu);
	connect_data(slid);

	size_t sizes[32];
	unsigned nsizes = size_list(all, size, sizes);
	double *lat = calloc(g.iters, sizeof(double));
	uint64_t *stamp = calloc(g.iters + 1, sizeof(uint64_t));
	if (!lat || !stamp)
		die("out of memory");
	print_header();
	uint64_t lost_total = 0;
	for (uint32_t index = 0; index < nsizes; index++) {
		size_t sz = sizes[index];
		uint8_t *sbuf = g.buf + g.send_off;
		const uint8_t *rpay = g.buf + g.recv_off + (g.ud ? GRH : 0);
		fill_pattern(sz, index);
		/* Barrier(index) every timeout until BarrierAck(index). */
		uint64_t b0 = now_ns();
		next = 0;
		for (;;) {
			if (poll_rdv(&m, &src_qp, &slid) && m.session == g.me.peer_session &&
			    m.kind == BARRIER_ACK && m.index == index)
				break;
			if (now_ns() - b0 > g.peer_timeout_ns)
				fail("no BarrierAck (peer lost)");
			if (now_ns() >= next) {
				send_rdv(BARRIER, index);
				next = now_ns() + g.timeout_ns;
			}
		}
		uint64_t wait_ns = g.timeout_ns + 20ull * sz;
		unsigned lost = 0;
		for (uint32_t seq = 0; seq < g.iters; seq++) {
			int attempt = 0;
		resend:
			sbuf[0] = (uint8_t)seq;
			sbuf[1] = (uint8_t)(((index & 0x1F) << 3) | ((attempt > 0) << 2) |
					    ((seq >> 8) & 3));
			if (!attempt)
				stamp[seq] = now_ns();
			send_data(sz, wait_ns);
			uint64_t t0 = now_ns();
			for (;;) {
				struct ibv_wc wc;
				int n = ibv_poll_cq(g.rcq, 1, &wc);
				if (n < 0)
					die("poll receive CQ");
				if (n == 0) {
					if (now_ns() - t0 > wait_ns) {
						lost++;
						lost_total++;
						if (lost > LOSS_LIMIT)
							fail("too many losses in one size (this peer does not abort sizes)");
						attempt++;
						goto resend;
					}
					continue;
				}
				if (wc.status != IBV_WC_SUCCESS) {
					fprintf(stderr, "%s: FAIL: receive completion: %s\n", who,
						ibv_wc_status_str(wc.status));
					return 1;
				}
				post_data_recv();
				uint32_t rseq = rpay[0] | ((uint32_t)(rpay[1] & 3) << 8);
				if (wc.byte_len != sz + (g.ud ? GRH : 0) || (rpay[1] >> 3) != (index & 0x1F) ||
				    rseq != (seq & 0x3FF))
					continue; /* a late answer to an earlier try */
				if (!payload_ok(rpay, sz, index, seq))
					return 1;
				break;
			}
		}
		stamp[g.iters] = now_ns();
		print_row(sz, stamp, g.iters, lat);
		if (lost)
			printf(" (%u lost and re-sent)\n", lost);
	}
	/* Done until DoneAck (at most 8 tries). */
	int acked = 0;
	for (int tries = 0; tries < 8 && !acked; tries++) {
		send_rdv(DONE, 0);
		uint64_t t0 = now_ns();
		while (now_ns() - t0 < g.timeout_ns) {
			if (poll_rdv(&m, &src_qp, &slid) && m.session == g.me.peer_session &&
			    m.kind == DONE_ACK) {
				acked = 1;
				break;
			}
		}
	}
	if (!acked)
		fail("the server never acknowledged Done");
	printf("%s: PASS %s %u sizes, %u iterations each, every answer checked, %lu lost\n", who,
	       transport, nsizes, g.iters, (unsigned long)lost_total);
	return 0;
}

/* Server state between sizes: the size index being run, the previous size (whose last
 * answer the client may ask for again) and the requests answered twice (a lost answer). */
static struct {
	uint32_t index;
	size_t prev_size;
	uint64_t repeats;
} sv;

/* Handles one message of the client's session (or a repeated Hello) on the server: answers
 * Hello, and Barrier(i) for a size already started. Returns the message's kind if the caller
 * must act on it (Barrier for the current size, Done), else 0. Ends the run on what this
 * server cannot follow (the client aborted a size). */
static int server_rdv(const struct msg *m)
{
	if (m->session != g.me.peer_session)
		return 0;
	if (m->kind == HELLO) {
		/* Hellos sent before ours arrived, or our HelloAck was lost. */
		send_rdv(HELLO_ACK, 0);
		return 0;
	}
	if (m->peer_session != g.me.session)
		return 0;
	if (m->kind == BARRIER) {
		if (m->flags & 1)
			fail("the client reset its data QP after aborting a size (this server does not resynchronise)");
		if (m->index < sv.index) {
			send_rdv(BARRIER_ACK, m->index); /* a repeat from an earlier size */
			return 0;
		}
		if (m->index > sv.index)
			fail("the client skipped a size (it aborted one; this server does not resynchronise)");
		return BARRIER;
	}
	if (m->kind == DONE)
		return DONE;
	return 0;
}

/* A data receive completion outside the measured loop: the client asking again for the
 * previous size's last answer (that answer was lost) is answered again; anything else is
 * dropped. */
static void server_stray(struct ibv_wc *wc)
{
	const uint8_t *rpay = g.buf + g.recv_off + (g.ud ? GRH : 0);
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: FAIL: receive completion: %s\n", who,
			ibv_wc_status_str(wc->status));
		exit(1);
	}
	post_data_recv();
	uint32_t last = (g.iters - 1) & 0x3FF;
	uint32_t rseq = rpay[0] | ((uint32_t)(rpay[1] & 3) << 8);
	if (sv.prev_size && sv.index > 0 && wc->byte_len == sv.prev_size + (g.ud ? GRH : 0) &&
	    (rpay[1] >> 3) == ((sv.index - 1) & 0x1F) && rseq == last) {
		uint8_t *sbuf = g.buf + g.send_off;
		sbuf[0] = rpay[0];
		sbuf[1] = rpay[1];
		send_data(sv.prev_size, g.timeout_ns + 20ull * sv.prev_size);
		sv.repeats++;
	}
}

/* Waits (bounded by the peer timeout) for a rendezvous message of kind `want` (BARRIER for
 * the current index, or DONE), answering repeats meanwhile. */
static void server_wait_for(int want, const char *what)
{
	uint64_t t0 = now_ns();
	for (;;) {
		struct msg m;
		uint32_t src_qp;
		uint16_t slid;
		if (poll_rdv(&m, &src_qp, &slid)) {
			int k = server_rdv(&m);
			if (k == want)
				return;
			if (k == DONE)
				fail("the client sent Done before every size ran");
		}
		struct ibv_wc wc;
		int n = ibv_poll_cq(g.rcq, 1, &wc);
		if (n < 0)
			die("poll receive CQ");
		if (n > 0)
			server_stray(&wc);
		if (now_ns() - t0 > g.peer_timeout_ns)
			fail(what);
	}
}

static int run_server(int all, size_t size, const char *transport)
{
	/* The line the runner reads to configure the ibkern client (peer_lid, peer_rdv_qpn). */
	printf("%s: listening on LID 0x%04x rendezvous QPN 0x%06x\n", who, g.lid,
	       g.rdv_qp->qp_num);
	struct msg m;
	uint32_t src_qp;
	uint16_t slid;
	uint64_t start = now_ns();
	for (;;) {
		if (now_ns() - start > g.peer_timeout_ns)
			fail("no Hello from a client (peer not found)");
		if (poll_rdv(&m, &src_qp, &slid) && m.kind == HELLO && m.peer_session == 0)
			break;
	}
	/* Answers carry the Hello's version (and, for version 3, its plan fields). */
	g.me.version = m.version;
	memcpy(g.me.plan, m.plan, sizeof m.plan);
	g.me.peer_session = m.session;
	g.peer_rdv_qpn = src_qp; /* docs/rendezvous.md: answers go to the source QPN */
	if (m.transport != g.me.transport || m.iterations != g.iters || m.size != g.me.size ||
	    (m.version == 3 && m.plan[1] != 1)) {
		/* This server runs the one run of its command line, polling: it refuses another
		 * (an ibkern client prints the reason and goes on with its plan). */
		g.rdv_ah = ah_to(slid);
		send_rdv(REFUSE, REFUSE_UNSUPPORTED);
		usleep(100000); /* let the refusal leave before the QPs go */
		fail("the client asks for another transport, iteration count, size or completion mode (refused)");
	}
	g.peer_qpn = m.qpn;
	g.peer_psn = m.psn;
	if (m.mtu >= IBV_MTU_256 && m.mtu < (uint8_t)g.mtu)
		g.mtu = m.mtu;
	g.me.mtu = (uint8_t)g.mtu; /* the HelloAck carries the agreed MTU */
	printf(" remote address: LID %#06x QPN %#08x PSN %#08x, mtu %d, rendezvous QPN %#08x\n",
	       slid, m.qpn, m.psn, 128 << g.mtu, src_qp);
	g.rdv_ah = ah_to(slid);
	connect_data(slid);
	send_rdv(HELLO_ACK, 0);

	size_t sizes[32];
	unsigned nsizes = size_list(all, size, sizes);
	double *lat = calloc(g.iters, sizeof(double));
	uint64_t *stamp = calloc(g.iters, sizeof(uint64_t));
	if (!lat || !stamp)
		die("out of memory");
	print_header();
	const uint8_t *rpay = g.buf + g.recv_off + (g.ud ? GRH : 0);
	uint8_t *sbuf = g.buf + g.send_off;
	for (uint32_t index = 0; index < nsizes; index++) {
		size_t sz = sizes[index];
		sv.index = index;
		/* Receives are always posted, so the barrier can be answered at once. */
		server_wait_for(BARRIER, "no Barrier from the client (peer lost)");
		send_rdv(BARRIER_ACK, index);
		/* The send buffer held the previous size's answer until the client moved on. */
		fill_pattern(sz, index);
		uint64_t wait_ns = g.timeout_ns + 20ull * sz, heard = now_ns(), t0 = heard;
		uint32_t expected = 0;
		while (expected < g.iters) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(g.rcq, 1, &wc);
			if (n < 0)
				die("poll receive CQ");
			if (n == 0) {
				if (now_ns() - t0 > wait_ns) {
					/* Silence: a lost BarrierAck (answer again) or the client gone. */
					t0 = now_ns();
					while (poll_rdv(&m, &src_qp, &slid)) {
						int k = server_rdv(&m);
						if (k == BARRIER)
							send_rdv(BARRIER_ACK, index);
						else if (k == DONE)
							fail("the client sent Done before every size ran");
					}
				}
				if (now_ns() - heard > g.peer_timeout_ns)
					fail("the client went silent in the middle of a size (peer lost)");
				continue;
			}
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "%s: FAIL: receive completion: %s\n", who,
					ibv_wc_status_str(wc.status));
				return 1;
			}
			post_data_recv();
			heard = t0 = now_ns();
			uint32_t rseq = rpay[0] | ((uint32_t)(rpay[1] & 3) << 8);
			int fresh = wc.byte_len == sz + (g.ud ? GRH : 0) &&
				    (rpay[1] >> 3) == (index & 0x1F);
			if (fresh && rseq == (expected & 0x3FF)) {
				if (!payload_ok(rpay, sz, index, expected))
					return 1;
				stamp[expected] = now_ns();
			} else if (fresh && expected > 0 && rseq == ((expected - 1) & 0x3FF)) {
				sv.repeats++; /* our answer was lost: answer again */
			} else {
				continue; /* a leftover of an earlier try or size */
			}
			sbuf[0] = rpay[0];
			sbuf[1] = rpay[1];
			send_data(sz, wait_ns);
			if (rseq == (expected & 0x3FF))
				expected++;
		}
		sv.prev_size = sz;
		sv.index = index + 1;
		/* Intervals between successive answers: iters - 1 round trips. */
		print_row(sz, stamp, g.iters - 1, lat);
	}
	/* Done (the client's last answer and Barriers may still be asked again), DoneAck,
	 * then a short linger answering a repeated Done (our DoneAck was lost). */
	server_wait_for(DONE, "no Done from the client (peer lost)");
	send_rdv(DONE_ACK, 0);
	uint64_t t0 = now_ns();
	while (now_ns() - t0 < g.timeout_ns + g.timeout_ns / 2) {
		if (poll_rdv(&m, &src_qp, &slid) && server_rdv(&m) == DONE)
			send_rdv(DONE_ACK, 0);
	}
	printf("%s: PASS %s %u sizes, %u iterations each, every request checked, %lu "
	       "answered twice\n",
	       who, transport, nsizes, g.iters, (unsigned long)sv.repeats);
	return 0;
}
