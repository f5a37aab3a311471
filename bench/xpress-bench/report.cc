// Table rendering.  It walks the report generically (no per-scenario code), so any field
// a scenario adds to its JSON results also shows up in the table.
#include "report.h"

#include <string>
#include <vector>

namespace xb {

namespace {

bool is_latency(const Json& j) {
  return j.is_object() && j.find("p99_us") != nullptr;
}

bool is_row_list(const Json& j) {
  return j.is_array() && !j.items().empty() && j.items()[0].is_object();
}

std::string text_of(const Json* j) {
  return j ? j->text() : "-";
}

void print_rows(FILE* f, const std::string& indent, const std::vector<std::string>& names,
                const std::vector<const Json*>& rows, const std::vector<std::string>& cols) {
  size_t w0 = 6;
  for (const auto& n : names)
    w0 = std::max(w0, n.size());
  std::fprintf(f, "%s%-*s", indent.c_str(), static_cast<int>(w0), "");
  for (const auto& c : cols)
    std::fprintf(f, " %10s", c.c_str());
  std::fprintf(f, "\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::fprintf(f, "%s%-*s", indent.c_str(), static_cast<int>(w0), names[i].c_str());
    for (const auto& c : cols)
      std::fprintf(f, " %10s", text_of(rows[i]->find(c)).c_str());
    std::fprintf(f, "\n");
  }
}

void print_latency_rows(FILE* f, const std::string& indent, const std::vector<std::string>& names,
                        const std::vector<const Json*>& rows) {
  std::fprintf(f, "%slatency (us):\n", indent.c_str());
  print_rows(f, indent + "  ", names, rows,
             {"count", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us"});
}

// Scalars first (aligned), then latency summaries as one table, then nested sections.
void print_object(FILE* f, const Json& obj, const std::string& indent) {
  const auto& keys = obj.keys();
  const auto& vals = obj.items();
  size_t w = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (vals[i].is_scalar()) w = std::max(w, keys[i].size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!vals[i].is_scalar()) continue;
    std::fprintf(f, "%s%-*s  %s\n", indent.c_str(), static_cast<int>(w), keys[i].c_str(),
                 vals[i].text().c_str());
  }
  std::vector<std::string> lat_names;
  std::vector<const Json*> lat_rows;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (is_latency(vals[i])) {
      lat_names.push_back(keys[i]);
      lat_rows.push_back(&vals[i]);
    } else if (vals[i].is_object()) {
      // A section such as ps "fetch" or connect "short": its latency becomes a row here.
      const Json* lat = vals[i].find("latency");
      if (lat && is_latency(*lat)) {
        lat_names.push_back(keys[i]);
        lat_rows.push_back(lat);
      }
    }
  }
  if (!lat_rows.empty()) print_latency_rows(f, indent, lat_names, lat_rows);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Json& v = vals[i];
    if (v.is_scalar() || is_latency(v)) continue;
    if (is_row_list(v)) {
      std::fprintf(f, "%s%s:\n", indent.c_str(), keys[i].c_str());
      std::vector<std::string> names, cols;
      std::vector<const Json*> rows;
      const Json& first = v.items()[0];
      for (size_t k = 1; k < first.keys().size(); ++k)
        cols.push_back(first.keys()[k]);
      for (const auto& row : v.items()) {
        names.push_back(text_of(row.find(first.keys()[0])));
        rows.push_back(&row);
      }
      print_rows(f, indent + "  ", names, rows, cols);
      continue;
    }
    if (v.is_object()) {
      // Skip sections that only held the latency already shown in the table above.
      bool only_latency = v.keys().size() == 1 && v.find("latency");
      if (only_latency) continue;
      std::fprintf(f, "%s%s:\n", indent.c_str(), keys[i].c_str());
      Json rest = Json::object();
      for (size_t k = 0; k < v.keys().size(); ++k)
        if (v.keys()[k] != "latency" || !is_latency(v.items()[k]))
          rest.set(v.keys()[k], v.items()[k]);
      print_object(f, rest, indent + "  ");
    }
  }
}

} // namespace

void print_table(const Json& r, FILE* f) {
  const Json* ok = r.find("ok");
  std::fprintf(f, "xpress-bench %s: %s\n", text_of(r.find("scenario")).c_str(),
               ok && ok->boolean() ? "ok" : "FAILED");
  if (const Json* p = r.find("params")) {
    std::string line;
    for (size_t i = 0; i < p->keys().size(); ++i)
      line += (i ? " " : "") + p->keys()[i] + "=" + p->items()[i].text();
    std::fprintf(f, "params: %s\n", line.c_str());
  }
  if (const Json* res = r.find("results"); res && res->is_object()) {
    std::fprintf(f, "results:\n");
    print_object(f, *res, "  ");
  }
  std::vector<std::string> names;
  std::vector<const Json*> rows;
  for (const char* side : {"client", "server"}) {
    const Json* s = r.find(side);
    if (s && s->is_object()) {
      names.push_back(side);
      rows.push_back(s);
    }
  }
  if (!rows.empty()) {
    std::fprintf(f, "cpu and memory (measured window):\n");
    print_rows(f, "  ", names, rows, {"cpu_user_s", "cpu_sys_s", "cpu_s", "wall_s", "rss_kb"});
  }
  if (const Json* t = r.find("cpu_total_s"))
    std::fprintf(f, "cpu_total_s  %s\n", t->text().c_str());
  for (const char* side : {"client", "server"}) {
    const Json* s = r.find(side);
    const Json* pre = s ? s->find("preload") : nullptr;
    if (pre && !pre->str().empty()) std::fprintf(f, "%s LD_PRELOAD=%s\n", side, pre->str().c_str());
  }
  if (const Json* in = r.find("integrity")) {
    std::fprintf(f,
                 "integrity: %s (verify=%s; client checked %s, errors %s; server checked %s, "
                 "errors %s)\n",
                 in->find("ok") && in->find("ok")->boolean() ? "ok" : "FAILED",
                 text_of(in->find("mode")).c_str(), text_of(in->find("client_checked")).c_str(),
                 text_of(in->find("client_errors")).c_str(),
                 text_of(in->find("server_checked")).c_str(),
                 text_of(in->find("server_errors")).c_str());
  }
  if (const Json* e = r.find("errors"); e && !e->items().empty()) {
    std::fprintf(f, "errors:\n");
    for (const auto& m : e->items())
      std::fprintf(f, "  %s\n", m.text().c_str());
  }
}

} // namespace xb
