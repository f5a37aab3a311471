// Moving a resumed stream back onto RDMA (docs/protocol.md §7 "Back to
// RDMA"): the records that bind it to a new channel, the SWITCHBACK frame
// that ends its framed TCP direction, and the back-off between attempts.
// Pure functions over bytes: every malformed input is rejected (invalid).
//
// REATTACH (record type 13; header stream = proposed id, seq = attempt
// counter), 32 bytes: version (1, = 2) | 3 zero | client addr (4) |
// server addr (4) | client port (2, network order) | server port (2) |
// tag (16) = SipHash-2-4-128(key, "XPRA" | the 12 tuple bytes | id (4 LE) |
// counter (8 LE) | the channel it crosses (encode_channel_binding)).
// REATTACH_ACK (type 14; stream = id, seq = counter), 16 bytes: tag over
// "XPRK" | the same fields: the answer proves the answering process holds
// the session key too (a sibling on the same port cannot fake it).
// SWITCHBACK frame (TCP, type 3, flags 0, len 32, seq = S'): counter (8 LE:
// the attempt whose channel the bytes from S' go to) | 8 zero | tag (16)
// over "XPRB" | dir | S' (8 LE) | counter (8 LE), dir being the sender's
// direction.  The counter tells the receiver whether the bytes after S'
// come over the channel it is bound to now, or (an older attempt, whose
// channel failed) in a RESUME that follows on TCP.
// key = the session key of docs/protocol.md §2 (from the key exchange).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "recover/resume_wire.h"
#include "recover/upgrade_wire.h"

namespace xp::recover {

constexpr size_t kReattachBytes = 32;
constexpr size_t kReattachAckBytes = 16;
// Version 1's tag named no channel, so a process that received it could
// relay it over its own channel (docs/protocol.md §7 "Back to RDMA"): it is
// refused with NAK version.
constexpr uint8_t kReattachVersion = 2;
constexpr uint8_t kFrameSwitchback = 3;
constexpr size_t kSwitchbackPayloadBytes = 32;
constexpr size_t kSwitchbackFrameBytes = kFrameHeaderBytes + kSwitchbackPayloadBytes;

// IPv4 tuples only (as the upgrade): false for another family.
bool encode_reattach(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                     uint64_t counter, const ChannelBinding& b, uint8_t out[kReattachBytes]);
// The tuple named (checked against what we hold by the caller), then the tag
// with our key: invalid for a wrong length, version, reserved byte or tag;
// *nak says what to answer (version or failed).  The tuple is decoded
// before the tag is checked (parse_reattach_tuple) so that the receiver can
// look up which session's key to use.
Status parse_reattach_tuple(const uint8_t* p, size_t len, TcpTuple* t, NakCode* nak);
Status check_reattach(const uint8_t key[kNonceBytes], const uint8_t* p, size_t len, uint32_t id,
                      uint64_t counter, const ChannelBinding& b);
void encode_reattach_ack(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                         uint64_t counter, const ChannelBinding& b, uint8_t out[kReattachAckBytes]);
Status check_reattach_ack(const uint8_t key[kNonceBytes], const TcpTuple& t, uint32_t id,
                          uint64_t counter, const ChannelBinding& b, const uint8_t* p, size_t len);

void encode_switchback(const uint8_t key[kNonceBytes], Dir sender, uint64_t at, uint64_t counter,
                       uint8_t out[kSwitchbackFrameBytes]);
// The payload of a SWITCHBACK whose header parsed (parse_frame_header):
// *counter on success.
Status check_switchback(const uint8_t key[kNonceBytes], Dir sender, const FrameHeader& h,
                        const uint8_t payload[kSwitchbackPayloadBytes], uint64_t* counter);

// Back-off between attempts of one stream (XPRESS_REUPGRADE_MS,
// XPRESS_REUPGRADE_MAX_MS): the delay before the next attempt after a
// failed one (doubled, capped), and after the stream failed again having
// been back on RDMA for `on_rdma_ms` (the initial delay only when it stayed
// there for the maximum; a shorter stay counts as a failed attempt).
uint32_t backoff_after_failure(uint32_t cur, uint32_t initial, uint32_t max);
uint32_t backoff_after_return(uint32_t cur, uint32_t initial, uint32_t max, uint64_t on_rdma_ms);

} // namespace xp::recover
