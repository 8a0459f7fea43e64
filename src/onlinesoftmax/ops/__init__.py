"""The public PyTorch ops, one module per op family: validation, autograd, custom ops for torch.compile and the
choice of engine (softmax.py), and the drop-in that routes torch's own softmax through them (dropin.py). Each
module's `forward`, `backward` and `resolve` are the layer under the user-facing calls (validated tensors in, the
engine's result out), which the drop-in and the harness use; the package's __init__ exports the user-facing names.
"""
