/*
 * abi.h - the part of the libibverbs ABI that gxfer relies on, declared from
 * the documented layout in rdma-core's <infiniband/verbs.h> (x86-64 / LP64).
 *
 * gxfer does not include <infiniband/verbs.h>: it must build without
 * libibverbs-dev. Every type here is prefixed gxv_ so that the ABI check
 * (internal/verbs/abicheck, build tag verbsabi) can include this file next to
 * the real header and compare every size and offset declared here.
 *
 * Kinds of declaration:
 *   full    - gxfer allocates it or libibverbs writes all of it into gxfer's
 *             memory: the size must match the real one exactly.
 *   prefix  - allocated by libibverbs; only the leading fields gxfer reads are
 *             declared (gxfer never allocates or copies one).
 *   opaque  - never dereferenced.
 * Unions are declared as the one member gxfer uses, padded to the union's
 * size, so that cgo can reach the fields by name; the check covers the
 * member's offsets and the union's size.
 */
#ifndef GXFER_VERBS_ABI_H
#define GXFER_VERBS_ABI_H

#include <stddef.h>
#include <stdint.h>

struct gxv_device;  /* opaque */
struct gxv_pd;      /* opaque */
struct gxv_srq;     /* opaque */

/* union ibv_gid { uint8_t raw[16]; struct { __be64 subnet_prefix, interface_id; } global; }  (full) */
struct gxv_gid {
	uint8_t raw[16];
} __attribute__((aligned(8)));

/* struct ibv_device_attr (full: ibv_query_device writes all of it) */
struct gxv_device_attr {
	char fw_ver[64];
	uint64_t node_guid;       /* __be64 */
	uint64_t sys_image_guid;  /* __be64 */
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int max_ee_init_rd_atom;
	uint32_t atomic_cap;      /* enum ibv_atomic_cap */
	int max_ee;
	int max_rdd;
	int max_mw;
	int max_raw_ipv6_qp;
	int max_raw_ethy_qp;
	int max_mcast_grp;
	int max_mcast_qp_attach;
	int max_total_mcast_qp_attach;
	int max_ah;
	int max_fmr;
	int max_map_per_fmr;
	int max_srq;
	int max_srq_wr;
	int max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

/*
 * struct ibv_port_attr (full). gxfer calls the exported ibv_query_port
 * (IBVERBS_1.1), which fills the leading _compat_ibv_port_attr part; the
 * buffer is the full struct, as in the header's ___ibv_query_port.
 */
struct gxv_port_attr {
	uint32_t state;       /* enum ibv_port_state */
	uint32_t max_mtu;     /* enum ibv_mtu */
	uint32_t active_mtu;  /* enum ibv_mtu */
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
	uint8_t flags;
	uint16_t port_cap_flags2;
};

/* struct ibv_context_ops (full; gxfer reads four entries, as the header's inline functions do) */
struct gxv_context_ops {
	void *compat0_10[11];   /* _compat_query_device .. dealloc_mw, _compat_create_cq */
	int (*poll_cq)(void *cq, int num_entries, void *wc);
	int (*req_notify_cq)(void *cq, int solicited_only);
	void *compat13_24[12];  /* _compat_cq_event .. _compat_destroy_qp (incl. post_srq_recv) */
	int (*post_send)(void *qp, void *wr, void **bad_wr);
	int (*post_recv)(void *qp, void *wr, void **bad_wr);
	void *compat27_31[5];   /* _compat_create_ah .. _compat_async_event */
};

/* struct ibv_context (prefix) */
struct gxv_context {
	struct gxv_device *device;
	struct gxv_context_ops ops;
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	/* pthread_mutex_t mutex; void *abi_compat; */
};

/* struct ibv_comp_channel (full) */
struct gxv_comp_channel {
	struct gxv_context *context;
	int fd;
	int refcnt;
};

/* struct ibv_cq (prefix) */
struct gxv_cq {
	struct gxv_context *context;
	struct gxv_comp_channel *channel;
	void *cq_context;
	uint32_t handle;
	int cqe;
	/* pthread_mutex_t mutex; pthread_cond_t cond; uint32_t comp_events_completed, async_events_completed; */
};

/* struct ibv_mr (full) */
struct gxv_mr {
	struct gxv_context *context;
	struct gxv_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

/* struct ibv_qp (prefix) */
struct gxv_qp {
	struct gxv_context *context;
	void *qp_context;
	struct gxv_pd *pd;
	struct gxv_cq *send_cq;
	struct gxv_cq *recv_cq;
	struct gxv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	uint32_t state;    /* enum ibv_qp_state */
	uint32_t qp_type;  /* enum ibv_qp_type */
	/* pthread_mutex_t mutex; pthread_cond_t cond; uint32_t events_completed; */
};

/* struct ibv_qp_cap (full) */
struct gxv_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

/* struct ibv_qp_init_attr (full) */
struct gxv_qp_init_attr {
	void *qp_context;
	struct gxv_cq *send_cq;
	struct gxv_cq *recv_cq;
	struct gxv_srq *srq;
	struct gxv_qp_cap cap;
	uint32_t qp_type;  /* enum ibv_qp_type */
	int sq_sig_all;
};

/* struct ibv_global_route (full) */
struct gxv_global_route {
	struct gxv_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

/* struct ibv_ah_attr (full) */
struct gxv_ah_attr {
	struct gxv_global_route grh;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

/* struct ibv_qp_attr (full) */
struct gxv_qp_attr {
	uint32_t qp_state;        /* enum ibv_qp_state */
	uint32_t cur_qp_state;    /* enum ibv_qp_state */
	uint32_t path_mtu;        /* enum ibv_mtu */
	uint32_t path_mig_state;  /* enum ibv_mig_state */
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct gxv_qp_cap cap;
	struct gxv_ah_attr ah_attr;
	struct gxv_ah_attr alt_ah_attr;
	uint16_t pkey_index;
	uint16_t alt_pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t alt_port_num;
	uint8_t alt_timeout;
	uint32_t rate_limit;
};

/* struct ibv_sge (full) */
struct gxv_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* union ibv_send_wr.wr, as its rdma member { remote_addr; rkey; } padded to the union's size */
struct gxv_send_wr_rdma {
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t pad0_;
	uint64_t pad1_[2];  /* rest of the atomic member, the largest */
};

/* struct ibv_send_wr (full: gxfer allocates the arrays it posts) */
struct gxv_send_wr {
	uint64_t wr_id;
	struct gxv_send_wr *next;
	struct gxv_sge *sg_list;
	int num_sge;
	uint32_t opcode;      /* enum ibv_wr_opcode */
	uint32_t send_flags;  /* enum ibv_send_flags */
	uint32_t imm_data;    /* union { __be32 imm_data; uint32_t invalidate_rkey; } */
	struct gxv_send_wr_rdma wr;
	uint32_t remote_srqn; /* union qp_type { struct { uint32_t remote_srqn; } xrc; } */
	uint64_t ext_[6];     /* anonymous union { bind_mw; tso; } */
};

/* struct ibv_recv_wr (full) */
struct gxv_recv_wr {
	uint64_t wr_id;
	struct gxv_recv_wr *next;
	struct gxv_sge *sg_list;
	int num_sge;
};

/* struct ibv_wc (full: gxfer allocates the array ibv_poll_cq fills) */
struct gxv_wc {
	uint64_t wr_id;
	uint32_t status;      /* enum ibv_wc_status */
	uint32_t opcode;      /* enum ibv_wc_opcode */
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;    /* union { __be32 imm_data; uint32_t invalidated_rkey; } */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

#endif
