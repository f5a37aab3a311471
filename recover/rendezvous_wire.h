// The rdma_cm private data of the rendezvous (docs/protocol.md §1): the
// request a client's rdma_cm sends, the server's accept and reject.  Pure
// functions over peer-controlled bytes (tests/fuzz/fuzz_upgrade.cc).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "recover/upgrade_wire.h"

namespace xp::recover {

// 3: the binding is a key exchange over protocol-fixed counts (§2).
// 4: the accept carries a nonce of the channel, and bindings name the
// channel (ChannelBinding, §2).
constexpr uint8_t kRendezvousVersion = 4;
// kCmReattach: a channel for a resumed stream of this 4-tuple; the stream
// binds over it with a REATTACH whose tag names the nonces of the request and
// the accept, each drawn fresh for the channel (§7, recover::ChannelBinding).
constexpr uint8_t kCmRequest = 1, kCmAccept = 2, kCmReattach = 3;
enum RejectCode : uint8_t { rej_redirect = 1, rej_unknown = 2, rej_busy = 3, rej_version = 4 };

// A request: 32 bytes, all of the private data the rdma_cm layer leaves us.
struct CmRequestWire {
  uint8_t kind, version;
  uint16_t sid;
  uint8_t key[12]; // tuple_key of the 4-tuple
  uint8_t nonce[16];
};
static_assert(sizeof(CmRequestWire) == 32);
struct CmAcceptWire {
  uint8_t kind, version, pad[2];
  uint8_t nonce[16];             // the stream's (zero for a channel-only request)
  uint8_t chan[kChanNonceBytes]; // drawn for this accept alone (ChannelBinding)
};
static_assert(sizeof(CmAcceptWire) == 32);
struct CmRejectWire {
  uint8_t code, pad;
  uint16_t port; // redirect: network order
};

// Exactly sizeof(CmRequestWire) bytes of kind request or reattach and our
// version; invalid otherwise (the answer is rej_version).
Status parse_cm_request(const void* p, size_t len, CmRequestWire* out);
// The 4-tuple a request names (docs/protocol.md §1), from its key and the
// rdma_cm addresses of the request: the requester's (peer) and the one it
// reached (local).  The requester is the TCP client.  An IPv4 requester
// (IPv4-mapped included): the key's tuple, whose client address must be the
// requester's.  An IPv6 requester: client = the requester's address, server
// = the address reached (IPv6), ports from the key, whose address bytes
// must be those addresses' last 4.  invalid otherwise (rej_unknown).
Status request_tuple(const CmRequestWire& w, const sockaddr* peer, const sockaddr* local,
                     TcpTuple* out);
// An accept of our version: true with *nonce_s and the channel's nonce;
// false for anything else.
bool parse_cm_accept(const void* p, size_t len, Nonce* nonce_s, uint8_t chan[kChanNonceBytes]);
// What a reject says: its code and redirect port (host order); code 0 when
// the peer's rdma_cm rejected (no consumer data) or the data is short.
struct CmReject {
  uint8_t code = 0;
  uint16_t port = 0;
};
CmReject parse_cm_reject(const void* p, size_t len, bool consumer);

} // namespace xp::recover
