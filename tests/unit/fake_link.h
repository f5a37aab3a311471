// An in-memory verbs::Link pair for protocol tests without a NIC (eRPC's
// fake transport idea), with fault injection: fail the Nth post, corrupt an
// immediate, and count receive-queue underruns (what would be RNR retries).
#pragma once
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <unistd.h>
#include <vector>

#include "common/switches.h"
#include "verbs/link.h"

namespace xp::test {

class FakeLink : public verbs::Link {
public:
  // spare: receive WRs posted beyond recv_wrs, which the channel may owe
  // back (verbs::Link::recv_spare); 0: it gives each back at once.
  FakeLink(size_t ring, uint32_t recv_wrs, uint32_t sq_depth = 128, uint32_t spare = 0)
      : ring_(ring), recv_posted_(recv_wrs + spare), sq_depth_(sq_depth), spare_(spare) {}
  static void connect(FakeLink& a, FakeLink& b) {
    a.peer_ = &b;
    b.peer_ = &a;
    a.stage_.assign(b.ring_.size(), 0);
    b.stage_.assign(a.ring_.size(), 0);
  }

  uint8_t* send_stage() override { return stage_.data(); }
  size_t peer_ring_size() const override { return peer_->ring_.size(); }
  const uint8_t* recv_ring() const override { return ring_.data(); }
  size_t recv_ring_size() const override { return ring_.size(); }
  uint32_t max_inline() const override { return 64; }
  uint32_t send_queue_depth() const override { return sq_depth_; }

  Status post_write_imm(size_t off, size_t len, uint32_t imm, bool signaled, bool solicited,
                        uint64_t wr_id) override {
    std::lock_guard<std::mutex> l(wire()); // threads of a test may post and poll at once
    ++posts;
    (solicited ? solicited_posts : unsolicited_posts) += 1;
    if (failed) return Status::io_error;
    if (peer_->failed) { // a peer in the error state: retries run out
      cq_.push_back({verbs::Completion::Kind::error, 0, wr_id, 12});
      return Status::ok;
    }
    if (fail_post_at != 0 && posts == fail_post_at) return Status::io_error;
    if (off + len > stage_.size()) {
      ++overruns;
      return Status::invalid;
    }
    wire_bytes += len;
    if (!held_.empty()) { // RC order: behind the held zero-copy writes
      --posts;            // counted when it runs
      held_.push_back(Held{off, len, nullptr, 0, imm, signaled ? wr_id : 0});
      return Status::ok;
    }
    if (peer_->recv_posted_ == 0)
      ++peer_->rnr; // real hardware would RNR-retry
    else
      --peer_->recv_posted_;
    memcpy(peer_->ring_.data() + off, stage_.data() + off, len);
    if (corrupt_imm_at != 0 && posts == corrupt_imm_at) imm ^= 0x7;
    peer_->cq_.push_back({verbs::Completion::Kind::recv_imm, imm, 0, 0});
    if (signaled) cq_.push_back({verbs::Completion::Kind::send_done, 0, wr_id, 0});
    return Status::ok;
  }
  // Zero copy: header from the staging mirror, payload from the caller's
  // buffer.  With hold_gathers the write waits in held_ (as a NIC that has
  // not read the buffer yet) until run_held(); a failure flushes it unsent.
  Status post_write_imm_gather(size_t off, size_t hdr_len, const void* payload, size_t len,
                               uint32_t lkey, uint32_t imm, uint64_t wr_id) override {
    (void)lkey;
    if (sge_ < 2) return Status::unsupported;
    std::lock_guard<std::mutex> l(wire());
    ++gathers;
    if (failed) return Status::io_error;
    if (off + hdr_len + len > stage_.size()) {
      ++overruns;
      return Status::invalid;
    }
    held_.push_back(Held{off, hdr_len, static_cast<const uint8_t*>(payload), len, imm, wr_id});
    if (!hold_gathers) run_held_locked();
    return Status::ok;
  }
  uint32_t max_send_sge() const override { return sge_; }
  void run_held() {
    std::lock_guard<std::mutex> l(wire());
    run_held_locked();
  }
  void run_held_locked() {
    for (const Held& w : held_) {
      ++posts;
      if (peer_->failed) {
        cq_.push_back({verbs::Completion::Kind::error, 0, w.wr_id, 12});
        continue;
      }
      if (peer_->recv_posted_ == 0)
        ++peer_->rnr;
      else
        --peer_->recv_posted_;
      memcpy(peer_->ring_.data() + w.off, stage_.data() + w.off, w.hdr);
      if (w.payload) memcpy(peer_->ring_.data() + w.off + w.hdr, w.payload, w.len);
      peer_->cq_.push_back({verbs::Completion::Kind::recv_imm, w.imm, 0, 0});
      if (w.wr_id) cq_.push_back({verbs::Completion::Kind::send_done, 0, w.wr_id, 0});
    }
    held_.clear();
  }
  size_t held() const {
    std::lock_guard<std::mutex> l(wire());
    return held_.size();
  }
  // Whether a held write would still read [p, p+n) (the application's buffer).
  bool holds(const void* p, size_t n) const {
    std::lock_guard<std::mutex> l(wire());
    auto a = static_cast<const uint8_t*>(p);
    for (const Held& w : held_)
      if (w.payload && w.payload < a + n && a < w.payload + w.len) return true;
    return false;
  }
  Status post_recvs(uint32_t n) override {
    std::lock_guard<std::mutex> l(wire());
    recv_posted_ += n;
    ++recv_posts;
    return Status::ok;
  }
  uint32_t recv_spare() const override { return spare_; }
  // Receive WRs posted and not consumed (the "NIC"'s receive queue).
  uint64_t recv_queue() const {
    std::lock_guard<std::mutex> l(wire());
    return recv_posted_;
  }
  int poll(verbs::Completion* out, int max) override {
    std::lock_guard<std::mutex> l(wire());
    if (failed && max > 0) { // as a QP in the error state: flush errors
      // Requests the "NIC" still held are flushed with their ids, as a QP
      // in the error state reports every outstanding work request.
      while (!held_.empty() && held_.front().wr_id == 0)
        held_.pop_front(); // an unsignaled copy: its flush id is not needed here
      if (!held_.empty()) {
        out[0] = {verbs::Completion::Kind::error, 0, held_.front().wr_id, 5};
        held_.pop_front();
        return 1;
      }
      out[0] = {verbs::Completion::Kind::error, 0, 0, 5};
      return 1;
    }
    if (late_until_ns && mono_ns() < late_until_ns) return 0; // "retransmitted" later
    int n = 0;
    while (n < max && !cq_.empty()) {
      out[n++] = cq_.front();
      cq_.pop_front();
    }
    return n;
  }
  Status arm(bool solicited_only) override {
    ++arms;
    armed_solicited = solicited_only;
    return Status::ok;
  }
  bool peer_solicits() const override { return solicits; }
  bool solicits = true; // the peer's ring version is 5 or later
  uint64_t solicited_posts = 0, unsolicited_posts = 0, arms = 0;
  bool armed_solicited = false; // the last arm's kind
  // A completion channel, for tests that need one: an eventfd the test
  // writes to raise "an event" (ack_event reads it); -1: none.
  int event_fd = -1;
  uint64_t wire_bytes = 0; // bytes the copy-path writes carried
  int wait_fd() const override { return event_fd; }
  bool ack_event() override {
    uint64_t v;
    return event_fd >= 0 && read(event_fd, &v, sizeof v) == sizeof v;
  }
  // Hostile peer: write raw bytes into our ring and announce them.
  void inject(size_t off, const void* bytes, size_t len, uint32_t imm) {
    memcpy(ring_.data() + off, bytes, len);
    cq_.push_back({verbs::Completion::Kind::recv_imm, imm, 0, 0});
  }

  // Hostile peer: a plain RDMA WRITE into our ring at any time (no
  // completion, no credit), e.g. rewriting a record that already arrived.
  void overwrite(size_t off, const void* bytes, size_t len) {
    memcpy(ring_.data() + off, bytes, len);
  }

  // "Fail now": the link breaks (posts fail, polls report an error), as
  // XPRESS_FAULT_QP_ERROR_AT does to a real queue pair.
  Status force_error() override {
    failed = true;
    return Status::ok;
  }
  // Records written but not yet polled by the peer are lost with it.
  void drop_in_flight() { cq_.clear(); }
  // Nothing arrives before this CLOCK_MONOTONIC time (0: no delay): records
  // that an RC retransmission brings late.
  uint64_t late_until_ns = 0;
  static uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  }

  uint64_t recv_posts = 0; // provider calls that gave receive WRs back
  uint64_t posts = 0, rnr = 0, overruns = 0, fail_post_at = 0, corrupt_imm_at = 0, gathers = 0;
  bool failed = false;
  bool hold_gathers = false;
  uint32_t sge_ = 2; // a test sets 1: a QP that cannot gather
  int domain_ = -1;  // mem_domain(): a test attaches a fake registrar's slot

  int mem_domain() const override { return domain_; }
  // What this end told its peer as its per-stream window (0: nothing).
  size_t told_window = 0;
  size_t peer_stream_window() const override { return peer_ ? peer_->told_window : 0; }

private:
  // One lock for every fake link: the two ends' queues cross (a post fills
  // the peer's completion queue).
  static std::mutex& wire() {
    static std::mutex m;
    return m;
  }
  struct Held {
    size_t off, hdr;
    const uint8_t* payload;
    size_t len;
    uint32_t imm;
    uint64_t wr_id;
  };
  std::deque<Held> held_;
  std::vector<uint8_t> ring_;
  std::vector<uint8_t> stage_;
  uint64_t recv_posted_;
  uint32_t sq_depth_;
  uint32_t spare_;
  FakeLink* peer_ = nullptr;
  std::deque<verbs::Completion> cq_;
};

// Two connected fake links with one receive WR per 64-byte ring slot (as
// many as records the ring can hold) plus the spares RcLink posts, as
// channels are built on them: the links first, connected, then the channels
// (a test's pair derives from it).
struct LinkPair {
  FakeLink la, lb;
  explicit LinkPair(size_t ring, uint32_t sq_depth = 128, uint32_t spare = sw::kRecvSpare)
      : la(ring, ring / 64, sq_depth, spare), lb(ring, ring / 64, sq_depth, spare) {
    FakeLink::connect(la, lb);
  }
};

} // namespace xp::test
