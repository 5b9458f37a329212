#include "engine/tokenizer/gpt2_byte_map.h"

#include <array>

namespace jitllm::tokenizer::gpt2_bytes {
namespace {

constexpr bool keepsItsValue(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint16_t, 256> codepointOfByte{};
  std::array<int16_t, 512> byteOfCodepoint{};  // every mapped code point is below U+0144
  std::array<std::array<char, 2>, 256> utf8{};
  std::array<uint8_t, 256> utf8Length{};
};

constexpr Tables buildTables() {
  Tables t;
  for (auto& b : t.byteOfCodepoint) b = -1;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const int cp = keepsItsValue(b) ? b : next++;
    t.codepointOfByte[b] = uint16_t(cp);
    t.byteOfCodepoint[cp] = int16_t(b);
    if (cp < 0x80) {
      t.utf8[b] = {char(cp), 0};
      t.utf8Length[b] = 1;
    } else {
      t.utf8[b] = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      t.utf8Length[b] = 2;
    }
  }
  return t;
}

constexpr Tables kTables = buildTables();

}  // namespace

std::string_view encodeByte(uint8_t byte) {
  return {kTables.utf8[byte].data(), kTables.utf8Length[byte]};
}

int decodeCodepoint(uint32_t cp) {
  return cp < kTables.byteOfCodepoint.size() ? kTables.byteOfCodepoint[cp] : -1;
}

}  // namespace jitllm::tokenizer::gpt2_bytes
