"""Skip AxoNN 0.2.0's communication over grid dimensions of size 1 (on every device; numerics unchanged).

AxoNN's ``Linear.forward`` (``axonn/intra_layer/fully_connected.py``) runs, for *every* layer and micro-batch, even
when a grid dimension has a single rank:

* ``gather_batch_sizes`` twice: a 0-d tensor copied to the GPU, an all-gather, and ``.cpu()`` -- a device-to-host
  synchronisation per call, so the CPU can never queue kernels ahead of the GPU;
* ``GatherBatchScatterChannels``, ``Gatherv``, ``GatherChannelsScatterBatch``, ``Dropv``: one-rank all-to-alls into
  fresh buffers plus ``torch.cat`` copies of the whole activation (and the same again in backward);
* ``AsyncLinear``: an all-reduce of the output (forward) and of the input gradient (backward) over the group.

Over a one-rank group each of these is the identity. On a CPU profile of a 1×1×1 grid they are 1,500 ``alltoall``
and 1,500 ``cat`` calls per step that the native engine does not make (benchmarks/profile_engines.py); on an H200
the engine ran at 0.505× native (issue #14). :func:`enable` makes them the identity when their group has one rank and
leaves every group of two or more ranks on AxoNN's own code, by replacing names in ``fully_connected`` only (never
editing site-packages). Apply it after :func:`goldfish.engines.axonn_compat.enable` (it wraps what it finds).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_originals: list[tuple[Any, str, Any]] = []  # (module, attribute, original value)

# the autograd Functions Linear.forward calls as NAME.apply(x, batch_sizes, group)
_REDISTRIBUTIONS = ("GatherBatchScatterChannels", "Gatherv", "GatherChannelsScatterBatch", "Dropv")


def _one_rank(group: Any) -> bool:
    return dist.get_world_size(group) == 1


class _IdentityOnOneRank:
    """``Function.apply`` of a batch/channel redistribution, the identity when ``group`` has one rank."""

    def __init__(self, function: Any):
        self.function = function

    def apply(self, x: torch.Tensor, batch_sizes: torch.Tensor, group: Any = None) -> torch.Tensor:
        return x if _one_rank(group) else self.function.apply(x, batch_sizes, group)


def _batch_sizes(original: Any) -> Any:
    def gather_batch_sizes(local_batch_size: int, process_group: Any = None) -> torch.Tensor:
        """Row counts of the group's ranks (CPU int64 (G,)); no collective and no device sync for one rank."""
        if _one_rank(process_group):
            return torch.tensor([local_batch_size], dtype=torch.int64)
        return original(local_batch_size, process_group)

    return gather_batch_sizes


class _DistWithoutOneRankAllReduce:
    """``torch.distributed`` as ``fully_connected`` sees it, except that an all-reduce over one rank is skipped
    (returns no work handle; AxoNN only waits on a handle it got)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    @staticmethod
    def all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
        if _one_rank(group):
            return None
        return dist.all_reduce(tensor, op=op, group=group, async_op=async_op)


def enable() -> None:
    """Install the one-rank shortcuts in ``axonn.intra_layer.fully_connected`` (idempotent)."""
    if _originals:
        return
    from axonn.intra_layer import fully_connected as fc

    replacements = {
        "gather_batch_sizes": _batch_sizes(fc.gather_batch_sizes),
        "dist": _DistWithoutOneRankAllReduce(),
        **{name: _IdentityOnOneRank(getattr(fc, name)) for name in _REDISTRIBUTIONS},
    }
    for name, value in replacements.items():
        _originals.append((fc, name, getattr(fc, name)))
        setattr(fc, name, value)


def disable() -> None:
    """Restore AxoNN's own functions."""
    while _originals:
        owner, name, original = _originals.pop()
        setattr(owner, name, original)
