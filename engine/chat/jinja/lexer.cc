#include "engine/chat/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "base/error.h"
#include "engine/chat/jinja/value.h"

namespace jitllm::jinja {

namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isNameChar(char c) { return isNameStart(c) || isDigit(c); }

// What jinja2 does to a string literal: Python's unicode-escape decoding of its body.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); i++) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t digits) {
      uint32_t v = 0;
      for (size_t k = 0; k < digits; k++) {
        JITLLM_REQUIRE(i + 1 < body.size(), "line ", line, ": truncated \\x/\\u escape in a string");
        char h = body[++i];
        v <<= 4;
        if (isDigit(h))
          v |= uint32_t(h - '0');
        else if (h >= 'a' && h <= 'f')
          v |= uint32_t(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
          v |= uint32_t(h - 'A' + 10);
        else
          JITLLM_FAIL(kFailed, "line ", line, ": bad \\x/\\u escape in a string");
      }
      JITLLM_REQUIRE(v < 0x110000, "line ", line, ": escape past U+10FFFF");
      out += utf8Encode(std::u32string(1, char32_t(v)));
    };
    switch (e) {
      case '\n':
        break;  // a line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (char c = controlEscape(e)) {
          out += c;
        } else if (e >= '0' && e <= '7') {
          uint32_t v = uint32_t(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; k++) {
            v = v * 8 + uint32_t(body[++i] - '0');
          }
          out += utf8Encode(std::u32string(1, char32_t(v)));
        } else {
          out += '\\';  // Python keeps unknown escapes as written
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  std::vector<Token> run() {
    bool lineStarting = true;  // the last tag ended a line (or nothing came yet): lstrip may apply
    while (pos_ < s_.size()) {
      size_t start = findTagStart(pos_);
      if (start == std::string::npos) {
        emitText(s_.substr(pos_), line_);
        advanceLines(pos_, s_.size());
        pos_ = s_.size();
        break;
      }
      char kind = s_[start + 1];
      char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2] : 0;
      std::string text = s_.substr(pos_, start - pos_);
      if (sign == '-') {
        while (!text.empty() && isSpace(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        size_t lineStart = text.rfind('\n');
        lineStart = lineStart == std::string::npos ? 0 : lineStart + 1;
        if ((lineStart > 0 || lineStarting) && lineStart < text.size()) {
          bool blank = true;
          for (size_t i = lineStart; i < text.size(); i++) blank = blank && isSpace(text[i]);
          if (blank) text.resize(lineStart);
        }
      }
      emitText(std::move(text), line_);
      advanceLines(pos_, start);
      pos_ = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lineStarting = comment();
      } else if (kind == '%' && rawBlock(start)) {
        lineStarting = lastConsumedNewline_;
      } else {
        lineStarting = tag(kind == '{');
      }
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) { JITLLM_FAIL(kFailed, "line ", line, ": ", what); }

  size_t findTagStart(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void advanceLines(size_t from, size_t to) {
    for (size_t i = from; i < to; i++) line_ += s_[i] == '\n';
  }

  void emitText(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::move(text), line});
  }

  // After the end of a tag or comment: `-` strips every following whitespace, a plain `%}`/`#}`
  // (trim_blocks) the one newline after it. Returns whether what was consumed ended a line.
  bool afterTagEnd(char sign, bool isPrint) {
    bool newline = false;
    if (sign == '-') {
      while (pos_ < s_.size() && isSpace(s_[pos_])) {
        newline = s_[pos_] == '\n';
        line_ += newline;
        pos_++;
      }
    } else if (sign != '+' && !isPrint && pos_ < s_.size() && s_[pos_] == '\n') {
      pos_++;
      line_++;
      newline = true;
    }
    return newline;
  }

  bool comment() {
    int startLine = line_;
    size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail(startLine, "unterminated comment ({# without #})");
    char sign = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    advanceLines(pos_, end);
    pos_ = end + 2;
    return afterTagEnd(sign, false);
  }

  // {% raw %}...{% endraw %}: the text in between is output as written.
  bool rawBlock(size_t tagStart) {
    size_t p = pos_;
    while (p < s_.size() && isSpace(s_[p])) p++;
    if (s_.compare(p, 3, "raw") != 0 || (p + 3 < s_.size() && isNameChar(s_[p + 3]))) return false;
    p += 3;
    while (p < s_.size() && isSpace(s_[p])) p++;
    char sign = 0;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
    if (s_.compare(p, 2, "%}") != 0) return false;
    advanceLines(pos_, p + 2);
    pos_ = p + 2;
    afterTagEnd(sign, false);
    int bodyLine = line_;
    for (size_t i = findTagStart(pos_); i != std::string::npos; i = findTagStart(i + 1)) {
      if (s_[i + 1] != '%') continue;
      size_t q = i + 2;
      char open = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q++] : 0;
      while (q < s_.size() && isSpace(s_[q])) q++;
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < s_.size() && isSpace(s_[q])) q++;
      char close = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) close = s_[q++];
      if (s_.compare(q, 2, "%}") != 0) continue;
      std::string body = s_.substr(pos_, i - pos_);
      if (open == '-') {
        while (!body.empty() && isSpace(body.back())) body.pop_back();
      }
      emitText(std::move(body), bodyLine);
      advanceLines(pos_, q + 2);
      pos_ = q + 2;
      lastConsumedNewline_ = afterTagEnd(close, false);
      return true;
    }
    fail(int(std::count(s_.begin(), s_.begin() + long(tagStart), '\n')) + 1, "{% raw %} without {% endraw %}");
  }

  // The tokens of one {{ ... }} or {% ... %}, up to and including its end.
  bool tag(bool isPrint) {
    int startLine = line_;
    tokens_.push_back({isPrint ? TokenType::kPrintBegin : TokenType::kTagBegin, "", line_});
    int depth = 0;  // open brackets: `}}` inside {{ {'a': {'b': 1}} }} does not end the tag
    while (true) {
      while (pos_ < s_.size() && isSpace(s_[pos_])) {
        line_ += s_[pos_] == '\n';
        pos_++;
      }
      if (pos_ >= s_.size()) fail(startLine, isPrint ? "unterminated {{ (no }})" : "unterminated {% (no %})");
      if (depth == 0) {
        const char* end = isPrint ? "}}" : "%}";
        char sign = (s_[pos_] == '-' || s_[pos_] == '+') ? s_[pos_] : 0;
        if (s_.compare(pos_ + (sign ? 1 : 0), 2, end) == 0 && !(isPrint && sign == '+')) {
          pos_ += 2 + (sign ? 1 : 0);
          tokens_.push_back({isPrint ? TokenType::kPrintEnd : TokenType::kTagEnd, "", line_});
          return afterTagEnd(sign, isPrint);
        }
      }
      char c = s_[pos_];
      int line = line_;
      if (c == '\'' || c == '"') {
        size_t p = pos_ + 1;
        while (p < s_.size() && s_[p] != c) p += s_[p] == '\\' ? 2 : 1;
        if (p >= s_.size()) fail(line, "unterminated string");
        std::string body = s_.substr(pos_ + 1, p - pos_ - 1);
        advanceLines(pos_, p);
        pos_ = p + 1;
        tokens_.push_back({TokenType::kString, unescape(body, line), line});
      } else if (isDigit(c)) {
        number(line);
      } else if (isNameStart(c)) {
        size_t p = pos_;
        while (p < s_.size() && isNameChar(s_[p])) p++;
        tokens_.push_back({TokenType::kName, s_.substr(pos_, p - pos_), line});
        pos_ = p;
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : kTwo) {
          if (s_.compare(pos_, 2, t) == 0) op = t;
        }
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=()[]{},.:|", c)) fail(line, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') depth++;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        }
        pos_ += op.size();
        tokens_.push_back({TokenType::kOperator, op, line});
      }
    }
  }

  void number(int line) {
    size_t p = pos_;
    auto digits = [&] {
      while (p < s_.size() && (isDigit(s_[p]) || (s_[p] == '_' && p + 1 < s_.size() && isDigit(s_[p + 1])))) p++;
    };
    digits();
    bool isFloat = false;
    if (p + 1 < s_.size() && s_[p] == '.' && isDigit(s_[p + 1])) {
      isFloat = true;
      p++;
      digits();
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) q++;
      if (q < s_.size() && isDigit(s_[q])) {
        isFloat = true;
        p = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < p; i++) {
      if (s_[i] != '_') text += s_[i];
    }
    Token t{isFloat ? TokenType::kFloat : TokenType::kInt, text, line};
    if (isFloat) {
      std::from_chars(text.data(), text.data() + text.size(), t.floatValue);
    } else {
      auto r = std::from_chars(text.data(), text.data() + text.size(), t.intValue);
      if (r.ec != std::errc()) fail(line, "integer literal too large: " + text);
    }
    tokens_.push_back(std::move(t));
    pos_ = p;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool lastConsumedNewline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  JITLLM_REQUIRE(source.size() <= kMaxTemplateBytes, "template of ", source.size(), " bytes (at most ",
                 kMaxTemplateBytes, ")");
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); i++) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') i++;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();  // keep_trailing_newline=False
  return Lexer(std::move(normalized)).run();
}

}  // namespace jitllm::jinja
