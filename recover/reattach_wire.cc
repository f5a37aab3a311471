#include "recover/reattach_wire.h"

#include <cstring>

#include "recover/siphash.h"
#include "recover/wire_bytes.h"

namespace xp::recover {
namespace {

void bind_tag(const uint8_t key[kNonceBytes], char kind, const uint8_t tb[12], uint32_t id,
              uint64_t counter, const ChannelBinding& b, uint8_t out[kTagBytes]) {
  uint8_t in[4 + 12 + 4 + 8 + kChannelBindingBytes] = {'X', 'P', 'R', static_cast<uint8_t>(kind)};
  memcpy(in + 4, tb, 12);
  put_le(in + 16, id, 4);
  put_le(in + 20, counter, 8);
  encode_channel_binding(b, in + 28);
  siphash24_128(key, in, sizeof in, out);
}

} // namespace

bool encode_reattach(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                     uint64_t counter, const ChannelBinding& b, uint8_t out[kReattachBytes]) {
  if (t.family != 4) return false;
  memset(out, 0, kReattachBytes);
  out[0] = kReattachVersion;
  tuple_key(t, out + 4);
  bind_tag(key, 'A', out + 4, id, counter, b, out + 16);
  return true;
}

Status parse_reattach_tuple(const uint8_t* p, size_t len, TcpTuple* t, NakCode* nak) {
  *nak = NakCode::failed;
  if (len != kReattachBytes) return Status::invalid;
  if (p[0] != kReattachVersion) {
    *nak = NakCode::version;
    return Status::invalid;
  }
  if ((p[1] | p[2] | p[3]) != 0) return Status::invalid;
  TcpTuple r;
  r.family = 4;
  memcpy(r.client_addr, p + 4, 4);
  memcpy(r.server_addr, p + 8, 4);
  r.client_port = static_cast<uint16_t>(p[12] << 8 | p[13]);
  r.server_port = static_cast<uint16_t>(p[14] << 8 | p[15]);
  *t = r;
  return Status::ok;
}

Status check_reattach(const uint8_t key[kNonceBytes], const uint8_t* p, size_t len, uint32_t id,
                      uint64_t counter, const ChannelBinding& b) {
  if (len != kReattachBytes) return Status::invalid;
  uint8_t want[kTagBytes];
  bind_tag(key, 'A', p + 4, id, counter, b, want);
  return same_bytes(want, p + 16, kTagBytes) ? Status::ok : Status::invalid;
}

void encode_reattach_ack(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                         uint64_t counter, const ChannelBinding& b,
                         uint8_t out[kReattachAckBytes]) {
  uint8_t tb[12];
  tuple_key(t, tb);
  bind_tag(key, 'K', tb, id, counter, b, out);
}

Status check_reattach_ack(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                          uint64_t counter, const ChannelBinding& b, const uint8_t* p, size_t len) {
  if (len != kReattachAckBytes) return Status::invalid;
  uint8_t want[kTagBytes];
  encode_reattach_ack(key, t, id, counter, b, want);
  return same_bytes(want, p, kTagBytes) ? Status::ok : Status::invalid;
}

void encode_switchback(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t counter,
                       uint8_t out[kSwitchbackFrameBytes]) {
  FrameHeader h;
  h.type = kFrameSwitchback;
  h.len = kSwitchbackPayloadBytes;
  h.seq = at;
  encode_counter_frame(key, 'B', sender, h, counter, out);
}

Status check_switchback(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                        const uint8_t payload[kSwitchbackPayloadBytes], uint64_t* counter) {
  if (h.type != kFrameSwitchback || h.flags != 0) return Status::invalid;
  return parse_counter_payload(key, 'B', sender, h, payload, counter);
}

uint32_t backoff_after_failure(uint32_t cur, uint32_t initial, uint32_t max) {
  uint64_t next = cur < initial ? initial : uint64_t{cur} * 2;
  return static_cast<uint32_t>(next > max ? max : next);
}

uint32_t backoff_after_return(uint32_t cur, uint32_t initial, uint32_t max, uint64_t on_rdma_ms) {
  if (on_rdma_ms >= max) return initial > max ? max : initial;
  return backoff_after_failure(cur, initial, max);
}

} // namespace xp::recover
