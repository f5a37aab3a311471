#include "recover/resume_wire.h"

#include <cstring>

#include "recover/siphash.h"
#include "recover/wire_bytes.h"

namespace xp::recover {
namespace {

// Tag of a frame with one counter (docs/protocol.md §7): "XPR" kind | dir |
// flags (RESUME only) | seq | value.
void counter_tag(const uint8_t key[kNonceBytes], char kind, Dir sender, const FrameHeader& h,
                 uint64_t value, uint8_t out[kTagBytes]) {
  uint8_t in[4 + 1 + 1 + 8 + 8] = {'X', 'P', 'R', static_cast<uint8_t>(kind)};
  size_t n = 4;
  in[n++] = static_cast<uint8_t>(sender);
  if (kind == 'S') in[n++] = h.flags;
  put_le(in + n, h.seq, 8);
  put_le(in + n + 8, value, 8);
  siphash24_128(key, in, n + 16, out);
}

} // namespace

void encode_counter_frame(const uint8_t key[kNonceBytes], char kind, Dir sender,
                          const FrameHeader& h, uint64_t value,
                          uint8_t out[kFrameHeaderBytes + kCounterPayloadBytes]) {
  encode_frame_header(h, out);
  uint8_t* p = out + kFrameHeaderBytes;
  put_le(p, value, 8);
  memset(p + 8, 0, 8);
  counter_tag(key, kind, sender, h, value, p + 16);
}

Status parse_counter_payload(const uint8_t key[kNonceBytes], char kind, Dir sender,
                             const FrameHeader& h, const uint8_t payload[kCounterPayloadBytes],
                             uint64_t* value) {
  if (h.len != kCounterPayloadBytes) return Status::invalid;
  uint8_t zero = 0;
  for (int i = 8; i < 16; ++i)
    zero |= payload[i];
  const uint64_t v = get_le(payload, 8);
  uint8_t want[kTagBytes];
  counter_tag(key, kind, sender, h, v, want);
  if (zero != 0 || !same_bytes(want, payload + 16, kTagBytes)) return Status::invalid;
  *value = v;
  return Status::ok;
}

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  out[0] = 'X';
  out[1] = 'F';
  out[2] = h.type;
  out[3] = h.flags;
  put_le(out + 4, h.len, 4);
  put_le(out + 8, h.seq, 8);
}

Status parse_frame_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* out) {
  if (in[0] != 'X' || in[1] != 'F') return Status::invalid;
  FrameHeader h;
  h.type = in[2];
  h.flags = in[3];
  h.len = static_cast<uint32_t>(get_le(in + 4, 4));
  h.seq = get_le(in + 8, 8);
  if (h.type == kFrameResume) {
    if (h.len != kResumePayloadBytes || (h.flags & ~(kResumeKnowsStart | kResumeMoved)) != 0)
      return Status::invalid;
  } else if (h.type == 3) { // SWITCHBACK (recover/reattach_wire.h)
    if (h.len != 32 || h.flags != 0) return Status::invalid;
  } else if (h.type == kFrameRaw) {
    if (h.len != kRawPayloadBytes || h.flags != 0) return Status::invalid;
  } else if (h.type == kFrameData) {
    if (h.len == 0 || h.len > kMaxFrameData || h.flags != 0) return Status::invalid;
    if (h.seq + h.len < h.seq) return Status::invalid; // wraps
  } else {
    return Status::invalid;
  }
  *out = h;
  return Status::ok;
}

void encode_resume(const uint8_t key[kNonceBytes], Dir sender, const ResumeInfo& in,
                   uint8_t out[kResumeFrameBytes]) {
  FrameHeader h;
  h.type = kFrameResume;
  h.flags = static_cast<uint8_t>((in.knows_start ? kResumeKnowsStart : 0) |
                                 (in.moved ? kResumeMoved : 0));
  h.len = kResumePayloadBytes;
  h.seq = in.from;
  encode_counter_frame(key, 'S', sender, h, in.received, out);
}

Status parse_resume(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                    const uint8_t payload[kResumePayloadBytes], ResumeInfo* out) {
  if (h.type != kFrameResume) return Status::invalid;
  ResumeInfo r;
  if (parse_counter_payload(key, 'S', sender, h, payload, &r.received) != Status::ok)
    return Status::invalid;
  r.knows_start = h.flags & kResumeKnowsStart;
  r.moved = h.flags & kResumeMoved;
  r.from = h.seq;
  *out = r;
  return Status::ok;
}

void encode_raw(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t received,
                uint8_t out[kRawFrameBytes]) {
  FrameHeader h;
  h.type = kFrameRaw;
  h.len = kRawPayloadBytes;
  h.seq = at;
  encode_counter_frame(key, 'W', sender, h, received, out);
}

Status parse_raw(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                 const uint8_t payload[kRawPayloadBytes], uint64_t* received) {
  if (h.type != kFrameRaw || h.flags != 0) return Status::invalid;
  return parse_counter_payload(key, 'W', sender, h, payload, received);
}

} // namespace xp::recover
