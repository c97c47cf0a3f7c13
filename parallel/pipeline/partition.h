// Which transformer layers each pipeline stage holds: the number of layers of every virtual stage
// for L layers over p stages x v model chunks, as MindFormers splits them, with its
// `model.model_config.offset`. Pure arithmetic (no MPI, no YAML), so the config reader, the layout
// check, `plan` and the pipeline executor share one rule and the tests check it alone.
//
// Virtual stages (Megatron's interleaving, MindFormers' pp_interleave_num): stage s holds chunks
// c = 0..v-1, chunk c being virtual stage k = c * p + s; layers run through the virtual stages in
// order k = 0, 1, ..., p * v - 1 (MindFormers' LayerSetting flattens its [v][p] table row by row).
//
// The rules, from MindFormers' source (mindspore-lab/mindformers):
// - an int offset (default 0): layer i goes to virtual stage min((i + offset) // pp_dis, V - 1),
//   pp_dis = max((L + 1) // V, 1), V = p * v. This is mindformers/models/gpt2/gpt2.py's
//   set_parallel_configure_for_layer (r0.8-r1.3), r1.0 llama.py's layer_compute_dtype and r1.1-r1.2
//   mindformers/models/utils.py's set_layer_stage_recompute, all with v = 1: an even split when V
//   divides L, else the last stage takes the rest (10 layers over 4: [2, 2, 2, 4]). With v > 1 the
//   same rule runs over the V virtual stages (ours: r1.3's LayerSetting accepts an int only when it
//   equals L % V, which for the default 0 means V divides L, where the two agree).
// - a list of p ints: stage s gets L // V + offset[s] layers (set_layer_stage_recompute in r1.1-r1.2;
//   r1.3's LayerSetting, mindformers/models/utils.py, which also checks that the list has p entries
//   and sums to L % V). With v > 1 the list applies to every chunk (LayerSetting broadcasts it).
// - a list of v lists of p ints, [chunk][stage]: virtual stage c * p + s gets
//   L // V + offset[c][s] layers (r1.3's LayerSetting).
// The counts must add up to L and every virtual stage must get at least one layer; anything else
// is refused, naming `model.model_config.offset`, the counts it gives and an offset that works.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gf {

// model.model_config.offset as written: an int, a list per stage, or a list of lists [chunk][stage].
struct LayerOffset {
  enum class Form { kInt, kPerStage, kPerChunkStage };
  Form form = Form::kInt;
  // kInt: {{offset}}; kPerStage: one row of per-stage offsets; kPerChunkStage: one row per chunk.
  std::vector<std::vector<int64_t>> values{{0}};

  static LayerOffset of_int(int64_t v) { return {Form::kInt, {{v}}}; }
  static LayerOffset per_stage(std::vector<int64_t> v) { return {Form::kPerStage, {std::move(v)}}; }
  static LayerOffset per_chunk_stage(std::vector<std::vector<int64_t>> v) { return {Form::kPerChunkStage, std::move(v)}; }
  // Whether it moves no layer: the int 0, or every entry 0.
  bool is_zero() const;
  // As YAML writes it: 0, [1, -1], [[1, -1], [0, 0]].
  std::string str() const;
  bool operator==(const LayerOffset&) const = default;
};

// The number of layers of each virtual stage, stages x chunks entries, entry k = chunk * stages +
// stage, summing to `layers`, each >= 1. Throws std::invalid_argument naming the YAML keys
// (`model.model_config.num_layers`, `parallel_config.pipeline_stage`, `model.model_config.offset`,
// `model.model_config.pp_interleave_num`) and a value that works when the layers do not fill every
// virtual stage or the offset does not fit: a list of the wrong length, counts that do not add up
// to `layers`, a stage with no layers or a negative stage.
std::vector<int64_t> partition_layers(int64_t layers, int64_t stages, int64_t chunks, const LayerOffset& offset = {});

// The first layer of each virtual stage and the end: counts' running sum from 0
// ({2, 3} -> {0, 2, 5}); virtual stage k holds layers [bounds[k], bounds[k + 1]).
std::vector<int64_t> layer_bounds(const std::vector<int64_t>& counts);

}  // namespace gf
