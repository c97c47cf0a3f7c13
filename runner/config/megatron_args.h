// Megatron-LM / MindSpeed `pretrain_gpt.py` arguments as a config in our YAML dialect: one Config, many
// dialects (the design notes). The translation produces YAML text for the normal loader
// (gf::load_config_string), never a second runner path.
//
// Semantics are Megatron-LM's, with its defaults, read from megatron/arguments.py at commit 285068c,
// megatron/training/arguments.py of core_r0.6.0, tasks/main.py (LAMBADA), and MindSpeed's
// mindspeed/arguments.py (branch core_r0.6.0: the Ascend options --pre-tockens, --next-tockens,
// --shape-order, --rotary-base, --moe-model-type, ...). Arguments are parsed as argparse does with
// allow_abbrev=False: `--foo VALUE`, `--foo=VALUE`, flags, list arguments (nargs='*') taking the words up
// to the next option, the last occurrence winning, and only the spellings Megatron declares
// (`--local_rank` and `--local-rank` both exist; `--num_layers` does not).
//
// Files: megatron_args_table.cpp (the table), megatron_args.cpp (the parser, the layout and vocabulary, the
// assembly), megatron_args_model.cpp (GPT2Config or LlamaConfig, experts), megatron_args_train.cpp
// (precision, recompute, schedule, data, checkpoints, LAMBADA, environment); megatron_args_job.h between them.
//
// Every argument Megatron or MindSpeed declares is one of (the table, runner/config/megatron_args_table.cpp):
//   mapped:  its value is written to the YAML keys the table names;
//   noted:   accepted without effect here, with one line in `notes` saying why (a CUDA/NPU kernel choice, a
//            launcher detail, a logging option);
//   refused: one line in `errors`, by name, with the reason.
// A word Megatron does not declare is refused naming the nearest argument it does (edit distance).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gf {

struct MegatronTranslation {
  // A complete config in our YAML dialect that means the same job; empty when `errors` is not.
  std::string yaml;
  // One line per argument accepted without effect on a CPU (and per environment variable), with why.
  std::vector<std::string> notes;
  // One line per argument refused (by name, with the reason, or the nearest real argument for an unknown
  // one), per value missing or malformed, and per rule of Megatron's the arguments break.
  std::vector<std::string> errors;
  // One line per Megatron semantic that the YAML keeps only approximately, saying what differs: the job is
  // translated, and this is the list to read before comparing numbers with Megatron's.
  std::vector<std::string> differences;
  // `gridformer train` options the YAML cannot hold (LAMBADA's data file and its strict mode).
  std::vector<std::string> cli_options;
  // Megatron's padded vocabulary (--make-vocab-size-divisible-by x tensor parallel); the YAML's layout pads
  // model.model_config.vocab_size to the same size. 0 when not known.
  int64_t padded_vocab_size = 0;
};

// `args`: the words after `pretrain_gpt.py` (or tasks/main.py), as the shell splits them; `env`: the job's
// environment variables (e.g. CUDA_DEVICE_MAX_CONNECTIONS); `world_size`: the number of ranks (Megatron
// reads it from WORLD_SIZE), from which data parallel = world / (TP x PP x CP) and the gradient
// accumulation = global batch / (micro batch x data parallel) are derived.
MegatronTranslation translate_megatron_args(const std::vector<std::string>& args,
                                            const std::map<std::string, std::string>& env, int world_size);

// The table of arguments (runner/config/megatron_args_table.cpp), shared by the translator and its tests.
namespace megatron_args {

enum class Kind { kMapped, kNoted, kRefused };
enum class Type { kFlag, kInt, kFloat, kString, kList, kListPlus };  // kList: nargs='*'; kListPlus: nargs='+'

struct Spec {
  const char* names;     // every spelling argparse accepts, space-separated; the first is the one values are kept by
  Kind kind;
  Type type;
  const char* fallback;  // Megatron's default as its value text; nullptr: None (not given)
  const char* choices;   // "a|b|c"; nullptr: any value of the type
  const char* text;      // mapped: the YAML key(s) it feeds; noted: the note; refused: the reason
};

// The arguments with a kind of their own, in Megatron's groups.
const std::vector<Spec>& table();
// Every other argument Megatron-LM (285068c, core_r0.6.0), tasks/main.py or MindSpeed (core_r0.6.0)
// declares: refused, as having no counterpart in our config. Each word is a spelling followed by its arity
// (`=` one value, `*` or `+` a list, nothing: a flag).
const std::vector<std::string>& other_arguments();
// Levenshtein distance (for the nearest real argument of an unknown one).
int edit_distance(const std::string& a, const std::string& b);

}  // namespace megatron_args
}  // namespace gf
