#!/usr/bin/env python3
"""Write fixtures.json: the text transformers' apply_chat_template gives for
the Qwen2, Qwen2.5 and Qwen3 templates of templates/ over many conversations.

transformers renders a chat template with jinja2 in a sandbox with
trim_blocks and lstrip_blocks, the messages as `messages`, and the extra
arguments (add_generation_prompt, enable_thinking) as variables; this does
the same, with the jinja2 package alone. Run it again only when a template
or the conversations change; the C test reads the frozen output.

    .venv/bin/python tests/chat/make-fixtures.py > tests/chat/fixtures.json
"""
import json
import os
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = ["qwen2", "qwen2.5", "qwen3"]


def render(source, messages, add_generation_prompt, enable_thinking):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    variables = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    if enable_thinking is not None:
        variables["enable_thinking"] = enable_thinking
    return env.from_string(source).render(**variables)


def conversations():
    users = [
        "Write a Go function that reverses a string.",
        "What does `defer` do?",
        "Explain goroutines in one sentence.",
        "Grüße aus Köln! Wie geht's?",
        "日本語で答えてください：Goのチャネルとは？",
        "Emoji test 🚀🐹 — does it survive?",
        "Line one\nLine two\n\nLine four",
        "  leading and trailing spaces  ",
        "",
        "<tool_response>\n42\n</tool_response>",
        "Tabs\tand \"quotes\" and \\backslashes\\",
    ]
    systems = [
        "You are a concise Go expert.",
        "Réponds en français.",
        "",
        "System prompt with\nnewlines\n",
    ]
    answers = [
        "func Reverse(s string) string { return s }",
        "<think>\nThe user asks about defer.\n</think>\n\nIt runs a call when the function returns.",
        "<think>short</think>Goroutines are light threads.",
        "\n\nAnswer after blank lines.",
        "Plain answer with </think> in the middle and more.",
        "はい、チャネルは通信路です。",
        "<think>\n\n</think>\n\nNo thoughts.",
    ]
    convs = []
    # one user turn, with and without a system message
    for u in users:
        convs.append([{"role": "user", "content": u}])
    for i, s in enumerate(systems):
        convs.append([{"role": "system", "content": s},
                      {"role": "user", "content": users[i % len(users)]}])
    # multi-turn: user / assistant pairs, ending with a user or an assistant
    for i, a in enumerate(answers):
        convs.append([{"role": "user", "content": users[i]},
                      {"role": "assistant", "content": a},
                      {"role": "user", "content": users[(i + 1) % len(users)]}])
        convs.append([{"role": "system", "content": systems[i % len(systems)]},
                      {"role": "user", "content": users[(i + 2) % len(users)]},
                      {"role": "assistant", "content": a}])
        convs.append([{"role": "user", "content": users[(i + 3) % len(users)]},
                      {"role": "assistant", "content": answers[(i + 1) % len(answers)]},
                      {"role": "user", "content": users[(i + 4) % len(users)]},
                      {"role": "assistant", "content": a}])
    # three user turns, a system message on every other
    for i in range(12):
        conv = [{"role": "system", "content": systems[i % len(systems)]}] if i % 2 else []
        for k in range(3):
            conv.append({"role": "user", "content": users[(i + k) % len(users)]})
            if k < 2:
                conv.append({"role": "assistant", "content": answers[(i + k) % len(answers)]})
        convs.append(conv)
    # reasoning_content given beside the answer (Qwen3's field; the others
    # ignore it)
    convs.append([{"role": "user", "content": users[0]},
                  {"role": "assistant", "content": "Done.", "reasoning_content": "\nthink hard\n"}])
    convs.append([{"role": "user", "content": users[1]},
                  {"role": "assistant", "content": "<think>x</think>y", "reasoning_content": ""},
                  {"role": "user", "content": users[2]}])
    # a tool's answer as the last user turn: the query before it counts
    convs.append([{"role": "user", "content": users[2]},
                  {"role": "assistant", "content": answers[1]},
                  {"role": "user", "content": users[9]},
                  {"role": "assistant", "content": answers[2]}])
    # a system message that is not the first
    convs.append([{"role": "user", "content": users[3]},
                  {"role": "system", "content": systems[1]},
                  {"role": "user", "content": users[4]}])
    # long multi-turn
    long = [{"role": "system", "content": systems[0]}]
    for i in range(6):
        long.append({"role": "user", "content": users[i]})
        long.append({"role": "assistant", "content": answers[i % len(answers)]})
    long.append({"role": "user", "content": users[6]})
    convs.append(long)
    return convs


def main():
    sources = {}
    for name in TEMPLATES:
        with open(os.path.join(HERE, "templates", name + ".jinja"), encoding="utf-8") as f:
            sources[name] = f.read()
    cases = []
    for messages in conversations():
        for name in TEMPLATES:
            for agp in (True, False):
                thinking = (None, True, False) if name == "qwen3" and agp else (None,)
                for et in thinking:
                    cases.append({
                        "template": name,
                        "messages": messages,
                        "add_generation_prompt": agp,
                        "enable_thinking": et,
                        "text": render(sources[name], messages, agp, et),
                    })
    json.dump({"conversations": len(conversations()), "cases": cases}, sys.stdout,
              ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
