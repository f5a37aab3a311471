// Entry points of the scenarios: client runners (fill params and results, report errors
// through the context) and server handlers (one data connection each, after the handshake).
#pragma once

#include <memory>

#include "client.h"
#include "server.h"

namespace xb {

bool run_stream(RunContext& ctx, Json* params, Json* results);
bool run_pingpong(RunContext& ctx, Json* params, Json* results);
bool run_ps(RunContext& ctx, Json* params, Json* results);
bool run_incast(RunContext& ctx, Json* params, Json* results);
bool run_connect(RunContext& ctx, Json* params, Json* results);

void serve_stream(int fd, const Hello& h, Session& s);
void serve_pingpong(int fd, const Hello& h, Session& s);
// ps and incast share one request/response server (rpc.cc).
void serve_rpc(int fd, const Hello& h, Session& s);
// Returns true when the connection was parked (the caller must not close it).
bool serve_connect(int fd, const Hello& h, const std::shared_ptr<Session>& s);

} // namespace xb
