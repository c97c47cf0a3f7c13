// Sharded checkpoints' directory steps (core/io/checkpoint.h): a save's temporary directory, its commit (renamed
// or exchanged into place, `latest` pointed at it, old ones pruned), its abort, and finding checkpoints (list,
// resolve). Durability as core/io/checkpoint.cpp says: every directory fsync'd before and after a rename.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/io/checkpoint_detail.h"

namespace gf::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

// ---- the directory steps --------------------------------------------------------------------

namespace {

// Whether `entry` (a name in a checkpoint root) is one of our directory steps' dot-directories:
// ".<name>.tmp" (a save's temporary, or the old checkpoint an exchange swapped out), ".<name>.old"
// (moved aside where the file system cannot exchange) or ".<name>.removing" (a pruned one), with
// <name> a name check_name accepts.
bool is_our_leftover(const std::string& entry) {
  if (entry.size() < 2 || entry[0] != '.') return false;
  for (const char* suffix : {".tmp", ".old", ".removing"}) {
    const std::string s(suffix);
    if (entry.size() <= s.size() + 1 || entry.compare(entry.size() - s.size(), s.size(), s) != 0) continue;
    const std::string name = entry.substr(1, entry.size() - 1 - s.size());
    try {
      check_name(name);
      return true;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }
  return false;
}

}  // namespace

std::string begin_save(const std::string& root, const std::string& name) {
  check_name(name);
  make_dirs(root);
  // Saves run one at a time, so every leftover of ours is from a save or commit that died half way
  // (a kill after an exchange leaves the replaced checkpoint under another name's .tmp, which no
  // later save of that name would clear); other dot-entries are not ours to remove.
  std::vector<std::string> leftovers;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::error_code dir_ec;
    if (is_our_leftover(e.path().filename().string()) && e.is_directory(dir_ec)) leftovers.push_back(e.path());
  }
  if (ec) throw std::runtime_error(root + ": cannot list: " + ec.message());
  for (const std::string& l : leftovers) remove_tree(l);
  const std::string tmp = tmp_of(root, name);
  if (::mkdir(tmp.c_str(), kDirMode) != 0) {
    const int err = errno;
    sys_fail(err, tmp, "cannot create the checkpoint's temporary directory");
  }
  return tmp;
}

namespace {

// The finished temporary `tmp` becomes checkpoint `dir`: renamed, or swapped in atomically over an
// older one of the same name, so that a crash leaves one complete checkpoint under the name (the old
// one or the new one) and the other one as a stale temporary. Where the file system cannot exchange,
// the old one is moved aside first.
void put_in_place(const std::string& root, const std::string& name, const std::string& tmp, const std::string& dir) {
  if (exists(dir)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
      const int xerr = errno;
      if (xerr != EINVAL && xerr != ENOSYS && xerr != ENOTSUP) sys_fail(xerr, dir, "cannot exchange it with " + tmp);
      const std::string old = (fs::path(root) / ("." + name + ".old")).string();
      if (exists(old)) remove_tree(old);
      if (::rename(dir.c_str(), old.c_str()) != 0) {
        const int err = errno;
        sys_fail(err, dir, "cannot move it aside to " + old);
      }
      if (::rename(tmp.c_str(), dir.c_str()) != 0) {
        const int err = errno;
        sys_fail(err, tmp, "cannot rename to " + dir);
      }
      fsync_dir(root);
      remove_tree(old);
    }
  } else if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    sys_fail(err, tmp, "cannot rename to " + dir);
  }
}

// `latest` names `name`: a new file renamed over it.
void point_latest(const std::string& root, const std::string& name) {
  const std::string latest = (fs::path(root) / kLatest).string();
  const std::string latest_tmp = (fs::path(root) / ".latest.tmp").string();
  if (::unlink(latest_tmp.c_str()) != 0 && errno != ENOENT) {
    const int err = errno;
    sys_fail(err, latest_tmp, "cannot remove");
  }
  write_new_file(latest_tmp, name + "\n");
  if (::rename(latest_tmp.c_str(), latest.c_str()) != 0) {
    const int err = errno;
    sys_fail(err, latest_tmp, "cannot rename to " + latest);
  }
  fsync_dir(root);
}

// Keeps the newest keep_max of our complete checkpoints in `root` (never `name`, the latest); returns
// the removed directories. Our complete checkpoints are the directories of root whose index.json is
// ours, oldest first by step; others' directories and damaged indexes are not ours to remove.
std::vector<std::string> prune(const std::string& root, const std::string& name, int keep_max) {
  std::vector<std::string> removed;
  if (keep_max <= 0) return removed;
  const std::vector<Listed> saved = list_checkpoints(root);
  // When `latest` is not recorded healthy, the newest healthy checkpoint before it stays beyond
  // keep_max: a resume prefers it (the Trainer's resume_healthy_only).
  std::string keep_healthy;
  const auto latest = std::find_if(saved.begin(), saved.end(), [&](const Listed& c) { return c.name == name; });
  if (latest != saved.end() && !latest->healthy)
    for (auto it = std::make_reverse_iterator(latest); it != saved.rend(); ++it)
      if (it->healthy) {
        keep_healthy = it->name;
        break;
      }
  size_t left = saved.size();
  for (const Listed& s : saved) {
    if (left <= static_cast<size_t>(keep_max)) break;
    if (s.name == name || s.name == keep_healthy) continue;  // `latest`; the newest healthy one
    // Renamed out of sight first: a removal cut short leaves a dot-directory, not a checkpoint
    // with missing shards.
    const std::string victim = (fs::path(root) / s.name).string();
    const std::string gone = (fs::path(root) / ("." + s.name + ".removing")).string();
    if (exists(gone)) remove_tree(gone);
    if (::rename(victim.c_str(), gone.c_str()) != 0) {
      const int err = errno;
      sys_fail(err, victim, "cannot move aside to remove it");
    }
    remove_tree(gone);
    removed.push_back(victim);
    --left;
  }
  if (!removed.empty()) fsync_dir(root);
  return removed;
}

}  // namespace

std::vector<std::string> commit_save(const std::string& root, const std::string& name, int keep_max) {
  check_name(name);
  const std::string tmp = tmp_of(root, name);
  const std::string dir = (fs::path(root) / name).string();
  if (!exists((fs::path(tmp) / kIndex).string()))
    throw std::runtime_error(tmp + ": no index.json; write_index must run before commit_save");
  fsync_dir(tmp);  // the shards' and the index's directory entries
  put_in_place(root, name, tmp, dir);
  fsync_dir(root);
  fault_point("renamed");  // the crash tests' kill point: in place, `latest` not changed
  point_latest(root, name);
  fault_point("replaced");  // `latest` changed; an exchange's replaced checkpoint not yet removed
  if (exists(tmp)) remove_tree(tmp);  // the checkpoint the exchange replaced
  return prune(root, name, keep_max);
}

void abort_save(const std::string& root, const std::string& name) {
  check_name(name);
  const std::string tmp = tmp_of(root, name);
  if (exists(tmp)) remove_tree(tmp);
}

std::vector<Listed> list_checkpoints(const std::string& root) {
  std::vector<Listed> saved;
  if (!exists(root)) return saved;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    std::error_code dir_ec;
    if (n.empty() || n[0] == '.' || !e.is_directory(dir_ec)) continue;
    const json index = read_index_or_null((e.path() / kIndex).string());
    if (index.is_null()) continue;
    const json state = index.value("state", json());
    const json step = state.is_object() ? state.value("step", json()) : json();
    const json healthy = state.is_object() ? state.value("healthy", json(true)) : json(true);
    saved.push_back({n, step.is_number_integer() ? step.get<int64_t>() : -1, !healthy.is_boolean() || healthy.get<bool>()});
  }
  if (ec) throw std::runtime_error(root + ": cannot list: " + ec.message());
  std::sort(saved.begin(), saved.end(),
            [](const Listed& a, const Listed& b) { return a.step != b.step ? a.step < b.step : a.name < b.name; });
  return saved;
}

std::string resolve(const std::string& path, bool allow_none) {
  const char* const looked_for =
      "looked for a checkpoint directory (with index.json), a checkpoint root (with `latest`) and a run's "
      "output_dir (with checkpoint/latest)";
  if (path.empty()) throw std::invalid_argument(std::string("empty checkpoint path; ") + looked_for);
  if (!exists(path)) {
    if (allow_none) return "";
    throw std::runtime_error(path + ": no such file or directory; " + looked_for);
  }
  if (!is_dir(path)) throw std::runtime_error(path + ": not a directory; " + looked_for);
  const fs::path p(path);
  if (exists((p / kIndex).string())) return path;
  if (exists((p / kLatest).string())) return follow_latest(path);
  if (exists((p / "checkpoint" / kLatest).string())) return follow_latest((p / "checkpoint").string());
  if (allow_none) return "";
  throw std::runtime_error(path + ": holds no checkpoint; " + looked_for);
}

bool is_checkpoint(const std::string& path) {
  try {
    return !resolve(path).empty();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace gf::ckpt
