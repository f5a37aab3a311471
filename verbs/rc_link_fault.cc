// The queue pair goes to the error state as after a fatal transport error
// (link.h force_error: a failed channel's zero-copy sender and its replay,
// flow/record_channel_replay.cc; in the test library also the injected
// fault of XPRESS_FAULT_QP_ERROR_AT).  Its outstanding work requests
// complete with flush errors here; the peer sees its own sends time out
// (or our RESUME on TCP first).
#include "verbs/rc_link_impl.h"

namespace xp::verbs::detail {

Status RcLink::force_error() {
  if (id_ == nullptr || id_->qp == nullptr) return Status::invalid;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  return ibv().modify_qp(id_->qp, &a, IBV_QP_STATE) == 0 ? Status::ok : Status::io_error;
}

} // namespace xp::verbs::detail
