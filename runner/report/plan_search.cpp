#include "runner/report/plan_search.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "runner/config/tree.h"
#include "runner/report/plan.h"

namespace gf {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Hybrid sharding's choices for a data x context group of n ranks: 0 (the whole group), and every shard group of
// H consecutive ranks with 1 < H < n dividing n.
std::vector<int64_t> shard_degrees(int64_t n) {
  std::vector<int64_t> out{0};
  for (int64_t h : divisors(n))
    if (h > 1 && h < n) out.push_back(h);
  return out;
}

// One layout's keys. Every searched key is set, so that what the config had for another layout (an offset per stage,
// a schedule, optimizer sharding) does not leak into this one.
struct Layout {
  int64_t dp = 1, mp = 1, pp = 1, cp = 1, ep = 1;
  bool sp = false;
  std::string cp_algo = "colossalai_cp";
  int zero = 0;
  std::string schedule = "1f1b";  // 1f1b, zbh1, interleaved or zero_bubble_v (two chunks a stage)
  int64_t micro_batch = 1, micros = 1;  // samples a micro-batch, micro-batches a step per data-parallel rank
  int recompute = 0;   // 0 none, 1 selective (the attention's core), 2 full
  int64_t hybrid = 0;  // hybrid sharding's shard group (0: the whole data x context group)

  std::vector<std::pair<std::string, std::string>> sets() const {
    const auto b = [](bool v) { return std::string(v ? "True" : "False"); };
    const bool interleaved = schedule == "interleaved", two = interleaved || schedule == "zero_bubble_v";
    return {{"parallel_config.data_parallel", std::to_string(dp)},
            {"parallel_config.model_parallel", std::to_string(mp)},
            {"parallel_config.pipeline_stage", std::to_string(pp)},
            {"parallel_config.context_parallel", std::to_string(cp)},
            {"parallel_config.context_parallel_algo", cp_algo},
            {"parallel_config.expert_parallel", std::to_string(ep)},
            {"parallel_config.use_seq_parallel", b(sp)},
            {"parallel_config.micro_batch_num", std::to_string(pp > 1 ? micros : 1)},
            {"parallel_config.optimizer_shard", "False"},
            {"parallel_config.hybrid_shard_degree", std::to_string(hybrid)},
            {"parallel.enable_parallel_optimizer", "False"},
            {"parallel.parallel_optimizer_config.optimizer_weight_shard_size", "-1"},
            {"parallel.zero_stage", std::to_string(zero)},
            {"parallel.pipeline_config.pipeline_scheduler", interleaved ? "1f1b" : schedule},
            {"parallel.pipeline_config.pipeline_interleave", b(two)},
            {"model.model_config.pp_interleave_num", two ? "2" : "1"},
            {"model.model_config.offset", "0"},
            {"runner_config.batch_size", std::to_string(micro_batch)},
            {"runner_config.gradient_accumulation_steps", std::to_string(pp > 1 ? 1 : micros)},
            {"recompute_config.recompute", b(recompute == 2)},
            {"recompute_config.select_recompute", b(recompute == 1)}};
  }

  std::string label() const {
    std::vector<std::string> parts;
    if (dp > 1) parts.push_back(fmt::format("dp{}", dp));
    if (mp > 1) parts.push_back(fmt::format("mp{}{}", mp, sp ? " + SP" : ""));
    if (pp > 1)
      parts.push_back(fmt::format("pp{} {}", pp, schedule == "zbh1"            ? "ZB-H1"
                                                 : schedule == "zero_bubble_v" ? "ZB-V (2 chunks a stage)"
                                                 : schedule == "interleaved"   ? "interleaved (2 chunks a stage)"
                                                                               : "1F1B"));
    if (cp > 1) parts.push_back(fmt::format("cp{} {}", cp, cp_algo == "ulysses_cp" ? "Ulysses" : "ring"));
    if (ep > 1) parts.push_back(fmt::format("ep{}", ep));
    if (zero > 0) parts.push_back(fmt::format("ZeRO-{}{}", zero, hybrid > 0 ? fmt::format(" sharded over {} (hybrid)", hybrid) : ""));
    if (recompute > 0) parts.push_back(recompute == 2 ? "full recompute" : "selective recompute");
    std::string s;
    for (const std::string& p : parts) s += (s.empty() ? "" : ", ") + p;
    if (s.empty()) s = "one rank";
    s += fmt::format("; micro batch {}", micro_batch);
    if (micros > 1) s += fmt::format(" x {} {}", micros, pp > 1 ? "micro-batches" : "accumulated");
    return s;
  }
};

// The micro-batch splits of a data-parallel rank's `samples`: (micro batch, count). Without a pipeline: all at once,
// or accumulated over 2 or 4 micro-batches or the config's own micro batch. With one: the counts pp, 2 pp and 4 pp
// and the config's own micro batch's, at least one micro-batch per stage.
std::vector<std::pair<int64_t, int64_t>> batch_splits(int64_t samples, int64_t pp, int64_t own_micro_batch) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto add = [&](int64_t micros) {
    if (micros < 1 || samples % micros != 0 || (pp > 1 && micros < pp)) return;
    const std::pair<int64_t, int64_t> s{samples / micros, micros};
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (pp == 1) add(1);
  for (int64_t k : {1, 2, 4}) add(k * pp);
  if (own_micro_batch > 0 && samples % own_micro_batch == 0) add(samples / own_micro_batch);
  return out;
}

// Runs f(0..n-1) in worker processes (fork: every worker a copy of this single-threaded process, so nothing it
// shares needs locking), one per core, each sending its outcomes back as JSON lines; prints a progress line to stderr
// every 5 s of a long search. Falls back to this process when fork fails or the work is small.
std::vector<nlohmann::json> run_workers(size_t n, const std::function<nlohmann::json(size_t)>& f) {
  std::vector<nlohmann::json> out(n);
  const char* env = std::getenv("GF_SEARCH_WORKERS");
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers = std::min(env && std::atoi(env) > 0 ? static_cast<size_t>(std::atoi(env)) : hw, (n + 15) / 16);
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  size_t done = 0;
  const auto progress = [&] {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(5) || done == n) return;
    last = now;
    std::fprintf(stderr, "search: %zu of %zu layouts planned (%.0f s, %zu process(es))\n", done, n,
                 std::chrono::duration<double>(now - start).count(), std::max<size_t>(1, workers));
  };
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (size_t w = 0; workers > 1 && w < workers; ++w) {
    int p[2];
    if (pipe(p) != 0) break;
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
      close(p[0]);
      close(p[1]);
      break;
    }
    if (pid == 0) {  // a worker: layouts w, w + workers, ...
      close(p[0]);
      std::string buf;
      for (size_t i = w; i < n; i += workers) {
        nlohmann::json o = f(i);
        o["i"] = i;
        buf = o.dump() + "\n";
        for (size_t at = 0; at < buf.size();) {
          const ssize_t k = write(p[1], buf.data() + at, buf.size() - at);
          if (k <= 0) _exit(3);
          at += static_cast<size_t>(k);
        }
      }
      _exit(0);
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  if (pids.size() != workers || workers <= 1) {  // no workers (or not all of them): here, one by one
    for (size_t k = 0; k < pids.size(); ++k) {
      kill(pids[k], SIGKILL);
      waitpid(pids[k], nullptr, 0);
      close(fds[k]);
    }
    for (size_t i = 0; i < n; ++i) {
      out[i] = f(i);
      ++done;
      progress();
    }
    return out;
  }
  std::vector<std::string> pending(fds.size());
  std::vector<bool> open(fds.size(), true);
  for (size_t left = fds.size(); left > 0;) {
    std::vector<pollfd> pf;
    std::vector<size_t> which;
    for (size_t k = 0; k < fds.size(); ++k)
      if (open[k]) {
        pf.push_back({fds[k], POLLIN, 0});
        which.push_back(k);
      }
    if (poll(pf.data(), pf.size(), 1000) < 0 && errno != EINTR) throw std::runtime_error("plan --search: poll failed");
    for (size_t j = 0; j < pf.size(); ++j) {
      if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const size_t k = which[j];
      char chunk[65536];
      const ssize_t got = read(fds[k], chunk, sizeof chunk);
      if (got <= 0) {
        open[k] = false;
        close(fds[k]);
        --left;
        continue;
      }
      pending[k].append(chunk, static_cast<size_t>(got));
      for (size_t nl; (nl = pending[k].find('\n')) != std::string::npos;) {
        nlohmann::json o = nlohmann::json::parse(pending[k].substr(0, nl));
        pending[k].erase(0, nl + 1);
        const size_t i = o["i"].get<size_t>();
        if (i < n && out[i].is_null()) ++done;
        if (i < n) out[i] = std::move(o);
      }
    }
    progress();
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok || done != n)
    throw std::runtime_error(fmt::format("plan --search: a worker process failed ({} of {} layouts planned)", done, n));
  return out;
}

// The keys whose value differs from the config's (`resolved`, defaults included) as YAML sections to paste:
// "parallel_config: {data_parallel: 2, ...}", nested keys as nested flow maps.
std::string snippet(const std::vector<std::pair<std::string, std::string>>& sets, const YAML::Node& resolved) {
  struct Node {
    std::string value;
    std::vector<std::pair<std::string, Node>> kids;
    Node& at(const std::string& k) {
      for (auto& [name, n] : kids)
        if (name == k) return n;
      return kids.emplace_back(k, Node{}).second;
    }
  };
  Node root;
  for (const auto& [key, value] : sets) {
    if (config_tree::same_value(config_tree::find(resolved, key), YAML::Load(value))) continue;
    Node* n = &root;
    for (size_t at = 0; at != std::string::npos;) {
      const size_t dot = key.find('.', at);
      n = &n->at(key.substr(at, dot == std::string::npos ? dot : dot - at));
      at = dot == std::string::npos ? dot : dot + 1;
    }
    n->value = value;
  }
  const std::function<std::string(const Node&)> flow = [&](const Node& n) -> std::string {
    if (n.kids.empty()) return n.value;
    std::string s = "{";
    for (size_t i = 0; i < n.kids.size(); ++i) s += (i ? ", " : "") + n.kids[i].first + ": " + flow(n.kids[i].second);
    return s + "}";
  };
  std::string out;
  for (const auto& [name, n] : root.kids) out += "     " + name + ": " + flow(n) + "\n";
  return out.empty() ? "     (the config's own keys)\n" : out;
}

}  // namespace

SearchResult search_layouts(const std::string& config_path, const std::vector<std::string>& sets, int ranks,
                            double memory_per_rank, const PlanHosts& where) {
  const Config base = load_config(config_path, sets);
  SearchResult r;
  r.ranks = ranks;
  r.where = where;
  r.global_batch = global_batch_size(base);
  r.resolved = base.resolved;
  const int64_t experts = base.model.moe.expert_num;
  std::vector<Layout> todo;
  for (int64_t dp : divisors(ranks)) {
    if (r.global_batch % dp != 0) {
      ++r.batch_skipped;
      continue;
    }
    for (int64_t mp : divisors(ranks / dp))
      for (int64_t pp : divisors(ranks / dp / mp)) {
        const int64_t cp = ranks / dp / mp / pp;
        for (const auto& [mb, micros] : batch_splits(r.global_batch / dp, pp, base.batch_size))
          for (bool sp : mp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
            for (const char* algo : cp > 1 ? std::vector<const char*>{"colossalai_cp", "ulysses_cp"}
                                           : std::vector<const char*>{"colossalai_cp"})
              for (int64_t ep : experts > 1 ? divisors(dp) : std::vector<int64_t>{1})
                for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero)
                  for (const char* sched : pp > 1 ? std::vector<const char*>{"1f1b", "zbh1", "interleaved",
                                                                             "zero_bubble_v"}
                                                  : std::vector<const char*>{"1f1b"})
                    for (int64_t hybrid : zero > 0 ? shard_degrees(dp * cp) : std::vector<int64_t>{0})
                      if (experts <= 1 || experts % ep == 0)
                        todo.push_back(Layout{dp, mp, pp, cp, ep, sp, algo, zero, sched, mb, micros, 0, hybrid});
      }
  }
  // One layout checked as `train` would check it and planned as `plan` plans it: its outcome as one JSON object
  // (what a worker process sends back): "refused" with the reason, or its figures.
  const auto plan_one = [&](const Layout& l) {
    std::vector<std::string> all = sets;
    for (const auto& [k, v] : l.sets()) all.push_back(k + "=" + v);
    nlohmann::json out;
    try {
      const Config cfg = load_config(config_path, all);
      if (std::string msg = layout_error_message(cfg, ranks); !msg.empty()) return nlohmann::json{{"refused", msg}};
      nlohmann::json j;
      bool fits = true;
      plan_report(cfg, ranks, memory_per_rank, &fits, &j, where);
      out = {{"recompute", l.recompute}, {"largest_rank_bytes", j["largest_rank_bytes"]},
             {"fits", memory_per_rank <= 0 || fits}, {"cross", j.value("cross_host_bytes_per_step", 0.0)},
             {"not_counted", ""}};
      if (j.contains("step_seconds_modelled")) out["modelled"] = j["step_seconds_modelled"];
      for (const nlohmann::json& s : j.value("sent_per_step", nlohmann::json::array()))
        if (s.contains("not_modelled")) out["not_counted"] = s["not_modelled"];
    } catch (const std::exception& e) {
      return nlohmann::json{{"refused", std::string(e.what()).substr(0, 300)}};
    }
    return out;
  };
  // A layout that does not fit is planned again with selective recompute, then full; the first that fits stands for
  // the layout.
  const auto evaluate = [&](Layout l) {
    nlohmann::json first = plan_one(l);
    first["planned"] = 1;
    if (first.contains("refused") || first["fits"].get<bool>()) return first;
    for (int mode : {1, 2}) {
      l.recompute = mode;
      nlohmann::json again = plan_one(l);
      if (!again.contains("refused") && again["fits"].get<bool>()) {
        again["planned"] = 1 + mode;
        return again;
      }
    }
    first["planned"] = 3;
    return first;
  };
  const std::vector<nlohmann::json> outcomes = run_workers(todo.size(), [&](size_t i) { return evaluate(todo[i]); });
  for (size_t i = 0; i < todo.size(); ++i) {
    const nlohmann::json& o = outcomes[i];
    r.tried += o["planned"].get<int>();
    if (o.contains("refused")) {
      ++r.refused;
      if (r.first_refusal.empty()) r.first_refusal = todo[i].label() + ": " + o["refused"].get<std::string>();
      continue;
    }
    Layout l = todo[i];
    l.recompute = o["recompute"].get<int>();
    SearchCandidate c;
    c.sets = l.sets();
    c.label = l.label();
    c.micro_batch = l.micro_batch;
    c.shape = fmt::format("dp{} mp{} pp{} cp{} ep{}", l.dp, l.mp, l.pp, l.cp, l.ep);
    c.largest_rank_bytes = o["largest_rank_bytes"].get<double>();
    c.cross_host_bytes = o["cross"].get<double>();
    c.fits = o["fits"].get<bool>();
    if (o.contains("modelled")) {
      c.seconds = o["modelled"]["total"].get<double>();
      c.compute = o["modelled"]["compute"].get<double>();
      c.optimizer = o["modelled"]["optimizer"].get<double>();
      c.communication = o["modelled"]["communication"].get<double>();
    } else {
      const std::string why = o["not_counted"].get<std::string>();
      c.not_modelled = why.empty() ? "no modelled step time" : "the bytes of " + why + " are not counted";
    }
    if (!c.fits) r.too_big.push_back(std::move(c));
    else if (!c.not_modelled.empty()) r.unranked.push_back(std::move(c));
    else r.ranked.push_back(std::move(c));
  }
  // Fastest first. Times equal to 4 significant digits tie (ZeRO-1 and ZeRO-2 of one layout often do); a tie goes to
  // the larger micro batch (the model prices every product at the probe's rate for large ones, and smaller ones run
  // slower), then to the smaller largest rank.
  const auto key = [](const SearchCandidate& c) {
    return std::make_tuple(std::stod(fmt::format("{:.4g}", c.seconds)), -c.micro_batch, c.largest_rank_bytes, c.label);
  };
  const auto faster = [&](const SearchCandidate& a, const SearchCandidate& b) { return key(a) < key(b); };
  std::sort(r.ranked.begin(), r.ranked.end(), faster);
  const auto smaller = [](const SearchCandidate& a, const SearchCandidate& b) {
    return std::tie(a.largest_rank_bytes, a.label) < std::tie(b.largest_rank_bytes, b.label);
  };
  std::sort(r.unranked.begin(), r.unranked.end(), smaller);
  std::sort(r.too_big.begin(), r.too_big.end(), smaller);
  return r;
}

std::vector<const SearchCandidate*> best_per_shape(const SearchResult& r) {
  std::vector<const SearchCandidate*> out;
  for (const SearchCandidate& c : r.ranked)
    if (std::none_of(out.begin(), out.end(), [&](const SearchCandidate* o) { return o->shape == c.shape; }))
      out.push_back(&c);
  return out;
}

std::string search_report(const SearchResult& r, int top, double memory_per_rank) {
  std::string out = fmt::format(
      "search: {} rank(s) on {}, the global batch kept at {} samples; {} layouts checked: {} refused by the "
      "config or layout check, {} fit{}, {} ranked by modelled step time\n",
      r.ranks,
      r.where.hosts > 1 ? fmt::format("{} hosts of {} ({} GB/s between them, {})", r.where.hosts, r.ranks / r.where.hosts,
                                      r.where.gbs, r.where.source)
                        : std::string("one host"),
      r.global_batch, r.tried, r.refused, r.ranked.size() + r.unranked.size(),
      memory_per_rank > 0 ? fmt::format(" in {} a rank ({} do not)", human_bytes(memory_per_rank), r.too_big.size())
                          : std::string(),
      r.ranked.size());
  if (r.batch_skipped > 0)
    out += fmt::format("  {} data-parallel degree(s) skipped: they do not divide the global batch\n", r.batch_skipped);
  if (!r.first_refusal.empty()) out += "  one refusal, for example: " + r.first_refusal + "\n";
  for (size_t i = 0; i < std::min<size_t>(static_cast<size_t>(top), r.ranked.size()); ++i) {
    const SearchCandidate& c = r.ranked[i];
    out += fmt::format("{:2}. {:.4g} s modelled (compute {:.4g}, optimizer {:.4g}, messages {:.4g}), largest rank {}: {}\n",
                       i + 1, c.seconds, c.compute, c.optimizer, c.communication, human_bytes(c.largest_rank_bytes),
                       c.label);
    out += snippet(c.sets, r.resolved);
  }
  if (r.ranked.empty()) out += "no layout both fits and has a modelled step time\n";
  const std::vector<const SearchCandidate*> shapes = best_per_shape(r);
  if (shapes.size() > 1) {
    out += "the best of each parallel shape:\n";
    for (const SearchCandidate* c : shapes)
      out += fmt::format("    {:.4g} s, largest rank {}: {}\n", c->seconds, human_bytes(c->largest_rank_bytes), c->label);
  }
  if (!r.unranked.empty()) {
    std::map<std::string, int> why;
    for (const SearchCandidate& c : r.unranked) ++why[c.not_modelled];
    out += fmt::format("not ranked ({} that fit):", r.unranked.size());
    for (const auto& [w, n] : why) out += fmt::format(" {} ({});", w, n);
    out.back() = '\n';
    out += fmt::format("  the smallest of them: {}, largest rank {}\n", r.unranked.front().label,
                       human_bytes(r.unranked.front().largest_rank_bytes));
  }
  if (r.ranked.empty() && r.unranked.empty() && !r.too_big.empty())
    out += fmt::format("the smallest layout needs {} a rank: {}\n", human_bytes(r.too_big.front().largest_rank_bytes),
                       r.too_big.front().label);
  out += r.where.hosts > 1 ? "(modelled on this machine's probe: products, AdamW and messages within a host, and the "
                            "bandwidth given between hosts; see docs/planning.md)\n"
                          : "(modelled on this machine's probe: products, AdamW and messages within a host; see "
                            "docs/planning.md)\n";
  return out;
}

nlohmann::json search_json(const SearchResult& r, int top) {
  const auto one = [](const SearchCandidate& c) {
    nlohmann::json s = nlohmann::json::object();
    for (const auto& [k, v] : c.sets) s[k] = v;
    nlohmann::json j = {{"label", c.label}, {"sets", s}, {"largest_rank_bytes", c.largest_rank_bytes}, {"fits", c.fits},
                        {"cross_host_bytes_per_step", c.cross_host_bytes}};
    if (c.not_modelled.empty())
      j["step_seconds_modelled"] = {{"total", c.seconds}, {"compute", c.compute}, {"optimizer", c.optimizer},
                                    {"communication", c.communication}};
    else
      j["not_modelled"] = c.not_modelled;
    return j;
  };
  nlohmann::json j = {{"ranks", r.ranks}, {"global_batch", r.global_batch}, {"checked", r.tried}, {"refused", r.refused},
                      {"ranked", nlohmann::json::array()}, {"unranked", nlohmann::json::array()},
                      {"too_big", r.too_big.size()}};
  for (size_t i = 0; i < std::min<size_t>(static_cast<size_t>(top), r.ranked.size()); ++i) j["ranked"].push_back(one(r.ranked[i]));
  for (const SearchCandidate& c : r.unranked) j["unranked"].push_back(one(c));
  j["best_per_shape"] = nlohmann::json::array();
  for (const SearchCandidate* c : best_per_shape(r)) j["best_per_shape"].push_back(one(*c));
  return j;
}

}  // namespace gf
