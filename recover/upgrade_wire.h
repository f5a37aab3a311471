// Wire formats of the upgrade control records (docs/protocol.md §1-3 and
// "Upgrade control records"): the ATTACH payload, the binding proof, the NAK
// codes.  Pure functions over bytes; recover/ depends only on common/, so the
// record type codes are restated here rather than included from flow/.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/reasons.h"
#include "common/status.h"

struct sockaddr;
struct sockaddr_storage;

namespace xp::recover {

// The numeric values of flow::RecordType (flow/record_channel.h); a change
// there must be made here too.  recover/ cannot include flow/; stream/mux.cc
// static_asserts that the two lists agree.
namespace msg {
constexpr uint8_t attach = 6;
constexpr uint8_t attach_ack = 7;
constexpr uint8_t attach_nak = 8;
constexpr uint8_t switch_ = 9;
constexpr uint8_t keepalive = 10;
// Key confirmation of an end that has not switched (yet).
constexpr uint8_t proof = 11;
// The binding's key exchange share (docs/protocol.md §2).
constexpr uint8_t share = 15;
} // namespace msg

// A KEEPALIVE's seq (docs/protocol.md §7): from an end with streams on the
// channel, which asks its peer for an answer; the answer of an end without.
constexpr uint32_t kKeepaliveAsks = 0;
constexpr uint32_t kKeepaliveAnswers = 1;

// flow::kMaxControlPayload: no control payload may be larger.
constexpr size_t kMaxControlPayload = 128;
// 4: a resumed stream turns back into plain TCP at a fork (the RAW frame,
// recover/resume_wire.h); 3: the binding is a password-authenticated key
// exchange over the covered bytes (CPace, recover/pake.h); 2 sent tags.
constexpr uint8_t kProtocolVersion = 4;

constexpr size_t kNonceBytes = 16;
constexpr size_t kAttachBytes = 56;    // see encode_attach
constexpr size_t kAttachAckBytes = 16; // nonce_s
constexpr size_t kProofBytes = 32;     // tag(16) | count c->s (8) | count s->c (8)
constexpr size_t kShareBytes = 48;     // count c->s (8) | count s->c (8) | CPace share (32)
constexpr size_t kPointBytes = 32;
constexpr size_t kTagBytes = 16;
constexpr size_t kPrefixBytes = 64; // first bytes of each direction kept for the proof
// docs/protocol.md §2: the binding covers exactly kCoverBytes of each
// direction (the "both" form), or, on a one-way connection (a direction that
// carried at least kOneWayBytes while the other carried fewer than
// kCoverBytes), kCoverBytes of that direction and every byte of the other.
// No other count is accepted: the prover does not choose how little it
// proves.
constexpr uint64_t kCoverBytes = kPrefixBytes;
constexpr uint64_t kOneWayBytes = 16 * 1024;
// Whether count[] (indexed by Dir) is one of the protocol's coverage forms.
inline bool coverage_form(const uint64_t count[2]) {
  return (count[0] == kCoverBytes && count[1] <= kCoverBytes) ||
         (count[1] == kCoverBytes && count[0] < kCoverBytes);
}
// The one-way form over direction d: d covered in full, the other short.
inline bool one_way_over(const uint64_t count[2], int d) {
  return count[d] == kCoverBytes && count[1 - d] < kCoverBytes;
}
static_assert(kAttachBytes <= kMaxControlPayload && kProofBytes <= kMaxControlPayload &&
              kShareBytes <= kMaxControlPayload);

struct Nonce {
  uint8_t b[kNonceBytes];
};

// ATTACH_NAK reason codes (the record's seq); also sent by either end to
// abort a bound stream (failed / timeout).
enum class NakCode : uint64_t {
  unknown_stream = 1, // this process does not hold the 4-tuple
  busy = 2,           // stream id in use, stream limit, or the 4-tuple is already bound
  version = 3,        // protocol version not spoken here
  failed = 4,         // binding failed (bad proof, protocol violation)
  timeout = 5,        // the peer did not answer in time
  // The server holds as many streams from this client address waiting for
  // their clients' first proof as it allows (docs/protocol.md §8): this
  // one stays on TCP (a new channel would not help: no rdma_cm retry).
  limit = 6,
  // The server process forked and let the connection go: the process that
  // holds it now answers a new request through rdma_cm (once, and only
  // before either end's SHARE: docs/protocol.md §7 "A fork child that
  // holds an accepted connection").
  moved = 7,
};
// Flag above the code in an ATTACH_NAK's seq: its sender had processed no
// SWITCH of ours when it gave up, and reads our direction as plain TCP from
// then on.  A direction that had switched continues there, unframed, at its
// S (docs/protocol.md §3, "An upgrade abandoned while a switch crosses").
constexpr uint64_t kNakReadsPlain = uint64_t{1} << 8;
constexpr uint64_t kNakCodeMask = 0xff;
// What the end that receives a NAK records as its fallback reason (the
// code: flags are ignored).
Reason nak_reason(uint64_t code);

// Directions of the connection; proofs name them, not "mine/yours".
enum class Dir : uint8_t { c2s = 0, s2c = 1 };

// The TCP 4-tuple as the client sees it (the server swaps local and peer).
// Addresses in network byte order, IPv4 in the first 4 bytes with the rest
// zero; ports in host byte order.  IPv4-mapped IPv6 addresses are stored as
// IPv4, so a dual-stack server and an IPv4 client name the same tuple.
struct TcpTuple {
  uint8_t family = 0; // 4 or 6
  uint8_t client_addr[16] = {};
  uint8_t server_addr[16] = {};
  uint16_t client_port = 0, server_port = 0;
};
bool operator==(const TcpTuple& a, const TcpTuple& b);
// A tuple as 12 bytes: client addr | server addr | client port | server
// port (network order), the addresses' last 4 bytes for IPv6 (their first 4
// for IPv4); what the rdma_cm request and REATTACH carry
// (docs/protocol.md §1, §7).
void tuple_key(const TcpTuple& t, uint8_t out[12]);
// A tuple as the index of the engine's tables: family | client addr (16) |
// server addr (16) | client port | server port (network order).
constexpr size_t kTupleIdBytes = 1 + 32 + 4;
void tuple_id(const TcpTuple& t, uint8_t out[kTupleIdBytes]);

// One end's address as the tuple holds it (family 4 or 6, IPv4 in the
// first 4 bytes with the rest zero); family 0: none known.
struct IpAddr {
  uint8_t family = 0;
  uint8_t b[16] = {};
  bool operator==(const IpAddr& o) const;
  bool operator<(const IpAddr& o) const;
  bool known() const; // a family and not all zero (no TCP peer has 0.0.0.0 or ::)
};
inline IpAddr ipv4_addr(const uint8_t a[4]) {
  IpAddr r;
  r.family = 4;
  for (int i = 0; i < 4; ++i)
    r.b[i] = a[i];
  return r;
}
IpAddr client_addr(const TcpTuple& t);
IpAddr server_addr(const TcpTuple& t);
// The address of a socket address (IPv4-mapped IPv6 is IPv4); a null or
// other family gives an unknown one.
IpAddr ip_addr(const sockaddr* sa);
// The socket address of a (known) address and port (host order).
void to_sockaddr(const IpAddr& a, uint16_t port, sockaddr_storage* out);
// From the two socket addresses (AF_INET or AF_INET6, the same family once
// mapped addresses are unmapped); invalid otherwise.
Status tuple_from_sockaddrs(const sockaddr* client, const sockaddr* server, TcpTuple* out);

// ATTACH payload (the record's stream field proposes the stream id, seq is 0):
//   0 version | 1 family (4/6) | 2..3 zero | 4..5 client port (network order)
//   6..7 server port (network order) | 8..23 client address | 24..39 server
//   address | 40..55 nonce_c
void encode_attach(const TcpTuple& t, const Nonce& nonce_c, uint8_t out[kAttachBytes]);
// Strict: exact length, known version (else *nak = version), family 4 or 6,
// zero reserved bytes and IPv4 padding, no IPv4-mapped IPv6 address.
// invalid with *nak set (version or failed) when it is rejected.
Status parse_attach(const uint8_t* p, size_t len, TcpTuple* t, Nonce* nonce_c, NakCode* nak);

// The CPace inputs of a binding (recover/pake.h): the password is what the
// coverage form covers, the channel identifier the 4-tuple and stream id.
// password = count c->s | count s->c (8 bytes LE each) | the first
//   count c->s bytes of c->s | the first count s->c bytes of s->c
constexpr size_t kPasswordMax = 16 + 2 * kPrefixBytes;
size_t binding_password(const uint64_t count[2], const uint8_t* const prefix[2],
                        uint8_t out[kPasswordMax]);

// What names one channel to both of its ends (docs/protocol.md §2, "the
// channel"): its rdma_cm connection's addresses and ports as each end's
// rdma_cm reports them (the client: its own id's; the server: the request's)
// and a nonce the server drew for this accept alone.  Two live rdma_cm ids
// never share the four, and the nonce is newer than any channel set up
// before the accept, so a binding made over one channel holds on no other.
constexpr size_t kChanNonceBytes = 12;
struct ChannelBinding {
  // The rdma_cm connection as a 4-tuple: family 4 or 6 as rdma_cm reports
  // the addresses (an IPv4-mapped one is not folded: such an id may share
  // a port number with an IPv4 one), the server port the listener's.
  TcpTuple cm{};
  uint8_t nonce[kChanNonceBytes] = {};
};
// tuple_id(cm) | nonce (12)
constexpr size_t kChannelBindingBytes = kTupleIdBytes + kChanNonceBytes;
void encode_channel_binding(const ChannelBinding& b, uint8_t out[kChannelBindingBytes]);
// From the rdma_cm addresses (AF_INET or AF_INET6); invalid for another family.
Status channel_binding_from(const sockaddr* client, const sockaddr* server,
                            const uint8_t nonce[kChanNonceBytes], ChannelBinding* out);

// channel id = family | client address (16) | server address (16) | client
//   port | server port (2 bytes each, network order) | stream id (4, LE) |
//   the channel's binding (encode_channel_binding)
constexpr size_t kChannelIdBytes = 1 + 32 + 4 + 4 + kChannelBindingBytes;
void binding_channel_id(const TcpTuple& t, uint32_t stream, const ChannelBinding& channel,
                        uint8_t out[kChannelIdBytes]);

// A key confirmation (PROOF, SWITCH) under the exchanged key.
struct ConfirmInput {
  uint8_t kind;      // kProofKindProof or kProofKindSwitch
  Dir dir;           // the prover's sending direction
  uint64_t offset;   // SWITCH: S; PROOF: 0
  uint64_t count[2]; // the coverage form the key exchange used
};
constexpr uint8_t kProofKindProof = 1;
constexpr uint8_t kProofKindSwitch = 2;

// tag = SipHash-2-4-128(key = the exchange's confirmation key,
//   kind | dir | offset | count c->s | count s->c), 8-byte little-endian
void confirm_tag(const uint8_t key[kTagBytes], const ConfirmInput& in, uint8_t out[kTagBytes]);

void encode_proof(const uint8_t tag[kTagBytes], const uint64_t count[2], uint8_t out[kProofBytes]);
void decode_proof(const uint8_t p[kProofBytes], uint8_t tag[kTagBytes], uint64_t count[2]);
void encode_share(const uint64_t count[2], const uint8_t point[kPointBytes],
                  uint8_t out[kShareBytes]);
void decode_share(const uint8_t p[kShareBytes], uint64_t count[2], uint8_t point[kPointBytes]);

// One control record to send: the stream layer hands it to
// RecordChannel::send_control(type, stream, seq, payload, len).
struct Message {
  uint8_t type = 0;
  uint8_t len = 0;
  uint32_t stream = 0;
  uint64_t seq = 0;
  uint8_t payload[kAttachBytes] = {};
};
static_assert(sizeof(Message::payload) >= kProofBytes && sizeof(Message::payload) >= kAttachBytes &&
              sizeof(Message::payload) >= kShareBytes);

// A NAK the stream layer sends itself, e.g. for an ATTACH whose 4-tuple no
// session of this process holds (unknown_stream) or whose id is taken (busy).
Message make_nak(uint32_t stream, NakCode code);

} // namespace xp::recover
