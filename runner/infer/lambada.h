// LAMBADA cloze accuracy, as Megatron-LM's zero-shot evaluation computes it: the last word of each
// passage predicted greedily from the text before it; a passage counts as correct only if the
// greedy prediction of every token of that word is right.
//
// What we read (NVIDIA/Megatron-LM, tasks/zeroshot_gpt/datasets.py and evaluate.py):
//  * The file is JSON lines, one object per line whose "text" is the passage (the
//    lambada_test.jsonl that Megatron's README points to). Every line is json.loads'd: a blank
//    or malformed line stops Megatron, and it stops us too, naming the file and the line.
//  * _LambadaDataset.get_tokens splits a passage into context and target ("labels"):
//      not strict: tokens = tokenize(text); context = tokens[:-1], target = [tokens[-1]]
//                  (the last BPE token, which may be only the end of the last word)
//      strict (--strict-lambada, "to require whole word matching"):
//                  word = text.split()[-1]; start = text.rfind(word)
//                  context = tokenize(text[:start].strip()), target = tokenize(' ' + word)
//    Python's split() and strip() cut at str.isspace() characters; we use the same set.
//  * __getitem__ lays out context + target padded to seq_length + 1 tokens with a loss mask over
//    the target; evaluate.py's forward_step feeds tokens[:-1], compares argmax(logits) with
//    tokens[1:] and counts a sample correct when every masked position matches. So only the
//    predictions after context[-1], target[0], ..., target[-2] are scored, and the model input is
//    context + target[:-1]. The padding sits after the input under a causal mask and changes no
//    scored prediction, so the GreedyFn below is given the unpadded input.
//  * A passage longer than that is not truncated: __getitem__ pads only when shorter, and a
//    longer sample cannot be stacked with the others of its batch nor fed to a model of
//    seq_length positions, so Megatron fails. We refuse it before evaluating anything, naming the
//    line and its length.
//  * A context of no tokens (a passage of one word) puts the first target token at position 0,
//    which pad_mask[1:] drops: Megatron would count that token right without predicting it. We
//    refuse such a line instead of scoring it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/text_tokenizer.h"

namespace gf {

struct ClozeItem {
  std::vector<int32_t> context, target;  // both non-empty
  int64_t line = 0;                      // 1-based line of the JSONL file
};

// One passage split by Megatron's get_tokens. Throws std::invalid_argument (without a file name:
// read_lambada adds it) for a text that is empty or whitespace only, or of one word.
ClozeItem split_cloze_text(std::string_view text, const data::TextTokenizer& tok, bool strict);

// Every line of `jsonl_path` as a ClozeItem, in file order. Throws std::runtime_error naming the
// file and the line: a file that cannot be read or has no lines, a blank line, a line that is not
// a JSON object, no "text" or a "text" that is not a string, an empty text, a text of one word.
std::vector<ClozeItem> read_lambada(const std::string& jsonl_path, const data::TextTokenizer& tok, bool strict);

struct ClozeResult {
  int64_t items = 0, correct = 0;
  double accuracy() const;  // correct / items; 0 when there are no items
};

// Given a batch of token sequences (each of its own length, at most the max_len of the call),
// fills argmax[i][t] with the greedy prediction of the token that follows batch[i][t]; argmax
// comes in empty or holding the previous call's vectors, and must leave with batch.size()
// vectors of batch[i].size() ids each.
using GreedyFn = std::function<void(const std::vector<std::vector<int32_t>>& batch,
                                    std::vector<std::vector<int32_t>>& argmax)>;

// Scores `items` by Megatron's rule: each item's input is context + target[:-1] (at most max_len
// tokens, the model's seq_length), `greedy` is called on up to `batch` inputs at a time in item
// order, and an item is correct when argmax[ctx-1+j] == target[j] for every j. Throws
// std::invalid_argument for max_len or batch < 1 and for an item whose input is longer than
// max_len (before any call; the message names `source`, the file, and the item's line);
// std::logic_error when `greedy` returns argmax of the wrong shape.
ClozeResult cloze_accuracy(const std::vector<ClozeItem>& items, const GreedyFn& greedy, int64_t max_len,
                           int64_t batch, const std::string& source = "LAMBADA data");

}  // namespace gf
