#!/usr/bin/env python3
"""Writes tests/chat/goldens/<template>.json: what Python's jinja2 renders for each committed template
(tests/chat/templates/*.jinja) and each conversation in tests/chat/conversations.json, with and
without the generation prompt. tests/chat/jinja_golden_test.cc renders the same through jitllm and
wants every byte equal.

The environment is the one Hugging Face transformers renders chat templates with (and so the one the
models were trained against): an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
the loopcontrols extension, a no-op {% generation %} block, raise_exception, strftime_now and a
tojson that keeps key order and non-ASCII text. strftime_now returns a fixed time so goldens do not
change from day to day. The conversations reach the template the way engine/chat/chat_template.cc
hands them over (toTemplateMessage below mirrors it).

Run from the repository root:  python3 tests/chat/gen_goldens.py
(Debian 12, python3-jinja2 3.1.6; the version is recorded in each golden.)
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_NOW = datetime.datetime(2025, 7, 26, 9, 30, 0)

# The special tokens each model family's tokenizer carries (tokenizer_config.json).
TOKENS = [
    ("meta-llama", "<|begin_of_text|>", "<|eot_id|>"),
    ("NousResearch", "<|begin_of_text|>", "<|eot_id|>"),
    ("fireworks", "<|begin_of_text|>", "<|eot_id|>"),
    ("meetkai", "<|begin_of_text|>", "<|eot_id|>"),
    ("DeepSeek-R1-Distill", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("Qwen", "", "<|im_end|>"),
    ("SmolLM3", "", "<|im_end|>"),
    ("gemma", "<bos>", "<eos>"),
    ("granite", "<|end_of_text|>", "<|end_of_text|>"),
    ("Phi-3", "<s>", "<|endoftext|>"),
    ("Phi-4", "<|endoftext|>", "<|endoftext|>"),
    ("phi-4", "<|endoftext|>", "<|im_end|>"),
    ("gpt-oss", "<|startoftext|>", "<|return|>"),
    ("Cohere", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("LFM", "<|startoftext|>", "<|im_end|>"),
    ("Nemotron", "<SPECIAL_10>", "<SPECIAL_11>"),
]


def tokens_for(name):
    for key, bos, eos in TOKENS:
        if key in name:
            return bos, eos
    return "<s>", "</s>"


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %}: transformers marks assistant text with it; renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def to_template_message(m):
    """engine/chat/chat_template.cc's toTemplateValue(ChatMessage), in Python."""
    calls = m.get("tool_calls", [])
    out = {"role": m["role"], "content": m.get("content", "")}
    if calls:
        out["tool_calls"] = []
        for c in calls:
            raw = c["function"]["arguments"]
            try:
                args = json.loads(raw)
                if not isinstance(args, dict):
                    args = raw
            except ValueError:
                args = raw
            out["tool_calls"].append({"id": c["id"], "type": "function",
                                      "function": {"name": c["function"]["name"], "arguments": args}})
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("name"):
        out["name"] = m["name"]
    return out


def main():
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        spec = json.load(f)
    env = make_env()
    tdir = os.path.join(HERE, "templates")
    gdir = os.path.join(HERE, "goldens")
    os.makedirs(gdir, exist_ok=True)
    for fname in sorted(os.listdir(tdir)):
        if not fname.endswith(".jinja"):
            continue
        name = fname[: -len(".jinja")]
        with open(os.path.join(tdir, fname), encoding="utf-8") as f:
            source = f.read()
        bos, eos = tokens_for(name)
        cases = []
        try:
            template = env.from_string(source)
        except jinja2.TemplateError as e:
            template = None
            parse_error = str(e)
        for conv_name, conv in spec["conversations"].items():
            for agp in (True, False):
                case = {"conversation": conv_name, "add_generation_prompt": agp}
                if template is None:
                    case["error"] = parse_error
                else:
                    try:
                        case["output"] = template.render(
                            messages=[to_template_message(m) for m in conv],
                            tools=spec["tools"] if conv_name == "tools" else None, documents=None,
                            add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                    except Exception as e:  # raise_exception, undefined errors, sandbox refusals
                        case["error"] = "%s: %s" % (type(e).__name__, e)
                cases.append(case)
        golden = {"template": fname, "jinja2": jinja2.__version__, "bos_token": bos, "eos_token": eos,
                  "now": FIXED_NOW.strftime("%Y-%m-%dT%H:%M:%S"), "cases": cases}
        with open(os.path.join(gdir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum(1 for c in cases if "error" in c)
        print("%-55s %d renders, %d errors" % (name, len(cases) - errors, errors), file=sys.stderr)


if __name__ == "__main__":
    main()
