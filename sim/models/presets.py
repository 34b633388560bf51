"""The config.json files shipped as model presets (``configs/``: only the fields the
reader uses, each with its source in ``_source``). ``model: <name>`` in a scenario and
``fragsim hardware --model <name>`` read them like any config.json."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sim.models.hf_config import HfModel, read_config

CONFIG_DIR = Path(__file__).parent / "configs"


def shipped_names() -> tuple[str, ...]:
    """The shipped configs' names (file stems), sorted."""
    return tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))


@lru_cache(maxsize=64)
def shipped_model(name: str, kv_cache_dtype: str = "auto", quantization: str = "auto") -> HfModel:
    """A shipped config read (cached). Raises KeyError for a name not shipped."""
    path = CONFIG_DIR / f"{name}.json"
    if name not in shipped_names():
        raise KeyError(name)
    return read_config(path, name=name, kv_cache_dtype=kv_cache_dtype, quantization=quantization)


@lru_cache(maxsize=64)
def file_model(path: str, name: str | None, kv_cache_dtype: str, quantization: str) -> HfModel:
    """A config.json on disk read (cached by path: a run reads it once)."""
    return read_config(
        Path(path), name=name, kv_cache_dtype=kv_cache_dtype, quantization=quantization
    )
