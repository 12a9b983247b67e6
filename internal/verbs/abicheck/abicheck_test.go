//go:build verbsabi && linux && cgo

package abicheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
	v "github.com/gxfer/gxfer/internal/verbs"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestLayoutsMatchVerbsHeader fails if any size, offset, field size or
// alignment declared in abi.h differs from <infiniband/verbs.h>.
func TestLayoutsMatchVerbsHeader(t *testing.T) {
	es := Layouts()
	require.Greater(t, len(es), 150, "the table shrank")
	for _, e := range es {
		if e.Prefix {
			assert.LessOrEqualf(t, e.Ours, e.Theirs, "%s: abi.h declares %d bytes, the header has %d", e.Name, e.Ours, e.Theirs)
			continue
		}
		assert.Equalf(t, e.Theirs, e.Ours, "%s: header says %d, abi.h says %d", e.Name, e.Theirs, e.Ours)
	}
	t.Logf("%d layout entries checked", len(es))
}

// TestCheckerCatchesDrift proves a drifted entry is reported.
func TestCheckerCatchesDrift(t *testing.T) {
	es := []Entry{
		{Name: "same", Ours: 8, Theirs: 8},
		{Name: "drift", Ours: 8, Theirs: 16},
		{Name: "prefix ok", Prefix: true, Ours: 8, Theirs: 16},
		{Name: "prefix too long", Prefix: true, Ours: 24, Theirs: 16},
	}
	bad := Mismatches(es)
	require.Len(t, bad, 2)
	assert.Equal(t, "drift", bad[0].Name)
	assert.Equal(t, "prefix too long", bad[1].Name)
}

// goConstants is every constant package verbs declares, by its C name.
func goConstants() map[string]int64 {
	return map[string]int64{
		"IBV_ACCESS_LOCAL_WRITE":      int64(v.AccessLocalWrite),
		"IBV_ACCESS_REMOTE_WRITE":     int64(v.AccessRemoteWrite),
		"IBV_ACCESS_REMOTE_READ":      int64(v.AccessRemoteRead),
		"IBV_ACCESS_REMOTE_ATOMIC":    int64(v.AccessRemoteAtomic),
		"IBV_ACCESS_RELAXED_ORDERING": int64(v.AccessRelaxedOrder),

		"IBV_MTU_256": int64(v.MTU256), "IBV_MTU_512": int64(v.MTU512), "IBV_MTU_1024": int64(v.MTU1024),
		"IBV_MTU_2048": int64(v.MTU2048), "IBV_MTU_4096": int64(v.MTU4096),

		"IBV_PORT_NOP": int64(v.PortNop), "IBV_PORT_DOWN": int64(v.PortDown), "IBV_PORT_INIT": int64(v.PortInit),
		"IBV_PORT_ARMED": int64(v.PortArmed), "IBV_PORT_ACTIVE": int64(v.PortActive),
		"IBV_PORT_ACTIVE_DEFER": int64(v.PortActiveDefer),

		"IBV_LINK_LAYER_UNSPECIFIED": int64(v.LinkLayerUnspecified),
		"IBV_LINK_LAYER_INFINIBAND":  int64(v.LinkLayerInfiniBand),
		"IBV_LINK_LAYER_ETHERNET":    int64(v.LinkLayerEthernet),

		"IBV_QPT_RC": int64(v.QPTypeRC), "IBV_QPT_UC": int64(v.QPTypeUC), "IBV_QPT_UD": int64(v.QPTypeUD),

		"IBV_QPS_RESET": int64(v.QPSReset), "IBV_QPS_INIT": int64(v.QPSInit), "IBV_QPS_RTR": int64(v.QPSRTR),
		"IBV_QPS_RTS": int64(v.QPSRTS), "IBV_QPS_SQD": int64(v.QPSSQD), "IBV_QPS_SQE": int64(v.QPSSQE),
		"IBV_QPS_ERR": int64(v.QPSErr), "IBV_QPS_UNKNOWN": int64(v.QPSUnknown),

		"IBV_QP_STATE": int64(v.QPAttrState), "IBV_QP_CUR_STATE": int64(v.QPAttrCurState),
		"IBV_QP_ACCESS_FLAGS": int64(v.QPAttrAccessFlags), "IBV_QP_PKEY_INDEX": int64(v.QPAttrPKeyIndex),
		"IBV_QP_PORT": int64(v.QPAttrPort), "IBV_QP_QKEY": int64(v.QPAttrQKey), "IBV_QP_AV": int64(v.QPAttrAV),
		"IBV_QP_PATH_MTU": int64(v.QPAttrPathMTU), "IBV_QP_TIMEOUT": int64(v.QPAttrTimeout),
		"IBV_QP_RETRY_CNT": int64(v.QPAttrRetryCnt), "IBV_QP_RNR_RETRY": int64(v.QPAttrRNRRetry),
		"IBV_QP_RQ_PSN": int64(v.QPAttrRQPSN), "IBV_QP_MAX_QP_RD_ATOMIC": int64(v.QPAttrMaxQPRDAtomic),
		"IBV_QP_MIN_RNR_TIMER": int64(v.QPAttrMinRNRTimer), "IBV_QP_SQ_PSN": int64(v.QPAttrSQPSN),
		"IBV_QP_MAX_DEST_RD_ATOMIC": int64(v.QPAttrMaxDestRDAtomic), "IBV_QP_CAP": int64(v.QPAttrCap),
		"IBV_QP_DEST_QPN": int64(v.QPAttrDestQPN),

		"IBV_WR_RDMA_WRITE": int64(v.WRRDMAWrite), "IBV_WR_RDMA_WRITE_WITH_IMM": int64(v.WRRDMAWriteWithImm),
		"IBV_WR_SEND": int64(v.WRSend), "IBV_WR_SEND_WITH_IMM": int64(v.WRSendWithImm),
		"IBV_WR_RDMA_READ": int64(v.WRRDMARead),

		"IBV_SEND_FENCE": int64(v.SendFence), "IBV_SEND_SIGNALED": int64(v.SendSignaled),
		"IBV_SEND_SOLICITED": int64(v.SendSolicited), "IBV_SEND_INLINE": int64(v.SendInline),

		"IBV_WC_SEND": int64(v.WCSend), "IBV_WC_RDMA_WRITE": int64(v.WCRDMAWrite), "IBV_WC_RDMA_READ": int64(v.WCRDMARead),
		"IBV_WC_COMP_SWAP": int64(v.WCCompSwap), "IBV_WC_FETCH_ADD": int64(v.WCFetchAdd), "IBV_WC_RECV": int64(v.WCRecv),
		"IBV_WC_RECV_RDMA_WITH_IMM": int64(v.WCRecvRDMAWithImm),
		"IBV_WC_GRH":                int64(v.WCWithGRH), "IBV_WC_WITH_IMM": int64(v.WCWithImm),

		"IBV_WC_SUCCESS": int64(v.WCSuccess), "IBV_WC_LOC_LEN_ERR": int64(v.WCLocLenErr),
		"IBV_WC_LOC_QP_OP_ERR": int64(v.WCLocQPOpErr), "IBV_WC_LOC_EEC_OP_ERR": int64(v.WCLocEECOpErr),
		"IBV_WC_LOC_PROT_ERR": int64(v.WCLocProtErr), "IBV_WC_WR_FLUSH_ERR": int64(v.WCWRFlushErr),
		"IBV_WC_MW_BIND_ERR": int64(v.WCMWBindErr), "IBV_WC_BAD_RESP_ERR": int64(v.WCBadRespErr),
		"IBV_WC_LOC_ACCESS_ERR": int64(v.WCLocAccessErr), "IBV_WC_REM_INV_REQ_ERR": int64(v.WCRemInvReqErr),
		"IBV_WC_REM_ACCESS_ERR": int64(v.WCRemAccessErr), "IBV_WC_REM_OP_ERR": int64(v.WCRemOpErr),
		"IBV_WC_RETRY_EXC_ERR": int64(v.WCRetryExcErr), "IBV_WC_RNR_RETRY_EXC_ERR": int64(v.WCRNRRetryExcErr),
		"IBV_WC_LOC_RDD_VIOL_ERR": int64(v.WCLocRDDViolErr), "IBV_WC_REM_INV_RD_REQ_ERR": int64(v.WCRemInvRDReqErr),
		"IBV_WC_REM_ABORT_ERR": int64(v.WCRemAbortErr), "IBV_WC_INV_EECN_ERR": int64(v.WCInvEECNErr),
		"IBV_WC_INV_EEC_STATE_ERR": int64(v.WCInvEECStateErr), "IBV_WC_FATAL_ERR": int64(v.WCFatalErr),
		"IBV_WC_RESP_TIMEOUT_ERR": int64(v.WCRespTimeoutErr), "IBV_WC_GENERAL_ERR": int64(v.WCGeneralErr),
		"IBV_WC_TM_ERR": int64(v.WCTMErr), "IBV_WC_TM_RNDV_INCOMPLETE": int64(v.WCTMRndvIncomplete),
	}
}

// TestConstantsMatchVerbsHeader fails if a constant of package verbs
// differs from the header's, or if either side has one the other lacks.
func TestConstantsMatchVerbsHeader(t *testing.T) {
	c, g := Constants(), goConstants()
	for k, want := range c {
		got, ok := g[k]
		if assert.Truef(t, ok, "header constant %s has no Go counterpart in the check", k) {
			assert.Equalf(t, want, got, "%s: header %d, verbs %d", k, want, got)
		}
	}
	for k := range g {
		_, ok := c[k]
		assert.Truef(t, ok, "Go constant %s is not checked against the header", k)
	}
}

// TestStatusStrings compares WCStatus.String with libibverbs' table text
// for the statuses gxfer reports.
func TestStatusStrings(t *testing.T) {
	assert.Equal(t, "Work Request Flushed Error", v.WCWRFlushErr.String())
	assert.Equal(t, "remote access error", v.WCRemAccessErr.String())
}
