"""A plain agent loop over the OpenAI chat API, with one tool: bash.

It reads what every OpenAI SDK reads (OPENAI_BASE_URL, OPENAI_API_KEY) and what corral adds
(CORRAL_MODEL, CORRAL_PROMPT), and uses only the standard library, so the env's image needs
nothing but python3. Its model calls reach corral's proxy, the only way out of the sandbox.
"""

import json
import os
import subprocess
import urllib.request

SYSTEM = "You work in a Linux shell. Use the bash tool to act; answer without a tool call when you are done."
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command; returns its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def chat(messages: list) -> dict:
    body = {"model": os.environ["CORRAL_MODEL"], "messages": messages, "tools": [BASH]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.load(answer)["choices"][0]["message"]


def bash(call: dict) -> str:
    try:
        command = json.loads(call["function"]["arguments"])["command"]
        done = subprocess.run(["bash", "-c", command], check=False, capture_output=True, text=True, timeout=60)
        return (done.stdout + done.stderr)[-4000:] or "(no output)"
    except (ValueError, KeyError, TypeError, subprocess.TimeoutExpired) as error:
        return f"error: {error!r}"


def main() -> None:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": os.environ["CORRAL_PROMPT"]}]
    while True:  # corral holds the step limit: past it, the answer has no tool call
        message = chat(messages)
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": bash(call)})


if __name__ == "__main__":
    main()
