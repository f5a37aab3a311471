// Registered memory (interface; the data path and registered-memory issues
// implement it).  Rings and bounce buffers come from pools registered once,
// up front, so nothing registers memory on the data path.  The verbs layer
// supplies the registration through this narrow interface, and unit tests a
// fake one, so upper layers never include rdma-core headers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace xp::alloc {

// What the verbs layer returns for a registration.
struct Registration {
  void* addr = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0; // 0 unless registered for remote write (receive rings only)
};

class Registrar {
public:
  virtual ~Registrar() = default;
  virtual Status register_local(void* addr, size_t len, Registration* out) = 0;
  virtual Status register_remote_write(void* addr, size_t len, Registration* out) = 0;
  virtual void deregister(const Registration& r) = 0;
};

// A pool of fixed-size buffers carved from one registered region.
class BufferPool {
public:
  virtual ~BufferPool() = default;
  // no_resource when empty (the caller waits; never registers more here).
  virtual Status get(void** buf, uint32_t* lkey) = 0;
  virtual void put(void* buf) = 0;
  virtual size_t buffer_size() const = 0;
};

} // namespace xp::alloc
