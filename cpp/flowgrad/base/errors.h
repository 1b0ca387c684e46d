// Error type of the engine. Every user-facing failure is an fg::Error whose kind selects the
// Python exception class (ShapeError, DTypeError, ...); messages name the op and the values.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace fg {

enum class ErrorKind { Runtime, Shape, DType, Device, Graph, Checkpoint, OutOfMemory, Index, Value, Timeout };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <class... Parts>
[[noreturn]] void fail(ErrorKind kind, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(kind, os.str());
}

}  // namespace fg

// User-facing check: raises the named error kind with a message built from the parts.
#define FG_CHECK(cond, kind, ...) \
  do {                            \
    if (!(cond)) ::fg::fail(::fg::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

// Internal invariant: a failure is a bug in flowgrad, reported with file and line.
#define FG_ASSERT(cond)                                                                      \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::fg::fail(::fg::ErrorKind::Runtime, "internal error: ", #cond, " (", __FILE__, ":", \
                 __LINE__, ")");                                                             \
  } while (0)
