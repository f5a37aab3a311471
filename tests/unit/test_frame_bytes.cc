// The TCP control frames of docs/protocol.md §7 (RESUME, RAW, SWITCHBACK)
// byte for byte: peers of other versions read these, so a refactor of the
// encoders must not move a bit.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "recover/reattach_wire.h"
#include "recover/resume_wire.h"

using namespace xp::recover;

namespace {

struct Key {
  uint8_t b[kNonceBytes];
  Key() {
    for (size_t i = 0; i < kNonceBytes; ++i)
      b[i] = static_cast<uint8_t>(i * 7 + 1);
  }
};

std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  char two[3];
  for (size_t i = 0; i < n; ++i) {
    snprintf(two, sizeof two, "%02x", p[i]);
    s += two;
  }
  return s;
}

// Parses a frame as a receiver does; flip = byte of the payload to corrupt.
template <typename Parse> xp::Status parse(uint8_t* frame, int flip, Parse p) {
  FrameHeader h;
  if (parse_frame_header(frame, &h) != xp::Status::ok) return xp::Status::invalid;
  if (flip >= 0) frame[kFrameHeaderBytes + flip] ^= 1;
  return p(h, frame + kFrameHeaderBytes);
}

} // namespace

TEST_CASE("frames: RESUME, RAW and SWITCHBACK have fixed bytes and reject any changed one") {
  const Key k;
  SUBCASE("RESUME") {
    ResumeInfo in;
    in.knows_start = true;
    in.moved = true;
    in.from = 987654321;
    in.received = 55555;
    uint8_t f[kResumeFrameBytes];
    encode_resume(k.b, Dir::c2s, in, f);
    CHECK(hex(f, sizeof f) == "5846010320000000b168de3a0000000003d900000000000000000000000000"
                              "00d46c5d2e92f15f67e0690eefe5c2524c");
    ResumeInfo out;
    auto p = [&](const FrameHeader& h, const uint8_t* pl) {
      return parse_resume(k.b, Dir::c2s, h, pl, &out);
    };
    REQUIRE(parse(f, -1, p) == xp::Status::ok);
    CHECK((out.knows_start && out.moved && out.from == 987654321 && out.received == 55555));
    CHECK(parse_resume(k.b, Dir::s2c, FrameHeader{kFrameResume, 3, 32, 987654321},
                       f + kFrameHeaderBytes, &out) == xp::Status::invalid);
    for (int i : {0, 8, 15, 16, 31}) {
      uint8_t g[kResumeFrameBytes];
      encode_resume(k.b, Dir::c2s, in, g);
      CHECK(parse(g, i, p) == xp::Status::invalid);
    }
  }
  SUBCASE("RAW") {
    uint8_t f[kRawFrameBytes];
    encode_raw(k.b, Dir::s2c, 0x0102030405060708ull, 0x1122334455667788ull, f);
    CHECK(hex(f, sizeof f) == "584604002000000008070605040302018877665544332211000000000000000041"
                              "4dd217756e0ce365e4f30374362c0e");
    uint64_t got = 0;
    auto p = [&](const FrameHeader& h, const uint8_t* pl) {
      return parse_raw(k.b, Dir::s2c, h, pl, &got);
    };
    REQUIRE(parse(f, -1, p) == xp::Status::ok);
    CHECK(got == 0x1122334455667788ull);
    for (int i : {0, 9, 20}) {
      encode_raw(k.b, Dir::s2c, 0x0102030405060708ull, 0x1122334455667788ull, f);
      CHECK(parse(f, i, p) == xp::Status::invalid);
    }
  }
  SUBCASE("SWITCHBACK") {
    uint8_t f[kSwitchbackFrameBytes];
    encode_switchback(k.b, Dir::c2s, 123456789, 42, f);
    CHECK(hex(f, sizeof f) == "584603002000000015cd5b07000000002a0000000000000000000000000000006e"
                              "a80110e26e69e99b948ad67ca9a56b");
    uint64_t got = 0;
    auto p = [&](const FrameHeader& h, const uint8_t* pl) {
      return check_switchback(k.b, Dir::c2s, h, pl, &got);
    };
    REQUIRE(parse(f, -1, p) == xp::Status::ok);
    CHECK(got == 42);
    // A RAW's bytes under a SWITCHBACK header (same shape, other tag letter).
    uint8_t raw[kRawFrameBytes];
    encode_raw(k.b, Dir::c2s, 123456789, 42, raw);
    raw[2] = kFrameSwitchback;
    CHECK(parse(raw, -1, p) == xp::Status::invalid);
    for (int i : {1, 12, 30}) {
      encode_switchback(k.b, Dir::c2s, 123456789, 42, f);
      CHECK(parse(f, i, p) == xp::Status::invalid);
    }
  }
}
