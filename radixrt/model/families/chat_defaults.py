"""What a family's checkpoints use for chat when a checkpoint carries none: the family's
standard chat template and the tokens that end a turn (Gemma's GGUFs of base models ship
neither). Keyed by config.json's `model_type`."""

from __future__ import annotations

# Gemma: `<start_of_turn>user ... <end_of_turn>` turns, the assistant's role named "model", no
# system role (a system message opens the first user turn), BOS first.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set preamble = messages[0]['content'] ~ '\\n\\n' -%}"
    "{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set preamble = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- if message['role'] not in ['user', 'assistant', 'model'] -%}"
    "{{ raise_exception('Gemma chats have user and assistant turns (and a system message "
    "first), not ' ~ message['role']) }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Gemma chats alternate user and assistant turns, user first') }}"
    "{%- endif -%}"
    "{%- set content = message['content'] if message['content'] is string else "
    "message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') "
    "| join('') -%}"
    "{{ '<start_of_turn>' ~ ('user' if message['role'] == 'user' else 'model') ~ '\\n' }}"
    "{{ ((preamble if loop.first else '') ~ content) | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

# model_type -> (chat template, tokens that end the assistant's turn)
CHAT_DEFAULTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemma": (GEMMA_TEMPLATE, ("<end_of_turn>",)),
    "gemma2": (GEMMA_TEMPLATE, ("<end_of_turn>",)),
    "gemma3_text": (GEMMA_TEMPLATE, ("<end_of_turn>",)),
    "gemma3": (GEMMA_TEMPLATE, ("<end_of_turn>",)),
}
