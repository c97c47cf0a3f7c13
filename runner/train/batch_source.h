// Where the trainer's tokens come from: each data-parallel rank reads only its own samples of
// global batch i, and the set of samples in global batch i does not depend on the layout:
// global batch i is samples [i*G, (i+1)*G), rank r of D reads [i*G + r*b, i*G + (r+1)*b), G = b*D.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/model_config.h"
#include "runner/config/config.h"

namespace gf {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Samples in one pass over the data (-1: unbounded, e.g. synthetic tokens).
  virtual int64_t samples_per_epoch() const = 0;
  // Writes `count` samples of seq_length + 1 tokens starting at global sample `first`.
  virtual void read(int64_t first, int64_t count, int32_t* out) const = 0;
  virtual std::string describe() const = 0;
  // True when read() marks tokens that are not targets (kNotTrainedBit, from a loss mask).
  virtual bool has_loss_mask() const { return false; }
};

// Builds the source named by data_loader.type. `num_samples`: how many samples the run needs
// (0 when only one epoch's size is wanted). split_index: 0 train, 1 validation, 2 test.
// Throws std::runtime_error naming the key and the fix for loaders that cannot run here.
std::unique_ptr<BatchSource> make_batch_source(const DatasetConfig& data, const ModelConfig& model,
                                               int64_t num_samples, int split_index,
                                               const std::string& what);

// What `train` refuses about this config's data before step 1, "" when nothing: the training data
// (and the evaluation data when do_eval or run_mode eval) opened as the Trainer opens them, one epoch
// each. `gridformer config` runs it, so the launchers' pre-flight finds a missing data_path or a
// MindSpore loader before any rank starts.
std::string data_problem(const Config& cfg);

}  // namespace gf
