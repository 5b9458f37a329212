// A range of a model's schedulable units, as commands name it.
//
// Units are numbered 0 = token_embd, 1..L = blk.0..blk.(L-1), L+1 = output. Users name blocks by
// their block number, so the text form is: "" (every unit, embeddings and head included), "N"
// (blk.N), "A-B" (inclusive), where an end is a block number, "blk.N", "token_embd" (or "embd")
// or "output" (or "head"): "0-5", "20-output", "token_embd-3".
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace jitllm::runtime {

struct UnitRange {
  int first = 0;  // unit numbers, inclusive
  int last = 0;

  bool contains(int unit) const { return unit >= first && unit <= last; }
  int size() const { return last - first + 1; }
};

// Error(FAILED) saying what is accepted when `text` names no range of a model with `layers`
// transformer blocks.
UnitRange parseUnitRange(const std::string& text, int layers);

// "token_embd", "blk.3", "output" for a model with `layers` blocks.
std::string unitName(int unit, int layers);
// "blk.0-blk.5", "token_embd-output", or one name when first == last.
std::string unitRangeName(const UnitRange& range, int layers);

}  // namespace jitllm::runtime
