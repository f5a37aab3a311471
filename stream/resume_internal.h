// Shared by resume.cc (start, pump) and resume_io.cc (the data calls of a
// resumed connection).  Callers hold Conn::mu.
#pragma once
#include <cstddef>
#include <cstdint>

#include "stream/conn.h"

namespace xp::stream::resume {

constexpr uint32_t kFrameChunk = 64 * 1024; // DATA frames we write carry at most this

// Append stream bytes [seq, seq+n) to r->out, in DATA frames when framed.
void queue_data(Resume* r, const uint8_t* p, size_t n, uint64_t seq, bool framed);
// The kernel's bytes into pre/buf (true when anything moved), out into the
// kernel; neither blocks.
bool fill_rx(Conn* c, Resume* r);
void flush_out(Conn* c, Resume* r);
// Statistics and log once the stream flows again; readiness bits, edges
// and sleepers.
void settle(Conn* c, Resume* r, bool moved);
// The stream cannot go on: reset it (and the TCP connection).
void give_up(Conn* c, Resume* r, const char* why);
// ch->mu held: the bytes of s the peer may lack ([acked, next) of its
// window) from the staging ring into r->resend; *first: where they start.
// false: not all there (a gap), nothing re-sendable.
bool collect_resend(Channel* ch, Stream* s, Resume* r, uint64_t* first);
// Our RESUME and the re-sent bytes from `from` on into r->out (framed).
void go_framed(Conn* c, Resume* r, uint64_t from);
// The peer never saw our SWITCH: continue at S, unframed (or give up when
// bytes after S are not all in r->resend).
void continue_unframed(Conn* c, Resume* r);
// Raw bytes from the peer into buf, the first r->rx_skip of them dropped.
void raw_in(Resume* r, const uint8_t* p, size_t n);
// resume_plain.cc: the first bytes after the peer's S (p, n) are no frame
// and the peer goes on unframed: true when taken so (r->rx_raw, or given
// up).  Then check_plain() takes what must match what came over RDMA:
// false once given up or when all of (*p, *n) went.
bool peer_went_plain(Conn* c, Resume* r, const uint8_t* p, size_t n);
bool check_plain(Conn* c, Resume* r, const uint8_t** p, size_t* n);

} // namespace xp::stream::resume
