"""Tool use: a ReAct-style loop where the model picks a tool with `select`, writes its input
with `gen`, and Python runs the tool between generations.

    python examples/tool_use.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

import ast
import operator

from radixrt_lang.launch import example_main

import radixrt as rt

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}
FACTS = {
    "eiffel tower height": "330 metres",
    "speed of light": "299792 km/s",
    "population of france": "68 million",
    "boiling point of water": "100 degrees C",
}


def calculator(expression: str) -> str:
    """Arithmetic on numbers (+ - * / ** and parentheses); anything else is an error."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("not arithmetic")

    try:
        value = ev(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as e:
        return f"error: {e}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def lookup(key: str) -> str:
    key = key.strip().lower().rstrip("?.")
    return FACTS.get(key, f"unknown key; known keys: {', '.join(FACTS)}")


TOOLS = {"calculator": calculator, "lookup": lookup}


@rt.function
def agent(s, question, max_steps=4):
    s += (
        "Answer the question using tools. After 'Action:' write one of: calculator, "
        f"lookup, finish. Lookup keys: {', '.join(FACTS)}.\n\n"
        "Question: What is 12 times 7?\nAction: calculator\nInput: 12 * 7\n"
        "Observation: 84\nAction: finish\nInput: 84\n\n"
        "Question: What is the speed of light?\nAction: lookup\nInput: speed of light\n"
        "Observation: 299792 km/s\nAction: finish\nInput: 299792 km/s\n\n"
    )
    s += "Question: " + question + "\n"
    for step in range(max_steps):
        # The first action must be a tool: a small model would otherwise guess at once.
        actions = list(TOOLS) if step == 0 else [*TOOLS, "finish"]
        s += "Action: " + rt.select("action", actions) + "\n"
        s += "Input: " + rt.gen("input", max_tokens=16, stop="\n") + "\n"
        if s["action"] == "finish":
            break
        s += "Observation: " + TOOLS[s["action"]](s["input"]) + "\n"
    s.set_var("answer", s["input"].strip())


def main(backend: rt.BaseBackend) -> None:
    for question in ["What is 23 plus 19?", "How tall is the Eiffel tower?"]:
        state = agent.run(question=question, backend=backend, temperature=0)
        print(state.text().split("\n\n", 3)[-1])
        print(f"=> {state['answer']}\n")


if __name__ == "__main__":
    example_main(main, __doc__)
