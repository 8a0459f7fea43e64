"""The seeds' teaching ladder, apart from production: the CPU rungs (cpu.py, NumPy) and the CUDA rungs (cuda.py), one
implementation per rung on purpose (the differences between rungs are the lesson)."""
