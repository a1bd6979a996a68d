"""Shared test settings: quiet OpenMP spinning on shared CPUs, float64 helpers."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator, fresh for each test."""
    return torch.Generator().manual_seed(1234)
