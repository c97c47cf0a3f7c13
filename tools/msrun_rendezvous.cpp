// msrun_rendezvous: where the nodes of scripts/msrun_launcher.sh meet (the part of MindSpore msrun's scheduler
// that gridformer needs: no MindSpore, no Python, no netcat). The launcher of node_rank 0 serves on
// MASTER_ADDR:MASTER_PORT until every node has registered its workers (their local_worker_num adding up to
// worker_num), then runs the job's launch command with the nodes' addresses and, when it ends, sends every node its
// status; the launchers of the other nodes register there and wait for that end. See docs/distributed.md.
// The protocol between serve and join, and what both share: tools/msrun_rendezvous.h.
//
//   msrun_rendezvous serve --master_addr A --master_port P --worker_num N --local_worker_num L --timeout S
//                          --job TEXT --nodes FILE [--end_message JOB_FILE] -- COMMAND ARGS...
//   msrun_rendezvous join  --master_addr A --master_port P --worker_num N --local_worker_num L --node_rank R
//                          --timeout S --job TEXT
// Both need the job's secret in the environment: GF_JOB_SECRET, or GF_JOB_SECRET_FILE naming a file that holds it
// (tools/msrun_rendezvous.h); serve refuses and logs a node without it.
//
// Exit status: serve: the command's (128 + signal if a signal ended it), 1 if the nodes did not all register within
// --timeout s, 2 for bad arguments or an address that cannot be served; join: the job's status as node 0 reports
// it, 1 if no job started within --timeout s or node 0's launcher went away first, 2 if refused.
#include <CLI/CLI.hpp>
#include <sys/stat.h>
#include <sys/wait.h>

#include <ctime>
#include <fstream>
#include <map>

#include "tools/msrun_rendezvous.h"

namespace msrun {
namespace {

// ---- serve (node 0) ------------------------------------------------------------------------------------------------

struct Node {
  LineReader in;
  std::string address, host;
  int node_rank = -1, local = 0;
  bool proven = false, registered = false;  // proven: it sent the job's secret
  double connected_at = 0;
};

int serve(const Options& o) {
  std::string no_secret;
  const std::string secret = job_secret(no_secret);
  if (secret.empty()) die(no_secret + " (node 0's launcher writes it before serving)");
  addrinfo* res = resolve(o.master_addr, o.master_port);
  int lfd = -1;
  std::string bind_error;
  for (addrinfo* a = res; a && lfd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      lfd = fd;
      break;
    }
    const int err = errno;
    ::close(fd);
    if (err == EADDRINUSE)
      bind_error = fmt::format("port {} at {} is in use: another launcher with node_rank 0 (or another program) holds it; "
                               "give every node another MASTER_PORT (1024-65535)", o.master_port, o.master_addr);
    else if (err == EADDRNOTAVAIL)
      bind_error = fmt::format("MASTER_ADDR {} is not an address of this host ({}): node_rank 0 serves the other nodes "
                               "there, so run node_rank 0 on the host MASTER_ADDR names, and give this host its own "
                               "node_rank (1, 2, ...)", o.master_addr, host_name());
    else if (err == EACCES)
      bind_error = fmt::format("port {} may not be used by this user: give a MASTER_PORT from 1024 to 65535", o.master_port);
    else
      bind_error = fmt::format("cannot listen on {}:{}: {}", o.master_addr, o.master_port, std::strerror(err));
  }
  freeaddrinfo(res);
  if (lfd < 0) die(bind_error);
  fcntl(lfd, F_SETFL, O_NONBLOCK);
  // node 0's address in the nodes file: the one it listens on, as a number (MASTER_ADDR may be a host name).
  std::string my_address = o.master_addr;
  {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char b[INET6_ADDRSTRLEN] = {};
    if (getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET && inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, b, sizeof b))
        my_address = b;
      else if (ss.ss_family == AF_INET6 && inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, b, sizeof b))
        my_address = b;
    }
  }
  install_signals();

  const int others = o.worker_num - o.local;
  say(fmt::format("node 0 ({}): {} worker(s) here; waiting up to {} for the other nodes' {} worker(s) at {}:{}", host_name(),
                  o.local, o.timeout < 0 ? std::string("no limit") : fmt::format("{} s", o.timeout), others,
                  o.master_addr, o.master_port));
  std::map<int, Node> nodes;  // by fd
  const double t0 = now_s();
  double next_note = t0 + 30;
  auto registered_workers = [&] {
    int k = o.local;
    for (auto& [fd, n] : nodes) k += n.registered ? n.local : 0;
    return k;
  };
  auto drop = [&](int fd, const std::string& why) {
    if (!why.empty()) say(why);
    ::close(fd);
    nodes.erase(fd);
  };
  auto refuse = [&](int fd, const std::string& why) {
    Node& n = nodes[fd];
    say(fmt::format("refused {} ({}): {}", n.node_rank >= 0 ? fmt::format("node {}", n.node_rank) : "a connection",
                    n.address, why));
    send_line(fd, "refused " + why);
    drop(fd, "");
  };
  auto broadcast = [&](const std::string& line) {
    for (auto& [fd, n] : nodes) if (n.registered) send_line(fd, line);
  };
  auto describe_registered = [&] {
    std::vector<std::pair<int, std::string>> list{{0, fmt::format("node 0 ({} worker(s))", o.local)}};
    for (auto& [fd, n] : nodes)
      if (n.registered) list.push_back({n.node_rank, fmt::format("node {} at {} ({} worker(s))", n.node_rank, n.address, n.local)});
    std::sort(list.begin(), list.end());
    std::string s;
    for (auto& [r, t] : list) s += (s.empty() ? "" : ", ") + t;
    return s;
  };

  // Gather until the registered workers reach worker_num.
  while (registered_workers() < o.worker_num) {
    if (g_signal) {
      broadcast(fmt::format("abort node 0's launcher was stopped by {} before the job started", signal_name(g_signal)));
      say(fmt::format("{}: stopped before the job started (registered: {})", signal_name(g_signal), describe_registered()));
      return g_signal == SIGINT ? 130 : 143;
    }
    const double now = now_s();
    if (o.timeout >= 0 && now - t0 >= static_cast<double>(o.timeout)) {
      const std::string why = fmt::format(
          "the cluster did not form within {} s (cluster_time_out): {} of {} worker(s) registered ({}); start the "
          "launcher on every node with the same WORKER_NUM, MASTER_ADDR and MASTER_PORT and its own NODE_RANK, so that "
          "their LOCAL_WORKER add up to {}", o.timeout, registered_workers(), o.worker_num, describe_registered(),
          o.worker_num);
      broadcast("abort " + why);
      say("error: " + why);
      return 1;
    }
    if (now >= next_note) {
      say(fmt::format("{:.0f} s: {} of {} worker(s) registered ({})", now - t0, registered_workers(), o.worker_num,
                      describe_registered()));
      next_note = now + 30;
    }
    std::vector<pollfd> fds{{lfd, POLLIN, 0}};
    for (auto& [fd, n] : nodes) fds.push_back({fd, POLLIN, 0});
    const int pr = ::poll(fds.data(), fds.size(), 200);
    if (pr < 0 && errno != EINTR) die(fmt::format("poll: {}", std::strerror(errno)));
    if (pr <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        keepalive(fd);
        Node& n = nodes[fd];
        n.in.fd = fd;
        n.address = peer_address(fd);
        n.connected_at = now_s();
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const int fd = fds[i].fd;
      if (!nodes.count(fd)) continue;
      Node& n = nodes[fd];
      if (!n.in.read_some()) {
        const bool was_registered = n.registered;
        drop(fd, was_registered ? fmt::format("node {} ({}, {}) left before the job started: {} of {} worker(s) registered",
                                              n.node_rank, n.host, n.address, registered_workers() - n.local, o.worker_num)
                                : "");
        if (was_registered) broadcast(fmt::format("registered {} {}", registered_workers(), o.worker_num));
        continue;
      }
      while (nodes.count(fd)) {
        const std::optional<std::string> line = nodes[fd].in.next();
        if (!line) break;
        Node& m = nodes[fd];
        if (!m.proven) {
          // Before anything else, and before anything of this job is told to the connection.
          const bool sent = line->rfind("secret ", 0) == 0;
          if (!sent || !same_secret(line->substr(7), secret)) {
            refuse(fd, fmt::format("{} job secret: a node proves it belongs to this job with the job's secret (give "
                                   "every node the same GF_JOB_SECRET, or LOG_DIR on a directory shared with node 0, "
                                   "whose launcher writes LOG_DIR/.job_secret)", sent ? "a wrong" : "no"));
            break;
          }
          m.proven = true;
          continue;
        }
        if (!m.registered && m.node_rank < 0) {
          const std::vector<std::string> w = words(*line, 5);
          long rank = 0, local = 0, num = 0;
          if (w.size() != 5 || w[0] != "register" || !parse_int(w[1], rank) || !parse_int(w[2], local) ||
              !parse_int(w[3], num)) {
            refuse(fd, "not a registration of scripts/msrun_launcher.sh (expected `register NODE_RANK LOCAL WORKER_NUM HOST`)");
            break;
          }
          m.node_rank = static_cast<int>(rank), m.local = static_cast<int>(local), m.host = w[4];
          if (num != o.worker_num) {
            refuse(fd, fmt::format("its WORKER_NUM is {}, node 0's is {}: give every node the same WORKER_NUM", num,
                                   o.worker_num));
            break;
          }
          if (rank == 0) {
            refuse(fd, fmt::format("node_rank 0 is this launcher's (on {}); give the node on {} its own node_rank "
                                   "(1, 2, ...)", host_name(), m.host));
            break;
          }
          bool taken = false;
          for (auto& [ofd, other] : nodes)
            if (ofd != fd && other.registered && other.node_rank == rank) {
              refuse(fd, fmt::format("node_rank {} is taken by {} ({}): give each node its own node_rank", rank,
                                     other.host, other.address));
              taken = true;
              break;
            }
          if (taken) break;
          if (registered_workers() + local > o.worker_num) {
            refuse(fd, fmt::format("its {} worker(s) would make {} of WORKER_NUM {} (registered: {}): the nodes' "
                                   "LOCAL_WORKER must add up to WORKER_NUM", local, registered_workers() + local,
                                   o.worker_num, describe_registered()));
            break;
          }
          continue;  // the job line comes next
        }
        if (!m.registered) {
          if (line->rfind("job ", 0) != 0) {
            refuse(fd, "no `job` line after the registration");
            break;
          }
          const std::string job = line->substr(4);
          if (job != o.job) {
            refuse(fd, fmt::format("it runs another job than node 0's: node {}: `{}`; node 0: `{}`: start every node's "
                                   "launcher with the same command, WORKER_NUM and LOG_DIR, in the same directory",
                                   m.node_rank, job, o.job));
            break;
          }
          m.registered = true;
          say(fmt::format("node {} ({}, {}) registered {} worker(s): {} of {}", m.node_rank, m.host, m.address, m.local,
                          registered_workers(), o.worker_num));
          broadcast(fmt::format("registered {} {}", registered_workers(), o.worker_num));
        }
      }
    }
    // Connections that never register (a port scanner, a stray client) are closed after 30 s.
    for (auto it = nodes.begin(); it != nodes.end();) {
      if (!it->second.registered && now_s() - it->second.connected_at > 30) {
        ::close(it->first);
        it = nodes.erase(it);
      } else {
        ++it;
      }
    }
  }

  // All registered: the nodes in node_rank order, node 0 first; each node's ranks follow the previous ones'.
  std::vector<Node*> order;
  for (auto& [fd, n] : nodes) if (n.registered) order.push_back(&n);
  std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->node_rank < b->node_rank; });
  {
    std::ofstream f(o.nodes_file + ".tmp");
    f << 0 << ' ' << my_address << ' ' << o.local << ' ' << host_name() << '\n';
    for (Node* n : order) f << n->node_rank << ' ' << n->address << ' ' << n->local << ' ' << n->host << '\n';
    if (!f) die(fmt::format("cannot write {}", o.nodes_file));
  }
  if (std::rename((o.nodes_file + ".tmp").c_str(), o.nodes_file.c_str()) != 0)
    die(fmt::format("cannot write {}: {}", o.nodes_file, std::strerror(errno)));
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
  const std::string job_id = fmt::format("{}-{}-{}", stamp, host_name(), getpid());
  say(fmt::format("all {} worker(s) registered in {:.1f} s ({}); job {}", o.worker_num, now_s() - t0,
                  describe_registered(), job_id));

  // The job: the command in a process group of its own, so that each signal reaches it once, from here.
  const std::time_t job_started = std::time(nullptr);
  const pid_t child = fork();
  if (child < 0) die(fmt::format("fork: {}", std::strerror(errno)));
  if (child == 0) {
    setpgid(0, 0);
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(s, &sa, nullptr);
    unsetenv("GF_JOB_SECRET");  // the ranks have no use for it
    ::close(lfd);
    for (auto& [fd, n] : nodes) ::close(fd);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "msrun_rendezvous: error: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  int first = o.local;
  for (Node* n : order) {
    send_line(n->in.fd, fmt::format("start {} {} {} {}", first, first + n->local - 1, job_id,
                                    n->address == my_address ? "here" : "ssh"));
    first += n->local;
  }
  // While it runs: signals go on to it; a node that stops following is noted; a late node is refused.
  int status = 0;
  for (;;) {
    if (g_signal) {
      const int sig = g_signal;
      g_signal = 0;
      kill(child, sig);
    }
    int ws = 0;
    const pid_t w = waitpid(child, &ws, WNOHANG);
    if (w == child) {
      status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
      break;
    }
    std::vector<pollfd> fds{{lfd, POLLIN, 0}};
    for (auto& [fd, n] : nodes) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 200) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        send_line(fd, fmt::format("refused job {} has started with all {} worker(s); this node's launcher came too late "
                                  "(or is one too many)", job_id, o.worker_num));
        ::close(fd);
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Node& n = nodes[fds[i].fd];
      if (!n.in.read_some()) {
        say(fmt::format("node {}'s launcher ({}, {}) stopped waiting for the job; its ranks go on", n.node_rank, n.host,
                        n.address));
        ::close(fds[i].fd);
        nodes.erase(fds[i].fd);
      }
    }
  }
  // The one-line outcome: run_distribute.sh's job file (`message=...`) when it was written during this job.
  std::string message;
  struct stat st {};
  if (!o.end_message_file.empty() && ::stat(o.end_message_file.c_str(), &st) == 0 && st.st_mtime >= job_started) {
    std::ifstream f(o.end_message_file);
    for (std::string line; std::getline(f, line);)
      if (line.rfind("message=", 0) == 0) message = line.substr(8);
  }
  if (message.empty()) message = status == 0 ? "finished" : fmt::format("failed with status {}", status);
  for (auto& [fd, n] : nodes) {
    send_line(fd, fmt::format("end {} {}", status, message));
    ::close(fd);
  }
  ::close(lfd);
  return status;
}

// ---- join (the other nodes) ----------------------------------------------------------------------------------------

int join(const Options& o) {
  install_signals();
  const double t0 = now_s();
  const std::string where = fmt::format("{}:{}", o.master_addr, o.master_port);
  const std::string limit = o.timeout < 0 ? std::string("no limit") : fmt::format("{} s", o.timeout);
  say(fmt::format("node {} ({}): {} worker(s); registering with node 0's launcher at {} (waiting up to {}, "
                  "cluster_time_out)", o.node_rank, host_name(), o.local, where, limit));
  int fd = -1;
  std::string why, last_why, secret;
  double next_note = t0 + 30;
  while (fd < 0) {
    if (g_signal) {
      say(fmt::format("{}: stopped before registering", signal_name(g_signal)));
      return g_signal == SIGINT ? 130 : 143;
    }
    fd = connect_once(o.master_addr, o.master_port, why);
    if (fd >= 0) {
      // Read once node 0 answers: its launcher wrote the secret file before it served, so a file left by an
      // earlier job has been replaced by then.
      secret = job_secret(why);
      if (!secret.empty()) break;
      ::close(fd);
      fd = -1;
      if (o.timeout >= 0 && now_s() - t0 >= static_cast<double>(o.timeout)) {
        say(fmt::format("error: node 0's launcher answers at {}, but this node has had no job secret for {} s "
                        "(cluster_time_out): {}; run the launchers with LOG_DIR on a directory every node shares, or "
                        "set GF_JOB_SECRET to the same value (16 characters or more) on every node", where, o.timeout,
                        why));
        return 1;
      }
      why = fmt::format("node 0's launcher answers, but {} (is LOG_DIR a directory shared with node 0? If not, set "
                        "GF_JOB_SECRET to the same value on every node)", why);
    }
    if (why != last_why) say(fmt::format("{}: {}; trying again every second", where, why));
    last_why = why;
    const double now = now_s();
    if (o.timeout >= 0 && now - t0 >= static_cast<double>(o.timeout)) {
      say(fmt::format("error: node 0's launcher did not answer at {} within {} s (cluster_time_out): {}; start it "
                      "with NODE_RANK 0 on the host MASTER_ADDR names, with the same WORKER_NUM and MASTER_PORT",
                      where, o.timeout, why));
      return 1;
    }
    if (now >= next_note) {
      say(fmt::format("{:.0f} s: still no answer at {}", now - t0, where));
      next_note = now + 30;
    }
    usleep(1000 * 1000);
  }
  keepalive(fd);
  // One write for the three lines: node 0 may refuse after the first and close; its answer is read below even when
  // the write failed.
  const bool sent = send_lines(fd, {"secret " + secret, fmt::format("register {} {} {} {}", o.node_rank, o.local,
                                                                     o.worker_num, host_name()), "job " + o.job});
  LineReader in{fd, {}};
  bool started = false;
  std::string job_id;
  for (;;) {
    if (g_signal) {
      const int sig = g_signal;
      if (started)
        say(fmt::format("{}: no longer waiting for job {}; it goes on: stop it from node 0 (Ctrl-C to its launcher)",
                        signal_name(sig), job_id));
      else
        say(fmt::format("{}: stopped before the job started; node 0's launcher drops this node's {} worker(s)",
                        signal_name(sig), o.local));
      return sig == SIGINT ? 130 : 143;
    }
    if (!started && o.timeout >= 0 && now_s() - t0 >= static_cast<double>(o.timeout) + 5) {
      // node 0 aborts at its own limit; this is the last resort when its clock started later
      say(fmt::format("error: no job started within {} s (cluster_time_out)", o.timeout));
      return 1;
    }
    pollfd p{fd, POLLIN, 0};
    const int pr = ::poll(&p, 1, 200);
    if (pr <= 0) continue;
    if (!in.read_some()) {
      if (started)
        say(fmt::format("error: node 0's launcher at {} went away without the end of job {} (killed, or its host or "
                        "the network is down); the ranks here are stopped by their Open MPI daemon when it loses mpirun",
                        where, job_id));
      else
        say(fmt::format("error: node 0's launcher at {} closed the connection before the job started{}", where,
                        sent ? "" : " (while this node registered)"));
      return 1;
    }
    while (std::optional<std::string> line = in.next()) {
      std::vector<std::string> w = words(*line, 5);
      if (w.empty()) continue;
      if (w[0] == "end") w = words(*line, 3);  // end STATUS MESSAGE (the message has spaces)
      if (w[0] == "registered" && w.size() >= 3) {
        say(fmt::format("registered at {}: {} of {} worker(s) so far", where, w[1], w[2]));
      } else if (w[0] == "refused") {
        say(fmt::format("error: node 0's launcher refused this node: {}", line->size() > 8 ? line->substr(8) : ""));
        return 2;
      } else if (w[0] == "abort") {
        say(fmt::format("error: {}", line->size() > 6 ? line->substr(6) : "node 0's launcher gave up"));
        return 1;
      } else if (w[0] == "start" && w.size() >= 4) {
        started = true;
        job_id = w[3];
        say(fmt::format("job {} started: ranks {}..{} run here, started by node 0's mpirun{}; waiting for the job's end",
                        job_id, w[1], w[2], w.size() >= 5 && w[4] == "here" ? " (node 0 is on this host)" : " over ssh"));
      } else if (w[0] == "end" && w.size() >= 2) {
        long status = 1;
        if (!parse_int(w[1], status)) status = 1;
        const std::string message = w.size() >= 3 ? w[2] : "";
        say(fmt::format("job {} ended (node 0's report): {} (status {})", job_id, message, status));
        return static_cast<int>(status);
      }
    }
  }
}

}  // namespace
}  // namespace msrun

using msrun::die;
using msrun::join;
using msrun::Options;
using msrun::serve;

int main(int argc, char** argv) {
  // serve's command follows `--`; CLI11 reads what comes before.
  std::vector<std::string> command;
  int cli_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      for (int j = i + 1; j < argc; ++j) command.emplace_back(argv[j]);
      cli_argc = i;
      break;
    }
  Options o;
  o.command = command;
  CLI::App app{"msrun_rendezvous: node 0 of scripts/msrun_launcher.sh gathers the nodes' workers and runs the job "
               "(serve); the other nodes register and wait for its end (join)"};
  app.require_subcommand(1);
  auto common = [&](CLI::App* c) {
    c->add_option("--master_addr", o.master_addr, "node 0's address (MASTER_ADDR)")->required();
    c->add_option("--master_port", o.master_port, "the port (MASTER_PORT)")->required()->check(CLI::Range(1, 65535));
    c->add_option("--worker_num", o.worker_num, "workers of the whole job")->required()->check(CLI::Range(1, 1 << 20));
    c->add_option("--local_worker_num", o.local, "workers of this node")->required()->check(CLI::Range(1, 1 << 20));
    c->add_option("--timeout", o.timeout, "seconds to wait for the cluster to form (negative: no limit)");
    c->add_option("--job", o.job, "what the launcher runs, the same on every node")->required();
  };
  auto* s = app.add_subcommand("serve", "node 0: wait for the nodes, then run the command after --");
  common(s);
  s->add_option("--nodes", o.nodes_file, "write the nodes here: NODE_RANK ADDRESS LOCAL_WORKERS HOST, a line each")
      ->required();
  s->add_option("--end_message", o.end_message_file,
                "run_distribute.sh's job file: its `message=` line, if written during the job, goes to the nodes with "
                "the job's status");
  auto* j = app.add_subcommand("join", "another node: register, wait for the job's end, exit with its status");
  common(j);
  j->add_option("--node_rank", o.node_rank, "this node's index (1, 2, ...)")->required()->check(CLI::Range(1, 1 << 20));
  try {
    app.parse(cli_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.local > o.worker_num)
    die(fmt::format("--local_worker_num {} is more than --worker_num {}", o.local, o.worker_num));
  if (*s) {
    if (o.command.empty()) die("serve needs the command to run after --");
    if (o.local >= o.worker_num) die("serve with every worker on this node: no other node to wait for");
    return serve(o);
  }
  return join(o);
}
