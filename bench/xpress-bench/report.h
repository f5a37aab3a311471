// Human-readable rendering of a report (the JSON object built by RunContext::report).
#pragma once

#include <cstdio>

#include "json.h"

namespace xb {

// Prints the report as aligned tables: parameters on one line, scalar results as
// "name value", latency summaries and per-size lists as rows, both sides' CPU as rows.
void print_table(const Json& report, FILE* f);

} // namespace xb
