#include "flowgrad/distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "flowgrad/base/errors.h"

namespace fg::dist {
namespace {

using Clock = std::chrono::steady_clock;

class Socket {  // closes on scope exit
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { if (fd_ >= 0) ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string where(const env::JobRank& l) { return l.master_addr + ":" + std::to_string(l.master_port); }

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

void send_all(int fd, const std::string& data) {
  for (size_t sent = 0; sent < data.size();) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    FG_CHECK(n > 0, Runtime, "distributed rendezvous: send failed: ", std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
}

sockaddr_in resolve(const env::JobRank& l) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  std::string port = std::to_string(l.master_port);
  FG_CHECK(::getaddrinfo(l.master_addr.c_str(), port.c_str(), &hints, &found) == 0 && found, Value,
           "distributed rendezvous: cannot resolve MASTER_ADDR '", l.master_addr, "'");
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  return addr;
}

// Reads exactly `bytes` bytes unless the peer closes or `deadline` passes first.
std::string receive(int fd, size_t bytes, Clock::time_point deadline) {
  std::string data(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) break;
    ssize_t n = ::recv(fd, data.data() + got, bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

bool same_token(const std::string& a, const std::string& b) {  // time independent of where they differ
  unsigned char differ = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

// Listens on MASTER_ADDR only (not every interface) and hands the secret to clients that send
// the job's token first; anyone else is dropped without a byte and does not count as a rank.
std::string serve(const env::JobRank& l, const std::string& secret, Clock::time_point deadline) {
  Socket server(::socket(AF_INET, SOCK_STREAM, 0));
  int one = 1;
  ::setsockopt(server.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = resolve(l);
  FG_CHECK(::bind(server.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
               ::listen(server.fd(), l.world_size) == 0,
           Runtime, "distributed rendezvous: rank 0 cannot listen on ", where(l), ": ", std::strerror(errno),
           " (MASTER_ADDR must be an address of rank 0's machine; set MASTER_PORT to a free port)");
  for (int served = 1; served < l.world_size;) {
    pollfd p{server.fd(), POLLIN, 0};
    FG_CHECK(::poll(&p, 1, ms_left(deadline)) > 0, Timeout, "distributed rendezvous: rank 0 heard from ",
             served - 1, " of ", l.world_size - 1, " ranks at ", where(l), " before the timeout");
    Socket client(::accept(server.fd(), nullptr, nullptr));
    if (client.fd() < 0) continue;
    // A silent client holds the exchange up for at most a second.
    auto token_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    if (!same_token(receive(client.fd(), l.token.size(), token_deadline), l.token)) continue;
    send_all(client.fd(), secret);
    ++served;
  }
  return secret;
}

std::string fetch(const env::JobRank& l, size_t bytes, Clock::time_point deadline) {
  sockaddr_in addr = resolve(l);
  for (;;) {  // rank 0 may not listen yet: retry until the deadline
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      send_all(s.fd(), l.token);
      std::string data = receive(s.fd(), bytes, deadline);
      if (data.size() == bytes) return data;
    }
    FG_CHECK(Clock::now() < deadline, Timeout, "distributed rendezvous: rank ", l.rank,
             " could not reach rank 0 at ", where(l), " before the timeout (is rank 0 running, and "
             "are MASTER_ADDR, MASTER_PORT and FLOWGRAD_RENDEZVOUS_TOKEN the same on every rank?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

std::string rendezvous(const env::JobRank& job, const std::string& secret, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (job.world_size == 1) return secret;
  FG_CHECK(job.token.size() >= 16, Value, "distributed rendezvous: FLOWGRAD_RENDEZVOUS_TOKEN must be a secret "
           "of at least 16 characters shared by the job's ranks (got ", job.token.size(), "); python -m "
           "flowgrad.distributed.run sets one; under another launcher export the same random value on every "
           "rank, e.g. FLOWGRAD_RENDEZVOUS_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(16))') "
           "with mpirun -x FLOWGRAD_RENDEZVOUS_TOKEN");
  return job.rank == 0 ? serve(job, secret, deadline) : fetch(job, secret.size(), deadline);
}

}  // namespace fg::dist
