//go:build verbsabi && linux && cgo

package abicheck

/*
#cgo CFLAGS: -I${SRCDIR}/..
#include <stddef.h>
#include <infiniband/verbs.h>
#include "abi.h"

struct vchk_entry {
	const char *name;
	int prefix;                 // ours may be a prefix: sizeof(ours) <= sizeof(theirs)
	unsigned long long ours, theirs;
};

#define FSZ(T, f) sizeof(((T *)0)->f)
// Whole-struct size: must be equal (full) or ours <= theirs (prefix).
#define SZ(O, T)       { "sizeof " #T, 0, sizeof(O), sizeof(T) }
#define SZP(O, T)      { "sizeof " #T " (prefix)", 1, sizeof(O), sizeof(T) }
#define AL(O, T)       { "alignof " #T, 0, _Alignof(O), _Alignof(T) }
// A field: its offset and its size.
#define F(O, of, T, tf) \
	{ #T "." #tf " offset", 0, offsetof(O, of), offsetof(T, tf) }, \
	{ #T "." #tf " size", 0, FSZ(O, of), FSZ(T, tf) }

static const struct vchk_entry vchk_table[] = {
	SZ(struct gxv_gid, union ibv_gid),
	AL(struct gxv_gid, union ibv_gid),
	F(struct gxv_gid, raw, union ibv_gid, raw),

	SZ(struct gxv_device_attr, struct ibv_device_attr),
	F(struct gxv_device_attr, fw_ver, struct ibv_device_attr, fw_ver),
	F(struct gxv_device_attr, node_guid, struct ibv_device_attr, node_guid),
	F(struct gxv_device_attr, sys_image_guid, struct ibv_device_attr, sys_image_guid),
	F(struct gxv_device_attr, max_mr_size, struct ibv_device_attr, max_mr_size),
	F(struct gxv_device_attr, page_size_cap, struct ibv_device_attr, page_size_cap),
	F(struct gxv_device_attr, vendor_id, struct ibv_device_attr, vendor_id),
	F(struct gxv_device_attr, vendor_part_id, struct ibv_device_attr, vendor_part_id),
	F(struct gxv_device_attr, hw_ver, struct ibv_device_attr, hw_ver),
	F(struct gxv_device_attr, max_qp, struct ibv_device_attr, max_qp),
	F(struct gxv_device_attr, max_qp_wr, struct ibv_device_attr, max_qp_wr),
	F(struct gxv_device_attr, device_cap_flags, struct ibv_device_attr, device_cap_flags),
	F(struct gxv_device_attr, max_sge, struct ibv_device_attr, max_sge),
	F(struct gxv_device_attr, max_sge_rd, struct ibv_device_attr, max_sge_rd),
	F(struct gxv_device_attr, max_cq, struct ibv_device_attr, max_cq),
	F(struct gxv_device_attr, max_cqe, struct ibv_device_attr, max_cqe),
	F(struct gxv_device_attr, max_mr, struct ibv_device_attr, max_mr),
	F(struct gxv_device_attr, max_pd, struct ibv_device_attr, max_pd),
	F(struct gxv_device_attr, max_qp_rd_atom, struct ibv_device_attr, max_qp_rd_atom),
	F(struct gxv_device_attr, max_qp_init_rd_atom, struct ibv_device_attr, max_qp_init_rd_atom),
	F(struct gxv_device_attr, atomic_cap, struct ibv_device_attr, atomic_cap),
	F(struct gxv_device_attr, max_srq, struct ibv_device_attr, max_srq),
	F(struct gxv_device_attr, max_pkeys, struct ibv_device_attr, max_pkeys),
	F(struct gxv_device_attr, phys_port_cnt, struct ibv_device_attr, phys_port_cnt),

	SZ(struct gxv_port_attr, struct ibv_port_attr),
	F(struct gxv_port_attr, state, struct ibv_port_attr, state),
	F(struct gxv_port_attr, max_mtu, struct ibv_port_attr, max_mtu),
	F(struct gxv_port_attr, active_mtu, struct ibv_port_attr, active_mtu),
	F(struct gxv_port_attr, gid_tbl_len, struct ibv_port_attr, gid_tbl_len),
	F(struct gxv_port_attr, port_cap_flags, struct ibv_port_attr, port_cap_flags),
	F(struct gxv_port_attr, max_msg_sz, struct ibv_port_attr, max_msg_sz),
	F(struct gxv_port_attr, pkey_tbl_len, struct ibv_port_attr, pkey_tbl_len),
	F(struct gxv_port_attr, lid, struct ibv_port_attr, lid),
	F(struct gxv_port_attr, sm_lid, struct ibv_port_attr, sm_lid),
	F(struct gxv_port_attr, lmc, struct ibv_port_attr, lmc),
	F(struct gxv_port_attr, active_width, struct ibv_port_attr, active_width),
	F(struct gxv_port_attr, active_speed, struct ibv_port_attr, active_speed),
	F(struct gxv_port_attr, phys_state, struct ibv_port_attr, phys_state),
	F(struct gxv_port_attr, link_layer, struct ibv_port_attr, link_layer),
	F(struct gxv_port_attr, flags, struct ibv_port_attr, flags),
	F(struct gxv_port_attr, port_cap_flags2, struct ibv_port_attr, port_cap_flags2),

	SZ(struct gxv_context_ops, struct ibv_context_ops),
	F(struct gxv_context_ops, poll_cq, struct ibv_context_ops, poll_cq),
	F(struct gxv_context_ops, req_notify_cq, struct ibv_context_ops, req_notify_cq),
	F(struct gxv_context_ops, post_send, struct ibv_context_ops, post_send),
	F(struct gxv_context_ops, post_recv, struct ibv_context_ops, post_recv),

	SZP(struct gxv_context, struct ibv_context),
	F(struct gxv_context, device, struct ibv_context, device),
	F(struct gxv_context, ops, struct ibv_context, ops),
	F(struct gxv_context, cmd_fd, struct ibv_context, cmd_fd),
	F(struct gxv_context, async_fd, struct ibv_context, async_fd),
	F(struct gxv_context, num_comp_vectors, struct ibv_context, num_comp_vectors),

	SZ(struct gxv_comp_channel, struct ibv_comp_channel),
	F(struct gxv_comp_channel, context, struct ibv_comp_channel, context),
	F(struct gxv_comp_channel, fd, struct ibv_comp_channel, fd),
	F(struct gxv_comp_channel, refcnt, struct ibv_comp_channel, refcnt),

	SZP(struct gxv_cq, struct ibv_cq),
	F(struct gxv_cq, context, struct ibv_cq, context),
	F(struct gxv_cq, channel, struct ibv_cq, channel),
	F(struct gxv_cq, cq_context, struct ibv_cq, cq_context),
	F(struct gxv_cq, handle, struct ibv_cq, handle),
	F(struct gxv_cq, cqe, struct ibv_cq, cqe),

	SZ(struct gxv_mr, struct ibv_mr),
	F(struct gxv_mr, context, struct ibv_mr, context),
	F(struct gxv_mr, pd, struct ibv_mr, pd),
	F(struct gxv_mr, addr, struct ibv_mr, addr),
	F(struct gxv_mr, length, struct ibv_mr, length),
	F(struct gxv_mr, handle, struct ibv_mr, handle),
	F(struct gxv_mr, lkey, struct ibv_mr, lkey),
	F(struct gxv_mr, rkey, struct ibv_mr, rkey),

	SZP(struct gxv_qp, struct ibv_qp),
	F(struct gxv_qp, context, struct ibv_qp, context),
	F(struct gxv_qp, qp_context, struct ibv_qp, qp_context),
	F(struct gxv_qp, pd, struct ibv_qp, pd),
	F(struct gxv_qp, send_cq, struct ibv_qp, send_cq),
	F(struct gxv_qp, recv_cq, struct ibv_qp, recv_cq),
	F(struct gxv_qp, srq, struct ibv_qp, srq),
	F(struct gxv_qp, handle, struct ibv_qp, handle),
	F(struct gxv_qp, qp_num, struct ibv_qp, qp_num),
	F(struct gxv_qp, state, struct ibv_qp, state),
	F(struct gxv_qp, qp_type, struct ibv_qp, qp_type),

	SZ(struct gxv_qp_cap, struct ibv_qp_cap),
	F(struct gxv_qp_cap, max_send_wr, struct ibv_qp_cap, max_send_wr),
	F(struct gxv_qp_cap, max_recv_wr, struct ibv_qp_cap, max_recv_wr),
	F(struct gxv_qp_cap, max_send_sge, struct ibv_qp_cap, max_send_sge),
	F(struct gxv_qp_cap, max_recv_sge, struct ibv_qp_cap, max_recv_sge),
	F(struct gxv_qp_cap, max_inline_data, struct ibv_qp_cap, max_inline_data),

	SZ(struct gxv_qp_init_attr, struct ibv_qp_init_attr),
	F(struct gxv_qp_init_attr, qp_context, struct ibv_qp_init_attr, qp_context),
	F(struct gxv_qp_init_attr, send_cq, struct ibv_qp_init_attr, send_cq),
	F(struct gxv_qp_init_attr, recv_cq, struct ibv_qp_init_attr, recv_cq),
	F(struct gxv_qp_init_attr, srq, struct ibv_qp_init_attr, srq),
	F(struct gxv_qp_init_attr, cap, struct ibv_qp_init_attr, cap),
	F(struct gxv_qp_init_attr, qp_type, struct ibv_qp_init_attr, qp_type),
	F(struct gxv_qp_init_attr, sq_sig_all, struct ibv_qp_init_attr, sq_sig_all),

	SZ(struct gxv_global_route, struct ibv_global_route),
	F(struct gxv_global_route, dgid, struct ibv_global_route, dgid),
	F(struct gxv_global_route, flow_label, struct ibv_global_route, flow_label),
	F(struct gxv_global_route, sgid_index, struct ibv_global_route, sgid_index),
	F(struct gxv_global_route, hop_limit, struct ibv_global_route, hop_limit),
	F(struct gxv_global_route, traffic_class, struct ibv_global_route, traffic_class),

	SZ(struct gxv_ah_attr, struct ibv_ah_attr),
	F(struct gxv_ah_attr, grh, struct ibv_ah_attr, grh),
	F(struct gxv_ah_attr, dlid, struct ibv_ah_attr, dlid),
	F(struct gxv_ah_attr, sl, struct ibv_ah_attr, sl),
	F(struct gxv_ah_attr, src_path_bits, struct ibv_ah_attr, src_path_bits),
	F(struct gxv_ah_attr, static_rate, struct ibv_ah_attr, static_rate),
	F(struct gxv_ah_attr, is_global, struct ibv_ah_attr, is_global),
	F(struct gxv_ah_attr, port_num, struct ibv_ah_attr, port_num),

	SZ(struct gxv_qp_attr, struct ibv_qp_attr),
	F(struct gxv_qp_attr, qp_state, struct ibv_qp_attr, qp_state),
	F(struct gxv_qp_attr, cur_qp_state, struct ibv_qp_attr, cur_qp_state),
	F(struct gxv_qp_attr, path_mtu, struct ibv_qp_attr, path_mtu),
	F(struct gxv_qp_attr, path_mig_state, struct ibv_qp_attr, path_mig_state),
	F(struct gxv_qp_attr, qkey, struct ibv_qp_attr, qkey),
	F(struct gxv_qp_attr, rq_psn, struct ibv_qp_attr, rq_psn),
	F(struct gxv_qp_attr, sq_psn, struct ibv_qp_attr, sq_psn),
	F(struct gxv_qp_attr, dest_qp_num, struct ibv_qp_attr, dest_qp_num),
	F(struct gxv_qp_attr, qp_access_flags, struct ibv_qp_attr, qp_access_flags),
	F(struct gxv_qp_attr, cap, struct ibv_qp_attr, cap),
	F(struct gxv_qp_attr, ah_attr, struct ibv_qp_attr, ah_attr),
	F(struct gxv_qp_attr, alt_ah_attr, struct ibv_qp_attr, alt_ah_attr),
	F(struct gxv_qp_attr, pkey_index, struct ibv_qp_attr, pkey_index),
	F(struct gxv_qp_attr, alt_pkey_index, struct ibv_qp_attr, alt_pkey_index),
	F(struct gxv_qp_attr, en_sqd_async_notify, struct ibv_qp_attr, en_sqd_async_notify),
	F(struct gxv_qp_attr, sq_draining, struct ibv_qp_attr, sq_draining),
	F(struct gxv_qp_attr, max_rd_atomic, struct ibv_qp_attr, max_rd_atomic),
	F(struct gxv_qp_attr, max_dest_rd_atomic, struct ibv_qp_attr, max_dest_rd_atomic),
	F(struct gxv_qp_attr, min_rnr_timer, struct ibv_qp_attr, min_rnr_timer),
	F(struct gxv_qp_attr, port_num, struct ibv_qp_attr, port_num),
	F(struct gxv_qp_attr, timeout, struct ibv_qp_attr, timeout),
	F(struct gxv_qp_attr, retry_cnt, struct ibv_qp_attr, retry_cnt),
	F(struct gxv_qp_attr, rnr_retry, struct ibv_qp_attr, rnr_retry),
	F(struct gxv_qp_attr, alt_port_num, struct ibv_qp_attr, alt_port_num),
	F(struct gxv_qp_attr, alt_timeout, struct ibv_qp_attr, alt_timeout),
	F(struct gxv_qp_attr, rate_limit, struct ibv_qp_attr, rate_limit),

	SZ(struct gxv_sge, struct ibv_sge),
	F(struct gxv_sge, addr, struct ibv_sge, addr),
	F(struct gxv_sge, length, struct ibv_sge, length),
	F(struct gxv_sge, lkey, struct ibv_sge, lkey),

	SZ(struct gxv_send_wr, struct ibv_send_wr),
	AL(struct gxv_send_wr, struct ibv_send_wr),
	F(struct gxv_send_wr, wr_id, struct ibv_send_wr, wr_id),
	F(struct gxv_send_wr, next, struct ibv_send_wr, next),
	F(struct gxv_send_wr, sg_list, struct ibv_send_wr, sg_list),
	F(struct gxv_send_wr, num_sge, struct ibv_send_wr, num_sge),
	F(struct gxv_send_wr, opcode, struct ibv_send_wr, opcode),
	F(struct gxv_send_wr, send_flags, struct ibv_send_wr, send_flags),
	F(struct gxv_send_wr, imm_data, struct ibv_send_wr, imm_data),
	F(struct gxv_send_wr, wr, struct ibv_send_wr, wr),
	F(struct gxv_send_wr, wr.remote_addr, struct ibv_send_wr, wr.rdma.remote_addr),
	F(struct gxv_send_wr, wr.rkey, struct ibv_send_wr, wr.rdma.rkey),
	F(struct gxv_send_wr, remote_srqn, struct ibv_send_wr, qp_type.xrc.remote_srqn),
	F(struct gxv_send_wr, ext_, struct ibv_send_wr, bind_mw),

	SZ(struct gxv_recv_wr, struct ibv_recv_wr),
	F(struct gxv_recv_wr, wr_id, struct ibv_recv_wr, wr_id),
	F(struct gxv_recv_wr, next, struct ibv_recv_wr, next),
	F(struct gxv_recv_wr, sg_list, struct ibv_recv_wr, sg_list),
	F(struct gxv_recv_wr, num_sge, struct ibv_recv_wr, num_sge),

	SZ(struct gxv_wc, struct ibv_wc),
	AL(struct gxv_wc, struct ibv_wc),
	F(struct gxv_wc, wr_id, struct ibv_wc, wr_id),
	F(struct gxv_wc, status, struct ibv_wc, status),
	F(struct gxv_wc, opcode, struct ibv_wc, opcode),
	F(struct gxv_wc, vendor_err, struct ibv_wc, vendor_err),
	F(struct gxv_wc, byte_len, struct ibv_wc, byte_len),
	F(struct gxv_wc, imm_data, struct ibv_wc, imm_data),
	F(struct gxv_wc, qp_num, struct ibv_wc, qp_num),
	F(struct gxv_wc, src_qp, struct ibv_wc, src_qp),
	F(struct gxv_wc, wc_flags, struct ibv_wc, wc_flags),
	F(struct gxv_wc, pkey_index, struct ibv_wc, pkey_index),
	F(struct gxv_wc, slid, struct ibv_wc, slid),
	F(struct gxv_wc, sl, struct ibv_wc, sl),
	F(struct gxv_wc, dlid_path_bits, struct ibv_wc, dlid_path_bits),

	// enums declared as fixed-size integers in abi.h
	{ "sizeof enum ibv_wc_status", 0, sizeof(uint32_t), sizeof(enum ibv_wc_status) },
	{ "sizeof enum ibv_qp_state", 0, sizeof(uint32_t), sizeof(enum ibv_qp_state) },
	{ "sizeof enum ibv_mtu", 0, sizeof(uint32_t), sizeof(enum ibv_mtu) },
};

static int vchk_count(void) { return sizeof(vchk_table) / sizeof(vchk_table[0]); }
static const struct vchk_entry *vchk_at(int i) { return &vchk_table[i]; }

// Constants the Go side of internal/verbs declares.
struct vchk_const { const char *name; long long value; };
#define K(c) { #c, (long long)(c) }
static const struct vchk_const vchk_consts[] = {
	K(IBV_ACCESS_LOCAL_WRITE), K(IBV_ACCESS_REMOTE_WRITE), K(IBV_ACCESS_REMOTE_READ),
	K(IBV_ACCESS_REMOTE_ATOMIC), K(IBV_ACCESS_RELAXED_ORDERING),
	K(IBV_MTU_256), K(IBV_MTU_512), K(IBV_MTU_1024), K(IBV_MTU_2048), K(IBV_MTU_4096),
	K(IBV_PORT_NOP), K(IBV_PORT_DOWN), K(IBV_PORT_INIT), K(IBV_PORT_ARMED), K(IBV_PORT_ACTIVE), K(IBV_PORT_ACTIVE_DEFER),
	K(IBV_LINK_LAYER_UNSPECIFIED), K(IBV_LINK_LAYER_INFINIBAND), K(IBV_LINK_LAYER_ETHERNET),
	K(IBV_QPT_RC), K(IBV_QPT_UC), K(IBV_QPT_UD),
	K(IBV_QPS_RESET), K(IBV_QPS_INIT), K(IBV_QPS_RTR), K(IBV_QPS_RTS), K(IBV_QPS_SQD), K(IBV_QPS_SQE), K(IBV_QPS_ERR), K(IBV_QPS_UNKNOWN),
	K(IBV_QP_STATE), K(IBV_QP_CUR_STATE), K(IBV_QP_ACCESS_FLAGS), K(IBV_QP_PKEY_INDEX), K(IBV_QP_PORT), K(IBV_QP_QKEY),
	K(IBV_QP_AV), K(IBV_QP_PATH_MTU), K(IBV_QP_TIMEOUT), K(IBV_QP_RETRY_CNT), K(IBV_QP_RNR_RETRY), K(IBV_QP_RQ_PSN),
	K(IBV_QP_MAX_QP_RD_ATOMIC), K(IBV_QP_MIN_RNR_TIMER), K(IBV_QP_SQ_PSN), K(IBV_QP_MAX_DEST_RD_ATOMIC), K(IBV_QP_CAP), K(IBV_QP_DEST_QPN),
	K(IBV_WR_RDMA_WRITE), K(IBV_WR_RDMA_WRITE_WITH_IMM), K(IBV_WR_SEND), K(IBV_WR_SEND_WITH_IMM), K(IBV_WR_RDMA_READ),
	K(IBV_SEND_FENCE), K(IBV_SEND_SIGNALED), K(IBV_SEND_SOLICITED), K(IBV_SEND_INLINE),
	K(IBV_WC_SEND), K(IBV_WC_RDMA_WRITE), K(IBV_WC_RDMA_READ), K(IBV_WC_COMP_SWAP), K(IBV_WC_FETCH_ADD), K(IBV_WC_RECV), K(IBV_WC_RECV_RDMA_WITH_IMM),
	K(IBV_WC_GRH), K(IBV_WC_WITH_IMM),
	K(IBV_WC_SUCCESS), K(IBV_WC_LOC_LEN_ERR), K(IBV_WC_LOC_QP_OP_ERR), K(IBV_WC_LOC_EEC_OP_ERR), K(IBV_WC_LOC_PROT_ERR),
	K(IBV_WC_WR_FLUSH_ERR), K(IBV_WC_MW_BIND_ERR), K(IBV_WC_BAD_RESP_ERR), K(IBV_WC_LOC_ACCESS_ERR), K(IBV_WC_REM_INV_REQ_ERR),
	K(IBV_WC_REM_ACCESS_ERR), K(IBV_WC_REM_OP_ERR), K(IBV_WC_RETRY_EXC_ERR), K(IBV_WC_RNR_RETRY_EXC_ERR), K(IBV_WC_LOC_RDD_VIOL_ERR),
	K(IBV_WC_REM_INV_RD_REQ_ERR), K(IBV_WC_REM_ABORT_ERR), K(IBV_WC_INV_EECN_ERR), K(IBV_WC_INV_EEC_STATE_ERR), K(IBV_WC_FATAL_ERR),
	K(IBV_WC_RESP_TIMEOUT_ERR), K(IBV_WC_GENERAL_ERR), K(IBV_WC_TM_ERR), K(IBV_WC_TM_RNDV_INCOMPLETE),
};
static int vchk_nconsts(void) { return sizeof(vchk_consts) / sizeof(vchk_consts[0]); }
static const struct vchk_const *vchk_const_at(int i) { return &vchk_consts[i]; }
*/
import "C"

// Entry is one checked quantity: what abi.h (Ours) and the real header
// (Theirs) say. Prefix entries are struct sizes where abi.h declares only a
// leading part: Ours must not exceed Theirs.
type Entry struct {
	Name         string
	Prefix       bool
	Ours, Theirs uint64
}

// OK reports whether the entry agrees.
func (e Entry) OK() bool {
	if e.Prefix {
		return e.Ours <= e.Theirs
	}
	return e.Ours == e.Theirs
}

// Layouts returns every size, offset and alignment entry.
func Layouts() []Entry {
	n := int(C.vchk_count())
	out := make([]Entry, 0, n)
	for i := 0; i < n; i++ {
		e := C.vchk_at(C.int(i))
		out = append(out, Entry{Name: C.GoString(e.name), Prefix: e.prefix != 0, Ours: uint64(e.ours), Theirs: uint64(e.theirs)})
	}
	return out
}

// Constants returns the header's value of every constant package verbs
// declares, by C name.
func Constants() map[string]int64 {
	n := int(C.vchk_nconsts())
	m := make(map[string]int64, n)
	for i := 0; i < n; i++ {
		k := C.vchk_const_at(C.int(i))
		m[C.GoString(k.name)] = int64(k.value)
	}
	return m
}

// Mismatches returns the entries that disagree.
func Mismatches(es []Entry) []Entry {
	var bad []Entry
	for _, e := range es {
		if !e.OK() {
			bad = append(bad, e)
		}
	}
	return bad
}
