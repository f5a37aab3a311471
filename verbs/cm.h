// Asynchronous rdma_cm: one event channel, many listeners and connections,
// driven from one thread (the engine's).  Nothing here blocks: set-up steps
// are started, and their outcome comes back as events from next().  The
// links it produces are verbs::Link (RcLink) like rc_connect()'s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <sys/socket.h>

#include "common/status.h"
#include "verbs/link.h"
#include "verbs/rc_link.h"

namespace xp::verbs {

struct CmRequest; // a connection request waiting for accept() or reject()
struct CmListener;

struct CmEvent {
  enum class Kind : uint8_t {
    request,      // a listener got a connection request: accept() or reject() req
    established,  // a connection (either side) is up: link is the caller's now
    rejected,     // the peer rejected our request (priv: its reject data, if any)
    failed,       // our request failed (no route, no answer, unreachable, ...)
    disconnected, // an established link's peer went away
    // A listener's device went away (Soft-RoCE device removed): it hears
    // nothing any more; close_listener() it and listen again later.
    listener_lost,
  };
  Kind kind;
  void* user;           // listener's (request) or connection's user pointer
  CmRequest* req;       // request
  Link* link;           // established, disconnected
  int status;           // rejected/failed: rdma_cm's status
  bool consumer_reject; // rejected by the peer's application (not "no listener")
  // request: the client's ring descriptor was refused (verbs/wire_ring.h):
  // reject() req.  failed: the server's accept carried one we refused.
  bool ring_refused;
  uint8_t priv[kAppPrivateMax];
  size_t priv_len;
  // established, our request's: the rdma_cm addresses of the connection,
  // ours and the peer's, as rdma_cm reports them (ports included).
  sockaddr_storage local;
  sockaddr_storage peer;
};

// What an rdma_cm event (an enum rdma_cm_event_type) on a connection we
// accepted means to the layer above: nothing, the connection is up, or it
// ended.  Every ending reaches the layer above, or the accept it counts as
// under way stays counted forever (docs/protocol.md §8 "Bounded state"): a
// REJ after our accept (the client refused our ring, or went away before
// it connected), an error, a disconnect, the device's removal.
enum class PassiveStep : uint8_t { ignore, established, ended };
PassiveStep passive_step(int rdma_cm_event_type);

class Cm {
public:
  // null when rdma_cm cannot be used (no device, no permission).
  static Cm* create();
  ~Cm();
  int fd() const; // readable when next() may have an event

  // Listen on addr (port 0: an ephemeral port); *port receives the port.
  // An IPv6 addr takes IPv4 requests too unless af_only.
  Status listen(const sockaddr* addr, void* user, CmListener** out, uint16_t* port,
                bool af_only = false);
  void close_listener(CmListener* l);

  // Start connecting from src (may be null) to dst with app bytes in the
  // request; the outcome arrives as established/rejected/failed with user.
  Status connect(const sockaddr* src, const sockaddr* dst, const RcLinkParams& p, const void* app,
                 size_t app_len, void* user);
  // Answer a request: accept (the link arrives with `established`, user) or reject.
  Status accept(CmRequest* req, const RcLinkParams& p, const void* app, size_t app_len, void* user);
  void reject(CmRequest* req, const void* app, size_t app_len);
  // The peer's address of a request (for logs and checks).
  const sockaddr* request_peer(const CmRequest* req) const;
  // The address the request reached (ours).
  const sockaddr* request_local(const CmRequest* req) const;
  // The rdma_cm port (host order) of the listener the request reached.
  uint16_t request_local_port(const CmRequest* req) const;

  // The next event, if any (non-blocking).
  bool next(CmEvent* ev);
  // Tear down a link this Cm produced (disconnects it first).
  void destroy(Link* link);

private:
  Cm() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

} // namespace xp::verbs
