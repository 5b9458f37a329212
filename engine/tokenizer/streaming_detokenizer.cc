#include "engine/tokenizer/streaming_detokenizer.h"

#include "engine/tokenizer/utf8.h"

namespace jitllm::tokenizer {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer)
    : StreamingDetokenizer(tokenizer, Options{}) {}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, Options options)
    : tokenizer_(tokenizer), options_(options) {}

std::string StreamingDetokenizer::feed(int32_t id) {
  std::string_view piece = tokenizer_.tokenPiece(id, options_.renderSpecial);
  if (!sawText_ && !piece.empty() && !tokenizer_.isControl(id)) {
    if (options_.stripPrefixSpace && tokenizer_.addSpacePrefix() && piece.front() == ' ') {
      piece.remove_prefix(1);
    }
    sawText_ = true;
  }
  pending_.append(piece);
  std::string out;
  drain(out, /*final=*/false);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  drain(out, /*final=*/true);
  reset();
  return out;
}

void StreamingDetokenizer::reset() {
  pending_.clear();
  sawText_ = false;
}

void StreamingDetokenizer::drain(std::string& out, bool final) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  const std::string_view bytes = pending_;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t length = 0;
    const auto status = utf8::checkSequence(bytes.substr(pos), &length);
    if (status == utf8::SequenceStatus::kIncomplete && !final) break;  // wait for more bytes
    if (status == utf8::SequenceStatus::kComplete) {
      out.append(bytes.substr(pos, length));
    } else {
      out.append(kReplacement);
    }
    pos += length;
  }
  pending_.erase(0, pos);
}

}  // namespace jitllm::tokenizer
