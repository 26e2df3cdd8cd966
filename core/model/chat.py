"""Chat prompts through a model's own chat template.

Example
-------
>>> from interplab.core.model.chat import chat_prompt
>>> chat_prompt(model.tokenizer, [{"role": "user", "content": "What is the capital of France?"}], name=model.name)
'<|im_start|>system\\n...<|im_start|>user\\nWhat is the capital of France?<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("system", "user", "assistant")


def check_messages(messages: Any) -> list[dict[str, str]]:
    """``messages`` as a list of ``{"role", "content"}`` dicts; an error naming the first bad one."""
    if isinstance(messages, str) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(
            f"messages={messages!r:.80} is not a conversation: give a non-empty list of "
            "{'role': ..., 'content': ...} dicts, e.g. [{'role': 'user', 'content': 'Hi'}]."
        )
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise ValueError(f"messages[{i}]={message!r:.80} must be a dict with exactly the keys 'role', 'content'.")
        if message["role"] not in ROLES:
            raise ValueError(f"messages[{i}] has role {message['role']!r}; choose one of {list(ROLES)}.")
        if not isinstance(message["content"], str):
            raise ValueError(f"messages[{i}]['content'] is a {type(message['content']).__name__}, not a str.")
        checked.append({"role": str(message["role"]), "content": message["content"]})
    return checked


def check_chat_template(tokenizer: Any, name: str) -> None:
    """Refuse a tokenizer without a chat template, naming the model."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{name!r} has no chat template, so it cannot take chat messages: use an instruct model, e.g. "
            "load_model('smollm2-135m-instruct'), or set tokenizer.chat_template."
        )


def chat_prompt(tokenizer: Any, messages: Any, *, name: str = "this model", add_generation_prompt: bool = True) -> str:
    """The prompt text of ``messages`` through the tokenizer's chat template, ready for the assistant's answer."""
    checked = check_messages(messages)
    check_chat_template(tokenizer, name)
    text = tokenizer.apply_chat_template(checked, tokenize=False, add_generation_prompt=add_generation_prompt)
    return str(text)
