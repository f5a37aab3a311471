// An in-memory verbs::Link pair for protocol tests without a NIC (eRPC's
// fake transport idea), with fault injection: fail the Nth post, corrupt an
// immediate, and count receive-queue underruns (what would be RNR retries).
#pragma once
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "verbs/link.h"

namespace xp::test {

class FakeLink : public verbs::Link {
public:
  FakeLink(size_t ring, uint32_t recv_wrs, uint32_t sq_depth = 128)
      : ring_(ring), recv_posted_(recv_wrs), sq_depth_(sq_depth) {}
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

  Status post_write_imm(size_t off, size_t len, uint32_t imm, bool signaled,
                        uint64_t wr_id) override {
    std::lock_guard<std::mutex> l(wire()); // threads of a test may post and poll at once
    ++posts;
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
  Status post_recv() override {
    std::lock_guard<std::mutex> l(wire());
    ++recv_posted_;
    return Status::ok;
  }
  int poll(verbs::Completion* out, int max) override {
    std::lock_guard<std::mutex> l(wire());
    if (failed && max > 0) { // as a QP in the error state: flush errors
      out[0] = {verbs::Completion::Kind::error, 0, 0, 5};
      return 1;
    }
    int n = 0;
    while (n < max && !cq_.empty()) {
      out[n++] = cq_.front();
      cq_.pop_front();
    }
    return n;
  }
  Status arm() override { return Status::ok; }
  int wait_fd() const override { return -1; }
  bool ack_event() override { return false; }
  // Hostile peer: write raw bytes into our ring and announce them.
  void inject(size_t off, const void* bytes, size_t len, uint32_t imm) {
    memcpy(ring_.data() + off, bytes, len);
    cq_.push_back({verbs::Completion::Kind::recv_imm, imm, 0, 0});
  }

  // "Fail now": the link breaks (posts fail, polls report an error), as
  // XPRESS_FAULT_QP_ERROR_AT does to a real queue pair.
  Status force_error() override {
    failed = true;
    return Status::ok;
  }
  // Records written but not yet polled by the peer are lost with it.
  void drop_in_flight() { cq_.clear(); }

  uint64_t posts = 0, rnr = 0, overruns = 0, fail_post_at = 0, corrupt_imm_at = 0;
  bool failed = false;

private:
  // One lock for every fake link: the two ends' queues cross (a post fills
  // the peer's completion queue).
  static std::mutex& wire() {
    static std::mutex m;
    return m;
  }
  std::vector<uint8_t> ring_;
  std::vector<uint8_t> stage_;
  uint64_t recv_posted_;
  uint32_t sq_depth_;
  FakeLink* peer_ = nullptr;
  std::deque<verbs::Completion> cq_;
};

} // namespace xp::test
