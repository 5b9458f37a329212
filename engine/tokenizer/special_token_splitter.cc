#include "engine/tokenizer/special_token_splitter.h"

#include <algorithm>

namespace jitllm::tokenizer {
namespace {

// C isspace in the "C" locale, which is what llama.cpp's lstrip/rstrip use.
bool isAsciiSpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const TokenTable& table) : table_(table) {
  for (int32_t id = 0; id < table.size(); ++id) {
    if (table.attributes(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      candidates_.push_back(id);
    }
  }
  // Longest first, so that "<|im_start|>" is not cut into "<|im_start" + ... by a shorter token.
  // llama.cpp's std::sort leaves equal lengths in an unspecified order; ids keep ours stable.
  std::stable_sort(candidates_.begin(), candidates_.end(), [&](int32_t a, int32_t b) {
    return table.text(a).size() > table.text(b).size();
  });
}

std::vector<TextFragment> SpecialTokenSplitter::split(std::string_view text,
                                                      bool parseSpecial) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNoToken, 0, text.size()});

  std::vector<TextFragment> next;
  for (int32_t id : candidates_) {
    const uint32_t attrs = table_.attributes(id);
    if (!parseSpecial && (attrs & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view special = table_.text(id);
    if (special.empty()) continue;

    bool changed = false;
    next.clear();
    for (const TextFragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      size_t pos = fragment.offset;
      const size_t end = fragment.offset + fragment.length;
      while (pos < end) {
        const size_t match = text.substr(0, end).find(special, pos);
        if (match == std::string_view::npos) break;
        changed = true;
        size_t leftLength = match - pos;
        if (attrs & kAttrLstrip) {
          while (leftLength > 0 && isAsciiSpace(text[pos + leftLength - 1])) --leftLength;
        }
        if (leftLength > 0) next.push_back({kNoToken, pos, leftLength});
        next.push_back({id, 0, 0});
        pos = match + special.size();
        if (attrs & kAttrRstrip) {
          while (pos < end && isAsciiSpace(text[pos])) ++pos;
        }
      }
      if (pos < end) next.push_back({kNoToken, pos, end - pos});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

}  // namespace jitllm::tokenizer
