// Pipeline schedules from a file (parallel/pipeline/schedule_file.h): torch.distributed.pipelining's CSV
// notation parsed, placed on the stages, checked by the simulator and the live bound.
#include "parallel/pipeline/schedule_file.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace gf::pipeline {

namespace {

constexpr int kMaxIndex = 1000000000;                   // 10^9: any index past it is a typo, and fits an int
constexpr std::uintmax_t kMaxFileBytes = 16u << 20;     // 16 MiB: a million actions and their idle cells

const char* const kForms =
    "expected <stage><type><micro-batch> as torch.distributed.pipelining writes them, type one of F (forward), "
    "B (backward), I (backward-input), W (backward-weight), SEND_F, RECV_F, SEND_B, RECV_B (e.g. 0F3, 1I0, "
    "2SEND_F1), or UNSHARD, RESHARD, REDUCE_GRAD (skipped), or (a;b)OVERLAP_F_B; <stage> may be left out for "
    "the row's own rank (F3)";

struct Type {
  const char* name;
  Op op;
  bool skipped;  // torch's FSDP lowering: no micro-batch, nothing to run here
};
// Longest names first, so that SEND_F is not read as S...; torch's _action_regex has the same set.
const Type kTypes[] = {
    {"REDUCE_GRAD", Op::kForward, true}, {"UNSHARD", Op::kForward, true},    {"RESHARD", Op::kForward, true},
    {"SEND_F", Op::kSendForward, false}, {"RECV_F", Op::kRecvForward, false}, {"SEND_B", Op::kSendBackward, false},
    {"RECV_B", Op::kRecvBackward, false}, {"F", Op::kForward, false},          {"I", Op::kBackwardInput, false},
    {"B", Op::kBackward, false},          {"W", Op::kBackwardWeight, false},
};

bool is_message(Op op) {
  return op == Op::kSendForward || op == Op::kRecvForward || op == Op::kSendBackward || op == Op::kRecvBackward;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string where(const std::string& path, int line, int cell) {
  return path + ":" + std::to_string(line) + ":" + std::to_string(cell);
}

// Digits at s[*i...] as an int (-1 when there are none); throws past kMaxIndex.
int digits(const std::string& s, size_t* i, const std::string& at, const std::string& cell) {
  const size_t b = *i;
  int64_t v = 0;
  while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i]))) {
    v = v * 10 + (s[*i] - '0');
    if (v > kMaxIndex)
      throw std::invalid_argument(at + ": '" + cell + "': index past " + std::to_string(kMaxIndex) + "; " + kForms);
    ++*i;
  }
  return *i == b ? -1 : static_cast<int>(v);
}

// One action `<stage><type><micro>` into `out` (nothing for a skipped type).
void parse_action(const std::string& text, int line, int cell, const std::string& path, std::vector<FileCell>* out) {
  const std::string at = where(path, line, cell);
  size_t i = 0;
  const int stage = digits(text, &i, at, text);
  const Type* type = nullptr;
  for (const Type& t : kTypes)
    if (text.compare(i, std::string(t.name).size(), t.name) == 0) {
      type = &t;
      break;
    }
  if (type == nullptr) throw std::invalid_argument(at + ": '" + text + "': not an action; " + kForms);
  i += std::string(type->name).size();
  const int micro = digits(text, &i, at, text);
  if (i != text.size())
    throw std::invalid_argument(at + ": '" + text + "': unexpected '" + text.substr(i) + "' after the action; " + kForms);
  if (type->skipped) {
    if (micro >= 0) throw std::invalid_argument(at + ": '" + text + "': " + type->name + " takes no micro-batch");
    return;
  }
  if (micro < 0)
    throw std::invalid_argument(at + ": '" + text + "': the micro-batch index is missing (e.g. " + text + "0); " +
                                kForms);
  out->push_back({line, cell, text, stage, type->op, micro});
}

// Splits a line at commas; a cell in double quotes (as csv writers quote) loses them.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(trim(cur));
  return out;
}

std::string type_name(Op op) {
  switch (op) {
    case Op::kForward: return "F";
    case Op::kBackward: return "B";
    case Op::kBackwardInput: return "I";
    case Op::kBackwardWeight: return "W";
    case Op::kSendForward: return "SEND_F";
    case Op::kRecvForward: return "RECV_F";
    case Op::kSendBackward: return "SEND_B";
    case Op::kRecvBackward: return "RECV_B";
  }
  return "?";
}

}  // namespace

ScheduleFile parse_schedule_file(const std::string& text, const std::string& path) {
  ScheduleFile f;
  f.path = path;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string t = trim(raw);
    if (t.empty() || t[0] == '#') continue;
    std::vector<FileCell>& row = f.rows.emplace_back();
    const std::vector<std::string> cells = cells_of(raw);
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string& cell = cells[c];
      const int col = static_cast<int>(c) + 1;
      if (cell.empty()) continue;  // an idle step
      if (cell[0] == '(') {        // (a;b)OVERLAP_F_B: its actions in order
        const size_t close = cell.find(')');
        if (close == std::string::npos || cell.substr(close + 1) != "OVERLAP_F_B")
          throw std::invalid_argument(where(path, line, col) + ": '" + cell +
                                      "': an overlap cell is written (a;b)OVERLAP_F_B, e.g. (0F2;3B0)OVERLAP_F_B");
        std::istringstream subs(cell.substr(1, close - 1));
        std::string sub;
        while (std::getline(subs, sub, ';'))
          if (!trim(sub).empty()) parse_action(trim(sub), line, col, path, &row);
        continue;
      }
      parse_action(cell, line, col, path, &row);
    }
  }
  for (const auto& row : f.rows)
    for (const FileCell& c : row) f.messages = f.messages || is_message(c.op);
  return f;
}

ScheduleFile read_schedule_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument(path + ": no such schedule file (or not a regular file)");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxFileBytes)
    throw std::invalid_argument(path + ": " + (ec ? "cannot be sized" : std::to_string(size) + " bytes") +
                                "; a schedule file is read up to 16 MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_schedule_file(text.str(), path);
}

FileLists file_lists(const ScheduleFile& file, const Shape& shape) {
  const int p = shape.stages, vs = virtual_stages(shape);
  if (static_cast<int>(file.rows.size()) != p)
    throw std::invalid_argument(file.path + ": " + std::to_string(file.rows.size()) + " rows of actions for " +
                                std::to_string(p) + " pipeline stages (parallel_config.pipeline_stage); one row per "
                                "stage, in rank order");
  FileLists out;
  out.lists.resize(static_cast<size_t>(p));
  out.origins.resize(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    std::vector<Action> computes;
    std::vector<std::string> origins;
    // (is backward, micro, chunk) -> the compute's origin, for the messages derived around it.
    std::map<std::tuple<bool, int, int>, std::string> by_compute;
    for (const FileCell& c : file.rows[static_cast<size_t>(r)]) {
      const std::string at = where(file.path, c.line, c.cell) + ": '" + c.text + "'";
      const int k = c.vstage < 0 ? r : c.vstage;
      if (k >= vs)
        throw std::invalid_argument(at + ": stage " + std::to_string(k) + " is past the last virtual stage " +
                                    std::to_string(vs - 1) + " (parallel_config.pipeline_stage " + std::to_string(p) +
                                    " x " + std::to_string(shape.chunks) + " model chunks)");
      if (stage_of(shape, k) != r)
        throw std::invalid_argument(
            at + ": stage " + std::to_string(k) + " runs on pipeline rank " + std::to_string(stage_of(shape, k)) +
            ", not on this row's rank " + std::to_string(r) +
            (shape.v_shape ? " (the file's V: virtual stage k is chunk 0 of rank k below " + std::to_string(p) +
                                 ", else chunk 1 of rank " + std::to_string(2 * p - 1) + " - k)"
                           : " (virtual stage k is chunk k / " + std::to_string(p) + " of rank k % " +
                                 std::to_string(p) + ", Megatron's interleaved placement; with two chunks a stage a " +
                                 "file may place them in a V instead, torch's style \"v\")"));
      if (c.micro >= shape.micro_batches)
        throw std::invalid_argument(at + ": micro-batch " + std::to_string(c.micro) + " of " +
                                    std::to_string(shape.micro_batches) + " (parallel_config.micro_batch_num; "
                                    "micro-batches count from 0)");
      const Action a{c.op, c.micro, chunk_of(shape, k)};
      const std::string origin = where(file.path, c.line, c.cell) + " '" + c.text + "'";
      (file.messages ? out.lists[static_cast<size_t>(r)] : computes).push_back(a);
      origins.push_back(origin);
      if (!is_message(c.op)) by_compute.emplace(std::make_tuple(c.op != Op::kForward, a.micro, a.chunk), origin);
    }
    if (file.messages) {
      out.origins[static_cast<size_t>(r)] = std::move(origins);
      continue;
    }
    out.lists[static_cast<size_t>(r)] = derive_messages(shape, r, computes);
    size_t next = 0;  // the computes keep their order: the next one's origin
    for (const Action& a : out.lists[static_cast<size_t>(r)]) {
      if (!is_message(a.op)) {
        out.origins[static_cast<size_t>(r)].push_back(origins[next++]);
        continue;
      }
      const bool backward = a.op == Op::kSendBackward || a.op == Op::kRecvBackward;
      const auto it = by_compute.find({backward, a.micro, a.chunk});
      out.origins[static_cast<size_t>(r)].push_back(it == by_compute.end() ? "derived" : "derived for " + it->second);
    }
  }
  return out;
}

Shape file_shape(const ScheduleFile& file, Shape shape) {
  const int p = shape.stages;
  if (shape.chunks != 2 || static_cast<int>(file.rows.size()) != p) return shape;
  bool v_fits = true, loop_fits = true;
  for (int r = 0; r < p; ++r)
    for (const FileCell& c : file.rows[static_cast<size_t>(r)]) {
      if (c.vstage < 0) continue;
      v_fits = v_fits && (c.vstage == r || c.vstage == 2 * p - 1 - r);
      loop_fits = loop_fits && c.vstage % p == r;
    }
  shape.v_shape = v_fits && !loop_fits;
  return shape;
}

int default_live_bound(const Shape& shape) {
  const int p = shape.stages, m = shape.micro_batches, v = shape.chunks;
  if (shape.v_shape) return std::min({2 * p, m + p, 2 * m});
  if (v == 1) return std::min(p, m);
  return std::min(2 * (p - 1) + (v - 1) * p + 1, m * v);
}

std::string check_schedule_file(const ScheduleFile& file, const Shape& shape, int max_live, StageLists* out) {
  FileLists fl;
  try {
    fl = file_lists(file, shape);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  const Simulation sim = simulate(fl.lists, shape, Costs{}, &fl.origins);
  if (!sim.ok) return file.path + ": " + sim.error;
  const bool given = max_live > 0;
  const int bound = given ? max_live : default_live_bound(shape);
  for (int s = 0; s < shape.stages; ++s) {
    if (sim.peak_live[static_cast<size_t>(s)] <= bound) continue;
    // The first action past the bound: forwards take an activation, a fused backward or a weight pass frees one.
    const auto& list = fl.lists[static_cast<size_t>(s)];
    int live = 0;
    size_t i = 0;
    for (; i < list.size(); ++i) {
      const Op op = list[i].op;
      live += op == Op::kForward ? 1 : (op == Op::kBackward || op == Op::kBackwardWeight) ? -1 : 0;
      if (live > bound) break;
    }
    return file.path + ": stage " + std::to_string(s) + ", action #" + std::to_string(i) + " " + describe(list[i]) +
           " [" + fl.origins[static_cast<size_t>(s)][i] + "]: holds " + std::to_string(live) +
           " micro-batch activations at once (peak " + std::to_string(sim.peak_live[static_cast<size_t>(s)]) +
           "), over the bound " + std::to_string(bound) +
           (given ? " (parallel.pipeline_config.pipeline_schedule_max_live)"
                  : " (the built-in schedule's of this shape; parallel.pipeline_config.pipeline_schedule_max_live "
                    "raises it)") +
           ": run a backward before more forwards, or set pipeline_schedule_max_live: " +
           std::to_string(sim.peak_live[static_cast<size_t>(s)]) + " if the memory allows";
  }
  if (out != nullptr) *out = std::move(fl.lists);
  return "";
}

std::string stage_lists(Scheduler sched, const Shape& shape, const ScheduleFile& file, int64_t max_live_config,
                        StageLists* lists, double* bubble) {
  if (sched != Scheduler::kFile) {
    *lists = all_stage_actions(sched, shape);
    *bubble = analytic_bubble(sched, shape);
    return "";
  }
  const int max_live = static_cast<int>(std::min<int64_t>(max_live_config, 1 << 30));
  const std::string e = check_schedule_file(file, shape, max_live, lists);
  if (e.empty()) *bubble = simulate(*lists, shape).bubble_fraction;
  return e;
}

std::string format_schedule_csv(const StageLists& lists, const Shape& shape, bool messages) {
  std::string out;
  for (size_t s = 0; s < lists.size(); ++s) {
    bool first = true;
    for (const Action& a : lists[s]) {
      if (!messages && is_message(a.op)) continue;
      // Appended piece by piece: GCC 12 reports a false -Wrestrict on `const char* + std::string`.
      if (!first) out += ',';
      out += std::to_string(vstage_of(shape, static_cast<int>(s), a.chunk));
      out += type_name(a.op);
      out += std::to_string(a.micro);
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace gf::pipeline
