// libFuzzer target: records as a hostile channel peer writes them (flow/
// RecordChannel::poll, stream/Mux::progress, Stream::on_record): the input
// is a list of steps, each writing bytes anywhere into our receive ring,
// announcing a completion with an immediate of its choice, or letting us
// poll.  Nothing may read or write outside the ring or the streams'
// buffers (AddressSanitizer), whatever the bytes; a refused record fails
// the channel, which then stays failed.
#include <cstdint>
#include <cstring>

#include "../unit/fake_link.h"
#include "stream/mux.h"

using namespace xp;

namespace {
constexpr size_t kRing = 8192;

Status on_control(void*, const flow::RecordHeader& h, const uint8_t* payload) {
  uint8_t copy[flow::kMaxControlPayload];
  if (h.len > sizeof copy) return Status::invalid;
  memcpy(copy, payload, h.len); // what the engine's handler does
  return copy[0] == 0xff && h.len == 1 ? Status::invalid : Status::ok;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  test::LinkPair links(kRing);
  stream::MuxParams mp;
  mp.max_streams = 4;
  mp.stream_window = 16384;
  stream::Mux mux(&links.lb, mp);
  mux.set_control_handler(on_control, nullptr);
  for (uint32_t id = 0; id < 3; ++id)
    mux.open(id, 0, 0);
  size_t i = 0;
  auto take = [&](size_t n) -> const uint8_t* {
    if (size - i < n) return nullptr;
    const uint8_t* p = data + i;
    i += n;
    return p;
  };
  uint8_t out[4096];
  while (i < size) {
    const uint8_t* op = take(1);
    if (op == nullptr) break;
    switch (*op % 4) {
    case 0: { // a write and its completion: [off:2][len:1][imm:4][bytes]
      const uint8_t* h = take(7);
      if (h == nullptr) return 0;
      size_t off = (h[0] | h[1] << 8) % kRing;
      size_t len = h[2];
      uint32_t imm;
      memcpy(&imm, h + 3, 4);
      const uint8_t* b = take(len);
      if (b == nullptr) return 0;
      if (off + len > kRing) len = kRing - off;
      links.lb.inject(off, b, len, imm);
      break;
    }
    case 1: { // a plain write, no completion (a header rewritten later)
      const uint8_t* h = take(3);
      if (h == nullptr) return 0;
      size_t off = (h[0] | h[1] << 8) % kRing;
      size_t len = h[2];
      const uint8_t* b = take(len);
      if (b == nullptr) return 0;
      if (off + len > kRing) len = kRing - off;
      links.lb.overwrite(off, b, len);
      break;
    }
    case 2: { // we poll
      Status st = mux.progress();
      if (st != Status::ok && !mux.failed()) abort();
      break;
    }
    case 3: { // the application reads
      for (uint32_t id = 0; id < 3; ++id)
        if (stream::Stream* s = mux.find(id)) {
          size_t got = 0;
          (void)s->read(out, sizeof out, &got, false);
        }
      break;
    }
    }
  }
  (void)mux.progress();
  return 0;
}
