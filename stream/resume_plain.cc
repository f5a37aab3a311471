// A peer that goes on unframed from its S where we expected its frames
// (docs/protocol.md §7, "Who may write frames"): the channel failed while
// the switches crossed, and it had neither our ACK of its SWITCH nor our
// SWITCH.  Callers hold Conn::mu.
#include "common/logsink.h"
#include "stream/engine_internal.h"
#include "stream/resume_internal.h"

namespace xp::stream::resume {

// The peer's plain bytes from its S that we had over RDMA already: they
// must be the same bytes (else the channel's peer was not the TCP peer, a
// forger's, docs/protocol.md §8).  false: given up, or all of p taken.
bool check_plain(Conn* c, Resume* r, const uint8_t** p, size_t* n) {
  const size_t m = r->check_left < *n ? static_cast<size_t>(r->check_left) : *n;
  r->check.add(*p, m);
  r->check_left -= m;
  r->rx_skip -= m;
  *p += m;
  *n -= m;
  if (r->check_left == 0) {
    if (r->check.tag() != r->rx_digest) {
      give_up(c, r, "the peer's plain bytes after S are not those it sent over RDMA");
      return false;
    }
    r->rx_framed = false; // its direction is plain TCP from S: its end is an end
  }
  return *n > 0;
}

// The first bytes after the peer's S are no frame (a RESUME starts with
// the magic): the peer goes on unframed from S, as it does when it had
// neither our ACK of its SWITCH nor our SWITCH when the channel failed, so
// it reads us plain too (docs/protocol.md §7).  Bytes that merely look
// like a magic stay frames, whose check then resets the stream.
bool peer_went_plain(Conn* c, Resume* r, const uint8_t* p, size_t n) {
  if (r->peer_resumed || r->moved || c->reup.returned || r->hdr_have >= 2 || !r->rx_digest_ok ||
      r->fin || r->rx_next < c->sess.rx_offset())
    return false;
  uint8_t key[recover::kSipKeyBytes];
  if (!digest_key(key)) return false;
  if (r->hdr_have == 0 ? p[0] == 'X' && (n < 2 || p[1] == 'F') : p[0] == 'F') return false;
  if (r->tx == Resume::Tx::framed || (r->tx == Resume::Tx::shut && r->tx_next != r->tx_start)) {
    give_up(c, r, "the peer sends plain bytes after S, which it cannot read from us");
    return true;
  }
  if (r->tx == Resume::Tx::wait) continue_unframed(c, r);
  r->rx_raw = true;
  r->rx_skip = r->check_left = r->rx_next - c->sess.rx_offset(); // it re-sends from S
  r->check.start(key);
  if (r->check_left == 0) r->rx_framed = false; // nothing came over RDMA after S
  c->reup.never = true;
  XP_SLOG(XP_SLOG_DEBUG, "fd %d: stream %u: the peer goes on unframed at its S", c->sock(), c->sid);
  const uint8_t* h = r->hdr;
  size_t hn = r->hdr_have;
  r->hdr_have = 0;
  if (hn && (r->check_left == 0 || check_plain(c, r, &h, &hn))) raw_in(r, h, hn);
  return true;
}

} // namespace xp::stream::resume
