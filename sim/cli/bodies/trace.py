"""The bodies of ``fragsim trace ...`` (their front, ``sim.cli.trace``, states the
contract). Reusable by other commands: :func:`show_trace_warnings` (TraceWarnings as
``warning:`` lines), :class:`SpecError` (pre-worded error lines)."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

import traces
from sim.cli.output import Cell, Format, TableData, print_tables
from sim.errors import clip as _clip
from sim.errors import short as _short
from sim.errors import validation_lines
from sim.fields import MAX_SEED, JsonValue
from sim.scenario.yaml_loader import load_yaml
from traces import TraceError, TraceWarning
from traces.arrivals import ArrivalSpec, PoissonArrival
from traces.bounds import BoundError
from traces.synth import PRESETS, SynthSpec, generate

MAX_RATE_PER_S = 1e6


class SpecError(Exception):
    """A user error already worded for the terminal: one or more lines, each printed as
    ``error: LINE``."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


@contextmanager
def show_trace_warnings() -> Iterator[None]:
    """Within the block, print every :class:`traces.TraceWarning` as one
    ``warning: MESSAGE`` line on stderr (each time, not once per place), instead of
    Python's ``FILE:LINE: TraceWarning: ...`` format. Other warnings keep their usual
    handling. Restores the warning state on exit."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, TraceWarning):
            err.print(f"warning: {message}", markup=False)
        else:
            previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", TraceWarning)
        warnings.showwarning = show
        yield


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn trace/spec errors into ``error: ...`` lines on stderr and exit status 2;
    show TraceWarnings as ``warning: ...``."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with show_trace_warnings():
        try:
            yield
        except TraceError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(2) from None
        except BoundError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(2) from None
        except SpecError as exc:
            for line in exc.lines:
                err.print(f"error: {line}", markup=False)
            raise typer.Exit(2) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            err.print(f"error: {where}{exc.strerror or exc}", markup=False)
            raise typer.Exit(2) from None


def _check_seed(source: object, seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        bound = ">= 0" if seed < 0 else f"<= {MAX_SEED} (a seed is below 2^63)"
        raise SpecError(
            [f"{source}: option --seed: got {_short(seed)}: expected an integer {bound}"]
        )


def _arrivals(
    file: Path, format: str | None, rate: float | None, seed: int | None
) -> tuple[ArrivalSpec | None, int]:
    """The arrival process and seed for ``file``: checked and used for a length-only
    file; for a file with its own arrival times, (None, 0), and one warning if the user
    gave ``--rate`` or ``--seed``."""
    if format is not None and format not in traces.FORMATS:
        return None, 0  # the loader reports the unknown format
    name = traces.detect_format(file).name if format is None else format
    if name != "lengths":
        given = [opt for opt, value in (("--rate", rate), ("--seed", seed)) if value is not None]
        if given:
            warnings.warn(
                f"{file}: {' and '.join(given)} ignored: the file has its own arrival times "
                f"(format {name})",
                traces.TraceWarning,
                stacklevel=2,
            )
        return None, 0
    rate = 1.0 if rate is None else rate
    seed = 0 if seed is None else seed
    _check_seed(file, seed)
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE_PER_S):
        raise SpecError(
            [
                f"{file}: option --rate: got {rate!r}: expected an arrival rate > 0 and "
                f"<= {MAX_RATE_PER_S:.0e} requests/s"
            ]
        )
    return PoissonArrival(rate_per_s=rate), seed


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _stats(summary: Mapping[str, object], name: str) -> Mapping[str, object]:
    """The statistics :func:`traces.describe` gives of one token length (a mapping)."""
    column = summary[name]
    assert isinstance(column, Mapping), f"describe()[{name!r}] is a mapping of statistics"
    return column


def render_summary(title: str, summary: Mapping[str, object], fmt: str = "table") -> None:
    """Print a :func:`traces.describe` summary as two tables (``sim.cli.output``): the
    trace's headline numbers, and its token-length percentiles."""
    rate = summary["rate_per_s"]
    ratio, hit = summary["prefix_reuse_token_ratio"], summary["prefix_hit_fraction_mean"]
    top: list[tuple[str, object]] = [
        ("requests", Cell(summary["rows"], _fmt(summary["rows"]))),
        ("span (s)", Cell(summary["span_s"], _fmt(summary["span_s"]))),
        ("rate (req/s)", Cell(rate, "-" if rate is None else f"{rate:,.3f}")),
        (
            "num_samples (mean)",
            Cell(summary["num_samples_mean"], _fmt(summary["num_samples_mean"], 2)),
        ),
        (
            "beam_width (mean)",
            Cell(summary["beam_width_mean"], _fmt(summary["beam_width_mean"], 2)),
        ),
        (
            "prefix reuse (input tokens)",
            Cell(ratio, "no prefix hashes" if ratio is None else f"{ratio:.1%}"),
        ),
        ("prefix hit per request (mean)", Cell(hit, "-" if hit is None else f"{hit:.1%}")),
    ]
    stats = ("mean", "min", "p50", "p90", "p99", "max")
    lengths = [
        (name, *(Cell(column[k], _fmt(column[k])) for k in stats))
        for name, column in ((n, _stats(summary, n)) for n in ("prompt_tokens", "output_tokens"))
    ]
    print_tables(
        [
            TableData(title, ("metric", "value"), top),
            TableData("token lengths", ("tokens", *stats), lengths),
        ],
        fmt,
    )


def describe(
    *,
    file: Path,
    format: str | None,
    strict: bool,
    as_json: bool,
    rate: float | None,
    seed: int | None,
    keep_failed: bool,
    out_format: Format,
) -> None:
    """The work of ``sim.cli.trace.describe``, on the options it parsed."""
    with _user_errors():
        arrivals, seed_used = _arrivals(file, format, rate, seed)
        fmt = traces.detect_format(file).name if format is None else format
        chunks = traces.iter_tables(
            file,
            format=format,
            strict=strict,
            keep_failed=keep_failed,
            arrivals=arrivals,
            seed=seed_used,
        )
        summary = {"file": str(file), "format": fmt, **traces.describe(chunks)}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        render_summary(f"{file} ({fmt})", summary, out_format)


def convert(
    *,
    src: Path,
    dst: Path,
    format: str | None,
    strict: bool,
    rate: float | None,
    seed: int | None,
    keep_failed: bool,
) -> None:
    """The work of ``sim.cli.trace.convert``, on the options it parsed."""
    with _user_errors():
        arrivals, seed_used = _arrivals(src, format, rate, seed)
        rows = traces.convert(
            src,
            dst,
            format=format,
            strict=strict,
            keep_failed=keep_failed,
            arrivals=arrivals,
            seed=seed_used,
        )
    typer.echo(f"wrote {rows:,} requests to {dst}")


def _load_spec_data(path: Path) -> JsonValue:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read spec file ({exc.strerror or exc})"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            [
                f"{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at byte "
                f"offset {exc.start}); expected a UTF-8 YAML or JSON spec"
            ]
        ) from None
    try:
        return load_yaml(text)  # the scenario's bounds: aliases, depth, duplicate keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = _clip(getattr(exc, "problem", None) or str(exc).splitlines()[0])
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise SpecError([f"{path}: not valid YAML: {problem}{at}"]) from None


def _spec(source: str) -> SynthSpec:
    """A preset's spec, or the SynthSpec in a YAML/JSON file (optionally under a
    ``workload:`` key); errors are :class:`SpecError` lines naming the file."""
    if source in PRESETS:
        return PRESETS[source]
    path = Path(source)
    if path.suffix.lower() in (".yaml", ".yml", ".json") and path.is_file():
        data = _load_spec_data(path)
        if isinstance(data, dict) and "workload" in data and "arrival" not in data:
            data = data["workload"]
        if not isinstance(data, dict):
            raise SpecError(
                [f"{path}: got {_short(data)}: expected a mapping with arrival and lengths"]
            )
        try:
            return SynthSpec.model_validate(data)
        except ValidationError as exc:
            raise SpecError(validation_lines(str(path), exc, data, model=SynthSpec)) from None
    what = (
        "no such spec file"
        if path.suffix.lower() in (".yaml", ".yml", ".json")
        else ("not a preset or a spec file")
    )
    raise SpecError(
        [f"{source}: {what}; expected one of {', '.join(PRESETS)} or a .yaml/.json SynthSpec file"]
    )


def _override(
    source: str,
    spec: SynthSpec,
    rate: float | None,
    duration_s: float | None,
    num_requests: int | None,
) -> SynthSpec:
    """``spec`` with the command-line overrides applied; errors name ``source`` (the
    preset or spec file) and the option."""
    if rate is None and duration_s is None and num_requests is None:
        return spec
    data = spec.model_dump()
    options = []
    if rate is not None:
        if "rate_per_s" not in data["arrival"]:
            raise SpecError(
                [
                    f"{source}: option --rate: got {rate!r}: needs a poisson or gamma "
                    f"arrival process, but this spec's arrival is {data['arrival']['kind']!r}"
                ]
            )
        data["arrival"]["rate_per_s"] = rate
        options.append("--rate")
    if duration_s is not None or num_requests is not None:
        data["duration_s"], data["num_requests"] = duration_s, num_requests
        options += [
            o
            for o, v in (("--duration-s", duration_s), ("--num-requests", num_requests))
            if v is not None
        ]
    try:
        return SynthSpec.model_validate(data)
    except ValidationError as exc:
        label = f"{source} with {' '.join(options)}"
        raise SpecError(validation_lines(label, exc, data, model=SynthSpec)) from None


def synth(
    *,
    preset: str,
    out: Path,
    seed: int,
    rate: float | None,
    duration_s: float | None,
    num_requests: int | None,
) -> None:
    """The work of ``sim.cli.trace.synth``, on the options it parsed."""
    with _user_errors():
        _check_seed(preset, seed)
        spec = _override(preset, _spec(preset), rate, duration_s, num_requests)
        rows = traces.write(generate(spec, seed), out)
    typer.echo(f"wrote {rows:,} requests to {out}")


def presets(*, as_json: bool, fmt: str) -> None:
    """The work of ``sim.cli.trace.presets``, on the options it parsed."""
    if as_json:
        typer.echo(json.dumps({k: v.model_dump(mode="json") for k, v in PRESETS.items()}, indent=2))
        return
    rows = []
    for name, spec in PRESETS.items():
        size = f"{spec.duration_s:,.0f} s" if spec.duration_s else f"{spec.num_requests:,} requests"
        rows.append((name, spec.arrival.kind, spec.lengths.kind, size))
    print_tables(
        [TableData("synthetic presets", ("name", "arrival", "lengths", "size"), rows)], fmt
    )
