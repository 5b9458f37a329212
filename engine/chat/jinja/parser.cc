#include "engine/chat/jinja/parser.h"

#include <initializer_list>

#include "base/error.h"
#include "engine/chat/jinja/lexer.h"

namespace jitllm::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parseAll() {
    std::string stoppedAt;
    Body body = parseBody({}, &stoppedAt);
    if (!stoppedAt.empty()) fail(peek().line, "unexpected {% " + stoppedAt + " %}");
    return body;
  }

 private:
  // Counts nesting on the way down so hostile input cannot exhaust the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxParseDepth) p.fail(p.peek().line, "nested too deeply");
    }
    ~DepthGuard() { p.depth_--; }
    Parser& p;
  };

  [[noreturn]] void fail(int line, const std::string& what) { JITLLM_FAIL(kFailed, "line ", line, ": ", what); }

  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) pos_++;
    return t;
  }
  bool isOp(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kOperator && peek(ahead).text == op;
  }
  bool isName(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).text == name;
  }
  bool acceptOp(const char* op) {
    if (!isOp(op)) return false;
    next();
    return true;
  }
  bool acceptName(const char* name) {
    if (!isName(name)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kEnd:
        return "the end of the template";
      case TokenType::kTagEnd:
        return "'%}'";
      case TokenType::kPrintEnd:
        return "'}}'";
      case TokenType::kText:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }
  void expectOp(const char* op) {
    if (!acceptOp(op)) fail(peek().line, std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expectName() {
    if (peek().type != TokenType::kName) fail(peek().line, "expected a name, found " + describe(peek()));
    return next().text;
  }
  void expectTagEnd() {
    if (peek().type != TokenType::kTagEnd) fail(peek().line, "expected '%}', found " + describe(peek()));
    next();
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Statements up to a {% name %} with name in `stops` (left unconsumed after the name, which is
  // returned in *stoppedAt), or the end of the template (*stoppedAt empty).
  Body parseBody(std::initializer_list<const char*> stops, std::string* stoppedAt) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == TokenType::kEnd) {
        stoppedAt->clear();
        return body;
      }
      if (t.type == TokenType::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = next().text;
        body.push_back(std::move(n));
        continue;
      }
      if (t.type == TokenType::kPrintBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kPrint;
        n->line = t.line;
        n->expr = parseTuple();
        if (peek().type != TokenType::kPrintEnd) fail(peek().line, "expected '}}', found " + describe(peek()));
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type != TokenType::kTagBegin) fail(t.line, "unexpected " + describe(t));
      if (peek(1).type != TokenType::kName) fail(t.line, "expected a tag name after '{%'");
      const std::string& tagName = peek(1).text;
      for (const char* s : stops) {
        if (tagName == s) {
          next();
          next();
          *stoppedAt = tagName;
          return body;
        }
      }
      body.push_back(parseStatement());
    }
  }

  // Parses the body of a block that must end in {% end %}, erroring at the template's end.
  Body parseBlock(const char* what, std::initializer_list<const char*> stops, std::string* stoppedAt, int line) {
    Body b = parseBody(stops, stoppedAt);
    if (stoppedAt->empty()) fail(line, std::string("{% ") + what + " %} is never closed");
    return b;
  }

  std::unique_ptr<Node> parseStatement() {
    int line = next().line;  // {%
    std::string tag = next().text;
    auto n = std::make_unique<Node>();
    n->line = line;
    std::string stopped;
    if (tag == "if") {
      n->kind = Node::Kind::kIf;
      ExprPtr cond = parseExpression();
      expectTagEnd();
      while (true) {
        Body b = parseBlock("if", {"elif", "else", "endif"}, &stopped, line);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (stopped == "elif") {
          cond = parseExpression();
          expectTagEnd();
          continue;
        }
        if (stopped == "else") {
          expectTagEnd();
          n->elseBody = parseBlock("if", {"endif"}, &stopped, line);
        }
        expectTagEnd();
        return n;
      }
    }
    if (tag == "for") {
      n->kind = Node::Kind::kFor;
      n->targets.push_back(expectName());
      while (acceptOp(",")) n->targets.push_back(expectName());
      if (!acceptName("in")) fail(peek().line, "expected 'in' in a for loop");
      n->expr = parseTuple(/*withConditional=*/false);
      if (acceptName("if")) n->condition = parseExpression();
      if (isName("recursive")) fail(line, "recursive loops are not supported");
      expectTagEnd();
      n->body = parseBlock("for", {"else", "endfor"}, &stopped, line);
      if (stopped == "else") {
        expectTagEnd();
        n->elseBody = parseBlock("for", {"endfor"}, &stopped, line);
      }
      expectTagEnd();
      return n;
    }
    if (tag == "set") {
      n->targets.push_back(expectName());
      if (acceptOp(".")) {
        n->attribute = expectName();
      } else {
        while (acceptOp(",")) n->targets.push_back(expectName());
      }
      if (acceptOp("=")) {
        n->kind = Node::Kind::kSet;
        n->expr = parseTuple();
        expectTagEnd();
        return n;
      }
      if (n->targets.size() != 1 || !n->attribute.empty()) fail(line, "a {% set %} block assigns one name");
      n->kind = Node::Kind::kSetBlock;
      if (acceptOp("|")) n->expr = parseFilter(nullptr, line);
      expectTagEnd();
      n->body = parseBlock("set", {"endset"}, &stopped, line);
      expectTagEnd();
      return n;
    }
    if (tag == "macro") {
      n->kind = Node::Kind::kMacro;
      n->name = expectName();
      expectOp("(");
      while (!acceptOp(")")) {
        if (!n->params.empty()) expectOp(",");
        if (acceptOp(")")) break;
        std::string param = expectName();
        ExprPtr def;
        if (acceptOp("=")) def = parseExpression();
        n->params.emplace_back(std::move(param), std::move(def));
      }
      expectTagEnd();
      n->body = parseBlock("macro", {"endmacro"}, &stopped, line);
      if (peek().type == TokenType::kName) next();  // {% endmacro name %}
      expectTagEnd();
      return n;
    }
    if (tag == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      n->expr = parseFilter(nullptr, line);
      expectTagEnd();
      n->body = parseBlock("filter", {"endfilter"}, &stopped, line);
      expectTagEnd();
      return n;
    }
    if (tag == "generation") {
      n->kind = Node::Kind::kScope;
      expectTagEnd();
      n->body = parseBlock("generation", {"endgeneration"}, &stopped, line);
      expectTagEnd();
      return n;
    }
    if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expectTagEnd();
      return n;
    }
    if (tag.starts_with("end") || tag == "else" || tag == "elif") fail(line, "unexpected {% " + tag + " %}");
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block" || tag == "call" ||
        tag == "with" || tag == "do" || tag == "autoescape" || tag == "trans") {
      fail(line, "{% " + tag + " %} is not supported in chat templates");
    }
    fail(line, "unknown tag {% " + tag + " %}");
  }

  // An expression, or several separated by commas (a tuple, made a list).
  ExprPtr parseTuple(bool withConditional = true) {
    int line = peek().line;
    ExprPtr first = withConditional ? parseExpression() : parseOr();
    if (!isOp(",")) return first;
    auto list = make(Expr::Kind::kList, line);
    list->negated = true;  // a tuple
    list->items.push_back(std::move(first));
    while (acceptOp(",")) {
      if (peek().type == TokenType::kTagEnd || peek().type == TokenType::kPrintEnd || isOp(")")) break;
      list->items.push_back(withConditional ? parseExpression() : parseOr());
    }
    return list;
  }

  ExprPtr parseExpression() {
    DepthGuard guard(*this);
    ExprPtr e = parseOr();
    while (isName("if")) {
      int line = next().line;
      auto cond = make(Expr::Kind::kConditional, line);
      cond->a = parseOr();
      cond->b = std::move(e);
      if (acceptName("else")) cond->c = parseExpression();
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr parseOr() {
    ExprPtr e = parseAnd();
    while (isName("or")) {
      auto n = make(Expr::Kind::kOr, next().line);
      n->a = std::move(e);
      n->b = parseAnd();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parseAnd() {
    ExprPtr e = parseNot();
    while (isName("and")) {
      auto n = make(Expr::Kind::kAnd, next().line);
      n->a = std::move(e);
      n->b = parseNot();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parseNot() {
    if (isName("not")) {
      DepthGuard guard(*this);
      auto n = make(Expr::Kind::kNot, next().line);
      n->a = parseNot();
      return n;
    }
    return parseCompare();
  }

  ExprPtr parseCompare() {
    int line = peek().line;
    ExprPtr e = parseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().type == TokenType::kOperator && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                                  peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (isName("in")) {
        next();
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, line);
        cmp->a = std::move(e);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parseMath1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto n = make(Expr::Kind::kBinary, line);
    n->name = op;
    n->a = std::move(left);
    n->b = std::move(right);
    return n;
  }

  ExprPtr parseMath1() {
    ExprPtr e = parseConcat();
    while (isOp("+") || isOp("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parseConcat(), t.line);
    }
    return e;
  }

  ExprPtr parseConcat() {
    ExprPtr e = parseMath2();
    while (isOp("~")) {
      int line = next().line;
      e = binary("~", std::move(e), parseMath2(), line);
    }
    return e;
  }

  ExprPtr parseMath2() {
    ExprPtr e = parsePow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parsePow(), t.line);
    }
    return e;
  }

  ExprPtr parsePow() {
    ExprPtr e = parseUnary();
    while (isOp("**")) {
      int line = next().line;
      e = binary("**", std::move(e), parseUnary(), line);
    }
    return e;
  }

  // Filters apply to the whole of `-x | f`, as in jinja2: (-x) | f.
  ExprPtr parseUnary(bool withFilters = true) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (isOp("-") || isOp("+")) {
      const Token& t = next();
      ExprPtr operand = parseUnary(false);
      if (t.text == "-") {
        e = make(Expr::Kind::kNegate, t.line);
        e->a = std::move(operand);
      } else {
        e = std::move(operand);
      }
    } else {
      e = parsePostfix(parsePrimary());
    }
    return withFilters ? parseFilterChain(std::move(e)) : std::move(e);
  }

  ExprPtr parsePrimary() {
    DepthGuard guard(*this);
    const Token& t = peek();
    int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        std::string name = next().text;
        auto lit = make(Expr::Kind::kLiteral, line);
        if (name == "true" || name == "True") {
          lit->value = Value(true);
        } else if (name == "false" || name == "False") {
          lit->value = Value(false);
        } else if (name == "none" || name == "None") {
          lit->value = Value(None{});
        } else {
          lit->kind = Expr::Kind::kName;
          lit->name = name;
        }
        return lit;
      }
      case TokenType::kString: {
        std::string s = next().text;
        while (peek().type == TokenType::kString) s += next().text;  // 'a' 'b' is 'ab'
        auto lit = make(Expr::Kind::kLiteral, line);
        lit->value = Value(std::move(s));
        return lit;
      }
      case TokenType::kInt: {
        auto lit = make(Expr::Kind::kLiteral, line);
        lit->value = Value(next().intValue);
        return lit;
      }
      case TokenType::kFloat: {
        auto lit = make(Expr::Kind::kLiteral, line);
        lit->value = Value(next().floatValue);
        return lit;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          next();
          if (acceptOp(")")) {
            auto empty = make(Expr::Kind::kList, line);
            empty->negated = true;  // a tuple
            return empty;
          }
          ExprPtr e = parseTuple();
          expectOp(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::kList, line);
          while (!acceptOp("]")) {
            if (!list->items.empty()) {
              expectOp(",");
              if (acceptOp("]")) break;
            }
            list->items.push_back(parseExpression());
          }
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::kDict, line);
          while (!acceptOp("}")) {
            if (!dict->items.empty()) {
              expectOp(",");
              if (acceptOp("}")) break;
            }
            dict->items.push_back(parseExpression());
            expectOp(":");
            dict->items.push_back(parseExpression());
          }
          return dict;
        }
        break;
      default:
        break;
    }
    fail(line, "unexpected " + describe(t) + " in an expression");
  }

  void parseCallArgs(Expr& call) {
    // after '('
    while (!acceptOp(")")) {
      if (!call.items.empty() || !call.named.empty()) {
        expectOp(",");
        if (acceptOp(")")) break;
      }
      if (peek().type == TokenType::kName && isOp("=", 1)) {
        std::string key = next().text;
        next();
        call.named.emplace_back(std::move(key), parseExpression());
      } else {
        if (!call.named.empty()) fail(peek().line, "positional argument after a keyword argument");
        call.items.push_back(parseExpression());
      }
    }
  }

  ExprPtr parsePostfix(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (acceptOp(".")) {
        if (peek().type == TokenType::kInt) {
          auto sub = make(Expr::Kind::kSubscript, line);
          sub->a = std::move(e);
          sub->b = make(Expr::Kind::kLiteral, line);
          sub->b->value = Value(next().intValue);
          e = std::move(sub);
          continue;
        }
        auto attr = make(Expr::Kind::kAttribute, line);
        attr->a = std::move(e);
        attr->name = expectName();
        e = std::move(attr);
      } else if (acceptOp("[")) {
        ExprPtr parts[3];
        int part = 0;
        bool slice = false;
        while (!isOp("]")) {
          if (acceptOp(":")) {
            slice = true;
            if (++part > 2) fail(line, "a slice has at most three parts");
            continue;
          }
          if (parts[part]) fail(peek().line, "expected ':' or ']' in a subscript");
          parts[part] = parseExpression();
        }
        next();
        if (slice) {
          auto s = make(Expr::Kind::kSlice, line);
          s->a = std::move(e);
          for (auto& p : parts) s->items.push_back(std::move(p));
          e = std::move(s);
        } else {
          if (!parts[0]) fail(line, "empty subscript");
          auto sub = make(Expr::Kind::kSubscript, line);
          sub->a = std::move(e);
          sub->b = std::move(parts[0]);
          e = std::move(sub);
        }
      } else if (acceptOp("(")) {
        DepthGuard guard(*this);
        auto call = make(Expr::Kind::kCall, line);
        call->a = std::move(e);
        parseCallArgs(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parseFilter(ExprPtr input, int line) {
    auto f = make(Expr::Kind::kFilter, line);
    f->a = std::move(input);
    f->name = expectName();
    if (acceptOp("(")) parseCallArgs(*f);
    return f;
  }

  ExprPtr parseFilterChain(ExprPtr e) {
    while (true) {
      DepthGuard guard(*this);
      int line = peek().line;
      if (acceptOp("|")) {
        e = parseFilter(std::move(e), line);
      } else if (acceptName("is")) {
        auto test = make(Expr::Kind::kTest, line);
        test->a = std::move(e);
        test->negated = acceptName("not");
        test->name = expectName();
        if (acceptOp("(")) {
          parseCallArgs(*test);
        } else {
          const Token& t = peek();
          bool startsArgument = t.type == TokenType::kString || t.type == TokenType::kInt ||
                                t.type == TokenType::kFloat ||
                                (t.type == TokenType::kOperator && (t.text == "[" || t.text == "{")) ||
                                (t.type == TokenType::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
                                 t.text != "if" && t.text != "in" && t.text != "not" && t.text != "is");
          if (startsArgument) test->items.push_back(parsePostfix(parsePrimary()));
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parseTemplate(std::string_view source) { return Parser(tokenize(source)).parseAll(); }

}  // namespace jitllm::jinja
