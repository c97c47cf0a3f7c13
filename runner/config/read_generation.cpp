// model_config's decoding keys (MindFormers' GenerationConfig fields as its model configs carry
// them) and the processor's tokenizer files, read for text generation (runner/infer/generate.h).
#include "runner/config/read.h"

namespace gf::config_read {

void read_generation(ReadContext& x) {
  GenerationConfig& g = x.c.generation;
  KeyReader& rd = x.rd;
  const std::string k = "model.model_config.";
  auto has = [&](const std::string& path) { return config_tree::find(rd.root(), path).IsDefined(); };
  g.max_decode_length = rd.get<int64_t>(k + "max_decode_length");
  g.top_k = rd.get<int64_t>(k + "top_k");
  g.top_p = rd.get<double>(k + "top_p");
  g.do_sample = rd.get<bool>(k + "do_sample");
  g.use_past = rd.get<bool>(k + "use_past");
  g.repetition_penalty = rd.get<double>(k + "repetition_penalty");
  // GPT2Config has no temperature key (MindFormers' GenerationConfig default 1.0 applies); LlamaConfig has one.
  if (has(k + "temperature")) g.temperature = rd.get<double>(k + "temperature");
  const YAML::Node eos = rd.node(k + "eos_token_id");
  // A list of end ids (Hugging Face allows one) takes its first; null: none.
  if (eos.IsSequence()) g.eos_token_id = eos.size() > 0 ? eos[0].as<int64_t>() : -1;
  else g.eos_token_id = eos.IsNull() ? -1 : eos.as<int64_t>();
  if (g.eos_token_id < -1)
    x.refuse("`" + k + "eos_token_id: " + std::to_string(g.eos_token_id) + "`: expects a token id (>= 0), or -1: none");
  // The model's own record of it (the config.json convert writes, the check of Hugging Face weights).
  if (g.eos_token_id >= 0) x.c.model.eos_token_id = g.eos_token_id;
  if (has("processor.tokenizer.type")) {
    const YAML::Node n = rd.node("processor.tokenizer.type");
    g.tokenizer_type = n.IsNull() ? "" : n.as<std::string>();
  }
  for (const char* t : {"vocab_file", "merge_file"}) {
    const std::string path = std::string("processor.tokenizer.") + t;
    if (!has(path)) continue;
    const YAML::Node n = rd.node(path);
    (std::string(t) == "vocab_file" ? g.vocab_file : g.merge_file) = n.IsNull() ? "" : n.as<std::string>();
  }
  auto refuse_if = [&](bool bad, const std::string& key, const std::string& v, const std::string& why) {
    if (bad) x.refuse("`" + k + key + ": " + v + "`: " + why);
  };
  refuse_if(g.max_decode_length < 1, "max_decode_length", std::to_string(g.max_decode_length),
            "must be >= 1 (prompt + generated tokens)");
  refuse_if(g.top_k < 0, "top_k", std::to_string(g.top_k), "must be >= 0 (0: no top-k filter)");
  refuse_if(!(g.top_p > 0.0 && g.top_p <= 1.0), "top_p", std::to_string(g.top_p), "must be in (0, 1]");
  refuse_if(!(g.temperature > 0.0), "temperature", std::to_string(g.temperature), "must be > 0");
  refuse_if(!(g.repetition_penalty > 0.0), "repetition_penalty", std::to_string(g.repetition_penalty),
            "must be > 0 (1.0: none)");
}

}  // namespace gf::config_read
