#!/usr/bin/env python3
"""Golden chat-template renderings for tests/test_chat_template.cpp.

Renders each family's real Jinja chat template with jinja2, configured as Hugging Face transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson), over a set of conversations, and writes:

  tests/data/chat_templates/<family>/tokenizer_config.json   (chat_template + special-token fields)
  tests/data/chat_templates/goldens.json                     ({"cases": [{family, conversation,
                                                              add_generation_prompt, enable_thinking?,
                                                              text | error}]})

Template sources:
  qwen3, llama3, mistral: copied from the real tokenizer_config.json files in ../shared/assets/tokenizers
    (llama3 reduced to chat_template + bos/eos; mistral has no chat_template: it tests the "none" case).
  qwen2_5: Qwen2.5's tool-aware template (the Qwen2.5-Instruct one, with its "You are Qwen, created by Alibaba
    Cloud" default system message); qwen2: Qwen2-Instruct's; chatml: plain ChatML (OpenHermes-2.5);
  llama3_instruct: Meta-Llama-3-8B-Instruct's; llama2: Llama-2-chat's; mistral_v0_1: Mistral-7B-Instruct-v0.1's;
  mixtral: Mixtral-8x7B-Instruct-v0.1's; mistral_v0_2: Mistral-7B-Instruct-v0.2's (system message folded into the
  first [INST]). These are transcribed below from the models' published tokenizer_config.json files.

Needs jinja2 (the `python3` on PATH has it; /usr/bin/python3 does not). Deterministic. Rerun with:
  python3 tools/reference/chat_goldens.py
"""

import json
import pathlib

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "assets" / "tokenizers"
OUT = ROOT / "tests" / "data" / "chat_templates"

QWEN25 = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == "
    "\"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"
)

QWEN2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>"
    "assistant\\n' }}{% endif %}"
)

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' "
    "+ '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3_INSTRUCT = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == "
    "0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

MISTRAL_V0_1 = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and "
    "assistant roles are supported!') }}{% endif %}{% endfor %}"
)

MIXTRAL = MISTRAL_V0_1.replace("eos_token + ' ' }}", "eos_token}}")

MISTRAL_V0_2 = (
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the "
    "exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n"
)


def shared_config(name, keep=None):
    document = json.loads((SHARED / name / "tokenizer_config.json").read_text())
    if keep is not None:
        document = {k: v for k, v in document.items() if k in keep}
    return document


FAMILIES = {
    "qwen3": shared_config("qwen3"),
    "llama3": shared_config("llama3", keep={"chat_template", "bos_token", "eos_token"}),
    "mistral": shared_config("mistral"),
    "qwen2_5": {"chat_template": QWEN25, "bos_token": None, "eos_token": "<|im_end|>"},
    "qwen2": {"chat_template": QWEN2, "bos_token": None, "eos_token": "<|im_end|>"},
    "chatml": {"chat_template": CHATML, "bos_token": "<s>", "eos_token": "</s>"},
    "llama3_instruct": {
        "chat_template": LLAMA3_INSTRUCT,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
    },
    "llama2": {"chat_template": LLAMA2, "bos_token": "<s>", "eos_token": "</s>"},
    "mistral_v0_1": {"chat_template": MISTRAL_V0_1, "bos_token": "<s>", "eos_token": "</s>"},
    "mixtral": {"chat_template": MIXTRAL, "bos_token": "<s>", "eos_token": "</s>"},
    "mistral_v0_2": {"chat_template": MISTRAL_V0_2, "bos_token": "<s>", "eos_token": "</s>"},
}


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "system_user": [m("system", "You are terse."), m("user", "Hello there")],
    "user_only": [m("user", "What is 2+2?")],
    "multi_turn": [
        m("system", "  Be kind. "),
        m("user", "Hi"),
        m("assistant", "Hello! How can I help?"),
        m("user", "Tell me a joke.\n"),
    ],
    "ends_with_assistant": [
        m("user", "Hello"),
        m("assistant", "Hi there"),
        m("user", "Who are you"),
        m("assistant", "   I am an assistant   "),
    ],
    "whitespace_unicode": [m("user", "\n  Grüße, 世界 \u00a0\t"), m("assistant", " ok\n"), m("user", "again")],
    "thinking_history": [
        m("user", "Q1"),
        m("assistant", "<think>\nplan A\n</think>\n\nAnswer 1"),
        m("user", "Q2"),
        m("assistant", "<think>plan B</think>Answer 2"),
    ],
    "thinking_after_last_user": [
        m("user", "Q1"),
        m("assistant", "<think>\nstep\n</think>\n\nA1"),
        m("system", "Late system note"),
    ],
    "tool_results": [
        m("user", "Weather?"),
        m("assistant", "Calling the tool."),
        m("tool", "{\"t\": 21}"),
        m("tool", "{\"t\": 22}"),
        m("user", "Thanks"),
    ],
    "bad_alternation": [m("user", "a"), m("user", "b")],
    "empty_system": [m("system", ""), m("user", "x")],
}


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def render(config, messages, add_generation_prompt, **extra):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}
    return template.render(messages=messages, add_generation_prompt=add_generation_prompt, **special, **extra)


def main():
    cases = []
    for family, config in FAMILIES.items():
        folder = OUT / family
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        if not config.get("chat_template"):
            continue
        variants = [{}]
        if "enable_thinking" in config["chat_template"]:
            variants.append({"enable_thinking": False})
        for name, messages in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                for extra in variants:
                    case = {"family": family, "conversation": name, "add_generation_prompt": add_generation_prompt}
                    case.update(extra)
                    try:
                        case["text"] = render(config, messages, add_generation_prompt, **extra)
                    except (TemplateError, jinja2.exceptions.TemplateError) as e:
                        case["error"] = str(e)
                    cases.append(case)
    document = {"conversations": CONVERSATIONS, "cases": cases}
    (OUT / "goldens.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases for {len(FAMILIES)} families to {OUT}")


if __name__ == "__main__":
    main()
