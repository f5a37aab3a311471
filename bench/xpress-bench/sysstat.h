// Process resource readings used for the CPU and memory columns of every report.
#pragma once

#include <cstdint>
#include <string>

namespace xb {

struct CpuTimes {
  uint64_t user_ns = 0;
  uint64_t sys_ns = 0;
  uint64_t total() const { return user_ns + sys_ns; }
};

// Whole process (all threads, including any helper threads a preloaded transport starts,
// which is why reports use it rather than the workers' own thread times).
CpuTimes process_cpu();
// Calling thread only.
CpuTimes thread_cpu();
// Resident set size of this process in KiB.
uint64_t rss_kb();
// Host-wide kernel TCP buffer memory in pages ("TCP: ... mem N" of /proc/net/sockstat):
// kernel socket memory is not in any process's RSS, so without it TCP would look free.
uint64_t tcp_mem_pages();
// The LD_PRELOAD this process runs under ("" if none).
std::string preload_env();
// Lifts the open-file soft limit to the hard limit (connect holds many sockets).
void raise_fd_limit();

} // namespace xb
