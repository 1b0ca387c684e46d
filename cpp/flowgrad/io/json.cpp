#include "flowgrad/io/json.h"

#include <cstdio>
#include <limits>
#include <unordered_set>

#include "flowgrad/base/errors.h"

namespace fg::io {

Json::Json() = default;
Json::Json(const Json&) = default;
Json::Json(Json&&) noexcept = default;
Json& Json::operator=(const Json&) = default;
Json& Json::operator=(Json&&) noexcept = default;
Json::~Json() = default;
namespace {

constexpr int kMaxDepth = 16;

// Bytes in the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF), or 0.
size_t utf8_length(std::string_view s) {
  auto byte = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  unsigned lead = byte(0);
  size_t n = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (n == 0) return 0;
  unsigned low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;  // the second byte's range
  unsigned high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < n; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  return n;
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  Json document() {
    Json j = value(0);
    end();
    return j;
  }

  void members(const Json::MemberSink& sink) {
    if (peek() != '{') error("expected '{'");
    object(0, sink, Keys::Unchecked);
    end();
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    fail(ErrorKind::Checkpoint, source_, ": invalid JSON header at byte ", pos_, ": ", what);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) error("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }
  void end() {
    skip_space();
    if (pos_ != s_.size()) error("unexpected trailing characters");
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > kMaxDepth) error("nesting deeper than 16 levels");
    Json j;
    char c = peek();
    if (c == '{') {
      j.kind = Json::Kind::Object;
      object(depth, [&j](std::string&& key, Json&& v) { j.members.emplace_back(std::move(key), std::move(v)); },
             Keys::Unique);
      return j;
    }
    if (c == '[') {
      j.kind = Json::Kind::Array;
      ++pos_;
      if (peek() == ']') return ++pos_, j;
      while (true) {
        j.items.push_back(value(depth + 1));
        if (peek() == ',') { ++pos_; continue; }
        expect(']');
        return j;
      }
    }
    if (c == '"') {
      j.kind = Json::Kind::String;
      j.text = string();
      return j;
    }
    if (literal("true")) { j.kind = Json::Kind::Bool; j.boolean = true; return j; }
    if (literal("false")) { j.kind = Json::Kind::Bool; return j; }
    if (literal("null")) return j;
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    error("unexpected character '" + printable_utf8(std::string_view(&c, 1)) + "'");
  }

  // The members of the object at pos_, each handed to `sink` as soon as it is parsed.
  enum class Keys { Unique, Unchecked };  // Unchecked: the caller finds duplicates (cheaper in bulk)

  template <class Sink>
  void object(int depth, Sink&& sink, Keys keys_rule) {
    ++pos_;
    if (peek() == '}') {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> keys;  // linear in the key count: headers may hold 100k names
    while (true) {
      if (peek() != '"') error("expected a string key");
      std::string key = string();
      if (keys_rule == Keys::Unique && !keys.insert(key).second) error("duplicate key \"" + key + "\"");
      expect(':');
      Json v = value(depth + 1);
      sink(std::move(key), std::move(v));
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return;
    }
  }

  Json number() {
    Json j;
    j.kind = Json::Kind::Number;
    size_t start = pos_;
    bool negative = s_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') error("malformed number");
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') error("leading zero");
    uint64_t magnitude = 0;
    bool overflow = false;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t digit = static_cast<uint64_t>(s_[pos_++] - '0');
      if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) overflow = true;
      else magnitude = magnitude * 10 + digit;
    }
    bool fraction = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      fraction = true;
      ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') error("malformed number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      fraction = true;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') error("malformed number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    (void)start;
    j.integral = !fraction && !overflow && magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (j.integral) j.integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return j;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return out;
      if (c < 0x20) error("control character in string");
      if (c >= 0x80) {  // names reach Python as str: only well-formed UTF-8 gets through
        size_t n = utf8_length(s_.substr(pos_ - 1));
        if (n == 0) {
          --pos_;
          error("invalid UTF-8 in string");
        }
        out.append(s_.substr(pos_ - 1, n));
        pos_ += n - 1;
        continue;
      }
      if (c != '\\') { out += static_cast<char>(c); continue; }
      if (pos_ >= s_.size()) error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, code_point()); break;
        default: error("invalid escape '\\" + printable_utf8(std::string_view(&e, 1)) + "'");
      }
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return v;
  }
  uint32_t code_point() {
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
      if (!literal("\\u")) error("unpaired surrogate");
      uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) error("unpaired surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      error("unpaired surrogate");
    }
    return cp;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

Json Json::parse(std::string_view text, const std::string& source) { return Parser(text, source).document(); }

void Json::parse_members(std::string_view text, const std::string& source, const MemberSink& sink) {
  Parser(text, source).members(sink);
}

std::string printable_utf8(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : utf8_length(s.substr(i));
    if (n > 0 && c >= 0x20 && c != 0x7F) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
    ++i;
  }
  return out;
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
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
  return out + "\"";
}

}  // namespace fg::io
