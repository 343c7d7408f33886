"""Run AxoNN 0.2.0 on a CPU-only PyTorch with the gloo backend (for tests and laptops; GPUs need none of this).

AxoNN 0.2.0 is written for CUDA + NCCL. On a CPU-only torch with gloo it fails in six places, each fixed here by
wrapping or replacing *one* function at run time (never by editing site-packages), and only when CUDA is absent:

1. ``communication.communication_handle.__init__``: ``torch.cuda.device_count()`` is 0 (modulo by zero),
   ``torch.cuda.set_device`` does not exist, ``new_group(backend="nccl")`` has no NCCL. Fix, during the constructor
   only: one "GPU" per node, ``set_device`` is a no-op, groups take the default backend (gloo).
2. ``intra_layer.fully_connected.initialize_params(init_device="cuda")``: the full initial weight is allocated on CUDA.
   Fix: allocate it on CPU.
3. ``intra_layer.asym_communication.gather_batch_sizes``: all-gathers a 0-d CUDA tensor (gloo rejects 0-d tensors).
   Fix: a 1-element CPU tensor.
4. ``asym_communication._allgatherv``, ``_gather_batch_scatter_channels``, ``_gather_channels_scatter_batch``: buffers
   allocated with ``device="cuda"`` (also inside backward), and a list ``all_to_all`` of *unequal* row counts (ranks
   holding different numbers of tokens), which gloo rejects. Fix: ``all_to_all_single`` with split sizes, buffers on
   the input's device.
5. ``intra_layer.communication._reduce_scatter``: output allocated on ``torch.cuda.current_device()``. Fix: on the
   input's device.
6. ``intra_layer.overlap_communication.clear_handles``: calls ``torch.cuda.synchronize()``. Fix: wait on every
   registered async handle (what the synchronize achieved).

Functions that AxoNN imported by name into another module (``from .x import f``) are replaced in both modules.
Numerics are untouched: the replacements only choose devices and buffer shapes, so CPU runs compute exactly what the
CUDA code computes.

``overlap_reduce_scatter``: AxoNN leaves those reduce-scatters in flight and folds their outputs into ``.grad`` when
``optimize_communication`` exits, right after ``clear_handles``; with a ``clear_handles`` that does not wait, the
gradients are silently wrong on gloo (NaN by step 2). Patch 6 waits, but the engine still keeps the option off on CPU
(``AxonnEngine`` passes it only on CUDA): on gloo there is no compute stream to overlap with.

Use: ``enable()`` before ``axonn.axonn.init`` (idempotent, returns whether patches are active); ``disable()`` restores
every original function.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from ..errors import UserError

SUPPORTED_VERSION = "0.2.0"

_originals: list[tuple[Any, str, Any]] = []  # (module, attribute, original value), in patch order


def axonn_version() -> str | None:
    """The installed AxoNN version, or None when it is not installed."""
    try:
        return importlib.metadata.version("axonn")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_installed() -> None:
    """Raise a one-line :class:`UserError` when AxoNN is missing, or is another version than the one this layer was
    written for on a machine that needs the layer; warn about another version on CUDA."""
    version = axonn_version()
    if version is None:
        raise UserError("engine=axonn needs AxoNN: pip install axonn==0.2.0 (the toolkit's 'axonn' extra)")
    if version == SUPPORTED_VERSION:
        return
    if not torch.cuda.is_available():
        raise UserError(
            f"axonn {version} is installed but the CPU/gloo compatibility layer (goldfish/engines/axonn_compat.py) "
            f"was written and tested for axonn {SUPPORTED_VERSION}; install axonn=={SUPPORTED_VERSION} or run on CUDA"
        )
    warnings.warn(
        f"engine=axonn was tested with axonn {SUPPORTED_VERSION}, not the installed {version}; its bias "
        f"refusal and sharded checkpoints assume {SUPPORTED_VERSION}'s layout",
        stacklevel=2,
    )


def needed() -> bool:
    """True when the patches are required: AxoNN's CUDA-only code paths would fail on this machine."""
    return not torch.cuda.is_available()


def is_enabled() -> bool:
    return bool(_originals)


def enable() -> bool:
    """Apply all patches once when CUDA is absent. Returns True when the patches are active."""
    if is_enabled():
        return True
    if not needed():
        return False
    check_installed()
    from axonn import communication as comm_mod
    from axonn.intra_layer import asym_communication as asym
    from axonn.intra_layer import communication as ic
    from axonn.intra_layer import fully_connected as fc
    from axonn.intra_layer import overlap_communication as oc

    _replace(
        comm_mod.communication_handle,
        "__init__",
        _cpu_communication_handle_init(comm_mod.communication_handle.__init__),
    )
    _replace(fc, "initialize_params", _initialize_params_on_cpu(fc.initialize_params))
    for module in (asym, fc):
        _replace(module, "gather_batch_sizes", gather_batch_sizes)
    for name in ("_allgatherv", "_gather_batch_scatter_channels", "_gather_channels_scatter_batch"):
        _replace(asym, name, globals()[name])
    for module in (ic, fc):
        _replace(module, "_reduce_scatter", _reduce_scatter)
    _replace(oc, "clear_handles", _clear_handles)
    return True


def disable() -> None:
    """Restore every function :func:`enable` replaced (newest first)."""
    while _originals:
        owner, name, original = _originals.pop()
        setattr(owner, name, original)


def _replace(owner: Any, name: str, value: Any) -> None:
    _originals.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


@contextlib.contextmanager
def _swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Temporarily set ``owner.name = value`` (used only while AxoNN builds its process groups)."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


# ------------------------------------------------------------------------------------------- 1: process groups


def _cpu_communication_handle_init(original: Callable) -> Callable:
    """Patch 1: AxoNN's constructor with CUDA device selection and NCCL groups mapped to CPU and gloo."""

    def new_group_default_backend(*args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        return plain_new_group(*args, backend=None if backend == "nccl" else backend, **kwargs)

    plain_new_group = dist.new_group

    @functools.wraps(original)
    def init(self: Any, *args: Any, gpus_per_node: int | None = None, **kwargs: Any) -> None:
        if not dist.is_initialized():
            raise RuntimeError("initialise torch.distributed (gloo) before axonn.axonn.init on a CPU-only machine")
        with (
            _swapped(torch.cuda, "set_device", lambda device: None),
            _swapped(dist, "new_group", new_group_default_backend),
        ):
            original(self, *args, gpus_per_node=gpus_per_node or 1, **kwargs)

    return init


# ------------------------------------------------------------------------------------------- 2: initialisation


def _initialize_params_on_cpu(original: Callable) -> Callable:
    """Patch 2: build the full initial weight on CPU instead of ``device="cuda"``."""

    @functools.wraps(original)
    def initialize_params(*args: Any, **kwargs: Any) -> torch.Tensor:
        kwargs["init_device"] = "cpu"
        return original(*args, **kwargs)

    return initialize_params


# ------------------------------------------------------------------------------------------- 3-4: all-to-alls


@torch.no_grad()
def gather_batch_sizes(local_batch_size: int, process_group: Any = None) -> torch.Tensor:
    """Patch 3: every rank's row count in ``process_group`` as a CPU int64 tensor (G,) (gloo needs >= 1-d)."""
    world_size = dist.get_world_size(process_group)
    local = torch.tensor([local_batch_size], dtype=torch.int64)
    gathered = torch.empty(world_size, dtype=torch.int64)
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.10
    all_gather(gathered, local, group=process_group)
    return gathered


def _all_to_all_rows(send: torch.Tensor, send_rows: list[int], recv_rows: list[int], group: Any) -> torch.Tensor:
    """Rows ``send[sum(send_rows[:j]):][:send_rows[j]]`` go to rank j; rank i's rows arrive in rank order.

    gloo's list ``all_to_all`` requires equal sizes everywhere; ``all_to_all_single`` with split sizes does not."""
    recv = torch.empty((sum(recv_rows), *send.shape[1:]), device=send.device, dtype=send.dtype)
    dist.all_to_all_single(
        recv, send.contiguous(), output_split_sizes=recv_rows, input_split_sizes=send_rows, group=group
    )
    return recv


@torch.no_grad()
def _allgatherv(tensor: torch.Tensor, rank_local_batch_sizes: torch.Tensor, process_group: Any = None) -> torch.Tensor:
    """Patch 4a: (m_own, k) on every rank -> (sum_i m_i, k): AxoNN's all-gather of unequal row counts."""
    world_size = dist.get_world_size(process_group)
    send = torch.cat([tensor] * world_size, dim=0)  # (G * m_own, k): the same rows for every rank
    return _all_to_all_rows(
        send, [tensor.shape[0]] * world_size, [int(m) for m in rank_local_batch_sizes], process_group
    )


@torch.no_grad()
def _gather_batch_scatter_channels(
    input_: torch.Tensor, rank_local_batch_sizes: torch.Tensor, process_group: Any = None
) -> torch.Tensor:
    """Patch 4b: (m_own, k) -> (sum_i m_i, k/G): everyone's rows, this rank's slice of the channels."""
    world_size = dist.get_world_size(process_group)
    if input_.shape[-1] % world_size:
        raise RuntimeError(f"last dimension {input_.shape[-1]} is not divisible by the group size {world_size}")
    send = torch.cat(torch.chunk(input_, world_size, dim=-1), dim=0)  # (G * m_own, k/G): channel slice j for rank j
    return _all_to_all_rows(
        send, [input_.shape[0]] * world_size, [int(m) for m in rank_local_batch_sizes], process_group
    )


@torch.no_grad()
def _gather_channels_scatter_batch(
    input_: torch.Tensor, rank_local_batch_sizes: torch.Tensor, process_group: Any = None
) -> torch.Tensor:
    """Patch 4c: (sum_i m_i, k/G) -> (m_own, k), the inverse of 4b."""
    world_size = dist.get_world_size(process_group)
    own_rows = int(rank_local_batch_sizes[dist.get_rank(process_group)])
    recv = _all_to_all_rows(
        input_, [int(m) for m in rank_local_batch_sizes], [own_rows] * world_size, process_group
    )  # (G * m_own, k/G), rank j's channel slice in block j
    return torch.cat(recv.reshape(world_size, own_rows, *recv.shape[1:]).unbind(0), dim=-1)


# ------------------------------------------------------------------------------------------- 5-6: reduce-scatter


def _reduce_scatter(
    input_: torch.Tensor, dim: int, process_group: Any = None, overlap_comm: bool = False
) -> torch.Tensor:
    """Patch 5: AxoNN's dim-0 reduce-scatter (sum) with the output on the input's device."""
    from axonn.intra_layer import overlap_communication

    if dim != 0:
        raise NotImplementedError("AxoNN's reduce-scatter is only implemented for dim=0")
    world_size = dist.get_world_size(process_group)
    if world_size == 1:
        return input_
    if input_.shape[0] % world_size:
        raise RuntimeError(f"dimension 0 ({input_.shape[0]}) is not divisible by the group size {world_size}")
    output = torch.empty((input_.shape[0] // world_size, *input_.shape[1:]), dtype=input_.dtype, device=input_.device)
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed, 2.10
    handle = reduce_scatter(output, input_.contiguous(), group=process_group, async_op=overlap_comm)
    if overlap_comm:
        overlap_communication.register_handle(handle)
    return output


def _clear_handles() -> None:
    """Patch 6: wait for every async collective AxoNN registered (its CUDA code called ``torch.cuda.synchronize``)."""
    from axonn.intra_layer import overlap_communication

    for handle in overlap_communication.handles:
        if handle is not None:
            handle.wait()
    overlap_communication.handles = []
