// Pipeline schedules from a file, in torch.distributed.pipelining's CSV form (PyTorch's
// torch/distributed/pipelining/schedules.py, `_Action.from_str`, `PipelineScheduleMulti._load_csv` and
// `_PipelineScheduleRuntime._load_csv`, read at pytorch/pytorch 00722e648b74; torchtitan loads schedules
// with them): one row per pipeline rank, each cell one action `<stage><type><micro-batch>`:
//
//   F forward, B fused backward, I backward-input, W backward-weight (torch's names; I is our
//   BackwardInput, ZB-H1's "B"), SEND_F / RECV_F / SEND_B / RECV_B the messages (torch's
//   "compute_comms" form); e.g. `0F0,0F1,0B0,0F2` or `1RECV_F0,1F0,1B0,1SEND_B0`.
//
// <stage> is torch's stage index, the virtual stage k: it must run on rank k % pipeline_stage as chunk
// k / pipeline_stage (Megatron's interleaving, torch's "loop" style), or, with two chunks a stage, on rank k
// (k < pipeline_stage) or 2 pipeline_stage - 1 - k as chunk 0 or 1 (torch's "v" style: ZB-V's and DualPipe-V's
// placement), when every row's stages are that rank's under the V (file_shape). An empty cell is an idle
// step (torch writes them) and is skipped; UNSHARD, RESHARD and REDUCE_GRAD (torch's FSDP lowering) are
// skipped too (ZeRO gathers and reduces by itself here); `(a;b)OVERLAP_F_B` runs a then b. Without any
// SEND/RECV cell (torch's "compute_only" form) the messages are derived by the built-in schedules' rule
// (derive_messages). Our additions: a cell without <stage> (`F0`) means the row's own rank's first chunk,
// and lines that are empty or start with `#` are comments (torch's reader takes neither).
//
// What runs is checked before any work: the cells against the shape, then simulate() (order, every
// forward and backward present once, messages matched, no deadlock), then the live micro-batches against
// a bound. Each problem names the stage and the action, and the file, line and cell it comes from.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace gf::pipeline {

struct FileCell {
  int line = 0;      // 1-based line of the file
  int cell = 0;      // 1-based cell of the row
  std::string text;  // the cell as written, trimmed
  int vstage = -1;   // torch's stage index (a virtual stage); -1: not written (`F0`), the row's rank
  Op op = Op::kForward;
  int micro = 0;
  bool operator==(const FileCell&) const = default;
};

struct ScheduleFile {
  std::string path;
  std::vector<std::vector<FileCell>> rows;  // per pipeline rank, its actions in order (idle and skipped cells out)
  bool messages = false;                    // some cell is a SEND or a RECV: the file lists every message
  bool operator==(const ScheduleFile&) const = default;
};

// Parses a file's text; `path` names it in errors. Throws std::invalid_argument "PATH:LINE:CELL: ..." for a
// cell that is not an action (with the accepted forms) or an index past 10^9.
ScheduleFile parse_schedule_file(const std::string& text, const std::string& path);
// Reads and parses the file; throws std::invalid_argument naming the path when it cannot be read, is not a
// regular file or is over 16 MiB.
ScheduleFile read_schedule_file(const std::string& path);

// The lists the stages run for `shape`, and where each action comes from ("PATH:LINE:CELL 'text'", or
// "derived for ..." for a derived message), for simulate()'s `origins`. Throws std::invalid_argument
// "PATH:LINE:CELL: ..." for a cell outside the shape (a stage past the last virtual stage, a stage on
// another rank, a micro-batch past micro_batch_num) or "PATH: ..." for a row count other than the stages.
struct FileLists {
  StageLists lists;
  std::vector<std::vector<std::string>> origins;
};
FileLists file_lists(const ScheduleFile& file, const Shape& shape);

// `shape` with the file's placement: the V (v_shape) when there are two chunks a stage, the file has a row per
// stage and every cell's stage is its row's under the V but some is not under the loop; else `shape` as it is.
Shape file_shape(const ScheduleFile& file, Shape shape);

// The most micro-batch activations (summed over its chunks) a stage may hold under a schedule file when
// the config sets no bound: what the built-in schedule of the same shape holds at its fullest stage,
// stage 0: 1F1B's min(p, m) with one chunk (ZB-H1's too), interleaved's min(2 (p - 1) + (v - 1) p + 1, m v)
// with v > 1 (live_bound); under the V, ZB-V's at its fullest stage, min(2p, m + p, 2m). So a file may
// reorder, not hold more activations than the built-in schedules.
int default_live_bound(const Shape& shape);

// Everything checked before any work, in order: file_lists, simulate() with the file's origins, and each
// stage's peak live micro-batches against `max_live` (<= 0: default_live_bound). "" when the file can run
// (then *out, when given, holds the lists), else the first problem, naming the stage and the action.
std::string check_schedule_file(const ScheduleFile& file, const Shape& shape, int max_live,
                                StageLists* out = nullptr);

// The lists every stage runs and the bubble expected: a schedule file's (checked as check_schedule_file checks it,
// with `max_live_config` capped to an int; the bubble simulated) when sched is kFile, else the built-in schedule's
// (its analytic bubble). "" or the file's first problem.
std::string stage_lists(Scheduler sched, const Shape& shape, const ScheduleFile& file, int64_t max_live_config,
                        StageLists* lists, double* bubble);

// Lists as a schedule file: one row per stage, cells `<virtual stage><type><micro>`; with `messages`
// false only the computes (torch's compute_only form; parsed back, the messages are derived again).
std::string format_schedule_csv(const StageLists& lists, const Shape& shape, bool messages);

}  // namespace gf::pipeline
