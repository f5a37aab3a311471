#include "stream/mux.h"

#include "common/bulk_copy.h"
#include "common/logsink.h"

#include "recover/upgrade_wire.h"
#include "stream/fault.h"

#include <cstring>
#include <new>
#include <sys/random.h>

namespace xp::stream {

// recover/ (below this layer's includes of flow/) names the upgrade record
// types by number; both lists must agree.
static_assert(static_cast<uint8_t>(flow::RecordType::attach) == recover::msg::attach);
static_assert(static_cast<uint8_t>(flow::RecordType::attach_ack) == recover::msg::attach_ack);
static_assert(static_cast<uint8_t>(flow::RecordType::attach_nak) == recover::msg::attach_nak);
static_assert(static_cast<uint8_t>(flow::RecordType::switch_) == recover::msg::switch_);
static_assert(static_cast<uint8_t>(flow::RecordType::keepalive) == recover::msg::keepalive);
static_assert(static_cast<uint8_t>(flow::RecordType::proof) == recover::msg::proof);
static_assert(static_cast<uint8_t>(flow::RecordType::share) == recover::msg::share);
static_assert(flow::kMaxControlPayload == recover::kMaxControlPayload);

using flow::RecordType;

Stream::Stream(Mux* mux, uint32_t id, uint64_t tx_start, uint64_t rx_start, size_t window,
               size_t tx_window, flow::WindowBudget* channel_budget)
    : mux_(mux), id_(id), window_(tx_start, tx_window, channel_budget, nullptr), rx_(window),
      window_size_(window), tx_window_(tx_window), rx_next_(rx_start), delivered_(rx_start),
      acked_sent_(rx_start) {}

bool Stream::writable() const {
  if (frozen_) return false;
  if (fin_sent_ || reset_) return true; // a write reports the error at once
  return window_.unacked() < tx_window_ && mux_->channel_.can_send(1);
}

size_t Stream::reserve_record(size_t want, uint64_t* seq) {
  size_t chunk = want;
  size_t max = mux_->channel_.max_payload();
  if (chunk > max) chunk = max;
  if (!mux_->channel_.can_send(chunk)) {
    // A smaller record may still fit the credit left.
    while (chunk > 1 && !mux_->channel_.can_send(chunk))
      chunk /= 2;
    if (!mux_->channel_.can_send(chunk)) return 0;
  }
  uint64_t allowed = 0;
  if (window_.reserve(chunk, &allowed) != Status::ok) {
    ++mux_->counters_.window_stalls;
    return 0;
  }
  *seq = window_.next() - allowed;
  return static_cast<size_t>(allowed);
}

bool Stream::may_hold(size_t fresh) const {
  const flow::RecordChannel& ch = mux_->channel_;
  const uint64_t held = ch.corked() && ch.cork_stream() == id_ ? ch.cork_len() : 0;
  // A full window cannot add to the record: nothing to wait for.
  return window_.unacked() >= fresh + held + tx_window_ / 4 && window_.unacked() < tx_window_;
}

Status Stream::write(const void* buf, size_t len, size_t* done, size_t call_taken, bool more) {
  *done = 0;
  if (reset_ || fin_sent_ || mux_->failed_) return Status::closed;
  if (frozen_) return Status::no_resource; // moving to TCP: the caller waits
  const auto* p = static_cast<const uint8_t*>(buf);
  // Unacknowledged bytes of earlier calls: one large send() of a message
  // never holds its own tail (the peer may answer only after all of it).
  const uint64_t unacked = window_.unacked();
  const bool earlier_busy = (unacked > call_taken ? unacked - call_taken : 0) >= tx_window_ / 4;
  while (*done < len) {
    uint64_t seq = 0;
    size_t allowed = reserve_record(len - *done, &seq);
    if (allowed == 0) break;
    // MSG_MORE holds unless the window is full (nothing could join).
    const bool hold =
        (more && window_.unacked() < tx_window_) || (earlier_busy && may_hold(allowed));
    Status st = mux_->channel_.send(id_, seq, p + *done, allowed, hold);
    if (st != Status::ok) {
      // can_send() said yes, so only a failed link gets here.  The bytes
      // were not accepted: recovery must not re-send them.
      window_.unreserve(allowed);
      mux_->failed_ = true;
      return *done > 0 ? Status::ok : Status::io_error;
    }
    if (early_keep_) keep_early(p + *done, allowed);
    *done += allowed;
    if (fault::armed()) fault::on_sent(mux_->link_, allowed);
  }
  // A held record that went with these bytes (send without hold) may have
  // found the link failed: the bytes are staged, so recovery re-sends them,
  // and the caller learns of the failure now rather than at the next poll.
  if (mux_->channel_.failed()) mux_->failed_ = true;
  more_ = more;
  return *done > 0 || len == 0 ? Status::ok : Status::no_resource;
}

Status Stream::write_zero_copy(const void* buf, size_t len, uint32_t lkey, size_t* done) {
  *done = 0;
  if (reset_ || fin_sent_ || mux_->failed_) return Status::closed;
  const auto* p = static_cast<const uint8_t*>(buf);
  // One pending buffer per stream, extended only contiguously (in sequence
  // and in memory): recovery maps sequence to buffer by one offset.
  if (!mux_->channel_.zero_copy_capable() ||
      (zc_active_ && (window_.next() != zc_hi_ || p != zc_src_ + (zc_hi_ - zc_lo_))))
    return Status::unsupported;
  while (*done < len) {
    uint64_t seq = 0, wr = 0;
    size_t allowed = reserve_record(len - *done, &seq);
    if (allowed == 0) break;
    Status st = mux_->channel_.send_zero_copy(id_, seq, p + *done, allowed, lkey, &wr);
    if (st != Status::ok) {
      window_.unreserve(allowed); // not accepted: recovery must not re-send it
      if (st == Status::unsupported && *done == 0) return st;
      mux_->failed_ = true;
      return *done > 0 ? Status::ok : Status::io_error;
    }
    if (!zc_active_) {
      zc_active_ = true;
      zc_lo_ = zc_hi_ = seq;
      zc_src_ = p + *done;
    }
    zc_hi_ += allowed;
    zc_last_wr_ = wr;
    if (early_keep_) keep_early(p + *done, allowed);
    *done += allowed;
    if (fault::armed()) fault::on_sent(mux_->link_, allowed);
  }
  return *done > 0 || len == 0 ? Status::ok : Status::no_resource;
}

size_t Stream::zero_copy_release() {
  if (!zc_active_) return 0;
  zc_active_ = false;
  // Bytes below acked() are never re-sent; credited records are held by
  // the peer.  What is left (at most a window) recovery may need.
  uint64_t lo = window_.acked() > zc_lo_ ? window_.acked() : zc_lo_;
  if (lo >= zc_hi_) return 0;
  return mux_->channel_.fill_uncredited(id_, open_cursor_, lo, zc_hi_, zc_lo_, zc_src_);
}

void Stream::zero_copy_overlay(uint64_t lo, uint64_t hi, uint8_t* dst) const {
  if (!zc_active_) return;
  uint64_t a = lo > zc_lo_ ? lo : zc_lo_, b = hi < zc_hi_ ? hi : zc_hi_;
  if (a < b) bulk_copy(dst + (a - lo), zc_src_ + (a - zc_lo_), b - a);
}

Status Stream::read(void* buf, size_t len, size_t* got, bool peek) {
  *got = rx_.get(buf, len, peek);
  if (*got > 0) {
    if (!peek) {
      delivered_ += *got;
      maybe_ack();
    }
    return Status::ok;
  }
  if (reset_) return Status::closed;
  if (fin_received_ || len == 0) return Status::ok; // end of stream: 0 bytes
  return Status::would_block;
}

void Stream::lend(const iovec* v, int n) {
  lent_ = n > 0 ? v : nullptr;
  lent_n_ = n;
  lent_i_ = 0;
  lent_off_ = lent_got_ = 0;
}

size_t Stream::take_lent() {
  const size_t got = lent_got_;
  lent_ = nullptr;
  lent_got_ = 0;
  if (got > 0) {
    delivered_ += got;
    mux_->counters_.direct_bytes += got;
    maybe_ack();
  }
  return got;
}

size_t Stream::fill_lent(const uint8_t* p, size_t n) {
  size_t done = 0;
  while (done < n && lent_i_ < lent_n_) {
    const iovec& e = lent_[lent_i_];
    size_t take = e.iov_len - lent_off_;
    if (take > n - done) take = n - done;
    bulk_copy(static_cast<uint8_t*>(e.iov_base) + lent_off_, p + done, take);
    done += take;
    lent_off_ += take;
    if (lent_off_ == e.iov_len) {
      ++lent_i_;
      lent_off_ = 0;
    }
  }
  lent_got_ += done;
  return done;
}

Status Stream::set_tx_start(uint64_t s) {
  if (tx_start_set_ || window_.next() != window_.acked() || fin_sent_) return Status::invalid;
  uint64_t base = window_.next();
  if (base != 0 && base != s) return Status::invalid; // opened with a real offset already
  window_ = flow::SendWindow(s, tx_window_, &mux_->budget_, nullptr);
  tx_start_set_ = true;
  early_keep_ = !peer_rx_started_;
  early_start_ = s;
  return Status::ok;
}

void Stream::keep_early(const uint8_t* p, size_t n) {
  if (peer_rx_started_) {
    early_keep_ = false;
    std::vector<uint8_t>().swap(early_);
    return;
  }
  early_.insert(early_.end(), p, p + n); // at most the send window: the peer acknowledges none
}

bool Stream::early_bytes(const uint8_t** p, size_t* n) const {
  if (!early_keep_ || peer_rx_started_ || early_start_ + early_.size() != window_.next())
    return false;
  *p = early_.data();
  *n = early_.size();
  return true;
}

Status Stream::set_rx_start(uint64_t s) {
  if (peer_dropped_ || rx_start_set_ || rx_.size() != 0 || rx_next_ != delivered_ || fin_received_)
    return Status::invalid;
  if (rx_next_ != 0 && rx_next_ != s) return Status::invalid;
  rx_next_ = delivered_ = acked_sent_ = s;
  rx_start_set_ = true;
  uint8_t key[recover::kSipKeyBytes];
  rx_digest_on_ = !peer_rx_started_ && digest_key(key);
  if (rx_digest_on_) rx_digest_.start(key);
  return Status::ok;
}

namespace {
// Each word is set once, by the first thread whose compare-exchange finds
// it 0: no thread ever waits for another (a function-local static would:
// its guard, taken by a thread that a fork then left behind, would hang
// the child's first call).  A key mixed from two threads' candidates is
// as random as either.
std::atomic<uint64_t> g_key_words[2];
} // namespace

bool digest_key(uint8_t out[recover::kSipKeyBytes]) {
  uint64_t w[2] = {g_key_words[0].load(std::memory_order_acquire),
                   g_key_words[1].load(std::memory_order_acquire)};
  if (w[0] == 0 || w[1] == 0) {
    uint64_t cand[2];
    if (getrandom(cand, sizeof cand, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof cand))
      return false;
    for (int i = 0; i < 2; ++i) {
      uint64_t zero = 0;
      if (cand[i] == 0) cand[i] = 1; // 0 means "not set"
      if (g_key_words[i].compare_exchange_strong(zero, cand[i], std::memory_order_acq_rel))
        w[i] = cand[i];
      else
        w[i] = zero; // another thread's, set for good
    }
  }
  memcpy(out, w, sizeof w);
  return true;
}

void Stream::ack_switch() {
  ack_pending_ = true;
  maybe_ack();
}

void Stream::reset() {
  if (!reset_ && !mux_->failed_ && !frozen_)
    mux_->channel_.send_control(RecordType::rst, id_, window_.next());
  reset_ = true;
}

void Stream::end_as_close() {
  if (readable_bytes() > 0)
    reset();
  else if (!fin_sent_ && !reset_ && !mux_->failed_)
    (void)shutdown_write();
}

Status Stream::shutdown_write() {
  if (fin_sent_) return Status::ok;
  if (frozen_) return Status::no_resource;
  if (reset_) return Status::closed;
  Status st = mux_->channel_.send_control(RecordType::fin, id_, window_.next());
  if (st == Status::ok) fin_sent_ = true;
  return st;
}

// Acknowledge once a quarter of the window was consumed: the sender's
// window then always has room while the application keeps reading.
Status Stream::maybe_ack() {
  if (frozen_) return Status::ok; // nothing of ours follows our MOVE
  if (!ack_pending_ && delivered_ - acked_sent_ < window_size_ / 4) return Status::ok;
  Status st = mux_->channel_.send_control(RecordType::ack, id_, delivered_);
  if (st == Status::ok) {
    acked_sent_ = delivered_;
    ack_pending_ = false;
    ++mux_->counters_.acks_sent;
  } else if (st == Status::no_resource) {
    ack_pending_ = true; // retried by progress()
    mux_->acks_pending_ = true;
    st = Status::ok;
  }
  return st;
}

Status Stream::on_record(const flow::RecordHeader& h, const uint8_t* payload) {
  if (peer_dropped_) return Status::ok;
  switch (static_cast<RecordType>(h.type)) {
  case RecordType::data:
    // RC delivers in order: anything but the next sequence, data after
    // FIN, or more than the window we advertised is a broken peer.  Bytes
    // placed in a lent buffer count as consumed (take_lent), so the window
    // is checked against the last acknowledgement sent, not the buffer's
    // room.
    if (h.seq != rx_next_ || fin_received_ || h.seq + h.len - acked_sent_ > window_size_)
      return Status::invalid;
    {
      size_t direct = lent_ && rx_.size() == 0 ? fill_lent(payload, h.len) : 0;
      if (!rx_.put(payload + direct, h.len - direct)) return Status::invalid;
    }
    if (rx_digest_on_) { // what received() counts, no more
      rx_digest_len_ += h.len;
      rx_digest_on_ = rx_digest_len_ <= kRxDigestMax;
      rx_digest_.add(payload, h.len);
    }
    rx_next_ += h.len;
    return Status::ok;
  case RecordType::ack:
    // The peer acknowledges only after it verified our SWITCH (ack_switch).
    peer_rx_started_ = true;
    rx_digest_on_ = false;                   // the peer verified our SWITCH: it goes on framed
    if (early_keep_) keep_early(nullptr, 0); // its copy is no longer needed
    return window_.on_ack(h.seq);
  case RecordType::fin:
    if (h.seq != rx_next_ || fin_received_) return Status::invalid;
    fin_received_ = true;
    return Status::ok;
  case RecordType::rst:
    reset_ = true;
    return Status::ok;
  default:
    return Status::invalid;
  }
}

namespace {
// The stream table's key (stream/id_table.h): the peer names the ids.
uint32_t table_key() {
  uint32_t k = 0;
  if (getrandom(&k, sizeof k, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof k))
    k = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&k) >> 4);
  return k;
}
} // namespace

Mux::Mux(verbs::Link* link, const MuxParams& p)
    : channel_(link), link_(link), params_(p), budget_(p.channel_window), streams_(table_key()) {
  channel_.set_cork(p.cork_max);
}

Mux::~Mux() {
  streams_.each([](uint32_t, Stream* s) { delete s; });
}

Stream* Mux::open(uint32_t id, uint64_t tx_start, uint64_t rx_start) {
  if (failed_ || id > kMaxStreamId || streams_.size() >= params_.max_streams ||
      streams_.find(id) != nullptr)
    return nullptr;
  // We send at most what the peer's receive buffer holds (it told us its
  // window at set-up; the two ends may be configured differently).
  const size_t peer = link_->peer_stream_window();
  const size_t tx_window = peer != 0 && peer < params_.stream_window ? peer : params_.stream_window;
  auto* s = new (std::nothrow)
      Stream(this, id, tx_start, rx_start, params_.stream_window, tx_window, &budget_);
  if (s == nullptr) return nullptr;
  if (!s->rx_.ok()) {
    delete s;
    return nullptr;
  }
  s->open_cursor_ = channel_.send_cursor();
  if (!streams_.insert(id, s)) {
    delete s;
    return nullptr;
  }
  if (id >= fresh_from_) fresh_from_ = id + 1;
  return s;
}

bool Mux::fresh_id(uint32_t* id) const {
  // Ids at or above fresh_from_ were never opened here.
  if (streams_.size() >= params_.max_streams || fresh_from_ > kMaxStreamId) return false;
  *id = fresh_from_;
  return true;
}

void Mux::set_marked(Stream* s, bool on) {
  if (s == nullptr || find(s->id_) != s || s->marked_ == on) return;
  s->marked_ = on;
  if (on)
    marked_.fetch_add(1, std::memory_order_relaxed);
  else
    marked_.fetch_sub(1, std::memory_order_relaxed);
}

void Mux::close(Stream* s) {
  if (s == nullptr || find(s->id_) != s) return;
  set_marked(s, false);
  if (!s->fin_sent_ && !s->reset_ && !failed_) s->shutdown_write();
  // Unacknowledged bytes leave the channel budget with the stream.
  budget_.give(s->window_.unacked());
  streams_.erase(s->id_);
  delete s;
}

void Mux::forget(Stream* s) {
  if (s == nullptr || find(s->id_) != s) return;
  set_marked(s, false);
  budget_.give(s->window_.unacked());
  streams_.erase(s->id_);
  delete s;
}

Status Mux::progress() {
  if (failed_) return Status::io_error;
  flow::Record r[32];
  while (true) {
    int got = 0;
    Status st = channel_.poll(r, 32, &got);
    if (st != Status::ok) {
      failed_ = true;
      return st;
    }
    for (int i = 0; i < got; ++i) {
      // The header poll() validated (its own copy): never the ring's bytes.
      const flow::RecordHeader& h = r[i].hdr;
      Stream* s = find(h.stream);
      Status rs = Status::ok;
      if (h.type >= static_cast<uint8_t>(flow::RecordType::attach)) {
        rs = control_ ? control_(control_ctx_, h, r[i].payload) : Status::invalid;
      } else if (s == nullptr) {
        ++counters_.unknown_stream_records;
        XP_SLOG(XP_SLOG_DEBUG, "channel: record type %u for closed stream %u dropped", h.type,
                h.stream);
        // Data for a stream closed here: the kernel would answer with a
        // reset, so that a writer on the other side does not wait forever
        // for a window that never opens.
        if (h.type == static_cast<uint8_t>(flow::RecordType::data))
          channel_.send_control(RecordType::rst, h.stream, h.seq);
      } else {
        rs = s->on_record(h, r[i].payload);
      }
      channel_.release(r[i].slot);
      if (rs != Status::ok) {
        XP_SLOG(XP_SLOG_WARN, "channel: record type %u stream %u seq %llu len %u refused: %s",
                h.type, h.stream, static_cast<unsigned long long>(h.seq), h.len, status_name(rs));
        failed_ = true;
        return Status::invalid;
      }
    }
    if (got < 32) break;
  }
  // A held record goes once its stream's acknowledgements brought what it
  // has in flight below the hold mark (or the stream is gone).
  if (channel_.corked()) {
    Stream* s = find(channel_.cork_stream());
    if (s == nullptr || (!s->more_ && !s->may_hold(0))) {
      Status st = channel_.flush_cork();
      if (st != Status::ok && st != Status::no_resource) {
        failed_ = true;
        return st;
      }
    }
  }
  // Acks that found no credit earlier (rare: only then is the table scanned).
  if (acks_pending_) {
    acks_pending_ = false;
    streams_.each([](uint32_t, Stream* s) {
      if (s->ack_pending_) s->maybe_ack();
    });
  }
  return Status::ok;
}

} // namespace xp::stream
