"""The agent benchmark (bench.py): scripted tool-calling sessions (session.py) over a generated
tool list (tools.py), against vLLM-CPU as its peer (peer.py), and the report (report.py)."""
