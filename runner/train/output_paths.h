// The directories a run will write (output_dir, the checkpoints, TensorBoard's event file, the step
// timeline), each made and written to once before step 1, so that a directory the user cannot write is
// found before any step runs instead of at the first save.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "runner/config/config.h"

namespace gf {

// Where CheckpointMonitor saves: its `directory`, or <output_dir>/checkpoint.
std::string checkpoint_directory(const Config& cfg);

// (what the directory is, with its key; the path) for each directory this config's run writes.
std::vector<std::pair<std::string, std::string>> output_directories(const Config& cfg);

// "" when every directory of output_directories() can be created and written to by this process
// (a probe file made and removed in each, named after `rank`); else the first problem, naming the key,
// the path, the system's reason and the fix.
std::string unwritable_output(const Config& cfg, int rank);

}  // namespace gf
