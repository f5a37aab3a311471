#include "recover/resume_wire.h"

#include <cstring>

#include "recover/siphash.h"
#include "recover/wire_bytes.h"

namespace xp::recover {
namespace {

void resume_tag(const uint8_t key[kNonceBytes], Dir sender, uint8_t flags, uint64_t from,
                uint64_t received, uint8_t out[kTagBytes]) {
  uint8_t in[4 + 1 + 1 + 8 + 8] = {'X', 'P', 'R', 'S'};
  in[4] = static_cast<uint8_t>(sender);
  in[5] = flags;
  put_le(in + 6, from, 8);
  put_le(in + 14, received, 8);
  siphash24_128(key, in, sizeof in, out);
}

void raw_tag(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t received,
             uint8_t out[kTagBytes]) {
  uint8_t in[4 + 1 + 8 + 8] = {'X', 'P', 'R', 'W'};
  in[4] = static_cast<uint8_t>(sender);
  put_le(in + 5, at, 8);
  put_le(in + 13, received, 8);
  siphash24_128(key, in, sizeof in, out);
}

} // namespace

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
  encode_frame_header(h, out);
  uint8_t* p = out + kFrameHeaderBytes;
  put_le(p, in.received, 8);
  memset(p + 8, 0, 8);
  resume_tag(key, sender, h.flags, in.from, in.received, p + 16);
}

Status parse_resume(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                    const uint8_t payload[kResumePayloadBytes], ResumeInfo* out) {
  if (h.type != kFrameResume || h.len != kResumePayloadBytes) return Status::invalid;
  uint8_t zero = 0;
  for (int i = 8; i < 16; ++i)
    zero |= payload[i];
  if (zero != 0) return Status::invalid;
  ResumeInfo r;
  r.knows_start = h.flags & kResumeKnowsStart;
  r.moved = h.flags & kResumeMoved;
  r.from = h.seq;
  r.received = get_le(payload, 8);
  uint8_t want[kTagBytes];
  resume_tag(key, sender, h.flags, r.from, r.received, want);
  uint8_t diff = 0;
  for (size_t i = 0; i < kTagBytes; ++i)
    diff |= static_cast<uint8_t>(want[i] ^ payload[16 + i]);
  if (diff != 0) return Status::invalid;
  *out = r;
  return Status::ok;
}

void encode_raw(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t received,
                uint8_t out[kRawFrameBytes]) {
  FrameHeader h;
  h.type = kFrameRaw;
  h.len = kRawPayloadBytes;
  h.seq = at;
  encode_frame_header(h, out);
  uint8_t* p = out + kFrameHeaderBytes;
  put_le(p, received, 8);
  memset(p + 8, 0, 8);
  raw_tag(key, sender, at, received, p + 16);
}

Status parse_raw(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                 const uint8_t payload[kRawPayloadBytes], uint64_t* received) {
  if (h.type != kFrameRaw || h.len != kRawPayloadBytes || h.flags != 0) return Status::invalid;
  uint8_t zero = 0;
  for (int i = 8; i < 16; ++i)
    zero |= payload[i];
  if (zero != 0) return Status::invalid;
  const uint64_t rec = get_le(payload, 8);
  uint8_t want[kTagBytes];
  raw_tag(key, sender, h.seq, rec, want);
  uint8_t diff = 0;
  for (size_t i = 0; i < kTagBytes; ++i)
    diff |= static_cast<uint8_t>(want[i] ^ payload[16 + i]);
  if (diff != 0) return Status::invalid;
  *received = rec;
  return Status::ok;
}

} // namespace xp::recover
