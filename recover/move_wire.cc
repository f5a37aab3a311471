#include "recover/move_wire.h"

#include <cstring>

#include "recover/wire_bytes.h"

namespace xp::recover {

void encode_move(const MoveInfo& m, uint8_t out[kMoveBytes]) {
  memset(out, 0, kMoveBytes);
  out[0] = m.flags;
  put_le(out + 8, m.start, 8);
  put_le(out + 16, m.received, 8);
}

Status parse_move(const uint8_t* p, size_t len, MoveInfo* out) {
  if (p == nullptr || len != kMoveBytes) return Status::invalid;
  if ((p[0] & ~(kMoveTxSwitched | kMoveGone)) != 0) return Status::invalid;
  for (size_t i = 1; i < 8; ++i)
    if (p[i] != 0) return Status::invalid;
  out->flags = p[0];
  out->start = get_le(p + 8, 8);
  out->received = get_le(p + 16, 8);
  return Status::ok;
}

} // namespace xp::recover
