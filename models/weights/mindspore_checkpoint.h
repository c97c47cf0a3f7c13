// MindSpore's .ckpt (the protobuf of models/weights/proto/mindspore_checkpoint.proto, as mindspore's
// save_checkpoint writes it) and MindFormers' GPT-2 names in it, read into Hugging Face GPT-2's
// names and layouts so that CausalLM::load_hf_checkpoint can load a MindFormers user's weights.
//
// The file is read entry by entry (one Checkpoint.Value at a time, with Debian's libprotobuf and the
// classes protoc generates from the schema), never as one message: protobuf refuses a message over
// 2 GiB, and a GPT-2 XL .ckpt in float32 is 6 GB; MindSpore itself cuts tensors into 512 MiB Values
// for that reason. The chunks of one tensor (consecutive Values with the same tag) are joined.
//
// Names: MindFormers' mindformers/models/gpt2/convert_weight.py (mindspore-lab/mindformers) maps
// Hugging Face GPT-2 to MindFormers as follows, and read_mindformers_gpt2 applies the reverse (as
// MindFormers' own convert_reversed.py does), for layer i:
//   backbone.blocks.i.layernorm1.gamma / .beta          <- h.i.ln_1.weight / .bias
//   backbone.blocks.i.layernorm2.gamma / .beta          <- h.i.ln_2.weight / .bias
//   backbone.blocks.i.attention.dense1|2|3.weight       <- h.i.attn.c_attn.weight split in 3 along its
//                                                          last dim (q, k, v), each transposed to [out, in]
//   backbone.blocks.i.attention.dense1|2|3.bias         <- h.i.attn.c_attn.bias split in 3
//   backbone.blocks.i.attention.projection.weight/.bias <- h.i.attn.c_proj.weight / .bias   ([in, out] kept)
//   backbone.blocks.i.output.mapping.weight / .bias     <- h.i.mlp.c_fc.weight / .bias      ([in, out] kept)
//   backbone.blocks.i.output.projection.weight / .bias  <- h.i.mlp.c_proj.weight / .bias    ([in, out] kept)
//   backbone.blocks.i.attention.beta / .masked_beta     <- h.i.attn.bias / .masked_bias (the causal-mask
//                                                          buffers of older transformers; skipped here, as
//                                                          the safetensors loader skips attn.bias)
//   backbone.layernorm.gamma / .beta                    <- ln_f.weight / .bias
//   backbone.embedding.word_embedding.embedding_table   <- wte.weight (the LM head is tied to it)
//   backbone.embedding.position_embedding.embedding_table <- wpe.weight ([seq_length, hidden] in MindFormers)
// Entries a MindFormers training checkpoint holds besides the weights (optimizer moments, loss-scale
// and step counters; see mindspore_non_weight) are skipped and counted. Any other name is an error.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gf {

// One entry of a .ckpt, its chunks joined.
struct MsCkptEntry {
  std::string tag;
  std::string type;           // tensor_type: "Float32", "Float16", "BFloat16", "Int32", ...
  std::vector<int64_t> dims;  // as written; [] and [0] both mean a scalar (MindSpore's loader)
  std::string content;        // the row-major little-endian bytes of every chunk, in order
  int64_t chunks = 0;         // Values it was written as
  bool map_tensor = false;    // a MapTensorProto (a hash-table embedding): no tensor, content empty
  int64_t numel() const;      // of dims (1 for a scalar)
};

// Reads `path` entry by entry and calls `visit` once per tag, in file order. A trailing CRC (the
// "crc_num" record of save_checkpoint's crc_check) is verified. Throws std::runtime_error naming the
// file and, where one is at fault, the entry and its byte offset: a file that is not a Checkpoint
// protobuf (or an encrypted one), truncated, with a tag written twice apart, chunks that disagree on
// dims or type, or a CRC that does not match.
void read_mindspore_checkpoint(const std::string& path, const std::function<void(MsCkptEntry&)>& visit);

// The entry's values as floats (Float32, Float16, BFloat16, Float64). Throws naming the file and
// the tag for another type or a byte count that does not match dims.
std::vector<float> mindspore_entry_floats(const MsCkptEntry& e, const std::string& path);

// Whether a tag is one of the non-weight entries MindSpore / MindFormers write into a training
// checkpoint: optimizer moments (adam_m.*, adam_v.*, moment1.*, moment2.*, moments.*) and
// accu_grads.*, the optimizer's global_step / learning_rate / beta powers / momentum, the
// loss-scale cell's scale_sense, current_iterator_step and last_overflow_iterator_step,
// CheckpointMonitor's append_dict (epoch_num, step_num, loss_scale, global_batch_size), random_op.
bool mindspore_non_weight(const std::string& tag);

// A tensor under its Hugging Face GPT-2 name (no `transformer.` prefix), Hugging Face's layout.
struct MappedTensor {
  std::string source;  // the MindFormers name(s) it came from, for messages
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// MindFormers' name for a Hugging Face GPT-2 parameter name ("h.3.ln_1.weight" ->
// "backbone.blocks.3.layernorm1.gamma"; c_attn -> "backbone.blocks.3.attention.dense1/2/3.weight");
// empty for a name convert_weight.py does not map.
std::string mindformers_gpt2_name(const std::string& hf_name);

struct MindFormersGpt2Weights {
  std::map<std::string, MappedTensor> tensors;  // by Hugging Face name
  int64_t non_weights = 0;                      // entries skipped by mindspore_non_weight
  int64_t mask_buffers = 0;                     // attention.beta / masked_beta entries skipped
  int64_t not_wanted = 0;                       // weights `wanted` declined (another pipeline stage's)
};

// Reads a MindFormers GPT-2 .ckpt into Hugging Face names. `wanted` (given a Hugging Face name)
// lets a caller skip tensors it does not hold without converting them; null keeps all. Throws
// naming the file and the tag for an unknown name, a q/k/v projection without its two siblings,
// siblings of different shapes, or a tensor whose rank does not fit its role.
MindFormersGpt2Weights read_mindformers_gpt2(const std::string& path,
                                             const std::function<bool(const std::string&)>& wanted = nullptr);

}  // namespace gf
