// rdma-core, loaded on first use.  The library is not linked against
// libibverbs or librdmacm: every preloaded process would otherwise map and
// relocate them (and libnl) at exec, sockets or not.  They are dlopen'd the
// first time a connection could use RDMA (device_present(), Cm::create(),
// the synchronous set-up), and every function of theirs this folder calls
// goes through the tables below.  Internal to verbs/: the only code that
// names rdma-core's functions.
//
// The inline functions of <infiniband/verbs.h> on the data path
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) call
// through the device context's own table and need no symbol: they are
// used directly.
#pragma once
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

namespace xp::verbs::detail {

// name (without the ibv_ / rdma_ prefix), symbol version: the versions are
// the ones a link against the libraries would bind (nm -D of such a link).
#define XP_IBV_FUNCTIONS(F)                                                                        \
  F(ack_cq_events, "IBVERBS_1.1")                                                                  \
  F(alloc_pd, "IBVERBS_1.1")                                                                       \
  F(close_device, "IBVERBS_1.1")                                                                   \
  F(create_comp_channel, "IBVERBS_1.0")                                                            \
  F(create_cq, "IBVERBS_1.1")                                                                      \
  F(dealloc_pd, "IBVERBS_1.1")                                                                     \
  F(dereg_mr, "IBVERBS_1.1")                                                                       \
  F(destroy_comp_channel, "IBVERBS_1.0")                                                           \
  F(destroy_cq, "IBVERBS_1.1")                                                                     \
  F(free_device_list, "IBVERBS_1.1")                                                               \
  F(get_cq_event, "IBVERBS_1.1")                                                                   \
  F(get_device_list, "IBVERBS_1.1")                                                                \
  F(get_device_name, "IBVERBS_1.1")                                                                \
  F(modify_qp, "IBVERBS_1.1")                                                                      \
  F(open_device, "IBVERBS_1.1")                                                                    \
  F(query_device, "IBVERBS_1.1")                                                                   \
  F(query_port, "IBVERBS_1.1")                                                                     \
  F(reg_mr, "IBVERBS_1.1")

#define XP_RDMACM_FUNCTIONS(F)                                                                     \
  F(accept, "RDMACM_1.0")                                                                          \
  F(ack_cm_event, "RDMACM_1.0")                                                                    \
  F(bind_addr, "RDMACM_1.0")                                                                       \
  F(connect, "RDMACM_1.0")                                                                         \
  F(create_event_channel, "RDMACM_1.0")                                                            \
  F(create_id, "RDMACM_1.0")                                                                       \
  F(create_qp, "RDMACM_1.0")                                                                       \
  F(destroy_event_channel, "RDMACM_1.0")                                                           \
  F(destroy_id, "RDMACM_1.0")                                                                      \
  F(destroy_qp, "RDMACM_1.0")                                                                      \
  F(disconnect, "RDMACM_1.0")                                                                      \
  F(event_str, "RDMACM_1.0")                                                                       \
  F(freeaddrinfo, "RDMACM_1.0")                                                                    \
  F(get_cm_event, "RDMACM_1.0")                                                                    \
  F(get_src_port, "RDMACM_1.0")                                                                    \
  F(getaddrinfo, "RDMACM_1.0")                                                                     \
  F(listen, "RDMACM_1.0")                                                                          \
  F(reject, "RDMACM_1.0")                                                                          \
  F(resolve_addr, "RDMACM_1.0")                                                                    \
  F(resolve_route, "RDMACM_1.0")                                                                   \
  F(set_option, "RDMACM_1.0")

// libibverbs' functions: ibv().alloc_pd(...) is ibv_alloc_pd(...).
struct Ibv {
#define XP_FIELD(name, version) decltype(&::ibv_##name) name;
  XP_IBV_FUNCTIONS(XP_FIELD)
#undef XP_FIELD
};

// librdmacm's functions: rdmacm().create_id(...) is rdma_create_id(...).
struct RdmaCm {
#define XP_FIELD(name, version) decltype(&::rdma_##name) name;
  XP_RDMACM_FUNCTIONS(XP_FIELD)
#undef XP_FIELD
};

// Loads both libraries and resolves every entry, the first time (any thread;
// later calls return the first answer).  false: a library or an entry is
// missing, which means no usable RDMA device (Reason::no_device above).
bool rdma_loaded();

// In a fork child asked for it (fresh_cm_for_fork_child): librdmacm's table
// from a private copy of the library, once (docs/protocol.md §7 "A fork
// child that holds an accepted connection").  inherited: the copy could
// not be loaded, said once here with why; the inherited one stays in use.
enum class FreshCm { not_asked, copy, inherited };
FreshCm fresh_rdmacm_if_asked();
void fresh_cm_asked(); // fresh_cm_for_fork_child's flag
// fresh_rdmacm_if_asked's copy of the file at path (true: its table is in
// use from here).
bool fresh_rdmacm_from(const char* path);

// The tables; only after rdma_loaded() returned true.
const Ibv& ibv();
const RdmaCm& rdmacm();

// _ibv_query_gid_table (rdma-core 32 and later), for the start-up line
// only: nullptr when this rdma-core lacks it (nothing else needs it, so its
// absence does not turn RDMA off).  Only after rdma_loaded() returned true.
using QueryGidTable = decltype(&::_ibv_query_gid_table);
QueryGidTable query_gid_table();

} // namespace xp::verbs::detail
