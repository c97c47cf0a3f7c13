#include "core/trace/trace.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

namespace gf::trace {

// Any enclosing parallel construct counts, a team of one included (omp_get_level, not
// omp_in_parallel, which is false there): otherwise a one-thread run would record the op spans that
// its ops call inside their regions (the fused attention's tile products), which a run on more threads
// leaves to the op around them, and the two runs' breakdowns would not compare.
bool in_parallel_region() { return omp_get_level() > 0; }

std::atomic<unsigned> g_flags{0};

namespace {

struct Recorder {
  std::vector<Event> events;
  size_t capacity = 0;
  int64_t growths = 0;
  Clock::time_point origin;
  std::thread::id owner;
};

Recorder& rec() {
  static Recorder r;
  return r;
}

bool on_owner() { return std::this_thread::get_id() == rec().owner; }

Event& push(char ph, const char* cat, const char* name, double ts) {
  Recorder& r = rec();
  if (r.events.size() == r.events.capacity()) ++r.growths;  // push_back reallocates: counted, not refused
  Event& e = r.events.emplace_back();
  e.ph = ph;
  e.cat = cat;
  e.ts = ts;
  std::strncpy(e.name, name, sizeof e.name - 1);
  e.name[sizeof e.name - 1] = '\0';
  return e;
}

void append_number(std::string& out, double v) {
  char buf[40];
  // Integral values (byte counts, indices) exactly; timestamps to the nanosecond.
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.007e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (std::isfinite(v))
    std::snprintf(buf, sizeof buf, "%.3f", v);
  else
    std::snprintf(buf, sizeof buf, "null");  // JSON has no inf or NaN
  out += buf;
}

}  // namespace

void start(unsigned flags, size_t capacity, Clock::time_point origin) {
  Recorder& r = rec();
  r.events.clear();
  r.events.shrink_to_fit();
  // Reserved and touched: the pages are mapped now, not by page faults inside the profiled steps.
  r.events.resize(capacity);
  r.events.clear();
  r.capacity = capacity;
  r.growths = 0;
  r.origin = origin;
  r.owner = std::this_thread::get_id();
  g_flags.store(flags | kOn, std::memory_order_relaxed);
}

void stop() { g_flags.store(0, std::memory_order_relaxed); }

const std::vector<Event>& events() { return rec().events; }
int64_t growths() { return rec().growths; }

double micros(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - rec().origin).count();
}

int64_t open(const char* cat, const char* name) {
  if (!on_owner()) return -1;
  const double ts = micros(Clock::now());
  push('X', cat, name, ts);
  return static_cast<int64_t>(rec().events.size()) - 1;
}

void close(int64_t index) {
  Event& e = rec().events[static_cast<size_t>(index)];
  e.dur = micros(Clock::now()) - e.ts;
}

void add_arg(int64_t index, const char* key, double value) {
  Event& e = rec().events[static_cast<size_t>(index)];
  if (e.nargs < Event::kMaxArgs) e.args[e.nargs++] = {key, value};
}

void add_str_arg(int64_t index, const char* key, const char* value) {
  Event& e = rec().events[static_cast<size_t>(index)];
  e.str_key = key;
  e.str_value = value;
}

void counter(const char* name, std::initializer_list<Event::Arg> series) {
  if (!on_owner()) return;
  Event& e = push('C', "memory", name, micros(Clock::now()));
  e.dur = 0;
  for (const Event::Arg& a : series)
    if (e.nargs < Event::kMaxArgs) e.args[e.nargs++] = a;
}

int64_t instant(const char* cat, const char* name, Clock::time_point t) {
  if (!on_owner()) return -1;
  Event& e = push('i', cat, name, micros(t));
  e.dur = 0;
  return static_cast<int64_t>(rec().events.size()) - 1;
}

double current_rss_bytes() {
  // statm's second field: resident pages. The file stays open and is read again from its start (a
  // fresh open costs about ten times the read).
  static const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  long size = 0, resident = 0;
  if (std::sscanf(buf, "%ld %ld", &size, &resident) != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

ThreadTimes read_thread_times() {
  if (!enabled()) return {};
  Span span("step", "thread times");
  // The CPU time from the thread's clock (the scheduler's exact runtime; getrusage's utime and stime are
  // that split by tick samples), the count from getrusage.
  timespec cpu{};
  rusage u{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0 || getrusage(RUSAGE_THREAD, &u) != 0) return {};
  return {1e6 * static_cast<double>(cpu.tv_sec) + 1e-3 * static_cast<double>(cpu.tv_nsec), static_cast<double>(u.ru_nivcsw)};
}

void add_thread_times(int64_t index, const ThreadTimes& t) {
  if (t.cpu_us < 0) return;
  add_arg(index, "thread_cpu_us", t.cpu_us);
  add_arg(index, "preemptions", t.preemptions);
}

void memory_counter(double planned_activation_bytes) {
  if (!enabled(kOn | kMemory)) return;
  // The read is a span of its own, so that its time is accounted for in the step it falls in.
  Span read("memory", "read RSS");
  counter("memory", {{"rss_bytes", current_rss_bytes()}, {"planned_activation_bytes", planned_activation_bytes}});
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string events_json(const std::vector<Event>& events, int pid, int tid) {
  std::string out;
  out.reserve(events.size() * 160);
  bool first = true;
  for (const Event& e : events) {
    if (e.ph == 'X' && e.dur < 0) continue;  // never closed (written while open): no duration to give
    if (!first) out += ",\n";
    first = false;
    out += "{\"name\":" + json_string(e.name) + ",\"cat\":" + json_string(e.cat) + ",\"ph\":\"";
    out += e.ph;
    out += "\",\"ts\":";
    append_number(out, e.ts);
    if (e.ph == 'X') {
      out += ",\"dur\":";
      append_number(out, e.dur);
    }
    if (e.ph == 'i') out += ",\"s\":\"t\"";
    out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{";
    for (int i = 0; i < e.nargs; ++i) {
      if (i > 0) out += ",";
      out += json_string(e.args[i].key) + ":";
      append_number(out, e.args[i].value);
    }
    if (e.str_key != nullptr) {
      if (e.nargs > 0) out += ",";
      out += json_string(e.str_key) + ":" + json_string(e.str_value);
    }
    out += "}}";
  }
  return out;
}

std::string trace_file_json(const std::vector<std::string>& metadata, const std::vector<std::string>& fragments,
                            const std::string& other_data) {
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const std::string& s) {
    if (s.empty()) return;
    if (!first) out += ",\n";
    first = false;
    out += s;
  };
  for (const std::string& m : metadata) add(m);
  for (const std::string& f : fragments) add(f);
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + (other_data.empty() ? std::string("{}") : other_data) + "}\n";
  return out;
}

std::string process_name_json(int pid, const std::string& name) {
  return "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":0,\"args\":{\"name\":" +
         json_string(name) + "}}";
}

std::string process_sort_json(int pid, int index) {
  return "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(index) + "}}";
}

std::string thread_name_json(int pid, int tid, const std::string& name) {
  return "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":" + json_string(name) + "}}";
}

}  // namespace gf::trace
