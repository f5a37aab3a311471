// JSON serialisation for reports.
#include "json.h"

#include <cmath>
#include <cstdio>

namespace xb {

Json& Json::set(const std::string& key, Json v) {
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) {
      items_[i] = std::move(v);
      return items_[i];
    }
  }
  keys_.push_back(key);
  items_.push_back(std::move(v));
  return items_.back();
}

Json& Json::push(Json v) {
  items_.push_back(std::move(v));
  return items_.back();
}

const Json* Json::find(const std::string& key) const {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

static void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

// Six significant digits, but no exponent for large counts/rates (easier to read and diff).
static std::string number_text(double d) {
  char buf[64];
  if (std::fabs(d) >= 1e5 && std::fabs(d) < 1e18)
    std::snprintf(buf, sizeof buf, "%.1f", d);
  else
    std::snprintf(buf, sizeof buf, "%.6g", d);
  return buf;
}

void Json::dump_to(std::string& out) const {
  switch (type_) {
  case Type::kNull:
    out += "null";
    break;
  case Type::kBool:
    out += b_ ? "true" : "false";
    break;
  case Type::kInt:
    out += std::to_string(i_);
    break;
  case Type::kDouble:
    out += std::isfinite(d_) ? number_text(d_) : "null";
    break;
  case Type::kString:
    dump_string(out, s_);
    break;
  case Type::kArray:
    out += '[';
    for (size_t i = 0; i < items_.size(); ++i) {
      if (i) out += ',';
      items_[i].dump_to(out);
    }
    out += ']';
    break;
  case Type::kObject:
    out += '{';
    for (size_t i = 0; i < items_.size(); ++i) {
      if (i) out += ',';
      dump_string(out, keys_[i]);
      out += ':';
      items_[i].dump_to(out);
    }
    out += '}';
    break;
  }
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

std::string Json::text() const {
  char buf[64];
  switch (type_) {
  case Type::kString:
    return s_;
  case Type::kNull:
    return "-";
  case Type::kDouble:
    if (!std::isfinite(d_)) return "-";
    if (std::fabs(d_) >= 1000)
      std::snprintf(buf, sizeof buf, "%.0f", d_);
    else if (std::fabs(d_) >= 1)
      std::snprintf(buf, sizeof buf, "%.2f", d_);
    else
      std::snprintf(buf, sizeof buf, "%.4f", d_);
    return buf;
  default:
    return dump();
  }
}

} // namespace xb
