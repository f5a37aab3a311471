// Frames on a stream's TCP connection after RDMA failed under it
// (docs/protocol.md §7).  In a direction that had switched at S, the TCP
// bytes after S are frames, so that control and data cannot be confused:
//   header (16 bytes): 'X' 'F' | type (1) | flags (1) | len (4, LE) | seq (8, LE)
//   RESUME (type 1, len 32, seq = first sequence its sender re-sends from;
//     flags bit 0: the sender verified the receiver's SWITCH, i.e. it knows
//     where the receiver's own TCP bytes end; bit 1: the sender moved the
//     stream, raw bytes from seq follow instead of frames): received (8, LE: the stream
//     bytes of the other direction the sender holds) | 8 zero | tag (16)
//   DATA (type 2, len 1..kMaxFrameData, seq = sequence of its first byte)
//   SWITCHBACK (type 3, len 32: the direction goes back to RDMA at seq;
//     recover/reattach_wire.h)
//   RAW (type 4, flags 0, len 32, seq = the sender's next sequence: its
//     frames end here, its bytes from seq on follow raw; sent at fork,
//     docs/protocol.md §7 "At the fork"): received (8, LE) | 8 zero |
//     tag (16) = SipHash-2-4-128(key, "XPRW" | dir | seq | received)
// tag = SipHash-2-4-128(key = the session key (§2), "XPRS" | dir | flags |
//   seq | received), dir being the sender's direction (0 client->server).
// Pure functions over bytes: every malformed input is rejected (invalid),
// never trusted.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "recover/upgrade_wire.h"

namespace xp::recover {

constexpr size_t kFrameHeaderBytes = 16;
constexpr size_t kResumePayloadBytes = 32;
constexpr uint32_t kMaxFrameData = 1u << 20;
constexpr uint8_t kFrameResume = 1, kFrameData = 2;
constexpr uint8_t kResumeKnowsStart = 1;
// flags bit 1: the sender moved the stream over a working channel
// (stream/move.cc): the bytes after this frame are raw, from `seq` on.
constexpr uint8_t kResumeMoved = 2;

// RAW: the direction turns back into plain TCP at `seq` (resume_fork.h).
constexpr uint8_t kFrameRaw = 4;
constexpr size_t kRawPayloadBytes = 32;
constexpr size_t kRawFrameBytes = kFrameHeaderBytes + kRawPayloadBytes;

struct FrameHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t len = 0;
  uint64_t seq = 0;
};

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
// Magic, known type, its length rule and flags; invalid otherwise.
Status parse_frame_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* out);

struct ResumeInfo {
  bool knows_start = false; // flags bit 0
  bool moved = false;       // flags bit 1
  uint64_t from = 0;        // header seq
  uint64_t received = 0;
};
// A whole RESUME frame (header + payload).
constexpr size_t kResumeFrameBytes = kFrameHeaderBytes + kResumePayloadBytes;
void encode_resume(const uint8_t key[kNonceBytes], Dir sender, const ResumeInfo& in,
                   uint8_t out[kResumeFrameBytes]);
// The payload of a RESUME whose header parsed; invalid on a bad tag or
// non-zero reserved bytes.
Status parse_resume(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                    const uint8_t payload[kResumePayloadBytes], ResumeInfo* out);

// A whole RAW frame: our frames end at `at`, we hold `received` of the
// other direction.
void encode_raw(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t received,
                uint8_t out[kRawFrameBytes]);
// The payload of a RAW whose header parsed: *received on success; invalid
// on a bad tag or non-zero reserved bytes.
Status parse_raw(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                 const uint8_t payload[kRawPayloadBytes], uint64_t* received);

// RESUME, RAW and SWITCHBACK share one payload (above): value | 8 zero |
// tag over "XPR" kind | dir | flags (RESUME's kind 'S' only) | seq | value.
// For the three frames' own functions (here and recover/reattach_wire.cc).
constexpr size_t kCounterPayloadBytes = 32;
void encode_counter_frame(const uint8_t key[kNonceBytes], char kind, Dir sender,
                          const FrameHeader& h, uint64_t value,
                          uint8_t out[kFrameHeaderBytes + kCounterPayloadBytes]);
// invalid unless h.len fits, the reserved bytes are zero and the tag verifies.
Status parse_counter_payload(const uint8_t key[kNonceBytes], char kind, Dir sender,
                             const FrameHeader& h, const uint8_t payload[kCounterPayloadBytes],
                             uint64_t* value);

} // namespace xp::recover
