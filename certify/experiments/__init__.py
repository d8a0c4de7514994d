"""Experiments that train attention layers in this repository (the demo's toy task; see README.md here)."""

from ._toy import ToyTask as ToyTask, toy_batch as toy_batch, train_toy_layer as train_toy_layer
