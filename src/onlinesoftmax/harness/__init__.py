"""Inputs, checker, timer, results and plots: what every backend is measured with."""
