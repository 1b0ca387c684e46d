// A strict JSON reader for safetensors headers: objects, arrays, strings, integers, and the
// literals. Duplicate keys, strings that are not well-formed UTF-8, trailing
// garbage and deep nesting are errors (CheckpointError).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::io {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  bool integral = false;  // a number written without fraction or exponent
  int64_t integer = 0;    // valid when integral and in range
  std::string text;       // String
  std::vector<Json> items;                            // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in file order

  // Defined in json.cpp, where Json is complete: clang with libstdc++ rejects a vector of pairs
  // holding the incomplete Json when these are implicit.
  Json();
  Json(const Json&);
  Json(Json&&) noexcept;
  Json& operator=(const Json&);
  Json& operator=(Json&&) noexcept;
  ~Json();

  static Json parse(std::string_view text, const std::string& source);
  // Parses a JSON object, handing each member to `sink` instead of keeping it (a tree of a
  // 400k-tensor safetensors header holds ~900 bytes per name). The caller checks the top-level
  // keys for duplicates: sorting the names it keeps costs less than hashing copies of them.
  using MemberSink = std::function<void(std::string&& key, Json&& value)>;
  static void parse_members(std::string_view text, const std::string& source, const MemberSink& sink);
};

std::string json_quote(const std::string& s);
// `s` for an error message: bytes that are not well-formed UTF-8, and control characters, are
// written as \xNN, so that the message reaches Python as a str.
std::string printable_utf8(std::string_view s);

}  // namespace fg::io
