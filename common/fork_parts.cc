#include "common/fork_parts.h"

namespace xp::fork_parts {
// The start-up section (preload/lifecycle.h, XP_STARTUP_DATA): the page the
// loader writes anyway; test-startup checks it stays one page.
__attribute__((section("xp_startup"))) constinit std::atomic<uint32_t> g_used{0};
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_prepared = 0;
} // namespace xp::fork_parts
