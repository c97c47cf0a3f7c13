// What a Hugging Face safetensors checkpoint holds, by name, before any data is read: the loader
// (CausalLM::load_hf_checkpoint) and `gridformer convert` (runner/cli/convert.h) share it, so that
// both read the same files and skip the same buffers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gf {

// One tensor of a Hugging Face checkpoint: its name as stored and the file that holds it.
struct HfTensorFile {
  std::string name, file;
};

// One entry of a safetensors header: a tensor's name, dtype as the file spells it ("F32", "BF16",
// ...) and shape.
struct StHeaderEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

// The entries of the safetensors file `path` in the header's order, reading only the header (the
// data is checked when the file is opened: SafeTensorsFile::open). A header that cannot be read
// this way throws what SafeTensorsFile::open says of the file.
std::vector<StHeaderEntry> read_safetensors_header(const std::string& path);

// The tensors of the checkpoint `path` (what resolve_checkpoint_path gives: one .safetensors file
// or a model.safetensors.index.json). A sharded checkpoint's come from the index's weight_map, in
// its order (every shard it names must exist; the shards are not opened); one file's from its
// header, in the header's order (only the header is read). Throws naming the file at fault.
std::vector<HfTensorFile> hf_checkpoint_tensors(const std::string& path);

// The buffers a Hugging Face state dict may hold beside the parameters, which gridformer neither
// loads nor writes: GPT-2's attention masks (`.attn.bias`, `.attn.masked_bias`) and Llama's
// `.rotary_emb.inv_freq` (older transformers saved them).
bool hf_ignored_tensor(const std::string& name);

// A stored name as a gridformer parameter name: GPT2LMHeadModel's `transformer.` prefix dropped
// (GPT2Model's files have none; our GPT-2 parameters are GPT2Model's names).
std::string hf_param_name(const std::string& name);

}  // namespace gf
