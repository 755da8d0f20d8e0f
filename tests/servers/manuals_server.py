"""Long markdown manuals on the official SDK's MCPServer (mcp 2.x), for the passage
ranking tests: eight manuals of 20 to 90 KB with headings, lists, tables and code, in
English and one in Chinese. Deterministic.

- manual://<topic>.md (text/markdown), for each topic in TOPICS;
- the largest, manual://operations.md, ends with the section that answers "what is the
  gate code for visitors?" (4417), after some 80 KB of other sections;
- manual://release.md holds a section that answers "how do I undo a published version?"
  in words the question does not use ("yank"), for the dense retrieval tests;
- manual://组件.md is in Chinese; its section 计算属性缓存 answers "计算属性会缓存吗？".

stdio.
"""
import random

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="manuals", log_level="WARNING")

TOPICS = ["billing", "travel", "security", "payroll", "facilities", "release", "operations"]
WORDS = ("team review report folder channel meeting floor schedule request approval form "
         "budget invoice ticket queue owner deadline policy exception escalation archive "
         "summary template checklist notice record entry office desk badge").split()


def section(rng: random.Random, topic: str, k: int) -> str:
    kind = k % 4
    title = f"## {topic.capitalize()} {rng.choice(WORDS)} {k}\n\n"
    prose = " ".join(rng.choice(WORDS) for _ in range(60 + rng.randrange(80)))
    if kind == 0:
        body = f"The {topic} {prose}.\n\n"
    elif kind == 1:
        body = "".join(f"- {topic} {rng.choice(WORDS)} {rng.choice(WORDS)} item {i}\n" for i in range(8)) + "\n"
    elif kind == 2:
        body = "| field | value |\n|---|---|\n" + "".join(
            f"| {rng.choice(WORDS)} | {rng.randrange(1000)} |\n" for _ in range(10)) + "\n"
    else:
        body = "```toml\n" + "".join(f"{rng.choice(WORDS)} = {rng.randrange(100)}\n" for _ in range(12)) + "```\n\n"
    return title + body


def manual(topic: str, size: int) -> str:
    rng = random.Random(topic)
    parts = [f"# {topic.capitalize()} manual\n\nThis manual covers {topic}.\n\n"]
    k = 0
    while sum(len(p) for p in parts) < size:
        k += 1
        parts.append(section(rng, topic, k))
    return "".join(parts)


DOCS = {}
for i, topic in enumerate(TOPICS):
    DOCS[f"manual://{topic}.md"] = manual(topic, 20_000 + 10_000 * i)
DOCS["manual://release.md"] += (
    "## Taking a version back\n\n"
    "A version that was pushed to the registry by mistake can be yanked: it stays "
    "downloadable for existing lockfiles, but new resolutions skip it. Run "
    "`tool yank --version 1.2.3`.\n\n"
)
DOCS["manual://operations.md"] += (
    "## Visitor parking\n\n"
    "Visitors park in lot Q7 behind the greenhouse. The barrier opens with gate code 4417; "
    "the code changes on the first Monday of every quarter.\n"
)
zh = ["# 组件手册\n\n本手册介绍组件的用法。\n\n"]
for k in range(1, 120):
    zh.append(f"## 第{k}节 模板\n\n这一节讲的是模板语法和事件处理的一些细节，第{k}条规则适用于大多数组件，"
              f"也适用于插槽和指令。\n\n")
zh.insert(60, "## 计算属性缓存\n\n计算属性值会基于其响应式依赖被缓存。一个计算属性仅会在其响应式依赖更新时才重新计算。\n\n")
DOCS["manual://组件.md"] = "".join(zh)


def register(uri: str, text: str) -> None:
    def read() -> str:
        return text
    mcp.resource(uri, name=uri.removeprefix("manual://"), mime_type="text/markdown")(read)


for uri, text in DOCS.items():
    register(uri, text)

if __name__ == "__main__":
    mcp.run(transport="stdio")
