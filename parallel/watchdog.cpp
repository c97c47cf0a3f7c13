#include "parallel/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace gf::hang {
namespace {

constexpr int kHostChars = 64;
constexpr int kReportTag = 1;

struct State {
  double timeout = 0;
  MPI_Comm comm = MPI_COMM_NULL;  // the side channel: a duplicate of MPI_COMM_WORLD
  int rank = 0, size = 1;
  std::vector<std::string> hosts;
  std::function<void(const std::string&)> sink;
  bool reporting = false;
};
State& st() {
  static State s;
  return s;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string fixed1(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", x);
  return b;
}

void emit(const std::string& line) {
  if (st().sink) {
    st().sink(line);
  } else {
    std::fprintf(stderr, "[rank %d] %s\n", st().rank, line.c_str());
    std::fflush(stderr);
  }
}

std::string host_of(int world_rank) {
  const auto& h = st().hosts;
  return world_rank >= 0 && world_rank < static_cast<int>(h.size()) ? h[static_cast<size_t>(world_rank)] : "?";
}

// The world ranks of a log's group, in group order.
std::vector<int> world_ranks(const CallLog& log) {
  if (!log.has_comm) return {st().rank};
  MPI_Comm c;
  std::memcpy(&c, &log.comm, sizeof c);
  MPI_Group g, w;
  MPI_Comm_group(c, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &w);
  std::vector<int> in(static_cast<size_t>(log.size)), out(in.size());
  std::iota(in.begin(), in.end(), 0);
  MPI_Group_translate_ranks(g, log.size, in.data(), w, out.data());
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  return out;
}

std::string group_name(const CallLog* log) { return log && *log->name ? log->name : "unnamed"; }

// One rank's facts, as sent over the side channel (one line of words: group and op names have no spaces).
struct Report {
  int rank = -1;
  std::string group = "unnamed", op = "?";
  int64_t seq = 0, bytes = 0;
  int peer = -1;  // world rank waited for, -1 when not known
  int tag = -1;
  bool p2p = false;
  double waited = 0;
  std::vector<int> members;  // world ranks of the group

  std::string call() const { return group + " " + op + " #" + std::to_string(seq); }
  std::string encode() const {
    std::ostringstream o;
    o << rank << ' ' << group << ' ' << op << ' ' << seq << ' ' << bytes << ' ' << peer << ' ' << tag << ' ' << p2p
      << ' ' << waited << ' ' << members.size();
    for (int m : members) o << ' ' << m;
    return o.str();
  }
  static Report decode(const std::string& s) {
    std::istringstream i(s);
    Report r;
    size_t n = 0;
    i >> r.rank >> r.group >> r.op >> r.seq >> r.bytes >> r.peer >> r.tag >> r.p2p >> r.waited >> n;
    for (size_t k = 0; k < n && i; ++k) {
      int m = -1;
      i >> m;
      r.members.push_back(m);
    }
    return r;
  }
};

Report my_report(const Waiting& w) {
  Report r;
  r.rank = st().rank;
  r.waited = w.waited_s;
  if (!w.log) return r;
  r.group = group_name(w.log);
  r.members = world_ranks(*w.log);
  if (w.peer >= 0 && w.peer < static_cast<int>(r.members.size())) r.peer = r.members[static_cast<size_t>(w.peer)];
  if (const CallRecord* c = w.log->find(w.id)) {
    r.op = c->op;
    r.seq = c->seq;
    r.bytes = c->bytes;
    r.tag = c->tag;
    r.p2p = c->peer >= 0;
  }
  return r;
}

// This rank's own lines: what it waits for, then its last calls on each group of more than one rank.
void write_own(const Waiting& w, const Report& r) {
  std::string line = std::string("hang: rank ") + std::to_string(r.rank) + " (host " + host_of(r.rank) + ", pid " +
                     std::to_string(getpid()) + ") has waited " + fixed1(r.waited) + " s in ";
  const CallRecord* c = w.log ? w.log->find(w.id) : nullptr;
  line += group_name(w.log) + " " + (c ? describe_call(*c) : std::string("a call no longer in its log"));
  if (r.peer >= 0) line += std::string(", for world rank ") + std::to_string(r.peer);
  line += std::string(" (parallel.hang_timeout ") + fixed1(st().timeout) + " s); its last calls:";
  emit(line);
  CallLog::for_each_log([&](const CallLog& log) {
    if (log.size <= 1 || log.calls() == 0) return;
    std::string l = std::string("hang:   rank ") + std::to_string(r.rank) + " " + group_name(&log) + " (rank " +
                    std::to_string(log.rank) + " of " + std::to_string(log.size) + ", " + std::to_string(log.collectives()) +
                    " collectives, " + std::to_string(log.sends()) + " sends, " + std::to_string(log.recvs()) + " receives):";
    log.for_each([&](const CallRecord& rec) {
      l += ' ';
      l.append(describe_call(rec));
      l += ';';
    });
    l.pop_back();
    emit(l);
  });
}

// The ranks not arriving: members of a group some reporter waits in, that did not report.
std::set<int> missing_of(const std::map<int, Report>& got) {
  std::set<int> m;
  for (const auto& [rank, r] : got)
    for (int x : r.members)
      if (!got.count(x)) m.insert(x);
  return m;
}

std::string summary(const std::map<int, Report>& got) {
  const std::set<int> missing = missing_of(got);
  std::string s = "hang: ";
  if (missing.empty()) {
    s += "no rank was found missing, yet ranks waited more than parallel.hang_timeout";
  } else {
    bool first = true;
    for (int m : missing) {
      // The report that names it best: one waiting for it, else one in a group with it.
      const Report* best = nullptr;
      for (const auto& [rank, r] : got)
        if (r.peer == m) {
          best = &r;
          break;
        }
      if (!best)
        for (const auto& [rank, r] : got)
          if (std::find(r.members.begin(), r.members.end(), m) != r.members.end()) {
            best = &r;
            break;
          }
      s += std::string(first ? "" : "; ") + "world rank " + std::to_string(m) + " (host " + host_of(m) + ") did not arrive at ";
      if (best->p2p)  // its side of the message: the receive of a send, the send of a receive
        s += std::string(best->op == "send" ? "the receive" : "the send") + " matching world rank " +
             std::to_string(best->rank) + "'s " + best->call() + " (tag " + std::to_string(best->tag) + ", " +
             std::to_string(best->bytes) + " bytes)";
      else
        s += best->call() + " (" + std::to_string(best->bytes) + " bytes)";
      first = false;
    }
  }
  s += got.size() == 1 ? "; reported by world rank" : "; reported by world ranks";
  for (const auto& [rank, r] : got)
    s += std::string(rank == got.begin()->first ? " " : ", ") + std::to_string(rank) + " (" + fixed1(r.waited) + " s in " + r.call() + ")";
  s += std::string("; parallel.hang_timeout ") + fixed1(st().timeout) + " s; ending the job with exit status " +
       std::to_string(kExitStatus);
  return s;
}

// Receives the reports waiting on the side channel into `got`.
void receive(std::map<int, Report>& got) {
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kReportTag, st().comm, &flag, &msg, &status);
    if (!flag) return;
    int n = 0;
    MPI_Get_count(&status, MPI_CHAR, &n);
    std::string text(static_cast<size_t>(n), '\0');
    MPI_Mrecv(text.data(), n, MPI_CHAR, &msg, MPI_STATUS_IGNORE);
    Report r = Report::decode(text);
    r.rank = status.MPI_SOURCE;
    got[r.rank] = std::move(r);
  }
}

}  // namespace

void install(double timeout_s) {
  State& s = st();
  if (s.comm != MPI_COMM_NULL || timeout_s <= 0) {
    s.timeout = s.comm != MPI_COMM_NULL ? timeout_s : 0;
    return;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &s.comm);
  MPI_Comm_rank(s.comm, &s.rank);
  MPI_Comm_size(s.comm, &s.size);
  char mine[kHostChars] = {};
  gethostname(mine, kHostChars - 1);
  std::vector<char> all(static_cast<size_t>(kHostChars) * static_cast<size_t>(s.size));
  MPI_Allgather(mine, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, s.comm);
  s.hosts.clear();
  for (int r = 0; r < s.size; ++r) s.hosts.emplace_back(all.data() + static_cast<size_t>(r) * kHostChars);
  s.timeout = timeout_s;
}

void uninstall() {
  State& s = st();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (s.comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&s.comm);
  s.comm = MPI_COMM_NULL;
  s.timeout = 0;
}

double timeout_s() { return st().timeout; }

void set_report_sink(std::function<void(const std::string&)> sink) { st().sink = std::move(sink); }

bool report_arrived() {
  if (st().comm == MPI_COMM_NULL) return false;
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kReportTag, st().comm, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

void report_and_abort(const Waiting& w) {
  State& s = st();
  if (s.reporting) std::abort();  // a wait inside the report itself: cannot happen (the report only tests)
  s.reporting = true;
  Report mine = my_report(w);
  write_own(w, mine);
  if (s.comm == MPI_COMM_NULL) {
    emit(summary({{mine.rank, mine}}));
    MPI_Abort(MPI_COMM_WORLD, kExitStatus);
    std::abort();
  }
  // Tell every other rank (never waited for: a stopped rank takes nothing; the job ends anyway).
  static std::string text;
  static std::vector<MPI_Request> sent;
  text = mine.encode();
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    sent.emplace_back();
    MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, r, kReportTag, s.comm, &sent.back());
  }
  // Collect the others' until every rank reported or is one of the missing, or the grace period ends.
  // A rank that waits sees the first report within 100 ms (wait_all looks every 10 ms from then on), so
  // the reports settle quickly: the collection ends once every rank is a reporter or one of the missing
  // and no report came for 1 s, or after the grace period.
  const double grace = std::clamp(s.timeout, 2.0, 30.0);
  std::map<int, Report> got{{mine.rank, mine}};
  const double deadline = now_s() + grace;
  double last_new = now_s();
  for (;;) {
    const size_t before = got.size();
    receive(got);
    if (got.size() != before) last_new = now_s();
    const std::set<int> missing = missing_of(got);
    if (!missing.empty() && static_cast<int>(got.size() + missing.size()) == s.size && now_s() - last_new > 1.0) break;
    if (now_s() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int lowest = got.begin()->first;
  if (lowest != s.rank) {
    // The lowest reporter prints the summary and ends the job; stand by, in case it cannot.
    const double standby = now_s() + grace + 5.0;
    while (now_s() < standby) {
      receive(got);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  emit(summary(got));
  MPI_Abort(MPI_COMM_WORLD, kExitStatus);
  std::abort();
}

}  // namespace gf::hang
