"""The parallel layout ``patchkit rehearse`` runs vLLM's engine with (``--tensor-parallel-size``,
``--pipeline-parallel-size``): checked here, before anything is built or run."""

from __future__ import annotations

from dataclasses import dataclass

from patchkit.errors import RefusedError, UsageError


@dataclass(frozen=True)
class Layout:
    """Tensor- and pipeline-parallel sizes (1 and 1: one worker, in the engine's own process).

    Attributes:
        tensor_parallel_size: ranks that shard every layer (the miniature's attention heads are
            made a multiple of it: :func:`patchkit.rehearse.miniature.heads_for`).
        pipeline_parallel_size: stages that split the layers (the draft runs on the last one).
    """

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1

    @property
    def world(self) -> int:
        """Worker processes the engine starts (one per rank)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def for_driver(self) -> dict[str, int]:
        """The engine driver's spec fields (:func:`patchkit.rehearse.engine_driver.layout_kwargs`)."""
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
        }

    def to_json(self) -> dict[str, int]:
        """What ``--json`` records as ``layout``."""
        return {**self.for_driver(), "world": self.world}

    def described(self) -> str:
        """``TP=2``, ``TP=2 x PP=2``, or ``one worker``."""
        parts = [
            f"{name}={size}"
            for name, size in (("TP", self.tensor_parallel_size), ("PP", self.pipeline_parallel_size))
            if size > 1
        ]
        return " x ".join(parts) or "one worker"


def layout(tensor_parallel_size: int, pipeline_parallel_size: int) -> Layout:
    """The layout of the two options, checked.

    Raises:
        UsageError: a size below 1 (exit 2).
    """
    for option, size in (
        ("--tensor-parallel-size", tensor_parallel_size),
        ("--pipeline-parallel-size", pipeline_parallel_size),
    ):
        if size < 1:
            raise UsageError(
                f"{option} {size} is not a rank count",
                f"give the {option} vLLM serves the model with (1 or more; 1 is one worker)",
            )
    return Layout(tensor_parallel_size, pipeline_parallel_size)


def check_gpus(chosen: Layout, free: list[int], need: int, python: str) -> None:
    """Refuse a GPU layout the visible GPUs cannot hold: vLLM's multiprocessing executor puts local
    rank i on visible GPU i, so the first ``chosen.world`` GPUs must each have ``need`` bytes free.

    Args:
        free: free bytes per visible GPU (the device probe's).
    Raises:
        RefusedError: fewer visible GPUs than ranks, or one of the first ``chosen.world`` without
            ``need`` bytes free (exit 3).
    """
    if chosen.world > len(free):
        raise RefusedError(
            f"--device cuda with {chosen.described()} needs {chosen.world} GPUs; {len(free)} visible",
            f"rehearse on a machine with {chosen.world} GPUs (check CUDA_VISIBLE_DEVICES), --python {python}",
        )
    short = [i for i in range(chosen.world) if free[i] < need]
    if short and chosen.world > 1:
        raise RefusedError(
            f"--device cuda with {chosen.described()}: GPU {', '.join(map(str, short))} of the first "
            f"{chosen.world} has less than {need / 1024**3:.0f} GiB free",
            f"free those GPUs or pick others with CUDA_VISIBLE_DEVICES, --python {python}",
        )


__all__ = ["Layout", "check_gpus", "layout"]
