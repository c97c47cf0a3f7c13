// What the two ends of msrun_rendezvous (tools/msrun_rendezvous.cpp: serve on node 0, join on the others) share:
// the messages to stderr, the signals the launcher reacts to, the TCP connections (resolving MASTER_ADDR, the
// keepalive, a connect with a limit) and their lines of text, and the options both subcommands read.
// One translation unit includes it: CMakeLists.txt builds one binary per tools/*.cpp.
//
// The protocol is lines of text over one TCP connection per node, held open for the whole job:
//   node -> node 0:  "secret TOKEN" first (the job's secret, below: a connection whose first line is not the right
//                    secret is refused and logged with its address, never counted), then "register NODE_RANK
//                    LOCAL_WORKERS WORKER_NUM HOSTNAME", then "job TEXT" (what the launcher runs: the same on every
//                    node, or the node is refused)
//   node 0 -> node:  "registered K N" (K of N workers so far; again whenever K changes), "refused WHY",
//                    "start FIRST_RANK LAST_RANK JOB_ID here|ssh", "end STATUS MESSAGE", "abort WHY"
// The job's secret: GF_JOB_SECRET (the same on every node), else the first line of the file GF_JOB_SECRET_FILE names
// (scripts/msrun_launcher.sh: node 0's launcher writes a random one to LOG_DIR/.job_secret, mode 0600, before serving;
// the other nodes read it from that shared directory after they reach node 0). Both come through the environment,
// never argv (visible in ps); serve takes GF_JOB_SECRET out of its command's environment. The token goes over the
// connection as written: it keeps out whoever reaches the port without it, not whoever can read the network.
// A node whose connection drops before the start is forgotten; node 0's launcher gone after the start shows on the
// other nodes as the connection's end (TCP keepalive: 6 s idle, 3 probes 3 s apart, for a host that drops off).
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace msrun {

inline constexpr int kMaxLine = 64 * 1024;

inline void say(const std::string& text) {
  std::fprintf(stderr, "msrun_rendezvous: %s\n", text.c_str());
  std::fflush(stderr);
}

[[noreturn]] inline void die(const std::string& text, int status = 2) {
  say("error: " + text);
  std::exit(status);
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline std::string host_name() {
  char b[256] = {};
  gethostname(b, sizeof b - 1);
  return b;
}

// The signals the launcher reacts to: recorded here, acted on in the loops.
inline volatile sig_atomic_t g_signal = 0;
inline void on_signal(int sig) { g_signal = sig; }
inline void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a write to a node whose connection is gone fails with EPIPE instead
}
inline const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP"; }

// The addresses MASTER_ADDR names (an IPv4 or IPv6 address, or a host name), TCP.
inline addrinfo* resolve(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string host = addr;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) die(fmt::format("MASTER_ADDR {}: {} (give the address of node 0, as every node can reach it)", addr,
                               gai_strerror(rc)));
  return res;
}

inline std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char b[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, b, sizeof b);
  } else {
    const auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
      in_addr a4{};
      std::memcpy(&a4, a6->sin6_addr.s6_addr + 12, 4);
      inet_ntop(AF_INET, &a4, b, sizeof b);
    } else {
      inet_ntop(AF_INET6, &a6->sin6_addr, b, sizeof b);
    }
  }
  return b;
}

// Open MPI's daemon connections get the same keepalive from run_distribute.sh: a host that drops off is noticed
// within about 15 s instead of TCP's default hours.
inline void keepalive(int fd) {
  int on = 1, idle = 6, intvl = 3, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

inline bool send_lines(int fd, const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& line : lines) {
    std::string l = line;
    std::replace(l.begin(), l.end(), '\n', ' ');
    s += l + '\n';
  }
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}
inline bool send_line(int fd, const std::string& line) { return send_lines(fd, {line}); }

// One connection's input, split into lines. read_some() returns false at the end of the stream or an error.
struct LineReader {
  int fd = -1;
  std::string buf;
  bool read_some() {
    char b[4096];
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;
    buf.append(b, static_cast<size_t>(n));
    return buf.size() <= kMaxLine;
  }
  std::optional<std::string> next() {
    const size_t nl = buf.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    return line;
  }
};

inline std::vector<std::string> words(const std::string& s, size_t max_words) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size() && out.size() + 1 < max_words) {
    while (i < s.size() && s[i] == ' ') ++i;
    if (i >= s.size()) break;
    const size_t j = s.find(' ', i);
    out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    i = j == std::string::npos ? s.size() : j + 1;
  }
  while (i < s.size() && s[i] == ' ') ++i;
  if (i < s.size()) out.push_back(s.substr(i));
  return out;
}

inline bool parse_int(const std::string& s, long& v) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  v = std::stol(s);
  return true;
}

// The job's secret (see the top of this file); "" when there is none yet (the file not there, or empty), with the
// reason in `why`. A secret that is there but unfit (shorter than 16 characters, or with spaces) is an error.
inline std::string job_secret(std::string& why) {
  std::string token, from;
  if (const char* e = std::getenv("GF_JOB_SECRET"); e && *e) {
    token = e, from = "GF_JOB_SECRET";
  } else if (const char* f = std::getenv("GF_JOB_SECRET_FILE"); f && *f) {
    from = f;
    FILE* in = std::fopen(f, "r");
    if (!in) {
      why = fmt::format("no job secret: cannot read {}: {}", f, std::strerror(errno));
      return "";
    }
    char b[4096] = {};
    if (std::fgets(b, sizeof b, in)) token = b;
    std::fclose(in);
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty()) {
      why = fmt::format("no job secret: {} is empty", f);
      return "";
    }
  } else {
    die("no job secret: set GF_JOB_SECRET (the same on every node) or GF_JOB_SECRET_FILE (scripts/msrun_launcher.sh "
        "sets it to LOG_DIR/.job_secret)");
  }
  if (token.size() < 16 || token.find_first_of(" \t\r\n") != std::string::npos)
    die(fmt::format("the job secret from {} is unfit: it needs 16 characters or more, without spaces (e.g. `head -c 16 "
                    "/dev/urandom | od -An -tx1 | tr -d ' \\n'`)", from));
  return token;
}

// Compares a sent token with the job's secret in a time that does not depend on where they differ.
inline bool same_secret(const std::string& sent, const std::string& secret) {
  unsigned char diff = sent.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i)
    diff |= static_cast<unsigned char>((i < sent.size() ? sent[i] : 0) ^ secret[i]);
  return diff == 0;
}

struct Options {
  std::string master_addr = "127.0.0.1", job, nodes_file, end_message_file;
  int master_port = 8118, worker_num = 8, local = 8, node_rank = 0;
  long timeout = 7200;  // s; negative: no limit
  std::vector<std::string> command;
};

// connect with a limit: a host that does not answer would otherwise take TCP's minutes.
inline int connect_once(const std::string& addr, int port, std::string& why) {
  addrinfo* res = resolve(addr, port);
  int out = -1;
  for (addrinfo* a = res; a && out < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, 3000);
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = rc == 0 ? ETIMEDOUT : errno;
        rc = -1;
      }
    }
    if (rc == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      out = fd;
    } else {
      why = errno == ECONNREFUSED ? "nothing listens there yet (node 0's launcher not started?)"
            : errno == ETIMEDOUT  ? "no answer within 3 s"
                                  : std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace msrun
