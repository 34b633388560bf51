"""Which recorded failures a replay reproduces: the matching rule, precision and recall.

Failure classes. A status is a failure of class ``failed`` (``failed``, ``rejected-*``,
``failed-*``: an allocation or capacity failure, OOM in a production log) or of class
``timed-out``; ``ok`` and ``unfinished`` (still running when the run ended) are not
failures. Anything else is refused (``ValueError``).

Rule ``by_request`` (the default). A recorded failure is *reproduced* when the same
request (``request_id``) fails in the simulation with a failure of the same class
(``rejected-*`` or ``failed-*`` for a ``failed`` one; ``timed-out`` for ``timed-out``
only) and, with ``same_replica=True`` (a replay on the recorded routing), on the
recorded replica. With ``same_replica=False`` (a counterfactual that routes elsewhere)
the replica is not compared. Ids are unique on each side, so matches are one-to-one.

Rule ``by_window`` (looser, for logs whose request ids do not line up with the replay's).
A recorded failure on replica ``r`` at time ``t`` is matched by a simulated failure of
the same class on ``r`` at a time within ``[t - tolerance_s, t + tolerance_s]`` that no
other recorded failure has taken. Recorded failures are taken in time order (ties by
request id); each takes the nearest free simulated failure (ties: the earlier, then the
lower request id): greedy, one-to-one. Times are ``arrival_s`` on both sides (the
simulated frame's ``finish_s`` where it has no ``arrival_s``).

Scores: ``precision = matched / simulated failures`` (None when the simulation has
none), ``recall = matched / recorded failures`` (None when the log has none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import pandas as pd

Rule = Literal["by_request", "by_window"]
TABLE_COLUMNS: Final = (
    "request_id",
    "replica",
    "recorded_status",
    "recorded_time_s",
    "simulated_request_id",
    "simulated_replica",
    "simulated_status",
    "simulated_time_s",
    "matched",
    "reason",
)
"""One row per recorded failure (matched or not), then one per simulated failure that
no recorded failure matched (its ``request_id`` / ``replica`` are the simulated ones,
``recorded_status`` is the log's status of that request where known and
``recorded_time_s`` is empty). Times are each side's time (module docstring)."""


@dataclass(frozen=True)
class MatchReport:
    rule: Rule
    tolerance_s: float | None
    recorded_failures: int
    simulated_failures: int
    matched: int
    precision: float | None
    recall: float | None
    table: pd.DataFrame
    """Columns :data:`TABLE_COLUMNS`."""


def failure_class(status: str) -> str | None:
    """``failed``, ``timed-out`` or None (not a failure) for a recorded or simulated status."""
    if status in ("ok", "unfinished"):
        return None
    if status == "timed-out":
        return "timed-out"
    if status == "failed" or status.startswith(("rejected-", "failed-")):
        return "failed"
    raise ValueError(
        f"unknown status {status!r}: expected ok, failed, rejected-*, failed-*, "
        "timed-out or unfinished"
    )


def match_failures(
    recorded: pd.DataFrame,
    simulated: pd.DataFrame,
    *,
    rule: Rule = "by_request",
    tolerance_s: float = 30.0,
    same_replica: bool = True,
) -> MatchReport:
    """Match ``recorded`` (request_id, replica, status, arrival_s; every request or only
    the failed ones) against ``simulated`` (request_id, replica, status, and arrival_s or
    finish_s) by ``rule`` (module docstring). ``tolerance_s`` is for ``by_window``;
    ``same_replica`` for ``by_request``."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}: expected one of {', '.join(RULES)}")
    if tolerance_s < 0:
        raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
    rec = _failures(recorded, "recorded")
    sim = _failures(simulated, "simulated")
    rows, taken = RULES[rule](rec, sim, simulated, tolerance_s, same_replica)
    known = dict(zip(recorded["request_id"], recorded["status"], strict=True))
    for _, s in sim[~sim["request_id"].isin(taken)].iterrows():
        logged = known.get(s["request_id"]) if rule == "by_request" else None
        reason = "no recorded failure matches it"
        rows.append(_row(s["request_id"], s["replica"], logged, None, s, False, reason))
    matched = len(taken)
    n_rec, n_sim = len(rec), len(sim)
    return MatchReport(
        rule=rule,
        tolerance_s=tolerance_s if rule == "by_window" else None,
        recorded_failures=n_rec,
        simulated_failures=n_sim,
        matched=matched,
        precision=matched / n_sim if n_sim else None,
        recall=matched / n_rec if n_rec else None,
        table=pd.DataFrame(rows, columns=list(TABLE_COLUMNS), dtype=object).astype(
            {"matched": bool}
        ),
    )


def _failures(frame: pd.DataFrame, side: str) -> pd.DataFrame:
    """The failed rows of ``frame`` with their ``kind`` (failure class) and ``time_s``."""
    need = ["request_id", "replica", "status"]
    missing = [c for c in need if c not in frame.columns]
    time = next((c for c in ("arrival_s", "finish_s") if c in frame.columns), None)
    if missing or time is None:
        raise ValueError(f"{side} frame lacks {missing or ['arrival_s or finish_s']}")
    if frame["request_id"].duplicated().any():
        rid = frame.loc[frame["request_id"].duplicated(), "request_id"].iloc[0]
        raise ValueError(f"{side} frame holds request_id {rid} twice: expected one row each")
    kind = frame["status"].map(failure_class)
    out = frame.loc[kind.notna(), need].copy()
    out["kind"] = kind[kind.notna()]
    out["time_s"] = frame.loc[kind.notna(), time].astype(float)
    return out.sort_values(["time_s", "request_id"], kind="stable").reset_index(drop=True)


def _row(
    rid: object,
    replica: object,
    logged: object,
    time_s: float | None,
    s: pd.Series | None,
    matched: bool,
    reason: str,
) -> dict[str, object]:
    return {
        "request_id": rid,
        "replica": replica,
        "recorded_status": logged,
        "recorded_time_s": time_s,
        "simulated_request_id": None if s is None else s["request_id"],
        "simulated_replica": None if s is None else s["replica"],
        "simulated_status": None if s is None else s["status"],
        "simulated_time_s": None if s is None else _time_of(s),
        "matched": matched,
        "reason": reason,
    }


def _time_of(s: pd.Series) -> float | None:
    """A simulated row's time: ``time_s`` (a failure row), else ``arrival_s``, else
    ``finish_s`` (a row of the whole simulated frame)."""
    for name in ("time_s", "arrival_s", "finish_s"):
        if name in s.index:
            return float(s[name])
    return None


def failures_by_replica(table: pd.DataFrame) -> pd.DataFrame:
    """Per replica of a :data:`TABLE_COLUMNS` table (in memory or read back from
    ``match.csv``): ``recorded`` failures (on their recorded replica), ``simulated``
    failures (on their simulated replica), ``reproduced`` (recorded failures matched, on
    their recorded replica), ``missed`` (recorded, not reproduced) and ``extra``
    (simulated, matching no recorded failure). Ordered by recorded, then simulated
    failures (most first), then replica name."""
    recorded = table[table["recorded_time_s"].notna()]
    extra = table[table["recorded_time_s"].isna()]
    matched = recorded[recorded["matched"].astype(bool)]
    counts = {
        "recorded": recorded["replica"].value_counts(),
        "simulated": pd.concat([matched["simulated_replica"], extra["simulated_replica"]])
        .astype(object)
        .value_counts(),
        "reproduced": matched["replica"].value_counts(),
        "extra": extra["simulated_replica"].value_counts(),
    }
    out = pd.DataFrame(counts).fillna(0).astype("int64")
    out.index = out.index.astype(str)
    out["missed"] = out["recorded"] - out["reproduced"]
    out = out.rename_axis("replica").reset_index()
    out = out[["replica", "recorded", "simulated", "reproduced", "missed", "extra"]]
    return out.sort_values(
        ["recorded", "simulated", "replica"], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)


Matcher = Callable[
    [pd.DataFrame, pd.DataFrame, pd.DataFrame, float, bool],
    tuple[list[dict[str, object]], set[object]],
]


def _by_request(
    rec: pd.DataFrame,
    sim: pd.DataFrame,
    simulated: pd.DataFrame,
    tolerance_s: float,
    same_replica: bool,
) -> tuple[list[dict[str, object]], set[object]]:
    """Returns the recorded failures' rows and the simulated request ids matched."""
    everything = simulated.set_index("request_id")
    rows: list[dict[str, object]] = []
    taken: set[object] = set()
    for _, r in rec.iterrows():
        rid = r["request_id"]
        s = everything.loc[rid] if rid in everything.index else None
        got = None if s is None else pd.Series({**s.to_dict(), "request_id": rid})
        reason = _why_not(r, got, same_replica)
        if reason is None:
            taken.add(rid)
            moved = got is not None and got["replica"] != r["replica"]
            reason = "reproduced on another replica" if moved else "reproduced"
        rows.append(_row(rid, r["replica"], r["status"], r["time_s"], got, rid in taken, reason))
    return rows, taken


def _why_not(r: pd.Series, s: pd.Series | None, same_replica: bool) -> str | None:
    """Why simulated row ``s`` does not reproduce recorded failure ``r`` (None: it does)."""
    if s is None:
        return "not in the simulation"
    kind = failure_class(str(s["status"]))
    if kind is None:
        return f"{s['status']} in the simulation"
    if kind != r["kind"]:
        return f"{s['status']} in the simulation, {r['status']} in the log"
    if same_replica and s["replica"] != r["replica"]:
        return f"failed on replica {s['replica']}, recorded on replica {r['replica']}"
    return None


def _by_window(
    rec: pd.DataFrame,
    sim: pd.DataFrame,
    simulated: pd.DataFrame,
    tolerance_s: float,
    same_replica: bool,
) -> tuple[list[dict[str, object]], set[object]]:
    """Greedy one-to-one matching by replica, class and time (``simulated`` and
    ``same_replica`` are not used: the replica is always compared)."""
    free = np.ones(len(sim), bool)
    rows: list[dict[str, object]] = []
    taken: set[object] = set()
    times = sim["time_s"].to_numpy()
    for _, r in rec.iterrows():
        near = (
            free
            & (sim["replica"].to_numpy() == r["replica"])
            & (sim["kind"].to_numpy() == r["kind"])
            & (np.abs(times - r["time_s"]) <= tolerance_s)
        )
        if not near.any():
            reason = (
                f"no unmatched simulated failure of class {r['kind']!r} on replica "
                f"{r['replica']} within ±{tolerance_s:g} s"
            )
            rows.append(
                _row(r["request_id"], r["replica"], r["status"], r["time_s"], None, False, reason)
            )
            continue
        idx = np.flatnonzero(near)
        k = int(idx[np.argmin(np.abs(times[idx] - r["time_s"]))])  # sim is sorted: ties earlier
        free[k] = False
        s = sim.iloc[k]
        taken.add(s["request_id"])
        delta = float(times[k] - r["time_s"])
        rows.append(
            _row(
                r["request_id"],
                r["replica"],
                r["status"],
                r["time_s"],
                s,
                True,
                f"{delta:+g} s apart",
            )
        )
    return rows, taken


RULES: Final[dict[str, Matcher]] = {"by_request": _by_request, "by_window": _by_window}
