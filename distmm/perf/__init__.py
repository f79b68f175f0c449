"""Predicting and measuring cost: the cost model (paper Table III), the planner, calibration of the
machine constants, tuning and timing helpers."""
