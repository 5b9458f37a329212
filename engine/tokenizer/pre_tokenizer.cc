#include "engine/tokenizer/pre_tokenizer.h"

#include "engine/tokenizer/codepoint_class.h"

namespace jitllm::tokenizer {
namespace {

// One byte per code point, computed once per call: the category lookups are a binary search each
// and every matcher asks about most code points more than once.
enum Flag : uint8_t {
  kInRange = 1 << 0,  // zero flags mean "outside the piece", like llama.cpp's empty flags
  kLetter = 1 << 1,
  kNumber = 1 << 2,
  kWhitespace = 1 << 3,
  kPunctuation = 1 << 4,
};

uint8_t flagsOf(uint32_t cp) {
  uint8_t f = kInRange;
  switch (codepointClass(cp)) {
    case CodepointClass::kLetter:
      f |= kLetter;
      break;
    case CodepointClass::kNumber:
      f |= kNumber;
      break;
    case CodepointClass::kPunctuation:
      f |= kPunctuation;
      break;
    default:
      break;
  }
  if (isWhitespace(cp)) f |= kWhitespace;
  return f;
}

constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

// A view of one piece [begin, end) of the text; positions are absolute. Reading outside the piece
// gives kOutOfRange and no flags, which is what ends every run at the piece's edge.
class Piece final {
 public:
  Piece(std::span<const uint32_t> cps, std::span<const uint8_t> flags, size_t begin, size_t end,
        std::vector<size_t>& out)
      : cps_(cps), flags_(flags), begin_(begin), end_(end), prevEnd_(begin), out_(out) {}

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  uint32_t cp(size_t pos) const { return inside(pos) ? cps_[pos] : kOutOfRange; }
  uint8_t flags(size_t pos) const { return inside(pos) ? flags_[pos] : 0; }

  // Closes the word that runs from the previous cut to `cut`; empty words are dropped. Returns the
  // word's length.
  size_t cutAt(size_t cut) {
    const size_t len = cut - prevEnd_;
    if (len > 0) out_.push_back(len);
    prevEnd_ = cut;
    return len;
  }

 private:
  bool inside(size_t pos) const { return pos >= begin_ && pos < end_; }

  std::span<const uint32_t> cps_;
  std::span<const uint8_t> flags_;
  size_t begin_;
  size_t end_;
  size_t prevEnd_;
  std::vector<size_t>& out_;
};

uint32_t asciiLower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp; }

bool isNotSpaceLetterNumber(uint8_t f) { return (f & kInRange) && !(f & (kWhitespace | kLetter | kNumber)); }

// 's|'t|'re|'ve|'m|'ll|'d (case-folded when `anyCase`, for (?i:...)). Returns the match length, 0
// when none.
size_t matchContraction(const Piece& p, size_t pos, bool anyCase) {
  if (p.cp(pos) != '\'' || pos + 1 >= p.end()) return 0;
  auto fold = [&](uint32_t cp) { return anyCase ? asciiLower(cp) : cp; };
  const uint32_t c1 = fold(p.cp(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= p.end()) return 0;
  const uint32_t c2 = fold(p.cp(pos + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// The two whitespace alternatives both patterns end with, \s+(?!\S)|\s+ : a run of whitespace
// followed by more text leaves its last whitespace to prefix the next word. Returns false when
// `pos` is not whitespace.
bool matchTrailingWhitespace(Piece& p, size_t& pos) {
  size_t n = 0;
  while (p.flags(pos + n) & kWhitespace) ++n;
  if (n == 0) return false;
  if (n > 1 && p.cp(pos + n) != kOutOfRange) {
    pos += n - 1;
  } else {
    pos += n;
  }
  p.cutAt(pos);
  return true;
}

// \s*[\r\n]+, in Llama 3's and GPT-4o's patterns: a whitespace run up to and including its last
// line break. Returns false when the run at `pos` holds no line break.
bool matchWhitespaceThroughLastBreak(Piece& p, size_t& pos) {
  size_t afterLastBreak = 0;
  for (size_t n = pos; p.flags(n) & kWhitespace; ++n) {
    const uint32_t c = p.cp(n);
    if (c == '\r' || c == '\n') afterLastBreak = n + 1;
  }
  if (afterLastBreak == 0) return false;
  pos = afterLastBreak;
  p.cutAt(pos);
  return true;
}

void splitGpt2(Piece& p) {
  for (size_t pos = p.begin(); pos < p.end();) {
    if (size_t n = matchContraction(p, pos, /*anyCase=*/false)) {
      pos += p.cutAt(pos + n);
      continue;
    }
    const uint32_t cp = p.cp(pos);
    // " ?" is optional in front of each class: look at the code point after a space.
    uint8_t f = cp == ' ' ? p.flags(pos + 1) : p.flags(pos);
    if (f & kLetter) {  //  ?\p{L}+
      pos += (cp == ' ');
      while (p.flags(pos) & kLetter) ++pos;
      p.cutAt(pos);
      continue;
    }
    if (f & kNumber) {  //  ?\p{N}+
      pos += (cp == ' ');
      while (p.flags(pos) & kNumber) ++pos;
      p.cutAt(pos);
      continue;
    }
    if (isNotSpaceLetterNumber(f)) {  //  ?[^\s\p{L}\p{N}]+
      pos += (cp == ' ');
      while (isNotSpaceLetterNumber(p.flags(pos))) ++pos;
      p.cutAt(pos);
      continue;
    }
    if (matchTrailingWhitespace(p, pos)) continue;
    p.cutAt(++pos);  // matches nothing: a word of its own
  }
}

// Llama 3 and Qwen 2 differ only in how many digits a number word takes.
void splitLlama3Like(Piece& p, size_t maxDigits) {
  for (size_t pos = p.begin(); pos < p.end();) {
    if (size_t n = matchContraction(p, pos, /*anyCase=*/true)) {
      pos += p.cutAt(pos + n);
      continue;
    }
    const uint32_t cp = p.cp(pos);
    const uint8_t f = p.flags(pos);

    // [^\r\n\p{L}\p{N}]?\p{L}+ : one optional non-letter, non-number prefix, then letters.
    if (!(cp == '\r' || cp == '\n' || (f & kNumber))) {
      if ((f & kLetter) || (p.flags(pos + 1) & kLetter)) {
        ++pos;
        while (p.flags(pos) & kLetter) ++pos;
        p.cutAt(pos);
        continue;
      }
    }

    // \p{N}{1,maxDigits}
    if (f & kNumber) {
      size_t start = pos;
      while (p.flags(pos) & kNumber) {
        if (++pos - start >= maxDigits) {
          p.cutAt(pos);
          start = pos;
        }
      }
      p.cutAt(pos);
      continue;
    }

    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    uint8_t f2 = cp == ' ' ? p.flags(pos + 1) : f;
    if (isNotSpaceLetterNumber(f2)) {
      pos += (cp == ' ');
      while (isNotSpaceLetterNumber(f2)) f2 = p.flags(++pos);
      for (uint32_t c = p.cp(pos); c == '\r' || c == '\n'; c = p.cp(++pos)) {
      }
      p.cutAt(pos);
      continue;
    }

    if (matchWhitespaceThroughLastBreak(p, pos)) continue;  // \s*[\r\n]+
    if (matchTrailingWhitespace(p, pos)) continue;
    p.cutAt(++pos);
  }
}

// GPT-4o's pattern with ECMAScript's ordered alternation and greedy backtracking, as std::regex
// runs llama.cpp's rewrite of it (pre_tokenizer.h).
void splitGpt4o(Piece& p) {
  auto isUpper = [&](size_t pos) {  // (?=[\p{L}])[^a-z]
    const uint32_t c = p.cp(pos);
    return (p.flags(pos) & kLetter) && !(c >= 'a' && c <= 'z');
  };
  auto isLower = [&](size_t pos) {  // (?=[\p{L}])[^A-Z]
    const uint32_t c = p.cp(pos);
    return (p.flags(pos) & kLetter) && !(c >= 'A' && c <= 'Z');
  };
  // W* then the optional contraction, from `pos`; returns the end.
  auto lowersThenContraction = [&](size_t pos) {
    while (isLower(pos)) ++pos;
    return pos + matchContraction(p, pos, /*anyCase=*/true);
  };
  for (size_t pos = p.begin(); pos < p.end();) {
    const uint32_t cp = p.cp(pos);
    const uint8_t f = p.flags(pos);

    // [^\r\n\p{L}\p{N}]? : taken when it can be; without it the letters must start at `pos`, which
    // then is no letter, so the prefix-less tries fail and need no second look.
    const size_t letters = pos + (cp != '\r' && cp != '\n' && !(f & (kLetter | kNumber)) ? 1 : 0);
    size_t uppers = 0;
    while (isUpper(letters + uppers)) ++uppers;
    // U*W+C? : U* gives back letters until a W can start; the last one it gave back is the first W.
    size_t firstLower = letters + uppers;
    while (!isLower(firstLower) && firstLower > letters) --firstLower;
    if (isLower(firstLower)) {
      pos = lowersThenContraction(firstLower);
      p.cutAt(pos);
      continue;
    }
    if (uppers > 0) {  // U+W*C?
      pos = lowersThenContraction(letters + uppers);
      p.cutAt(pos);
      continue;
    }

    if (f & kNumber) {  // \p{N}{1,3}
      for (size_t n = 0; n < 3 && (p.flags(pos) & kNumber); ++n) ++pos;
      p.cutAt(pos);
      continue;
    }

    //  ?[^\s\p{L}\p{N}]+[\r\n/]*
    if (isNotSpaceLetterNumber(cp == ' ' ? p.flags(pos + 1) : f)) {
      pos += (cp == ' ');
      while (isNotSpaceLetterNumber(p.flags(pos))) ++pos;
      for (uint32_t c = p.cp(pos); c == '\r' || c == '\n' || c == '/'; c = p.cp(++pos)) {
      }
      p.cutAt(pos);
      continue;
    }

    if (matchWhitespaceThroughLastBreak(p, pos)) continue;
    if (matchTrailingWhitespace(p, pos)) continue;
    p.cutAt(++pos);
  }
}

// One regex of the default chain that splits a piece into maximal runs inside a class and the
// runs between them (both become words): [\p{P}\$\+<=>\^~\|]+ and \p{N}+.
template <typename InClass>
void splitRuns(Piece& p, InClass inClass) {
  for (size_t pos = p.begin(); pos < p.end();) {
    const bool in = inClass(pos);
    while (pos < p.end() && inClass(pos) == in) ++pos;
    p.cutAt(pos);
  }
}

// \p{N} : every number character a piece of its own, the runs between them pieces too.
void splitEachDigit(Piece& p) {
  for (size_t pos = p.begin(); pos < p.end(); ++pos) {
    if (p.flags(pos) & kNumber) {
      p.cutAt(pos);
      p.cutAt(pos + 1);
    }
  }
  p.cutAt(p.end());
}

// [0-9][0-9][0-9] : cuts out each leftmost run of three ASCII digits.
void splitDigitTriples(Piece& p) {
  auto digit = [&](size_t pos) {
    const uint32_t c = p.cp(pos);
    return c >= '0' && c <= '9';
  };
  for (size_t pos = p.begin(); pos < p.end();) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      p.cutAt(pos);
      pos += 3;
      p.cutAt(pos);
    } else {
      ++pos;
    }
  }
  p.cutAt(p.end());
}

// Applies `stage` to each piece named by `lengths`, returning the finer lengths.
template <typename Stage>
std::vector<size_t> refine(std::span<const uint32_t> cps, std::span<const uint8_t> flags,
                           const std::vector<size_t>& lengths, Stage stage) {
  std::vector<size_t> out;
  out.reserve(lengths.size() * 2);
  size_t begin = 0;
  for (size_t len : lengths) {
    Piece piece(cps, flags, begin, begin + len, out);
    stage(piece);
    begin += len;
  }
  return out;
}

}  // namespace

void splitWords(PreTokenizerKind kind, std::span<const uint32_t> cps, std::vector<size_t>& wordLengths) {
  if (cps.empty()) return;
  std::vector<uint8_t> flags(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) flags[i] = flagsOf(cps[i]);
  switch (kind) {
    case PreTokenizerKind::kGpt2: {
      Piece whole(cps, flags, 0, cps.size(), wordLengths);
      splitGpt2(whole);
      return;
    }
    case PreTokenizerKind::kLlama3: {
      Piece whole(cps, flags, 0, cps.size(), wordLengths);
      splitLlama3Like(whole, 3);
      return;
    }
    case PreTokenizerKind::kQwen2: {
      Piece whole(cps, flags, 0, cps.size(), wordLengths);
      splitLlama3Like(whole, 1);
      return;
    }
    case PreTokenizerKind::kGpt4o: {
      Piece whole(cps, flags, 0, cps.size(), wordLengths);
      splitGpt4o(whole);
      return;
    }
    case PreTokenizerKind::kDigitsThenGpt2: {
      std::vector<size_t> lengths{cps.size()};
      lengths = refine(cps, flags, lengths, [](Piece& p) { splitEachDigit(p); });
      lengths = refine(cps, flags, lengths, [](Piece& p) { splitGpt2(p); });
      wordLengths.insert(wordLengths.end(), lengths.begin(), lengths.end());
      return;
    }
    case PreTokenizerKind::kDefault: {
      std::vector<size_t> lengths{cps.size()};
      lengths = refine(cps, flags, lengths, [](Piece& p) {
        splitRuns(p, [&](size_t pos) {
          const uint32_t c = p.cp(pos);
          return (p.flags(pos) & kPunctuation) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
                 c == '^' || c == '~' || c == '|';
        });
      });
      lengths = refine(cps, flags, lengths, [](Piece& p) { splitGpt2(p); });
      lengths = refine(cps, flags, lengths,
                       [](Piece& p) { splitRuns(p, [&](size_t pos) { return (p.flags(pos) & kNumber) != 0; }); });
      lengths = refine(cps, flags, lengths, [](Piece& p) { splitDigitTriples(p); });
      wordLengths.insert(wordLengths.end(), lengths.begin(), lengths.end());
      return;
    }
  }
}

}  // namespace jitllm::tokenizer
