"""Are the targets' prefixes unique? A target is extracted from its first P tokens (the eval's first prefix length);
where those P tokens also open another target or a nonmember, or occur anywhere in the background the model trained
on, the continuation a model produces from them is not the target's alone to give, and a nonmember whose opening is
trained text is no clean nonmember. Per prepared folder of the arms: the members whose P-token prefix opens another
member, opens a nonmember, or occurs in the background; the nonmembers whose prefix occurs in the background or
opens a member; with the documents' ids (``prefix_collisions`` in results.json)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from goldfish.eval.tables import markdown_section, markdown_table

from ...data import load_prepared
from ...data.dedup import window_keys
from ..summary import Study


def _key(ids: Any, p: int) -> bytes | None:
    """The first ``p`` token ids of a document as bytes (None when it is shorter)."""
    arr = np.asarray(ids, dtype=np.int64)
    return arr[:p].tobytes() if len(arr) >= p else None


def _in_background(keys: set[bytes], docs: Any, p: int) -> set[bytes]:
    """Those of ``keys`` (``p`` token ids as bytes) that occur as a run of ``p`` consecutive ids somewhere in
    ``docs``. Streams the documents (a memory-mapped background of billions of tokens is never held): every window
    is hashed at once (``data.dedup.window_keys``), looked up among the keys' hashes, and a hit is confirmed on the
    ids themselves, so a hash collision never counts."""
    if not keys:
        return set()
    wanted = {int(window_keys(np.frombuffer(k, dtype=np.int64), p)[0]): k for k in keys}
    hashes = np.fromiter(wanted, dtype=np.uint64, count=len(wanted))
    found: set[bytes] = set()
    for ids in docs:
        arr = np.asarray(ids, dtype=np.int64)
        if len(arr) < p:
            continue
        windows = window_keys(arr, p)
        for i in np.flatnonzero(np.isin(windows, hashes)):
            key = arr[i : i + p].tobytes()
            if key == wanted[int(windows[i])]:
                found.add(key)
        if len(found) == len(keys):
            break
    return found


def collisions_of(members: dict[str, Any], nonmembers: dict[str, Any], background: list[Any], p: int) -> dict:
    """The collisions of ``p``-token prefixes among documents given as ``{id: token ids}`` (members, nonmembers) and
    a list of background token ids (module docstring): ``{prefix_tokens, members, nonmembers, background_tokens,
    member_member, member_nonmember, member_background, nonmember_background, nonmember_member}``, each collision a
    list of the ids concerned."""
    mine = {i: _key(x, p) for i, x in members.items()}
    theirs = {i: _key(x, p) for i, x in nonmembers.items()}
    grams = _in_background({k for k in (*mine.values(), *theirs.values()) if k is not None}, background, p)
    member_keys, nonmember_keys = Counter(mine.values()), set(theirs.values())
    return {
        "prefix_tokens": p,
        "members": len(mine),
        "nonmembers": len(theirs),
        "background_tokens": int(sum(len(x) for x in background)),
        "member_member": [i for i, k in mine.items() if k is not None and member_keys[k] > 1],
        "member_nonmember": [i for i, k in mine.items() if k is not None and k in nonmember_keys],
        "member_background": [i for i, k in mine.items() if k is not None and k in grams],
        "nonmember_background": [i for i, k in theirs.items() if k is not None and k in grams],
        "nonmember_member": [i for i, k in theirs.items() if k is not None and k in member_keys],
    }


def prefix_collisions(data_dir: Any, p: int) -> dict[str, Any]:
    """:func:`collisions_of` of one prepared folder's members, nonmembers and background."""
    prepared = load_prepared(data_dir, verify=False)
    background = prepared.background if prepared.background is not None else []  # memory-mapped documents
    return collisions_of(
        dict(zip(prepared.members["id"], prepared.members["input_ids"])),
        dict(zip(prepared.nonmembers["id"], prepared.nonmembers["input_ids"])),
        background,
        p,
    )


def compute(study: Study) -> dict:
    """``prefix_collisions``: ``{prepared folder: prefix_collisions(...)}`` for each arms' folder, at the eval's first
    positive prefix length; empty without one."""
    out = {}
    for plan in study.done:
        lens = [n for n in getattr(plan.eval_cfg.data, "prefix_lens", []) or [] if isinstance(n, int) and n > 0]
        key = str(plan.data_dir)
        if lens and key not in out and (plan.data_dir / "members").is_dir():  # a real prepared folder
            out[key] = prefix_collisions(plan.data_dir, lens[0])
    return {"prefix_collisions": out}


def _ids(ids: list, shown: int = 5) -> str:
    more = ", ..." if len(ids) > shown else ""
    return f"{len(ids)}" + (f" ({', '.join(map(str, ids[:shown]))}{more})" if ids else "")


def render(results: dict) -> str:
    found = results.get("prefix_collisions") or {}
    if not found:
        return ""
    rows = [
        [
            folder.rsplit("/", 1)[-1],
            str(c["prefix_tokens"]),
            f"{c['members']} / {c['nonmembers']} / {c['background_tokens']:,}",
            _ids(c["member_member"]),
            _ids(c["member_nonmember"]),
            _ids(c["member_background"]),
            _ids(c["nonmember_background"]),
            _ids(c["nonmember_member"]),
        ]
        for folder, c in found.items()
    ]
    return markdown_section(
        "Prefix collisions (are the targets' prefixes their own?)",
        markdown_table(
            [
                "prepared folder",
                "prefix tokens P",
                "members / nonmembers / background tokens",
                "members whose prefix opens another member",
                "... opens a nonmember",
                "... occurs in the background",
                "nonmembers whose prefix occurs in the background",
                "... opens a member",
            ],
            rows,
        ),
        "A target is extracted from its first P tokens. Where they also open another target, a nonmember or occur "
        "in the background, a model's continuation from them is not the target's alone (the other text may be what "
        "it reproduces, or what keeps it from reproducing the target), and a nonmember whose opening is trained "
        "text is not a clean nonmember. 0 everywhere: every prefix is the target's own.",
    )
