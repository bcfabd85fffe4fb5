/*
 * The rdma-core side of docs/performance.md's comparison: rdma-core's mlx4 provider
 * (mlx4_post_send, mlx4_poll_cq, built from its own source by run.sh) posting and polling on a
 * QP and CQs that this program makes in ordinary memory. No device: the UAR page and the
 * BlueFlame page are buffers, and the program writes the CQEs a device would. Each measured
 * call goes through a noinline wrapper (m_*) whose inclusive instruction count callgrind
 * reports; run.sh divides by the call counts printed here.
 *
 * Workloads (the same as drivers/mlx4/examples/hotpath.rs):
 *   bw: RC QP, 64-byte SQ slots (max_send_wr 128, one SGE, no inline: what ib_send_bw makes),
 *       lists of 32 SENDs of one 64-byte gather entry, the last signaled; per list one
 *       ibv_poll_cq of 16 entries taking the list's one CQE, and one on the empty CQ.
 *   ud: UD QP, 512-byte SQ slots (max_inline 188), a signaled 2-byte inline SEND through
 *       BlueFlame, ibv_poll_cq(1) for its send CQE and for a receive CQE.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>

#include "mlx4.h"

#define BW_LIST 32
#define BW_BATCH 16

static struct mlx4_context ctx;
static uint32_t uar_page[1024] __attribute__((aligned(4096)));
static uint64_t bf_page[512] __attribute__((aligned(4096)));

static void *zalloc(size_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);

	if (!p) {
		fprintf(stderr, "harness: out of memory\n");
		exit(2);
	}
	memset(p, 0, (n + 4095) & ~(size_t)4095);
	return p;
}

/* A QP as mlx4_create_qp would leave it after RTS, for the fields the data path reads. */
static struct mlx4_qp *make_qp(enum ibv_qp_type type, uint32_t qpn, int sq_shift, int sq_cnt,
			       int spare, int rq_cnt, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct mlx4_qp *qp = zalloc(sizeof(*qp));
	int rq_shift = 4;

	qp->verbs_qp.qp.context = &ctx.ibv_ctx.context;
	qp->verbs_qp.qp.qp_type = type;
	qp->verbs_qp.qp.qp_num = qpn;
	qp->verbs_qp.qp.send_cq = scq;
	qp->verbs_qp.qp.recv_cq = rcq;
	qp->verbs_qp.qp.state = IBV_QPS_RTS;
	qp->sq.wqe_cnt = sq_cnt;
	qp->sq.wqe_shift = sq_shift;
	qp->sq.max_gs = 1;
	qp->sq_spare_wqes = spare;
	qp->sq.max_post = sq_cnt - spare;
	qp->rq.wqe_cnt = rq_cnt;
	qp->rq.wqe_shift = rq_shift;
	qp->rq.max_gs = 1;
	qp->rq.max_post = rq_cnt;
	qp->sq.offset = 0;
	qp->rq.offset = sq_cnt << sq_shift;
	qp->buf_size = (sq_cnt << sq_shift) + (rq_cnt << rq_shift);
	qp->buf.buf = zalloc(qp->buf_size);
	qp->buf.length = qp->buf_size;
	qp->sq.wrid = zalloc(sq_cnt * sizeof(uint64_t));
	qp->rq.wrid = zalloc(rq_cnt * sizeof(uint64_t));
	qp->db = zalloc(64);
	qp->max_inline_data = type == IBV_QPT_UD ? 188 : 0;
	qp->doorbell_qpn = htobe32(qpn << 8);
	qp->sq_signal_bits = 0;
	qp->link_layer = IBV_LINK_LAYER_INFINIBAND;
	qp->type = MLX4_RSC_TYPE_QP;
	qp->qpn_cache = qpn;
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	mlx4_init_qp_indices(qp);
	mlx4_qp_init_sq_ownership(qp);
	ctx.qp_table[(qpn & (ctx.num_qps - 1)) >> ctx.qp_table_shift].refcnt = 1;
	ctx.qp_table[(qpn & (ctx.num_qps - 1)) >> ctx.qp_table_shift].table[qpn & ctx.qp_table_mask] = qp;
	return qp;
}

static struct mlx4_cq *make_cq(int entries)
{
	struct mlx4_cq *cq = zalloc(sizeof(*cq));
	int i;

	cq->verbs_cq.cq.context = &ctx.ibv_ctx.context;
	cq->verbs_cq.cq.cqe = entries - 1;
	cq->cqe_size = 32;
	cq->buf.buf = zalloc(entries * 32);
	cq->buf.length = entries * 32;
	cq->set_ci_db = zalloc(64);
	cq->arm_db = cq->set_ci_db + 1;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	/* Hardware-owned in pass 0 (owner bit 1), as the device initialises them. */
	for (i = 0; i < entries; i++)
		((struct mlx4_cqe *)cq->buf.buf)[i].owner_sr_opcode = MLX4_CQE_OWNER_MASK;
	return cq;
}

/* What the device writes: a successful CQE at the CQ's producer position `prod`. */
static void device_cqe(struct mlx4_cq *cq, uint32_t prod, uint32_t qpn, int send,
		       uint16_t wqe_index, uint32_t byte_cnt)
{
	int n = cq->verbs_cq.cq.cqe + 1;
	struct mlx4_cqe *cqe = (struct mlx4_cqe *)cq->buf.buf + (prod & (n - 1));

	memset(cqe, 0, sizeof(*cqe));
	cqe->vlan_my_qpn = htobe32(qpn);
	cqe->byte_cnt = htobe32(byte_cnt);
	cqe->wqe_index = htobe16(wqe_index);
	cqe->g_mlpath_rqpn = htobe32(0x48);
	cqe->rlid = htobe16(2);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	cqe->owner_sr_opcode = (send ? (MLX4_CQE_IS_SEND_MASK | MLX4_OPCODE_SEND) : 0 /* RECV SEND */) |
			       ((prod & n) ? MLX4_CQE_OWNER_MASK : 0);
}

__attribute__((noinline)) int m_post_list(struct ibv_qp *qp, struct ibv_send_wr *wr,
					   struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

__attribute__((noinline)) int m_poll_list(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, BW_BATCH, wc);
}

__attribute__((noinline)) int m_poll_empty(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, BW_BATCH, wc);
}

__attribute__((noinline)) int m_ud_post(struct ibv_qp *qp, struct ibv_send_wr *wr,
					 struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

__attribute__((noinline)) int m_ud_poll_send(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

__attribute__((noinline)) int m_ud_poll_recv(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "harness: %s\n", what);
		exit(1);
	}
}

static void run_bw(int warmup, int lists)
{
	struct mlx4_cq *scq = make_cq(256), *rcq = make_cq(256);
	/* RC, max_send_wr 128, one SGE: 64-byte slots, spare (2048 >> 6) + 1 = 33, 256 slots. */
	struct mlx4_qp *qp = make_qp(IBV_QPT_RC, 0x48, 6, 256, 33, 256,
				     &scq->verbs_cq.cq, &rcq->verbs_cq.cq);
	static char payload[64];
	struct ibv_sge sge = { .addr = (uintptr_t)payload, .length = 64, .lkey = 0x1234 };
	struct ibv_send_wr wr[BW_LIST], *bad;
	struct ibv_wc wc[BW_BATCH];
	uint32_t prod = 0;
	int l, i;

	memset(wr, 0, sizeof(wr));
	for (i = 0; i < BW_LIST; i++) {
		wr[i].wr_id = i;
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = i == BW_LIST - 1 ? IBV_SEND_SIGNALED : 0;
		wr[i].next = i == BW_LIST - 1 ? NULL : &wr[i + 1];
	}
	for (l = 0; l < warmup + lists; l++) {
		int measured = l >= warmup;
		unsigned head = qp->sq.head;
		int r;

		for (i = 0; i < BW_LIST; i++)
			wr[i].wr_id = (uint64_t)l * BW_LIST + i;
		r = measured ? m_post_list(&qp->verbs_qp.qp, wr, &bad)
			     : ibv_post_send(&qp->verbs_qp.qp, wr, &bad);
		check(r == 0 && qp->sq.head == head + BW_LIST, "list post");
		check(uar_page[MLX4_SEND_DOORBELL / 4] == qp->doorbell_qpn, "send doorbell rung");
		uar_page[MLX4_SEND_DOORBELL / 4] = 0;
		device_cqe(scq, prod++, 0x48, 1, (head + BW_LIST - 1) & 0xffff, 0);
		r = measured ? m_poll_list(&scq->verbs_cq.cq, wc)
			     : ibv_poll_cq(&scq->verbs_cq.cq, BW_BATCH, wc);
		check(r == 1 && wc[0].status == IBV_WC_SUCCESS &&
		      wc[0].wr_id == (uint64_t)l * BW_LIST + BW_LIST - 1, "list completion");
		if (measured)
			check(m_poll_empty(&scq->verbs_cq.cq, wc) == 0, "empty poll");
	}
	printf("bw lists %d\n", lists);
}

static void run_ud(int warmup, int iters)
{
	struct mlx4_cq *scq = make_cq(16), *rcq = make_cq(4096);
	/* UD, max_inline 188: 512-byte slots, spare (2048 >> 9) + 1 = 5, 32 slots (16 + 5). */
	struct mlx4_qp *qp = make_qp(IBV_QPT_UD, 0x49, 9, 32, 5, 4096,
				     &scq->verbs_cq.cq, &rcq->verbs_cq.cq);
	struct mlx4_ah *ah = zalloc(sizeof(*ah));
	char msg[2] = { 0x5a, (char)0xa5 };
	struct ibv_sge sge = { .addr = (uintptr_t)msg, .length = 2, .lkey = 0 };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	uint32_t sprod = 0, rprod = 0;
	int i;

	ah->ibv_ah.context = &ctx.ibv_ctx.context;
	ah->av.port_pd = htobe32((1u << 24) | 1);
	ah->av.dlid = htobe16(2);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr.wr.ud.ah = &ah->ibv_ah;
	wr.wr.ud.remote_qpn = 0x4a;
	wr.wr.ud.remote_qkey = 0x11111111;
	/* Receives posted ahead (not measured). */
	for (i = 0; i < warmup + iters; i++)
		qp->rq.wrid[i & (qp->rq.wqe_cnt - 1)] = 100 + i;
	qp->rq.head = warmup + iters;
	for (i = 0; i < warmup + iters; i++) {
		int measured = i >= warmup;
		unsigned head = qp->sq.head;
		int r;

		r = measured ? m_ud_post(&qp->verbs_qp.qp, &wr, &bad)
			     : ibv_post_send(&qp->verbs_qp.qp, &wr, &bad);
		check(r == 0 && qp->sq.head == head + 1, "UD post");
		device_cqe(scq, sprod++, 0x49, 1, head & 0xffff, 0);
		r = measured ? m_ud_poll_send(&scq->verbs_cq.cq, &wc)
			     : ibv_poll_cq(&scq->verbs_cq.cq, 1, &wc);
		check(r == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "UD send completion");
		device_cqe(rcq, rprod++, 0x49, 0, 0, 42);
		r = measured ? m_ud_poll_recv(&rcq->verbs_cq.cq, &wc)
			     : ibv_poll_cq(&rcq->verbs_cq.cq, 1, &wc);
		check(r == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 42 &&
		      wc.wr_id == (uint64_t)(100 + i), "UD receive completion");
	}
	printf("ud iterations %d\n", iters);
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 0;
	int i;

	if (argc < 2 || (strcmp(argv[1], "bw") && strcmp(argv[1], "ud"))) {
		fprintf(stderr, "usage: harness bw|ud [count]\n");
		return 2;
	}
	ctx.uar = uar_page;
	ctx.bf_page = bf_page;
	ctx.bf_buf_size = 256;
	ctx.bf_offset = 0;
	pthread_spin_init(&ctx.bf_lock, PTHREAD_PROCESS_PRIVATE);
	ctx.num_qps = 1 << 17;
	ctx.qp_table_shift = 17 - MLX4_QP_TABLE_BITS;
	ctx.qp_table_mask = (1 << ctx.qp_table_shift) - 1;
	for (i = 0; i < MLX4_QP_TABLE_SIZE; i++)
		ctx.qp_table[i].table = zalloc((ctx.qp_table_mask + 1) * sizeof(struct mlx4_qp *));
	ctx.ibv_ctx.context.ops.post_send = mlx4_post_send;
	ctx.ibv_ctx.context.ops.poll_cq = mlx4_poll_cq;
	if (!strcmp(argv[1], "bw"))
		run_bw(20, n > 0 ? n : 300);
	else
		run_ud(300, n > 0 ? n : 1000);
	return 0;
}
