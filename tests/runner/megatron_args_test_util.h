// What tests/runner/megatron_args_test.cpp and tests/runner/megatron_args_options_test.cpp share: the shell's
// split of an argument list, the notes' arguments, and the four reference job scripts of tests/data/megatron/.
#pragma once
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runner/config/megatron_args.h"

namespace gf::megatron_test {

// An argument list as the shell splits it.
inline std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

// The arguments the notes are about: the first word between the first pair of backticks.
inline std::set<std::string> noted(const MegatronTranslation& t) {
  std::set<std::string> s;
  for (const std::string& n : t.notes) {
    const size_t b = n.find('`'), e = n.find_first_of(" `=", b + 1);
    s.insert(n.substr(b + 1, e - b - 1));
  }
  return s;
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

inline bool any_contains(const std::vector<std::string>& v, const std::string& part) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(part) != std::string::npos; });
}

// pretrain_gpt_distributed.sh (DATA_PATH, CHECKPOINT_PATH substituted); WORLD_SIZE 8.
inline const std::vector<std::string> kDistributed = words(R"(
       --num-layers 8 --hidden-size 12288 --num-attention-heads 96 --micro-batch-size 4 --global-batch-size 96
       --seq-length 1024 --max-position-embeddings 1024 --train-iters 500000 --lr-decay-iters 320000
       --save ./checkpoint_dist --load ./checkpoint_dist --data-path ../dataset/enwiki/my-t5_text_sentence
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --data-impl mmap --split 949,50,1
       --distributed-backend nccl --lr 0.375e-5 --lr-decay-style cosine --min-lr 0.375e-6 --weight-decay 0.1
       --clip-grad 1.0 --lr-warmup-fraction .01 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
       --recompute-granularity full --recompute-method uniform --no-gradient-accumulation-fusion --log-interval 1
       --save-interval 10000 --eval-interval 1000 --eval-iters 10 --fp16)");

// pretrain_gpt_distributed_bf16.sh with --pre-tockens=2048 --next-tockens=0 --shape-order=SBH given to it.
inline const std::vector<std::string> kDistributedBf16 = words(R"(
       --num-layers 8 --hidden-size 5120 --num-attention-heads 40 --micro-batch-size 2 --global-batch-size 2
       --seq-length 8192 --max-position-embeddings 8192 --train-iters 500000 --lr-decay-iters 320000
       --save ./checkpoint_dist --load ./checkpoint_dist --data-path ../dataset/enwiki/my-t5_text_sentence
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --data-impl mmap --split 949,50,1
       --distributed-backend nccl --lr 0.375e-5 --lr-decay-style cosine --min-lr 0.375e-6 --weight-decay 0.1
       --clip-grad 1.0 --lr-warmup-fraction .01 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
       --no-gradient-accumulation-fusion --use-flash-attn --pre-tockens 2048 --next-tockens 0 --shape-order SBH
       --sequence-parallel --log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 10 --bf16)");

// pretrain_gpt_megatron_moe_8k.sh: GPT_ARGS, MOE_ARGS, RECOMPUTE_ARGS, DATA_ARGS, OUTPUT_ARGS and the rest,
// in the order torchrun passes them; TP=2 PP=1 EP=2, WORLD_SIZE 8, CUDA_DEVICE_MAX_CONNECTIONS=1.
inline const std::vector<std::string> kMoe = words(R"(
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --disable-bias-linear --reuse-fp32-param
    --use-mcore-models --use-distributed-optimizer --overlap-grad-reduce --use-fused-rotary-pos-emb
    --sequence-parallel --num-layers 2 --hidden-size 12288 --num-attention-heads 96 --seq-length 8192
    --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 4 --train-iters 1000 --lr 5.0e-7
    --lr-decay-iters 320000 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9
    --adam-beta2 0.95 --init-method-std 0.006 --no-gradient-accumulation-fusion --use-flash-attn
    --position-embedding-type rope --no-bias-gelu-fusion --no-bias-dropout-fusion --attention-dropout 0.0
    --hidden-dropout 0.0 --bf16
    --expert-model-parallel-size 2 --moe-model-type megatron_moe --num-experts 4 --moe-permutation-async-comm
    --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-topk 2
    --recompute-activation-function --swap-attention --recompute-num-layers 1
    --data-path /home/dataset/enwiki/my-t5_text_sentence --vocab-file /home/dataset/enwiki/gpt2-vocab.json
    --merge-file /home/dataset/enwiki/gpt2-merges.txt --vocab-size 50257 --num-workers 4 --split 949,50,1
    --log-interval 1 --save-interval 10000 --eval-interval 10000 --eval-iters 10 --log-throughput
    --timing-log-option max --no-barrier-with-level-1-timing --timing-log-level 0
    --distributed-backend nccl --distributed-timeout-minutes 10 --seed 1234)");

// test_gpt_distributed.sh: tasks/main.py's LAMBADA with COMMON_TASK_ARGS; WORLD_SIZE 8.
inline const std::vector<std::string> kLambada = words(R"(
       --task LAMBADA
       --num-layers 8 --hidden-size 12288 --num-attention-heads 96 --seq-length 1024 --max-position-embeddings 1024
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --distributed-backend nccl --recompute-granularity full --recompute-method uniform
       --no-gradient-accumulation-fusion --vocab-file gpt2-vocab.json --fp16
       --valid-data lambada_test.json --tokenizer-type GPT2BPETokenizer --merge-file gpt2-merges.txt
       --load ./checkpoint_dist --micro-batch-size 8 --log-interval 10 --no-load-optim --no-load-rng)");

inline const std::map<std::string, std::string> kNoEnv;

}  // namespace gf::megatron_test
