"""PyTorch's ``torch.backends`` entry point (``pyproject.toml``): PyTorch calls :func:`load`
when it is imported, so that caijit's operators exist before any code is traced."""

from __future__ import annotations

import warnings


def load() -> None:
    """Import ``caijit.torch``. A failure is a warning, never an error: PyTorch fails its own
    import when an entry point raises."""
    try:
        from . import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 (reported, not raised: see above)
        warnings.warn(
            f"caijit: its PyTorch operators are not registered ({type(e).__name__}: {e}); "
            "`import caijit.torch` shows the error",
            RuntimeWarning,
            stacklevel=2,
        )
