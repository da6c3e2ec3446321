"""The frontend language as its own distribution: `lang/` installs alone into a fresh venv
(no torch, no runtime, nothing downloaded) and runs a program against a running server."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = """
import sys
import radixrt_lang as rt

@rt.function
def capital(s, country):
    s += "Q: What is the capital of " + country + "?\\nA: The capital is"
    s += rt.gen("city", max_tokens=6, temperature=0, stop="\\n")
    s += "\\nIs that right? " + rt.select("ok", choices=["yes", "no"])

state = capital.run(country="France", backend=rt.RuntimeEndpoint(sys.argv[1]))
assert state["ok"] in ("yes", "no") and state["city"], state.text()
for name in ("torch", "radixrt", "transformers", "fastapi"):
    assert name not in sys.modules, name
print("OK", repr(state["city"]))
"""


def test_the_frontend_installs_alone_and_runs_against_a_server(lang_server, tmp_path: Path):
    wheels = tmp_path / "wheels"  # built here (the runtime's build tools), installed there
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "-w", str(wheels), str(ROOT / "lang")]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # pip from ensurepip: no network
    py = env_dir / "bin" / "python"
    (wheel,) = wheels.glob("radixrt_lang-*.whl")
    install = [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    assert subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0
    out = subprocess.run(
        [py, "-c", PROGRAM, lang_server.url], capture_output=True, text=True, timeout=300,
        cwd=tmp_path,  # not the checkout: the installed package only
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("OK"), out.stdout + out.stderr
    assert sys.prefix != str(env_dir)
