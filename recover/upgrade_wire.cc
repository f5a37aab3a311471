#include "recover/upgrade_wire.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "recover/siphash.h"
#include "recover/wire_bytes.h"

namespace xp::recover {
namespace {

void put_le64(uint8_t* p, uint64_t v) {
  put_le(p, v, 8);
}
uint64_t get_le64(const uint8_t* p) {
  return get_le(p, 8);
}
bool all_zero(const uint8_t* p, size_t n) {
  uint8_t acc = 0;
  for (size_t i = 0; i < n; ++i)
    acc |= p[i];
  return acc == 0;
}
bool is_v4_mapped(const uint8_t* a) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(a, kPrefix, sizeof kPrefix) == 0;
}

// One end of the tuple; IPv4-mapped IPv6 becomes IPv4 so both ends of a
// dual-stack connection agree.
// fold_mapped: an IPv4-mapped IPv6 address reads as IPv4.
Status endpoint(const sockaddr* sa, uint8_t* family, uint8_t addr[16], uint16_t* port,
                bool fold_mapped = true) {
  if (sa == nullptr) return Status::invalid;
  memset(addr, 0, 16);
  if (sa->sa_family == AF_INET) {
    sockaddr_in in;
    memcpy(&in, sa, sizeof in);
    memcpy(addr, &in.sin_addr, 4);
    *port = ntohs(in.sin_port);
    *family = 4;
    return Status::ok;
  }
  if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    memcpy(&in6, sa, sizeof in6);
    *port = ntohs(in6.sin6_port);
    if (fold_mapped && is_v4_mapped(in6.sin6_addr.s6_addr)) {
      memcpy(addr, in6.sin6_addr.s6_addr + 12, 4);
      *family = 4;
    } else {
      memcpy(addr, in6.sin6_addr.s6_addr, 16);
      *family = 6;
    }
    return Status::ok;
  }
  return Status::invalid;
}

} // namespace

Reason nak_reason(uint64_t code) {
  switch (static_cast<NakCode>(code & kNakCodeMask)) {
  case NakCode::unknown_stream:
    // The process at the other end of the channel does not hold this
    // connection: for it, this TCP connection is not accelerated.
    return Reason::peer_not_accelerated;
  case NakCode::busy:
  case NakCode::limit:
    return Reason::resources_exhausted;
  case NakCode::timeout:
    return Reason::handshake_timeout;
  case NakCode::moved:
    return Reason::shared_by_fork;
  case NakCode::version:
  case NakCode::failed:
    break;
  }
  return Reason::handshake_failed;
}

void tuple_key(const TcpTuple& t, uint8_t out[12]) {
  const size_t at = t.family == 6 ? 12 : 0;
  memcpy(out, t.client_addr + at, 4);
  memcpy(out + 4, t.server_addr + at, 4);
  out[8] = static_cast<uint8_t>(t.client_port >> 8);
  out[9] = static_cast<uint8_t>(t.client_port);
  out[10] = static_cast<uint8_t>(t.server_port >> 8);
  out[11] = static_cast<uint8_t>(t.server_port);
}

void tuple_id(const TcpTuple& t, uint8_t out[kTupleIdBytes]) {
  out[0] = t.family;
  memcpy(out + 1, t.client_addr, 16);
  memcpy(out + 17, t.server_addr, 16);
  out[33] = static_cast<uint8_t>(t.client_port >> 8);
  out[34] = static_cast<uint8_t>(t.client_port);
  out[35] = static_cast<uint8_t>(t.server_port >> 8);
  out[36] = static_cast<uint8_t>(t.server_port);
}

bool IpAddr::operator==(const IpAddr& o) const {
  return family == o.family && memcmp(b, o.b, 16) == 0;
}

bool IpAddr::operator<(const IpAddr& o) const {
  if (family != o.family) return family < o.family;
  return memcmp(b, o.b, 16) < 0;
}

bool IpAddr::known() const {
  return family != 0 && !all_zero(b, 16);
}

IpAddr client_addr(const TcpTuple& t) {
  IpAddr a;
  a.family = t.family;
  memcpy(a.b, t.client_addr, 16);
  return a;
}

IpAddr server_addr(const TcpTuple& t) {
  IpAddr a;
  a.family = t.family;
  memcpy(a.b, t.server_addr, 16);
  return a;
}

IpAddr ip_addr(const sockaddr* sa) {
  IpAddr a;
  uint16_t port = 0;
  if (endpoint(sa, &a.family, a.b, &port) != Status::ok) a = IpAddr{};
  return a;
}

void to_sockaddr(const IpAddr& a, uint16_t port, sockaddr_storage* out) {
  memset(out, 0, sizeof *out);
  if (a.family == 6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    memcpy(in6.sin6_addr.s6_addr, a.b, 16);
    in6.sin6_port = htons(port);
    memcpy(out, &in6, sizeof in6);
    return;
  }
  sockaddr_in in{};
  in.sin_family = AF_INET;
  memcpy(&in.sin_addr, a.b, 4);
  in.sin_port = htons(port);
  memcpy(out, &in, sizeof in);
}

bool operator==(const TcpTuple& a, const TcpTuple& b) {
  return a.family == b.family && a.client_port == b.client_port && a.server_port == b.server_port &&
         memcmp(a.client_addr, b.client_addr, 16) == 0 &&
         memcmp(a.server_addr, b.server_addr, 16) == 0;
}

Status tuple_from_sockaddrs(const sockaddr* client, const sockaddr* server, TcpTuple* out) {
  TcpTuple t;
  uint8_t fs = 0;
  if (endpoint(client, &t.family, t.client_addr, &t.client_port) != Status::ok ||
      endpoint(server, &fs, t.server_addr, &t.server_port) != Status::ok || fs != t.family)
    return Status::invalid;
  *out = t;
  return Status::ok;
}

void encode_attach(const TcpTuple& t, const Nonce& nonce_c, uint8_t out[kAttachBytes]) {
  memset(out, 0, kAttachBytes);
  out[0] = kProtocolVersion;
  out[1] = t.family;
  out[4] = static_cast<uint8_t>(t.client_port >> 8);
  out[5] = static_cast<uint8_t>(t.client_port);
  out[6] = static_cast<uint8_t>(t.server_port >> 8);
  out[7] = static_cast<uint8_t>(t.server_port);
  const size_t alen = t.family == 4 ? 4 : 16;
  memcpy(out + 8, t.client_addr, alen);
  memcpy(out + 24, t.server_addr, alen);
  memcpy(out + 40, nonce_c.b, kNonceBytes);
}

Status parse_attach(const uint8_t* p, size_t len, TcpTuple* t, Nonce* nonce_c, NakCode* nak) {
  *nak = NakCode::failed;
  // The version is checked first so that a later version with another layout
  // still learns why it was refused.
  if (p == nullptr || len < 1) return Status::invalid;
  if (p[0] != kProtocolVersion) {
    *nak = NakCode::version;
    return Status::invalid;
  }
  if (len != kAttachBytes || (p[1] != 4 && p[1] != 6) || p[2] != 0 || p[3] != 0)
    return Status::invalid;
  TcpTuple r;
  r.family = p[1];
  r.client_port = static_cast<uint16_t>(p[4] << 8 | p[5]);
  r.server_port = static_cast<uint16_t>(p[6] << 8 | p[7]);
  memcpy(r.client_addr, p + 8, 16);
  memcpy(r.server_addr, p + 24, 16);
  if (r.family == 4 && (!all_zero(r.client_addr + 4, 12) || !all_zero(r.server_addr + 4, 12)))
    return Status::invalid;
  // Mapped addresses must travel as IPv4, or the same connection would have
  // two names.
  if (r.family == 6 && (is_v4_mapped(r.client_addr) || is_v4_mapped(r.server_addr)))
    return Status::invalid;
  *t = r;
  memcpy(nonce_c->b, p + 40, kNonceBytes);
  return Status::ok;
}

size_t binding_password(const uint64_t count[2], const uint8_t* const prefix[2],
                        uint8_t out[kPasswordMax]) {
  put_le64(out, count[0]);
  put_le64(out + 8, count[1]);
  size_t n = 16;
  for (int d = 0; d < 2; ++d) {
    const size_t take = count[d] < kPrefixBytes ? static_cast<size_t>(count[d]) : kPrefixBytes;
    if (take > 0) memcpy(out + n, prefix[d], take);
    n += take;
  }
  return n;
}

void encode_channel_binding(const ChannelBinding& b, uint8_t out[kChannelBindingBytes]) {
  tuple_id(b.cm, out);
  memcpy(out + kTupleIdBytes, b.nonce, kChanNonceBytes);
}

Status channel_binding_from(const sockaddr* client, const sockaddr* server,
                            const uint8_t nonce[kChanNonceBytes], ChannelBinding* out) {
  ChannelBinding b;
  uint8_t fs = 0;
  if (endpoint(client, &b.cm.family, b.cm.client_addr, &b.cm.client_port, false) != Status::ok ||
      endpoint(server, &fs, b.cm.server_addr, &b.cm.server_port, false) != Status::ok ||
      fs != b.cm.family)
    return Status::invalid;
  memcpy(b.nonce, nonce, kChanNonceBytes);
  *out = b;
  return Status::ok;
}

void binding_channel_id(const TcpTuple& t, uint32_t stream, const ChannelBinding& channel,
                        uint8_t out[kChannelIdBytes]) {
  out[0] = t.family;
  memcpy(out + 1, t.client_addr, 16);
  memcpy(out + 17, t.server_addr, 16);
  out[33] = static_cast<uint8_t>(t.client_port >> 8);
  out[34] = static_cast<uint8_t>(t.client_port);
  out[35] = static_cast<uint8_t>(t.server_port >> 8);
  out[36] = static_cast<uint8_t>(t.server_port);
  for (int i = 0; i < 4; ++i)
    out[37 + i] = static_cast<uint8_t>(stream >> (8 * i));
  encode_channel_binding(channel, out + 41);
}

void confirm_tag(const uint8_t key[kTagBytes], const ConfirmInput& in, uint8_t out[kTagBytes]) {
  uint8_t buf[2 + 3 * 8];
  buf[0] = in.kind;
  buf[1] = static_cast<uint8_t>(in.dir);
  put_le64(buf + 2, in.offset);
  put_le64(buf + 10, in.count[0]);
  put_le64(buf + 18, in.count[1]);
  static_assert(kTagBytes == kSipKeyBytes);
  siphash24_128(key, buf, sizeof buf, out);
}

void encode_share(const uint64_t count[2], const uint8_t point[kPointBytes],
                  uint8_t out[kShareBytes]) {
  put_le64(out, count[0]);
  put_le64(out + 8, count[1]);
  memcpy(out + 16, point, kPointBytes);
}

void decode_share(const uint8_t p[kShareBytes], uint64_t count[2], uint8_t point[kPointBytes]) {
  count[0] = get_le64(p);
  count[1] = get_le64(p + 8);
  memcpy(point, p + 16, kPointBytes);
}

void encode_proof(const uint8_t tag[kTagBytes], const uint64_t count[2], uint8_t out[kProofBytes]) {
  memcpy(out, tag, kTagBytes);
  put_le64(out + 16, count[0]);
  put_le64(out + 24, count[1]);
}

void decode_proof(const uint8_t p[kProofBytes], uint8_t tag[kTagBytes], uint64_t count[2]) {
  memcpy(tag, p, kTagBytes);
  count[0] = get_le64(p + 16);
  count[1] = get_le64(p + 24);
}

Message make_nak(uint32_t stream, NakCode code) {
  Message m;
  m.type = msg::attach_nak;
  m.stream = stream;
  m.seq = static_cast<uint64_t>(code);
  return m;
}

} // namespace xp::recover
