#include "flowgrad/io/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>

#include "flowgrad/io/json.h"
#include "flowgrad/ops/raw.h"

namespace fg::io {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the safetensors project's cap

const char* st_name(DType dt) {
  switch (dt) {
    case DType::Bool: return "BOOL";
    case DType::UInt8: return "U8";
    case DType::Int8: return "I8";
    case DType::Int16: return "I16";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
  }
  return "?";
}

DType st_dtype(const std::string& name, const std::string& source, const std::string& tensor) {
  for (DType dt : kAllDTypes)
    if (name == st_name(dt)) return dt;
  fail(ErrorKind::Checkpoint, source, ": tensor '", tensor, "' has dtype '", name,
       "', which flowgrad does not support (BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)");
}

struct Entry {
  std::string name;
  DType dtype;
  Dims shape;
  uint64_t begin, end;
};

const Json* member(const Json& obj, const char* key) {
  for (const auto& [k, v] : obj.members)
    if (k == key) return &v;
  return nullptr;
}

Entry entry_of(std::string&& name, const Json& j, const std::string& source) {
  auto bad = [&](const std::string& what) -> Entry {
    fail(ErrorKind::Checkpoint, source, ": tensor '", name, "': ", what);
  };
  if (j.kind != Json::Kind::Object) return bad("entry is not an object");
  for (const auto& [k, v] : j.members)
    if (k != "dtype" && k != "shape" && k != "data_offsets") return bad("unknown field '" + k + "'");
  const Json* dtype = member(j, "dtype");
  const Json* shape = member(j, "shape");
  const Json* offsets = member(j, "data_offsets");
  if (!dtype || dtype->kind != Json::Kind::String) return bad("missing or non-string dtype");
  if (!shape || shape->kind != Json::Kind::Array) return bad("missing or non-array shape");
  if (!offsets || offsets->kind != Json::Kind::Array || offsets->items.size() != 2) return bad("data_offsets must be [begin, end]");
  Entry e{std::string(), st_dtype(dtype->text, source, name), Dims{}, 0, 0};
  if (shape->items.size() > static_cast<size_t>(Dims::kMaxRank)) return bad("more than 8 dimensions");
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape->items) {
    if (d.kind != Json::Kind::Number || !d.integral || d.integer < 0) return bad("shape entries must be non-negative integers");
    e.shape.push_back(d.integer);
    uint64_t v = static_cast<uint64_t>(d.integer);
    if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v) overflow = true;
    else numel *= v;
  }
  for (int i = 0; i < 2; ++i) {
    const Json& o = offsets->items[i];
    if (o.kind != Json::Kind::Number || !o.integral || o.integer < 0) return bad("data_offsets must be non-negative integers");
  }
  e.begin = static_cast<uint64_t>(offsets->items[0].integer);
  e.end = static_cast<uint64_t>(offsets->items[1].integer);
  if (e.begin > e.end) return bad("data_offsets begin after they end");
  uint64_t item = itemsize(e.dtype);
  if (overflow || (numel != 0 && numel > std::numeric_limits<uint64_t>::max() / item))
    return bad("shape " + to_string(e.shape) + " overflows 64 bits");
  if (numel * item != e.end - e.begin)
    return bad("shape " + to_string(e.shape) + " of " + dtype->text + " needs " + std::to_string(numel * item) +
               " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  e.name = std::move(name);  // last: error messages above name the tensor
  return e;
}

// Open addressing over the names in place: no copies and no allocation per name (a header may
// hold 400k of them).
void check_unique_names(const std::vector<Entry>& entries, const std::string& source) {
  size_t slots = 16;
  while (slots < 2 * entries.size()) slots *= 2;
  std::vector<uint32_t> table(slots, 0);  // index into entries + 1; 0: empty
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& name = entries[i].name;
    size_t at = std::hash<std::string>{}(name) & (slots - 1);
    for (; table[at] != 0; at = (at + 1) & (slots - 1))
      FG_CHECK(entries[table[at] - 1].name != name, Checkpoint, source, ": invalid JSON header: duplicate key \"",
               name, "\"");
    table[at] = static_cast<uint32_t>(i + 1);
  }
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  fail(ErrorKind::Checkpoint, what, " '", printable_utf8(path), "': ", std::strerror(errno));
}

// Paths reach open() as C strings: an embedded NUL would silently name another file.
void check_path(const std::string& path, const char* op) {
  FG_CHECK(path.find('\0') == std::string::npos, Checkpoint, op, ": the path '", printable_utf8(path.substr(0, path.find('\0'))),
           "\\0...' contains a NUL byte");
}

// Temporary files are "<path>.tmp.<pid>.<n>.<host>": unique per process (pid) and per save
// within it (n), so that concurrent saves to one path never share a file; the host tells which
// files' pids can be checked here (a directory may be shared over the network).
std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 && buf[0] ? buf : "localhost";
}

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." + host_name();
}

// The pid in a temporary file's suffix "<pid>.<n>.<host>" (or "<pid>", as older versions wrote
// it), or 0 when the suffix is no such name or names another host.
pid_t temp_owner(std::string_view suffix, const std::string& host) {
  auto take_number = [&suffix] {  // the leading digits, removed from suffix
    std::string_view digits = suffix.substr(0, std::min(suffix.find_first_not_of("0123456789"), suffix.size()));
    suffix.remove_prefix(digits.size());
    return digits;
  };
  std::string_view pid = take_number();
  if (pid.empty() || pid.size() > 9) return 0;
  if (!suffix.empty()) {
    if (suffix[0] != '.') return 0;
    suffix.remove_prefix(1);
    if (take_number().empty() || suffix != "." + host) return 0;
  }
  return static_cast<pid_t>(std::stol(std::string(pid)));
}

// Removes this path's temporary files left by processes of this host that died mid-save (kill -9,
// power loss). A live owner (this process included) may still be writing, so its files stay.
void remove_stale_temps(const std::string& dir, const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  std::string host = host_name();
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;  // the save itself reports an unusable directory
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.substr(0, prefix.size()) != prefix) continue;
    pid_t pid = temp_owner(name.substr(prefix.size()), host);
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
      ::unlink((dir + "/" + std::string(name)).c_str());
  }
  ::closedir(d);
}

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("cannot write", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  std::string header = "{";
  uint64_t offset = 0;
  std::vector<Tensor> data;
  for (const auto& [name, t] : tensors) {
    FG_CHECK(t.defined(), Checkpoint, "save: tensor '", name, "' is undefined");
    FG_CHECK(name != "__metadata__", Checkpoint, "save: '__metadata__' is reserved for metadata");
    Tensor c = raw::contiguous(raw::device_copy(t, cpu_device()));  // device tensors are copied to the host
    uint64_t bytes = static_cast<uint64_t>(c.numel()) * itemsize(c.dtype());
    header += (header.size() > 1 ? "," : "") + json_quote(name) + ":{\"dtype\":\"" + st_name(c.dtype()) + "\",\"shape\":[";
    for (int d = 0; d < c.ndim(); ++d) header += (d ? "," : "") + std::to_string(c.shape()[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
    data.push_back(c);
  }
  if (!metadata.empty()) {
    header += std::string(header.size() > 1 ? "," : "") + "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i)
      header += (i ? "," : "") + json_quote(metadata[i].first) + ":" + json_quote(metadata[i].second);
    header += "}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.reserve(out.size() + offset);
  for (const Tensor& c : data)
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * itemsize(c.dtype()));
  return out;
}

TensorFile parse_safetensors(std::string_view bytes, const std::string& source) {
  FG_CHECK(bytes.size() >= 8, Checkpoint, source, ": file of ", bytes.size(), " bytes is too small for a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  FG_CHECK(n <= kMaxHeader, Checkpoint, source, ": header length ", n, " exceeds the 100 MiB limit");
  FG_CHECK(n <= bytes.size() - 8, Checkpoint, source, ": header length ", n, " runs past the end of the ", bytes.size(), "-byte file");
  std::string_view header = bytes.substr(8, n);
  FG_CHECK(!header.empty() && header[0] == '{', Checkpoint, source, ": header must start with '{'");
  TensorFile file;
  std::vector<Entry> entries;
  bool has_metadata = false;
  Json::parse_members(header, source, [&](std::string&& name, Json&& value) {
    if (name == "__metadata__") {
      FG_CHECK(!has_metadata, Checkpoint, source, ": invalid JSON header: duplicate key \"__metadata__\"");
      has_metadata = true;
      FG_CHECK(value.kind == Json::Kind::Object, Checkpoint, source, ": __metadata__ must be an object of strings");
      for (auto& [k, v] : value.members) {
        FG_CHECK(v.kind == Json::Kind::String, Checkpoint, source, ": __metadata__['", k, "'] is not a string");
        file.metadata.emplace_back(std::move(k), std::move(v.text));
      }
      return;
    }
    entries.push_back(entry_of(std::move(name), value, source));
  });
  check_unique_names(entries, source);
  uint64_t data_size = bytes.size() - 8 - n;
  auto by_offset = [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; };
  if (!std::is_sorted(entries.begin(), entries.end(), by_offset))  // writers keep data order: usually sorted
    std::sort(entries.begin(), entries.end(), by_offset);
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    FG_CHECK(e.begin == expected, Checkpoint, source, ": tensor '", e.name, "' starts at byte ", e.begin,
             e.begin < expected ? " and overlaps the previous tensor" : " leaving a gap after byte ", expected);
    FG_CHECK(e.end <= data_size, Checkpoint, source, ": tensor '", e.name, "' ends at byte ", e.end,
             " past the ", data_size, "-byte data section");
    expected = e.end;
  }
  FG_CHECK(expected == data_size, Checkpoint, source, ": the data section has ", data_size - expected,
           " bytes that no tensor covers");
  const char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, cpu_device());
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    if (e.dtype == DType::Bool)  // any byte other than 0/1 would be undefined as a C++ bool
      for (int64_t i = 0, m = t.numel(); i < m; ++i)
        FG_CHECK(static_cast<unsigned char>(data[e.begin + i]) <= 1, Checkpoint, source, ": tensor '", e.name,
                 "' holds a BOOL byte that is neither 0 nor 1");
    file.tensors.emplace_back(e.name, t);
  }
  return file;
}

TensorFile load_safetensors(const std::string& path) {
  check_path(path, "load");
  // A save killed mid-write leaves its temporary file; when no later save to this path comes,
  // the next load is where it is found.
  remove_stale_temps(directory_of(path), path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    io_error("cannot stat", path);
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return parse_safetensors(std::string_view(), printable_utf8(path));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) io_error("cannot map", path);
  try {
    TensorFile file = parse_safetensors(std::string_view(static_cast<const char*>(map), size), printable_utf8(path));
    ::munmap(map, size);
    return file;
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  check_path(path, "save");
  std::string bytes = serialize_safetensors(tensors, metadata);
  std::string dir = directory_of(path);
  remove_stale_temps(dir, path);
  std::string tmp = temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", tmp);
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fsync(fd) != 0) io_error("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    io_error("cannot rename into", path);
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename itself durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace fg::io
