"""The node events OpenTelemetry request spans can tell, merged with a nodes file's
(:mod:`sim.postmortem.otlp_log` reads the spans; this is what becomes of their resources).

Identity. A span's *node* (the log's replica) is its resource's ``k8s.pod.name``, else
``host.name``, else ``service.instance.id``; its *instance* (the serving process) is
``service.instance.id``. ``k8s.node.name`` is not used: several pods share a machine.
Where spans carry no ``k8s.pod.name`` / ``host.name``, every instance is a node of its
own and no restart can be told: a restarted process is one node stopping and another
starting (by the start and stop rules below, where they lie far enough from the log's
ends).

Inferred from the spans (times in seconds from the log start, the earliest span start):

- **start**: a node is up from :data:`START_LEAD_S` before its first span's start (a
  node serves before its first request arrives; an arrival at the very instant of a
  replayed scale-up would be routed before it). When that is within :data:`EDGE_S` of
  the log start, the node is in the initial fleet instead, with zero uptime (spans
  cannot tell how long it had been up: its load and warm-up precede its first request).
- **stop**: a node whose last span ends more than :data:`EDGE_S` before the log end (the
  latest span end) is scaled down at that end (just after its latest span start where
  that span lasts no time: a span of zero length is valid); otherwise it is up to the
  end of the log.
- **restart**: a node whose spans come from several instances was restarted once per
  change; the instances are ordered by first span start, and the restart is when the
  previous instance had finished its requests: the end of its last span to end, but
  :data:`START_LEAD_S` before the new instance's first span if that is earlier (never
  before the old instance's last span start). A node restarted there in a replay has
  nothing left to drain, then loads and warms up, as the real one did after its drain.
  ``detail`` names both instances. An instance with a span starting after its
  successor's first span is an error (two instances at once are two nodes). Pool:
  ``default``.

Merged with a nodes file (the CSV log's nodes format), the file wins and adds what
spans cannot tell (uptimes, pools, scale events, restarts and crashes by cause); every
row of it is kept; a node it does not name is in its pool where it names only one
(else in ``default``); and per node the spans add only:

- their start, when the file's first event of the node is not a ``start`` /
  ``scale_up`` (at the earlier of the inferred start and that first event);
- their stop, when the file's last event of the node is not a ``scale_down`` and the
  inferred stop comes after it;
- each restart no event of the file explains: an instance change is explained by any
  event of the same node in the window from the old instance's last span start to the
  new one's first span start, widened by :data:`TOLERANCE_S` each side (clocks
  differ); each file event explains at most one change, the earliest first. A restart
  both describe is the file's (its time and cause): none is counted twice.

Conflicts. A nodes file none of whose replicas has a span is refused (it names the
nodes otherwise than the spans do). The merged events must follow the lifecycle
(:func:`sim.postmortem.nodes.fleet_of`), and every span must start while its node
is up or crashed by them (not before the file starts it, nor after the file scales it
down; checked first, so such a file event is blamed, not an inferred event it puts out
of order); otherwise one error line names the nodes file's line (or the spans' line, for
an inferred event) and field.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sim.postmortem.log import LogError
from sim.postmortem.nodes import DEFAULT_POOL, Fleet, NodeEvent, fleet_of

EDGE_S: Final = 60.0
"""A node whose first span starts this close to the log start was up at it; one whose
last span ends this close to the log end was up to it."""
START_LEAD_S: Final = 1.0
"""An inferred start precedes the node's first span by this."""
TOLERANCE_S: Final = 30.0
"""How far outside its window a nodes file's event still explains an instance change."""


@dataclass(frozen=True)
class Span:
    """One span as the log uses it; ``where``: its file and line."""

    where: tuple[Path, int]
    start_ns: int
    end_ns: int
    request: str
    prompt_tokens: int
    output_tokens: int
    status: str
    node: str
    instance: str


@dataclass(frozen=True)
class NodesFile:
    """A nodes file beside the spans: its events in file order
    (:func:`sim.postmortem.nodes.node_events`), its replicas' pools and its name."""

    name: str
    events: list[NodeEvent]
    pools: dict[str, str]


def _span_error(
    span: Span,
    message: str,
    *,
    as_written: bool = True,
    field: str | None = None,
    expected: str | None = None,
    got: object = None,
) -> LogError:
    """``span``'s one-line error (``as_written``: unused, as :meth:`ReadContext.error`'s)."""
    path, line = span.where
    return LogError(path, message, line=line, field=field, expected=expected, got=got)


def _inferred(span: Span, t_s: float, event: str, detail: str, field: str) -> NodeEvent:
    error = functools.partial(_span_error, span)
    return NodeEvent(t_s, span.node, event, detail, error, (field, field))


def span_fleet(spans: Sequence[Span], origin_ns: int, nodes: NodesFile | None = None) -> Fleet:
    """The fleet of the spans (module docstring), merged with ``nodes`` where given.
    Replicas are numbered in order of first appearance in the nodes file, then in the
    spans (file order)."""

    def sec(ns: int) -> float:
        return (ns - origin_ns) / 1e9

    end_s = sec(max(s.end_ns for s in spans))
    file_events = nodes.events if nodes is not None else []
    _check_names_meet(spans, file_events)
    names = list(dict.fromkeys([e.replica for e in file_events] + [s.node for s in spans]))
    by_node: dict[str, list[NodeEvent]] = {}
    for e in file_events:
        by_node.setdefault(e.replica, []).append(e)
    starts: list[NodeEvent] = []
    later: list[NodeEvent] = []
    for node, own in _by_node(spans).items():
        known = sorted(by_node.get(node, []), key=lambda e: e.time_s)  # stable: file order
        first, last = min(own, key=lambda s: s.start_ns), max(own, key=lambda s: s.end_ns)
        if not known or known[0].event not in ("start", "scale_up"):
            t_s = sec(first.start_ns) - START_LEAD_S
            if known:
                t_s = min(t_s, known[0].time_s)
            t_s = 0.0 if t_s <= EDGE_S else t_s
            detail = "first span" if t_s > 0 else "up at the log start (first span)"
            starts.append(_inferred(first, t_s, "start", detail, "startTimeUnixNano"))
        # A stop never at or before the latest span start (a span of zero length last):
        # an event at a span's very instant comes before it.
        latest_s = sec(max(s.start_ns for s in own))
        stop_s = max(sec(last.end_ns), math.nextafter(latest_s, math.inf))
        ends_up = not known or (known[-1].event != "scale_down" and stop_s > known[-1].time_s)
        if stop_s < end_s - EDGE_S and ends_up:
            later.append(_inferred(last, stop_s, "scale_down", "last span", "endTimeUnixNano"))
        later += _restarts(node, own, known, sec)
    events = starts + list(file_events) + later
    pools = nodes.pools if nodes is not None else {}
    only = set(pools.values())
    default = only.pop() if len(only) == 1 else DEFAULT_POOL
    _check_spans_up(spans, events, sec)  # first: a file's event the spans contradict is
    # the cause of any lifecycle error an inferred event would meet after it
    return fleet_of(events, names, [pools.get(n, default) for n in names])


def _check_names_meet(spans: Sequence[Span], file_events: list[NodeEvent]) -> None:
    """A nodes file none of whose replicas has a span names nodes otherwise (pod names
    where the spans give host names, say): refused, not read as twice the fleet."""
    nodes = list(dict.fromkeys(s.node for s in spans))
    if not file_events or not set(nodes).isdisjoint(e.replica for e in file_events):
        return
    shown = ", ".join(nodes[:8]) + (", ..." if len(nodes) > 8 else "")
    raise file_events[0].error(
        "no replica of the nodes file has spans",
        field="replica",
        expected=f"the spans' node names (k8s.pod.name, else host.name, else "
        f"service.instance.id): {shown}",
        got=file_events[0].replica,
    )


def _by_node(spans: Sequence[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for s in spans:
        out.setdefault(s.node, []).append(s)
    return out


def _restarts(
    node: str, own: list[Span], known: list[NodeEvent], sec: Callable[[int], float]
) -> list[NodeEvent]:
    """The instance changes of ``node`` no event of ``known`` explains, as restarts."""
    by_instance: dict[str, list[Span]] = {}
    for s in own:
        by_instance.setdefault(s.instance, []).append(s)
    runs = sorted(
        (min(s.start_ns for s in v), k, inst, v) for k, (inst, v) in enumerate(by_instance.items())
    )
    used: set[int] = set()
    out = []
    for (_, _, old, before), (first_ns, _, new, after) in itertools.pairwise(runs):
        late = [s for s in before if s.start_ns > first_ns]
        if late:
            raise _span_error(
                late[0],
                f"instance {old!r} of node {node!r} has a span after its successor {new!r} started",
                field="service.instance.id",
                expected="one instance of a node at a time (else give nodes distinct "
                "k8s.pod.name / host.name)",
                got=old,
            )
        last = max(before, key=lambda s: s.start_ns)
        lo_s, hi_s = sec(last.start_ns) - TOLERANCE_S, sec(first_ns) + TOLERANCE_S
        why = [k for k, e in enumerate(known) if k not in used and lo_s <= e.time_s <= hi_s]
        if why:
            used.add(why[0])
            continue
        first = min(after, key=lambda s: s.start_ns)
        done_s = sec(max(s.end_ns for s in before))
        t_s = max(sec(last.start_ns), min(done_s, sec(first_ns) - START_LEAD_S))
        detail = f"instance {old} -> {new}"
        out.append(_inferred(first, t_s, "restart", detail, "service.instance.id"))
    return out


def _check_spans_up(
    spans: Sequence[Span], events: list[NodeEvent], sec: Callable[[int], float]
) -> None:
    """Every span starts while its node is up or crashed by ``events`` (events at its
    very start count as before it)."""
    timeline: dict[str, list[NodeEvent]] = {}
    for e in sorted(events, key=lambda e: e.time_s):
        timeline.setdefault(e.replica, []).append(e)
    for s in sorted(spans, key=lambda s: s.start_ns):
        t_s = sec(s.start_ns)
        own = timeline[s.node]
        before = [e for e in own if e.time_s <= t_s]
        if before and before[-1].event != "scale_down":
            continue
        ups = [e for e in own if e.event in ("start", "scale_up")]  # after s: the file's
        blame = before[-1] if before else ups[0] if ups else own[0]
        where = f"{s.where[0].name} line {s.where[1]}"
        if before:
            message = f"scale_down of replica {s.node!r} at {blame.time_s:g} s, before its "
            expected = f"a time after the node's spans (or a start or scale_up before {t_s:g})"
        else:
            message = f"{blame.event} of replica {s.node!r} at {blame.time_s:g} s, after its "
            expected = f"a time <= {t_s:g} s (or no start row: the spans tell it)"
        raise blame.error(
            message + f"span at {t_s:g} s ({where})",
            field=blame.fields[1],
            expected=expected,
            got=blame.time_s,
            as_written=False,
        )
