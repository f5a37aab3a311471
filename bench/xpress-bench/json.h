// A small ordered JSON value for reports.
//
// Keys keep insertion order so the table and the JSON read in the same order and a later
// tabulator (bench/compare) sees a stable layout.  Only what reports need: build and dump.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xb {

class Json {
public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };

  Json() = default;
  Json(bool b) : type_(Type::kBool), b_(b) {}
  Json(int v) : type_(Type::kInt), i_(v) {}
  Json(long v) : type_(Type::kInt), i_(v) {}
  Json(long long v) : type_(Type::kInt), i_(v) {}
  Json(unsigned v) : type_(Type::kInt), i_(v) {}
  Json(unsigned long v) : type_(Type::kInt), i_(static_cast<int64_t>(v)) {}
  Json(unsigned long long v) : type_(Type::kInt), i_(static_cast<int64_t>(v)) {}
  Json(double v) : type_(Type::kDouble), d_(v) {}
  Json(const char* s) : type_(Type::kString), s_(s) {}
  Json(std::string s) : type_(Type::kString), s_(std::move(s)) {}

  static Json object() { return Json(Type::kObject); }
  static Json array() { return Json(Type::kArray); }

  // Object: sets key (replacing an existing one, else appending).
  Json& set(const std::string& key, Json v);
  // Array: appends.
  Json& push(Json v);
  const Json* find(const std::string& key) const;

  Type type() const { return type_; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_scalar() const { return type_ != Type::kObject && type_ != Type::kArray; }
  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<Json>& items() const { return items_; } // array items / object values
  const std::string& str() const { return s_; }
  bool boolean() const { return b_; }

  // Compact single line (one run = one line, so results files are JSON Lines).
  std::string dump() const;
  // Scalar as text for tables: strings unquoted, numbers rounded for reading.
  std::string text() const;

private:
  explicit Json(Type t) : type_(t) {}
  void dump_to(std::string& out) const;

  Type type_ = Type::kNull;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::vector<std::string> keys_;
  std::vector<Json> items_;
};

} // namespace xb
