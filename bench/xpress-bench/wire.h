// On-the-wire formats shared by the xpress-bench client and server.
//
// Both ends are this same program on the same architecture (the benchmark is always built
// from one tree), so structs travel in host byte order; the magic numbers catch a peer that
// is something else.  Every struct has a fixed size so a reader always knows how much to read.
#pragma once

#include <cstdint>

namespace xb {

constexpr uint32_t kMagic = 0x31425058; // "XPB1" in little-endian byte order
constexpr uint16_t kWireVersion = 1;
// Upper bound on any single message; keeps a corrupted length field from allocating gigabytes.
constexpr uint64_t kMaxMessage = 1ull << 30;

enum class Scenario : uint8_t { kStream = 1, kPingpong = 2, kPs = 3, kIncast = 4, kConnect = 5 };
enum class ConnKind : uint8_t { kControl = 1, kData = 2 };
enum class Verify : uint8_t { kNone = 0, kSample = 1, kFull = 2 };

constexpr uint32_t kFlagReverse = 1; // stream: the server sends and the client receives
constexpr uint32_t kFlagPark = 2;    // connect: keep the connection open and idle

// First bytes of every connection: says which run (session) it belongs to and what to do.
struct Hello {
  uint32_t magic;
  uint16_t version;
  ConnKind kind;
  Scenario scenario;
  uint64_t session;
  uint32_t conn_index;
  uint32_t flags;
  uint64_t msg_size;
  uint64_t duration_ns;
  uint64_t seed;
  Verify verify;
  uint8_t pad[7];
  uint64_t reserved;
};
static_assert(sizeof(Hello) == 64);

// The server's answer to a data connection's Hello.  For the connect scenario this is the
// "first byte" whose arrival time is measured.
enum AckStatus : uint32_t {
  kAckOk = 0,
  kAckUnknownSession = 1,
  kAckBadHello = 2,
  kAckSessionExists = 3,
  kAckSetupFailed = 4,
};
struct HelloAck {
  uint32_t magic;
  uint32_t status;
};

// Sent by the stream receiver after end of stream so the sender can check nothing was lost.
struct StreamTrailer {
  uint64_t bytes;
  uint64_t msgs;
  uint64_t checked;
  uint64_t errors;
};

// Request/response framing used by ps and incast.
enum class Op : uint16_t { kFetch = 1, kPush = 2, kGet = 3, kReply = 4 };
enum RpcStatus : uint16_t { kRpcOk = 0, kRpcCorrupt = 1, kRpcBadRequest = 2 };
struct RpcHdr {
  uint16_t op;
  uint16_t status;
  uint32_t shard;    // fetch: which parameter shard
  uint64_t len;      // payload bytes following this header
  uint64_t resp_len; // get: payload bytes wanted in the reply
  uint64_t key;      // pattern key of the payload (see pattern.h)
};
static_assert(sizeof(RpcHdr) == 32);

// ps: the shard table the server builds when the control connection opens.
constexpr int kMaxSizeClasses = 16;
struct PsSetup {
  uint32_t classes;
  uint32_t per_class; // shards of each size
  uint64_t sizes[kMaxSizeClasses];
};

// Control channel: the client asks for the server's counters at the start and end of the
// measured window, so both sides' CPU covers the same interval.
enum class CtrlOp : uint32_t { kSnapshot = 1, kEnd = 2 };
struct CtrlReq {
  uint32_t magic;
  uint32_t op;
};

struct ServerStats {
  uint64_t magic;
  uint64_t status; // AckStatus of the control hello
  uint64_t pid;
  uint64_t wall_ns;     // since the session started
  uint64_t cpu_user_ns; // whole server process, absolute
  uint64_t cpu_sys_ns;
  uint64_t thread_cpu_ns; // this session's finished connection threads
  uint64_t rss_kb;
  uint64_t bytes_in;
  uint64_t bytes_out;
  uint64_t ops;
  uint64_t conns_accepted;
  uint64_t conns_open;
  uint64_t checked;       // messages whose payload was verified
  uint64_t errors;        // corrupt payloads and protocol errors
  uint64_t tcp_mem_pages; // host-wide kernel TCP buffer pages (/proc/net/sockstat)
  char preload[128];      // the server's LD_PRELOAD, so a report says what it measured
};

} // namespace xb
