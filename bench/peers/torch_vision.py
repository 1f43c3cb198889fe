"""PyTorch (2.9 from PyPI, in the bench's own venv) on kiln-bench-vision's cases.

kiln-bench-vision runs this when KILN_BENCH_PYTHON names a Python with
torch, and reports its figures beside kiln's in the same run. One JSON
object per line: {"case": ..., "seconds": ...} for the conv2d cases (forward,
forward + backward; row-major and channels-last) and {"case":
"fashion_mnist_cnn_train_b64", "images_per_second": ...} for the CNN's
training step (the network and AdamW of `kiln train --task fashion-mnist`,
PyTorch's default AdamW implementation), on random data.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def time_best_for(fn, repeats, seconds):
    """The best single call, over at least `repeats` calls adding up to `seconds` (bench_util.h's)."""
    fn()  # warm-up (oneDNN builds its primitives on the first call)
    best, total, i = float("inf"), 0.0, 0
    while i < repeats or total < seconds:
        start = time.perf_counter()
        fn()
        t = time.perf_counter() - start
        best, total, i = min(best, t), total + t, i + 1
    return best


def conv_cases(seconds):
    # (name, N, C, H, W, O, k, stride, padding, groups): kiln-bench-vision's cases.
    cases = [
        ("lenet_64x1x28x28_32c3", 64, 1, 28, 28, 32, 3, 1, 1, 1),
        ("resnet_32x64x56x56_64c3", 32, 64, 56, 56, 64, 3, 1, 1, 1),
        ("resnet_32x128x28x28_128c3", 32, 128, 28, 28, 128, 3, 1, 1, 1),
        ("proj_32x64x56x56_256c1", 32, 64, 56, 56, 256, 1, 1, 0, 1),
        ("depthwise_32x128x28x28_c3", 32, 128, 28, 28, 128, 3, 1, 1, 128),
    ]
    for channels_last in (False, True):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        for name, n, c, h, w, o, k, s, p, g in cases:
            suffix = "_channels_last" if channels_last else ""
            x = torch.randn(n, c, h, w).contiguous(memory_format=fmt)
            wt = (torch.randn(o, c // g, k, k) * 0.1).contiguous(memory_format=fmt)
            b = torch.randn(o)
            with torch.no_grad():
                t = time_best_for(lambda: F.conv2d(x, wt, b, s, p, 1, g), 3, seconds)
            yield {"case": "conv2d_fwd_" + name + suffix, "seconds": t}
            xg, wg, bg = x.clone().requires_grad_(), wt.clone().requires_grad_(), b.clone().requires_grad_()
            grad = torch.randn_like(F.conv2d(x, wt, b, s, p, 1, g))

            def step():
                xg.grad = wg.grad = bg.grad = None
                F.conv2d(xg, wg, bg, s, p, 1, g).backward(grad)

            yield {"case": "conv2d_fwd_bwd_" + name + suffix, "seconds": time_best_for(step, 3, seconds)}


def cnn_images_per_second(batch, steps, channels_last):
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    step(), step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conv-seconds", type=float, default=0.25)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"case": "version", "torch": torch.__version__}), flush=True)
    for row in conv_cases(args.conv_seconds):
        print(json.dumps(row), flush=True)
    for channels_last in (False, True):
        case = "fashion_mnist_cnn_train_b64" + ("_channels_last" if channels_last else "")
        print(json.dumps({"case": case, "images_per_second": cnn_images_per_second(64, args.steps, channels_last)}),
              flush=True)


if __name__ == "__main__":
    main()
