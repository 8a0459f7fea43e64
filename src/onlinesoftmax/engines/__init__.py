"""The engines that run the public ops: production CUDA (cuda/) and Triton."""
