// Megatron-LM / MindSpeed jobs as they are written: `gridformer pretrain_gpt ARGS...` takes the arguments of
// `pretrain_gpt.py` (a job script's `torchrun $DISTRIBUTED_ARGS pretrain_gpt.py ARGS` becomes `mpirun -np N
// gridformer pretrain_gpt ARGS`, the launcher and the script name changed), and `gridformer config
// --from-megatron ARGS...` prints the YAML that means the same job. Both go through
// runner/config/megatron_args.h's translation, then the one config loader and the one trainer.
#pragma once
#include <string>
#include <vector>

namespace gf {

// The translated job for `world_size` ranks: the YAML written to `yaml_path` (a file of this process's own),
// the `gridformer train` options the YAML cannot carry (LAMBADA's) in `train_options`. Prints the notes and
// differences to stderr (when `print` is true: rank 0). Returns "" or the problems, one per line.
std::string translate_megatron_job(const std::vector<std::string>& args, int world_size, bool print,
                                   const std::string& yaml_path, std::vector<std::string>& train_options);

// The number of ranks this process runs among, from the launcher's environment (Open MPI, PMI, Slurm,
// torchrun's WORLD_SIZE), 1 when started alone: Megatron derives data parallel from it.
int launcher_world_size();
// This process's rank from the same environment (0 alone).
int launcher_rank();

// `config --from-megatron ARGS...`: the YAML on stdout, the notes and differences on stderr; status 2 with the
// problems when an argument is refused.
int run_config_from_megatron(const std::vector<std::string>& args, int ranks);

}  // namespace gf
