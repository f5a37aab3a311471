// Request/response server and client for ps and incast.
#include "rpc.h"

#include <sys/uio.h>

#include "scenarios.h"

namespace xb {

namespace {
RpcHdr reply_header(const RpcHdr& req, uint16_t status, uint64_t len, uint64_t key) {
  RpcHdr r{};
  r.op = static_cast<uint16_t>(Op::kReply);
  r.status = status;
  r.shard = req.shard;
  r.len = len;
  r.key = key;
  return r;
}
} // namespace

// ---------------------------------------------------------------------------- server

void serve_rpc(int fd, const Hello& h, Session& s) {
  std::vector<uint8_t> rx;
  PatternBuffer tx, scratch;
  uint64_t gets = 0;
  const ShardStore* shards = s.shards.get();
  for (;;) {
    RpcHdr req{};
    if (read_full(fd, &req, sizeof req) != Io::kOk) return; // end of run (or peer gone)
    if (req.len > kMaxMessage || req.resp_len > kMaxMessage) {
      s.errors.fetch_add(1); // a garbled header: the stream can no longer be trusted
      return;
    }
    s.ops.fetch_add(1, std::memory_order_relaxed);
    RpcHdr rep{};
    iovec iov[2];
    int iov_count = 1;
    switch (static_cast<Op>(req.op)) {
    case Op::kFetch:
      if (!shards || req.shard >= shards->sizes.size()) {
        rep = reply_header(req, kRpcBadRequest, 0, 0);
        break;
      }
      // Straight from the shared shard memory: no copy, like a zero-copy PS server.
      rep = reply_header(req, kRpcOk, shards->sizes[req.shard], shards->keys[req.shard]);
      iov[1] = {const_cast<uint8_t*>(shards->data[req.shard].data()), rep.len};
      iov_count = 2;
      break;
    case Op::kPush: {
      if (rx.size() < req.len) rx.resize(req.len);
      if (read_full(fd, rx.data(), req.len) != Io::kOk) return;
      s.bytes_in.fetch_add(req.len, std::memory_order_relaxed);
      uint16_t status = kRpcOk;
      if (h.verify != Verify::kNone) {
        bool ok = verify_message(rx.data(), req.len, req.key, h.verify, &scratch);
        s.count_check(ok);
        if (!ok) status = kRpcCorrupt;
      }
      rep = reply_header(req, status, 0, 0);
      break;
    }
    case Op::kGet:
      rep = reply_header(req, kRpcOk, req.resp_len, req.key);
      iov[1] = {tx.stamp(req.resp_len, req.key), req.resp_len};
      maybe_corrupt(tx.data(), req.resp_len, gets++);
      iov_count = 2;
      break;
    default:
      s.errors.fetch_add(1);
      return;
    }
    iov[0] = {&rep, sizeof rep};
    if (writev_full(fd, iov, iov_count) != Io::kOk) return;
    s.bytes_out.fetch_add(rep.len, std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------- client

RpcClient::Result RpcClient::read_reply(uint64_t want_len, uint64_t want_key, bool has_payload) {
  RpcHdr rep{};
  Io r = read_full(fd_, &rep, sizeof rep);
  if (r != Io::kOk) {
    error_ = io_text(r);
    return Result::kIoError;
  }
  if (rep.op != static_cast<uint16_t>(Op::kReply) || rep.len > kMaxMessage ||
      rep.status == kRpcBadRequest) {
    error_ = "bad reply header (op " + std::to_string(rep.op) + ", status " +
             std::to_string(rep.status) + ")";
    return Result::kIoError;
  }
  if (!has_payload) return rep.status == kRpcOk ? Result::kOk : Result::kCorrupt;
  if (rx_.size() < rep.len) rx_.resize(rep.len);
  r = read_full(fd_, rx_.data(), rep.len);
  if (r != Io::kOk) {
    error_ = io_text(r);
    return Result::kIoError;
  }
  if (rep.len != want_len || rep.key != want_key) return Result::kCorrupt;
  if (mode_ == Verify::kNone) return Result::kOk;
  return verify_message(rx_.data(), rep.len, want_key, mode_, &scratch_) ? Result::kOk
                                                                         : Result::kCorrupt;
}

RpcClient::Result RpcClient::fetch(uint32_t shard, uint64_t len, uint64_t key) {
  RpcHdr req{};
  req.op = static_cast<uint16_t>(Op::kFetch);
  req.shard = shard;
  Io r = write_full(fd_, &req, sizeof req);
  if (r != Io::kOk) {
    error_ = io_text(r);
    return Result::kIoError;
  }
  return read_reply(len, key, true);
}

RpcClient::Result RpcClient::push(uint64_t len, uint64_t key) {
  RpcHdr req{};
  req.op = static_cast<uint16_t>(Op::kPush);
  req.len = len;
  req.key = key;
  iovec iov[2] = {{&req, sizeof req}, {tx_.stamp(len, key), len}};
  maybe_corrupt(tx_.data(), len, pushes_++);
  Io r = writev_full(fd_, iov, 2);
  if (r != Io::kOk) {
    error_ = io_text(r);
    return Result::kIoError;
  }
  return read_reply(0, 0, false);
}

RpcClient::Result RpcClient::get(uint64_t len, uint64_t key) {
  RpcHdr req{};
  req.op = static_cast<uint16_t>(Op::kGet);
  req.resp_len = len;
  req.key = key;
  Io r = write_full(fd_, &req, sizeof req);
  if (r != Io::kOk) {
    error_ = io_text(r);
    return Result::kIoError;
  }
  return read_reply(len, key, true);
}

} // namespace xb
